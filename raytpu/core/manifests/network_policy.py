"""One NetworkPolicy per Ray cluster (RayJob, RayService, RayCluster): who may reach its pods, on which port.

GKE Dataplane V2 enforces NetworkPolicy (on by default on Autopilot; the cluster stack turns it on on Standard).
The policy selects every pod of one KubeRay object (head, TPU workers, RayJob submitter) by the label
:data:`names.CLUSTER_LABEL` the kit puts on their templates (KubeRay's own ``ray.io/cluster`` value gets a random suffix
for RayJobs and RayServices, so it cannot be named in advance) and admits, ingress only:

1. every port from the pods of the same Ray cluster (Ray's internal ports, many chosen at run time:
   :mod:`raytpu.core.manifests.ray_ports`);
2. per :mod:`raytpu.core.manifests.ray_ports` audience, the ports of that audience from their sources: the namespace's
pods and
   ``security.dashboard_from`` (dashboard, client), the namespace's pods and the serve sources (Serve), and
   ``security.metrics_from`` (metrics).

KubeRay's operator calls the head's dashboard and, for a RayService, the head pod's Serve health endpoint, so the
operator's sources are admitted to the ``namespace`` and ``serve`` ports too. GKE hosts the add-on's operator without
saying where; the kit assumes the control plane, whose calls reach pods either from its range
(``network.master_cidr``) or through the ``konnectivity-agent`` pods in ``kube-system``, so both are admitted by
default (:data:`KONNECTIVITY_AGENTS`). ``security.operator_from`` replaces them (the operator's namespace, e.g. for a
self-installed KubeRay). Source: KubeRay v1.7.0 ``updateHeadPodServeLabel`` (docs/FACTS.md section 17).

The metrics port admits Managed Service for Prometheus's collectors (:data:`GMP_COLLECTORS`) besides
``security.metrics_from``: the cluster stack turns on the Ray Operator add-on's Ray metrics
(``ray_cluster_monitoring_config``, :mod:`raytpu.modules.gke_cluster`), which managed collection scrapes from the
``collector`` DaemonSet's pods in ``gmp-system`` (pod network, not the host's).
Source: GoogleCloudPlatform/prometheus-engine ``manifests/operator.yaml``, DaemonSet ``collector``.
Egress is left open (pip installs, Hugging Face, GCS, the metadata server).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from raytpu.core.common import names
from raytpu.core.manifests import ray_ports
from raytpu.core.specs.security import NAMESPACE_SOURCE, SecuritySpec

API_VERSION = "networking.k8s.io/v1"
NAMESPACE_LABEL = "kubernetes.io/metadata.name"
"""Every namespace carries its own name under this label (Kubernetes 1.22+, NamespaceDefaultLabelName)."""


def _pods_in(namespace: str, labels: Mapping[str, str]) -> dict[str, Any]:
    """A NetworkPolicy peer: the pods with ``labels`` in ``namespace``."""
    return {"namespaceSelector": {"matchLabels": {NAMESPACE_LABEL: namespace}},
            "podSelector": {"matchLabels": dict(labels)}}


KONNECTIVITY_AGENTS = _pods_in("kube-system", {"k8s-app": "konnectivity-agent"})
"""The pods the GKE control plane's calls into the cluster come from (tigera/operator PR #5212)."""
GMP_COLLECTORS = _pods_in("gmp-system", {"app.kubernetes.io/name": "collector"})
"""Managed Prometheus's scrapers (prometheus-engine ``manifests/operator.yaml``, DaemonSet ``collector``)."""


def peer(source: str) -> dict[str, Any]:
    """A NetworkPolicy peer for a source: ``namespace:NAME`` -> that namespace's pods, a CIDR -> an ipBlock."""
    if source.startswith(NAMESPACE_SOURCE):
        return {"namespaceSelector": {"matchLabels": {NAMESPACE_LABEL: source[len(NAMESPACE_SOURCE):]}}}
    return {"ipBlock": {"cidr": source}}


def serve_sources(security: SecuritySpec, subnet_cidr: str) -> tuple[str, ...]:
    """Who may call the Serve port besides the namespace's pods: ``serve_from``; if empty, the VPC subnet for an
    internal load balancer (its clients, and the nodes it forwards through), every address for a public one."""
    if security.serve_from:
        return security.serve_from
    return {"internal-lb": (subnet_cidr,), "public-lb": ("0.0.0.0/0",)}.get(security.serve_endpoint, ())


def operator_peers(security: SecuritySpec, control_plane_cidr: str) -> list[dict[str, Any]]:
    """Where KubeRay's operator calls Ray heads from: ``operator_from``, else the control plane's range and the
    Konnectivity agents it reaches pods through."""
    if security.operator_from:
        return [peer(s) for s in security.operator_from]
    return [peer(control_plane_cidr), KONNECTIVITY_AGENTS]


def audience_sources(security: SecuritySpec, *, subnet_cidr: str,
                     control_plane_cidr: str) -> dict[str, list[dict[str, Any]]]:
    """Audience -> the peers admitted to its ports (besides the cluster's own pods)."""
    namespace: list[dict[str, Any]] = [{"podSelector": {}}]
    operator = operator_peers(security, control_plane_cidr)
    return {
        "cluster": [],
        "namespace": [*namespace, *operator, *(peer(s) for s in security.dashboard_from)],
        "serve": [*namespace, *operator, *(peer(s) for s in serve_sources(security, subnet_cidr))],
        "metrics": [GMP_COLLECTORS, *(peer(s) for s in security.metrics_from)],
    }


def network_policy(kind: str, name: str, namespace: str, ports: Sequence[ray_ports.RayPort],
                   security: SecuritySpec, *, subnet_cidr: str, control_plane_cidr: str,
                   labels: Mapping[str, str] | None = None) -> dict[str, Any]:
    """The NetworkPolicy of KubeRay object ``kind``/``name`` whose pods declare ``ports``."""
    own = {names.CLUSTER_LABEL: names.cluster_label(kind, name)}
    rules: list[dict[str, Any]] = [{"from": [{"podSelector": {"matchLabels": dict(own)}}]}]
    sources = audience_sources(security, subnet_cidr=subnet_cidr, control_plane_cidr=control_plane_cidr)
    for audience in ray_ports.AUDIENCES:
        numbers = sorted({p.number for p in ports if p.audience == audience})
        if numbers and sources[audience]:
            rules.append({"from": sources[audience],
                          "ports": [{"port": n, "protocol": "TCP"} for n in numbers]})
    return {
        "apiVersion": API_VERSION, "kind": "NetworkPolicy",
        "metadata": {"name": own[names.CLUSTER_LABEL], "namespace": namespace,
                     "labels": {**names.MANAGED_BY, **(labels or {})}},
        "spec": {"podSelector": {"matchLabels": own}, "policyTypes": ["Ingress"], "ingress": rules},
    }
