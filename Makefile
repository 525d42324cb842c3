# Two commands on a fresh machine: `make demo` and `make test`. Both build .venv/ first.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed

.PHONY: demo test test-faults test-fast test-prereqs soak lint bench prereqs clean dev

prereqs:
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else 1)' 2>/dev/null || { \
	  echo "error: Python 3.11+ is required (found: $$($(PYTHON) --version 2>&1 || echo none)). Install it or run make PYTHON=/path/to/python3.11"; exit 1; }
	@command -v java >/dev/null 2>&1 || { \
	  echo "error: Java 17+ is required for Spark and 'java' is not on PATH. Install a JDK 17 (for example: apt-get install openjdk-17-jre-headless) or set JAVA_HOME"; exit 1; }
	@v=$$(java -version 2>&1 | sed -n 's/.*version "\([0-9]*\).*/\1/p' | head -1); \
	  [ -n "$$v" ] && [ "$$v" -ge 17 ] || { echo "error: Java 17+ is required for Spark, found Java $${v:-unknown}. Install a JDK 17 or newer"; exit 1; }

$(STAMP): pyproject.toml | prereqs
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[dev]'
	@touch $(STAMP)

demo: prereqs $(STAMP)
	$(PY) -m dagster_databus.demo

# Two pytest-xdist workers: the suite waits on servers, child processes and polls half its time, so two share the
# two cores of the CI machine. tests/conftest.py keeps the tests on the Spark cluster (and Connect server) in one
# worker and those on the built wheel in one, so each starts or is built once a run. WORKERS= runs in one process.
WORKERS ?= -n 2 --dist loadgroup

# The suite but the fault scenarios and the soaks: every folder of tests/ (unit, integration, spark, ui, package;
# README's "Tests and checks"). Its system packages are checked before it starts (.ci/prereqs names the install
# command), and DATABUS_REQUIRE_ALL=1 turns a test's skip for a missing tool into a failure, so a passing
# `make test` (and CI, which runs it) has run the UI test, not skipped it.
test: prereqs test-prereqs $(STAMP)
	DATABUS_REQUIRE_ALL=1 $(PY) -m pytest -q $(WORKERS) -m 'not fault' --durations=25 tests

# The fault scenarios (marked `fault`: tests/faults/ by its conftest.py, and the kills and lost servers elsewhere
# by their own mark), long runs of their own, which CI runs after `make test`; the clock-jump test's libfaketime
# is required as make test requires Chromium.
test-faults: prereqs test-prereqs $(STAMP)
	DATABUS_REQUIRE_ALL=1 $(PY) -m pytest -q $(WORKERS) -m fault --durations=10 tests

# The soaks (tests/soak/): the rolling verification over 200 runs of a mixed workload on each source kind
# (SQLite, MariaDB, PostgreSQL) must find no difference. Long, so no part of `make test` or CI: tests/conftest.py
# collects tests/soak/ only when it is named, as here. DATABUS_SOAK_RUNS=n sets the runs per kind.
soak: prereqs test-prereqs $(STAMP)
	DATABUS_REQUIRE_ALL=1 $(PY) -m pytest -q -s tests/soak --durations=0

test-prereqs:
	@.ci/prereqs check

# tests/unit/: no server (MariaDB, PostgreSQL, S3, dagster dev, a browser), no Spark, no built wheel, no fault
# scenario (its conftest.py fails the collection of a test that needs one); what plain `pytest` runs.
test-fast: $(STAMP)
	$(PY) -m pytest -q tests/unit

# Duplicate code: a run of DUP_LINES similar lines (imports, signatures, docstrings and comments aside)
# written twice in dagster_databus/ fails. At 3 lines it flags boilerplate (a constructor's attribute
# assignments); at 4 each finding was logic or a record written twice.
DUP_LINES := 4
lint: $(STAMP)
	$(VENV)/bin/ruff check dagster_databus jobs tests benchmarks
	$(VENV)/bin/mypy dagster_databus
	$(VENV)/bin/lint-imports --no-logo
	$(VENV)/bin/pylint --disable=all --enable=duplicate-code --min-similarity-lines=$(DUP_LINES) --ignore-imports=yes \
	  --ignore-signatures=yes --ignore-docstrings=yes --ignore-comments=yes --score=no dagster_databus
	$(PY) -m pytest -q -p no:cacheprovider tests/unit/test_oracle_grammar.py

bench: prereqs $(STAMP)
	$(PY) -m benchmarks.run_all

# make dev CONNECT=1: the UI's runs are clients of a Spark Connect server started for them (stopped on exit),
# through a copy of the config (.demo/connect.yaml) whose spark.remote names it.
dev: prereqs $(STAMP)
	mkdir -p $${DAGSTER_HOME:-$(CURDIR)/.demo/dagster_home}
ifeq ($(CONNECT),1)
	DAGSTER_HOME=$${DAGSTER_HOME:-$(CURDIR)/.demo/dagster_home} $(PY) -m dagster_databus.spark.connect_server run \
	  --config $${DATABUS_CONFIG:-config/demo.yaml} --out .demo/connect.yaml -- $(VENV)/bin/dagster dev -w workspace.yaml
else
	DAGSTER_HOME=$${DAGSTER_HOME:-$(CURDIR)/.demo/dagster_home} $(VENV)/bin/dagster dev -w workspace.yaml
endif

clean:
	rm -rf $(VENV) .demo .pytest_cache
