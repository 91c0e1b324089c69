"""Every port a Ray pod of the kit listens on, and who may reach it: the one list that the pod templates
(:mod:`raytpu.core.manifests.kuberay`, container ``ports``) and the NetworkPolicies
(:mod:`raytpu.core.manifests.network_policy`) both read.

Audiences (who is admitted, besides the pods of the same Ray cluster, which reach every port):

- ``cluster``: nobody else. Ray's GCS, the TPU runtime and the dashboard agent talk only inside the cluster.
- ``namespace``: the namespace's own pods, KubeRay's operator and ``security.dashboard_from``. The dashboard's job API
  runs any code it is sent (Ray token auth guards it too: :data:`raytpu.core.common.names.AUTH_MODE`).
- ``serve``: the namespace's pods, the operator and the serve sources (the OpenAI endpoint of a RayService).
- ``metrics``: Managed Prometheus's collectors and ``security.metrics_from`` (Prometheus scrapers).

Ray's other ports (raylet, object manager, workers, Ray Train's and JAX's coordinators) are chosen at run time
(Ray Train v2 picks the JAX coordinator's port with ``get_address_and_port``: Ray 2.60
``ray.train.v2.jax.config._JaxBackend.on_start``),
so a pod's own cluster reaches every port rather than a list that would break them.
"""

from __future__ import annotations

from dataclasses import dataclass

from raytpu.core.manifests import serving
from raytpu.core.specs import multislice

AUDIENCES = ("cluster", "namespace", "serve", "metrics")


@dataclass(frozen=True)
class RayPort:
    """One named container port.

    Attributes:
        name: The container port's name (KubeRay finds ``dashboard``, ``serve``, ``metrics`` by name).
        number: The port.
        audience: Who besides the cluster's own pods may reach it (:data:`AUDIENCES`).
        purpose: What listens there.
    """

    name: str
    number: int
    audience: str
    purpose: str

    def container_port(self) -> dict[str, object]:
        """The pod template's ``ports`` entry."""
        return {"containerPort": self.number, "name": self.name, "protocol": "TCP"}


GCS = RayPort("gcs", 6379, "cluster", "Ray's GCS: every Ray process of the cluster registers here")
DASHBOARD = RayPort("dashboard", 8265, "namespace", "dashboard and job submission API (KubeRay's operator and "
                    "RayJob submitter call it)")
CLIENT = RayPort("client", 10001, "namespace", "Ray client (ray://)")
DASHBOARD_AGENT = RayPort("dashboard-agent", 52365, "cluster", "per-node dashboard agent; the kubelet's health "
                          "probes (KubeRay: dashboard-agent-listen-port)")
METRICS = RayPort("metrics", 8080, "metrics", "Prometheus metrics (KubeRay: metrics-export-port)")
MXLA = RayPort("mxla", multislice.MEGASCALE_PORT, "cluster", "megascale (multi-slice) runtime: libtpu's "
               "MEGASCALE_PORT, where the slices of one multi-slice run meet over DCN")
"""Cross-slice, not in-slice: the port the TPU webhook sets as ``MEGASCALE_PORT`` ("defaulting to 8081 since 8080
is used by Ray for metrics") and Ray 2.60's ``DEFAULT_MEGASCALE_PORT``; KubeRay's TPU samples name it ``mxla``
beside ``slicebuilder`` 8471, the in-slice TPU runtime port. Both, and JAX's coordinator, are reached by the pods
of the same Ray cluster (every replica, so every slice, of the group), which the NetworkPolicy admits on all ports.
Source: ai-on-gke/kuberay-tpu-webhook main.go (megascalePortBase, tpuProcessPortBase); KubeRay
ray-operator/config/samples/ray-cluster-tpu-v4-multihost.yaml"""
SERVE = RayPort("serve", serving.SERVE_PORT, "serve", "Ray Serve HTTP proxy: the OpenAI API")

ALL = (GCS, DASHBOARD, CLIENT, DASHBOARD_AGENT, METRICS, MXLA, SERVE)
HEAD = (GCS, DASHBOARD, CLIENT, DASHBOARD_AGENT, METRICS)
WORKER = (DASHBOARD_AGENT, METRICS)


def head_ports(serves: bool) -> tuple[RayPort, ...]:
    """The head's ports; a RayService's head also runs a Serve proxy."""
    return (*HEAD, SERVE) if serves else HEAD


def worker_ports(serves: bool, multi_host: bool) -> tuple[RayPort, ...]:
    """A TPU worker's ports: the Serve proxy on a RayService (Serve runs one per node), ``mxla`` on a multi-host
    slice (the only kind a multi-slice run spans: :func:`raytpu.core.specs.multislice.problems`)."""
    return (*WORKER, *((SERVE,) if serves else ()), *((MXLA,) if multi_host else ()))
