"""What a Ray pod on capacity GKE takes back (spot, flex-start) gets, so that Ray drains rather than dies.

GKE stops a reclaimed VM 30 s after the notice; the kubelet's graceful node shutdown gives non-system pods the first
15 s of it (system pods the rest), and a ``terminationGracePeriodSeconds`` above 15 has no effect there
(:data:`NOTICE_S`, :data:`POD_GRACE_S`; docs/FACTS.md section 18). Ray 2.60's ``ray start --block`` drains its node
on SIGTERM for up to ``RAY_GRACEFUL_SHUTDOWN_DRAIN_TIMEOUT_S`` (default 30 s, longer than that share), then stops its
processes. So a TPU worker pod on such capacity gets (:func:`reclaimable_pod_fields`):

- ``terminationGracePeriodSeconds`` = :data:`POD_GRACE_S`, the same in a voluntary eviction (node upgrade, drain);
- ``RAY_GRACEFUL_SHUTDOWN_DRAIN_TIMEOUT_S`` = :data:`DRAIN_S`: the grace less :data:`TEARDOWN_S` for the processes'
  own stop, so Ray is not killed mid-teardown;
- a preStop hook (:data:`PRESTOP`) that sends SIGTERM to the ``ray start --block`` process whatever its PID: KubeRay
  runs it under ``/bin/bash -c``, which execs the last command of its list with bash 5.x (then the kubelet's SIGTERM
  reaches it too) but not when the list is longer; the hook returns at once, and the handler's re-entrancy guard
  ignores the kubelet's second SIGTERM.

On-demand and reservation capacity is never taken back: those pods keep KubeRay's defaults. Standard library only.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from raytpu.core.provisioning import Provisioning

RECLAIMABLE = frozenset({"spot", "flex-start"})
"""Provisioning modes whose capacity GKE takes back while Ray runs on it (a spot preemption; flex-start's removal at
``max_run_duration_s``). Queued slices run no Ray (:attr:`Provisioning.runs_ray`)."""
NOTICE_S = 30
"""Compute Engine stops a preempted VM this long after its notice.
Source: https://cloud.google.com/kubernetes-engine/docs/concepts/spot-vms (termination and graceful shutdown)."""
POD_GRACE_S = 15
"""The kubelet's share of :data:`NOTICE_S` for non-system pods (GKE's default ``shutdownGracePeriod`` 30 s less
``shutdownGracePeriodCriticalPods`` 15 s). Source: https://cloud.google.com/kubernetes-engine/docs/how-to/preemptible-vms
(docs/FACTS.md section 18)."""
TEARDOWN_S = 5
"""Kept from the drain for Ray's own stop: ``Node.kill_all_processes(allow_graceful=True)`` gives each of a worker
node's processes 1 s after SIGTERM before SIGKILL. Source: Ray 2.60 ``ray._private.node.Node._kill_process_type``."""
DRAIN_S = POD_GRACE_S - TEARDOWN_S
"""``RAY_GRACEFUL_SHUTDOWN_DRAIN_TIMEOUT_S`` on reclaimable pods: how long ``ray start --block`` keeps its node draining
(DRAIN_NODE_REASON_PREEMPTION, with this deadline) before it stops its processes.
Source: Ray 2.60 ``ray._private.node.Node._drain_node_before_shutdown`` (ray-project/ray#64454)."""
DRAIN_ENV = "RAY_GRACEFUL_SHUTDOWN_DRAIN_TIMEOUT_S"

PRESTOP = """\
import os, signal, sys
root = sys.argv[1] if len(sys.argv) > 1 else "/proc"
for pid in os.listdir(root):
    if not pid.isdigit() or int(pid) == os.getpid():
        continue
    try:
        with open(os.path.join(root, pid, "cmdline"), "rb") as f:
            argv = f.read().split(b"\\0")
    except OSError:
        continue
    starts = any(os.path.basename(a) == b"ray" and b == b"start" for a, b in zip(argv, argv[1:]))
    if starts and b"--block" in argv:
        try:
            os.kill(int(pid), signal.SIGTERM)
        except OSError:
            pass
"""
"""The preStop program: SIGTERM to every ``ray start ... --block`` process of the container (argv ``.../ray start``,
not the ``bash -c`` string that names it). An optional argument names another proc root (the tests')."""


def reclaimable(modes: Iterable[Provisioning]) -> bool:
    """Whether a pod that may land on any of ``modes`` (a slice's provisioning and its Autopilot fallbacks) may have
    its node taken back."""
    return any(m.name in RECLAIMABLE for m in modes)


def reclaimable_pod_fields(pod_spec: dict[str, Any]) -> dict[str, Any]:
    """Adds the grace, the drain timeout (every container) and the Ray container's preStop to ``pod_spec``."""
    pod_spec["terminationGracePeriodSeconds"] = POD_GRACE_S
    for container in pod_spec["containers"]:
        container["env"] = [*(e for e in container.get("env", []) if e["name"] != DRAIN_ENV),
                            {"name": DRAIN_ENV, "value": str(DRAIN_S)}]
    pod_spec["containers"][0]["lifecycle"] = {"preStop": {"exec": {"command": ["python", "-c", PRESTOP]}}}
    return pod_spec
