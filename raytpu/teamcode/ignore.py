"""gitignore matching, for the ``.gitignore`` and ``.raytpuignore`` files of a team's code folder.

The rules git applies, read from its documentation (https://git-scm.com/docs/gitignore, "PATTERN FORMAT") and checked
against ``git check-ignore`` on the same tree (tests/test_code_secrets.py): blank lines and ``#`` comments are
skipped, trailing unescaped spaces dropped, ``\\`` escapes a character; ``!`` re-includes; a trailing ``/`` matches
folders only; a ``/`` at the start or in the middle anchors the pattern to the file's folder, else it matches at any
depth; ``*`` and ``?`` never match ``/``; ``**/`` at the start, ``/**/`` in the middle and ``/**`` at the end span
folders; the last matching line wins, a deeper file's lines after a shallower's; and a file under an ignored folder
cannot be re-included (the walk never enters it). Case-sensitive, as git on Linux.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

MAX_IGNORE_BYTES = 256 * 1024


@dataclass(frozen=True)
class Rule:
    """One pattern line: its regex over the path relative to its file's folder (``base``: that folder relative to the
    code folder, ``""`` at its top or above; ``prefix``: the code folder relative to a file above it), whether it
    re-includes, whether it matches folders only."""

    base: str
    regex: re.Pattern[str]
    negated: bool
    dir_only: bool
    source: str
    prefix: str = ""

    def matches(self, rel: str, is_dir: bool) -> bool:
        if self.dir_only and not is_dir:
            return False
        if self.prefix:
            rel = f"{self.prefix}/{rel}"
        if self.base:
            if not rel.startswith(self.base + "/"):
                return False
            rel = rel[len(self.base) + 1:]
        return self.regex.fullmatch(rel) is not None


def parse(text: str, base: str = "", source: str = ".gitignore", prefix: str = "") -> list[Rule]:
    """The rules of one ignore file found in folder ``base`` (relative to the code folder)."""
    rules = []
    for raw in text.splitlines():
        line = _strip_trailing_spaces(raw)
        if not line or line.startswith("#"):
            continue
        negated = line.startswith("!")
        if negated:
            line = line[1:]
        dir_only = line.endswith("/") and not line.endswith("\\/")
        if dir_only:
            line = line.rstrip("/")
        if not line:
            continue
        anchored = "/" in line
        line = line.removeprefix("/")
        body = _translate(line)
        rules.append(Rule(base, re.compile(body if anchored else f"(?:.*/)?{body}", re.DOTALL), negated, dir_only,
                          source, prefix))
    return rules


def _strip_trailing_spaces(line: str) -> str:
    stripped = line.rstrip(" ")
    if stripped.endswith("\\") and len(stripped) < len(line):  # "a\ " keeps its escaped space
        return stripped + " "
    return stripped


def _translate(pattern: str) -> str:
    """A gitignore glob as a regex (wildmatch with WM_PATHNAME: no wildcard but ``**`` crosses ``/``)."""
    out, i, n = [], 0, len(pattern)
    while i < n:
        c = pattern[i]
        at_start = i == 0 or pattern[i - 1] == "/"
        if pattern.startswith("**", i) and at_start and (i + 2 == n or pattern[i + 2] == "/"):
            if i + 2 == n:
                out.append(".*")
                i = n
            else:
                out.append("(?:.*/)?")
                i += 3
            continue
        if c == "*":
            while i < n and pattern[i] == "*":
                i += 1
            out.append("[^/]*")
            continue
        if c == "?":
            out.append("[^/]")
        elif c == "\\" and i + 1 < n:
            i += 1
            out.append(re.escape(pattern[i]))
        elif c == "[":
            end, cls = _bracket(pattern, i)
            if end < 0:
                out.append(re.escape(c))
            else:
                out.append(cls)
                i = end
        else:
            out.append(re.escape(c))
        i += 1
    return "".join(out)


def _bracket(pattern: str, start: int) -> tuple[int, str]:
    """A ``[...]`` class from ``start``: (index of its ``]``, its regex), or (-1, "") when it never closes."""
    i = start + 1
    negate = i < len(pattern) and pattern[i] in "!^"
    if negate:
        i += 1
    items: list[str] = []
    first = True
    while i < len(pattern):
        c = pattern[i]
        if c == "]" and not first:
            body = "".join(items)
            return i, f"[^/{body}]" if negate else f"(?!/)[{body}]"
        first = False
        if c == "\\" and i + 1 < len(pattern):
            i += 1
            c = pattern[i]
        if c == "-" and items and i + 1 < len(pattern) and pattern[i + 1] != "]":
            items.append("-")
        else:
            items.append(re.escape(c) if c not in "-" else "\\-")
        i += 1
    return -1, ""


def decision(rules: list[Rule], rel: str, is_dir: bool) -> Rule | None:
    """The last rule matching ``rel`` (the one git obeys), or None when none does."""
    found = None
    for rule in rules:
        if rule.matches(rel, is_dir):
            found = rule
    return found


def read_rules(folder: Path, base: str, name: str, prefix: str = "") -> list[Rule]:
    """The rules of ``folder/name`` if it is a readable file (bounded, UTF-8 with replacement); else none."""
    path = folder / name
    try:
        if not path.is_file():
            return []
        with path.open("rb") as handle:
            text = handle.read(MAX_IGNORE_BYTES).decode("utf-8", "replace")
    except OSError:
        return []
    return parse(text, base, str(path) if prefix else f"{base + '/' if base else ''}{name}", prefix)


def project_rules(root: Path) -> list[Rule]:
    """The ``.gitignore`` files of the folders above ``root`` up to its git work tree's top (the folder holding
    ``.git``), outermost first; none when ``root`` is in no git work tree."""
    real = root.resolve()
    above = list(real.parents)
    top = next((i for i, folder in enumerate(above) if (folder / ".git").exists()), None)
    if top is None or (real / ".git").exists():
        return []
    rules: list[Rule] = []
    for folder in reversed(above[:top + 1]):
        rules += read_rules(folder, "", ".gitignore", real.relative_to(folder).as_posix())
    return rules
