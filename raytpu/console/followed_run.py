"""What a followed run prints and writes, on a stack or the emulated slice alike: the command's
:class:`raytpu.runs.following.Streams` (the driver's log and progress printed as they come) and, at the run's end, the
timeline as a table and a JSON report."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from raytpu.core.common import errors, report, timeline
from raytpu.core.common.train_result import parse_result
from raytpu.runs.following import FollowedRun, Streams

if TYPE_CHECKING:
    from raytpu.core.common.timeline import Timeline


def streams(report_path: str | None, overridden: dict[str, Any] | None = None) -> Streams:
    """What ``raytpu submit`` prints a submission's lines with; the run's end shows its timeline (and its train
    result) and writes it to ``report_path``, with ``overridden`` (``--set``) under ``"overrides"`` when given."""

    def ended(run: FollowedRun) -> None:
        extra = team_result(list(run.log)) | ({"overrides": overridden} if overridden else {})
        show_timeline(run.timeline, run.name, report_path, run.problem, extra)

    return Streams(out=lambda line: print(line, flush=True),
                   err=lambda line: print(line, file=sys.stderr, flush=True), ended=ended)


COMPILE_KEYS = ("compile", "compile_attempts", "compile_budget_s", "compile_over_budget", "compile_warning")
"""What a train summary says of its starts' compiles (``workloads/train.py`` ``compile_verdict``)."""


def team_result(lines: list[str]) -> dict[str, Any]:
    """What a training run reported in its ``RAYTPU_TRAIN_RESULT`` line (empty for other runs): a team's run's
    ``{"train": {...}}`` (train_loop, ok, metrics, checkpoint, reports, attempts, error?) and :data:`COMPILE_KEYS`."""
    summary = parse_result("\n".join(lines)) or {}
    keys = ("train_loop", "ok", "metrics", "checkpoint", "reports", "attempts", "error") if "train_loop" in summary \
        else ()
    found = {key: summary[key] for key in (*keys, *COMPILE_KEYS) if key in summary}
    if found.get("compile_warning"):
        print(f"warning: {found['compile_warning']}", file=sys.stderr)
    return {"train": found} if found else {}


def show_timeline(run: Timeline, name: str, path: str | None, problem: str | None,
                  extra: dict[str, Any] | None = None) -> None:
    """Prints the run's timeline as a table (stderr: stdout carries the driver's log) and writes it as JSON to
    ``path`` (``{"run", "timeline"}``, plus ``extra``: a team's ``train_loop`` results)."""
    print(timeline.render(run, f"{name}: where the minutes went"), file=sys.stderr)
    if problem:
        print(f"warning: timeline: the last look at {name}'s pods failed ({problem})", file=sys.stderr)
    if path:
        try:
            Path(path).parent.mkdir(parents=True, exist_ok=True)
            document = {"format": report.FORMAT, "run": name, "timeline": run, **(extra or {})}
            Path(path).write_text(json.dumps(document, indent=2, sort_keys=True) + "\n")
        except OSError as exc:
            raise errors.RuntimeFailure(f"--report: cannot write {path!r} ({exc.strerror})",
                                        "a writable file path") from exc
