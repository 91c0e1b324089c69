# Two commands a newcomer needs: `make run` (the kit's main job) and `make test` (every test tier).
# Each sets itself up from the project's own pinned files, idempotently.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
CHECKOV_VENV := .venv-checkov
SERVE_VENV := .venv-serve
TORCH_WHEELS ?= /opt/wheels
# torch==2.13.0+cpu (vLLM's CPU build needs it) is not on PyPI: these machines keep it in $(TORCH_WHEELS);
# elsewhere: make TORCH_WHEELS=https://download.pytorch.org/whl/cpu/torch/
UV_VERSION := 0.13.9
# --compile-bytecode: pip's default, which uv leaves out. Every Ray worker, pytest worker and CLI process then loads
# ray/jax/vllm from .pyc (import ray, jax and the CLI: 1.3 s instead of 4.4 where PYTHONDONTWRITEBYTECODE is set).
UV_FLAGS := --quiet --compile-bytecode
export RAY_USAGE_STATS_ENABLED := 0
# A crash in native code (Ray's, gRPC's or JAX's threads) prints every thread's Python stack, at exit too.
export PYTHONFAULTHANDLER := 1
export CHECKPOINT_DISABLE := 1
# Bytecode caches are written (to the gitignored __pycache__/) even where the shell sets PYTHONDONTWRITEBYTECODE:
# without them every CLI process, Ray worker and pytest worker compiles the kit's modules again (the unit tier: 49 s
# of CPU with them, 72 s without).
unexport PYTHONDONTWRITEBYTECODE

.PHONY: setup chromium run serve data test test-synth-beside-slice test-unit test-heavy test-serve lint typecheck bench bench-serve clean

setup: $(VENV)/.installed $(CHECKOV_VENV)/.installed node_modules/.installed chromium

# Headless Chromium (Debian's package) for the report page's browser test (heavy tier, tests/test_report_browser.py):
# installed when absent and apt-get can (root); otherwise that test skips, saying why.
chromium:
	@command -v chromium >/dev/null || { if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
		{ apt-get update -qq >/dev/null; apt-get install -y -qq chromium >/dev/null; } || echo "chromium: apt-get install failed; the browser test skips"; \
		else echo "chromium: not installed (needs root and apt-get); the report page's browser test skips"; fi; }

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

# The serve tier's own environment: Ray Serve LLM on vLLM's CPU build (a complete lock: --no-deps keeps out
# the CUDA vllm that ray[llm] declares; see the lock's header).
$(SERVE_VENV)/.installed: requirements-serve.lock pyproject.toml
	test -x $(SERVE_VENV)/bin/python || $(PYTHON) -m venv $(SERVE_VENV)
	test -x $(SERVE_VENV)/bin/uv || $(SERVE_VENV)/bin/pip install -qq --disable-pip-version-check uv==$(UV_VERSION)
	$(SERVE_VENV)/bin/uv pip install $(UV_FLAGS) --python $(SERVE_VENV)/bin/python --no-deps \
		--find-links $(TORCH_WHEELS) -r requirements-serve.lock
	$(SERVE_VENV)/bin/uv pip install $(UV_FLAGS) --python $(SERVE_VENV)/bin/python --no-deps -e .
	touch $@

$(CHECKOV_VENV)/.installed: requirements-checkov.lock
	$(call install_lock,$(CHECKOV_VENV),requirements-checkov.lock)
	touch $@

node_modules/.installed: package.json package-lock.json
	npm ci --no-audit --no-fund --loglevel=error
	touch $@

run: $(VENV)/.installed
	$(VENV)/bin/raytpu demo

# Serving on the emulated slice: deploy the example's serving workload, ask it with the openai client, tear down.
serve: $(SERVE_VENV)/.installed
	$(SERVE_VENV)/bin/raytpu demo --serve

# Ray Data on emulated slices: batch inference over 64 prompts (vLLM's CPU build) and training from a Parquet dataset.
data: $(VENV)/.installed $(SERVE_VENV)/.installed
	$(VENV)/bin/raytpu demo --data --serve-python $(SERVE_VENV)/bin/python

lint: $(VENV)/.installed
	$(VENV)/bin/ruff check .

# mypy through raytpu.tools.typecheck: it names stacks/, modules/ and workloads/ to mypy as the raytpu.* packages
# they install as (pyproject's package-dir), which mypy cannot learn from the editable install's import hook.
typecheck: $(VENV)/.installed
	$(VENV)/bin/python -m raytpu.tools.typecheck -p raytpu
	$(VENV)/bin/python -m raytpu.tools.typecheck tests bench examples/platform_app/app.py
	$(VENV)/bin/mypy -p lm -p tools

# The unit tier runs one pytest worker per core plus one, at most 8: a third worker on 2 cores computes while the
# others wait on subprocesses and 1 s timeouts (2 cores, 2026-12-08, all of the unit tier, another agent's Ray tests
# keeping the load at 4-9: -n 2 152 s, -n 3 146 s, -n 4 183 s).
# The synth tier (CDK synth on node: computes) and then the heavy tier (real JAX on CPU, uv, wheels, subprocess CLIs,
# a browser: computes) run beside the slice tier (Ray clusters: wait as much as they compute), one after the other in
# one background job, their output in reports/synth-tier.log and reports/heavy-tier.log, shown once all are done.
# The slice tier runs two files at once (xdist's loadfile: a file's tests and its own slice stay on one worker; the
# longest files first, tests/conftest.py LONGEST_FIRST): a cluster's start backs off to one host at a time when hosts
# start slowly (raytpu/local/slice/startup.py). 2 cores, 2026-12-08, both under the same outside load: 31:44 against
# 42:16 one file at a time. (xdist's loadgroup cannot keep the slice tests together under pytest 9: it renames test
# ids through an attribute pytest 9 no longer reads.)
SLICE_PARALLEL := --numprocesses=2 --dist=loadfile
HEAVY_TIER = $(VENV)/bin/pytest -m heavy -q -p no:cacheprovider --durations=5
PYTEST_PARALLEL := --numprocesses=$(shell n=$$(nproc 2>/dev/null || echo 2); echo $$((n + 1 > 8 ? 8 : n + 1)))

test: setup $(SERVE_VENV)/.installed lint typecheck
	$(VENV)/bin/pytest -m unit -q $(PYTEST_PARALLEL)
	$(MAKE) --no-print-directory test-synth-beside-slice
	$(SERVE_VENV)/bin/pytest -m serve --durations=5

test-synth-beside-slice: setup
	@mkdir -p reports
	@echo "synth and heavy tiers: running beside the slice tier (output: reports/synth-tier.log, reports/heavy-tier.log)"
	@{ $(VENV)/bin/pytest -m synth -q -p no:cacheprovider --durations=5 > reports/synth-tier.log 2>&1; synth=$$?; \
	$(HEAVY_TIER) > reports/heavy-tier.log 2>&1; heavy=$$?; \
	echo "synth tier: exit $$synth; heavy tier: exit $$heavy" >> reports/heavy-tier.log; \
	test $$synth -eq 0 && test $$heavy -eq 0; } & beside=$$!; \
	$(VENV)/bin/pytest -m slice $(SLICE_PARALLEL) --durations=10; slice=$$?; \
	wait $$beside; beside=$$?; echo "== synth tier (reports/synth-tier.log)"; tail -n 12 reports/synth-tier.log; \
	echo "== heavy tier (reports/heavy-tier.log)"; tail -n 12 reports/heavy-tier.log; \
	test $$slice -eq 0 && test $$beside -eq 0

# The serve tier alone: Ray Serve LLM + vLLM's CPU build behind the official openai client (.venv-serve).
test-serve: $(SERVE_VENV)/.installed
	$(SERVE_VENV)/bin/pytest -m serve

# The fast tier: catalog, planner, specs, config, CLI contract, KubeRay manifests (no CDK synth, no Ray cluster).
test-unit: $(VENV)/.installed
	$(VENV)/bin/pytest -m unit -q $(PYTEST_PARALLEL)

# The heavy tier alone (make test runs it beside the slice tier): offline but seconds a test: the team example's
# training on CPU, JAX in fresh processes on 4-8 CPU devices, the CDK bindings loaded (jsii starts node), the whole
# suite imported in a fresh interpreter, the report page in headless Chromium.
test-heavy: $(VENV)/.installed
	$(HEAVY_TIER)

bench: setup
	$(VENV)/bin/python bench/describe.py
	$(VENV)/bin/python bench/synth.py
	$(VENV)/bin/python bench/local_slice.py
	$(VENV)/bin/python bench/local_start.py
	$(VENV)/bin/python bench/multislice.py
	$(VENV)/bin/python bench/chip.py
	$(VENV)/bin/python bench/batch_input.py
	$(VENV)/bin/python bench/compile_cache.py --out reports/bench-compile-cache

# Ray Serve LLM vs vLLM's own OpenAI server on the tiny model, side by side in one run.
bench-serve: $(SERVE_VENV)/.installed
	$(SERVE_VENV)/bin/python bench/serve.py

clean:
	rm -rf $(VENV) $(CHECKOV_VENV) $(SERVE_VENV) node_modules cdktf.out .raytpu reports
