# One entry point for humans. Every target sets itself up from nothing:
# `make run` and `make test` work on a fresh machine with only python3.

PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed

.PHONY: install run test lint bench soak fuzz clean

install: $(STAMP)

$(STAMP): setup.cfg pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip setuptools wheel
	$(PY) -m pip install --quiet -e '.[test]'
	# OPA's Go engine for the Rego tests; its wheel declares Python >= 3.12 but
	# runs on 3.11 (the tests prove it), hence --ignore-requires-python.
	$(PY) -m pip install --quiet --ignore-requires-python 'opa-golib-python-bindings==0.4.4'
	touch $@

## run: the service on https://127.0.0.1:8443 with throw-away dev certificates (mTLS)
run: install
	$(PY) -m provider.dev

## test: the whole suite (unit, interop, integration, hostile input, short load/fault runs)
test: install
	$(PY) -m pytest

lint: install
	$(VENV)/bin/ruff check provider tests bench
	$(VENV)/bin/mypy

## bench: benchmarks; results go to docs/performance.md
bench: install
	$(PY) bench/verify.py

clean:
	rm -rf $(VENV) .dev build *.egg-info .pytest_cache .mypy_cache .ruff_cache
