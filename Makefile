# One entry point for humans. Every target sets itself up from nothing:
# `make run` and `make test` work on a fresh machine with only python3.

PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed

.PHONY: install system-packages run test test-fast test-latest lock lock-venv lint bench soak fuzz clean kind-schemas profiles data-sums chart

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

# Every package .venv holds comes from requirements/ (a lock with the sha256 of every file), so a
# new machine installs exactly the versions the tests passed with; `make lock` refreshes it. The
# venv is rebuilt from nothing (--clear) whenever a lock changes, so nothing outside it lingers.
# The project itself goes in last: editable, --no-deps (the lock holds its dependencies) and
# --no-build-isolation (its build backend is the locked setuptools, not an unpinned download).
LOCKS := requirements/build.txt requirements/lock.txt requirements/opa.txt
PIP_LOCKED = -m pip install --quiet --require-hashes --only-binary=:all:

$(STAMP): setup.cfg setup.py pyproject.toml $(LOCKS)
	$(PYTHON) -m venv --clear $(VENV)
	$(PY) $(PIP_LOCKED) -r requirements/build.txt
	$(PY) $(PIP_LOCKED) -r requirements/lock.txt
	# OPA's Go engine for the Rego tests; its wheel declares a newer Python but runs on 3.11
	# (the tests prove it), hence --ignore-requires-python, for this one package (requirements/opa.in).
	$(PY) $(PIP_LOCKED) --ignore-requires-python -r requirements/opa.txt
	$(PY) -m pip install --quiet --no-deps --no-build-isolation -e .
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

## test-fast: the quick subset (no slow or integration tests: no server, CLI process or load run)
test-fast: install
	$(PY) -m pytest -m "not slow and not integration"

## lock: refresh requirements/*.txt to the newest releases setup.cfg's ranges allow (then make test)
# uv pip compile, not pip-tools' pip-compile: requirements/lock.txt's header says why. Resolved
# for CPython 3.11 on Linux (the interpreter CI, the image and `make install` use), with the
# hashes of every file of each release, so a lock made on one machine installs on any Linux.
# LOCK_UPGRADE= (empty) keeps today's pins and only adds or drops what setup.cfg changed.
# opa.txt is resolved for Python 3.14, what opa-golib-python-bindings 0.4.4 declares (requirements/opa.in).
LOCK_VENV    := .venv-lock
LOCK_UPGRADE ?= --upgrade
UV_COMPILE    = $(LOCK_VENV)/bin/uv pip compile --quiet --no-config --generate-hashes \
                --python-platform linux --custom-compile-command "make lock"
define LOCK_WHY
# Locked with `uv pip compile --generate-hashes` (uv is itself pinned in requirements/uv.txt).
# Why uv rather than pip-tools' `pip-compile --generate-hashes --allow-unsafe`: both pick the
# same versions and list the same hashes (every file of each release), but pip-compile cannot
# lock opa-golib-python-bindings, whose wheel declares a newer Python than ours (pip-tools
# always resolves honouring Requires-Python; uv resolves it for the Python it declares, see
# requirements/opa.in), and uv takes a second where pip-compile takes half a minute.
# Installed by pip with --require-hashes (Makefile, Dockerfile): never edit by hand.
endef
export LOCK_WHY

# .venv-lock holds uv as requirements/uv.txt pins it; rebuilt only when that file's content changes
# (make lock rewrites it every time, so its date says nothing).
lock-venv:
	@cmp -s requirements/uv.txt $(LOCK_VENV)/uv.txt || { \
		$(PYTHON) -m venv --clear $(LOCK_VENV) && \
		$(LOCK_VENV)/bin/python $(PIP_LOCKED) -r requirements/uv.txt && \
		cp requirements/uv.txt $(LOCK_VENV)/uv.txt; }

# lock-one OUT, PYTHON VERSION, ARGS: compile into a copy of OUT (so LOCK_UPGRADE= keeps its
# pins; uv rewrites the copy whole), then write LOCK_WHY above uv's own header.
define lock-one
	cp $(1) $(1).new 2>/dev/null || true
	$(UV_COMPILE) --python-version $(2) $(3) -o $(1).new
	{ printf '%s\n' "$$LOCK_WHY"; cat $(1).new; } > $(1)
	rm -f $(1).new
endef

lock: lock-venv
	$(call lock-one,requirements/lock.txt,3.11,$(LOCK_UPGRADE) setup.cfg requirements/build.in --extra test)
	$(call lock-one,requirements/serve.txt,3.11,setup.cfg -c requirements/lock.txt)
	$(call lock-one,requirements/build.txt,3.11,requirements/build.in -c requirements/lock.txt)
	$(call lock-one,requirements/opa.txt,3.14,$(LOCK_UPGRADE) requirements/opa.in)
	$(call lock-one,requirements/uv.txt,3.11,$(LOCK_UPGRADE) requirements/uv.in)

## test-latest: the suite in .venv-latest against the newest releases setup.cfg allows, to meet a new release on purpose
LATEST := .venv-latest
test-latest: system-packages
	$(PYTHON) -m venv --clear $(LATEST)
	$(LATEST)/bin/python -m pip install --quiet --upgrade pip setuptools wheel
	$(LATEST)/bin/python -m pip install --quiet --upgrade --upgrade-strategy eager -e '.[test]'
	$(LATEST)/bin/python -m pip install --quiet --ignore-requires-python -r requirements/opa.in
	$(LATEST)/bin/python -m tests.support.lock || true
	$(LATEST)/bin/python -m pytest --deselect tests/unit/test_lock.py::test_installed_versions_match_the_lock

# The scripts that write committed files (policies/**/make_*.py, tools/*.py) are checked one by
# one: several share a name (make_samples.py), and they are scripts, not a package.
SCRIPTS = $(sort $(wildcard policies/*.py policies/*/*/*.py tools/*.py))

lint: install
	$(VENV)/bin/ruff check provider tests bench tools policies
	$(VENV)/bin/ruff format --check provider tests bench tools policies
	$(VENV)/bin/mypy
	for script in $(SCRIPTS); do $(VENV)/bin/mypy "$$script" || exit 1; done
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
	rm -rf $(VENV) $(LOCK_VENV) $(LATEST) .dev build *.egg-info .pytest_cache .mypy_cache .ruff_cache

## kind-schemas: regenerate provider/data/kind_schemas.json from the installed kubernetes client's models
kind-schemas: install
	$(PY) tools/make_kind_schemas.py

## profiles: regenerate provider/data/profiles.json (what the CLI and the service load) after editing provider/policy/profiles/*.yaml
profiles: install
	$(PY) tools/make_profiles.py

## chart: rewrite the Helm chart's generated parts (files/kinds.yaml, the code-derived schema enums, README.md) and the CRDs
chart: install
	$(PY) tools/make_crds.py
	$(PY) tools/make_chart.py

## data-sums: relist tests/data/SHA256SUMS after deliberately adding or refreshing a conformance file
data-sums:
	cd tests/data && find . -type f ! -name SHA256SUMS | LC_ALL=C sort | xargs sha256sum > SHA256SUMS
