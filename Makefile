# One entry point for humans. Every target sets itself up from nothing:
# `make run` and `make test` work on a fresh machine with only python3.

PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed

.PHONY: install system-packages run test lint bench soak fuzz clean kind-schemas data-sums chart

install: system-packages $(STAMP)

# The tests run the real thing: Debian's CNCF distribution registry (docker-registry) for
# resource bundles and GnuPG (gpg) for OpenPGP signatures. Installed only when missing,
# and only where apt-get exists (Debian and derivatives); elsewhere install them yourself.
system-packages:
	@if ! command -v docker-registry >/dev/null 2>&1 || ! command -v gpg >/dev/null 2>&1; then \
		if command -v apt-get >/dev/null 2>&1; then \
			SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
			$$SUDO apt-get update -qq && \
			DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq --no-install-recommends docker-registry gnupg; \
		else \
			echo "docker-registry and gpg are needed by the tests; install them (Debian: apt-get install docker-registry gnupg)" >&2; \
		fi; \
	fi

$(STAMP): setup.cfg pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip setuptools wheel
	$(PY) -m pip install --quiet -e '.[test]'
	# OPA's Go engine for the Rego tests; its wheel declares Python >= 3.12 but
	# runs on 3.11 (the tests prove it), hence --ignore-requires-python.
	$(PY) -m pip install --quiet --ignore-requires-python 'opa-golib-python-bindings==0.4.4'
	touch $@

## run: the service on https://127.0.0.1:8443 and its metrics on http://127.0.0.1:8888/metrics, with throw-away dev certificates (mTLS); RUN_PORT=N and METRICS_PORT=N (0: none) choose other ports
RUN_PORT ?= 8443
METRICS_PORT ?= 8888
# A port in use fails first, before installing or printing anything (the same binds
# provider/service/dev.py makes, which then keeps the ports for the server). The
# advice names only what `make run` takes: RUN_PORT and METRICS_PORT.
define PORT_FREE
import socket, sys
for text, name, what in (("$(RUN_PORT)", "RUN_PORT", "the API"), ("$(METRICS_PORT)", "METRICS_PORT", "metrics")):
    if not text.isdigit() or int(text) > 65535:
        sys.exit(f"make run: {name}={text} is not a TCP port")
    port = int(text)
    if port == 0 and name == "METRICS_PORT":
        continue
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        s.bind(("127.0.0.1", port))
    except OSError as e:
        sys.exit(f"make run: port {port} ({what}) on 127.0.0.1 is not free ({e.strerror}); stop what uses it or pick another: make run {name}={port + 1}")
    finally:
        s.close()
endef
export PORT_FREE

run:
	@$(PYTHON) -c "$$PORT_FREE"
	@$(MAKE) --no-print-directory $(STAMP)
	MANIFEST_PROVIDER_PORT=$(RUN_PORT) MANIFEST_PROVIDER_METRICS_PORT=$(METRICS_PORT) $(PY) -m provider.service.dev

## test: the whole suite (unit, interop, integration, hostile input, short load/fault runs)
test: install
	$(PY) -m pytest

lint: install
	$(VENV)/bin/ruff check provider tests bench tools
	$(VENV)/bin/ruff format --check provider tests bench tools
	$(VENV)/bin/mypy
	$(VENV)/bin/lint-imports --no-cache

## bench: every benchmark and the figures docs/performance.md quotes (about 7 minutes)
bench: install
	$(PY) bench/run_all.py

## soak: mixed traffic at 70% of the service's measured capacity for 10 minutes
soak: install
	$(PY) bench/soak.py --seconds 600

## fuzz: each fuzz target for FUZZ_SECONDS (default 300); crashes are written to /tmp/manifest-provider-fuzz
FUZZ_SECONDS ?= 300
fuzz: install
	$(PY) tests/fuzz/run.py --seconds $(FUZZ_SECONDS)

clean:
	rm -rf $(VENV) .dev build *.egg-info .pytest_cache .mypy_cache .ruff_cache

## kind-schemas: regenerate provider/data/kind_schemas.json from the installed kubernetes client's models
kind-schemas: install
	$(PY) tools/make_kind_schemas.py

## chart: rewrite the Helm chart's generated parts (files/kinds.yaml, the code-derived schema enums, README.md)
chart: install
	$(PY) tools/make_chart.py

## data-sums: relist tests/data/SHA256SUMS after deliberately adding or refreshing a conformance file
data-sums:
	cd tests/data && find . -type f ! -name SHA256SUMS | LC_ALL=C sort | xargs sha256sum > SHA256SUMS
