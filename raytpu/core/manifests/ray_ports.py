"""Every port a Ray pod listens on and who may reach it (docs/FACTS.md#networking-ray-ports): one list for pod templates
and policies.
Source: Ray 2.60 ``ray.train.v2.jax.config._JaxBackend.on_start``."""

from __future__ import annotations

from dataclasses import dataclass

from raytpu.core.manifests import serving
from raytpu.core.specs.slices import multislice

AUDIENCES = ("cluster", "namespace", "serve", "metrics")


@dataclass(frozen=True)
class RayPort:
    """One named container port (KubeRay finds ``dashboard``, ``serve``, ``metrics`` by name) and its audience."""

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
"""Cross-slice port (docs/FACTS.md#networking-ray-ports). Source: kuberay-tpu-webhook ``megascalePortBase``; Ray
``DEFAULT_MEGASCALE_PORT``."""
SERVE = RayPort("serve", serving.SERVE_PORT, "serve", "Ray Serve HTTP proxy: the OpenAI API")

ALL = (GCS, DASHBOARD, CLIENT, DASHBOARD_AGENT, METRICS, MXLA, SERVE)
HEAD = (GCS, DASHBOARD, CLIENT, DASHBOARD_AGENT, METRICS)
WORKER = (DASHBOARD_AGENT, METRICS)


def head_ports(serves: bool) -> tuple[RayPort, ...]:
    """The head's ports; a RayService's head also runs a Serve proxy."""
    return (*HEAD, SERVE) if serves else HEAD


def worker_ports(serves: bool, multi_host: bool) -> tuple[RayPort, ...]:
    """A TPU worker's ports: Serve's proxy on a RayService, ``mxla`` on a multi-host slice (multi-slice runs' kind)."""
    return (*WORKER, *((SERVE,) if serves else ()), *((MXLA,) if multi_host else ()))
