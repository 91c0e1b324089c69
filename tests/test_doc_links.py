"""Issue 50.1: every relative link of the README, the docs and the examples' pages resolves.

A link's file (or folder) exists, relative to the page that links it; a ``#anchor`` names a heading of the target
page as GitHub spells it (lower case, punctuation dropped, spaces as ``-``, a repeated heading ``-1``, ``-2``) or an
HTML ``id``/``name``. Links inside code (fenced blocks, inline backticks) are text, not links.
"""

from __future__ import annotations

import functools
import re
from pathlib import Path
from urllib.parse import unquote

import pytest

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[1]
PAGES = sorted({ROOT / "README.md", *(ROOT / "docs").rglob("*.md"), *(ROOT / "examples").rglob("*.md")})

INLINE = re.compile(r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
REFERENCE = re.compile(r"^\s{0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s.*)?$")
HTML_ANCHOR = re.compile(r"<a\s[^>]*(?:id|name)=\"([^\"]+)\"", re.IGNORECASE)


def prose(text: str) -> list[tuple[int, str]]:
    """(line number, line) outside fenced code blocks, inline code spans blanked."""
    out: list[tuple[int, str]] = []
    fence: str | None = None
    for number, line in enumerate(text.splitlines(), 1):
        marker = re.match(r"^\s{0,3}(`{3,}|~{3,})", line)
        if marker:
            if fence is None:
                fence = marker[1][0] * 3
            elif marker[1].startswith(fence):
                fence = None
            continue
        if fence is None:
            out.append((number, re.sub(r"(`+)(?:(?!\1).)+?\1", "``", line)))
    return out


def slug(heading: str) -> str:
    """GitHub's anchor for a heading's text."""
    text = re.sub(r"`", "", heading.strip().lower())
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", text)
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(page: Path) -> frozenset[str]:
    return _anchors_in(page.read_text(encoding="utf-8"))


@functools.cache
def _anchors_in(text: str) -> frozenset[str]:
    """Once per page text: the changelog links the facts page (385 kB) hundreds of times: 3 s, not 0.1."""
    found: set[str] = set()
    seen: dict[str, int] = {}
    for _, line in prose(text):
        if heading := re.match(r"^\s{0,3}#{1,6}\s+(.*?)\s*#*\s*$", line):
            base = slug(heading[1])
            count = seen.get(base, 0)
            seen[base] = count + 1
            found.add(base if count == 0 else f"{base}-{count}")
        found.update(HTML_ANCHOR.findall(line))
    return frozenset(found)


def links(page: Path) -> list[tuple[int, str]]:
    """(line, target) of every relative link on ``page``."""
    found: list[tuple[int, str]] = []
    for number, line in prose(page.read_text(encoding="utf-8")):
        targets = INLINE.findall(line) + REFERENCE.findall(line)
        found.extend((number, target) for target in targets
                     if not re.match(r"^[a-z][a-z0-9+.-]*:", target, re.IGNORECASE))
    return found


def problem(page: Path, target: str) -> str | None:
    path, _, anchor = target.partition("#")
    file = (page.parent / unquote(path)).resolve() if path else page
    if not file.exists():
        return f"no file {path}"
    if path and ROOT not in file.parents and file != ROOT:
        return f"{path} is outside the repository"
    if anchor and file.suffix == ".md" and unquote(anchor).lower() not in anchors(file):
        return f"no heading #{anchor} in {path or 'this page'}"
    return None


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_every_relative_link_resolves(page: Path) -> None:
    broken = [f"line {number}: {target}: {why}" for number, target in links(page)
              if (why := problem(page, target))]
    assert not broken, "\n".join(broken)


def test_the_pages_are_found() -> None:
    names = {p.relative_to(ROOT).as_posix() for p in PAGES}
    assert {"README.md", "docs/CONTRIBUTING.md", "docs/guides/deploy.md",
            "examples/team_project/README.md"} <= names, names


@pytest.mark.parametrize(("heading", "anchor"), [
    ("Deploy in five steps", "deploy-in-five-steps"),
    ("Following runs: `raytpu runs`", "following-runs-raytpu-runs"),
    ("On GKE: notice, drain and restart", "on-gke-notice-drain-and-restart"),
    ("Pick the slice before you pay for it: `raytpu plan`", "pick-the-slice-before-you-pay-for-it-raytpu-plan"),
    ("Multi-slice training (DCN)", "multi-slice-training-dcn"),
])
def test_anchors_are_spelled_as_github_spells_them(heading: str, anchor: str) -> None:
    assert slug(heading) == anchor


def test_a_broken_link_and_a_missing_anchor_are_found(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text("# Title\n\n[ok](#title) [gone](#nope) [file](other.md) `[code](x.md)`\n\n"
                    "```\n[in](fence.md)\n```\n", encoding="utf-8")
    found = links(page)
    assert [t for _, t in found] == ["#title", "#nope", "other.md"]
    assert problem(page, "#title") is None
    assert problem(page, "#nope") == "no heading #nope in this page"
    assert problem(page, "other.md") == "no file other.md"
    (tmp_path / "other.md").write_text("## Other heading\n", encoding="utf-8")
    assert problem(page, "other.md#other-heading") == "other.md is outside the repository"
    assert problem(ROOT / "README.md", "docs/guides/deploy.md#the-steps") is None
    assert problem(ROOT / "README.md", "docs/guides/deploy.md#no-such-step") == \
        "no heading #no-such-step in docs/guides/deploy.md"


KIT_PATH = re.compile(r"`((?:raytpu|workloads|modules|stacks|tests|bench|examples)/[\w./-]+\.py)`")
HISTORY = {ROOT / "docs" / "FACTS-changelog.md"}
"""Pages that record what was, at the paths it had then."""


@pytest.mark.parametrize("page", [p for p in PAGES if p not in HISTORY], ids=lambda p: p.relative_to(ROOT).as_posix())
def test_every_module_path_a_page_names_exists(page: Path) -> None:
    """Issue 70: the package was regrouped (``raytpu/local/slice/``, ``workloads/support/``, ...); a page naming a
    module by its repository path (in backticks) names one that exists, so a newcomer following it lands on the file."""
    missing = sorted({m[1] for m in KIT_PATH.finditer(page.read_text()) if not (ROOT / m[1]).exists()})
    assert not missing, missing
