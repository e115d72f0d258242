# Parallax: `make run` to start, `make test` for the whole suite, `make bench` for the benchmarks.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: run demo test bench soak eval install clean browser prometheus

# The client first (client/: parallax-client, on no index), then the server that depends on it; both editable.
$(STAMP): pyproject.toml client/pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e ./client
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

# The Prometheus tests run Debian's real prometheus, prometheus-pushgateway and prometheus-alertmanager by hand on
# loopback; installed when missing (as root), with service starts refused by a policy-rc.d for the install: never
# started as services.
PROM_BINARIES := prometheus prometheus-pushgateway prometheus-alertmanager
prometheus:
	@missing=""; for b in $(PROM_BINARIES); do command -v $$b >/dev/null 2>&1 || missing="$$missing $$b"; done; \
	if [ "$$PARALLAX_TEST_PROMETHEUS" != "skip" ] && [ -n "$$missing" ]; then \
		if [ "$$(id -u)" = "0" ] && command -v apt-get >/dev/null 2>&1; then \
			policy=""; if [ ! -e /usr/sbin/policy-rc.d ]; then \
				printf '#!/bin/sh\nexit 101\n' > /usr/sbin/policy-rc.d && chmod +x /usr/sbin/policy-rc.d && policy=1; fi; \
			apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends $$missing; \
			rc=$$?; [ -z "$$policy" ] || rm -f /usr/sbin/policy-rc.d; exit $$rc; \
		else \
			echo "the Prometheus tests need:$$missing: apt-get install -y$$missing (or PARALLAX_TEST_PROMETHEUS=skip)"; \
		fi; \
	fi

# On two pytest-xdist workers, each test module whole on one of them, the slowest modules first (tests/conftest.py);
# TEST_WORKERS=0 runs it all in this one process.
TEST_WORKERS ?= 2
test: $(STAMP) browser prometheus
	$(BIN)/python -m pytest -n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder

bench: $(STAMP)
	$(BIN)/python -m bench.run

# A minute per backend of 16 concurrent writers, then of SIGKILLs mid-ingest; PostgreSQL at PARALLAX_TEST_POSTGRES_URL.
# Then ten minutes of 100 runs through a real Prometheus (4 shards): samples sent vs stored, and the server's RSS.
soak: $(STAMP) prometheus
	$(BIN)/python -m bench.soak
	$(BIN)/python -m bench.prom_soak

eval: $(STAMP)
	$(BIN)/python -m parallax.alerts.eval

clean:
	rm -rf $(VENV) *.egg-info client/src/*.egg-info .pytest_cache
