"""A run that cannot be placed says so (issue 67): the placement groups of a run's Ray job that stay pending, what
they ask and what the emulated slice has free, as one bounded line (:func:`waiting_line`). ``submit --local`` says it
through its stderr sink while the job runs (:func:`watching`); ``raytpu runs --local`` shows it beside a running run
(:func:`job_waits`).

Everything is read over the dashboard's HTTP state API, never ``ray.init`` (slow, and it would join the cluster):
Ray 2.60 ``ray.util.state.list_placement_groups(detail=True)`` (a group's ``state``, ``bundles`` with their
``unit_resources``, ``label_selector`` and, once placed, ``node_id``; ``stats.scheduling_state`` and
``stats.creation_request_received_ns``; ``creator_job_id``) and ``ray.util.state.list_nodes`` (``resources_total``,
``labels``). Ray 2.60's state API has no node's available resources (``NodeState`` has ``resources_total`` only; the
dashboard's ``/nodes?view=summary`` gives them as display strings, and only when its autoscaler reports), so a host's
free TPU and CPU are its total less the bundles placed groups hold on it: what the kit's programs and a team's
placement groups reserve (a task or actor outside any placement group is not counted).
Source: Ray 2.60 ``ray.util.state.common.PlacementGroupState``, ``NodeState``,
``ray.dashboard.state_aggregator.StateAPIManager.list_placement_groups`` (``PlacementGroupTableData`` as a dict)."""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol

from raytpu.core.common.errors import excerpt
from raytpu.core.tpu.plan import RAY_SLICE_LABEL, RAY_WORKER_LABEL
from raytpu.runs.run_list import age

if TYPE_CHECKING:
    from raytpu.local.slice.state import LocalCluster

Sink = Callable[[str], None]
Record = Mapping[str, Any]
"""A placement group or a node as the state API gives it, as a dict (``vars`` of its ``PlacementGroupState`` or
``NodeState``)."""

WAITING_STATES = ("PENDING", "RESCHEDULING")
"""A group not (or no longer wholly) placed. Source: Ray 2.60 ``PlacementGroupState.state``."""
HOLDING_STATES = ("CREATED", "RESCHEDULING")
"""A group whose placed bundles (``node_id`` set) hold their resources on that node."""
LOOK_S = 5.0
"""How often ``submit --local`` looks at its job's placement groups (one HTTP call)."""
SAY_AFTER_S = 20.0
"""How long a group waits before ``submit --local`` says so (a look every :data:`LOOK_S`: said within 25 s)."""
SAY_EVERY_S = 60.0
"""How often it says so again while the group stays pending."""
LIMIT = 300
"""About the most characters a line takes; what does not fit is counted (``+2 more slices``)."""
HTTP_TIMEOUT_S = 5
"""The state API's own bound on one request (its ``timeout``)."""
TPU = "TPU"
BYTES = ("memory", "object_store_memory")


def _number(value: float) -> str:
    """``4`` for 4.0, ``0.5`` for 0.5."""
    return str(int(value)) if float(value).is_integer() else f"{value:g}"


def _resources(asked: Mapping[str, float]) -> str:
    """``{TPU: 4, CPU: 1, memory: 2GiB}``: TPU and CPU first, then the rest by name."""
    order = sorted(asked, key=lambda name: (name != TPU, name != "CPU", name))
    shown = [f"{name}: {_number(asked[name] / 2**30) + 'GiB' if name in BYTES else _number(asked[name])}"
             for name in order]
    return "{" + ", ".join(shown) + "}"


def _spans(numbers: Iterable[int]) -> str:
    """``0-3,6``: sorted integers with runs of three or more as ranges."""
    ordered, parts = sorted(set(numbers)), []
    start = 0
    for i in range(1, len(ordered) + 1):
        if i == len(ordered) or ordered[i] != ordered[i - 1] + 1:
            run = ordered[start:i]
            parts.append(f"{run[0]}-{run[-1]}" if len(run) > 2 else ",".join(map(str, run)))
            start = i
    return ",".join(parts)


def _selectors(bundles: Sequence[Record]) -> str:
    """The bundles' label selectors: ``ray.io/tpu-slice-name=S`` for a value they share, ``key in 0,1`` for one
    that differs (at most three shown, the rest counted)."""
    values: dict[str, list[str]] = {}
    for bundle in bundles:
        for key, value in (bundle.get("label_selector") or {}).items():
            values.setdefault(str(key), [])
            if str(value) not in values[str(key)]:
                values[str(key)].append(str(value))
    shown = []
    for key, found in values.items():
        if len(found) == 1:
            shown.append(f"{key}={found[0]}")
        elif all(v.isdigit() for v in found):
            shown.append(f"{key} in {_spans(int(v) for v in found)}")
        else:
            shown.append(f"{key} in {','.join(found[:3])}" + (f" +{len(found) - 3}" if len(found) > 3 else ""))
    return " on " + ", ".join(shown) if shown else ""


def asks(group: Record) -> str:
    """What a group asks: ``4 bundles x {TPU: 4, CPU: 1} on ray.io/tpu-slice-name=S`` (bundles of one shape counted
    together, at most two shapes shown)."""
    bundles = list(group.get("bundles") or [])
    shapes: dict[str, int] = {}
    for bundle in bundles:
        shape = _resources(bundle.get("unit_resources") or {})
        shapes[shape] = shapes.get(shape, 0) + 1
    if not shapes:
        return "no bundles"
    parts = [f"{count} bundle{'s' if count > 1 else ''} x {shape}" for shape, count in list(shapes.items())[:2]]
    more = f" + {len(shapes) - 2} more shapes" if len(shapes) > 2 else ""
    return " + ".join(parts) + more + _selectors(bundles)


def waited_s(group: Record, now: float) -> float | None:
    """Seconds since the GCS received the group's creation request (wall clock); None when not recorded.
    Source: Ray 2.60 ``PlacementGroupStats.creation_request_received_ns`` (``PlacementGroupState.stats``)."""
    try:
        received = int((group.get("stats") or {}).get("creation_request_received_ns") or 0)
    except (TypeError, ValueError):
        return None
    return max(now - received / 1e9, 0.0) if received > 0 else None


def waiting_of(groups: Iterable[Record], job_id: str, now: float) -> list[Record]:
    """The job's groups in :data:`WAITING_STATES`, longest waiting first."""
    mine = [g for g in groups if str(g.get("creator_job_id", "")) == job_id and g.get("state") in WAITING_STATES]
    return sorted(mine, key=lambda g: -(waited_s(g, now) or 0.0))


def held(groups: Iterable[Record]) -> dict[str, dict[str, float]]:
    """What placed bundles hold, per node id: every bundle with a ``node_id`` of a group in :data:`HOLDING_STATES`."""
    holds: dict[str, dict[str, float]] = {}
    for group in groups:
        if group.get("state") not in HOLDING_STATES:
            continue
        for bundle in group.get("bundles") or []:
            node = str(bundle.get("node_id") or "")
            if node:
                on = holds.setdefault(node, {})
                for name, amount in (bundle.get("unit_resources") or {}).items():
                    on[name] = on.get(name, 0.0) + float(amount)
    return holds


def _free(total: Mapping[str, float], holds: Mapping[str, float], name: str) -> str:
    have = float(total.get(name, 0.0))
    return f"{_number(max(have - holds.get(name, 0.0), 0.0))}/{_number(have)}"


def free_hosts(nodes: Iterable[Record], groups: Iterable[Record], *, tpu: bool = True) -> list[str]:
    """What each emulated slice has free, one entry per slice: ``S hosts 0,1: TPU 4/4, CPU 2/2 each`` (hosts of
    the same free resources together), ``S: busy (TPU 0/4 each)`` when no host of it has a free chip. ``tpu``
    False (a group that asks no TPU) adds the other nodes: ``head: CPU 2/2``."""
    holds = held(groups)
    slices: dict[str, list[tuple[int, str, bool]]] = {}
    others = []
    for node in nodes:
        if node.get("state", "ALIVE") != "ALIVE":
            continue
        total, labels = node.get("resources_total") or {}, node.get("labels") or {}
        on = holds.get(str(node.get("node_id", "")), {})
        if not total.get(TPU):
            if not tpu and total.get("CPU"):
                others.append(f"{'head' if node.get('is_head_node') else 'node ' + str(node.get('node_id', ''))[:8]}"
                              f": CPU {_free(total, on, 'CPU')}")
            continue
        worker = str(labels.get(RAY_WORKER_LABEL, ""))
        chips = _free(total, on, TPU)
        slices.setdefault(str(labels.get(RAY_SLICE_LABEL) or "?"), []).append(
            (int(worker) if worker.isdigit() else -1, f"TPU {chips}, CPU {_free(total, on, 'CPU')}",
             chips.startswith("0/")))
    entries = []
    for name in sorted(slices):
        hosts = sorted(slices[name])
        if all(busy for _, _, busy in hosts):
            tpus = [free.split(",")[0] for _, free, _ in hosts]
            entries.append(f"{name}: busy ({tpus[0]} each)" if len(set(tpus)) == 1 and len(tpus) > 1
                           else f"{name}: busy ({', '.join(tpus)})")
            continue
        alike: dict[str, list[int]] = {}
        for host, free, _ in hosts:
            alike.setdefault(free, []).append(host)
        parts = [f"host{'s' if len(ids) > 1 else ''} {_spans(ids)}: {free}{' each' if len(ids) > 1 else ''}"
                 for free, ids in alike.items()]
        entries.append(f"{name} {'; '.join(parts)}")
    return entries + others


def waiting_line(group: Record, job_id: str, nodes: Iterable[Record], groups: Iterable[Record], now: float, *,
                 more: int = 0, limit: int = LIMIT) -> str:
    """``waiting 32s for placement group 8cfdcd0efa5c of job 03000000 (1 bundle x {TPU: 64}; Ray: INFEASIBLE):
    free: raytpu-local-v6e-8-0 hosts 0,1: TPU 4/4, CPU 2/2 each; raytpu-local-v6e-8-1: busy (TPU 0/4 each)``.
    The group is named by its name, else the first 12 characters of its id; ``more`` other pending groups of the job
    are counted; slices that do not fit in about ``limit`` characters are counted (``+1 more slice``)."""
    name = str(group.get("name") or "") or str(group.get("placement_group_id", ""))[:12]
    state = str((group.get("stats") or {}).get("scheduling_state") or group.get("state") or "?")
    waited = waited_s(group, now)
    others = f"; {more} more pending" if more else ""
    asked = asks(group)
    if len(asked) > limit // 2:  # the rest of the line says where it could go
        asked = asked[:limit // 2 - 3] + "..."
    head = (f"waiting {age(waited) if waited is not None else '?'} for placement group {name} of job {job_id} "
            f"({asked}; Ray: {state}{others})")
    wants_tpu = any((b.get("unit_resources") or {}).get(TPU) for b in group.get("bundles") or [])
    entries = free_hosts(nodes, groups, tpu=wants_tpu)
    if not entries:
        return f"{head}: free: no TPU host is alive"

    def left_out(left: int) -> str:
        return f"; +{left} more" + (f" slice{'s' if left > 1 else ''}" if wants_tpu else "") if left else ""

    room = limit - len(head) - len(": free: ")
    shown: list[str] = []
    for i, entry in enumerate(entries):
        if len("; ".join([*shown, entry])) + len(left_out(len(entries) - i - 1)) > room:
            break
        shown.append(entry)
    if not shown:  # not even the first fits whole: its start
        shown = [entries[0][:max(room - len(left_out(len(entries) - 1)) - 3, 0)] + "..."]
    return f"{head}: free: {'; '.join(shown)}{left_out(len(entries) - len(shown))}"


class StateSource(Protocol):
    """What a watch reads of the cluster (:class:`StateApi` over HTTP; a test's recorded dicts)."""

    def job_id(self, submission_id: str) -> str | None: ...

    def groups(self, job_id: str | None = None) -> Sequence[Record]: ...

    def nodes(self) -> Sequence[Record]: ...


class StateApi:
    """The dashboard's HTTP APIs of one cluster (its token spoken by the caller: :func:`speak_auth`). Source: Ray 2.60
    ``ray.util.state.list_placement_groups``, ``ray.util.state.list_nodes``, ``JobSubmissionClient.get_job_info``
    (``JobDetails.job_id``: None until the driver has connected)."""

    def __init__(self, dashboard: str) -> None:
        self.dashboard = dashboard
        self._jobs: Any = None

    def job_id(self, submission_id: str) -> str | None:
        if self._jobs is None:
            from ray.job_submission import JobSubmissionClient

            self._jobs = JobSubmissionClient(self.dashboard)
        return self._jobs.get_job_info(submission_id).job_id or None

    def groups(self, job_id: str | None = None) -> list[Record]:
        from ray.util.state import list_placement_groups

        found = list_placement_groups(address=self.dashboard, detail=True, timeout=HTTP_TIMEOUT_S,
                                      filters=[("creator_job_id", "=", job_id)] if job_id else None,
                                      raise_on_missing_output=False)
        return [dict(vars(group)) for group in found]

    def nodes(self) -> list[Record]:
        from ray.util.state import list_nodes

        return [dict(vars(node)) for node in list_nodes(address=self.dashboard, detail=True, timeout=HTTP_TIMEOUT_S,
                                                         raise_on_missing_output=False)]


def job_waits(source: StateSource, job_ids: Iterable[str], now: float | None = None) -> dict[str, str]:
    """``{job id: waiting line}`` for each of ``job_ids`` (running jobs) with a pending placement group: one look at
    every group, and at the nodes only when one waits."""
    at = time.time() if now is None else now
    wanted = set(job_ids)
    if not wanted:
        return {}
    groups = source.groups()
    waits = {job: found for job in wanted if (found := waiting_of(groups, job, at))}
    if not waits:
        return {}
    nodes = source.nodes()
    return {job: waiting_line(found[0], job, nodes, groups, at, more=len(found) - 1) for job, found in waits.items()}


class Watch:
    """Looks at one submission's pending placement groups every :data:`LOOK_S` (:meth:`look`) and says
    :func:`waiting_line` once its longest-waiting group has waited :data:`SAY_AFTER_S`, then every
    :data:`SAY_EVERY_S` while one stays pending. A failed look is skipped; the third in a row is said, once."""

    FAILS_SAID = 3

    def __init__(self, source: StateSource, submission_id: str, say: Sink, *, look_s: float = LOOK_S,
                 say_after_s: float = SAY_AFTER_S, say_every_s: float = SAY_EVERY_S,
                 clock: Callable[[], float] = time.time) -> None:
        self.source, self.submission_id, self.say = source, submission_id, say
        self.look_s, self.say_after_s, self.say_every_s, self.clock = look_s, say_after_s, say_every_s, clock
        self.job: str | None = None
        self.said_at: float | None = None
        self.fails = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def look(self) -> str | None:
        """One look: the line to say now, or None."""
        if self.job is None:
            self.job = self.source.job_id(self.submission_id)
            if self.job is None:  # the driver has not connected yet
                return None
        now = self.clock()
        waiting = waiting_of(self.source.groups(self.job), self.job, now)
        if not waiting:
            self.said_at = None
            return None
        if (waited_s(waiting[0], now) or 0.0) < self.say_after_s:
            return None
        if self.said_at is not None and now - self.said_at < self.say_every_s:
            return None
        line = waiting_line(waiting[0], self.job, self.source.nodes(), self.source.groups(), now,
                            more=len(waiting) - 1)
        self.said_at = now
        return line

    def _run(self) -> None:
        while not self._stop.wait(self.look_s):
            try:
                line = self.look()
            except Exception as exc:  # never into the submit: the run goes on, only its note is missed
                self.fails += 1
                if self.fails == self.FAILS_SAID and not self._stop.is_set():
                    self.say(f"{self.submission_id}: could not read its placement groups ({type(exc).__name__}: "
                             f"{excerpt(str(exc), 120)}); a pending one may go unsaid")
                continue
            self.fails = 0
            if line and not self._stop.is_set():
                self.say(f"{self.submission_id}: {line}")

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name=f"pending-{self.submission_id}", daemon=True)
        self._thread.start()

    def stop(self, timeout_s: float = 2.0) -> None:
        """Stops the looks; waits up to ``timeout_s`` for one under way (its thread is a daemon: never held on)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=timeout_s)


@contextlib.contextmanager
def watching(cluster: LocalCluster, submission_id: str, say: Sink) -> Iterator[Watch]:
    """A :class:`Watch` of ``submission_id`` on ``cluster`` while the block runs (the job is submitted and followed),
    stopped when it ends however it ends. It neither speaks the cluster's token nor loads Ray here: Ray reads its auth
    mode once, when it loads (:mod:`raytpu.local.slice.connection`), and the block's ``submit_job`` speaks the token and
    loads Ray first; the first look comes :data:`LOOK_S` later, and a block that ends sooner never looks."""
    watch = Watch(StateApi(cluster.dashboard), submission_id, say)
    watch.start()
    try:
        yield watch
    finally:
        watch.stop()
