"""workloads/train.py: JaxTrainer on an emulated slice converges, and survives a host killed mid-run; a launch
reports the steps it ran, checkpoints go through the bucket's mount, a two-host 2x4 stays on one slice, and the
step compiles once."""

from __future__ import annotations

import logging
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from image_refs import FIXTURE_IMAGES

from raytpu.core.common import names
from raytpu.core.manifests import kuberay
from raytpu.core.specs import kinds
from raytpu.core.tpu.catalog import generation
from raytpu.core.tpu.plan import RAY_SLICE_LABEL, RAY_WORKER_LABEL, SlicePlan, plan_slice
from raytpu.local.running import jobs
from raytpu.local.slice import procs, startup, state
from raytpu.workloads import train


@pytest.fixture(scope="module")
def plan() -> SlicePlan:
    """Two 4-chip hosts: two JAX processes of four CPU devices each."""
    return plan_slice("v6e", "2x4", generation("v6e").multi_host_machine_type.name)


@pytest.fixture(scope="module")
def cluster(two_slices: state.LocalCluster, plan: SlicePlan) -> state.LocalCluster:
    """The session's two 2x4 slices (``conftest.two_slices``): a run reserves one whole slice of them, as on GKE."""
    assert two_slices.slice_plan == plan
    return two_slices


@pytest.mark.unit
def test_scaling_config_comes_from_the_slice_plan() -> None:
    plan = plan_slice("v6e", "4x4")
    config = train.scaling_config(plan)
    assert config.use_tpu and config.topology == plan.topology
    assert config.accelerator_type == plan.ray_accelerator_type
    assert config.num_workers == plan.hosts
    assert config.resources_per_worker["TPU"] == plan.chips_per_host


@pytest.mark.unit
def test_two_host_2x4_pins_its_workers_to_one_named_slice(plan: SlicePlan) -> None:
    """Ray 2.60 takes a v5e/v6e 2x4 for one 8-chip host (so it reserves no slice); with the slice's name, every
    worker bundle Ray Train builds from the ScalingConfig (``get_tpu_worker_resources``, as SlicePlacementGroup does)
    asks for that slice's own resource."""
    from ray.util.tpu import get_tpu_worker_resources

    assert (plan.hosts, plan.chips_per_host) == (2, 4) and train.ray_assumed_hosts(plan) == 1
    assert train.ray_assumed_hosts(plan_slice("v6e", "4x4")) == plan_slice("v6e", "4x4").hosts
    config = train.scaling_config(plan, "slice-a")
    workers, bundle = get_tpu_worker_resources(plan.topology, plan.ray_accelerator_type,
                                               resources_per_worker=config.resources_per_worker)
    assert workers == config.num_workers == 2
    assert bundle == {"TPU": 4, "CPU": 1, "slice-a": 1}
    assert "slice-a" not in train.scaling_config(plan).resources_per_worker


@pytest.mark.unit
def test_train_storage_is_under_the_gcs_fuse_mount_of_every_ray_pod() -> None:
    """Checkpoints go through the bucket's GCS FUSE mount (a local path to Ray Train), not ``gs://`` (pyarrow's
    GcsFileSystem needs storage.buckets.get); every Ray pod of the job, the driver's head included, mounts it."""
    from raytpu.config import load

    spec = load(str(Path(__file__).parent.parent / "raytpu.example.yaml"))
    args = kinds.kind("train").run_args("train-r1")
    assert args == ["--storage-path", f"{names.GCS_MOUNT_PATH}/checkpoints", "--name", "train-r1"]
    job = kuberay.workload_manifest(spec, spec.workload("train"), images=FIXTURE_IMAGES, service_account="ksa",
                                    bucket="b",
                                    name="train-r1", args=args)
    cluster = job["spec"]["rayClusterSpec"]
    for template in [cluster["headGroupSpec"]["template"], *(g["template"] for g in cluster["workerGroupSpecs"])]:
        mounts = {m["mountPath"] for m in template["spec"]["containers"][0]["volumeMounts"]}
        assert names.GCS_MOUNT_PATH in mounts
    assert names.checkpoint_uri("b", "train-r1") == "gs://b/checkpoints/train-r1"


@pytest.mark.unit
def test_every_launch_without_a_name_gets_a_new_run_name() -> None:
    names = {train.default_run_name() for _ in range(20)}
    assert len(names) == 20 and all(n.startswith("raytpu-train-") for n in names)
    assert train.build_parser().parse_args(["--storage-path", "x"]).name is None


@pytest.mark.unit
def test_parse_result_takes_the_last_summary_line() -> None:
    text = f"noise\n{train.MARKER} {{\"ok\": false}}\n{train.MARKER} {{\"ok\": true}}\n"
    assert train.parse_result(text) == {"ok": True}
    assert train.parse_result("nothing") is None


RUN_NAME = "train-m1"
STEPS, EVERY = 30, 10


@pytest.fixture(scope="module")
def first_run(cluster: state.LocalCluster, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any]]:
    """One run as the GKE job runs it: its own flags (``WorkloadKind.run_args``), a local directory standing in for the
    bucket's GCS FUSE mount. The convergence, checkpoint and relaunch tests read this one run (a JaxTrainer start
    costs its two workers' JAX import: one run instead of three)."""
    mount = tmp_path_factory.mktemp("mount")
    done = jobs.run_workload(cluster, "train", *kinds.kind("train").run_args(RUN_NAME, mount_path=str(mount)),
                             "--steps", str(STEPS), "--checkpoint-every", str(EVERY), timeout_s=240)
    summary = train.parse_result(done.stdout)
    assert done.returncode == 0 and summary and summary["ok"], done.stderr[-3000:]
    return mount, summary


@pytest.mark.unit
def test_the_coordinator_the_driver_starts_is_the_one_ray_train_waits_for() -> None:
    """Ray Train's controller asks Ray's autoscaling coordinator for the workers' resources before it places any (Ray
    2.60 ``ScalingPolicy.after_controller_start``, through ``TrainAutoscalingCoordinatorClient``); the kit's drivers
    start it first through the very function that client calls, so no second actor is made."""
    from ray.data._internal.cluster_autoscaler import get_or_create_autoscaling_coordinator
    from ray.train.v2._internal.execution.scaling_policy import autoscaling_coordinator_client

    assert autoscaling_coordinator_client.get_or_create_autoscaling_coordinator is get_or_create_autoscaling_coordinator


@pytest.mark.slice
@pytest.mark.timeout(300)
def test_training_converges(cluster: state.LocalCluster, first_run: tuple[Path, dict[str, Any]]) -> None:
    """30 steps of the MLP: the loss halves, a fresh run reports all of its steps, and the step compiles once
    (XLA compilations counted through jax.monitoring, ``compile_watch.COMPILE_EVENT``: none while stepping), its compile
    time reported apart from its step time."""
    _, summary = first_run
    assert summary["steps_done"] == STEPS and summary["restarts"] == 0
    losses = [h["loss"] for h in summary["history"]]
    assert len(losses) == STEPS // EVERY and losses[-1] < 0.5 * losses[0]
    assert summary["step_time_s"] > 0 and summary["samples_per_s"] > 0
    assert summary["devices"] == cluster.slice_plan.chips
    assert summary["steps_run"] == STEPS and summary["start_step"] == 0 and not summary["already_complete"]
    assert summary["compiles_during_steps"] == 0, summary
    assert 2 <= summary["compiles"] < STEPS  # the data and the update function, once each, not once per step
    assert summary["compile_time_s"] > summary["step_time_s"] > 0
    # every process's compile, by JAX process index (one gather after the compile): process 0's is the summary's own
    processes = summary["compile"]["processes"]
    assert len(processes) == summary["workers"] and all(p["hits"] + p["misses"] > 0 for p in processes)
    assert {k: processes[0][k] for k in ("s", "hits", "misses")} == {k: summary["compile"][k]
                                                                    for k in ("s", "hits", "misses")}


@pytest.mark.slice
@pytest.mark.timeout(120)
def test_the_run_and_ray_train_share_one_autoscaling_coordinator(cluster: state.LocalCluster,
                                                                  first_run: tuple[Path, dict[str, Any]]) -> None:
    """After a run whose driver started Ray's autoscaling coordinator itself (``start_autoscaling_coordinator``), one
    such actor is alive on the cluster: Ray Train found it by name (Ray 2.60 ``get_or_create_autoscaling_coordinator``:
    name and namespace ``AutoscalingCoordinator``, ``get_if_exists``) instead of making its own."""
    from ray.util.state import list_actors

    alive = list_actors(address=cluster.address, filters=[("class_name", "=", "_AutoscalingCoordinatorActor"),
                                                          ("state", "=", "ALIVE")], limit=100)
    assert len(alive) == 1, alive


@pytest.mark.slice
def test_checkpoints_land_under_the_mount_the_job_is_given(first_run: tuple[Path, dict[str, Any]]) -> None:
    mount, summary = first_run
    checkpoint = Path(summary["checkpoint"])
    assert checkpoint.parent == mount / "checkpoints" / RUN_NAME
    assert (checkpoint / train.STATE_FILE).is_file() and (checkpoint / train.META_FILE).is_file()


@pytest.mark.slice
@pytest.mark.timeout(400)
def test_a_relaunch_under_the_same_name_reports_the_steps_it_ran(cluster: state.LocalCluster,
                                                                 first_run: tuple[Path, dict[str, Any]]) -> None:
    """Ray Train restores a run from ``storage/name``: a relaunch of a finished run trains nothing and must not
    report success; one with more steps resumes and reports only the steps it ran."""
    mount, _ = first_run
    run = [*kinds.kind("train").run_args(RUN_NAME, mount_path=str(mount)), "--checkpoint-every", str(EVERY)]
    again = jobs.run_workload(cluster, "train", *run, "--steps", str(STEPS), timeout_s=240)
    summary = train.parse_result(again.stdout)
    assert again.returncode == 1 and summary and not summary["ok"], again.stderr[-3000:]
    assert summary["steps_run"] == 0 and summary["already_complete"] and summary["start_step"] == STEPS
    assert "trained nothing" in summary["error"]

    more = jobs.run_workload(cluster, "train", *run, "--steps", str(STEPS + EVERY), timeout_s=240)
    summary = train.parse_result(more.stdout)
    assert more.returncode == 0 and summary and summary["ok"], more.stderr[-3000:]
    assert (summary["steps_run"], summary["start_step"], summary["steps_done"]) == (EVERY, STEPS, STEPS + EVERY)
    assert [h["step"] for h in summary["history"]] == list(range(EVERY, STEPS + EVERY + 1, EVERY))


def _train_workers(address: str) -> list[Any]:
    """Every Ray Train worker actor the cluster has had, alive or dead."""
    from ray.util.state import list_actors

    return list_actors(address=address, filters=[("class_name", "=", "RayTrainWorker")], detail=True, limit=1000)


@pytest.mark.slice
@pytest.mark.timeout(480)
def test_two_host_2x4_workers_land_on_one_slice_of_two(two_slices: state.LocalCluster, plan: SlicePlan,
                                                        tmp_path: Path) -> None:
    """Two emulated 2-host v6e 2x4 slices, one host of each held busy: unpinned (Ray 2.60's own reservation), the
    two workers take the two free hosts of two slices; pinned, the run waits for a whole slice (freed here) and
    both workers run on it."""
    import ray
    from ray.util.placement_group import placement_group, placement_group_table, remove_placement_group
    two = two_slices
    assert two.slice_plan == plan
    try:
        ray.init(address=two.address, log_to_driver=False, logging_level=logging.ERROR)
        holds = {name: placement_group([{"TPU": plan.chips_per_host}],
                                       bundle_label_selector=[{RAY_SLICE_LABEL: name, RAY_WORKER_LABEL: "1"}])
                 for name in two.slices}
        ray.get([pg.ready() for pg in holds.values()], timeout=60)
        earlier = {w["actor_id"] for w in _train_workers(two.address)}  # the shared cluster's earlier runs
        held_ids = {pg.id.hex() for pg in holds.values()}
        cmd = jobs.workload_command("train", "--storage-path", str(tmp_path), "--steps", "4",
                                    "--checkpoint-every", "2", "--start-timeout-s", "120")
        env = two.driver_env() | two.workload("train").workload_env()
        proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        err: list[str] = []
        assert proc.stderr is not None
        reader = threading.Thread(target=lambda: err.extend(proc.stderr or []), daemon=True)
        reader.start()
        try:
            deadline = time.monotonic() + 120
            # wait until the run either waits for a whole slice (pinned) or has placed its workers (unpinned)
            while not (any(train.PIN_NOTICE in line for line in err) or any(
                    info["state"] == "CREATED" for pg_id, info in placement_group_table().items()
                    if pg_id not in held_ids)):
                assert proc.poll() is None, "".join(err)[-3000:]
                assert time.monotonic() < deadline, "the run neither waited for a slice nor placed its workers"
                time.sleep(0.5)
            remove_placement_group(holds[two.slices[1]])  # slice 1 is whole and idle again
            out, _ = proc.communicate(timeout=300)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.communicate()
        reader.join(timeout=5)
        summary = train.parse_result(out)
        assert proc.returncode == 0 and summary and summary["ok"], "".join(err)[-4000:]
        labels = {n["NodeID"]: n.get("Labels") or {} for n in ray.nodes()}
        workers = [w for w in _train_workers(two.address) if w["actor_id"] not in earlier]
        slices = {labels[w["node_id"]].get(RAY_SLICE_LABEL) for w in workers}
        assert len(workers) == plan.hosts and slices == {two.slices[1]}, (workers, slices)
        assert summary["slice_name"] == summary["pinned_slice"] == two.slices[1]
    finally:
        ray.shutdown()  # the driver's placement groups go with it: the shared cluster is left free


@pytest.mark.slice
@pytest.mark.timeout(420)
def test_host_killed_mid_run_resumes_from_checkpoint_and_finishes(cluster: state.LocalCluster,
                                                                   tmp_path: Path) -> None:
    """The other slice is held, so the run lands on ``slices[0]``, whose last host is killed after the second
    checkpoint and recreated (as GKE recreates the pod): the run resumes from a checkpoint and finishes."""
    import ray

    from raytpu.workloads.support import slices

    plan = cluster.slice_plan
    cmd = jobs.workload_command("train", "--storage-path", str(tmp_path), "--steps", "40",
                                "--checkpoint-every", "5", "--step-sleep-s", "0.3", "--max-failures", "2")
    env = cluster.driver_env() | cluster.workload("train").workload_env()
    ray.init(address=cluster.address, log_to_driver=False, logging_level=logging.ERROR)
    try:
        other = slices.reserve_slice(plan, cluster.slices[1], timeout_s=60)
        proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            deadline = time.monotonic() + 180
            # a checkpoint counts once Ray Train has registered it (its snapshot file names one)
            while not any("checkpoint_2" in f.read_text()
                          for f in tmp_path.glob("*/checkpoint_manager_snapshot.json")):
                assert proc.poll() is None, proc.communicate()[1][-3000:]
                assert time.monotonic() < deadline, "no checkpoint written within 180s"
                time.sleep(0.5)
            victim = plan.hosts - 1
            procs.kill_host(cluster, cluster.slices[0], victim)
            print(f"killed worker {victim}", file=sys.stderr)
            startup.add_host(cluster, cluster.slices[0], victim)  # GKE would recreate the pod
            out, err = proc.communicate(timeout=300)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.communicate()
        other.release()
    finally:
        ray.shutdown()
    summary = train.parse_result(out)
    assert proc.returncode == 0 and summary and summary["ok"], err[-4000:]
    assert summary["steps_done"] == 40 and summary["slice_name"] == cluster.slices[0]
    assert summary["restarts"] >= 1 and summary["resumed_from"] > 0, (summary, err[-6000:])
    losses = [h["loss"] for h in summary["history"]]
    assert losses[-1] < losses[0]


@pytest.mark.slice
@pytest.mark.timeout(300)
def test_no_free_slice_fails_after_bounded_retries(cluster: state.LocalCluster, tmp_path: Path) -> None:
    import logging

    import ray

    from raytpu.workloads.support import slices

    ray.init(address=cluster.address, log_to_driver=False, logging_level=logging.ERROR)
    try:
        held = [slices.reserve_slice(cluster.slice_plan, name, timeout_s=60) for name in cluster.slices]  # all busy
        started = time.monotonic()
        done = jobs.run_workload(cluster, "train", "--storage-path", str(tmp_path), "--steps", "5",
                                 "--start-timeout-s", "5", "--slice-retries", "1", timeout_s=200)
        elapsed = time.monotonic() - started
        for slice_held in held:
            slice_held.release()
    finally:
        ray.shutdown()
    summary = train.parse_result(done.stdout)
    assert done.returncode == 1 and summary is not None and not summary["ok"]
    assert summary.get("error"), summary
    assert elapsed < 120
