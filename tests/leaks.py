"""Where a secret's value turns up on disk: the slice tests' check that it never reaches a file."""

from __future__ import annotations

from pathlib import Path


def files_holding(root: Path, needle: bytes) -> list[str]:
    """Every regular file under ``root`` holding ``needle`` (links and unreadable files skipped)."""
    found = []
    for path in root.rglob("*"):
        try:
            if path.is_file() and not path.is_symlink() and needle in path.read_bytes():
                found.append(str(path))
        except OSError:
            continue
    return found
