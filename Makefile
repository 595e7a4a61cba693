# Two commands set everything up on a fresh machine:
#   make run   - create .venv, install kvscope, run the main job on built-in defaults
#   make test  - create .venv, install with test extras, run ruff, mypy and pytest
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed

.PHONY: install run test lint typecheck pytest bench clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q -e '.[test]'
	touch $(STAMP)

install: $(STAMP)

run: $(STAMP)
	$(VENV)/bin/kvscope models show deepseek-ai/DeepSeek-V4-Flash --kv-cache-dtype fp8

lint: $(STAMP)
	$(VENV)/bin/ruff check src tests benchmarks
	$(VENV)/bin/ruff format --check src tests benchmarks

typecheck: $(STAMP)
	$(VENV)/bin/mypy

pytest: $(STAMP)
	$(PY) -m pytest -q

test: lint typecheck pytest

clean:
	rm -rf $(VENV) build dist .pytest_cache .mypy_cache .ruff_cache
