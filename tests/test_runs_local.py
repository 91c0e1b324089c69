"""``raytpu runs --local`` on a real emulated slice: a run submitted there is listed, its driver's and its rank's
output are printed, and cancelling a running job stops it and releases its placement group."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

EXAMPLE = Path(__file__).resolve().parent.parent / "raytpu.example.yaml"

HOLDER = ("import ray, time; ray.init(); pg = ray.util.placement_group([{'CPU': 1}]); ray.get(pg.ready()); "
          "print('holding the slice', flush=True); time.sleep(600)")
"""A job that holds a placement group until it is stopped."""


SUBMIT_HOLDER = f"""
import shlex, sys
from raytpu.local.slice import state
from raytpu.core.common import names
from raytpu.local.running.runs import jobs_client
cluster = state.LocalCluster.load(sys.argv[1])
jobs_client(cluster).submit_job(entrypoint=shlex.join([sys.executable, '-c', {HOLDER!r}]), submission_id='holder-1',
                                metadata={{**names.MANAGED_BY, names.WORKLOAD_LABEL: 'job', names.SLICE_LABEL: 's'}})
"""
"""Submits :data:`HOLDER` as a job of the cluster in ``argv[1]``, labelled as the kit labels runs (kind ``job``)."""


def user_env(run_dir: Path) -> dict[str, str]:
    """The environment of a user's command: no Ray token of the caller's (the cluster's own is read from its dir)."""
    return {k: v for k, v in os.environ.items() if not k.startswith("RAY_AUTH")} | {"RAYTPU_LOCAL_DIR": str(run_dir)}


def raytpu(*args: str, run_dir: Path, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    """``raytpu ARGS`` as a user runs it."""
    return subprocess.run([sys.executable, "-m", "raytpu", *args], env=user_env(run_dir), capture_output=True,
                          text=True, timeout=timeout, cwd=EXAMPLE.parent)


def listed(run_dir: Path) -> dict[str, dict[str, object]]:
    shown = raytpu("runs", "--local", "--json", run_dir=run_dir)
    assert shown.returncode == 0, shown.stderr
    return {r["run"]: r for r in json.loads(shown.stdout)["runs"]}


@pytest.mark.slice
@pytest.mark.timeout(900)
def test_runs_lists_a_local_run_prints_its_driver_and_rank_output_and_cancel_frees_the_slice(tmp_path: Path) -> None:
    try:
        up = raytpu("local", "up", "--generation", "v6e", "--topology", "2x2", run_dir=tmp_path)
        assert up.returncode == 0, up.stderr
        assert raytpu("runs", "--local", run_dir=tmp_path).stdout.strip() == "no runs"

        train = raytpu("submit", "train", "--config", str(EXAMPLE), "--local", "--run-id", "r1", run_dir=tmp_path)
        assert train.returncode == 0, train.stderr[-3000:]
        run = listed(tmp_path)["train-r1"]
        assert (run["object"], run["kind"], run["workload"], run["state"], run["done"]) == (
            "Ray job", "train", "train", "SUCCEEDED", True)
        assert run["slice"] and run["started_at"] and 0 <= float(str(run["age_s"])) < 900
        again = raytpu("submit", "train", "--config", str(EXAMPLE), "--local", "--run-id", "r1", run_dir=tmp_path)
        assert again.returncode == 2 and again.stderr.startswith(
            "error: --run-id: 'train-r1' names a job this cluster has run"), again.stderr  # refused: no timeline
        table = raytpu("runs", "--local", run_dir=tmp_path).stdout.splitlines()
        assert table[0].split() == ["RUN", "OBJECT", "KIND", "WORKLOAD", "SLICE", "STATE", "AGE"]
        assert table[2].startswith("train-r1")
        bare = raytpu("runs", run_dir=tmp_path)  # only an emulated slice is up: its runs (issue 68 item 6)
        assert bare.returncode == 0, bare.stderr
        assert [line.rsplit(None, 1)[0] for line in bare.stdout.splitlines()] == [  # AGE ticks on: left out
            line.rsplit(None, 1)[0] for line in table]

        driver = raytpu("runs", "logs", "train-r1", "--local", run_dir=tmp_path)
        assert driver.returncode == 0 and "RAYTPU_TRAIN_RESULT" in driver.stdout
        assert "train: rank 0:" not in driver.stdout  # the training function's prints are not the driver's
        rank = raytpu("runs", "logs", "train-r1", "--rank", "0", "--local", run_dir=tmp_path)
        assert rank.returncode == 0, rank.stderr
        assert rank.stdout.count("train: rank 0: 4 devices") == 1, rank.stdout  # each session's log read once
        no_rank = raytpu("runs", "logs", "train-r1", "--rank", "3", "--local", run_dir=tmp_path)
        assert no_rank.returncode == 2 and "error: --rank: 3 is not allowed" in no_rank.stderr
        assert "valid: 0" in no_rank.stderr

        submitted = subprocess.run([sys.executable, "-c", SUBMIT_HOLDER, str(tmp_path)], capture_output=True,
                                   text=True, timeout=120, env=user_env(tmp_path))  # its own process: Ray keeps
        assert submitted.returncode == 0, submitted.stderr                        # one token per process
        follow = subprocess.Popen([sys.executable, "-m", "raytpu", "runs", "logs", "holder-1", "--follow", "--local"],
                                  env=user_env(tmp_path), stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, text=True, cwd=EXAMPLE.parent)
        deadline = time.monotonic() + 120
        while "holding the slice" not in raytpu("runs", "logs", "holder-1", "--local", run_dir=tmp_path).stdout:
            assert time.monotonic() < deadline, listed(tmp_path)
            time.sleep(1)
        assert listed(tmp_path)["holder-1"]["state"] == "RUNNING"
        assert listed(tmp_path)["holder-1"]["kind"] == "job"  # any kind name in the label is listed

        unknown = raytpu("runs", "cancel", "nope", "--local", run_dir=tmp_path)
        assert unknown.returncode == 2
        assert "error: RUN: 'nope' is not allowed (no such run here); valid: train-r1, holder-1" in unknown.stderr
        cancel = raytpu("runs", "cancel", "holder-1", "--local", run_dir=tmp_path)
        assert cancel.returncode == 0, cancel.stderr
        assert "holder-1: STOPPED; no placement group of it is left" in cancel.stderr
        assert listed(tmp_path)["holder-1"]["state"] == "STOPPED"
        out, err = follow.communicate(timeout=60)  # --follow ends with the run
        assert follow.returncode == 0, err
        assert "holding the slice" in out
    finally:
        down = raytpu("local", "down", run_dir=tmp_path)
    assert down.returncode == 0
