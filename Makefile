# Parallax: `make run` to start, `make test` for the whole suite, `make bench` for the benchmarks.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: run test bench eval install clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[test]'
	touch $(STAMP)

install: $(STAMP)

run: $(STAMP)
	$(BIN)/parallax serve

test: $(STAMP)
	$(BIN)/python -m pytest

bench: $(STAMP)
	$(BIN)/python -m bench.run

eval: $(STAMP)
	$(BIN)/python -m alerts.eval

clean:
	rm -rf $(VENV) *.egg-info .pytest_cache
