"""What a Ray pod on capacity GKE takes back (spot, flex-start) gets, so that Ray drains rather than dies.

GKE stops a reclaimed VM 30 s after the notice (a spot slice's ``preemption_notice_s`` may raise it to 120); the
kubelet's graceful node shutdown gives non-system pods the window less :data:`CRITICAL_PODS_S` (system pods the rest),
and a longer ``terminationGracePeriodSeconds`` has no effect there (docs/FACTS.md sections 18 and 24.y). A draining
Ray node takes no new work, and Serve moves its replicas and proxy off it. So a TPU worker pod on such capacity gets
(:func:`reclaimable_pod_fields`) ``terminationGracePeriodSeconds`` = :func:`pod_grace_s` (the same in a voluntary
eviction) and, by its Ray:

- Ray 2.60 (the jobs' image): its ``ray start --block`` drains the node on SIGTERM for up to
  ``RAY_GRACEFUL_SHUTDOWN_DRAIN_TIMEOUT_S`` (default 30 s, longer than the share), then stops its processes. The pod
  sets it to :func:`drain_s` (the grace less :data:`TEARDOWN_S` for that stop), and its preStop (:data:`PRESTOP_SIGNAL`)
  sends SIGTERM to ``ray start`` whatever its PID. KubeRay runs it under ``/bin/bash -c``, which execs the last
  command of its list with bash 5 (then the kubelet's SIGTERM reaches it too) but not always. The hook returns at
  once, and the handler ignores the kubelet's second SIGTERM.
- An older Ray (the serving image's 2.56) stops every process at once on SIGTERM. Its preStop
  (:func:`prestop_drain`) asks the GCS to drain the node itself (the call ``ray drain-node`` makes) and waits until
  the raylet exits or the drain passes; the kubelet's SIGTERM then stops Ray. The variable is 0 there, so a Ray
  that does drain on SIGTERM does not drain twice.

On-demand and reservation pods without a run duration keep KubeRay's defaults. Their slices can still be taken
back (GKE preempts reserved and on-demand TPUs too, and a host event interrupts the whole slice: TPU VMs do not live
migrate), so every training run gets a restart budget (:func:`train_run_args`). Standard library only.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from raytpu.core.specs.notice import CRITICAL_PODS_S, NOTICE_S
from raytpu.core.specs.provisioning import Provisioning

RECLAIMABLE = frozenset({"spot", "flex-start"})
"""Provisioning modes whose capacity GKE takes back while Ray runs on it (a spot preemption; flex-start's removal at
``max_run_duration_s``). Queued slices run no Ray (:attr:`Provisioning.runs_ray`)."""
TEARDOWN_S = 5
"""Kept from the drain for Ray's own stop: ``Node.kill_all_processes(allow_graceful=True)`` gives each of a worker
node's processes 1 s after SIGTERM before SIGKILL. Source: Ray 2.60 ``ray._private.node.Node._kill_process_type``."""


def pod_grace_s(notice_s: int = NOTICE_S) -> int:
    """The kubelet's share of a ``notice_s`` window for non-system pods: the window less :data:`CRITICAL_PODS_S`
    (15 of GKE's default 30)."""
    return notice_s - CRITICAL_PODS_S


def drain_s(notice_s: int = NOTICE_S) -> int:
    """``RAY_GRACEFUL_SHUTDOWN_DRAIN_TIMEOUT_S`` on reclaimable pods: how long ``ray start --block`` keeps its node
    draining (DRAIN_NODE_REASON_PREEMPTION, with this deadline) before it stops its processes: the pods' grace less
    :data:`TEARDOWN_S`.
    Source: Ray 2.60 ``ray._private.node.Node._drain_node_before_shutdown`` (ray-project/ray#64454)."""
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
"""The preStop program of a Ray that drains on SIGTERM: SIGTERM to every ``ray start ... --block`` process of the
container (argv ``.../ray start``, not the ``bash -c`` string that names it). An optional argument names another proc
root (the tests')."""


def prestop_drain(drain: int = DRAIN_S) -> str:
    """The preStop program of a Ray that does not drain on SIGTERM: the GCS drain of the container's raylet (its
    ``--node_id`` and ``--gcs-address`` flags; ``DRAIN_NODE_REASON_PREEMPTION`` with a deadline ``drain`` s ahead, as
    Ray 2.56's ``ray drain-node`` calls ``GcsClient.drain_node``), then a wait until the raylet exits or the deadline;
    SIGALRM ends it 2 s past the deadline whatever it waits on."""
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
"""The oldest Ray whose ``ray start --block`` the kit verified to drain on SIGTERM (2.60:
``Node._register_shutdown_hooks`` calls ``_drain_node_before_shutdown``; 2.56's handler calls ``kill_all_processes``
at once)."""


def drains_on_sigterm(ray_version: str) -> bool:
    """Whether ``ray start --block`` of Ray ``ray_version`` (``2.60.0``) drains its node on SIGTERM."""
    parts = tuple(int(p) for p in ray_version.split(".")[:2] if p.isdigit())
    return parts >= SIGTERM_DRAINS_SINCE


def reclaimable(modes: Iterable[Provisioning], max_run_duration_s: int | None = None) -> bool:
    """Whether a pod that may land on any of ``modes`` (a slice's provisioning and its Autopilot fallbacks) may have
    its node taken back with a notice: on spot or flex-start, or at the slice's ``max_run_duration_s``."""
    return max_run_duration_s is not None or any(m.name in RECLAIMABLE for m in modes)


def reclaimable_pod_fields(pod_spec: dict[str, Any], ray_version: str, notice_s: int = NOTICE_S) -> dict[str, Any]:
    """Adds the grace, the drain variable (every container) and the Ray container's preStop for Ray ``ray_version``
    in a ``notice_s`` window to ``pod_spec``."""
    signal_drains = drains_on_sigterm(ray_version)
    pod_spec["terminationGracePeriodSeconds"] = pod_grace_s(notice_s)
    for container in pod_spec["containers"]:
        container["env"] = [*(e for e in container.get("env", []) if e["name"] != DRAIN_ENV),
                            {"name": DRAIN_ENV, "value": str(drain_s(notice_s) if signal_drains else 0)}]
    program = PRESTOP_SIGNAL if signal_drains else prestop_drain(drain_s(notice_s))
    pod_spec["containers"][0]["lifecycle"] = {"preStop": {"exec": {"command": ["python3", "-c", program]}}}
    return pod_spec


RESTART_WAIT_S = 1800
"""How long each wait of a training run's restart may take for a whole replacement slice after a disruption
(KubeRay recreates the pods, GKE re-creates the TPU nodes: minutes), where the program's own 60 s would fail the
restart. An attempt that times out is charged to ``--slice-retries``, which never resets in a run. Source: Ray 2.60
``WorkerGroup`` (``WorkerGroupStartupTimeoutError``), ``failure_handling.default.DefaultFailurePolicy.make_decision``
(``controller_failure_limit``)."""


MAX_PREEMPTIONS = 5
"""Disruptions a training run resumes from (``FailureConfig.max_preemption_failures``; Ray's default, -1, retries
forever), and the slow restarts it may spend on them (``--slice-retries``)."""
MAX_FAILURES_RECLAIMABLE = MAX_PREEMPTIONS + 1
"""``--max-failures`` on capacity taken back with a notice: a host that dies at the deadline before its drain was
seen is a worker failure, not a preemption (Ray 2.60 ``TrainController._handle_preempting_state`` charges an error
with no preempted worker to ``max_failures``), so each disruption may spend one, and the program's 1 is kept for the
rest."""


def train_run_args(modes: Iterable[Provisioning], max_run_duration_s: int | None = None, waits: int = 1) -> list[str]:
    """The train program's flags for a slice provisioned by ``modes`` (its mode and fallbacks): any slice can be
    taken back (docs/FACTS.md section 21), so each of an attempt's ``waits`` (:func:`raytpu.core.specs.multislice.
    reservation_waits`) may take :data:`RESTART_WAIT_S` for a re-created slice, and ``--start-timeout-s`` bounds the
    attempt's whole wait at their sum (docs/FACTS.md 24.z); every disruption it resumes from may spend one attempt
    (``--slice-retries``: the program's 2 would end the run at the third); on capacity taken back with a notice
    (:func:`reclaimable`) also :data:`MAX_FAILURES_RECLAIMABLE`.
    Source: https://cloud.google.com/kubernetes-engine/docs/concepts/handle-disruption-gpu-tpu"""
    args = ["--start-timeout-s", str(RESTART_WAIT_S * waits), "--slice-retries", str(MAX_PREEMPTIONS)]
    if reclaimable(modes, max_run_duration_s):
        args += ["--max-failures", str(MAX_FAILURES_RECLAIMABLE)]
    return args


def pre_running_deadline_s(deadline_s: int, run_deadline_s: int, modes: Iterable[Provisioning],
                           checks: bool) -> int:
    """A RayJob's ``preRunningDeadlineSeconds``: its kind's ``deadline_s``, but a run (not a check) on capacity GKE
    takes back waits for its first slice as long as it may run, as spot and flex-start capacity may come only after
    hours. Source: KubeRay v1.7.0 ``checkPreRunningDeadlineAndUpdateStatusIfNeeded`` (Failed, no retry at
    ``backoffLimit: 0``)."""
    return run_deadline_s if reclaimable(modes) and not checks else deadline_s

