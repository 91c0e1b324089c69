"""A host of the emulated slice preempted as GKE preempts one: its notice, then the kill, then the replacement pod.

An emulated host's ``ray start`` does not block, so no process holds Ray's SIGTERM drain handler: :func:`preempt` makes
its GCS drain call (:func:`drain`, deadline at the notice's end), SIGKILLs the host's process group when the notice
ends, as the kubelet does, and starts a replacement; ``notice_s`` 0 is a crash (SIGKILL at once, no drain). Source: Ray
2.60 ``Node._drain_node_before_shutdown`` (docs/FACTS.md#preemption-local). psutil at import; ``ray`` in
:func:`drain`."""

from __future__ import annotations

import math
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from raytpu.core.common.errors import RuntimeFailure, invalid_value
from raytpu.local.slice import procs
from raytpu.local.slice.startup import add_host
from raytpu.local.slice.state import LocalCluster, NodeProc, Progress

REPLACE_ATTEMPTS = 3
"""Starts of a replacement host before the drill gives up (each start already retries what a restart can fix)."""
MAX_NOTICE_S = 3600.0
"""The longest notice taken: GKE gives a preempted spot node seconds, not hours."""


@dataclass
class Preemption:
    """What happened to the preempted host, by wall clock (``time.time()``): its slice and ``TPU_WORKER_ID``, the notice
    (seconds from drain to kill; 0: a crash), its Ray node id (hex) when drained, when the drain was asked
    (``notice_wall``; None without notice), when it was killed (``gone_wall``), ``how`` (``killed at the notice's end``
    or ``crashed (no notice)``), when its replacement had registered (``replaced_wall``; None when not replaced)."""

    slice_name: str
    worker_id: int
    notice_s: float
    node_id: str = ""
    notice_wall: float | None = None
    gone_wall: float | None = None
    how: str = ""
    replaced_wall: float | None = None

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def check_notice(notice_s: float) -> float:
    """``--notice-s``: finite, 0 (a crash) up to :data:`MAX_NOTICE_S`."""
    if not (math.isfinite(notice_s) and 0 <= notice_s <= MAX_NOTICE_S):
        raise invalid_value("--notice-s", notice_s, "is not a notice",
                            f"seconds from 0 (no notice: a host crash) to {MAX_NOTICE_S:g}")
    return notice_s


def running_cluster(where: Path) -> LocalCluster:
    """The local cluster recorded in ``where`` whose hosts run; InvalidInput naming ``--dir`` (exit 2) otherwise."""
    cluster = LocalCluster.load(where)
    if cluster is None or not any(procs.node_alive(cluster, n) for n in cluster.hosts()):
        raise invalid_value("--dir", str(where), "has no emulated slice running",
                            "the run directory of a running `raytpu local up` (start one first)")
    return cluster


def target(cluster: LocalCluster, host: int | None, slice_name: str | None = None) -> NodeProc:
    """The live host ``host`` (``TPU_WORKER_ID``; default the last) of ``slice_name`` (default the first slice);
    InvalidInput (exit 2) for an unknown ``--slice``, a ``--host`` out of range or a host not running."""
    name = slice_name or cluster.slices[0]
    if name not in cluster.slices:
        raise invalid_value("--slice", name, "is not a slice of the local cluster", ", ".join(cluster.slices))
    hosts = cluster.slice_plan.hosts
    wanted = hosts - 1 if host is None else host
    if not 0 <= wanted < hosts:
        raise invalid_value("--host", wanted, "is out of range",
                            f"a TPU_WORKER_ID of slice {name}: 0 to {hosts - 1}")
    found = [n for n in cluster.hosts(name) if n.worker_id == wanted and procs.node_alive(cluster, n)]
    if not found:
        raise invalid_value("--host", wanted, f"is not running on slice {name} (already preempted or stopped)",
                            "a running host (`raytpu local status`)")
    return found[0]


def drain(cluster: LocalCluster, node: NodeProc, deadline_wall: float) -> str:
    """Asks the GCS to drain ``node`` for a preemption by ``deadline_wall``, as ``ray start --block`` does on SIGTERM
    (``DRAIN_NODE_REASON_PREEMPTION``: the raylet cannot reject it); returns the node id (hex). Source:
    docs/FACTS.md#preemption-local."""
    from raytpu.local.slice.connection import check_head, speak_auth

    check_head(cluster)
    speak_auth(cluster)  # before Ray loads: it reads its auth mode once
    import ray
    from ray._raylet import GcsClient  # type: ignore[attr-defined]
    from ray.core.generated import autoscaler_pb2, gcs_pb2

    gcs = GcsClient(address=cluster.address)
    alive = gcs_pb2.GcsNodeInfo.GcsNodeState.ALIVE  # type: ignore[attr-defined]
    infos = gcs.get_all_node_info(timeout=30, state_filter=alive).values()
    found = [ray.NodeID(info.node_id).hex() for info in infos if info.temp_dir == node.temp]
    if not found:
        raise RuntimeFailure(f"local.preempt: {node.slice_name} worker {node.worker_id} is not an alive Ray node",
                             "`raytpu local status`")
    reason = autoscaler_pb2.DrainNodeReason.Value("DRAIN_NODE_REASON_PREEMPTION")  # type: ignore[attr-defined]
    accepted, why = gcs.drain_node(found[0], reason, "Node received SIGTERM; draining before shutdown.",
                                   int(deadline_wall * 1000))
    if not accepted:
        raise RuntimeFailure(f"local.preempt: the GCS refused to drain {node.slice_name} worker {node.worker_id}: "
                             f"{why}")
    return found[0]


def preempt(cluster: LocalCluster, node: NodeProc, notice_s: float, replace: bool = True,
            progress: Progress | None = None, replace_timeout_s: float | None = None) -> Preemption:
    """Preempts ``node`` (:func:`target`): the drain its ``ray start --block`` would start on SIGTERM, SIGKILL to
    its process group after ``notice_s`` (at once when 0), then, with ``replace``, a replacement host (as KubeRay
    recreates the pod)."""
    say = progress or (lambda _line: None)
    check_notice(notice_s)
    record = Preemption(node.slice_name, node.worker_id, notice_s)
    if notice_s > 0:
        record.notice_wall = time.time()
        record.node_id = drain(cluster, node, record.notice_wall + notice_s)
        say(f"notice: {node.slice_name} worker {node.worker_id} draining for preemption (as on SIGTERM); killed in "
            f"{notice_s:g}s")
        time.sleep(max(0.0, record.notice_wall + notice_s - time.time()))
        record.how = "killed at the notice's end"
    else:
        record.how = "crashed (no notice)"
    record.gone_wall = time.time()
    procs.kill_host(cluster, node.slice_name, node.worker_id)  # whatever is left, the Ray workers included
    say(f"{node.slice_name} worker {node.worker_id} gone ({record.how})")
    if replace:
        _replace(cluster, node, replace_timeout_s, say)
        record.replaced_wall = time.time()
        say(f"{node.slice_name} worker {node.worker_id} replaced (a new Ray node)")
    return record


def _replace(cluster: LocalCluster, node: NodeProc, timeout_s: float | None, say: Progress) -> None:
    """Starts the host again, as KubeRay recreates a deleted pod, and again (up to :data:`REPLACE_ATTEMPTS` times)
    when its start fails, as KubeRay recreates a pod that failed."""
    for attempt in range(1, REPLACE_ATTEMPTS + 1):
        try:
            add_host(cluster, node.slice_name, node.worker_id, timeout_s)
            return
        except RuntimeFailure as exc:
            if attempt == REPLACE_ATTEMPTS:
                raise RuntimeFailure(f"local.preempt: the replacement of {node.slice_name} worker {node.worker_id} "
                                     f"did not start in {attempt} attempts: {exc}") from exc
            say(f"the replacement did not start ({str(exc)[:160]}); starting it again, as KubeRay would")
