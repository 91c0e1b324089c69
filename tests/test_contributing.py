"""Issue 50.2: the layout lives once, in docs/CONTRIBUTING.md, and every path it names exists.

Its "Layout" block names one path from the repository's root at the start of each line, and files of that folder in
the description (``memory.py``); the rest of the page names paths in backticks (``raytpu/console/machine.py``, or a
bare file name such as ``measure.py`` that some file of the checkout carries). ``<name>`` stands for any name: the
path before it must exist; ``*`` is a glob that must match. Every package of ``raytpu/`` has its line, so a new one
cannot go undescribed.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[1]
CONTRIBUTING = ROOT / "docs" / "CONTRIBUTING.md"
SUFFIXES = (".py", ".md", ".toml", ".lock", ".in", ".json", ".yaml", ".yml", ".cjs")
SKIP_DIRS = {".git", "node_modules", "__pycache__", "reports", ".raytpu", ".mypy_cache", ".ruff_cache",
             ".pytest_cache"}


def file_names() -> set[str]:
    """The names of the checkout's files (virtual environments and tool caches left out)."""
    names: set[str] = set()
    for _folder, dirs, files in os.walk(ROOT):
        dirs[:] = [d for d in dirs if d not in SKIP_DIRS and not d.startswith(".venv")]
        names.update(files)
    return names


def clean(token: str) -> str:
    return re.sub(r"(?:'s|[),;:.])+$", "", token.strip("`(\"'"))


def named(token: str) -> bool:
    """Whether ``token`` reads as a path: it has a folder, or ends in a file suffix."""
    return bool(re.fullmatch(r"[\w.<>*-]+(?:/[\w.<>*-]*)+", token)) or (
        bool(re.fullmatch(r"[\w.-]+", token)) and token.endswith(SUFFIXES))


def missing(token: str, base: Path, names: set[str], anywhere: bool = True) -> bool:
    """Whether path ``token`` names nothing: from ``base`` or the root; a bare name, with ``anywhere``, from any
    folder of the checkout."""
    if "<" in token:
        token = token[:token.index("<")]
        return not any((b / token).is_dir() for b in (base, ROOT))
    if "*" in token:
        return not any(any(b.glob(token)) for b in (base, ROOT))
    if "/" not in token.rstrip("/"):
        return not ((base / token).exists() or (ROOT / token).exists() or (anywhere and token.rstrip("/") in names))
    return not any((b / token).exists() for b in (base, ROOT))


def layout(text: str) -> list[tuple[str, str]]:
    """(path, its description with continuation lines) of each line of the "Layout" section's code block."""
    section = text.split("\n## Layout\n", 1)[1].split("\n## ", 1)[0]
    block = section.split("```", 2)[1].split("\n", 1)[1]
    rows: list[tuple[str, str]] = []
    for line in block.splitlines():
        if line and not line[0].isspace():
            path, _, description = line.partition(" ")
            rows.append((path, description))
        elif line.strip() and rows:
            rows[-1] = (rows[-1][0], rows[-1][1] + " " + line.strip())
    return rows


def backticked(text: str) -> list[str]:
    """Backticked tokens outside fenced blocks."""
    prose = re.sub(r"^```.*?^```", "", text, flags=re.MULTILINE | re.DOTALL)
    return re.findall(r"`([^`\n]+)`", prose)


TEXT = CONTRIBUTING.read_text(encoding="utf-8")
ROWS = layout(TEXT)


def test_the_layout_block_is_read() -> None:
    paths = [path for path, _ in ROWS]
    assert len(paths) >= 60 and "raytpu/core/specs/spec.py" in paths and "workloads/" in paths, paths


def test_every_layout_path_exists() -> None:
    absent = [path for path, _ in ROWS if not (ROOT / path).exists()
              or (path.endswith("/") and not (ROOT / path).is_dir())]
    assert not absent, absent


def test_every_file_a_layout_line_names_exists() -> None:
    names = file_names()
    absent = []
    for path, description in ROWS:
        base = ROOT / path if path.endswith("/") else (ROOT / path).parent
        for word in description.split():
            token = clean(word)
            if named(token) and missing(token, base, names, anywhere=False):
                absent.append(f"{path}: {token}")
    assert not absent, absent


def test_every_backticked_path_exists() -> None:
    names = file_names()
    absent = [token for raw in backticked(TEXT) for token in [clean(raw)]
              if " " not in raw.strip() and named(token) and missing(token, ROOT, names)]
    assert not absent, absent


def test_every_package_has_its_layout_line() -> None:
    described = {path.rstrip("/") for path, _ in ROWS}
    packages = sorted(p.parent.relative_to(ROOT).as_posix() for p in (ROOT / "raytpu").rglob("__init__.py")
                      if p.parent != ROOT / "raytpu")
    undescribed = [p for p in packages if p not in described]
    assert not undescribed, f"packages with no line in docs/CONTRIBUTING.md's layout: {undescribed}"


def test_no_other_page_holds_a_copy_of_the_layout() -> None:
    """The README and docs/DESIGN.md link the layout rather than repeat it (issue 50: three copies had drifted)."""
    for page in (ROOT / "README.md", ROOT / "docs" / "DESIGN.md"):
        text = page.read_text(encoding="utf-8")
        assert "## Where things go" not in text and "raytpu/core/specs/slices/provisioning.py" not in text.split(
            "## Layout", 1)[-1].split("\n## ", 1)[0], page


@pytest.mark.parametrize(("token", "base", "absent"), [
    ("memory.py", "raytpu/console", False),
    ("raytpu/console/machine.py", "", False),
    ("raytpu/console/nothing.py", "", True),
    ("raytpu/images/<name>/", "", False),
    ("raytpu/nothing/<name>/", "", True),
    ("tests/test_*.py", "", False),
    ("memory.py", "raytpu/sizing", False),
    ("measure.py", "", False),
    ("no_such_module.py", "", True),
])
def test_a_missing_path_is_found(token: str, base: str, absent: bool) -> None:
    assert missing(token, ROOT / base, file_names()) is absent


def test_a_layout_line_names_files_of_its_own_folder() -> None:
    assert missing("memory.py", ROOT / "raytpu/cli", file_names(), anywhere=False)
    assert not missing("memory.py", ROOT / "raytpu/sizing", file_names(), anywhere=False)
