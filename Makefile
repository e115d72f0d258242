# Parallax: `make run` to start, `make test` for the whole suite, `make bench` for the benchmarks.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: run demo test bench eval install clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[test]'
	touch $(STAMP)

install: $(STAMP)

run: $(STAMP)
	$(BIN)/parallax serve

# Eight live runs of a toy async RL loop (one healthy, one per fault) on the server it starts: open the dashboard.
demo: $(STAMP)
	$(BIN)/parallax demo

# The dashboard's browser tests need Debian's Chromium and its driver; installed when missing (as root).
browser:
	@if [ "$$PARALLAX_TEST_BROWSER" != "skip" ] && ! command -v chromedriver >/dev/null 2>&1; then \
		if [ "$$(id -u)" = "0" ] && command -v apt-get >/dev/null 2>&1; then \
			apt-get update -q && apt-get install -y -q chromium chromium-driver; \
		else \
			echo "browser tests need chromium and chromium-driver: apt-get install -y chromium chromium-driver (or PARALLAX_TEST_BROWSER=skip)"; \
		fi; \
	fi

test: $(STAMP) browser
	$(BIN)/python -m pytest

bench: $(STAMP)
	$(BIN)/python -m bench.run

eval: $(STAMP)
	$(BIN)/python -m alerts.eval

clean:
	rm -rf $(VENV) *.egg-info .pytest_cache
