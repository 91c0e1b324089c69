"""Issue 28 item 1: ``raytpu synth --out DIR`` replaces DIR only when it is absent, empty or a previous synth output
(stacks/synth_out.py), refuses anything else before CDK Terrain is loaded, and swaps a complete output in beside DIR
(the umask's mode, the old output kept when the swap fails, no temporary folder left)."""

from __future__ import annotations

import contextlib
import io
import json
import os
import stat
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from raytpu.cli import main
from raytpu.core.common.errors import InvalidInput
from raytpu.stacks import synth_out

REPO = Path(__file__).resolve().parents[1]
EXAMPLE = REPO / "raytpu.example.yaml"
CDKTF_MANIFEST = {"version": "0.20.0", "stacks": {"ray-tpu-cluster": {
    "name": "ray-tpu-cluster", "synthesizedStackPath": "stacks/ray-tpu-cluster/cdk.tf.json",
    "workingDirectory": "stacks/ray-tpu-cluster", "dependencies": [], "annotations": []}}}
"""The shape of the ``manifest.json`` ``cdktf synth`` (the node CLI) writes."""


def _snapshot(root: Path) -> dict[str, tuple[int, bytes | None]]:
    """Every path under ``root`` (itself included) -> (mode, content of a file)."""
    return {str(p.relative_to(root)): (p.lstat().st_mode, p.read_bytes() if p.is_file() else None)
            for p in [root, *sorted(root.rglob("*"))]}


def _synth(*argv: str, cwd: Path) -> tuple[int, str]:
    """``raytpu synth EXAMPLE ARGV`` in this process from ``cwd``: (exit code, stderr)."""
    err = io.StringIO()
    before = os.getcwd()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        os.chdir(cwd)
        try:
            code = main(["synth", str(EXAMPLE), *argv])
        finally:
            os.chdir(before)
    return code, err.getvalue()


def _previous_output(out: Path, *, marker: bool = True, manifest: object = CDKTF_MANIFEST) -> Path:
    (out / "stacks" / "ray-tpu-cluster").mkdir(parents=True)
    (out / "stacks" / "ray-tpu-cluster" / "cdk.tf.json").write_text("{}")
    if manifest is not None:
        (out / "manifest.json").write_text(json.dumps(manifest))
    if marker:
        synth_out.write_marker(out)
    return out


@contextlib.contextmanager
def _umask(mask: int) -> Iterator[None]:
    old = os.umask(mask)
    try:
        yield
    finally:
        os.umask(old)


# ------------------------------------------------------------------------------------------- refusals


@pytest.mark.unit
def test_a_folder_of_the_users_files_is_refused_and_untouched(tmp_path: Path) -> None:
    mine = tmp_path / "mine"
    mine.mkdir(mode=0o750)
    (mine / "notes.txt").write_text("mine\n")
    before = _snapshot(tmp_path)
    code, err = _synth("--out", "mine", cwd=tmp_path)
    assert code == 2
    assert err.startswith("error: --out: 'mine' is a folder that is not a synth output (it holds 'notes.txt'")
    assert "; valid: a path that does not exist yet" in err and "Traceback" not in err
    assert _snapshot(tmp_path) == before


@pytest.mark.unit
def test_a_previous_output_with_a_file_of_the_users_added_is_refused(tmp_path: Path) -> None:
    out = _previous_output(tmp_path / "out")
    (out / "notes.txt").write_text("mine\n")
    before = _snapshot(tmp_path)
    code, err = _synth("--out", str(out), cwd=tmp_path)
    assert code == 2 and "is a folder that is not a synth output" in err
    assert _snapshot(tmp_path) == before


@pytest.mark.unit
def test_a_file_is_refused_and_untouched(tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text("mine\n")
    before = _snapshot(tmp_path)
    code, err = _synth("--out", "notes.txt", cwd=tmp_path)
    assert code == 2
    assert err.startswith("error: --out: 'notes.txt' is a file, not a folder")
    assert _snapshot(tmp_path) == before


@pytest.mark.unit
@pytest.mark.parametrize(("target", "problem"), [
    ("/proc/raytpu-out", "cannot be written: no folder can be made in '/proc'"),
    ("notes.txt/out", "cannot be made: "),
    ("link", "is a symbolic link"),
    ("/", "is the root folder"),
])
def test_a_path_a_synth_cannot_write_or_must_not_replace_is_refused(tmp_path: Path, target: str,
                                                                    problem: str) -> None:
    (tmp_path / "notes.txt").write_text("mine\n")
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "link").symlink_to("elsewhere")
    before = _snapshot(tmp_path)
    code, err = _synth("--out", target, cwd=tmp_path)
    assert code == 2
    assert err.startswith(f"error: --out: '{target}' {problem}"), err
    assert _snapshot(tmp_path) == before


@pytest.mark.unit
def test_the_demo_refuses_its_synth_folder_before_it_starts(tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text("mine\n")
    before = _snapshot(tmp_path)
    err = io.StringIO()
    cwd = os.getcwd()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        os.chdir(tmp_path)
        try:
            code = main(["demo", "--config", str(EXAMPLE), "--dir", "run", "--out", "notes.txt"])
        finally:
            os.chdir(cwd)
    assert code == 2 and err.getvalue().startswith("error: --out: 'notes.txt' is a file"), err.getvalue()
    assert _snapshot(tmp_path) == before


@pytest.mark.unit
def test_a_long_path_is_shown_as_a_bounded_excerpt(tmp_path: Path) -> None:
    deep = "/proc/" + "d" * 5000
    with pytest.raises(InvalidInput) as caught:
        synth_out.check(deep)
    assert len(str(caught.value)) < 600 and "'..." in str(caught.value)


@pytest.mark.unit
def test_the_refusal_comes_before_the_config_and_cdk_terrain_are_loaded(tmp_path: Path) -> None:
    """In a fresh process (this one may have loaded CDK Terrain already): three refusals, then the modules loaded."""
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "notes.txt").write_text("mine\n")
    (tmp_path / "notes.txt").write_text("mine\n")
    program = (
        "import contextlib, io, sys, time\n"
        "from raytpu.cli import main\n"
        "for out in ('mine', 'notes.txt', '/proc/raytpu-out'):\n"
        "    started = time.perf_counter()\n"
        "    with contextlib.redirect_stderr(err := io.StringIO()):\n"
        "        code = main(['synth', 'missing.yaml', '--out', out])\n"
        "    ms = (time.perf_counter() - started) * 1000\n"
        "    print(out, code, err.getvalue().split(':')[1].strip(), f'{ms:.1f}')\n"
        "print(sorted(m for m in ('cdktn', 'raytpu.stacks.app') if m in sys.modules))\n"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run([sys.executable, "-c", program], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 0, done.stderr
    *runs, loaded = done.stdout.splitlines()
    # --out is checked first: the missing config would be refused otherwise
    assert [line.split()[:3] for line in runs] == [[out, "2", "--out"] for out in ("mine", "notes.txt",
                                                                                    "/proc/raytpu-out")]
    assert loaded == "[]"
    print("refusal ms:", ", ".join(line.split()[3] for line in runs))


# ------------------------------------------------------------------------------------------- accepted


@pytest.mark.unit
def test_an_absent_path_an_empty_folder_and_previous_outputs_are_accepted(tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    _previous_output(tmp_path / "ours", manifest=None)  # the marker: raytpu synth, cdktf.json's app
    _previous_output(tmp_path / "cdktf.out", marker=False)  # the node CLI's manifest.json beside stacks/
    before = _snapshot(tmp_path)
    for out in ("new", "new/deep/er", "empty", "ours", "cdktf.out"):
        synth_out.check(str(tmp_path / out))
    assert _snapshot(tmp_path) == before  # checking writes nothing


@pytest.mark.unit
@pytest.mark.parametrize("manifest", [None, {"stacks": []}, "not json", {"version": "1"}])
def test_stacks_and_a_manifest_that_is_not_cdktfs_are_not_an_output(tmp_path: Path, manifest: object) -> None:
    out = _previous_output(tmp_path / "out", marker=False, manifest=None)
    if manifest is not None:
        (out / "manifest.json").write_text(manifest if isinstance(manifest, str) else json.dumps(manifest))
    with pytest.raises(InvalidInput, match="is a folder that is not a synth output"):
        synth_out.check(str(out))


# ------------------------------------------------------------------------------------------- the swap


def _write_stack(folder: Path, text: str) -> None:
    (folder / "stacks" / "s").mkdir(parents=True)
    (folder / "stacks" / "s" / "cdk.tf.json").write_text(text)
    (folder / "manifest.json").write_text(json.dumps(CDKTF_MANIFEST))


@pytest.mark.unit
@pytest.mark.parametrize("mask", [0o022, 0o027])
def test_the_new_output_replaces_the_old_with_a_mkdir_mode_and_a_marker(tmp_path: Path, mask: int) -> None:
    out = _previous_output(tmp_path / "out")
    out.chmod(0o700)
    with _umask(mask), synth_out.replacing(out) as folder:
        _write_stack(folder, "new")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]
    assert stat.S_IMODE(out.stat().st_mode) == 0o777 & ~mask
    assert sorted(p.name for p in out.iterdir()) == [".raytpu-synth", "manifest.json", "stacks"]
    assert (out / "stacks" / "s" / "cdk.tf.json").read_text() == "new"
    assert not (out / "stacks" / "ray-tpu-cluster").exists()
    synth_out.check(str(out))  # a synth output: the next synth may replace it


@pytest.mark.unit
def test_terraforms_providers_and_lock_of_a_deployed_stack_are_kept(tmp_path: Path) -> None:
    """``cdktf deploy`` runs terraform in ``stacks/<id>/`` (@cdktf/cli-core 0.21.0 terraform-cli): its ``.terraform``
    and ``.terraform.lock.hcl`` survive a synth there, as ``cdktf synth`` keeps them; a stack no longer synthesized
    takes its own with it."""
    out = tmp_path / "out"
    _write_stack(out, "old")
    (out / "stacks" / "s" / ".terraform" / "providers").mkdir(parents=True)
    (out / "stacks" / "s" / ".terraform.lock.hcl").write_text("lock")
    (out / "stacks" / "gone" / ".terraform").mkdir(parents=True)
    synth_out.write_marker(out)
    with synth_out.replacing(out) as folder:
        _write_stack(folder, "new")
    assert (out / "stacks" / "s" / ".terraform.lock.hcl").read_text() == "lock"
    assert (out / "stacks" / "s" / ".terraform" / "providers").is_dir()
    assert (out / "stacks" / "s" / "cdk.tf.json").read_text() == "new"
    assert not (out / "stacks" / "gone").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]


@pytest.mark.unit
@pytest.mark.parametrize("failure", [RuntimeError, KeyboardInterrupt])
def test_a_failed_synth_leaves_the_old_output_and_no_temporary_folder(tmp_path: Path,
                                                                      failure: type[BaseException]) -> None:
    out = _previous_output(tmp_path / "out")
    before = _snapshot(tmp_path)
    with pytest.raises(failure), synth_out.replacing(out) as folder:
        _write_stack(folder, "half")
        raise failure()
    assert _snapshot(tmp_path) == before
    with pytest.raises(RuntimeError), synth_out.replacing(tmp_path / "a" / "b" / "out") as folder:
        raise RuntimeError()
    assert _snapshot(tmp_path) == before  # the parent folders made for it went too


@pytest.mark.unit
def test_a_failed_swap_puts_the_old_output_back(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    out = _previous_output(tmp_path / "out")
    before = _snapshot(tmp_path)
    real = os.replace
    calls: list[str] = []

    def replace(src: str | Path, dst: str | Path) -> None:
        calls.append(Path(src).name)
        if len(calls) == 2:  # moving the new output in
            raise OSError(28, "No space left on device")
        real(src, dst)

    monkeypatch.setattr(synth_out.os, "replace", replace)
    with pytest.raises(OSError, match="No space"), synth_out.replacing(out) as folder:
        _write_stack(folder, "new")
    assert _snapshot(tmp_path) == before
    assert len(calls) == 3  # aside, in (failed), back


# ------------------------------------------------------------------------------------------- one real synth


@pytest.mark.synth
@pytest.mark.timeout(300)
def test_raytpu_synth_into_an_empty_folder_writes_a_marked_output_with_a_mkdir_mode(tmp_path: Path) -> None:
    """An empty folder is accepted and gets a mkdir's mode; the output is marked and accepted by the next run."""
    out = tmp_path / "out"
    out.mkdir(mode=0o700)
    with _umask(0o022):
        done = subprocess.run([sys.executable, "-m", "raytpu", "synth", str(EXAMPLE), "--out", "out"], cwd=tmp_path,
                              capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]
    assert stat.S_IMODE(out.stat().st_mode) == 0o755
    assert sorted(p.name for p in out.iterdir()) == [".raytpu-synth", "manifest.json", "stacks"]
    assert (out / ".raytpu-synth").read_text() == synth_out.MARKER_TEXT
    synth_out.check(str(out))
    import cdktn  # the names a synth writes at the top of its folder, as the framework spells them

    assert {cdktn.Manifest.FILE_NAME, cdktn.Manifest.STACKS_FOLDER, synth_out.MARKER} == synth_out.SYNTH_ENTRIES
