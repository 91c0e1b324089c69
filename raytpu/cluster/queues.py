"""Kueue's view of a team's runs, read in the team's namespace: for a waiting run its queue, position, priority and why
Kueue has not admitted it (its Workload's conditions and admission checks), and the team's chips in use against its
quota. Source: Kueue v0.19.2 ``apis/kueue/v1beta2`` (Workload, LocalQueue, ClusterQueue status);
``pkg/controller/constants`` ``JobUIDLabel``."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from raytpu.cluster.kube.kube_errors import KubeError
from raytpu.core.tpu.plan import TPU_RESOURCE

if TYPE_CHECKING:
    from raytpu.cluster.kube.kube_client import KubeClient

JOB_UID_LABEL = "kueue.x-k8s.io/job-uid"
"""Kueue's label on a Workload naming the job (here the RayJob) it stands for, by UID."""


@dataclass(frozen=True)
class Queued:
    """Where a team's run stands in its queue: ``position`` (1: next) among ``waiting`` runs of its queue, None once
    admitted; ``why`` Kueue's own reason it waits (or what it waits on)."""

    queue: str
    priority: str
    position: int | None
    waiting: int
    why: str

    def line(self) -> str:
        """One line for the runs table's notes."""
        if self.position is None:
            return f"admitted from queue {self.queue} (priority {self.priority})"
        return (f"queued in {self.queue} at priority {self.priority}, {self.position} of {self.waiting} waiting: "
                f"{self.why}")


def _condition(obj: Mapping[str, Any], kind: str) -> Mapping[str, Any]:
    return next((c for c in (obj.get("status") or {}).get("conditions") or () if c.get("type") == kind), {})


def _admitted(workload: Mapping[str, Any]) -> bool:
    return _condition(workload, "Admitted").get("status") == "True"


def _finished(workload: Mapping[str, Any]) -> bool:
    return _condition(workload, "Finished").get("status") == "True"


def why_waiting(workload: Mapping[str, Any]) -> str:
    """Kueue's reason, most telling first: a pending admission check (the ProvisioningRequest asking GKE for the
    slice), an eviction (preempted), then quota (``couldn't assign flavors ...: insufficient unused quota``)."""
    status = workload.get("status") or {}
    for check in status.get("admissionChecks") or ():
        if check.get("state") in ("Pending", "Retry", "Rejected"):
            return f"admission check {check.get('name')} {check.get('state')}: {check.get('message') or 'waiting'}"
    evicted = _condition(workload, "Evicted")
    if evicted.get("status") == "True":
        return f"evicted ({evicted.get('reason')}): {evicted.get('message', '')}".rstrip(": ")
    reserved = _condition(workload, "QuotaReserved")
    if reserved.get("status") == "False" and reserved.get("message"):
        return str(reserved["message"])[:300]
    return "not yet considered by Kueue"


def _priority(workload: Mapping[str, Any]) -> tuple[str, int]:
    spec = workload.get("spec") or {}
    name = str((spec.get("priorityClassRef") or {}).get("name") or spec.get("priorityClassName") or "-")
    value = spec.get("priority")
    return name.removeprefix("raytpu-"), value if isinstance(value, int) else 0


def queue_states(workloads: Sequence[Mapping[str, Any]]) -> dict[str, Queued]:
    """Job UID -> its Queued, from the namespace's Workloads. A team's LocalQueue alone feeds its ClusterQueue, so
    the order among its waiting Workloads is the queue's: higher priority first, then the older.
    Source: Kueue v0.19.2 pkg/cache/queue ``queueOrderingFunc`` (priority, then creation time)."""
    live = [w for w in workloads if not _finished(w)]
    found: dict[str, Queued] = {}
    by_queue: dict[str, list[Mapping[str, Any]]] = {}
    for work in live:
        if not _admitted(work):
            by_queue.setdefault(str((work.get("spec") or {}).get("queueName", "")), []).append(work)
    for queue, waiting in by_queue.items():
        waiting.sort(key=lambda w: (-_priority(w)[1], str((w.get("metadata") or {}).get("creationTimestamp", ""))))
        for position, work in enumerate(waiting, 1):
            uid = str(((work.get("metadata") or {}).get("labels") or {}).get(JOB_UID_LABEL, ""))
            found[uid] = Queued(queue, _priority(work)[0], position, len(waiting), why_waiting(work))
    for work in live:
        if _admitted(work):
            uid = str(((work.get("metadata") or {}).get("labels") or {}).get(JOB_UID_LABEL, ""))
            queue = str((work.get("spec") or {}).get("queueName", ""))
            found[uid] = Queued(queue, _priority(work)[0], None, len(by_queue.get(queue, ())), "")
    return found


def tpu_quota(cluster_queue: Mapping[str, Any] | None) -> dict[str, int]:
    """A ClusterQueue's nominal quota of chips, by flavor."""
    quota: dict[str, int] = {}
    for group in ((cluster_queue or {}).get("spec") or {}).get("resourceGroups") or ():
        for flavor in group.get("flavors") or ():
            for res in flavor.get("resources") or ():
                if res.get("name") == TPU_RESOURCE:
                    quota[str(flavor.get("name"))] = int(res.get("nominalQuota") or 0)
    return quota


def usage_lines(local_queues: Sequence[Mapping[str, Any]], cluster_queue: Mapping[str, Any] | None) -> list[str]:
    """``queue raytpu-research: 16 of 16 chips of raytpu-train in use, 1 waiting`` per flavor with a quota or a use;
    the quota from the ClusterQueue when this user may read it (it is cluster-scoped), else the use alone."""
    quota = tpu_quota(cluster_queue)
    lines = []
    for queue in local_queues:
        status = queue.get("status") or {}
        used = {str(f.get("name")): _chips(f) for f in status.get("flavorsUsage") or ()}
        for flavor in sorted(set(used) | {f for f, q in quota.items() if q}):
            of = f" of {quota[flavor]}" if flavor in quota else ""
            lines.append(f"queue {queue['metadata']['name']}: {used.get(flavor, 0)}{of} chips of {flavor} in use, "
                         f"{status.get('pendingWorkloads', 0)} waiting")
    return lines


def _chips(flavor_usage: Mapping[str, Any]) -> int:
    for res in flavor_usage.get("resources") or ():
        if res.get("name") == TPU_RESOURCE:
            text = str(res.get("total", "0"))
            return int(text) if text.isdigit() else 0
    return 0


def note(client: KubeClient, job_name: str) -> str | None:
    """The queue line of RayJob ``job_name`` while Kueue has not admitted it; None once admitted (or gone)."""
    job = client.get("RayJob", job_name)
    if job is None:
        return None
    state = queue_states(client.listed("Workload")).get(str((job.get("metadata") or {}).get("uid", "")))
    if state is None:
        return "waiting for Kueue to make its Workload (is Kueue running, with the ray.io/rayjob integration?)"
    return None if state.position is None else state.line()


def states(client: KubeClient) -> dict[str, Queued]:
    """The namespace's queue states by job UID; none where Kueue is not installed or not readable here."""
    try:
        return queue_states(client.listed("Workload"))
    except KubeError as exc:
        if exc.status in (403, 404):
            return {}
        raise


def usage(client: KubeClient) -> list[str]:
    """The namespace's queue usage lines (:func:`usage_lines`); none where Kueue is not installed or readable."""
    try:
        local = client.listed("LocalQueue")
    except KubeError as exc:
        if exc.status in (403, 404):
            return []
        raise
    cluster_queue = None
    if local:
        try:
            cluster_queue = client.get("ClusterQueue", str((local[0].get("spec") or {}).get("clusterQueue", "")))
        except KubeError as exc:
            if exc.status != 403:  # a team member's Role is the namespace's: the quota is then not shown
                raise
    return usage_lines(local, cluster_queue)

