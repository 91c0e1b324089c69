"""Issue 50 item 5: docs/FACTS.md is grouped by subject, each fact under a stable anchor, and cited by it.

Every ``docs/FACTS.md#anchor`` the repository's code, tests and docs name is an ``<a id>`` of docs/FACTS.md (links
between facts too); the anchors are unique; each ``##`` subject and ``###`` fact has its anchor; and no reference to
the old numbered sections ("docs/FACTS.md section 24.y", "FACTS 25.40", "FACTS.md §2") is left. Where each old
number went: docs/FACTS-changelog.md, which alone may name them.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[1]
FACTS = ROOT / "docs" / "FACTS.md"
SUFFIXES = {".py", ".md", ".yaml", ".yml", ".toml", ".txt", ".cfg", ".sh"}
SKIP_DIRS = {".git", "node_modules", "cdktf.out", "__pycache__", ".mypy_cache", ".ruff_cache", ".pytest_cache",
             "reports", ".raytpu"}
HISTORY = {"docs/FACTS-changelog.md", "tests/test_facts_refs.py"}
"""Name the old numbers on purpose: the map from each to its anchor, and this test's examples."""

ANCHOR = re.compile(r'<a id="([^"]+)"></a>')
CITED = re.compile(r"FACTS\.md#([A-Za-z0-9_-]+)")
LINKED = re.compile(r"\]\(#([A-Za-z0-9_-]+)\)")
KEBAB = re.compile(r"[a-z0-9]+(?:-[a-z0-9]+)*")
NUMBER = r"\d+(?:\.(?:\d+|[a-z]{1,2}))*\b"
BREAK = r"[ \t]*(?:\n[ \t]*(?:#[ \t]*)?)?"
"""Spaces, or a line break (a comment's ``#`` after it) where a reference is wrapped."""
OLD_STYLE = re.compile(rf"\bFACTS(?:\.md)?`?(?:[ \t]+|[ \t]*\n[ \t]*(?:#[ \t]*)?)\(?(?:(?:[Ss]ections?|§§?){BREAK})?"
                       rf"{NUMBER}|\bFACTS\b[^\n]*?(?:\b[Ss]ections?|§)[ \t]*\d")
"""A numbered reference: FACTS 25.40, docs/FACTS.md section 24.y, FACTS.md §2, docs/FACTS.md\\n    section 16, or
a section number later on a line that names FACTS."""
INSIDE_OLD = re.compile(rf"(?<!RFC 6902 )(?<!\d{{4}}\.\d{{5}}, )\b(?:[Ss]ections?|§){BREAK}\d")
"""Inside docs/FACTS.md, a reference by number to one of its own sections (an RFC's or a paper's are theirs)."""


def repo_files() -> list[Path]:
    found = []
    for path in sorted(ROOT.rglob("*")):
        rel = path.relative_to(ROOT)
        if any(part in SKIP_DIRS or part.startswith(".venv") for part in rel.parts) or not path.is_file():
            continue
        if path.suffix in SUFFIXES or path.name == "Makefile":
            found.append(path)
    return found


FILES = repo_files()
FACTS_TEXT = FACTS.read_text(encoding="utf-8")


def anchors() -> list[str]:
    return ANCHOR.findall(FACTS_TEXT)


def texts() -> list[tuple[str, str]]:
    out = []
    for path in FILES:
        rel = path.relative_to(ROOT).as_posix()
        if rel in HISTORY:
            continue
        try:
            out.append((rel, path.read_text(encoding="utf-8")))
        except UnicodeDecodeError:
            continue
    return out


TEXTS = texts()


def test_files_are_found() -> None:
    names = {rel for rel, _ in TEXTS}
    assert {"docs/FACTS.md", "docs/DESIGN.md", "raytpu/core/manifests/kuberay.py", "tests/test_modules.py"} <= names


def test_anchors_are_unique_and_kebab_case() -> None:
    found = anchors()
    repeated = sorted({a for a in found if found.count(a) > 1})
    assert not repeated, repeated
    odd = [a for a in found if not KEBAB.fullmatch(a)]
    assert not odd, odd
    assert len(found) > 100, len(found)


def test_every_subject_and_fact_has_its_anchor() -> None:
    """Each ``##`` and ``###`` heading follows its own ``<a id>`` line (blank lines between allowed)."""
    lines = FACTS_TEXT.splitlines()
    bare = []
    for number, line in enumerate(lines):
        if re.match(r"^#{2,3} ", line):
            before = [prev for prev in lines[max(0, number - 3):number] if prev.strip()]
            if not before or not ANCHOR.fullmatch(before[-1].strip()):
                bare.append(f"line {number + 1}: {line}")
    assert not bare, "\n".join(bare)


def test_every_cited_anchor_exists() -> None:
    known = set(anchors())
    broken = []
    for rel, text in TEXTS:
        cited = CITED.findall(text) + (LINKED.findall(text) if rel == "docs/FACTS.md" else [])
        broken += [f"{rel}: #{anchor}" for anchor in cited if anchor not in known]
    assert not broken, "\n".join(broken)


def test_no_numbered_reference_remains() -> None:
    left = []
    for rel, text in TEXTS:
        pattern = INSIDE_OLD if rel == "docs/FACTS.md" else OLD_STYLE
        for match in pattern.finditer(text):
            number = text.count("\n", 0, match.start()) + 1
            left.append(f"{rel}:{number}: {match.group(0)!r}")
    assert not left, "cite docs/FACTS.md#anchor instead:\n" + "\n".join(left)


@pytest.mark.parametrize(("text", "old"), [
    ("Source: docs/FACTS.md section 24.y.", True),
    ("(FACTS 25.40)", True),
    ("see FACTS.md §2", True),
    ("(docs/FACTS.md\n    section 16)", True),
    ("(docs/FACTS.md section\n  12).", True),
    ("# see docs/FACTS.md section\n# 24.x", True),
    ("How and why: docs/FACTS.md#preemption-manifests (sections 18 and 24.y).", True),
    ("Source: docs/FACTS.md#kuberay-builders.", False),
    ("FACTS_TABLE = {", False),
    ("config section ``storage``; fields: docs/FACTS.md#gke-cluster-fields", False),
])
def test_old_style_references_are_recognised(text: str, old: bool) -> None:
    assert bool(OLD_STYLE.search(text)) is old
