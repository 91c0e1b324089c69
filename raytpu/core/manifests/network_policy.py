"""One NetworkPolicy per Ray cluster: who may reach its pods, on which port (ingress only):
docs/FACTS.md#networking-policy.
Source: KubeRay v1.7.0 ``updateHeadPodServeLabel``; prometheus-engine ``manifests/operator.yaml``
(docs/FACTS.md#networking-ray-pods)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from raytpu.core.common import names
from raytpu.core.manifests import ray_ports
from raytpu.core.specs.cluster.security import NAMESPACE_SOURCE, SecuritySpec

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
    """Who may call the Serve port besides the namespace: ``serve_from``, else the subnet (internal) or all (public)."""
    if security.serve_from:
        return security.serve_from
    return {"internal-lb": (subnet_cidr,), "public-lb": ("0.0.0.0/0",)}.get(security.serve_endpoint, ())


def operator_peers(security: SecuritySpec, control_plane_cidr: str) -> list[dict[str, Any]]:
    """Where KubeRay's operator calls heads from: ``operator_from``, else the control plane and Konnectivity agents."""
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
