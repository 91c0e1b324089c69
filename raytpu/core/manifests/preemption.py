"""What a Ray pod on capacity GKE takes back gets, so Ray drains rather than dies; every run gets a restart budget.
How and why: docs/FACTS.md#preemption-manifests (docs/FACTS.md#preemption-notice-budget and
docs/FACTS.md#preemption-notice-window). Standard library only."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from raytpu.core.specs.slices.notice import CRITICAL_PODS_S, NOTICE_S
from raytpu.core.specs.slices.provisioning import Provisioning

RECLAIMABLE = frozenset({"spot", "flex-start"})
"""Provisioning modes whose capacity GKE takes back while Ray runs (spot; flex-start at ``max_run_duration_s``)."""
TEARDOWN_S = 5
"""Kept from the drain for Ray's own stop (1 s per process). Source: Ray 2.60 ``Node._kill_process_type``."""


def pod_grace_s(notice_s: int = NOTICE_S) -> int:
    """The kubelet's share of a ``notice_s`` window for non-system pods: less :data:`CRITICAL_PODS_S` (15 of 30)."""
    return notice_s - CRITICAL_PODS_S


def drain_s(notice_s: int = NOTICE_S) -> int:
    """Ray's drain timeout: the grace less :data:`TEARDOWN_S`. Source: Ray 2.60 ``Node._drain_node_before_shutdown``."""
    return pod_grace_s(notice_s) - TEARDOWN_S


POD_GRACE_S = pod_grace_s()
"""The pods' grace in GKE's default window (15 s)."""
DRAIN_S = drain_s()
"""Ray's drain in GKE's default window (10 s)."""
DRAIN_ENV = "RAY_GRACEFUL_SHUTDOWN_DRAIN_TIMEOUT_S"

PRESTOP_SIGNAL = """\
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
"""preStop of a Ray that drains on SIGTERM: SIGTERM to every ``ray start ... --block`` (by argv; arg: a proc root)."""


def prestop_drain(drain: int = DRAIN_S) -> str:
    """preStop of a Ray that does not drain on SIGTERM. Source: Ray 2.56 ``ray drain-node``
    (docs/FACTS.md#preemption-manifests)."""
    return f"""\
import os, signal, sys, time
signal.alarm({drain + 2})  # ends the hook, a GCS call that hangs too (the head gone), before the grace does
root = sys.argv[1] if len(sys.argv) > 1 else "/proc"
raylet = None
for pid in os.listdir(root):
    try:
        with open(os.path.join(root, pid, "cmdline"), "rb") as f:
            argv = f.read().decode(errors="replace").split("\\0")
    except OSError:
        continue
    if pid.isdigit() and os.path.basename(argv[0]) == "raylet":
        raylet = int(pid), dict(a[2:].split("=", 1) for a in argv[1:] if a.startswith("--") and "=" in a)
if raylet is None:
    sys.exit(0)
from ray._raylet import GcsClient
from ray.core.generated import autoscaler_pb2
pid, flags = raylet
deadline = time.time() + {drain}
accepted, why = GcsClient(address=flags["gcs-address"]).drain_node(
    flags["node_id"], autoscaler_pb2.DrainNodeReason.Value("DRAIN_NODE_REASON_PREEMPTION"),
    "preStop: GKE is taking the node back", int(deadline * 1000))
print("drain accepted" if accepted else f"drain rejected: {{why}}", flush=True)
while accepted and time.time() < deadline:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        break
    time.sleep(0.5)
"""


PRESTOP_DRAIN = prestop_drain()
"""The drain preStop in GKE's default window."""

SIGTERM_DRAINS_SINCE = (2, 60)
"""The oldest Ray whose ``ray start --block`` drains on SIGTERM. Source: Ray 2.60 ``Node._register_shutdown_hooks``."""


def drains_on_sigterm(ray_version: str) -> bool:
    """Whether ``ray start --block`` of Ray ``ray_version`` (``2.60.0``) drains its node on SIGTERM."""
    parts = tuple(int(p) for p in ray_version.split(".")[:2] if p.isdigit())
    return parts >= SIGTERM_DRAINS_SINCE


def reclaimable(modes: Iterable[Provisioning], max_run_duration_s: int | None = None) -> bool:
    """Whether a pod on any of ``modes`` may lose its node with a notice (spot, flex-start, a max run duration)."""
    return max_run_duration_s is not None or any(m.name in RECLAIMABLE for m in modes)


def reclaimable_pod_fields(pod_spec: dict[str, Any], ray_version: str, notice_s: int = NOTICE_S) -> dict[str, Any]:
    """Adds the grace, the drain variable and the preStop for ``ray_version`` in a ``notice_s`` window to the pod."""
    signal_drains = drains_on_sigterm(ray_version)
    pod_spec["terminationGracePeriodSeconds"] = pod_grace_s(notice_s)
    for container in pod_spec["containers"]:
        container["env"] = [*(e for e in container.get("env", []) if e["name"] != DRAIN_ENV),
                            {"name": DRAIN_ENV, "value": str(drain_s(notice_s) if signal_drains else 0)}]
    program = PRESTOP_SIGNAL if signal_drains else prestop_drain(drain_s(notice_s))
    pod_spec["containers"][0]["lifecycle"] = {"preStop": {"exec": {"command": ["python3", "-c", program]}}}
    return pod_spec


RESTART_WAIT_S = 1800
"""Each wait of a run's restart for a replacement slice. Source: Ray 2.60 ``WorkerGroup``
(docs/FACTS.md#preemption-manifests)."""


MAX_PREEMPTIONS = 5
"""Disruptions a run resumes from (``max_preemption_failures``; Ray's -1 is forever), slow restarts it may spend."""
MAX_FAILURES_RECLAIMABLE = MAX_PREEMPTIONS + 1
"""``--max-failures`` on reclaimable capacity. Source: Ray 2.60 ``TrainController._handle_preempting_state``."""


def train_run_args(modes: Iterable[Provisioning], max_run_duration_s: int | None = None, waits: int = 1) -> list[str]:
    """The train program's restart flags for a slice provisioned by ``modes`` (docs/FACTS.md#preemption-manifests,
    docs/FACTS.md#preemption-restart-waits, docs/FACTS.md#preemption-taken-back,
    docs/FACTS.md#preemption-failure-budget).
    Source: https://cloud.google.com/kubernetes-engine/docs/concepts/handle-disruption-gpu-tpu"""
    args = ["--start-timeout-s", str(RESTART_WAIT_S * waits), "--slice-retries", str(MAX_PREEMPTIONS)]
    if reclaimable(modes, max_run_duration_s):
        args += ["--max-failures", str(MAX_FAILURES_RECLAIMABLE)]
    return args


def pre_running_deadline_s(deadline_s: int, run_deadline_s: int, modes: Iterable[Provisioning],
                           checks: bool) -> int:
    """``preRunningDeadlineSeconds``. Source: KubeRay v1.7.0 ``checkPreRunningDeadlineAndUpdateStatusIfNeeded``."""
    return run_deadline_s if reclaimable(modes) and not checks else deadline_s

