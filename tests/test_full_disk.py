"""A full file system under ``raytpu synth --out`` and ``raytpu local up`` (issue 48, round 5's leftover): one
``error:`` line, exit 1, nothing half-written, the user's folder as it was.

A tiny tmpfs would need root (mount), so the full disk is injected at the boundary: the write that fails raises
``OSError(ENOSPC)`` as the kernel's write(2) does, after part of the output was written (synth: CDK Terrain's module
stands in, writing a stack file, then failing; local up: ``Path.write_text``, which writes the state and token files,
fails). Source: write(2), ENOSPC "The device containing the file ... has no room for the data"."""

from __future__ import annotations

import contextlib
import errno
import io
import os
import sys
import types
from pathlib import Path

import pytest

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
    from raytpu.local.state import full_disk
    from raytpu.stacks import synth_out

    assert full_disk(OSError(errno.ENOSPC, "x")) and full_disk(OSError(errno.EROFS, "x"))
    assert not full_disk(OSError(errno.ENOENT, "x")) and not full_disk(ConnectionRefusedError())
    assert synth_out.full_disk(RuntimeError("ENOSPC: no space left on device, write"))
    assert not synth_out.full_disk(RuntimeError("a stack failed")) and not synth_out.full_disk(FileNotFoundError())
