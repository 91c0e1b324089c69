"""raytpu/console/machine.py (issue 39.2): TMPDIR, HOME and output paths checked before work, one error naming each.

As root a chmod stops no write, so unwritable folders are paths under /proc and files where folders belong; a full
disk is /dev/full (a device: refused as an output before anything is written)."""

from __future__ import annotations

from pathlib import Path

import pytest

from raytpu.console import machine

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(("value", "words"), [
    ("{tmp}/missing", "does not exist"), ("{tmp}/file", "is not a folder"), ("/proc/raytpu-x", "does not exist"),
    ("/proc/self", "cannot be written")])
def test_an_unusable_tmpdir_or_home_is_named(value: str, words: str, tmp_path: Path,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "file").write_text("mine")
    for name in ("TMPDIR", "HOME"):
        monkeypatch.setenv(name, value.format(tmp=tmp_path))
    found = machine.environment_problems("TMPDIR", "HOME")
    assert [p.field for p in found] == ["TMPDIR", "HOME"] and all(words in p.problem for p in found), found
    assert sorted(p.name for p in tmp_path.iterdir()) == ["file"]  # the probes left nothing


def test_usable_folders_and_an_unset_tmpdir_pass(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.delenv("TMPDIR", raising=False)
    assert machine.environment_problems("TMPDIR", "HOME") == []
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(("path", "words"), [
    ("/dev/full", "not a regular file"), ("/proc/raytpu/r.json", "cannot be written"), ("{tmp}", "is a folder"),
    ("{tmp}/file/r.json", "cannot be written")])
def test_an_output_file_that_cannot_be_written_is_refused(path: str, words: str, tmp_path: Path) -> None:
    (tmp_path / "file").write_text("mine")
    (problem,) = machine.output_file_problems("--report", path.format(tmp=tmp_path))
    assert problem.field == "--report" and words in problem.problem, problem


def test_an_output_under_missing_folders_is_fine_where_they_can_be_made(tmp_path: Path) -> None:
    assert machine.output_file_problems("--report", str(tmp_path / "a" / "b" / "r.json")) == []
    assert machine.output_folder_problems("--report", str(tmp_path / "a" / "b")) == []
    assert list(tmp_path.iterdir()) == []  # nothing made by the check
    (tmp_path / "file").write_text("mine")
    (problem,) = machine.output_folder_problems("--report", str(tmp_path / "file"))
    assert "is not a folder" in problem.problem
