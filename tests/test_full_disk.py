"""A full file system under ``raytpu synth --out`` and ``raytpu local up`` (issue 48, round 5's leftover): one
``error:`` line, exit 1, nothing half-written, the user's folder as it was.

Where a tmpfs can be mounted in a mount namespace of the command's own (tests/tmpfs.py: root, or a user namespace),
the disk is really full or read-only and the kernel says so (issue 68 item 1: the run folder's lock record, written
with ``os.pwrite``, was a traceback). Elsewhere the full disk is injected at the boundary: the write that fails
raises ``OSError(ENOSPC)`` as the kernel's write(2) does, after part of the output was written (synth: CDK Terrain's
module stands in, writing a stack file, then failing; local up: ``Path.write_text``, which writes the state and token
files, or ``os.pwrite``, the lock's record, fails). Source: write(2), ENOSPC "The device containing the file ... has
no room for the data"."""

from __future__ import annotations

import contextlib
import errno
import io
import json
import os
import secrets
import sys
import types
from pathlib import Path

import pytest
import tmpfs

pytestmark = pytest.mark.unit

EXAMPLE = Path(__file__).resolve().parents[1] / "raytpu.example.yaml"


def full(*_args: object, **_kwargs: object) -> None:
    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


def cli(*argv: str) -> tuple[int, str]:
    from raytpu.cli import main

    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        code = main(list(argv))
    return code, err.getvalue()


def tree(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.mark.parametrize("raised", [OSError(errno.ENOSPC, "No space left on device"),
                                    RuntimeError("Error: ENOSPC: no space left on device, write")])  # node's form
def test_synth_on_a_full_disk_is_one_line_and_keeps_the_previous_output(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, raised: Exception) -> None:
    from raytpu.stacks import synth_out

    out = tmp_path / "cdktf.out"
    (out / "stacks" / "old").mkdir(parents=True)
    (out / "stacks" / "old" / "cdk.tf.json").write_text("{}")
    synth_out.write_marker(out)
    before = tree(tmp_path)

    def synth(_spec: object, _refs: object, folder: Path) -> list[Path]:
        (folder / "stacks").mkdir()
        (folder / "stacks" / "half.tf.json").write_text('{"resource": ')  # part written, then the disk is full
        raise raised

    monkeypatch.setitem(sys.modules, "raytpu.stacks.app", types.SimpleNamespace(synth=synth))
    code, err = cli("synth", str(EXAMPLE), "--out", str(out))
    assert code == 1, err
    [line] = [line for line in err.splitlines() if line.startswith("error:")]
    assert line.startswith(f"error: --out: {str(out)!r} could not be written (") and "it is as it was" in line
    assert "No space left on device" in line or "ENOSPC" in line
    assert "Traceback" not in err
    assert tree(tmp_path) == before  # the old output whole, no half-written sibling left beside it
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cdktf.out"]


def test_local_up_on_a_full_disk_is_one_line_and_leaves_nothing_half_written(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    run = tmp_path / "run"
    monkeypatch.delenv("RAY_AUTH_TOKEN_PATH", raising=False)  # the run folder gets a token file of its own
    monkeypatch.delenv("RAY_AUTH_TOKEN", raising=False)
    monkeypatch.setattr(Path, "write_text", full)
    code, err = cli("local", "--dir", str(run), "up", "--generation", "v6e", "--topology", "2x2")
    assert code == 1, err
    [line] = [line for line in err.splitlines() if line.startswith("error:")]
    assert line.startswith(f"error: local: cannot write the run folder {str(run)!r} (No space left on device)")
    assert "Traceback" not in err
    left = sorted(p.name for p in run.iterdir()) if run.exists() else []
    assert set(left) <= {"owner.lock"}, left  # no state, no token, no partial file (the lock is the kernel's)


def test_a_full_disk_is_told_from_another_os_error() -> None:
    from raytpu.local.slice.state import full_disk
    from raytpu.stacks import synth_out

    assert full_disk(OSError(errno.ENOSPC, "x")) and full_disk(OSError(errno.EROFS, "x"))
    assert not full_disk(OSError(errno.ENOENT, "x")) and not full_disk(ConnectionRefusedError())
    assert synth_out.full_disk(RuntimeError("ENOSPC: no space left on device, write"))
    assert not synth_out.full_disk(RuntimeError("a stack failed")) and not synth_out.full_disk(FileNotFoundError())


def test_a_full_disk_at_the_lock_record_is_one_line_and_down_still_stops(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The holder's record in ``owner.lock`` is the first byte ``local up``, ``demo`` and ``preempt`` write; ``down``
    holds the lock without it (stopping writes nothing, and frees space)."""
    run = tmp_path / "run"
    monkeypatch.setattr(os, "pwrite", full)
    code, err = cli("local", "--dir", str(run), "up", "--generation", "v6e", "--topology", "2x2")
    assert code == 1, err
    assert err.splitlines() == [f"error: local: cannot write the run folder {str(run)!r} (No space left on device); "
                                "valid: free space on that disk, or a run folder on another (--dir), then `raytpu "
                                "local up` again; nothing of this command is left there"]
    assert not run.exists()  # the folder it made, removed again
    run.mkdir()
    code, err = cli("local", "--dir", str(run), "down")
    assert (code, err) == (0, "raytpu local: nothing to stop\n")
    assert list(run.iterdir()) == []


EXAMPLE_ARGS = ("--generation", "v6e", "--topology", "2x2")


def _recorded(tmp_path: Path, run: Path) -> str:
    """A cluster recorded in ``run`` whose processes are gone (``local down`` has only its files to clear): the shell
    line that puts it there."""
    from dataclasses import asdict

    from raytpu.local.slice.state import LocalCluster

    recorded = LocalCluster(run_dir=str(run), temp_dir=f"/tmp/raytpu-fulltest-{secrets.token_hex(4)}",
                            address="127.0.0.1:1", plan={}, slices=[])
    (tmp_path / "cluster.json").write_text(json.dumps(asdict(recorded)))
    return f'mkdir "$RAYTPU_T_MNT/run" && cp {tmp_path / "cluster.json"} "$RAYTPU_T_MNT/run/"'


@pytest.mark.skipif(bool(tmpfs.unavailable()), reason=tmpfs.unavailable() or "-")
@pytest.mark.parametrize(("mode", "argv", "recorded", "code", "left"), [
    ("full", ("local", "--dir", "{run}", "up", *EXAMPLE_ARGS), False, 1, ["run"]),
    ("full", ("demo", "--config", str(EXAMPLE), "--no-synth", "--dir", "{run}"), False, 1, ["run"]),
    ("full", ("local", "--dir", "{run}", "down"), True, 0, ["run"]),
    ("ro", ("local", "--dir", "{run}", "up", *EXAMPLE_ARGS), False, 1, []),
    ("ro", ("local", "--dir", "{run}", "preempt"), True, 1, ["run", "run/cluster.json"]),
], ids=["up-full", "demo-full", "down-full", "up-read-only", "preempt-read-only"])
def test_a_really_full_or_read_only_run_folder_is_one_line(tmp_path: Path, mode: str, argv: tuple[str, ...],
                                                            recorded: bool, code: int, left: list[str]) -> None:
    """Issue 68 item 1 on a real tmpfs: each command that holds the run folder says which folder and what to do, in
    one line, exit 1 (docs/guides/commands.md), and leaves nothing of its own there; ``down`` stops a recorded
    cluster on a full disk."""
    mount = tmp_path / "mnt"
    mount.mkdir()
    run = mount / "run"
    prepare = _recorded(tmp_path, run) if recorded else 'mkdir "$RAYTPU_T_MNT/run"' if mode == "full" else ""
    env = {**os.environ, "PYTHONPATH": str(EXAMPLE.parent), "RAY_USAGE_STATS_ENABLED": "0"}
    done, found = tmpfs.run_on(mode, mount, [sys.executable, "-m", "raytpu", *(a.format(run=run) for a in argv)],
                               prepare=prepare, env=env, cwd=tmp_path)
    assert done.returncode == code, done.stderr
    assert "Traceback" not in done.stderr and found == left, (done.stderr, found)
    if code == 0:
        assert done.stderr.endswith("raytpu local: nothing to stop\n")  # its record cleared: no process was left
        return
    [line] = [line for line in done.stderr.splitlines() if line.startswith("error:")]
    why, valid = (("No space left on device", "free space on that disk, or a run folder on another (--dir)")
                  if mode == "full" else ("Read-only file system", "a writable run folder (--dir)"))
    command = " ".join(argv[:1] if argv[0] == "demo" else argv[:1] + argv[3:4])
    assert line == (f"error: local: cannot write the run folder {str(run)!r} ({why}); valid: {valid}, then "
                    f"`raytpu {command}` again; nothing of this command is left there")


@pytest.mark.skipif(bool(tmpfs.unavailable()), reason=tmpfs.unavailable() or "-")
@pytest.mark.skipif(not Path("/var/tmp").is_dir(), reason="needs /var/tmp: a run folder outside /tmp")
@pytest.mark.skipif(any(Path(p).resolve().is_relative_to("/tmp") for p in (sys.prefix, __file__)),
                    reason="the checkout or its venv is under /tmp, which the test hides behind its own tmpfs")
@pytest.mark.parametrize(("mode", "why", "fix"), [("full", "No space left on device", "free space in /tmp"),
                                                  ("ro", "Read-only file system", "a /tmp this user can write")])
def test_a_full_or_read_only_tmp_is_one_line_before_ray_starts(mode: str, why: str, fix: str) -> None:
    """Every node's Ray temp dir is ``/tmp/raytpu-*`` (short socket paths): a ``/tmp`` that takes no byte failed a
    minute later as "GCS unreachable"; now one line at once, before any node starts, the run folder as it was."""
    import shutil
    import tempfile

    user = Path(tempfile.mkdtemp(prefix="raytpu-full-tmp-", dir="/var/tmp"))
    try:
        env = {**os.environ, "PYTHONPATH": str(EXAMPLE.parent), "RAY_USAGE_STATS_ENABLED": "0"}
        done, _left = tmpfs.run_on(mode, Path("/tmp"), [sys.executable, "-m", "raytpu", "local", "--dir",
                                                        str(user / "run"), "up", *EXAMPLE_ARGS],
                                   env=env, cwd=user, scratch=user, timeout=120)
        assert done.returncode == 1, done.stderr
        assert done.stderr.splitlines()[-1] == (
            f"error: local: cannot write Ray's temp folder /tmp ({why}); valid: {fix} (each node keeps its Ray "
            "session, logs and sockets in /tmp/raytpu-*), then start again"), done.stderr
        assert list(user.iterdir()) == []  # the run folder made for the lock, removed again
    finally:
        shutil.rmtree(user, ignore_errors=True)
