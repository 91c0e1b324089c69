"""The runs ``raytpu runs`` lists, on either side: :class:`Run` rows as a table or JSON, looked up by name (exit 2)."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from typing import Any

from raytpu.core.common import errors
from raytpu.core.common.table import text_table
from raytpu.core.specs.spec import WORKLOAD_ENV


@dataclass(frozen=True)
class Run:
    """One run: ``run`` its name (RayJob/RayService, or local submission id), ``object`` what holds it, ``kind`` (the
    ``raytpu.dev/workload`` label), ``workload`` the config's, ``state`` as its owner reports it."""

    run: str
    object: str
    kind: str
    workload: str
    slice: str
    state: str
    age_s: float | None
    started_at: str
    done: bool = False
    overrides: dict[str, Any] | None = None
    """What ``raytpu submit --set`` changed for this run (``{KEY: value}``), read from :data:`OVERRIDES_KEY`."""
    waiting_for: str | None = None
    """A running run's placement group that is not placed: what it waits for and what is free (one line, the
    emulated slice's :func:`raytpu.local.running.pending.waiting_line`), or a team's run Kueue has not admitted: its
    queue, position, priority and Kueue's reason (:class:`raytpu.cluster.queues.Queued`); None when nothing of it
    waits."""
    queue: dict[str, Any] | None = None
    """A team's run: ``{queue, priority, position, waiting, why}`` (position null once admitted)."""


OVERRIDES_KEY = "raytpu.dev/overrides"
"""Where a run records its ``--set`` overrides as JSON: a RayJob's annotation, a local job's metadata
(:mod:`raytpu.config.overrides` writes it)."""


def carried_overrides(recorded: Mapping[str, object] | None) -> dict[str, object] | None:
    """The ``--set`` overrides recorded under :data:`OVERRIDES_KEY`; None when none (or unreadable)."""
    try:
        found = json.loads(str((recorded or {}).get(OVERRIDES_KEY) or "null"))
    except ValueError:
        return None
    return found if isinstance(found, dict) else None


def iso(seconds: float | None) -> str:
    """``2026-12-04T15:52:41Z`` of a Unix time; ``""`` for None."""
    return "" if seconds is None else datetime.fromtimestamp(seconds, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def unix(stamp: str) -> float | None:
    """The Unix time of a Kubernetes timestamp (``2026-12-04T15:52:41Z``); None when absent or unreadable."""
    try:
        return datetime.strptime(stamp, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC).timestamp()
    except (TypeError, ValueError):
        return None


def carried_spec(env_vars: Mapping[str, object] | None) -> dict[str, object]:
    """The ``RAYTPU_WORKLOAD`` spec a run was given, as JSON; {} when absent or unreadable. Read leniently (no
    ``WorkloadSpec``): a listing shows runs of any kind, also one this version does not know."""
    try:
        spec = json.loads(str((env_vars or {}).get(WORKLOAD_ENV) or "{}"))
    except ValueError:
        return {}
    return spec if isinstance(spec, dict) else {}


def age(seconds: float | None) -> str:
    """``42s``, ``7m``, ``3h``, ``2d``: how ``kubectl get`` shows an age; ``-`` when unknown."""
    if seconds is None:
        return "-"
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= 2 * size:
            return f"{int(seconds // size)}{unit}"
    return f"{max(int(seconds), 0)}s"


def render(runs: Sequence[Run], as_json: bool, usage: Sequence[str] = ()) -> str:
    """The runs as ``{"runs": [...]}`` JSON (``usage`` added when given), or as a table (``no runs`` when there is
    none) with a line beneath it for each run that waits (``RUN: waiting ...``) and the queue's ``usage`` lines."""
    if as_json:
        return json.dumps({"runs": [_shown(r) for r in runs], **({"usage": list(usage)} if usage else {})},
                          indent=2)
    if not runs:
        return "\n".join(["no runs", *usage])
    rows = [["RUN", "OBJECT", "KIND", "WORKLOAD", "SLICE", "STATE", "AGE"]]
    rows += [[r.run, r.object, r.kind or "-", r.workload or "-", r.slice or "-", r.state or "-", age(r.age_s)]
             for r in runs]
    notes = [f"{r.run}: {r.waiting_for}" for r in runs if r.waiting_for]  # too long for a column: beneath
    notes += list(usage)
    return "\n".join([*text_table(rows), *(["", *notes] if notes else [])])


def _shown(run: Run) -> dict[str, object]:
    """A run as JSON: ``overrides`` only for a run that had some, ``waiting_for`` only for one that waits (a run
    without keeps the keys it always had)."""
    out = asdict(run)
    for key in ("overrides", "waiting_for", "queue"):
        if out[key] is None:
            del out[key]
    return out


def pick(runs: Sequence[Run], name: str) -> Run:
    """The run called ``name``; InvalidInput (exit 2) naming it and listing the known runs."""
    for found in runs:
        if found.run == name:
            return found
    raise errors.invalid_choice("RUN", name, [r.run for r in runs] or ["(no runs)"], " (no such run here)")
