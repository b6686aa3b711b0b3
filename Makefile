# The two commands a new user needs: `make run` and `make test`.
# Everything else here is what they are built from.

PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
KAFKA  := $(PY) deploy/kafka/kafka.py
# The broker `make kafka-up` and `make run` manage (tests start their own).
KAFKA_DIR  ?= .cache/kafka/local
KAFKA_PORT ?= 9092
# SECURE=1: a SASL_SSL broker (SCRAM users, TLS from keytool, ACLs); it prints
# the client settings (deploy/kafka/README.md). Use another KAFKA_DIR than a plaintext one.
SECURE ?=

.PHONY: run test lint typecheck unit integration deploy-check bench peers venv kafka-jars promtool browser kafka-up kafka-down kafka-status clean

# RUN_ARGS: more options of deploy/run.py (--web-port, --run-dir, --partitions, --workers).
run: venv kafka-jars
	$(PY) deploy/run.py --kafka-dir $(KAFKA_DIR) --kafka-port $(KAFKA_PORT) $(RUN_ARGS)

# Two pytest processes side by side (the shared broker's tests; the CPU-bound
# rest and the tests with brokers of their own), then the tests marked `alone`
# (tests/split_run.py). SPLIT=0: one pytest process.
SPLIT ?= 1
test: venv kafka-jars promtool browser lint typecheck
	$(PY) -m $(if $(filter 0,$(SPLIT)),pytest,tests.split_run) $(PYTEST_ARGS)

# Offline and quick: no broker, and not the install test (it builds the wheel and
# installs it from PyPI into a fresh virtualenv; `make test` runs it).
unit: venv promtool lint typecheck
	$(PY) -m pytest -m "not integration and not install" $(PYTEST_ARGS)

integration: venv kafka-jars
	$(PY) -m pytest -m integration $(PYTEST_ARGS)

# The deploy files against the Kubernetes schemas, hadolint and the Compose
# Specification, and the alerts with promtool (check and unit tests), offline
# (the unit tests run the same checks; docs/deploy.md).
deploy-check: venv promtool
	$(PY) deploy/validate.py

lint: venv
	$(PY) -m ruff check .

typecheck: venv
	$(PY) -m mypy --strict krabka
	$(PY) -m mypy app agents tables examples bench

# Side by side with etcd and ZooKeeper (docs/benchmarks.md): the bench's Python
# clients, the peers' Debian packages (as root), then the run. BENCH_ARGS: the
# figures and options of `python -m bench` (for example `all --trials 30 --json
# bench/results/latest.json --keep`); the latest full run of docs/benchmarks.md took 40 minutes.
BENCH_ARGS ?= all
bench: venv kafka-jars peers $(VENV)/.bench-installed
	$(PY) -m bench $(BENCH_ARGS)

# etcd-server and zookeeper from Debian (best effort, as `browser` is: without
# root or apt-get it says which peer is missing, and the bench skips it loudly).
peers: venv
	$(PY) -m bench.install_peers

$(VENV)/.bench-installed: pyproject.toml $(VENV)/.installed
	$(PY) -m pip install --quiet -e '.[bench]'
	touch $@

venv: $(VENV)/.installed

# The library (editable), the worker's dependencies and the tools; app/, agents/,
# tables/ and bench/ run from this checkout and are not installed.
$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[dev,worker]'
	touch $@

kafka-jars:
	bash deploy/kafka/fetch-jars.sh

# Prometheus's promtool, unpacked from Debian's prometheus package into
# .cache/prometheus/bin without installing it (no root needed; deploy/validate.py).
promtool:
	bash deploy/prometheus/fetch-promtool.sh

# Debian's chromium, for the dashboard test (best effort; see the script).
browser:
	bash deploy/install-browser.sh

kafka-up: venv kafka-jars
	$(KAFKA) up --dir $(KAFKA_DIR) --port $(KAFKA_PORT) $(if $(SECURE),--secure --user worker)

kafka-down: venv
	$(KAFKA) down --dir $(KAFKA_DIR)

kafka-status: venv
	$(KAFKA) status --dir $(KAFKA_DIR)

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache *.egg-info
