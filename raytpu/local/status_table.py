"""``raytpu local status``: every recorded node beside what the GCS says of it (node id, resources, labels, alive)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from raytpu.core.common.table import text_table
from raytpu.local.connection import connect
from raytpu.local.procs import node_alive
from raytpu.local.state import LocalCluster


@dataclass(frozen=True)
class HostStatus:
    """One row of ``raytpu local status``."""

    slice_name: str
    worker_id: int
    pid: int
    node_id: str
    resources: str
    labels_ok: bool
    alive: bool


def status(cluster: LocalCluster) -> list[HostStatus]:
    """Every recorded node with what the GCS says about it (node id, resources, label check, liveness)."""
    connected = connect(cluster)  # first: it gives this process the cluster's token before Ray loads
    import ray

    plan = cluster.slice_plan
    by_key: dict[tuple[str, int], dict[str, Any]] = {}
    head_node: dict[str, Any] = {}
    try:
        for node in ray.nodes():
            if not node.get("Alive"):
                continue
            labels = node.get("Labels") or {}
            if "ray.io/tpu-worker-id" in labels:
                by_key[(labels.get("ray.io/tpu-slice-name", ""), int(labels["ray.io/tpu-worker-id"]))] = node
            elif (node.get("Resources") or {}).get("node:__internal_head__"):
                head_node = node
    finally:
        if connected:
            ray.shutdown()
    rows = []
    for proc in cluster.nodes:
        if proc.role == "head":
            info = head_node
            labels_ok = True
        else:
            info = by_key.get((proc.slice_name, proc.worker_id), {})
            labels = info.get("Labels") or {}
            want = plan.ray_labels(proc.slice_name, proc.worker_id)
            labels_ok = all(labels.get(k) == v for k, v in want.items())
        resources = {k: v for k, v in (info.get("Resources") or {}).items()
                     if not k.startswith(("node:", "memory", "object_store_memory"))}
        rows.append(HostStatus(
            slice_name=proc.slice_name or "(head)", worker_id=proc.worker_id, pid=proc.pid,
            node_id=str(info.get("NodeID", ""))[:12],
            resources=", ".join(f"{k}={v:g}" for k, v in sorted(resources.items())),
            labels_ok=labels_ok, alive=node_alive(cluster, proc) and bool(info)))
    return rows


def render_status(rows: list[HostStatus]) -> str:
    """The status rows as a text table."""
    header = ("SLICE", "HOST", "PGID", "NODE", "ALIVE", "LABELS", "RESOURCES")
    body = [(r.slice_name, "-" if r.worker_id < 0 else str(r.worker_id), str(r.pid), r.node_id or "-",
             "yes" if r.alive else "NO", "ok" if r.labels_ok else "MISMATCH", r.resources) for r in rows]
    return "\n".join(text_table([header, *body], rule=False))
