"""Issue 39.1 on a real emulated slice: one owner per run folder, `down` during a drill leaves nothing, a dead head is
reported at once, and what `local up` prints is what Ray's own CLI needs."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from raytpu.local.slice import procs, state
from raytpu.local.slice import procs as local_procs

ROOT = Path(__file__).resolve().parents[1]
UP = ("up", "--generation", "v6e", "--topology", "2x2")  # one 4-chip host: the cheapest slice
pytestmark = [pytest.mark.slice, pytest.mark.timeout(600)]


def _env() -> dict[str, str]:
    # as a user runs them: no Ray token or address of the caller's
    return {k: v for k, v in os.environ.items() if not k.startswith(("RAY_AUTH", "RAY_ADDRESS", "RAY_API"))}


def _raytpu(*argv: str, where: Path, timeout: float = 300, command: str = "local") -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "raytpu", command, *(("--dir", str(where)) if command == "local"
                                                                      else ()), *argv],
                          env=_env(), capture_output=True, text=True, timeout=timeout, cwd=ROOT)


def _left(cluster: state.LocalCluster) -> list[int]:
    """Every process of ``cluster`` still running: its recorded nodes' groups and anything carrying its tag."""
    groups = [p.pid for n in cluster.nodes for p in procs.cluster_group(n.pid, cluster.temp_dir)]
    return sorted(set(groups) | set(local_procs.tagged_processes(cluster.temp_dir)))


def test_one_owner_per_run_folder_and_down_during_a_drill_leaves_nothing(tmp_path: Path) -> None:
    where = tmp_path / "run"
    up = _raytpu(*UP, where=where)
    assert up.returncode == 0, up.stderr
    cluster = state.LocalCluster.load(where)
    assert cluster is not None and cluster.started_by == "raytpu local up"
    drill: subprocess.Popen[str] | None = None
    try:
        # what `local up` printed is what Ray's own CLI needs (address and token), alone
        printed = dict(line.split("=", 1) for line in up.stdout.splitlines() if line.startswith("RAY_"))
        assert printed["RAY_AUTH_TOKEN_PATH"] == cluster.auth_token_path and printed["RAY_AUTH_MODE"] == "token"
        ray_cli = subprocess.run([str(Path(sys.executable).parent / "ray"), "status"], env=_env() | printed,
                                 capture_output=True, text=True, timeout=120)
        assert ray_cli.returncode == 0 and "Active:" in ray_cli.stdout, ray_cli.stderr[-2000:]

        # a stale exported RAY_ADDRESS (an earlier `local up`'s line) does not take `submit --local` elsewhere
        stale = {"RAY_ADDRESS": "127.0.0.1:9", "RAY_API_SERVER_ADDRESS": "http://127.0.0.1:9"}
        submitted = subprocess.run([sys.executable, "-m", "raytpu", "submit", "smoke", "--local", "--dir", str(where),
                                    "--config", "raytpu.example.yaml", "--run-id", "o1"], env=_env() | stale,
                                   capture_output=True, text=True, timeout=300, cwd=ROOT)
        assert submitted.returncode == 0 and "Traceback" not in submitted.stderr, submitted.stderr[-3000:]

        # a demo pointed at this folder refuses before anything starts; the cluster runs on
        demo = _raytpu("--dir", str(where), "--no-synth", "--config", "raytpu.example.yaml", where=where,
                       command="demo")
        assert demo.returncode == 2, demo.stderr[-2000:]
        assert "error: --dir: " in demo.stderr and "started by `raytpu local up`" in demo.stderr
        assert _raytpu("status", where=where, timeout=120).returncode == 0

        # a drill holds the folder: a second preempt and a second up are refused, naming it
        drill = subprocess.Popen([sys.executable, "-m", "raytpu", "local", "--dir", str(where), "preempt", "--host",
                                  "0", "--notice-s", "120"], env=_env(), stderr=subprocess.PIPE, text=True, cwd=ROOT)
        assert drill.stderr is not None
        lines = iter(drill.stderr.readline, "")
        assert any("notice:" in line for line in lines), "the drill gave no notice"
        for argv in (("preempt", "--host", "0"), UP):
            second = _raytpu(*argv, where=where, timeout=120)
            assert second.returncode == 2, second.stderr
            assert second.stderr.startswith(f"error: --dir: '{where}' is in use by `raytpu local preempt` "
                                            f"(pid {drill.pid})"), second.stderr

        # down ends the drill first (mid-notice), then stops everything: nothing running, no state
        began = time.monotonic()
        down = _raytpu("down", where=where, timeout=180)
        assert down.returncode == 0, down.stderr
        assert drill.wait(timeout=30) == 130 and time.monotonic() - began < 120
        assert _left(cluster) == [] and not (where / "cluster.json").exists()
        time.sleep(2)  # the drill would have written its state by now
        assert not (where / "cluster.json").exists() and sorted(p.name for p in where.iterdir() if p.suffix in (
            ".json", ".lock")) == []
    finally:
        if drill is not None and drill.poll() is None:
            drill.kill()
            drill.wait()
        local_procs.stop(where)


def test_status_of_a_dead_head_is_exit_1_at_once(tmp_path: Path) -> None:
    where = tmp_path / "run"
    up = _raytpu(*UP, where=where)
    assert up.returncode == 0, up.stderr
    cluster = state.LocalCluster.load(where)
    assert cluster is not None
    try:
        head = cluster.nodes[0]
        assert head.role == "head"
        procs.signal_group(head.pid, signal.SIGKILL)
        began = time.monotonic()
        status = _raytpu("status", where=where, timeout=60)
        took = time.monotonic() - began
        assert status.returncode == 1 and took < 20, (status.returncode, took, status.stderr)
        assert status.stderr.startswith(f"error: local: the head of the cluster in {where} is not running")
        assert f"raytpu local down --dir {where}" in status.stderr and "Traceback" not in status.stderr
    finally:
        down = _raytpu("down", where=where, timeout=180)
    assert down.returncode == 0 and _left(cluster) == []
