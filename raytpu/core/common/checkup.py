"""The rows ``raytpu doctor`` prints: one :class:`Check` per thing looked at (what was found, what the kit expects, the
fix), as a text table or the stable JSON the nightly job keeps. Standard library only: the cluster and the emulated
slice (``--local``) build the same rows."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from raytpu.core.common.table import text_table

FORMAT = 1
"""Version of the JSON document (:func:`to_json`); a key is added, never renamed."""
MARKS = {"ok": "✓", "fail": "✗", "unknown": "?"}
"""A row's state and its mark: holds, fails, could not be read (a forbidden list: the permission is the fix)."""
KEYS = ("check", "state", "mark", "found", "expected", "fix")
"""The keys of each row in the JSON (docs/DESIGN.md, CLI contract)."""


@dataclass(frozen=True)
class Check:
    """One row: ``check`` (what was looked at), ``state`` (ok, fail, unknown), ``found``, ``expected``, ``fix``."""

    check: str
    state: str
    found: str
    expected: str
    fix: str = ""

    @property
    def mark(self) -> str:
        return MARKS[self.state]

    def to_json(self) -> dict[str, str]:
        return {"check": self.check, "state": self.state, "mark": self.mark, "found": self.found,
                "expected": self.expected, "fix": self.fix}


def ok(check: str, found: str, expected: str) -> Check:
    return Check(check, "ok", found, expected)


def fail(check: str, found: str, expected: str, fix: str) -> Check:
    return Check(check, "fail", found, expected, fix)


def unknown(check: str, found: str, expected: str, fix: str) -> Check:
    return Check(check, "unknown", found, expected, fix)


def exit_code(checks: Iterable[Check]) -> int:
    """0 when every check holds (an unread one does not fail the run: it is shown ``?`` with its fix), 1 when one
    fails."""
    return 1 if any(c.state == "fail" for c in checks) else 0


def render(checks: Sequence[Check], width: int = 60) -> str:
    """The table: check, mark, found, expected, fix (long cells cut at ``width`` with ``...``; ``--json`` has them
    whole)."""
    def cut(text: str) -> str:
        return text if len(text) <= width else text[:width - 3] + "..."

    rows = [["check", "", "found", "expected", "fix"]]
    rows += [[c.check, c.mark, cut(c.found), cut(c.expected), cut(c.fix)] for c in checks]
    return "\n".join(text_table(rows)) + "\n"


def to_json(checks: Sequence[Check], target: str, where: Mapping[str, Any]) -> dict[str, Any]:
    """The document ``--json`` prints and ``--report`` writes: ``format``, ``doctor`` (cluster or local), the target's
    names (``stack`` or ``dir``), ``ok``, ``counts`` per state and ``checks`` (rows with :data:`KEYS`)."""
    counts = {state: sum(c.state == state for c in checks) for state in MARKS}
    return {"format": FORMAT, "doctor": target, **where, "ok": exit_code(checks) == 0, "counts": counts,
            "checks": [c.to_json() for c in checks]}


def rows_of(document: Mapping[str, Any]) -> list[Check]:
    """The rows of a saved document (what the report page shows); rows it cannot read are skipped."""
    found = []
    for row in document.get("checks") or []:
        if isinstance(row, Mapping) and row.get("state") in MARKS:
            found.append(Check(*(str(row.get(k, "")) for k in ("check", "state", "found", "expected", "fix"))))
    return found
