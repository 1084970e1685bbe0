"""ggml's RPC server on this machine's CPU (`duo rpc-server`), through ctypes: what
another machine's llama.cpp puts layers on (duo.llama.rpc is the client's side)."""

from __future__ import annotations

import ctypes
import importlib.util
import ipaddress
import threading
from collections.abc import Callable
from pathlib import Path

from duo.errors import UsageError
from duo.llama.rpc import CPU_DEVICE, GGML_LIB, rpc_proc, typed_ggml
from duo.net import check_port

_START_SERVER = ctypes.CFUNCTYPE(
    None,
    ctypes.c_char_p,  # endpoint "HOST:PORT"
    ctypes.c_char_p,  # cache_dir or NULL
    ctypes.c_size_t,  # n_threads
    ctypes.c_size_t,  # n_devices
    ctypes.POINTER(ctypes.c_void_p),  # ggml_backend_dev_t devices[n_devices]
)


def serve(
    host: str,
    port: int,
    threads: int,
    cache_dir: Path | None = None,
    on_ready: Callable[[str], object] | None = None,
) -> None:
    """Serve this machine's CPU to llama.cpp RPC clients on host:port; blocks for good.

    `on_ready(description of the device)` runs once the arguments are checked. Ctrl-C
    raises KeyboardInterrupt in the calling thread, but ggml's server thread cannot be
    stopped: end the process (os._exit) afterwards.
    """
    try:
        ipaddress.IPv4Address(host)
    except ValueError:
        raise UsageError(
            f"--host {host}: llama.cpp's RPC server binds an IPv4 address "
            "(such as 127.0.0.1 or 0.0.0.0), not a name"
        ) from None
    check_port(host, port)
    cache = None
    if cache_dir is not None:
        try:
            cache_dir.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise UsageError(f"--cache {cache_dir}: {e.strerror}") from None
        cache = str(cache_dir).encode()
    ggml = _server_ggml()
    cpu = ggml.ggml_backend_dev_by_type(CPU_DEVICE)
    if not cpu:
        raise UsageError("llama.cpp found no CPU device to serve")
    start = _START_SERVER(rpc_proc(ggml, "ggml_backend_rpc_start_server"))
    if on_ready is not None:
        on_ready(_describe(ggml, cpu))
    devices = (ctypes.c_void_p * 1)(cpu)
    endpoint = f"{host}:{port}".encode()
    server = threading.Thread(
        target=start, args=(endpoint, cache, threads, 1, devices), name="rpc-server", daemon=True
    )
    server.start()  # in a thread: ggml's accept loop never returns, and ignores Ctrl-C
    while server.is_alive():
        server.join(0.5)
    raise UsageError(f"the RPC server on {host}:{port} stopped (see llama.cpp's message above)")


def _describe(ggml: ctypes.CDLL, cpu: int) -> str:
    """A device as 'CPU (AMD EPYC, 24105 MiB)'."""
    free, total = ctypes.c_size_t(), ctypes.c_size_t()
    ggml.ggml_backend_dev_memory(cpu, ctypes.byref(free), ctypes.byref(total))
    name = ggml.ggml_backend_dev_name(cpu).decode()
    desc = ggml.ggml_backend_dev_description(cpu).decode()
    return f"{name} ({desc}, {total.value // 2**20} MiB)"


def _server_ggml() -> ctypes.CDLL:
    """libggml.so.0 from the installed llama_cpp package (a server needs no libllama)."""
    spec = importlib.util.find_spec("llama_cpp")
    if spec is None or not spec.submodule_search_locations:
        raise UsageError("llama-cpp-python is not installed")
    path = Path(next(iter(spec.submodule_search_locations))) / "lib" / GGML_LIB
    try:
        return typed_ggml(ctypes.CDLL(str(path)))
    except OSError as e:
        raise UsageError(f"cannot load the ggml library {path}: {e}") from None
