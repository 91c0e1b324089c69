"""Kueue's objects for ``teams``: a ResourceFlavor per slice (and one for the CPU side), one Cohort, a ClusterQueue
and a LocalQueue per team, three WorkloadPriorityClasses, and for queued (flex-start) slices GKE's queued
provisioning as an admission check; the labels a team's RayJob carries. Plain dicts, stdlib and the kit's core.
Source: Kueue v0.19.2 ``apis/kueue/v1beta2`` (the CRDs vendored in tests/data/kueue-crds/v0.19.2)."""

from __future__ import annotations

from typing import Any

from raytpu.core.common import names
from raytpu.core.manifests.kuberay import tpu_placement
from raytpu.core.specs.cluster import teams as team_rules
from raytpu.core.specs.cluster.teams import TeamSpec
from raytpu.core.specs.slices.provisioning import TPU_TAINT
from raytpu.core.specs.spec import ClusterSpec, SliceSpec, WorkloadSpec
from raytpu.core.tpu.plan import TPU_RESOURCE

VERSION = "0.19.2"
"""The Kueue release the cluster stack installs (its Helm chart, this version)."""
API_VERSION = "kueue.x-k8s.io/v1beta2"
RELEASE = "kueue"
"""The Helm release (and chart) name: the Deployment ``kueue-controller-manager``, the ConfigMap
``kueue-manager-config``."""
SYSTEM_NAMESPACE = "kueue-system"
"""Source: Kueue v0.19.2 charts/kueue/README.md (``--create-namespace --namespace=kueue-system``)."""
RAY_FRAMEWORKS: tuple[str, ...] = ("ray.io/rayjob", "ray.io/raycluster")
"""The integrations teams' runs need: a team's RayJob is queued; the RayCluster it makes is its own, not queued again.
Source: Kueue v0.19.2 pkg/controller/jobs/rayjob, pkg/controller/jobs/raycluster."""
QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
PRIORITY_LABEL = "kueue.x-k8s.io/priority-class"
COHORT = "raytpu"
QUEUED_NAMESPACE_LABEL = "raytpu.dev/queued"
"""On each team's namespace: the namespaces Kueue manages (its ``managedJobsNamespaceSelector``)."""
CPU_FLAVOR = "raytpu-cpu"
"""The flavor of what every pod asks beside chips (heads, submitters, hosts' CPU and memory): no node labels."""
CPU_SIDE = ("cpu", "memory", "ephemeral-storage")
CPU_SIDE_QUOTA = {"cpu": "100k", "memory": "1Pi", "ephemeral-storage": "1Pi"}
"""Never binding: chips are what teams share; Kueue admits a pod set only when every resource it asks is covered.
Source: Kueue v0.19.2 pkg/scheduler/flavorassigner (a resource no resource group covers is inadmissible)."""
PROVISIONING_CHECK = "raytpu-queued-provisioning"
PROVISIONING_CONTROLLER = "kueue.x-k8s.io/provisioning-request"
QUEUED_PROVISIONING_CLASS = "queued-provisioning.gke.io"
"""Source: https://cloud.google.com/kubernetes-engine/docs/how-to/provisioningrequest (Kueue)."""


def _object(kind: str, name: str, namespace: str | None = None, **body: Any) -> dict[str, Any]:
    metadata = {"name": name, "labels": dict(names.MANAGED_BY)}
    if namespace is not None:
        metadata["namespace"] = namespace
    return {"apiVersion": API_VERSION, "kind": kind, "metadata": metadata, **body}


def flavor_name(item: SliceSpec) -> str:
    return f"raytpu-{item.name}"


def resource_flavor(item: SliceSpec, autopilot: bool, cluster: str) -> dict[str, Any]:
    """The slice's flavor: its pods' own node selector as node labels (Kueue adds them to the pods it admits, which
    already carry them) and the TPU taint its pods tolerate."""
    selector, _ = tpu_placement(item, autopilot, cluster)
    return _object("ResourceFlavor", flavor_name(item), spec={
        "nodeLabels": dict(sorted(selector.items())),
        "nodeTaints": [{"key": TPU_TAINT, "value": "present", "effect": "NoSchedule"}],
    })


def cluster_queue(team: TeamSpec, spec: ClusterSpec) -> dict[str, Any]:
    """The team's ClusterQueue in the cohort: its chips of each slice as nominal quota (0 where it has none: it may
    still borrow), borrowing as ``can_borrow``, the CPU side never binding; only its namespace's LocalQueue feeds it.
    A high run preempts a lower one of its own queue, reclaims chips lent to the cohort, and may preempt a lower
    run to borrow."""
    tpu_flavors = []
    for item in spec.slices:
        quota: dict[str, Any] = {"name": TPU_RESOURCE, "nominalQuota": team.quota.get(item.name, 0)}
        if not team.can_borrow:
            quota["borrowingLimit"] = 0
        tpu_flavors.append({"name": flavor_name(item), "resources": [quota]})
    body: dict[str, Any] = {
        "cohortName": COHORT,
        "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": team.namespace}},
        "queueingStrategy": "BestEffortFIFO",
        "resourceGroups": [
            {"coveredResources": [TPU_RESOURCE], "flavors": tpu_flavors},
            {"coveredResources": list(CPU_SIDE), "flavors": [{"name": CPU_FLAVOR, "resources": [
                {"name": r, "nominalQuota": CPU_SIDE_QUOTA[r]} for r in CPU_SIDE]}]},
        ],
        "preemption": {"withinClusterQueue": "LowerPriority", "reclaimWithinCohort": "Any",
                       "borrowWithinCohort": {"policy": "LowerPriority"}},
    }
    # only where the team may run: a queue with an inactive check admits nothing at all
    # Source: Kueue v0.19.2 pkg/cache/scheduler/clusterqueue.go ``updateQueueStatus`` (inactiveAdmissionChecks)
    queued = [flavor_name(s) for s in spec.slices if s.provisioning.pool.queued
              and (team.quota.get(s.name, 0) or (team.can_borrow and any(t.quota.get(s.name) for t in spec.teams)))]
    if queued:
        body["admissionChecksStrategy"] = {"admissionChecks": [{"name": PROVISIONING_CHECK, "onFlavors": queued}]}
    return _object("ClusterQueue", team.queue, spec=body)


def local_queue(team: TeamSpec) -> dict[str, Any]:
    return _object("LocalQueue", team.queue, team.namespace, spec={"clusterQueue": team.queue})


def priority_classes() -> list[dict[str, Any]]:
    return [_object("WorkloadPriorityClass", priority_class(name), value=value, description=f"raytpu priority: {name}")
            for name, value in team_rules.PRIORITIES.items()]


def priority_class(priority: str | None) -> str:
    return f"raytpu-{priority or team_rules.DEFAULT_PRIORITY}"


def queued_provisioning(spec: ClusterSpec) -> list[dict[str, Any]]:
    """GKE's queued provisioning for queued slices: an AdmissionCheck whose ProvisioningRequest holds the TPU pods
    alone (the CPU head and submitter schedule as usual): GKE takes one pod set per request."""
    if not any(s.provisioning.pool.queued for s in spec.slices):
        return []
    config = _object("ProvisioningRequestConfig", PROVISIONING_CHECK, spec={
        "provisioningClassName": QUEUED_PROVISIONING_CLASS, "managedResources": [TPU_RESOURCE]})
    check = _object("AdmissionCheck", PROVISIONING_CHECK, spec={
        "controllerName": PROVISIONING_CONTROLLER,
        "parameters": {"apiGroup": "kueue.x-k8s.io", "kind": "ProvisioningRequestConfig",
                       "name": PROVISIONING_CHECK}})
    return [config, check]


def objects(spec: ClusterSpec) -> list[dict[str, Any]]:
    """Every Kueue object of ``spec``'s teams, cluster-scoped ones first; none without ``teams``."""
    if not spec.teams:
        return []
    autopilot = spec.cluster.autopilot
    found = [_object("ResourceFlavor", CPU_FLAVOR, spec={}),
             *(resource_flavor(s, autopilot, spec.cluster.name) for s in spec.slices),
             _object("Cohort", COHORT, spec={}), *priority_classes(), *queued_provisioning(spec),
             *(cluster_queue(t, spec) for t in spec.teams)]
    return found + [local_queue(t) for t in spec.teams]


def queued(job: dict[str, Any], team: TeamSpec, work: WorkloadSpec) -> dict[str, Any]:
    """A team's RayJob in its queue at its priority, created suspended (Kueue starts it once admitted; KubeRay's
    deadlines count from then), its Ray cluster deleted as soon as it ends: Kueue gives its chips to the next run at
    once, whose pods would otherwise wait for this one's (the submitter's log stays).
    Source: Kueue v0.19.2 pkg/controller/jobs/rayjob ``RunWithPodSetsInfo``; KubeRay v1.7.0 ``initRayJobStatusIfNeed``
    (StartTime reset after Suspended), ``handleShutdownAfterJobFinishes`` (deletes the RayCluster only)."""
    labels = {**job["metadata"].get("labels", {}), QUEUE_LABEL: team.queue,
              PRIORITY_LABEL: priority_class(work.priority)}
    spec = {**job["spec"], "suspend": True, "ttlSecondsAfterFinished": 0}
    return {**job, "metadata": {**job["metadata"], "labels": labels}, "spec": spec}
