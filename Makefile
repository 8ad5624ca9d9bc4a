# Fleetdeck: `make demo` runs the whole product on a laptop, `make test` runs the test suite.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
PYTEST_ARGS ?=
DEMO_ADDR ?= 127.0.0.1:8000

.PHONY: demo test test-fast lint bench install

$(VENV)/.installed: requirements.txt
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -r requirements.txt
	$(PY) -m pip install -q --no-deps -e .
	touch $@

install: $(VENV)/.installed

demo: install
	mkdir -p var
	$(PY) manage.py migrate --noinput
	$(PY) manage.py load_demo
	$(PY) manage.py rundemo --addr $(DEMO_ADDR)

test: install
	$(VENV)/bin/ruff check .
	$(VENV)/bin/lint-imports
	$(PY) manage.py makemigrations --check --dry-run
	$(VENV)/bin/pytest -n 2 $(PYTEST_ARGS)

test-fast: install
	$(VENV)/bin/pytest -n 2 -m "not slow" $(PYTEST_ARGS)

lint: install
	$(VENV)/bin/ruff check .
	$(VENV)/bin/lint-imports
