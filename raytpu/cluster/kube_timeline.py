"""The phases of a run Kubernetes knows, from object status and events (the server's times, never our clock):
``scheduled`` (every Ray pod's ``PodScheduled``; pending pods' events say why not), ``nodes_ready`` (TPU pods' nodes
``Ready``), ``webhook_env`` (TPU pods' ``TPU_WORKER_*`` env, at creation). Source:
docs/FACTS.md#client-kube-timeline."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable, Mapping
from datetime import datetime
from typing import Any

from raytpu.cluster import queues
from raytpu.cluster.kube.kube_client import KubeClient
from raytpu.cluster.kube.kube_errors import KubeError
from raytpu.cluster.occupancy import SCHEDULING_REASONS, pods_of, requests_tpu
from raytpu.core.common.errors import excerpt
from raytpu.core.common.timeline import Recorder, Stamp, Wait, stamp
from raytpu.core.manifests import kueue

NODE_TYPE_LABEL = "ray.io/node-type"
"""KubeRay's label on every Ray pod: ``head`` or ``worker`` (``utils/constant.go`` RayNodeTypeLabelKey, v1.7.0)."""
CAPACITY_REASONS = (*SCHEDULING_REASONS, "TriggeredScaleUp")
"""Event reasons that say a pod waits on capacity, or that capacity is coming (the autoscaler scaling up)."""
WEBHOOK_ENV = ("TPU_WORKER_ID", "TPU_WORKER_HOSTNAMES")
EVENT_PODS_PER_LOOK = 4
"""Pending pods whose events one look reads (they wait for the same reasons): a 64-host slice costs a few requests per
look."""
THREAD_PREFIX = "raytpu-timeline-"
POLL_S = 5.0
FIRST_WAIT_NOTE_S, WAIT_NOTE_EVERY_S = 20.0, 60.0
"""A run whose pods still wait for a node after 20 s says what for, then once a minute (issue 67 item 5)."""
"""How often :class:`KubePhases` looks while a run goes on (the times come from the server, not from the poll)."""


def parse_time(value: Any) -> float | None:
    """A Kubernetes ``Time`` (``2026-01-01T00:00:00Z``) or ``MicroTime`` (``...00.123456Z``) as epoch seconds."""
    if not value or not isinstance(value, str):
        return None
    try:
        return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def condition_time(obj: Mapping[str, Any], kind: str) -> float | None:
    """``lastTransitionTime`` of the object's condition ``kind`` when its status is ``"True"``, else None."""
    for condition in (obj.get("status") or {}).get("conditions") or []:
        if condition.get("type") == kind and str(condition.get("status")) == "True":
            return parse_time(condition.get("lastTransitionTime"))
    return None


def event_wait(event: Mapping[str, Any]) -> tuple[Wait, float | None]:
    """An event as a :class:`raytpu.core.common.timeline.Wait` (``at_s`` left None) and its wall-clock time."""
    series = event.get("series") or {}
    when = parse_time(event.get("eventTime")) or parse_time(event.get("firstTimestamp")) or parse_time(
        event.get("lastTimestamp")) or parse_time((event.get("metadata") or {}).get("creationTimestamp"))
    count = int(event.get("count") or series.get("count") or 1)
    return {"reason": str(event.get("reason", "")), "message": str(event.get("message", "")).strip()[:300],
            "at_s": None, "count": count}, when


def webhook_env_of(pod: Mapping[str, Any]) -> dict[str, str]:
    """The webhook's variables in the pod's containers' ``env`` (first container that has each)."""
    found: dict[str, str] = {}
    for container in (pod.get("spec") or {}).get("containers") or []:
        for item in container.get("env") or []:
            if item.get("name") in WEBHOOK_ENV and "value" in item:
                found.setdefault(str(item["name"]), str(item["value"]))
    return found


def expected_pods(manifest: Mapping[str, Any]) -> tuple[int, int]:
    """``(Ray pods, TPU hosts)`` of a RayJob's (or RayService's) cluster: one head plus, per worker group, ``replicas``
    x ``numOfHosts``. Source: KubeRay v1.7.0 CRD ``workerGroupSpecs``."""
    spec = manifest.get("spec") or {}
    cluster = spec.get("rayClusterSpec") or spec.get("rayClusterConfig") or {}
    hosts = sum(int(g.get("replicas", 1)) * int(g.get("numOfHosts", 1)) for g in cluster.get("workerGroupSpecs") or [])
    return 1 + hosts, hosts


def phases_from(pods: Iterable[Mapping[str, Any]], nodes: Mapping[str, Mapping[str, Any]],
                events: Mapping[str, Iterable[Mapping[str, Any]]], ray_pods: int, tpu_hosts: int,
                multi_host: bool) -> tuple[list[Stamp], list[tuple[Wait, float | None]]]:
    """The stamps the objects prove and the pending pods' capacity waits; ``events`` by pod, ``nodes`` by node name. A
    phase is reached once all ``ray_pods``/``tpu_hosts`` (:func:`expected_pods`) show it."""
    pods = [p for p in pods if NODE_TYPE_LABEL in ((p.get("metadata") or {}).get("labels") or {})]
    made: list[Stamp] = []
    scheduled = [condition_time(p, "PodScheduled") for p in pods]
    if len(pods) >= ray_pods and all(t is not None for t in scheduled):
        made.append(stamp("scheduled", f"{len(pods)} Ray pod(s) bound to nodes (PodScheduled)",
                          wall=max(t for t in scheduled if t is not None)))
    tpu = [p for p in pods if requests_tpu(p)]
    ready = [condition_time(nodes[name], "Ready") for name in
             {str((p.get("spec") or {}).get("nodeName")) for p in tpu} if name in nodes]
    if tpu_hosts and len(tpu) >= tpu_hosts and len(ready) >= len({(p.get("spec") or {}).get("nodeName")
                                                                  for p in tpu}) and all(ready):
        made.append(stamp("nodes_ready", f"{len(ready)} TPU node(s) Ready",
                          wall=max(t for t in ready if t is not None)))
    wanted = WEBHOOK_ENV if multi_host else WEBHOOK_ENV[:1]
    envs = [webhook_env_of(p) for p in tpu]
    created = [parse_time((p.get("metadata") or {}).get("creationTimestamp")) for p in tpu]
    if tpu_hosts and len(tpu) >= tpu_hosts and all(all(k in e for k in wanted) for e in envs) and all(created):
        ids = sorted(e["TPU_WORKER_ID"] for e in envs)
        made.append(stamp("webhook_env", f"{' and '.join(wanted)} on {len(tpu)}/{tpu_hosts} TPU pod(s) "
                                         f"(TPU_WORKER_ID {', '.join(ids)})",
                          wall=max(t for t in created if t is not None)))
    waits = []
    for pod in pods:
        name = str((pod.get("metadata") or {}).get("name", ""))
        for event in events.get(name) or []:
            if event.get("reason") in CAPACITY_REASONS:
                waits.append(event_wait(event))
    return made, waits


class KubePhases:
    """Looks at a RayJob's pods, nodes and pending pods' events every :data:`POLL_S` in a thread (and at :meth:`stop`),
    keeping each phase's earliest time: KubeRay deletes the pods once the job ends (``shutdownAfterJobFinishes``)."""

    def __init__(self, client: KubeClient, job_name: str, manifest: Mapping[str, Any], multi_host: bool,
                 poll_s: float | None = None, progress: Callable[[str], None] | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.client = client
        self.job_name = job_name
        self.ray_pods, self.tpu_hosts = expected_pods(manifest)
        self.kind = str(manifest.get("kind") or "RayJob")
        self.multi_host = multi_host
        self.poll_s = POLL_S if poll_s is None else poll_s
        self.stamps: dict[str, Stamp] = {}
        self.waits: dict[tuple[str, str], tuple[Wait, float | None]] = {}
        self._nodes: dict[str, dict[str, Any]] = {}
        self._looks = 0
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"{THREAD_PREFIX}{job_name}", daemon=True)
        self.problem: str | None = None
        self.progress, self.clock = progress, clock
        self._pending_since: float | None = None
        self._said = 0
        self._unscheduled: tuple[int, int] = (0, 0)  # pods not yet scheduled, pods seen
        labels = (manifest.get("metadata") or {}).get("labels") or {}
        self._queued = kueue.QUEUE_LABEL in labels  # a team's run: Kueue's word until it admits it
        self._queue_said_at: float | None = None

    def start(self) -> KubePhases:
        """Starts looking in a background thread."""
        self._thread.start()
        return self

    def stop(self, final_look: bool = True) -> None:
        """The run is over: stop looking, after one last look unless ``final_look`` is False (the command failed)."""
        self._done.set()
        self._thread.join(timeout=60)
        if final_look:
            self.sample()

    def sample(self) -> None:
        """One look: pods, the nodes they are on, the pending pods' events. A failing look is noted, not raised
        (the timeline is a report; the run's own result does not depend on it)."""
        try:
            pods = pods_of(self.client, self.kind, self.job_name)
            for name in {str((p.get("spec") or {}).get("nodeName")) for p in pods if requests_tpu(p)} - {"None"}:
                if condition_time(self._nodes.get(name) or {}, "Ready") is None:
                    node = self.client.get("Node", name)
                    if node is not None:
                        self._nodes[name] = node
            pending = sorted(str((p.get("metadata") or {}).get("name", "")) for p in pods
                             if condition_time(p, "PodScheduled") is None)
            events = {}
            for i in range(min(len(pending), EVENT_PODS_PER_LOOK)):  # a different few each look, all in turn
                name = pending[(self._looks * EVENT_PODS_PER_LOOK + i) % len(pending)]
                events[name] = self.client.events(f"involvedObject.name={name}")
            self._looks += 1
            self._unscheduled = (len(pending), len(pods))
        except Exception as exc:  # reported in the timeline instead: the run does not depend on it
            self.problem = f"{type(exc).__name__}: {str(exc).splitlines()[0][:200] if str(exc) else ''}"
            return
        made, waits = phases_from(pods, self._nodes, events, self.ray_pods, self.tpu_hosts, self.multi_host)
        for item in made:
            if item["phase"] not in self.stamps or item["wall"] < self.stamps[item["phase"]]["wall"]:
                self.stamps[item["phase"]] = item
        for wait, when in waits:
            key = (wait["reason"], wait["message"])
            old = self.waits.get(key)
            if old is None or wait["count"] > old[0]["count"]:
                self.waits[key] = (wait, old[1] if old and old[1] is not None else when)

    def apply_to(self, recorder: Recorder) -> None:
        """Puts what was seen into ``recorder``: the stamps, and the capacity waits beside ``scheduled``."""
        recorder.take(self.stamps.values())
        recorder.waited("scheduled", [{**wait, "at_s": None if when is None else round(when - recorder.start_wall, 1)}
                                      for wait, when in sorted(self.waits.values(), key=lambda w: w[1] or 0.0)])

    def waiting_line(self) -> str | None:
        """What the run's pods wait for, once some have waited :data:`FIRST_WAIT_NOTE_S` unscheduled, then every
        :data:`WAIT_NOTE_EVERY_S`: how many, and the scheduler's newest word on what the nodes have free (issue 67
        item 5); None otherwise."""
        unscheduled, seen = self._unscheduled
        now = self.clock()
        if not unscheduled:
            self._pending_since, self._said = None, 0
            return None
        if self._pending_since is None:
            self._pending_since = now
        waited = now - self._pending_since
        if waited < FIRST_WAIT_NOTE_S + self._said * WAIT_NOTE_EVERY_S:
            return None
        self._said += 1
        newest = max(self.waits.values(), key=lambda w: (w[1] or 0.0), default=None)
        why = (f"; {newest[0]['reason']}: {excerpt(newest[0]['message'], 240)}" if newest else
               "; no scheduler event yet")
        return (f"{self.job_name}: waiting {waited:.0f}s: {unscheduled} of {seen} pod(s) not scheduled (of "
                f"{self.ray_pods} the RayJob makes){why}")

    def queue_line(self) -> str | None:
        """While Kueue has not admitted a team's run: its queue, position, priority and Kueue's reason, at the first
        look and then once a minute (issue 69 item 4); None once admitted or when it is not queued."""
        now = self.clock()
        if not self._queued or (self._queue_said_at is not None and now - self._queue_said_at < WAIT_NOTE_EVERY_S):
            return None
        try:
            note = queues.note(self.client, self.job_name)
        except KubeError as exc:
            self.problem = f"Kueue's queue not read: {exc}"
            return None
        if note is None:
            self._queued = False
            return None
        self._queue_said_at = now
        return f"{self.job_name}: {note}"

    def _run(self) -> None:
        while not self._done.is_set():
            self.sample()
            queued = self.queue_line() if self.progress is not None else None
            if queued is not None and self.progress is not None:
                self.progress(queued)
            line = self.waiting_line() if self.progress is not None else None
            if line is not None and self.progress is not None:
                self.progress(line)
            self._done.wait(self.poll_s)
