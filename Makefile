# Two commands for a newcomer: `make run` and `make test`.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: install run test test-plain test-compiled compile lint typecheck unit services clean bench

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[dev]'
	touch $(STAMP)

install: $(STAMP)

## Install, apply migrations to the embedded SQLite default and serve on :8080.
run: $(STAMP)
	$(BIN)/gateway migrate
	$(BIN)/gateway serve

COMPILED := build/compiled

## Install, then lint, type-check and run every test (unit, integration, end-to-end).
test: test-plain

test-plain: $(STAMP)
	$(BIN)/ruff check gateway tests migrations bench setup.py
	$(BIN)/ruff format --check gateway tests migrations bench setup.py
	$(BIN)/mypy
	$(BIN)/pytest

## The compiled build: the request's hot path (setup.py's HOT_PATH) compiled by mypyc, the rest of
## the package as it is, in build/compiled (docs/performance.md, "The compiled build").
compile: $(STAMP)
	rm -rf $(COMPILED) build/mypyc
	GATEWAY_COMPILE=1 $(BIN)/python setup.py -q build --build-base build/mypyc --build-lib $(COMPILED) >/dev/null
	ln -s ../../migrations $(COMPILED)/migrations  # beside the package, as in a checkout

## Every test again, with the compiled build first on the module path of the tests and of every
## process they start (PYTHONSAFEPATH: not the checkout's own sources). Not part of `make test`
## yet: docs/performance.md, "The compiled build".
test-compiled: compile
	GATEWAY_EXPECT_COMPILED=1 PYTHONSAFEPATH=1 PYTHONPATH=$(COMPILED) $(BIN)/python -m pytest \
		-p no:cacheprovider --import-mode=append -o pythonpath="$(COMPILED) ."

lint: $(STAMP)
	$(BIN)/ruff check gateway tests migrations bench
	$(BIN)/ruff format --check gateway tests migrations bench

typecheck: $(STAMP)
	$(BIN)/mypy

## The benchmark: nginx upstream, gateway + PostgreSQL + Redis, wrk (see docs/performance.md).
bench: compile
	bench/run --compiled $(COMPILED) $(BENCH_ARGS)

clean:
	rm -rf $(VENV) data .pytest_cache .mypy_cache .ruff_cache
