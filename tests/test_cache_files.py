"""JAX's persistent compilation cache as the kit writes it (issue 49): writes go through a temporary name and a
rename, and one of several processes writes an entry. An entry cut short, read by real JAX processes:
tests/test_cache_files_jax.py (the heavy tier)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from raytpu.workloads.support.cache_files import SafeFileCache

pytestmark = pytest.mark.unit


def test_a_write_lands_whole_under_its_name_or_not_at_all(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cache = SafeFileCache(tmp_path)

    def cut(self: Path, data: bytes) -> int:
        raise OSError("host preempted mid-write")

    monkeypatch.setattr(Path, "write_bytes", cut)
    with pytest.raises(OSError):
        cache.put("k", b"x" * 100)
    monkeypatch.undo()
    assert list(tmp_path.iterdir()) == []  # no entry, no temporary file, no claim: the next compile writes it


def test_only_one_of_several_processes_writes_an_entry(tmp_path: Path) -> None:
    """Hosts compiling the same program at once: the first to claim the entry writes it; the others skip."""
    writer, other = SafeFileCache(tmp_path), SafeFileCache(tmp_path)
    assert writer._claim("k")
    other.put("k", b"other")  # the claim is held: skipped
    assert not (tmp_path / "k-cache").exists() and other.written == 0
    os.utime(tmp_path / "k-claim", (0, 0))  # a claim whose writer died long ago
    other.put("k", b"other")
    assert (tmp_path / "k-cache").read_bytes() == b"other" and other.written == 1
