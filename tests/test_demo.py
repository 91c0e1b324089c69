"""`raytpu demo`, what `make run` runs: the whole kit end to end on this machine (real synth, Ray, JAX)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from test_local import assert_emulated_timeline

from raytpu.local.slice import procs, state

pytestmark = pytest.mark.slice

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.timeout(600)
def test_demo_passes_every_step_within_memory_and_leaves_nothing_running(tmp_path: Path) -> None:
    """As `make run` runs it: a relative run directory, and no Ray token of the caller's (the demo's cluster makes
    its own, which every node and the demo itself must read)."""
    report_path = tmp_path / "reports" / "demo.json"
    env = {k: v for k, v in os.environ.items()  # the demo picks its own temp prefix and token
           if k not in (state.ENV_TMP_PREFIX, "RAY_AUTH_MODE", "RAY_AUTH_TOKEN", "RAY_AUTH_TOKEN_PATH")}
    began = time.monotonic()
    proc = subprocess.Popen(
        [sys.executable, "-m", "raytpu", "demo", "--steps", "10", "--report", str(report_path),
         "--config", str(ROOT / "raytpu.example.yaml"), "--out", str(tmp_path / "cdktf.out"), "--dir", "run"],
        cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    out, err = proc.communicate(timeout=540)
    took = time.monotonic() - began
    assert proc.returncode == 0, err[-3000:] + out[-3000:]
    report = json.loads(report_path.read_text())
    steps = {s["step"]: s for s in report["steps"]}
    assert list(steps) == ["validate", "synth", "local slice up", "smoke", "train", "teardown"]
    assert all(s["ok"] for s in steps.values())
    assert sorted(Path(f).parent.name for f in steps["synth"]["files"]) == ["ray-tpu-cluster", "ray-tpu-workloads"]
    assert report["smoke"] and all(v["healthy"] for v in report["smoke"])
    assert report["train"]["final_loss"] < report["train"]["first_loss"]
    assert report["peak_memory_mib"] < 6 * 1024
    assert (report_path.parent / "smoke.junit.xml").exists()
    assert "host 0" in out, "the slice map of describe is part of the demo's output"
    assert not procs.tagged_processes(f"{state.TMP_PREFIX}d{proc.pid}-")
    # where the minutes went: the whole demo, phases the emulated slice lacks said so, the first *training* step
    assert_emulated_timeline(report["timeline"], took, smoke_checked="measured")
    first = next(r for r in report["timeline"]["phases"] if r["phase"] == "first_step")
    assert first["detail"].startswith("training step 1 done")
    assert "== where the minutes went" in out
