"""What a followed run hands the command that shows it (issue 43: library code returns what the command prints):
the lines it streams as they come, and at its end, success or not, what it found."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from raytpu.core.common import report

if TYPE_CHECKING:
    from raytpu.core.common.report import Verdict
    from raytpu.core.common.timeline import Timeline
    from raytpu.core.specs.kinds import WorkloadKind

Sink = Callable[[str], None]


@dataclass(frozen=True)
class FollowedRun:
    """A run's timeline, the last look's failure (if any) and the driver's log as followed."""

    name: str
    timeline: Timeline
    problem: str | None
    log: tuple[str, ...]


@dataclass(frozen=True)
class Streams:
    """Where a submission's lines go as they come: ``out`` the driver's log and the answers (stdout), ``err`` the
    progress (stderr); ``ended`` gets the followed run before the command's exit (also when the run failed)."""

    out: Sink
    err: Sink
    ended: Callable[[FollowedRun], None]

    def keeping(self, lines: list[str]) -> Sink:
        """A log sink that streams each driver line to ``out`` and keeps it (for its verdicts and stamps)."""

        def take(line: str) -> None:
            lines.append(line)
            self.out(line)

        return take

    def verdicts(self, kind: WorkloadKind, lines: list[str]) -> list[Verdict]:
        """A checking job's verdicts, streamed as ``raytpu smoke``'s table; none for other kinds."""
        if not kind.checks:
            return []
        found = report.parse_verdict_lines("\n".join(lines))
        self.out(report.render_table(found))
        return found
