"""``raytpu local status``: every recorded node beside what the GCS says of it (node id, resources, labels, alive)."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from raytpu.core.common.table import text_table
from raytpu.local.slice.connection import connect, disconnect
from raytpu.local.slice.procs import node_alive
from raytpu.local.slice.state import LocalCluster


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
    replaced: bool = False


def status(cluster: LocalCluster) -> list[HostStatus]:
    """Every recorded node with what the GCS says about it (node id, resources, label check, liveness)."""
    connected = connect(cluster)  # first: it gives this process the cluster's token before Ray loads
    import ray

    try:
        nodes = ray.nodes()
    finally:
        if connected:
            disconnect()
    return status_rows(cluster, nodes)


def status_rows(cluster: LocalCluster, nodes: list[dict[str, Any]]) -> list[HostStatus]:
    """The rows of ``cluster``'s recorded nodes beside the GCS's ``nodes`` (``ray.nodes()``). A host killed and
    replaced since (``local preempt``, a drill) is a row marked ``replaced``: not alive, and no fault of the slice."""
    plan = cluster.slice_plan
    by_key: dict[tuple[str, int], dict[str, Any]] = {}
    head_node: dict[str, Any] = {}
    for node in nodes:
        if not node.get("Alive"):
            continue
        labels = node.get("Labels") or {}
        if "ray.io/tpu-worker-id" in labels:
            by_key[(labels.get("ray.io/tpu-slice-name", ""), int(labels["ray.io/tpu-worker-id"]))] = node
        elif (node.get("Resources") or {}).get("node:__internal_head__"):
            head_node = node
    current = {(n.slice_name, n.worker_id) for n in cluster.nodes if n.role == "host" and not n.killed}
    rows = []
    for proc in cluster.nodes:
        replaced = proc.role == "host" and proc.killed and (proc.slice_name, proc.worker_id) in current
        if proc.role == "head":
            info = head_node
            labels_ok = True
        else:
            info = {} if replaced else by_key.get((proc.slice_name, proc.worker_id), {})
            labels = info.get("Labels") or {}
            want = plan.ray_labels(proc.slice_name, proc.worker_id)
            labels_ok = replaced or all(labels.get(k) == v for k, v in want.items())
        resources = {k: v for k, v in (info.get("Resources") or {}).items()
                     if not k.startswith(("node:", "memory", "object_store_memory"))}
        rows.append(HostStatus(
            slice_name=proc.slice_name or "(head)", worker_id=proc.worker_id, pid=proc.pid,
            node_id=str(info.get("NodeID", ""))[:12],
            resources=", ".join(f"{k}={v:g}" for k, v in sorted(resources.items())),
            labels_ok=labels_ok, alive=not replaced and node_alive(cluster, proc) and bool(info), replaced=replaced))
    return rows


def healthy(rows: list[HostStatus]) -> bool:
    """Every node alive but those replaced since: ``local status`` exits 0."""
    return all(r.alive or r.replaced for r in rows)


def render_status(rows: list[HostStatus]) -> str:
    """The status rows as a text table."""
    header = ("SLICE", "HOST", "PGID", "NODE", "ALIVE", "LABELS", "RESOURCES")
    body = [(r.slice_name, "-" if r.worker_id < 0 else str(r.worker_id), str(r.pid), r.node_id or "-",
             "replaced" if r.replaced else "yes" if r.alive else "NO", "ok" if r.labels_ok else "MISMATCH",
             r.resources) for r in rows]
    return "\n".join(text_table([header, *body], rule=False))


def status_document(cluster: LocalCluster, rows: list[HostStatus]) -> dict[str, Any]:
    """``local status --json``: the head's address, the slices, the plan and every node's row."""
    return {"address": cluster.address, "slices": cluster.slices, "plan": cluster.plan,
            "nodes": [asdict(r) for r in rows]}


def status_header(cluster: LocalCluster) -> str:
    """The line above the table: the head's address, what it emulates and where its run folder is."""
    plan = cluster.slice_plan
    return (f"{cluster.address}  {plan.generation} {plan.topology} x {len(cluster.slices)} slice(s)  "
            f"run dir {cluster.run_dir}")
