# Two commands a newcomer needs: `make run` (the kit's main job) and `make test` (every test tier).
# Each sets itself up from the project's own pinned files, idempotently.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
CHECKOV_VENV := .venv-checkov
UV_VERSION := 0.13.9
UV_FLAGS := --quiet
export RAY_USAGE_STATS_ENABLED := 0
export CHECKPOINT_DISABLE := 1

.PHONY: setup run test test-unit lint typecheck bench clean

setup: $(VENV)/.installed $(CHECKOV_VENV)/.installed node_modules/.installed

# uv installs the exact pins of a lock file in seconds (pip takes minutes for the same set).
define install_lock
	test -x $(1)/bin/python || $(PYTHON) -m venv $(1)
	test -x $(1)/bin/uv || $(1)/bin/pip install -qq --disable-pip-version-check uv==$(UV_VERSION)
	$(1)/bin/uv pip install $(UV_FLAGS) --python $(1)/bin/python -r $(2)
endef

$(VENV)/.installed: requirements.lock pyproject.toml
	$(call install_lock,$(VENV),requirements.lock)
	$(VENV)/bin/uv pip install $(UV_FLAGS) --python $(VENV)/bin/python --no-deps -e .
	touch $@

$(CHECKOV_VENV)/.installed: requirements-checkov.lock
	$(call install_lock,$(CHECKOV_VENV),requirements-checkov.lock)
	touch $@

node_modules/.installed: package.json package-lock.json
	npm ci --no-audit --no-fund --loglevel=error
	touch $@

run: $(VENV)/.installed
	$(VENV)/bin/raytpu demo

lint: $(VENV)/.installed
	$(VENV)/bin/ruff check .

typecheck: $(VENV)/.installed
	$(VENV)/bin/mypy -p raytpu
	$(VENV)/bin/mypy tests bench examples/platform_app/app.py

test: setup lint typecheck
	$(VENV)/bin/pytest

# The fast tier: catalog, planner, specs, config, CLI contract, KubeRay manifests (no CDK synth, no Ray cluster).
test-unit: $(VENV)/.installed
	$(VENV)/bin/pytest -m unit -q

bench: setup
	$(VENV)/bin/python bench/describe.py
	$(VENV)/bin/python bench/synth.py
	$(VENV)/bin/python bench/local_slice.py

clean:
	rm -rf $(VENV) $(CHECKOV_VENV) node_modules cdktf.out .raytpu reports
