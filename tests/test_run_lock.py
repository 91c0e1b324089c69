"""Issue 39.1: one owner per run folder (raytpu/local/slice/run_lock.py), with real processes holding it (no Ray)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from raytpu.core.common.errors import InvalidInput, RuntimeFailure
from raytpu.local.slice import run_lock

pytestmark = pytest.mark.unit
ROOT = Path(__file__).resolve().parents[1]

HOLDER = """
import signal, sys, time
from pathlib import Path
from raytpu.local.slice.run_lock import hold
if sys.argv[2] == "deaf":
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
with hold(Path(sys.argv[1]), "raytpu local preempt"):
    print("held", flush=True)
    time.sleep(120)
"""


def _holder(where: Path, mode: str = "plain") -> subprocess.Popen[str]:
    proc = subprocess.Popen([sys.executable, "-c", HOLDER, str(where), mode], stdout=subprocess.PIPE, text=True,
                            cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert proc.stdout is not None and proc.stdout.readline().strip() == "held"
    return proc


def _raytpu(*argv: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "RAY_USAGE_STATS_ENABLED": "0"}
    return subprocess.run([sys.executable, "-m", "raytpu", *argv], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=60)


def test_a_second_command_is_refused_naming_dir_and_the_holder(tmp_path: Path) -> None:
    where = tmp_path / "run"
    holder = _holder(where)
    try:
        began = time.monotonic()
        up = _raytpu("local", "--dir", str(where), "up", "--generation", "v6e", "--topology", "2x4", cwd=tmp_path)
        assert up.returncode == 2, up.stderr
        assert up.stderr.startswith(f"error: --dir: '{where}' is in use by `raytpu local preempt` (pid {holder.pid})")
        assert len(up.stderr.splitlines()) == 1 and time.monotonic() - began < 30
        assert sorted(p.name for p in where.iterdir()) == [run_lock.LOCK_FILE]  # nothing started, nothing written
    finally:
        holder.kill()
        holder.wait()


def test_a_crashed_holder_blocks_nobody(tmp_path: Path) -> None:
    where = tmp_path / "run"
    holder = _holder(where)
    holder.kill()  # SIGKILL: no cleanup, the lock file stays; the kernel dropped the lock
    holder.wait()
    assert (where / run_lock.LOCK_FILE).exists()
    with run_lock.hold(where, "raytpu local up"):
        assert '"command": "raytpu local up"' in (where / run_lock.LOCK_FILE).read_text()
    assert not (where / run_lock.LOCK_FILE).exists()  # released: nothing left behind


def test_down_ends_the_holder_first_then_stops(tmp_path: Path) -> None:
    where = tmp_path / "run"
    holder = _holder(where)
    began = time.monotonic()
    down = _raytpu("local", "--dir", str(where), "down", cwd=tmp_path)
    assert down.returncode == 0, down.stderr
    assert "`raytpu local preempt`" in down.stderr and "ending it first" in down.stderr
    assert holder.wait(timeout=10) == -signal.SIGTERM and time.monotonic() - began < 30
    assert list(where.iterdir()) == []


def test_down_gives_up_on_a_holder_that_does_not_end(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    where = tmp_path / "run"
    holder = _holder(where, "deaf")
    monkeypatch.setattr(run_lock, "TAKE_OVER_WAIT_S", 1.0)
    try:
        with pytest.raises(RuntimeFailure, match=rf"pid {holder.pid}\) still holds .*\(kill {holder.pid}\)"), \
                run_lock.hold(where, "raytpu local down", take_over=True):
            pass
        assert holder.poll() is None  # told once, never killed by down
    finally:
        holder.kill()
        holder.wait()


def test_in_one_process_a_second_hold_is_refused_and_a_new_folder_is_removed_again(tmp_path: Path) -> None:
    where = tmp_path / "a" / "run"
    with run_lock.hold(where, "raytpu demo"), pytest.raises(InvalidInput, match="in use by `raytpu demo`"), \
            run_lock.hold(where, "raytpu demo"):
        pass
    assert list(tmp_path.iterdir()) == []  # both folders it made, empty again, are gone


def test_an_unwritable_run_folder_is_refused_naming_dir(tmp_path: Path) -> None:
    where = tmp_path / "ro"
    where.mkdir(mode=0o500)
    if os.access(where, os.W_OK):
        pytest.skip("running as a user who writes anywhere")
    with pytest.raises(InvalidInput, match="--dir"), run_lock.hold(where, "raytpu local up"):
        pass
