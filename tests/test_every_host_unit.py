"""``run_on: every_host`` without a Ray cluster (issue 67): the RayJob KubeRay gets (its CRD and operator rules), the
field's rules, the host process's start/stop, JAX's process id as JAX derives it, the emulated-slice JAX shim, the
failed host in `submit`'s error, and the phases the kit cannot see. End to end: tests/test_every_host.py."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import psutil
import pytest
from crd import load_yaml, operator_errors, schema_errors
from image_refs import FIXTURE_IMAGES

from raytpu.core.common import timeline
from raytpu.core.manifests import kuberay
from raytpu.core.specs import kinds
from raytpu.core.specs.cluster.cluster_parts import GkeSpec
from raytpu.core.specs.runtime import user_code
from raytpu.core.specs.spec import WORKLOAD_ENV, ClusterSpec, SliceSpec, WorkloadSpec
from raytpu.teamcode import failures
from raytpu.workloads.every_host import exit_code
from raytpu.workloads.support import host_process

pytestmark = pytest.mark.unit


def _work(topology: str = "4x4", slices: int | None = None, count: int = 2, machine: str | None = None,
          **extra: Any) -> WorkloadSpec:
    item = SliceSpec.create(name="train", generation="v6e", topology=topology, zone="us-east5-b", count=count,
                            machine_type=machine)
    return WorkloadSpec(name="plain", kind=kinds.kind("job"), slice=item, slices=slices,
                        entrypoint="python train.py --steps 5", run_on="every_host", **extra)


def _rayjob(work: WorkloadSpec) -> dict[str, Any]:
    spec = ClusterSpec(project="my-ml-project", region="us-east5", cluster=GkeSpec(name="ray-tpu"),
                       slices=(work.slice,), workloads=(work,))
    return kuberay.workload_manifest(spec, work, images=FIXTURE_IMAGES, service_account="ray-ksa",
                                     bucket="my-bucket", namespace="ray", name="plain-r1")


@pytest.mark.parametrize(("topology", "slices"), [("4x4", 1), ("4x4", 2), ("2x2", 1)])
def test_the_rayjob_runs_the_kits_driver_which_runs_the_entrypoint_on_every_host(topology: str, slices: int) -> None:
    """KubeRay v1.7.0 runs ``spec.entrypoint`` with ``ray job submit`` on the head (BuildJobSubmitCommand): the kit's
    small driver goes there, and the team's command travels in the spec for every host. Checked against the vendored
    KubeRay CRDs and the operator's own validation rules."""
    work = _work(topology, slices)
    job = _rayjob(work)
    assert schema_errors(job) == [] and operator_errors(job) == []
    assert job["spec"]["entrypoint"] == f"python -m {kuberay.EVERY_HOST_PROGRAM}"
    runtime = load_yaml(job["spec"]["runtimeEnvYAML"])
    assert WorkloadSpec.from_env(runtime["env_vars"]).entrypoint == "python train.py --steps 5"
    assert runtime["py_modules"]  # the kit's driver and host actor ship in the core zip, as every job's program
    group = job["spec"]["rayClusterSpec"]["workerGroupSpecs"][0]
    assert group["replicas"] == slices and group["numOfHosts"] == work.plan.hosts
    env = {e["name"]: e.get("value") for e in group["template"]["spec"]["containers"][0]["env"]}
    # multi-slice: the webhook adds MEGASCALE_SLICE_ID/COORDINATOR per replica once MEGASCALE_NUM_SLICES is set
    assert env.get("MEGASCALE_NUM_SLICES") == (str(slices) if slices > 1 else None)
    assert "entrypointResources" not in job["spec"]  # the driver is light: the hosts' chips go to the actors


def test_a_driver_job_keeps_its_entrypoint_on_the_head() -> None:
    job = _rayjob(WorkloadSpec(name="plain", kind=kinds.kind("job"), slice=_work().slice, entrypoint="python drive.py"))
    assert job["spec"]["entrypoint"] == "python drive.py"


@pytest.mark.parametrize(("fields", "field", "says"), [
    ({"run_on": "everywhere"}, "run_on", "driver (default"),
    ({"run_on": "every_host", "kind": "train", "entrypoint": None}, "run_on", "only with kind job"),
    ({"run_on": 3}, "run_on", "is not where an entrypoint can run"),
])
def test_bad_run_on_names_the_field(fields: dict[str, Any], field: str, says: str) -> None:
    from raytpu.core.common.errors import InvalidInput, InvalidInputs

    given = {"name": "plain", "kind": kinds.kind(fields.pop("kind", "job")), "slice": _work().slice,
             "entrypoint": "python train.py", **fields}
    with pytest.raises((InvalidInput, InvalidInputs)) as raised:
        WorkloadSpec(**given)
    assert field in str(raised.value) and says in str(raised.value)


def test_every_host_may_span_slices_ray_train_cannot_pin() -> None:
    """A v6e 2x4 of two 4-chip hosts is one 8-chip host to Ray 2.60's SlicePlacementGroup, so JaxTrainer cannot span
    such slices (multislice.problems); the every-host driver pins each slice by name and worker id itself."""
    item = _work("2x4", slices=2, machine="ct6e-standard-4t").slice
    with pytest.raises(ValueError, match="cannot be reserved slice by slice"):
        WorkloadSpec(name="plain", kind=kinds.kind("job"), slice=item, slices=2, entrypoint="python drive.py")


def test_jax_process_id_is_worker_plus_slice_times_hosts() -> None:
    """JAX 0.10.2 ``BaseTpuCluster.get_process_id``: ``TPU_WORKER_ID + MEGASCALE_SLICE_ID * hosts``."""
    assert host_process.jax_process_id({"TPU_WORKER_ID": "3"}, 0, 4) == 3
    assert host_process.jax_process_id({"TPU_WORKER_ID": "1", "MEGASCALE_SLICE_ID": "2"}, 0, 4) == 9
    assert host_process.jax_process_id({"TPU_WORKER_ID": "1"}, 1, 2) == 3  # emulated: the run's slice order


def test_a_host_process_streams_its_lines_and_stops_with_its_whole_group(tmp_path: Path) -> None:
    proc = host_process.HostProcess()
    pid = proc.start("echo out; echo err >&2; sleep 300 & sleep 300", {"RAYTPU_HOST_RANK": "2"})
    deadline = time.monotonic() + 10
    seen: list[str] = []
    while len(seen) < 2 and time.monotonic() < deadline:
        seen += proc.poll()["lines"]
        time.sleep(0.1)
    assert sorted(seen) == ["err", "out"]
    group = [p for p in psutil.process_iter() if _pgid(p.pid) == pid]
    assert len(group) >= 2  # bash's background sleep and its foreground one
    assert proc.stop(grace_s=5) == -signal.SIGTERM
    time.sleep(0.5)
    assert [p for p in group if p.is_running() and p.status() != psutil.STATUS_ZOMBIE] == []
    ended = proc.poll()
    assert ended["code"] == -signal.SIGTERM and ended["ran_s"] is not None


def _pgid(pid: int) -> int | None:
    try:
        return os.getpgid(pid)
    except ProcessLookupError:
        return None


def test_a_host_process_gets_its_env_and_the_notice_file() -> None:
    proc = host_process.HostProcess()
    proc.start("echo rank=$RAYTPU_HOST_RANK; sleep 30; echo never", {"RAYTPU_HOST_RANK": "5"})
    time.sleep(0.5)
    proc.notice({"host": 5, "deadline_ms": 1})
    assert proc.notice_file is not None and json.loads(Path(proc.notice_file).read_text()) == {"host": 5,
                                                                                           "deadline_ms": 1}
    deadline = time.monotonic() + 10
    lines: list[str] = []
    while (seen := proc.poll())["code"] is None and time.monotonic() < deadline:
        lines += seen["lines"]
        time.sleep(0.1)
    lines += seen["lines"]
    assert lines == ["rank=5"] and seen["code"] == -signal.SIGTERM  # SIGTERM at the notice, as Kubernetes sends


def test_a_killed_host_exits_as_a_shell_says() -> None:
    assert exit_code(-9) == 137 and exit_code(7) == 7 and exit_code(0) == 0


SHIM_PROBE = "import jax; jax.distributed.initialize(); print(jax.process_index(), jax.process_count())"


def test_the_emulated_slice_shim_lets_an_unchanged_initialize_find_its_rank() -> None:
    """On CPU, JAX 0.10.2 finds no cluster environment (``GkeTpuCluster.is_env_present`` needs a Cloud TPU VM): the
    shim answers the rank the kit gave, and is inert anywhere else."""
    env = {**os.environ, "PYTHONPATH": host_process.EMULATION_FOLDER, "JAX_PLATFORMS": "cpu",
           "RAYTPU_HOST_RANK": "0", "RAYTPU_HOST_COUNT": "1", "JAX_COORDINATOR_ADDRESS": f"127.0.0.1:{_free()}"}
    emulated = subprocess.run([sys.executable, "-c", SHIM_PROBE], env={**env, "RAYTPU_EMULATED": "1"},
                              capture_output=True, text=True, timeout=120)
    assert emulated.returncode == 0 and emulated.stdout.split() == ["0", "1"], emulated.stderr[-2000:]
    elsewhere = subprocess.run([sys.executable, "-c", SHIM_PROBE], env={**env, "RAYTPU_EMULATED": "0"},
                               capture_output=True, text=True, timeout=120)
    assert elsewhere.returncode != 0 and "Number of processes must be defined" in elsewhere.stderr


def _free() -> int:
    return host_process.free_port()


def test_submit_names_the_host_that_ended_the_run() -> None:
    lines = ["[host 0] ok", "error: every_host: host 3 (raytpu-local-v6e-16-0 worker 3) exited with code 7; the "
             "other hosts were stopped; valid: the host's lines above"]
    assert failures.failed_problem("r: Ray job ended FAILED", lines) == (
        "r: Ray job ended FAILED: host 3 (raytpu-local-v6e-16-0 worker 3) exited with code 7, the other hosts stopped")


@pytest.mark.parametrize("every_host", [True, False])
def test_what_the_kit_cannot_see_is_not_measured_not_not_reached(every_host: bool) -> None:
    recorder = timeline.Recorder()
    recorder.unmeasured(user_code.unmeasured_phases(every_host))
    recorder.take([timeline.stamp("reserved", "held")])
    rows = {r["phase"]: r for r in recorder.finish()["phases"]}
    assert rows["first_step"]["status"] == rows["compiled"]["status"] == timeline.NOT_MEASURED
    assert rows["reserved"]["status"] == timeline.MEASURED  # a stamp wins over "not measured"
    assert rows["smoke_checked"]["status"] == timeline.NOT_APPLICABLE
    assert (rows["ray_joined"]["status"] == timeline.NOT_MEASURED) is not every_host


def test_the_spec_carries_run_on_to_the_job() -> None:
    work = _work()
    assert WorkloadSpec.from_env(work.workload_env()).on_every_host
    assert json.loads(work.workload_env()[WORKLOAD_ENV])["run_on"] == "every_host"


def test_a_program_that_keeps_running_after_the_notice_is_killed_at_its_deadline() -> None:
    """A program that joined JAX's distributed runtime keeps running on SIGTERM (XLA's preemption notifier takes it:
    openxla/xla ``SigtermNotifier``); the notice's deadline bounds it."""
    proc = host_process.HostProcess()
    proc.start("trap '' TERM; sleep 60", {}, drop=("OMP_NUM_THREADS",))
    time.sleep(0.3)
    proc.notice({"deadline_ms": int((time.time() + 1) * 1000)})
    deadline = time.monotonic() + 15
    while (seen := proc.poll())["code"] is None and time.monotonic() < deadline:
        time.sleep(0.2)
    assert seen["code"] == -signal.SIGKILL


def test_the_hosts_program_does_not_inherit_rays_one_thread_setting() -> None:
    os.environ["OMP_NUM_THREADS"] = "1"  # what Ray sets in a num_cpus=1 actor
    try:
        proc = host_process.HostProcess()
        proc.start("echo omp=${OMP_NUM_THREADS:-unset}", {}, drop=("OMP_NUM_THREADS",))
        deadline = time.monotonic() + 10
        lines: list[str] = []
        while (seen := proc.poll())["code"] is None and time.monotonic() < deadline:
            lines += seen["lines"]
            time.sleep(0.1)
        assert lines + seen["lines"] == ["omp=unset"]
    finally:
        del os.environ["OMP_NUM_THREADS"]


@pytest.mark.parametrize(("entrypoint", "target"), [
    ("FOO=1 python tools/missing.py", ("script", "tools/missing.py")),
    ("python3.11 tools/missing.py --x", ("script", "tools/missing.py")),
    ("env A=1 B=2 python3 -m lm.run", ("module", "lm.run")),
    ("/usr/bin/python3 -u train.py", ("script", "train.py")),
    ("./run.sh", ("script", "./run.sh")),
    ("ray status", None),
    ("X=1", None),
])
def test_the_script_is_checked_whichever_spelling_starts_it(entrypoint: str, target: tuple[str, str] | None) -> None:
    """Issue 68 item 4: ``FOO=1 python tools/missing.py`` and ``python3.11 tools/missing.py`` passed validate."""
    import shlex

    assert user_code.entrypoint_target(shlex.split(entrypoint)) == target
