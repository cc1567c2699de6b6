# sloscope: `make test` bootstraps everything it needs (virtualenv, pinned packages) and runs all checks.
SHELL := /bin/bash
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-$(shell cat pyproject.toml constraints.txt | sha1sum | cut -c1-12)

.PHONY: all test lint typecheck unit demo bench clean

all: test

$(STAMP): pyproject.toml constraints.txt
	@$(PYTHON) -c 'import sys; sys.exit(sys.version_info < (3, 11))' || { echo "sloscope needs Python >= 3.11 (found $$($(PYTHON) --version))"; exit 1; }
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --disable-pip-version-check -c constraints.txt -e '.[test,dev]'
	rm -f $(VENV)/.installed-*
	touch $(STAMP)

venv: $(STAMP)

## test: lint, type-check and run every test suite (unit, integration against real servers).
test: lint typecheck
	$(BIN)/pytest

lint: $(STAMP)
	$(BIN)/ruff check exporter tests bench
	$(BIN)/ruff format --check exporter tests bench

typecheck: $(STAMP)
	$(BIN)/mypy

unit: $(STAMP)
	$(BIN)/pytest tests/unit

## demo: a simulated fleet (pods, latency predictor, EPP-like router) against a real sloscope, about two minutes.
## DEMO_ARGS passes options, e.g. make demo DEMO_ARGS="--duration 300 --with-prometheus"; Ctrl-C stops it.
demo: $(STAMP)
	$(BIN)/sloscope demo $(DEMO_ARGS)

## bench: throughput of the ingest path and of the exposition parser; ratios are measured in one run each.
bench: $(STAMP)
	$(BIN)/python bench/run.py
	$(BIN)/python bench/parser.py

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache
