"""Ctrl-C during ``raytpu local up`` once its head has started (issue 68 item 1, "Interrupted and starved runs"): exit
130, every process it started stopped, the run folder left so that ``local status`` says no slice is up (exit 1, the
CLI contract's runtime failure: ``no local cluster recorded``) and a later ``local up`` works. A second Ctrl-C while
the start is torn down (a user who presses it again) cut that teardown short: the head ran on and ``local status``
failed on a half-stopped cluster."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from _terminal import as_from_a_terminal

from raytpu.local.slice import procs
from raytpu.local.slice.procs import processes_under
from raytpu.local.slice.state import STATE_FILE

pytestmark = [pytest.mark.slice, pytest.mark.timeout(600)]

UP = ["local", "up", "--generation", "v6e", "--topology", "2x2"]
"""A head and one emulated host."""


def raytpu(run_dir: Path, *argv: str, timeout_s: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "raytpu", *argv, "--dir", str(run_dir)], capture_output=True,
                          text=True, timeout=timeout_s)


def left_running(temp_dir: str, wait_s: float = 10) -> list[str]:
    """The processes of the cluster whose Ray temp dir is ``temp_dir`` still alive after ``wait_s`` at most."""
    deadline = time.monotonic() + wait_s
    while (found := processes_under(temp_dir)) and time.monotonic() < deadline:
        time.sleep(0.3)
    return [f"{p.pid} {' '.join(p.cmdline())[:120]}" for p in found if p.is_running()]


@pytest.fixture
def run_dir(tmp_path: Path) -> Iterator[Path]:
    """A run folder whose cluster, if one is left there, is stopped after the test."""
    yield tmp_path / "run"
    procs.stop(tmp_path / "run")


@pytest.mark.parametrize("second", [False, True], ids=["ctrl-c", "ctrl-c-twice"])
def test_ctrl_c_once_the_head_started_stops_what_up_started(run_dir: Path, second: bool) -> None:
    proc = subprocess.Popen([sys.executable, "-m", "raytpu", *UP, "--dir", str(run_dir)], stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, start_new_session=True,
                            preexec_fn=as_from_a_terminal)
    lines: list[str] = []
    head_up = threading.Event()

    def read() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.append(line)
            if "head up" in line:
                head_up.set()

    threading.Thread(target=read, daemon=True).start()
    try:
        assert head_up.wait(240), "".join(lines)
        temp_dir = json.loads((run_dir / STATE_FILE).read_text())["temp_dir"]
        os.killpg(proc.pid, signal.SIGINT)  # a terminal's Ctrl-C: the whole foreground group
        if second:
            time.sleep(0.1)  # the start is being torn down now
            os.killpg(proc.pid, signal.SIGINT)
        assert proc.wait(timeout=120) == 130, "".join(lines)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    assert "Traceback" not in "".join(lines) and "error: interrupted" in "".join(lines), "".join(lines)
    assert not left_running(temp_dir), left_running(temp_dir, 0)
    status = raytpu(run_dir, "local", "status")
    assert status.returncode == 1, status.stdout + status.stderr
    assert status.stderr == (f"error: local: no local cluster recorded in {run_dir}; start one with "
                             "`raytpu local up`\n")
    if second:  # the folder takes a new start
        try:
            again = raytpu(run_dir, *UP)
            assert again.returncode == 0, again.stderr[-3000:]
        finally:
            assert raytpu(run_dir, "local", "down").returncode == 0
