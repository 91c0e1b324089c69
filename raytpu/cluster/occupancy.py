"""A slice in use is not a failed slice: ``busy`` and ``unschedulable`` slices told apart from ``unhealthy`` ones.
:func:`holders` finds what holds a slice copy before ``raytpu smoke`` submits (a held copy is ``busy``);
:func:`unschedulable_reason` reads a job's scheduling events after. Source: docs/FACTS.md#client-occupancy."""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import Any

from raytpu.cluster.kube.kube_client import KubeClient
from raytpu.core.common import names
from raytpu.core.common.names import COMPUTE_CLASS_LABEL, NODE_POOL_LABEL, compute_class_name
from raytpu.core.specs.spec import SliceSpec
from raytpu.core.tpu.plan import TPU_RESOURCE

ORIGIN_LABEL = "ray.io/originated-from-cr-name"
"""KubeRay's label of the objects it makes for a RayJob or RayService: the RayCluster and a RayJob's submitter pod, but
not the Ray head and worker pods (they carry ``ray.io/cluster`` and their template's labels).
Source: KubeRay v1.7.0 ``common/pod.go`` ``labelPod``, ``rayjob_controller.go`` ``getSubmitterTemplate``."""
SCHEDULING_REASONS = ("FailedScheduling", "NotTriggerScaleUp", "FailedScaleUp", "FailedCreate")
"""Event reasons that mean "no capacity for these pods" (kube-scheduler, cluster autoscaler, KubeRay)."""


def requests_tpu(pod: Mapping[str, Any]) -> bool:
    """The pod asks for TPU chips (``google.com/tpu`` in a container's requests or limits): a TPU host."""
    for container in (pod.get("spec") or {}).get("containers") or []:
        resources = container.get("resources") or {}
        if TPU_RESOURCE in (resources.get("requests") or {}) or TPU_RESOURCE in (resources.get("limits") or {}):
            return True
    return False


def _active(pod: Mapping[str, Any]) -> bool:
    return (pod.get("status") or {}).get("phase") in ("Pending", "Running")


def _name(pod: Mapping[str, Any]) -> str:
    meta = pod.get("metadata") or {}
    return f"{meta.get('namespace', '?')}/{meta.get('name', '?')}"


def owner(pod: Mapping[str, Any]) -> str:
    """The name of the kit's KubeRay object (RayJob, RayService) a pod belongs to: its Ray pods carry the kit's own
    :data:`~raytpu.core.common.names.CLUSTER_LABEL` from their template, a submitter pod KubeRay's
    :data:`ORIGIN_LABEL`; "" for any other pod."""
    labels = (pod.get("metadata") or {}).get("labels") or {}
    return names.object_of_cluster_label(str(labels.get(names.CLUSTER_LABEL, ""))) or str(labels.get(ORIGIN_LABEL, ""))


def pods_of(client: KubeClient, kind: str, name: str) -> list[dict[str, Any]]:
    """Every pod of the kit's ``kind`` object ``name``: its Ray pods (the kit's label) and a RayJob's submitter."""
    found = {str((p.get("metadata") or {}).get("name")): p
             for selector in (f"{names.CLUSTER_LABEL}={names.cluster_label(kind, name)}", f"{ORIGIN_LABEL}={name}")
             for p in client.pods(selector)}
    return list(found.values())


def holders(client: KubeClient, item: SliceSpec, index: int, autopilot: bool,
            releasing: Collection[str] = ()) -> list[str]:
    """Pods (``namespace/name``) that hold copy ``index`` of slice ``item`` now; empty when it is free. Pods of the
    KubeRay objects named in ``releasing`` (finished jobs the caller has deleted) do not count."""
    if autopilot:
        class_name = compute_class_name(item.name)
        pods = client.all_pods(field_selector="status.phase=Running")
        return sorted(_name(p) for p in pods if requests_tpu(p) and owner(p) not in releasing and
                      ((p.get("spec") or {}).get("nodeSelector") or {}).get(COMPUTE_CLASS_LABEL) == class_name)
    found: set[str] = set()
    for node in client.nodes(f"{NODE_POOL_LABEL}={item.pool_names[index]}"):
        node_name = (node.get("metadata") or {}).get("name", "")
        for pod in client.all_pods(field_selector=f"spec.nodeName={node_name}"):
            if _active(pod) and requests_tpu(pod) and owner(pod) not in releasing:
                found.add(_name(pod))
    return sorted(found)


def free_copies(client: KubeClient, item: SliceSpec, autopilot: bool,
                releasing: Collection[str] = ()) -> tuple[int, dict[str, list[str]]]:
    """How many copies of slice ``item`` no pod holds, and the holders of each held copy (by node pool). Autopilot
    has no pool per copy, so a holder there may be on any of them: every copy counts as held."""
    busy = {pool: held_by for index, pool in enumerate(item.pool_names)
            if (held_by := holders(client, item, index, autopilot, releasing))}
    if autopilot and busy:
        return 0, {f"{item.name} (every copy, Autopilot)": next(iter(busy.values()))}
    return item.count - len(busy), busy


def unschedulable_reason(client: KubeClient, job_name: str) -> str | None:
    """Why the pods of RayJob ``job_name`` never started, from their scheduling events; None if no such event."""
    reasons = []
    for pod in pods_of(client, "RayJob", job_name):
        if (pod.get("status") or {}).get("phase") != "Pending":
            continue
        pod_name = (pod.get("metadata") or {}).get("name", "")
        for event in client.events(f"involvedObject.name={pod_name}"):
            if event.get("reason") in SCHEDULING_REASONS:
                reasons.append(f"{event.get('reason')}: {str(event.get('message', '')).strip()[:300]}")
    return reasons[-1] if reasons else None
