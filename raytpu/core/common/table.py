"""Aligned plain-text tables: one renderer for every command that prints rows (smoke verdicts, ``local status``,
the LLM client). Standard library only; in the jobs' core zip, since :mod:`raytpu.core.common.report` uses it."""

from __future__ import annotations

from collections.abc import Sequence


def text_table(rows: Sequence[Sequence[str]], rule: bool = True) -> list[str]:
    """Rows (the first is the header) as aligned text lines; ``rule`` underlines the header."""
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    lines = []
    for j, row in enumerate(rows):
        lines.append("  ".join(cell.ljust(widths[i]) for i, cell in enumerate(row)).rstrip())
        if j == 0 and rule:
            lines.append("  ".join("-" * w for w in widths))
    return lines
