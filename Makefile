# Two commands set everything up on a fresh machine:
#   make run   - create .venv, install kvscope, run the main job on built-in defaults
#   make test  - create .venv, install with test extras and system test tools,
#                run ruff, mypy and pytest
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed
TESTSTAMP := $(VENV)/.installed-test
SYSSTAMP  := $(VENV)/.installed-system

.PHONY: install install-test system-deps run test lint typecheck pytest clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q -e .
	touch $(STAMP)

# torch 2.13.0 is pinned so pip takes the CPU wheel (comm and memtrace tests run on CPU).
$(TESTSTAMP): $(STAMP) pyproject.toml
	$(PY) -m pip install -q -e '.[test]' 'torch==2.13.0'
	touch $(TESTSTAMP)

$(SYSSTAMP): $(STAMP) scripts/install_system_deps.sh scripts/build_llama_server.sh
	PIP="$(PY) -m pip" bash scripts/install_system_deps.sh
	touch $(SYSSTAMP)

install: $(STAMP)
install-test: $(TESTSTAMP) $(SYSSTAMP)

run: $(STAMP)
	$(VENV)/bin/kvscope demo

lint: $(TESTSTAMP)
	$(VENV)/bin/ruff check src tests benchmarks
	$(VENV)/bin/ruff format --check src tests benchmarks

typecheck: $(TESTSTAMP)
	$(VENV)/bin/mypy

pytest: install-test
	$(PY) -m pytest -q

test: lint typecheck pytest

clean:
	rm -rf $(VENV) build dist .pytest_cache .mypy_cache .ruff_cache test-artifacts
