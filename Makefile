# Two commands on a fresh machine: `make demo` (main job on bundled demo data) and `make test`.
PYTHON ?= $(shell for p in python3.12 $$HOME/.pyenv/versions/3.12*/bin/python3 python3.13 $$HOME/.pyenv/versions/3.13*/bin/python3 python3; do \
	$$p -c 'import sys; assert sys.version_info >= (3, 12)' 2>/dev/null && echo $$p && break; done)
VENV := .venv
BIN := $(VENV)/bin

.PHONY: venv demo test test-slow lint typecheck

$(BIN)/evtsync: pyproject.toml setup.py
	@test -n "$(PYTHON)" || { echo "Python >= 3.12 not found: set PYTHON=/path/to/python3.12"; exit 1; }
	@echo "make: creating $(VENV) with $(PYTHON) and installing evtsync into it (pip -q)"
	@$(PYTHON) -m venv $(VENV)
	@$(BIN)/python -m pip install -q --disable-pip-version-check --upgrade pip
	@$(BIN)/python -m pip install -q --disable-pip-version-check -e '.[dev]'
	@touch $(BIN)/evtsync

venv: $(BIN)/evtsync

demo: venv
	$(BIN)/evtsync run --out fits/demo

test: venv
	$(BIN)/python -m pytest

# the tests the default run leaves out (marked slow: the wheel install, the full demo, statistical
# studies): ~25–35 minutes in one process on 2 cores; .ci/run-slow, for a nightly or pre-release job
test-slow: venv
	$(BIN)/python -m pytest -m slow -n 0

lint: venv
	$(BIN)/ruff check .

typecheck: venv
	$(BIN)/mypy evtsync
