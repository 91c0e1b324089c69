"""Where the minutes of a run go: its phases, from "applied" to the first training step or token.

A :class:`Recorder` stamps phases on the command's clock and takes stamps made elsewhere by wall time; its
:class:`Timeline` durations add up to ``wall_s``, and nothing is faked (docs/FACTS.md#spec-common).
Standard library only: the workloads import it inside the Ray job (it is part of the core zip).
"""

# No ``from __future__ import annotations``: NotRequired is read from evaluated annotations (see
# raytpu/core/common/report.py).
import json
import time
from collections.abc import Callable, Iterable, Mapping
from datetime import UTC, datetime
from typing import Any, NotRequired, TypedDict

PHASES: tuple[str, ...] = ("applied", "scheduled", "nodes_ready", "webhook_env", "ray_joined", "reserved",
                           "smoke_checked", "trainer_started", "compiled", "first_step", "finished")
"""Every phase of a run, in the order a run passes them."""

MEANING: dict[str, str] = {
    "applied": "the KubeRay object applied (locally: the job's driver started)",
    "scheduled": "every pod of the Ray cluster bound to a node (Pod condition PodScheduled), or still waiting "
                 "on capacity",
    "nodes_ready": "the TPU nodes under those pods Ready (Node condition Ready)",
    "webhook_env": "TPU_WORKER_ID and TPU_WORKER_HOSTNAMES on every host (the GKE TPU webhook sets them at "
                   "admission)",
    "ray_joined": "every host's Ray node alive with its slice labels (ray.io/tpu-slice-name, ray.io/tpu-worker-id)",
    "reserved": "the whole slice reserved (one placement-group bundle per host)",
    "smoke_checked": "the smoke check's verdicts read (raytpu demo checks the slice before it trains)",
    "trainer_started": "the trainer started up to its first compile: Ray Train's controller, the placement group, "
                       "the worker actors, the training function's imports and set-up (the time before its compiles)",
    "compiled": "XLA compilation before the first step (or its executables loaded from JAX's persistent "
                "compilation cache): exactly the seconds jax.monitoring timed, with cache hits and misses",
    "first_step": "the first training step, the first token, or the smoke check's first host result",
    "finished": "the run ended (result read)",
}

PREEMPTION_PHASES: tuple[str, ...] = ("notice", "checkpoint_at_notice", "killed", "replaced", "resumed", "finished")
"""The phases of a preempted training run, from the notice to the end of the run (``raytpu demo --preempt``)."""

PREEMPTION_MEANING: dict[str, str] = {
    "notice": "the host's notice: its Ray node draining for a preemption, as on SIGTERM (none for a crash)",
    "checkpoint_at_notice": "Ray Train saw the drain (ray.train.get_preemption_info) and the loop checkpointed",
    "killed": "the host killed (at the notice's end, or at once for a crash)",
    "replaced": "a replacement host registered (KubeRay recreates the pod)",
    "resumed": "the first training step after the restart, from the checkpoint it resumed",
    "finished": "the run ended (result read)",
}

MEASURED = "measured"
EMULATED = "emulated"
NOT_APPLICABLE = "not applicable"
NOT_REACHED = "not reached"
NOT_MEASURED = "not measured"
"""A phase the run may well have passed where no program of the kit's could see it (a team's own driver's)."""
STATUSES = (MEASURED, EMULATED, NOT_APPLICABLE, NOT_REACHED, NOT_MEASURED)

NO_TRAINER = "no trainer in this run: its program compiled without one (its start is in the phases before)"
OPTIONAL: dict[str, str] = {
    "smoke_checked": "no smoke check in this run (raytpu demo runs one before it trains)",
}
"""Phases only some runs have: one never reached is "not applicable" (with this detail), not "not reached"."""

MARK = "RAYTPU_TIMELINE"
"""Prefix of a workload's stamp lines, so a run that dies early still tells how far it got."""


class Stamp(TypedDict):
    """A phase reached, as one process saw it; ``wall`` is ``time.time()``, comparable across processes."""

    phase: str
    wall: float
    detail: str
    status: NotRequired[str]  # measured (default) or emulated


class Wait(TypedDict):
    """Why a phase was waited for: a Kubernetes Event's ``reason`` and ``message``, first seen and count."""

    reason: str
    message: str
    at_s: float | None
    count: int


class PhaseRow(TypedDict):
    """One phase of a :class:`Timeline`."""

    phase: str
    status: str  # one of STATUSES
    at_s: float | None  # seconds since the run's start when it was reached (None: not reached / not applicable)
    duration_s: float  # what it added: from the previous phase reached to this one (0 when it added nothing)
    detail: str
    waits: NotRequired[list[Wait]]


class Timeline(TypedDict):
    """The JSON form: ``started_at`` (UTC), ``wall_s`` and every phase in order, durations adding up to ``wall_s``."""

    started_at: str
    wall_s: float
    phases: list[PhaseRow]


def stamp(phase: str, detail: str, status: str = MEASURED, wall: float | None = None,
          phases: tuple[str, ...] = PHASES) -> Stamp:
    """A stamp of ``phase`` (one of ``phases``) now (or at ``wall``)."""
    if phase not in phases:
        raise ValueError(f"unknown phase {phase!r}; valid: {', '.join(phases)}")
    made: Stamp = {"phase": phase, "wall": round(time.time() if wall is None else wall, 3), "detail": detail}
    if status != MEASURED:
        made["status"] = status
    return made


def stamp_line(made: Mapping[str, Any]) -> str:
    """The line a workload prints for a stamp (:data:`MARK`)."""
    return f"{MARK} {json.dumps(dict(made), sort_keys=True, separators=(',', ':'))}"


def compile_started(compiled_wall: float, compile_s: float, detail: str) -> Stamp:
    """The ``trainer_started`` stamp of a trainer whose compiles (``compile_s`` in all, as ``jax.monitoring`` timed
    them) ended at ``compiled_wall``: placed ``compile_s`` before it, so ``compiled`` adds exactly the compile seconds
    and everything before them (controller, placement, actors, imports, set-up) is the trainer's start."""
    return stamp("trainer_started", detail, wall=compiled_wall - max(compile_s, 0.0))


def parse_stamp_lines(text: str) -> list[Stamp]:
    """Every stamp line in ``text`` (a log; a log prefix before the mark is fine), in order; bad lines skipped."""
    found: list[Stamp] = []
    for line in text.splitlines():
        _, mark, body = line.partition(f"{MARK} ")
        if not mark:
            continue
        try:
            data = json.loads(body)
        except json.JSONDecodeError:
            continue
        if isinstance(data, dict) and data.get("phase") in PHASES and isinstance(data.get("wall"), (int, float)):
            found.append(data)  # type: ignore[arg-type]
    return found


_command_start: tuple[float, float] | None = None


def command_started() -> None:
    """Notes that the command starts now, so :meth:`Recorder.for_command`'s ``wall_s`` includes imports."""
    global _command_start
    _command_start = (time.monotonic(), time.time())


def command_ended() -> None:
    """The command is over: a later recorder counts from its own creation."""
    global _command_start
    _command_start = None


class Recorder:
    """Collects a run's phases on the command's own clocks; the earliest time a phase was reached wins.

    ``monotonic`` measures the run; ``wall`` places stamps from other processes and Kubernetes
    (docs/FACTS.md#spec-common).
    """

    def __init__(self, monotonic: Callable[[], float] = time.monotonic, wall: Callable[[], float] = time.time,
                 start: tuple[float, float] | None = None, phases: tuple[str, ...] = PHASES) -> None:
        self.phases = phases  # PHASES, or PREEMPTION_PHASES; each ends with "finished"
        self._monotonic = monotonic
        self._wall = wall
        self.start_mono, self.start_wall = start or (monotonic(), wall())
        self._at: dict[str, float] = {}
        self._status: dict[str, str] = {}
        self._detail: dict[str, str] = {}
        self._waits: dict[str, list[Wait]] = {}
        self._unmeasured: dict[str, str] = {}

    @classmethod
    def for_command(cls) -> "Recorder":
        """A recorder counting from the command's start (:func:`command_started`), else from now."""
        return cls(start=_command_start)

    def elapsed(self) -> float:
        """Seconds since the run started (monotonic)."""
        return self._monotonic() - self.start_mono

    def mark(self, phase: str, detail: str, status: str = MEASURED) -> None:
        """``phase`` is reached now, as this process sees it."""
        self._set(phase, self.elapsed(), detail, status)

    def take(self, stamps: Iterable[Mapping[str, Any]]) -> None:
        """Stamps made elsewhere (a Ray driver, Kubernetes status), placed by their wall-clock time."""
        for made in stamps:
            self._set(str(made["phase"]), float(made["wall"]) - self.start_wall, str(made.get("detail", "")),
                      str(made.get("status") or MEASURED))

    def absent(self, phase: str, why: str) -> None:
        """``phase`` does not exist in this run (the emulated slice has no Kubernetes scheduler): said, not faked."""
        self._check(phase)
        self._status[phase] = NOT_APPLICABLE
        self._detail[phase] = why
        self._at.pop(phase, None)

    def note(self, phase: str, detail: str) -> None:
        """Says why ``phase`` has no time, when nothing reached it (a phase this run does not measure)."""
        self._check(phase)
        if phase not in self._status:
            self._detail[phase] = detail

    def unmeasured(self, phases: Mapping[str, str]) -> None:
        """Phases this run's program does not stamp (phase -> why): unless a stamp reaches one, it is "not measured",
        not "not reached"."""
        for phase, why in phases.items():
            self._check(phase)
            self._unmeasured[phase] = why

    def waited(self, phase: str, waits: Iterable[Wait]) -> None:
        """Why ``phase`` was waited for (capacity events), kept beside it whether or not it was reached."""
        self._check(phase)
        known = self._waits.setdefault(phase, [])
        for wait in waits:
            same = [w for w in known if (w["reason"], w["message"]) == (wait["reason"], wait["message"])]
            if same:
                same[0]["count"] = max(same[0]["count"], wait["count"])
            else:
                known.append(dict(wait))  # type: ignore[arg-type]

    def finish(self, detail: str = "") -> Timeline:
        """The timeline, with ``finished`` stamped now: every phase in order, durations adding up to ``wall_s``."""
        wall_s = self.elapsed()
        self._set("finished", wall_s, detail or MEANING["finished"], MEASURED)
        rows: list[PhaseRow] = []
        previous = 0.0
        for phase in self.phases:
            if phase in OPTIONAL and phase not in self._status:
                self.absent(phase, self._detail.get(phase) or OPTIONAL[phase])
            if phase == "trainer_started" and phase not in self._status and "compiled" in self._at:
                self.absent(phase, NO_TRAINER)  # a program compiled without a trainer (the smoke check)
            if phase not in self._status and phase in self._unmeasured:
                self._status[phase], self._detail[phase] = NOT_MEASURED, self._unmeasured[phase]
            status = self._status.get(phase, NOT_REACHED)
            at = self._at.get(phase)
            row: PhaseRow = {"phase": phase, "status": status, "at_s": None if at is None else round(at, 3),
                             "duration_s": 0.0, "detail": self._detail.get(phase, "")}
            if at is not None:
                reached = min(max(at, previous), wall_s)  # reached before the previous one (or the run): adds nothing
                row["duration_s"] = round(reached - previous, 3)
                previous = reached
            if phase in self._waits:
                row["waits"] = self._waits[phase]
            rows.append(row)
        return {"started_at": datetime.fromtimestamp(self.start_wall, UTC).isoformat(timespec="seconds"),
                "wall_s": round(wall_s, 3), "phases": rows}

    def _check(self, phase: str) -> None:
        if phase not in self.phases:
            raise ValueError(f"unknown phase {phase!r}; valid: {', '.join(self.phases)}")

    def _set(self, phase: str, at: float, detail: str, status: str) -> None:
        self._check(phase)
        if self._status.get(phase) == NOT_APPLICABLE or (phase in self._at and self._at[phase] <= at):
            return
        self._at[phase] = at
        self._status[phase] = status if status in STATUSES else MEASURED
        self._detail[phase] = detail


def _seconds(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}s"


def render(timeline: Mapping[str, Any], title: str = "where the minutes went") -> str:
    """The timeline as a table: phase, when reached, what it added, its share of the run, and what happened."""
    wall = float(timeline.get("wall_s") or 0.0)
    rows = [["phase", "at", "took", "share", "status", "detail"]]
    for row in timeline.get("phases") or []:
        took = float(row.get("duration_s") or 0.0)
        reached = row.get("at_s") is not None
        at = row.get("at_s")
        shown_at = "-" if at is None else ("before" if at < 0 else _seconds(at))
        rows.append([str(row.get("phase")), shown_at, _seconds(took) if reached else "-",
                     f"{100 * took / wall:.0f}%" if reached and wall > 0 else "-", str(row.get("status", "")),
                     str(row.get("detail", ""))])
        for wait in row.get("waits") or []:
            times = f" x{wait['count']}" if wait.get("count", 1) > 1 else ""
            rows.append(["", _seconds(wait.get("at_s")), "", "", "waiting",
                         f"{wait.get('reason')}{times}: {str(wait.get('message', ''))[:160]}"])
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines = [f"{title} ({_seconds(wall)} from {timeline.get('started_at', '?')}):"]
    for j, r in enumerate(rows):
        lines.append("  " + "  ".join(c.ljust(widths[i]) for i, c in enumerate(r)).rstrip())
        if j == 0:
            lines.append("  " + "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def render_markdown(timelines: Mapping[str, Mapping[str, Any]]) -> str:
    """Timelines (by run name) as Markdown tables, for a CI job summary; empty when there are none."""
    parts = []
    for name, timeline in timelines.items():
        wall = float(timeline.get("wall_s") or 0.0)
        parts += ["", f"`{name}`: where the {wall:.0f} s went", "", "| phase | at | took | status | detail |",
                  "|---|---|---|---|---|"]
        for row in timeline.get("phases") or []:
            reached = row.get("at_s") is not None
            detail = str(row.get("detail", ""))
            for wait in row.get("waits") or []:
                detail += f"; waiting: {wait.get('reason')}: {str(wait.get('message', ''))[:160]}"
            detail = detail.replace("|", "\\|").replace("\n", " ")
            parts.append(f"| {row.get('phase')} | {_seconds(row.get('at_s')) if reached else '-'} | "
                         f"{_seconds(row.get('duration_s')) if reached else '-'} | {row.get('status')} | {detail} |")
    return "\n".join(parts) + ("\n" if parts else "")
