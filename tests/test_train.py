"""workloads/train.py: JaxTrainer on an emulated slice converges, and survives a host killed mid-run."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from raytpu import local
from raytpu.catalog import generation
from raytpu.plan import SlicePlan, plan_slice
from raytpu.workloads import train


@pytest.fixture(scope="module")
def plan() -> SlicePlan:
    """Two 4-chip hosts: two JAX processes of four CPU devices each."""
    return plan_slice("v6e", "2x4", generation("v6e").multi_host_machine_type.name)


@pytest.fixture(scope="module")
def cluster(start_cluster: Any, plan: SlicePlan) -> Iterator[local.LocalCluster]:
    started = start_cluster(plan, 1)
    yield started
    local.stop(started.run_dir)


@pytest.mark.unit
def test_scaling_config_comes_from_the_slice_plan() -> None:
    plan = plan_slice("v6e", "4x4")
    config = train.scaling_config(plan)
    assert config.use_tpu and config.topology == plan.topology
    assert config.accelerator_type == plan.ray_accelerator_type
    assert config.num_workers == plan.hosts
    assert config.resources_per_worker["TPU"] == plan.chips_per_host


@pytest.mark.unit
def test_parse_result_takes_the_last_summary_line() -> None:
    text = f"noise\n{train.MARKER} {{\"ok\": false}}\n{train.MARKER} {{\"ok\": true}}\n"
    assert train.parse_result(text) == {"ok": True}
    assert train.parse_result("nothing") is None


@pytest.mark.slice
@pytest.mark.timeout(300)
def test_training_converges(cluster: local.LocalCluster, tmp_path: Path) -> None:
    done = local.run_workload(cluster, "train", "--storage-path", str(tmp_path), "--steps", "30",
                              "--checkpoint-every", "10", timeout_s=240)
    summary = train.parse_result(done.stdout)
    assert done.returncode == 0 and summary and summary["ok"], done.stderr[-3000:]
    assert summary["steps_done"] == 30 and summary["restarts"] == 0
    losses = [h["loss"] for h in summary["history"]]
    assert len(losses) == 3 and losses[-1] < 0.5 * losses[0]
    assert summary["step_time_s"] > 0 and summary["samples_per_s"] > 0
    assert summary["devices"] == cluster.slice_plan.chips
    assert Path(summary["checkpoint"]).is_dir()


@pytest.mark.slice
@pytest.mark.timeout(420)
def test_host_killed_mid_run_resumes_from_checkpoint_and_finishes(cluster: local.LocalCluster,
                                                                   tmp_path: Path) -> None:
    plan = cluster.slice_plan
    cmd = local.workload_command("train", "--storage-path", str(tmp_path), "--steps", "40",
                                 "--checkpoint-every", "5", "--step-sleep-s", "0.3", "--max-failures", "2")
    env = cluster.driver_env() | cluster.workload("train").env()
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 180
        # a checkpoint counts once Ray Train has registered it (its snapshot file names one)
        while not any("checkpoint_2" in f.read_text() for f in tmp_path.glob("*/checkpoint_manager_snapshot.json")):
            assert proc.poll() is None, proc.communicate()[1][-3000:]
            assert time.monotonic() < deadline, "no checkpoint written within 180s"
            time.sleep(0.5)
        victim = plan.hosts - 1
        local.kill_host(cluster, cluster.slices[0], victim)
        print(f"killed worker {victim}", file=sys.stderr)
        local.add_host(cluster, cluster.slices[0], victim)  # GKE would recreate the pod
        out, err = proc.communicate(timeout=300)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    summary = train.parse_result(out)
    assert proc.returncode == 0 and summary and summary["ok"], err[-4000:]
    assert summary["steps_done"] == 40
    assert summary["restarts"] >= 1 and summary["resumed_from"] > 0, (summary, err[-6000:])
    losses = [h["loss"] for h in summary["history"]]
    assert losses[-1] < losses[0]


@pytest.mark.slice
@pytest.mark.timeout(300)
def test_no_free_slice_fails_after_bounded_retries(cluster: local.LocalCluster, tmp_path: Path) -> None:
    import logging

    import ray

    from raytpu.workloads import smoke

    ray.init(address=cluster.address, log_to_driver=False, logging_level=logging.ERROR)
    try:
        held = smoke.reserve_slice(cluster.slice_plan, timeout_s=60)  # the only slice is busy
        started = time.monotonic()
        done = local.run_workload(cluster, "train", "--storage-path", str(tmp_path), "--steps", "5",
                                  "--start-timeout-s", "5", "--slice-retries", "1", timeout_s=200)
        elapsed = time.monotonic() - started
        held.release()
    finally:
        ray.shutdown()
    summary = train.parse_result(done.stdout)
    assert done.returncode == 1 and summary is not None and not summary["ok"]
    assert summary.get("error"), summary
    assert elapsed < 120
