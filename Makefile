# Quick start: `make demo` then `make test`. Everything runs inside .venv, created on first use.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-test

.PHONY: venv demo test lint typecheck bench bench-big soak clean

$(STAMP): pyproject.toml
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet -e '.[test]'
	@touch $(STAMP)

venv: $(STAMP)

demo: $(STAMP)
	$(BIN)/sandbox demo

lint: $(STAMP)
	$(BIN)/ruff check sandbox tests bench hooks
	$(BIN)/ruff format --check sandbox tests bench hooks
	$(BIN)/mypy

test: lint $(STAMP)
	$(BIN)/python -m pytest -q

soak: $(STAMP)
	$(BIN)/python -m pytest -q --soak tests/reliability

bench: $(STAMP)
	$(BIN)/python -m bench.run --sizes 1000,10000,100000

bench-big: $(STAMP)
	$(BIN)/python -m bench.run --sizes 1000,10000,100000,300000

clean:
	rm -rf $(VENV) build *.egg-info
