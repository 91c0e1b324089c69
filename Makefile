# Two commands a newcomer needs: `make run` (the kit's main job) and `make test` (every test tier).
# Each sets itself up from the project's own pinned files, idempotently.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
CHECKOV_VENV := .venv-checkov
PIP_FLAGS := --quiet --disable-pip-version-check
export RAY_USAGE_STATS_ENABLED := 0

.PHONY: setup run test lint typecheck bench clean

setup: $(VENV)/.installed $(CHECKOV_VENV)/.installed node_modules/.installed

$(VENV)/.installed: requirements.lock pyproject.toml
	test -x $(VENV)/bin/python || $(PYTHON) -m venv $(VENV)
	$(VENV)/bin/pip install $(PIP_FLAGS) -r requirements.lock
	$(VENV)/bin/pip install $(PIP_FLAGS) --no-deps -e .
	touch $@

$(CHECKOV_VENV)/.installed: requirements-checkov.lock
	test -x $(CHECKOV_VENV)/bin/python || $(PYTHON) -m venv $(CHECKOV_VENV)
	$(CHECKOV_VENV)/bin/pip install $(PIP_FLAGS) -r requirements-checkov.lock
	touch $@

node_modules/.installed: package.json package-lock.json
	npm ci --no-audit --no-fund --loglevel=error
	touch $@

run: setup
	$(VENV)/bin/raytpu demo

lint: $(VENV)/.installed
	$(VENV)/bin/ruff check .

typecheck: $(VENV)/.installed
	$(VENV)/bin/mypy -p raytpu

test: setup lint typecheck
	$(VENV)/bin/pytest

bench: setup
	$(VENV)/bin/python bench/describe.py
	$(VENV)/bin/python bench/synth.py
	$(VENV)/bin/python bench/local_slice.py

clean:
	rm -rf $(VENV) $(CHECKOV_VENV) node_modules cdktf.out .raytpu reports
