# Sourced by the build scripts: llama.cpp CMake flags for this CPU.
#
# A `-march=native` build of llama.cpp segfaults in quantized matmul on some AVX-512 CPUs
# that also report AMX. On x86-64 we therefore pass explicit ISA flags read from
# /proc/cpuinfo (GGML_NATIVE=OFF); elsewhere the native build is kept. The RPC backend is
# always on (duo rpc-server, --rpc).
cpu_flags() {
  local args="-DGGML_RPC=ON"
  if [[ "$(uname -m)" == "x86_64" && -r /proc/cpuinfo ]]; then
    local f
    f=" $(grep -m1 '^flags' /proc/cpuinfo | cut -d: -f2) "
    has() { [[ "$f" == *" $1 "* ]]; }
    onoff() { if has "$1"; then echo ON; else echo OFF; fi; }
    args+=" -DGGML_NATIVE=OFF -DGGML_AVX=$(onoff avx) -DGGML_AVX2=$(onoff avx2)"
    args+=" -DGGML_FMA=$(onoff fma) -DGGML_F16C=$(onoff f16c)"
    args+=" -DGGML_AVX512=$(onoff avx512f) -DGGML_AVX512_VNNI=$(onoff avx512_vnni)"
    args+=" -DGGML_AVX512_BF16=$(onoff avx512_bf16) -DGGML_AVX512_VBMI=$(onoff avx512vbmi)"
    args+=" -DGGML_AVX_VNNI=$(onoff avx_vnni)"
  fi
  echo "$args"
}

