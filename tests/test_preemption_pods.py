"""Ray pods on capacity GKE takes back get their notice (issue 30 item 1; :mod:`raytpu.core.manifests.preemption`).

Rules, with their sources (evidence: docs/FACTS.md#preemption-notice-budget):

- GKE stops a preempted VM 30 s after the notice; graceful node shutdown gives non-system pods 15 s of it, and a
  ``terminationGracePeriodSeconds`` above 15 has no effect (https://cloud.google.com/kubernetes-engine/docs/how-to/
  preemptible-vms, https://cloud.google.com/kubernetes-engine/docs/concepts/spot-vms).
- Ray 2.60's ``ray start --block`` drains its node on SIGTERM for ``RAY_GRACEFUL_SHUTDOWN_DRAIN_TIMEOUT_S``
  (``ray._private.node.Node._drain_node_before_shutdown``; default 30 s in ``ray._private.ray_constants``), then gives
  each process 1 s before SIGKILL (``Node._kill_process_type``).
- KubeRay v1.7.0 sets no grace or preStop (kuberay#5004) and runs the Ray container as ``/bin/bash -c -- "ulimit ...;
  ray start ... --block"`` (``ray-operator/controllers/ray/common/pod.go`` ``BuildPod``, ``utils.GetContainerCommand``).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from crd import operator_errors, schema_errors, webhook_errors
from image_refs import FIXTURE_IMAGES

from raytpu.core.manifests import kuberay, preemption
from raytpu.core.specs import kinds
from raytpu.core.specs.cluster.cluster_parts import GkeSpec
from raytpu.core.specs.slices import notice
from raytpu.core.specs.spec import ClusterSpec, SliceSpec, WorkloadSpec

pytestmark = pytest.mark.unit

RECLAIMED = ("spot", "flex-start")  # spelled out: GKE takes these back while they run
KEPT = ("on-demand", "reservation")


def _slice(provisioning: str, fallback: tuple[str, ...] = (), **fields: Any) -> SliceSpec:
    extra: dict[str, Any] = {"reservation": "my-res"} if provisioning == "reservation" else {}
    return SliceSpec.create(name="train", generation="v6e", topology="4x4", zone="us-east5-b",
                            provisioning=provisioning, fallback=fallback, **extra, **fields)


def _objects(provisioning: str, mode: str = "standard", fallback: tuple[str, ...] = (),
             **fields: Any) -> list[dict[str, Any]]:
    item = _slice(provisioning, fallback, **fields)
    works = tuple(WorkloadSpec(name=k, kind=kinds.kind(k), slice=item,
                               model="org/model" if k == "serve" else None) for k in ("train", "serve"))
    spec = ClusterSpec(project="my-ml-project", region="us-east5", cluster=GkeSpec(name="ray-tpu", mode=mode),
                       slices=(item,), workloads=works)
    return [kuberay.workload_manifest(spec, w, images=FIXTURE_IMAGES, service_account="ksa", bucket="b")
            for w in works]


def _env(container: dict[str, Any]) -> dict[str, str]:
    return {e["name"]: e.get("value", "") for e in container.get("env", [])}


@pytest.mark.parametrize("mode", ["standard", "autopilot"])
@pytest.mark.parametrize("provisioning", RECLAIMED + KEPT)
def test_tpu_pods_on_reclaimed_capacity_get_the_notice_and_others_keep_kuberays_defaults(
        provisioning: str, mode: str) -> None:
    """Spot and flex-start TPU workers: grace 15 s (GKE's non-system share of the 30 s notice) and a drain of 10 s
    (the grace less 5 s for Ray's processes' stop), by Ray's own SIGTERM handler (2.60) or by the preStop (2.56,
    whose handler stops at once: ``ray._private.node.Node._register_shutdown_hooks``); the head and a RayJob's
    submitter run on no TPU node and keep KubeRay's defaults, as do on-demand and reservation workers.
    Source: https://cloud.google.com/kubernetes-engine/docs/how-to/preemptible-vms
    (docs/FACTS.md#preemption-notice-budget)."""
    for obj in _objects(provisioning, mode):
        assert schema_errors(obj) == [] and webhook_errors(obj) == [] and operator_errors(obj) == [], obj["kind"]
        cluster = kuberay.ray_cluster_of(obj)
        worker = cluster["workerGroupSpecs"][0]["template"]["spec"]
        others = [cluster["headGroupSpec"]["template"]["spec"]]
        if "submitterPodTemplate" in obj["spec"]:
            others.append(obj["spec"]["submitterPodTemplate"]["spec"])
        for pod in others:
            assert "terminationGracePeriodSeconds" not in pod
            assert all(preemption.DRAIN_ENV not in _env(c) and "lifecycle" not in c for c in pod["containers"])
        if provisioning in RECLAIMED:
            assert worker["terminationGracePeriodSeconds"] == 15
            ray = worker["containers"][0]
            # the jobs' Ray 2.60 drains on SIGTERM: the preStop signals it; the serving image's Ray 2.56 does not:
            # the preStop drains the node through the GCS and Ray's own drain is off
            signals = cluster["rayVersion"] == "2.60.0"
            assert signals == (obj["kind"] == "RayJob"), cluster["rayVersion"]
            assert _env(ray)[preemption.DRAIN_ENV] == ("10" if signals else "0")
            program = preemption.PRESTOP_SIGNAL if signals else preemption.PRESTOP_DRAIN
            assert ray["lifecycle"]["preStop"]["exec"]["command"] == ["python3", "-c", program]
        else:
            assert "terminationGracePeriodSeconds" not in worker
            assert preemption.DRAIN_ENV not in _env(worker["containers"][0])
            assert "lifecycle" not in worker["containers"][0]


def test_an_autopilot_fallback_onto_spot_counts_as_reclaimable() -> None:
    """An on-demand Autopilot slice that falls back to spot may land on a spot node: it gets the notice too."""
    for obj in _objects("on-demand", "autopilot", fallback=("spot",)):
        assert kuberay.ray_cluster_of(obj)["workerGroupSpecs"][0]["template"]["spec"][
            "terminationGracePeriodSeconds"] == preemption.POD_GRACE_S


@pytest.mark.parametrize("provisioning", RECLAIMED + KEPT)
def test_every_train_run_waits_for_its_re_created_slice(provisioning: str) -> None:
    """After a disruption Ray Train restarts the worker group, and each attempt to place it gives up after
    ``--start-timeout-s``, charged to ``controller_failure_limit`` (``--slice-retries``), which never resets in a run
    (Ray 2.60 ``WorkerGroup``: ``WorkerGroupStartupTimeoutError``; ``failure_handling.default.DefaultFailurePolicy
    .make_decision``). GKE takes back on-demand and reserved TPU slices too (preemption, host events: GKE's
    handle-disruption-gpu-tpu page), and a re-created slice takes minutes, so every mode waits ``RESTART_WAIT_S`` per
    attempt, never the program's 60 s. The program parses what is emitted."""
    from raytpu.workloads import train

    job = next(o for o in _objects(provisioning) if o["kind"] == "RayJob")
    argv = job["spec"]["entrypoint"].split()[3:]
    parsed = train.build_parser().parse_args([*kinds.kind("train").run_args("train-r1"), *argv])
    # v6e 4x4: Ray reserves its head, then places the group (2 waits); each may take a re-created slice's time
    # and --start-timeout-s bounds the attempt at their sum (issue 40 item 8)
    assert parsed.start_timeout_s == 2 * preemption.RESTART_WAIT_S, job["spec"]["entrypoint"]
    assert train.attempt_wait(_slice(provisioning).plan, 1, parsed.start_timeout_s) == {
        "attempt_s": parsed.start_timeout_s, "waits": 2, "per_wait_s": preemption.RESTART_WAIT_S}
    assert preemption.RESTART_WAIT_S > 60.0
    # every disruption the run resumes from may spend one such wait: the program's 2 would end it at the third
    assert parsed.slice_retries == preemption.MAX_PREEMPTIONS
    assert parsed.max_preemption_failures == preemption.MAX_PREEMPTIONS
    # with a notice (spot, flex-start), a host dead at the deadline before its drain is seen costs a max_failures
    # (Ray 2.60 TrainController._handle_preempting_state): one per disruption, plus the program's 1
    assert parsed.max_failures == (preemption.MAX_FAILURES_RECLAIMABLE if provisioning in RECLAIMED else 1)


@pytest.mark.parametrize("provisioning", ["on-demand", "reservation"])
def test_a_slice_with_a_run_duration_is_taken_back_with_a_notice_whatever_its_mode(provisioning: str) -> None:
    """GKE ends the slice's nodes at ``max_run_duration_s`` (any mode now): its pods drain, and a train run gets the
    failure budget of reclaimable capacity."""
    from raytpu.workloads import train

    objects = _objects(provisioning, max_run_duration_s=3600)
    for obj in objects:
        assert kuberay.ray_cluster_of(obj)["workerGroupSpecs"][0]["template"]["spec"][
            "terminationGracePeriodSeconds"] == preemption.POD_GRACE_S
    job = next(o for o in objects if o["kind"] == "RayJob")
    argv = job["spec"]["entrypoint"].split()[3:]
    parsed = train.build_parser().parse_args([*kinds.kind("train").run_args("train-r1"), *argv])
    assert parsed.max_failures == preemption.MAX_FAILURES_RECLAIMABLE


@pytest.mark.parametrize("provisioning", RECLAIMED + KEPT)
def test_a_run_on_reclaimed_capacity_waits_for_its_first_slice_as_long_as_it_may_run(provisioning: str) -> None:
    """KubeRay v1.7.0 fails a RayJob not Running ``preRunningDeadlineSeconds`` after its start
    (``checkPreRunningDeadlineAndUpdateStatusIfNeeded``; ``backoffLimit: 0``: no retry). Spot and flex-start capacity
    may come only after hours, so a train or batch run there waits its whole ``activeDeadlineSeconds``; a smoke check
    keeps its own deadline (a slice without capacity is reported unschedulable, not waited for)."""
    item = _slice(provisioning)
    for kind in ("train", "smoke"):
        limits = kinds.kind(kind).limits
        assert limits is not None
        job = kuberay.ray_job(f"{kind}-r1", WorkloadSpec(name=kind, kind=kinds.kind(kind), slice=item),
                              kuberay.Pods(image="us-docker.pkg.dev/p/r/ray-tpu:2.60.0"))
        waits = limits.active_deadline_s if provisioning in RECLAIMED and kind == "train" else \
            limits.pre_running_deadline_s
        assert job["spec"]["preRunningDeadlineSeconds"] == waits, (provisioning, kind)
        # the deadline's clock runs from the RayJob's start too: the wait is added, the run keeps its whole time
        assert job["spec"]["activeDeadlineSeconds"] == waits + limits.active_deadline_s, (provisioning, kind)


def test_which_ray_drains_on_sigterm() -> None:
    """Verified in the wheels: 2.60's handler drains (``Node._drain_node_before_shutdown``), 2.56's does not."""
    assert preemption.drains_on_sigterm("2.60.0") and preemption.drains_on_sigterm("3.1.0")
    assert not preemption.drains_on_sigterm("2.56.0") and not preemption.drains_on_sigterm("2.59.9")


def test_the_budget_fits_inside_the_notice() -> None:
    """Drain + teardown = the grace = GKE's non-system share, inside Compute Engine's 30 s notice; Ray's own default
    drain (30 s) would not fit it.
    Source: Ray 2.60 ``ray._private.ray_constants.RAY_GRACEFUL_SHUTDOWN_DRAIN_TIMEOUT_S``."""
    assert preemption.DRAIN_S + preemption.TEARDOWN_S == preemption.POD_GRACE_S < notice.NOTICE_S
    assert preemption.DRAIN_S > 0


def test_the_installed_ray_reads_the_drain_variable_the_pods_set() -> None:
    """The variable's name is the one Ray 2.60 reads (a misspelt name would leave Ray's 30 s default in force)."""
    code = "from ray._private import ray_constants as c; print(c.RAY_GRACEFUL_SHUTDOWN_DRAIN_TIMEOUT_S)"
    out = subprocess.run([sys.executable, "-c", code], env={**os.environ, preemption.DRAIN_ENV: "10"},
                         capture_output=True, text=True, timeout=120, check=True).stdout
    assert float(out.strip().splitlines()[-1]) == preemption.DRAIN_S


def test_the_kubelet_shell_execs_the_last_command_of_kuberays_list() -> None:
    """KubeRay's ``bash -c "ulimit -n ...; ray start ... --block"``: bash 5 execs the list's last command, so
    ``ray start`` is the container's PID 1 and the kubelet's SIGTERM reaches it (the preStop does not rely on it)."""
    shell = subprocess.Popen(["/bin/bash", "-c", "--", "ulimit -n ${RAY_START_ULIMIT_OPEN_FILES:-1024}; sleep 30"])
    try:
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            argv = Path(f"/proc/{shell.pid}/cmdline").read_bytes().split(b"\0")
            if argv[0] == b"sleep":
                break
            time.sleep(0.05)
        assert argv[:2] == [b"sleep", b"30"], argv
    finally:
        shell.kill()
        shell.wait()


RAY_LIKE = """\
import signal, sys, time
def stop(*_):
    open(sys.argv[-1], "w").write("SIGTERM")
    sys.exit(0)
signal.signal(signal.SIGTERM, stop)
print("ready", flush=True)
time.sleep(60)
"""


def test_the_prestop_signals_ray_start_and_nothing_else(tmp_path: Path) -> None:
    """The preStop sends SIGTERM to a process run as ``.../ray start ... --block`` (argv as the console script runs
    it), not to the ``bash -c`` that names ``ray start`` in one string, nor to a ``ray start`` without ``--block``.
    It reads a proc root the test builds from the real processes' cmdlines, so it never signals another Ray here."""
    script = tmp_path / "ray"
    script.write_text(RAY_LIKE)
    marks = {k: tmp_path / f"{k}.mark" for k in ("block", "noblock", "shell")}
    procs = {
        "block": [sys.executable, str(script), "start", "--address=x:6379", "--block", str(marks["block"])],
        "noblock": [sys.executable, str(script), "start", "--address=x:6379", str(marks["noblock"])],
        "shell": [sys.executable, "-c", RAY_LIKE, "ulimit -n 65536; ray start --block", str(marks["shell"])],
    }
    running = {k: subprocess.Popen(argv, stdout=subprocess.PIPE, text=True) for k, argv in procs.items()}
    try:
        for proc in running.values():
            assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
        root = tmp_path / "proc"
        for proc in running.values():
            (root / str(proc.pid)).mkdir(parents=True)
            (root / str(proc.pid) / "cmdline").write_bytes(Path(f"/proc/{proc.pid}/cmdline").read_bytes())
        (root / "self").mkdir()
        subprocess.run([sys.executable, "-c", preemption.PRESTOP_SIGNAL, str(root)], check=True, timeout=60)
        assert running["block"].wait(timeout=30) == 0
        assert marks["block"].read_text() == "SIGTERM"
        time.sleep(0.5)
        assert running["noblock"].poll() is None and running["shell"].poll() is None
        assert not marks["noblock"].exists() and not marks["shell"].exists()
    finally:
        for proc in running.values():
            if proc.poll() is None:
                proc.send_signal(signal.SIGKILL)
            proc.wait()

