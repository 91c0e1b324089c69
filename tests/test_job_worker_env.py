"""A job's workers on the emulated slice start without the nodes' serving-only variables (``raytpu.workloads
.job_worker_env``). A slice-tier test reads a team run's echoed worker lines for JAX's warning
(``test_team_example.test_the_example_trains_and_checkpoints_through_submit_local``)."""

from __future__ import annotations

import importlib
import os
from pathlib import Path

import pytest

from raytpu.core.manifests.serving import DIRECT_STREAMING_ENV
from raytpu.local.slice import launch, state
from raytpu.local.slice.emulation import ENV_EMULATED
from raytpu.workloads.support import job_worker_env
from raytpu.workloads.support.job_worker_env import job_runtime_env


def _cluster(tmp_path: Path) -> state.LocalCluster:
    return state.LocalCluster(run_dir=str(tmp_path), temp_dir="/tmp/raytpu-x", address="127.0.0.1:1", plan={},
                              slices=[])


@pytest.mark.unit
def test_every_emulated_node_names_the_serving_only_variables_it_carries(tmp_path: Path) -> None:
    env = launch._base_env(_cluster(tmp_path))
    names = env[job_worker_env.SERVING_ONLY_ENV].split(",")
    assert set(names) == set(DIRECT_STREAMING_ENV) and all(name in env for name in names)


@pytest.mark.unit
def test_the_hook_drops_the_named_variables_and_nothing_else(monkeypatch: pytest.MonkeyPatch) -> None:
    """Source: JAX 0.10.2 ``jax._src.distributed.State.initialize`` warns for any name holding ``_proxy``."""
    monkeypatch.setenv(job_worker_env.SERVING_ONLY_ENV, "RAY_SERVE_ENABLE_HA_PROXY,RAY_SERVE_EXPERIMENTAL_PIP_HAPROXY")
    monkeypatch.setenv("RAY_SERVE_ENABLE_HA_PROXY", "1")
    monkeypatch.setenv("RAY_SERVE_EXPERIMENTAL_PIP_HAPROXY", "1")
    monkeypatch.setenv("HTTPS_PROXY", "http://proxy.internal:3128")  # the user's own: JAX may rightly warn of it
    job_worker_env.drop_serving_env()

    assert "RAY_SERVE_ENABLE_HA_PROXY" not in os.environ and "RAY_SERVE_EXPERIMENTAL_PIP_HAPROXY" not in os.environ
    assert os.environ["HTTPS_PROXY"] == "http://proxy.internal:3128"


@pytest.mark.unit
def test_the_hook_is_a_no_op_where_no_node_named_any(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(job_worker_env.SERVING_ONLY_ENV, raising=False)
    monkeypatch.setenv("RAY_SERVE_ENABLE_HA_PROXY", "1")  # a GKE RayService pod's own setting stays
    job_worker_env.drop_serving_env()

    assert os.environ["RAY_SERVE_ENABLE_HA_PROXY"] == "1"


@pytest.mark.unit
def test_a_job_driver_names_the_hook_on_an_emulated_slice_only(monkeypatch: pytest.MonkeyPatch) -> None:
    """Ray imports the hook by its dotted name (Ray 2.60 ``ray._private.runtime_env.setup_hook``)."""
    assert job_worker_env.EMULATED == ENV_EMULATED
    module, _, function = job_worker_env.HOOK.rpartition(".")
    assert getattr(importlib.import_module(module), function) is job_worker_env.drop_serving_env
    monkeypatch.setenv("RAYTPU_EMULATED", "1")
    given = {"env_vars": {"A": "1"}}
    assert job_runtime_env(given) == {"env_vars": {"A": "1"}, "worker_process_setup_hook": job_worker_env.HOOK}
    assert given == {"env_vars": {"A": "1"}}  # the caller's dict is left as it was
    assert job_runtime_env({"worker_process_setup_hook": "team.hook"})["worker_process_setup_hook"] == "team.hook"
    monkeypatch.delenv("RAYTPU_EMULATED")
    assert job_runtime_env(given) == given and job_runtime_env(None) == {}
