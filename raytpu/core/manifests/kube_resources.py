"""The kinds the kit talks to and where the API serves them: one table, so every path and message spells them alike."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from raytpu.core.common import errors


@dataclass(frozen=True)
class Resource:
    """A namespaced (or cluster-scoped) kind the kit talks to, and where the API serves it."""

    kind: str
    api_version: str
    plural: str
    namespaced: bool = True

    @property
    def group(self) -> str:
        """The API group (``""`` for the core group)."""
        return self.api_version.rpartition("/")[0]

    @property
    def base(self) -> str:
        """The group-version path, also its discovery document (``/api/v1``, ``/apis/ray.io/v1``)."""
        return f"/apis/{self.api_version}" if self.group else f"/api/{self.api_version}"

    @property
    def display(self) -> str:
        """How kubectl and the API server name it in messages: ``rayjobs.ray.io``, ``pods``."""
        return f"{self.plural}.{self.group}" if self.group else self.plural

    def collection(self, namespace: str) -> str:
        """The path of the collection (in ``namespace`` when namespaced)."""
        return f"{self.base}/namespaces/{namespace}/{self.plural}" if self.namespaced else f"{self.base}/{self.plural}"

    def path(self, namespace: str, name: str) -> str:
        """The path of one object."""
        return f"{self.collection(namespace)}/{name}"


RESOURCES = {r.kind: r for r in (
    Resource("RayJob", "ray.io/v1", "rayjobs"),
    Resource("RayService", "ray.io/v1", "rayservices"),
    Resource("RayCluster", "ray.io/v1", "rayclusters"),
    Resource("Pod", "v1", "pods"),
    Resource("Service", "v1", "services"),
    Resource("ConfigMap", "v1", "configmaps"),
    Resource("Secret", "v1", "secrets"),
    Resource("ServiceAccount", "v1", "serviceaccounts"),
    Resource("Event", "v1", "events"),
    Resource("Node", "v1", "nodes", namespaced=False),
    Resource("Namespace", "v1", "namespaces", namespaced=False),
    Resource("Job", "batch/v1", "jobs"),
    Resource("Deployment", "apps/v1", "deployments"),
    Resource("NetworkPolicy", "networking.k8s.io/v1", "networkpolicies"),
    Resource("Ingress", "networking.k8s.io/v1", "ingresses"),
    Resource("CustomResourceDefinition", "apiextensions.k8s.io/v1", "customresourcedefinitions", namespaced=False),
    Resource("MutatingWebhookConfiguration", "admissionregistration.k8s.io/v1", "mutatingwebhookconfigurations",
             namespaced=False),
    Resource("CSIDriver", "storage.k8s.io/v1", "csidrivers", namespaced=False),
    Resource("Workload", "kueue.x-k8s.io/v1beta2", "workloads"),
    Resource("LocalQueue", "kueue.x-k8s.io/v1beta2", "localqueues"),
    Resource("ClusterQueue", "kueue.x-k8s.io/v1beta2", "clusterqueues", namespaced=False),
)}
"""The kinds ``KubeClient`` knows, by kind; :func:`resource` also accepts ``rayjob`` and ``rayjobs``."""


def resource(kind: str) -> Resource:
    """The Resource of ``kind`` (``RayJob``, ``rayjob`` or ``rayjobs``); InvalidInput (exit 2) when unknown."""
    wanted = kind.lower()
    for res in RESOURCES.values():
        if wanted in (res.kind.lower(), res.plural):
            return res
    raise errors.invalid_choice("kind", kind, sorted(RESOURCES))


def manifest_target(obj: Mapping[str, Any]) -> tuple[Resource, str]:
    """The Resource and name of a manifest; InvalidInput when it lacks either or the apiVersion is wrong."""
    res = resource(str(obj.get("kind", "")))
    if obj.get("apiVersion") != res.api_version:
        raise errors.invalid_value("manifest.apiVersion", obj.get("apiVersion"), f"is not served for {res.kind}",
                                   res.api_version)
    name = (obj.get("metadata") or {}).get("name")
    if not name:
        raise errors.missing("manifest.metadata.name", f"to apply a {res.kind}", "a DNS-1123 name")
    return res, str(name)


def describe_call(verb: str, res: Resource, name: str | None, namespace: str) -> str:
    """The call, as kubectl phrases it: ``get rayjobs.ray.io "x" in namespace "ray"``."""
    target = f'{res.display} "{name}"' if name else res.display
    return f'{verb} {target} in namespace "{namespace}"' if res.namespaced else f"{verb} {target}"
