# Two commands set everything up on a fresh machine:
#   make run   - create .venv, install kvscope, run the main job on built-in defaults
#   make test  - create .venv, install with test extras and system test tools,
#                run ruff, mypy and pytest
# and one for the torch-backed commands (comm, memtrace record) on a box without a GPU:
#   make install-torch-cpu - a CPU-only torch (scripts/install_torch_cpu.sh: it refuses the
#                CUDA build pip's default index serves on Linux x86_64; pass PyTorch's
#                CPU-only wheel index as TORCH_INDEX_URL=... where pip is not set up with it)
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed
TESTSTAMP := $(VENV)/.installed-test
SYSSTAMP  := $(VENV)/.installed-system
ORACLESTAMP := $(VENV)/.installed-vllm-oracle
TORCHSTAMP := $(VENV)/.installed-torch-cpu
# The torch the tests run on (comm, memtrace): its CPU build, installed first, so that the
# [torch] extra below finds it there and pip never reaches for the CUDA build.
TORCH_VERSION   ?= 2.13.0
TORCH_INDEX_URL ?=

.PHONY: install install-test install-torch-cpu install-vllm-oracle system-deps run test lint typecheck pytest clean

# [nvml]: nvidia-ml-py, pure Python and small, so `kvscope watch --nvml` works after
# `make run` (on a GPU-less box it says "NVML not available: ..." and goes on).
$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q -e '.[nvml]'
	touch $(STAMP)

$(TORCHSTAMP): $(STAMP) scripts/install_torch_cpu.sh
	PY="$(PY)" TORCH_VERSION="$(TORCH_VERSION)" TORCH_INDEX_URL="$(TORCH_INDEX_URL)" \
		bash scripts/install_torch_cpu.sh
	touch $(TORCHSTAMP)

$(TESTSTAMP): $(STAMP) $(TORCHSTAMP) pyproject.toml
	$(PY) -m pip install -q -e '.[test,torch]'
	touch $(TESTSTAMP)

$(SYSSTAMP): $(STAMP) scripts/install_system_deps.sh scripts/build_llama_server.sh
	PIP="$(PY) -m pip" bash scripts/install_system_deps.sh
	touch $(SYSSTAMP)

# The vLLM 0.33.0 oracle (its own venv, cached under ~/.cache/kvscope, ~3 min the first
# time): the differential tests drive vLLM's real scheduler and KV manager in it.
$(ORACLESTAMP): $(STAMP) scripts/build_vllm_oracle.sh scripts/install_torch_cpu.sh
	PYTHON="$(PYTHON)" TORCH_INDEX_URL="$(TORCH_INDEX_URL)" bash scripts/build_vllm_oracle.sh
	touch $(ORACLESTAMP)

install: $(STAMP)
install-test: $(TESTSTAMP) $(SYSSTAMP) $(ORACLESTAMP)
install-torch-cpu: $(TORCHSTAMP)
install-vllm-oracle: $(ORACLESTAMP)

run: $(STAMP)
	$(VENV)/bin/kvscope demo

lint: $(TESTSTAMP)
	$(VENV)/bin/ruff check src tests benchmarks scripts
	$(VENV)/bin/ruff format --check src tests benchmarks scripts

typecheck: $(TESTSTAMP)
	$(VENV)/bin/mypy

pytest: install-test
	$(PY) -m pytest -q

test: lint typecheck pytest

clean:
	rm -rf $(VENV) build dist .pytest_cache .mypy_cache .ruff_cache test-artifacts
