# Two commands for a newcomer: `make run` and `make test`.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
# `make run` installs the package alone (no test or benchmark tools)
RUN_STAMP := $(VENV)/.installed-run

.PHONY: install run test lint typecheck clean bench

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[dev]'
	touch $(STAMP)

$(RUN_STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e .
	touch $(RUN_STAMP)

install: $(STAMP)

## Install the package alone, apply migrations to the embedded SQLite default and serve on :8080.
run: $(RUN_STAMP)
	$(BIN)/gateway migrate
	$(BIN)/gateway serve

## Install, then lint, type-check and run every test (unit, integration, end-to-end, browser).
test: lint typecheck browser hosts stores
	$(BIN)/pytest

## PostgreSQL and Redis for the tests, installed when missing: the test session starts servers of its
## own from these binaries (temporary folders, free ports), never touching the machine's own.
.PHONY: stores
stores:
	@if ! ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || ! command -v redis-server >/dev/null; then \
	  SUDO=$$([ "$$(id -u)" = 0 ] || echo sudo); \
	  $$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq postgresql redis-server; \
	fi

## Debian's Chromium for tests/browser (Playwright drives it), installed when it is missing.
CHROMIUM ?= /usr/bin/chromium
.PHONY: browser
browser:
	@if [ ! -x $(CHROMIUM) ]; then \
	  SUDO=$$([ "$$(id -u)" = 0 ] || echo sudo); \
	  $$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq chromium; \
	fi

## Debian's nginx for tests/hosts (the load balancer in front of the test's hosts), installed when
## it is missing; the package's own service is stopped, as the tests start nginx themselves.
.PHONY: hosts
hosts:
	@if ! command -v nginx >/dev/null && [ ! -x /usr/sbin/nginx ]; then \
	  SUDO=$$([ "$$(id -u)" = 0 ] || echo sudo); \
	  $$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq nginx-light; \
	  ($$SUDO systemctl disable --now nginx || $$SUDO service nginx stop) >/dev/null 2>&1 || true; \
	fi

lint: $(STAMP)
	$(BIN)/ruff check gateway tests migrations bench
	$(BIN)/ruff format --check gateway tests migrations bench

typecheck: $(STAMP)
	$(BIN)/mypy

## The benchmark: nginx upstream, gateway + PostgreSQL + Redis, wrk (see docs/performance.md).
bench: $(STAMP)
	bench/run $(BENCH_ARGS)

## The scheduling benchmark against the simulated vLLM (bench/scheduling): `SCENARIOS="caps seed"` for some.
.PHONY: bench-scheduling
bench-scheduling: $(STAMP)
	$(BIN)/python -m bench.scheduling $(SCENARIOS)

## The usage reports at 10,000,000 records in month partitions (about 13 minutes; docs/usage-storage.md).
.PHONY: bench-usage-10m
bench-usage-10m: $(STAMP)
	$(BIN)/python -m bench.usage_scale --ten-million $(BENCH_ARGS)

## The batch jobs benchmark (bench/batch_jobs): SIGKILLs mid-job, throughput, prefix cache; `SCENARIOS=crash` for one.
.PHONY: bench-jobs
bench-jobs: $(STAMP)
	$(BIN)/python -m bench.batch_jobs $(SCENARIOS)

## Batch quotes against reality on the simulated vLLM (bench/quotes): three job shapes quoted, then run.
.PHONY: bench-quotes
bench-quotes: $(STAMP)
	$(BIN)/python -m bench.quotes $(SCENARIOS)

## Usage reports at 1,000,000 records (bench/usage_scale): report queries, console pages, the writer's rate.
.PHONY: bench-usage
bench-usage: $(STAMP)
	$(BIN)/python -m bench.usage_scale $(BENCH_ARGS)

clean:
	rm -rf $(VENV) data build .pytest_cache .mypy_cache .ruff_cache
