"""Multi-slice training (``workloads[].slices: N``, :mod:`raytpu.core.specs.slices.multislice`): validation against
GKE's, Ray's and the TPU webhook's rules, the one RayJob ``submit --dry-run`` shows (CRD schema, webhook, operator
checks), and, on two emulated slices, one JaxTrainer run across both that waits while only one is free, places nothing
until both are, survives a host of slice 1 killed mid-run and resumes from its checkpoint, and the preemption drill
across both (a host of slice 1 preempted with notice: at most one step lost, resumed on both whole slices).

Sources: https://cloud.google.com/tpu/docs/tpu-gke-multislice ("Multislice availability in GKE"); Ray 2.60
``ray.util.tpu`` (``get_tpu_num_slices_for_workers``, ``SlicePlacementGroup``) and ``ray.train.v2.jax.config``;
ai-on-gke/kuberay-tpu-webhook ``main.go`` (ef658db) ``mutatePod``.
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from crd import operator_errors, schema_errors, webhook_errors
from image_refs import FIXTURE_IMAGES, write_record

from raytpu import cli
from raytpu.config import parse
from raytpu.core.common import names
from raytpu.core.common.errors import InvalidInputs
from raytpu.core.manifests import kuberay
from raytpu.core.specs import kinds
from raytpu.core.specs.slices import multislice
from raytpu.core.specs.spec import SliceSpec, WorkloadSpec
from raytpu.core.tpu.catalog import GENERATIONS, RAY_OPERATOR_MIN_GKE_VERSION
from raytpu.core.tpu.plan import RAY_SLICE_LABEL, SlicePlan, plan_slice
from raytpu.local.running import jobs as local_jobs
from raytpu.local.slice import procs, startup, state
from raytpu.workloads import train

CONFIG = """\
project: my-ml-project
region: {region}
cluster: {{name: ray-tpu, mode: {mode}}}
storage: {{bucket: my-bucket}}
slices:
  - {{name: train, generation: {generation}, topology: {topology}, zone: {zone}, count: {count}{extra}}}
workloads:
  - {{name: train, kind: {kind}, slice: train, slices: {slices}}}
"""
GOOD = {"mode": "standard", "generation": "v6e", "topology": "4x4", "zone": "us-east5-b", "count": 2, "extra": "",
        "kind": "train", "slices": 2}
CA_B64 = "LS0tLS1CRUdJTiBDRVJUSUZJQ0FURS0tLS0tCk1JSUIKLS0tLS1FTkQgQ0VS"\
    "VElGSUNBVEUtLS0tLQo="  # a PEM, base64, as GKE outputs it
OUTPUTS = {"ray-tpu-cluster": {"endpoint": "34.1.2.3", "ca_certificate": CA_B64,
                               "cluster_name": "ray-tpu", "location": "us-east5", "project": "my-ml-project",
                               "namespace": "ray", "service_account": "ray-tpu-ray", "bucket": "my-bucket"},
           "ray-tpu-workloads": {}}


def config(**changes: Any) -> str:
    """The config with ``changes``; the region is the zone's."""
    values = {**GOOD, **changes}
    return CONFIG.format(region=values["zone"].rsplit("-", 1)[0], **values)


# ---------------------------------------------------------------------------------------------- validation


@pytest.mark.unit
@pytest.mark.parametrize(("changes", "field", "said"), [
    ({"slices": 3}, "workloads[0].slices", "out of range"),
    ({"slices": 0}, "workloads[0].slices", "out of range"),
    ({"slices": -2}, "workloads[0].slices", "out of range"),
    ({"slices": "two"}, "workloads[0].slices", ""),
    ({"slices": 2.5}, "workloads[0].slices", ""),
    ({"slices": 1001, "count": 1001}, "slices[0].count", "out of range"),
    # single-host slices: GKE Multislice runs only on multi-host node pools
    ({"topology": "2x2"}, "workloads[0].slices", "single-host"),
    ({"topology": "2x4"}, "workloads[0].slices", "single-host"),
    ({"generation": "v5e", "topology": "2x4", "zone": "us-west4-a"}, "workloads[0].slices", "single-host"),
    ({"generation": "v4", "topology": "2x2x1", "zone": "us-central2-b"}, "workloads[0].slices", "single-host"),
    # a 2x4 of two 4-chip hosts: Ray 2.60 takes it for one 8-chip host and pins no slice
    ({"topology": "2x4", "extra": ", machine_type: ct6e-standard-4t"}, "workloads[0].slices", "by Ray 2.60.0"),
    ({"generation": "v5e", "topology": "2x4", "zone": "us-west4-a", "extra": ", machine_type: ct5lp-hightpu-4t"},
     "workloads[0].slices", "by Ray 2.60.0"),
    # a shape Ray cannot reserve at all
    ({"generation": "v5p", "topology": "4x4x28", "zone": "us-east5-a"}, "workloads[0].slice", "cannot reserve"),
    # queued provisioning runs no Ray cluster (its pool's nodes come only through a ProvisioningRequest)
    ({"extra": ", provisioning: queued"}, "workloads[0].slice", "ProvisioningRequest"),
])
def test_bad_multi_slice_configs_exit_2_naming_the_field(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                        changes: dict[str, Any], field: str, said: str) -> None:
    path = tmp_path / "raytpu.yaml"
    path.write_text(config(**changes))
    assert cli.main(["validate", str(path)]) == 2
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.startswith(f"error: {field}")]
    assert lines and said in lines[0] and "; valid: " in lines[0], err
    assert "Traceback" not in err


@pytest.mark.unit
@pytest.mark.parametrize("changes", [
    {},
    {"count": 3},  # two of three slices per run
    {"generation": "v5p", "topology": "2x2x2", "zone": "us-east5-a"},
    {"generation": "v4", "topology": "2x2x2", "zone": "us-central2-b"},
    {"mode": "autopilot"},
    {"extra": ", provisioning: spot"},
    {"extra": ", provisioning: flex-start"},
    {"extra": ", provisioning: reservation, reservation: my-res"},
    {"kind": "serve", "topology": "2x4"},  # serving: slices are independent replicas, single-host is fine
])
def test_good_multi_slice_configs_validate(changes: dict[str, Any]) -> None:
    spec = parse(config(**changes))
    work = spec.workload("train")
    assert work.slices_per_run == (2 if work.kind.spans_slices else 1)


@pytest.mark.unit
def test_validation_agrees_with_rays_own_slice_count_for_every_reservable_multi_host_shape() -> None:
    """For every multi-host shape GKE provisions and Ray 2.60 reserves: validation accepts ``slices: 2`` exactly
    when Ray's own ``get_tpu_num_slices_for_workers`` (what JaxTrainer's controller calls) counts the kit's
    ``hosts x 2`` workers as 2 slices AND ``SlicePlacementGroup`` takes the shape as multi-host (it reserves and
    pins whole slices only then: ``get_chips_per_host`` below the slice's chips)."""
    from ray._private.accelerators.tpu import get_chips_per_host, get_num_chips_from_topology
    from ray.util.tpu import get_tpu_num_slices_for_workers

    checked = accepted = 0
    for gen in GENERATIONS.values():
        for topology in gen.topologies:
            if topology not in gen.ray_topologies:
                continue
            for machine in gen.machine_types:
                try:
                    item = SliceSpec.create(name="s", generation=gen.name, topology=topology, zone=gen.zones[0],
                                            machine_type=machine.name, count=2)
                except InvalidInputs:
                    continue  # this machine type does not build this topology
                if item.plan.single_host:
                    continue
                rays = get_tpu_num_slices_for_workers(
                    topology=topology, accelerator_type=item.plan.ray_accelerator_type,
                    num_workers=item.plan.hosts * 2, resources_per_worker={"TPU": item.plan.chips_per_host})
                pinned = get_chips_per_host(topology, gen.ray_pod_prefix) < get_num_chips_from_topology(topology)
                ok = not multislice.problems(item.plan, 2)
                assert ok == (rays == 2 and pinned), (gen.name, topology, machine.name, rays, pinned)
                checked += 1
                accepted += ok
    assert checked > 20 and 0 < accepted < checked


@pytest.mark.unit
def test_scaling_config_spans_hosts_times_slices_workers() -> None:
    plan = plan_slice("v6e", "4x4")
    config = train.scaling_config(plan, slices=3)
    assert config.num_workers == plan.hosts * 3 and config.topology == "4x4" and config.use_tpu


@pytest.mark.unit
def test_gke_multislice_floors_lie_below_the_ray_operator_floor_and_are_named_when_higher(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from raytpu.core.specs.slices import gke_versions

    plans = [plan_slice("v6e", "4x4")]
    for mode, floor in multislice.MIN_GKE_VERSION.items():
        assert gke_versions.version_key(floor) < gke_versions.version_key(RAY_OPERATOR_MIN_GKE_VERSION)
        assert gke_versions.version_floor(plans, mode, multislice=True) == gke_versions.version_floor(plans, mode)
    monkeypatch.setitem(gke_versions.MULTISLICE_MIN_GKE_VERSION, "autopilot", "1.99.0-gke.1")
    assert gke_versions.version_floor(plans, "autopilot", multislice=True) == ("1.99.0-gke.1",
                                                                               "Multislice on Autopilot")


# ---------------------------------------------------------------------------------------------- KubeRay


def _tpu_env(group: dict[str, Any]) -> dict[str, str]:
    return {e["name"]: e.get("value", "") for e in group["template"]["spec"]["containers"][0].get("env", [])}


@pytest.mark.unit
def test_submit_dry_run_shows_one_rayjob_with_n_replicas_and_megascale_num_slices(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "raytpu.yaml").write_text(config(count=3))
    (tmp_path / "outputs.json").write_text(json.dumps(OUTPUTS))
    write_record(tmp_path)
    monkeypatch.chdir(tmp_path)
    assert cli.main(["submit", "train", "--stack", "ray-tpu-cluster", "--dry-run", "--run-id", "r1"]) == 0
    docs = list(yaml.safe_load_all(capsys.readouterr().out))
    jobs = [d for d in docs if d["kind"] == "RayJob"]
    assert len(jobs) == 1
    job = jobs[0]
    cluster = job["spec"]["rayClusterSpec"]
    (group,) = cluster["workerGroupSpecs"]
    assert (group["replicas"], group["minReplicas"], group["maxReplicas"], group["numOfHosts"]) == (2, 2, 2, 4)
    assert _tpu_env(group)[multislice.NUM_SLICES_ENV] == "2"
    assert not any(k in _tpu_env(group) for k in multislice.WEBHOOK_INJECTED_ENV)  # the webhook's to inject
    head = cluster["headGroupSpec"]["template"]["spec"]
    assert "google.com/tpu" not in json.dumps(head) and "gke-tpu" not in json.dumps(head.get("nodeSelector", {}))
    assert schema_errors(job) == [] and webhook_errors(job) == [] and operator_errors(job) == []


@pytest.mark.unit
@pytest.mark.parametrize(("mutate", "expected"), [
    (lambda env, group: env.update(MEGASCALE_NUM_SLICES="3"), "!= replicas 2"),
    (lambda env, group: group.update(replicas=1, minReplicas=1, maxReplicas=1), "!= replicas 1"),
    (lambda env, group: env.update(MEGASCALE_SLICE_ID="0"), "MEGASCALE_SLICE_ID set in the template"),
    (lambda env, group: env.update(MEGASCALE_COORDINATOR_ADDRESS="h:8081"), "MEGASCALE_COORDINATOR_ADDRESS set"),
])
def test_webhook_checker_catches_multi_slice_env_the_webhook_would_get_wrong(mutate: Any, expected: str) -> None:
    spec = parse(config())
    job = kuberay.workload_manifest(spec, spec.workload("train"), images=FIXTURE_IMAGES, service_account="ray",
                                    bucket="b", namespace="ray", name="train-r1", args=[])
    assert webhook_errors(job) == []
    (group,) = job["spec"]["rayClusterSpec"]["workerGroupSpecs"]
    container = group["template"]["spec"]["containers"][0]
    env = {e["name"]: e["value"] for e in container["env"]}
    mutate(env, group)
    container["env"] = [{"name": k, "value": v} for k, v in env.items()]
    found = webhook_errors(job)
    assert any(expected in problem for problem in found), found


@pytest.mark.unit
@pytest.mark.parametrize(("kind", "topology", "slices", "count"), [
    ("train", "4x4", None, 2),   # one slice per run, the other a spare
    ("train", "4x4", 1, 2),
    ("serve", "2x4", 2, 2),      # two independent serving replicas
    ("smoke", "4x4", None, 2),
])
def test_no_megascale_where_a_run_spans_one_slice(kind: str, topology: str, slices: int | None, count: int) -> None:
    item = SliceSpec.create(name="s", generation="v6e", topology=topology, zone="us-east5-b", count=count)
    work = WorkloadSpec(name="w", kind=kinds.kind(kind), slice=item, slices=slices)
    group = kuberay.worker_group(work, kuberay.Pods(image="x"), autopilot=False)
    assert multislice.NUM_SLICES_ENV not in _tpu_env(group) and not work.multislice


@pytest.mark.unit
def test_pod_hostnames_with_the_replica_index_stay_dns_labels_for_every_slice_count() -> None:
    """The webhook names pod ``<group>-<replica>-<host>`` (``mutatePod``); with the largest ``count`` and the
    largest multi-host slice it is still a DNS label (63 characters); the subdomain (the RayCluster's name) is
    bounded by ``MULTI_HOST_NAME_LIMIT`` whatever the replica count."""
    largest = max((plan_slice(g.name, t) for g in GENERATIONS.values() for t in g.topologies),
                  key=lambda p: p.hosts)
    hostname = f"{kuberay.WORKER_GROUP}-{1000 - 1}-{largest.hosts - 1}"
    assert len(hostname) <= 63, hostname


# ---------------------------------------------------------------------------------------------- emulated


@pytest.fixture(scope="module")
def two_v5p(start_cluster: Any) -> Iterator[state.LocalCluster]:
    """Two emulated v5p 2x2x2 slices of two 4-chip hosts each: the smallest multi-host shape Ray 2.60 reserves
    across slices (the session's v6e 2x4 pair cannot be: :func:`raytpu.core.specs.slices.multislice.problems`)."""
    cluster = start_cluster(plan_slice("v5p", "2x2x2"), 2)
    yield cluster
    procs.stop(cluster.run_dir)


def _train_workers(address: str) -> list[Any]:
    from ray.util.state import list_actors

    return list_actors(address=address, filters=[("class_name", "=", "RayTrainWorker")], detail=True, limit=1000)


def _wait_for(what: str, ok: Any, proc: subprocess.Popen[str], err: list[str], timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while not ok():
        if proc.poll() is not None:
            out = proc.stdout.read() if proc.stdout else ""
            pytest.fail(f"the run ended (rc {proc.returncode}) before {what}: {out[-3000:]}\n{''.join(err)[-4000:]}")
        assert time.monotonic() < deadline, f"{what} within {timeout_s}s"
        time.sleep(0.5)


# ---------------------------------------------------------------------------------------------- local smoke over DCN


@pytest.mark.unit
def test_local_smoke_takes_the_dcn_span_from_the_multi_slice_train_workload_when_enough_slices_run() -> None:
    from raytpu.commands.demo import smoke_args
    from raytpu.local.slice.from_config import dcn_slices_of

    spec = parse(config())
    plan = SlicePlan.from_json(spec.slice_named("train").plan.to_json())  # as a local cluster records it
    for available in (2, 3):
        n, said = dcn_slices_of(spec, plan, available)
        assert n == 2 and said == ("train workload train spans 2 slices over DCN: the smoke check also all-reduces "
                                   f"across 2 of the local cluster's {available} slices (--dcn-slices 2)")
        assert smoke_args(n) == ("--dcn-slices", "2")
    assert dcn_slices_of(spec, plan, 1) == (None, "DCN check skipped: train workload train spans 2 slices and the "
                                                  "local cluster has 1 (`raytpu local up --slices 2` for it)")
    assert smoke_args(None) == ()
    assert dcn_slices_of(parse(config(slices=1)), plan, 2) == (None, None)  # one slice per run: no DCN
    assert dcn_slices_of(parse(config(kind="smoke")), plan, 2) == (None, None)  # smoke copies are independent
    assert dcn_slices_of(spec, plan_slice("v6e", "2x4", "ct6e-standard-4t"), 2) == (None, None)  # another slice
    assert dcn_slices_of(None, plan, 2) == (None, None)


class _Emulated:
    """What ``raytpu local smoke`` reads of a recorded local cluster (its slices and plan), without starting Ray."""

    def __init__(self, plan: SlicePlan, slices: int) -> None:
        self.slice_plan, self.slices, self.address = plan, [f"slice-{i}" for i in range(slices)], "127.0.0.1:1"

    def hosts_recorded_wall(self) -> None:
        return None


@pytest.mark.unit
@pytest.mark.parametrize(("slices", "argv", "passed", "said"), [
    (2, [], ("--dcn-slices", "2"), "the smoke check also all-reduces across 2 of the local cluster's 2 slices"),
    (1, [], (), "DCN check skipped: train workload train spans 2 slices and the local cluster has 1"),
    (2, ["--dcn-slices", "1"], ("--dcn-slices", "1"), None),  # the explicit flag wins
])
def test_local_smoke_passes_the_derived_dcn_flag_to_the_smoke_program(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], slices: int,
        argv: list[str], passed: tuple[str, ...], said: str | None) -> None:
    from raytpu.commands import local as local_cmd
    from raytpu.core.common import report

    (tmp_path / "raytpu.yaml").write_text(config())
    plan = parse(config()).slice_named("train").plan
    seen: list[tuple[str, ...]] = []

    def run_workload(cluster: Any, kind: str, *extra: str, **_: Any) -> subprocess.CompletedProcess[str]:
        seen.append(extra)
        line = report.format_verdict_line({"slice": "slice-0", "healthy": True, "generation": "v6e",
                                           "topology": "4x4", "pod_type": "v6e-16", "hosts_expected": 4,
                                           "hosts_found": 4, "duration_s": 1.0, "checks": [], "hosts": []})
        return subprocess.CompletedProcess([kind], 0, stdout=line + "\n", stderr="")

    monkeypatch.setattr(local_cmd, "_cluster", lambda args: _Emulated(plan, slices))
    monkeypatch.setattr(local_cmd, "_alive", lambda cluster: cluster)  # the stand-in has no head process to probe
    monkeypatch.setattr(local_jobs, "run_workload", run_workload)
    # --dcn-slices and --config cannot go together (the flag says what the config would): the flag alone
    config_args = [] if "--dcn-slices" in argv else ["--config", str(tmp_path / "raytpu.yaml")]
    assert cli.main(["local", "smoke", *config_args, *argv]) == 0
    err = capsys.readouterr().err
    assert seen == [passed]
    assert (said in err) if said else ("DCN" not in err)


@pytest.mark.slice
@pytest.mark.timeout(600)
def test_one_run_across_two_slices_waits_for_both_then_survives_a_host_kill(two_v5p: state.LocalCluster,
                                                                            tmp_path: Path) -> None:
    """Slice 0 held: the run says it waits for two whole slices and places no worker. Freed: it trains on both
    (4 workers, JAX processes 0-1 on one slice and 2-3 on the other, each with the MEGASCALE env Ray sets, a
    ``slice x data`` mesh). Host 1 of slice 1 killed after a checkpoint and recreated: the whole run restarts on
    two whole slices and resumes from the checkpoint."""
    import ray

    from raytpu.workloads.support import slices

    cluster = two_v5p
    plan: SlicePlan = cluster.slice_plan
    work = cluster.workload("train", 2)
    cmd = local_jobs.workload_command("train", "--storage-path", str(tmp_path), "--steps", "40", "--checkpoint-every",
                                      "5", "--step-sleep-s", "0.3", "--max-failures", "2", "--start-timeout-s", "60",
                                      "--slice-retries", "6")
    ray.init(address=cluster.address, log_to_driver=False, logging_level=logging.ERROR)
    proc = None
    try:
        held = slices.reserve_slice(plan, cluster.slices[0], timeout_s=60)
        earlier = {w["actor_id"] for w in _train_workers(cluster.address)}
        proc = subprocess.Popen(cmd, env=cluster.driver_env() | work.workload_env(), stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)
        err: list[str] = []
        reader = threading.Thread(target=lambda: err.extend(proc.stderr or []), daemon=True)
        reader.start()
        _wait_for("the run's wait notice", lambda: any("reserving 2 whole" in line for line in err), proc, err, 60)
        time.sleep(10)  # the run tries to reserve; with one slice free it places nothing
        mine = [w for w in _train_workers(cluster.address) if w["actor_id"] not in earlier and w["state"] == "ALIVE"]
        assert mine == [], mine
        held.release()
        _wait_for("a checkpoint", lambda: any("checkpoint_2" in f.read_text()
                                              for f in tmp_path.glob("*/checkpoint_manager_snapshot.json")),
                  proc, err, 240)
        procs.kill_host(cluster, cluster.slices[1], plan.hosts - 1)
        startup.add_host(cluster, cluster.slices[1], plan.hosts - 1)  # GKE would recreate the pod
        out, _ = proc.communicate(timeout=300)
        reader.join(timeout=5)
    finally:
        if proc is not None and proc.poll() is None:
            proc.kill()
            proc.communicate()
        ray.shutdown()
    summary = train.parse_result(out)
    assert proc.returncode == 0 and summary and summary["ok"], "".join(err)[-6000:]
    assert summary["steps_done"] == 40 and summary["restarts"] >= 1 and summary["resumed_from"] > 0, summary
    assert summary["slices"] == 2 and summary["workers"] == 2 * plan.hosts
    assert summary["devices"] == 2 * plan.chips and summary["mesh"] == {"slice": 2, "data": plan.chips}
    megascale = summary["megascale"]
    assert megascale["num_slices"] == 2 and sorted(megascale["slice_ids"]) == [0, 0, 1, 1]
    assert megascale["ids_match_ray_slices"] and megascale["port"] == str(multislice.MEGASCALE_PORT)
    assert megascale["coordinator"]
    losses = [h["loss"] for h in summary["history"]]
    assert losses[-1] < losses[0]
    labels = {n["NodeID"]: (n.get("Labels") or {}).get(RAY_SLICE_LABEL) for n in ray_nodes(cluster.address)}
    final = [w for w in _train_workers(cluster.address) if w["actor_id"] not in earlier]
    assert {labels.get(w["node_id"]) for w in final} == set(cluster.slices)


def ray_nodes(address: str) -> list[dict[str, Any]]:
    import ray

    ray.init(address=address, log_to_driver=False, logging_level=logging.ERROR)
    try:
        return ray.nodes()
    finally:
        ray.shutdown()


@pytest.mark.slice
@pytest.mark.timeout(420)
def test_a_host_of_slice_1_preempted_with_notice_costs_a_step_and_the_run_resumes_on_both_whole_slices(
        two_v5p: state.LocalCluster, tmp_path: Path) -> None:
    """The preemption drill (:func:`raytpu.local.demos.drill.drill`) on a run spanning both slices: host 1 of slice 1
    drained for a preemption, killed at the notice's end and replaced. The run checkpoints at the notice, Ray Train
    restarts the whole worker group, and the resumed workers report both slices, every host of each; no worker of
    the run is left alive."""
    import ray
    from ray.util.state import list_placement_groups

    from raytpu.local.demos.drill import drill

    cluster = two_v5p
    plan: SlicePlan = cluster.slice_plan
    ray.init(address=cluster.address, log_to_driver=False, logging_level=logging.ERROR)
    try:
        earlier = {w["actor_id"] for w in _train_workers(cluster.address)}
        groups = {g["placement_group_id"] for g in list_placement_groups(address=cluster.address, limit=1000)}
        done = drill(cluster, 10.0, tmp_path / "ckpt", steps=20, every=10, at_step=8, slices=2,
                     slice_name=cluster.slices[1], timeout_s=360)
        alive = [w for w in _train_workers(cluster.address) if w["actor_id"] not in earlier and w["state"] == "ALIVE"]
        held = [g for g in list_placement_groups(address=cluster.address, limit=1000)
                if g["placement_group_id"] not in groups and g["state"] != "REMOVED"]
    finally:
        ray.shutdown()
    summary, cut = done["train"], done["preemption"]
    assert done["exit_code"] == 0 and summary["ok"], (summary, cut)
    assert cut["host"] == f"{cluster.slices[1]} worker {plan.hosts - 1}"
    assert cut["checkpoint_at_notice"] and cut["steps_lost"] <= 1 and cut["resumed_from_step"] >= 8, cut
    assert cut["resumed_on_whole_slice"] and cut["resumed_on_slices"] == dict.fromkeys(cluster.slices, plan.hosts)
    assert summary["restarts"] >= 1 and summary["devices"] == 2 * plan.chips
    assert summary["megascale"]["ids_match_ray_slices"] and sorted(summary["megascale"]["slice_ids"]) == [0, 0, 1, 1]
    assert alive == [] and held == [], (alive, held)  # nothing of the run left running or reserved


@pytest.mark.slice
@pytest.mark.timeout(600)
def test_smoke_all_reduces_across_two_slices_over_dcn_and_names_a_slice_cut_off(
        two_v5p: state.LocalCluster, monkeypatch: pytest.MonkeyPatch) -> None:
    """``--dcn-slices 2``: the smoke check also all-reduces across both emulated slices (one process per host, JAX
    on CPU, each with the MEGASCALE_* env Ray's ``get_tpu_coordinator_env_vars`` gives it), reported in each
    verdict's ``dcn`` section apart from the ICI rows; then, with slice 1's hosts dialling a closed port instead of
    the coordinator (``RAYTPU_SMOKE_INJECT_DCN_UNREACHABLE=1``), slice 1 is named unhealthy and slice 0 is not."""
    from raytpu.core.common import report
    from raytpu.workloads.smoke import dcn

    cluster = two_v5p
    done = local_jobs.run_workload(cluster, "smoke", "--dcn-slices", "2", "--reserve-timeout-s", "30", timeout_s=300)
    verdicts = report.parse_verdict_lines(done.stdout)
    assert done.returncode == 0 and [v["slice"] for v in verdicts] == cluster.slices, done.stderr[-4000:]
    for s, v in enumerate(verdicts):
        section = v["dcn"]
        assert section["slices"] == cluster.slices and section["source"] == dcn.line_rate(two_v5p.slice_plan)[1]
        checks = {c["name"]: c for c in section["checks"]}
        assert checks["dcn_reach"]["ok"] and checks["dcn_psum"]["ok"] and checks["dcn_psum"]["value"] == 3.0
        busbw = checks["dcn_allreduce_busbw_gbps"]
        assert busbw["informational"] and "emulated slices" in busbw["detail"], busbw
        assert [r["worker_id"] for r in section["perf"]] == list(range(two_v5p.slice_plan.hosts))
        assert all((r["value"] or 0) > 0 and r["reference"] == dcn.line_rate(two_v5p.slice_plan)[0] and not r["gates"]
                   for r in section["perf"])
        assert section["megascale"]["MEGASCALE_SLICE_ID"] == str(s)
        assert section["megascale"]["MEGASCALE_NUM_SLICES"] == "2"
        assert section["megascale"]["MEGASCALE_PORT"] == str(multislice.MEGASCALE_PORT)
        assert not any(r["metric"].startswith("dcn") for r in v["perf"])  # apart from the ICI rows
    assert "DCN (cross-slice all-reduce over" in report.render_table(verdicts)

    monkeypatch.setenv(dcn.ENV_INJECT_UNREACHABLE, "1")
    done = local_jobs.run_workload(cluster, "smoke", "--dcn-slices", "2", "--reserve-timeout-s", "30", timeout_s=300)
    verdicts = report.parse_verdict_lines(done.stdout)
    assert done.returncode == 1 and len(verdicts) == 2, done.stderr[-4000:]
    first, cut = verdicts
    assert first["healthy"] and not cut["healthy"]
    reach = {c["name"]: c for c in cut["dcn"]["checks"]}["dcn_reach"]
    assert not reach["ok"] and f"slice {cluster.slices[1]} cannot reach" in reach["detail"]
    assert "cannot reach the DCN coordinator" in reach["detail"], reach
    assert report.headline(cut).startswith(f"slice {cluster.slices[1]} unhealthy: dcn_reach: slice")
    assert any(dcn.ENV_INJECT_UNREACHABLE in line for line in cut["injected"])


POD_MEGASCALE = {"MEGASCALE_NUM_SLICES": "2", "MEGASCALE_SLICE_ID": "1",
                 "MEGASCALE_COORDINATOR_ADDRESS": "tpu-0-0.smoke-v5p-dcn-headless", "MEGASCALE_PORT": "8081"}
"""What GKE's TPU webhook leaves in a pod of replica 1 of a two-slice smoke job (ai-on-gke/kuberay-tpu-webhook
``main.go`` ``mutatePod``): the per-slice checks must not start libtpu with it, the DCN check overrides it."""


@pytest.mark.unit
def test_the_per_slice_host_check_drops_the_pods_megascale_env_before_it_starts_anything(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The injected-error fault raises before JAX is imported: the MEGASCALE_* are already gone by then."""
    from raytpu.workloads.smoke import measure

    for key, value in POD_MEGASCALE.items():
        monkeypatch.setenv(key, value)
    with pytest.raises(RuntimeError, match="fault injected"):
        measure.host_check("127.0.0.1:1", 1, 0, 5, None, {"error": True})
    assert not [k for k in multislice.MEGASCALE_ENV if k in os.environ]


@pytest.mark.unit
def test_the_dcn_host_check_starts_with_rays_megascale_over_the_pods(monkeypatch: pytest.MonkeyPatch) -> None:
    """A slice cut off (fault injection) fails at the reach probe, after the env is set and before JAX starts."""
    from ray.util.tpu import get_tpu_coordinator_env_vars

    from raytpu.workloads.smoke import dcn

    for key, value in POD_MEGASCALE.items():
        monkeypatch.setenv(key, value)
    ours = get_tpu_coordinator_env_vars("10.0.0.7", 2, 1, str(multislice.MEGASCALE_PORT))
    with pytest.raises(ConnectionError):
        dcn.dcn_host_check("10.0.0.7:1", 2, 1, 1, ours, 5, 0.2, True)
    assert {k: os.environ[k] for k in multislice.MEGASCALE_ENV} == ours


@pytest.mark.slice
@pytest.mark.timeout(600)
def test_on_a_pod_with_megascale_the_per_slice_check_runs_without_it_and_the_dcn_check_with_rays(
        two_v5p: state.LocalCluster) -> None:
    """Each check in the actor the smoke driver runs it in (``host_process.start_hosts``), on an emulated host whose
    environment carries the webhook's MEGASCALE_* (the actor's ``runtime_env``, as the pod env reaches a worker on
    GKE): the per-slice host check starts JAX with none of them (it names the four it removed), the DCN host check, in
    a process of its own, with the ones Ray's ``get_tpu_coordinator_env_vars`` gives."""
    import ray
    from ray.util.placement_group import placement_group, remove_placement_group
    from ray.util.tpu import get_tpu_coordinator_env_vars

    from raytpu.workloads.smoke import dcn, measure
    from raytpu.workloads.smoke.host_process import start_hosts, stop_hosts

    plan: SlicePlan = two_v5p.slice_plan
    pod = {"env_vars": POD_MEGASCALE}
    ray.init(address=two_v5p.address, log_to_driver=False, logging_level=logging.ERROR)
    try:
        pg = placement_group([{"CPU": 1, "TPU": plan.chips_per_host}])
        ray.get(pg.ready(), timeout=120)
        try:
            host = start_hosts([(pg, 0)], plan.chips_per_host, pod)
            ip, port = ray.get(host[0].address.remote(), timeout=120)
            checked: dict[str, Any] = ray.get(host[0].run.remote(measure.host_check, f"{ip}:{port}", 1, 0, 120, None,
                                                                 {}), timeout=300)
            stop_hosts(host, graceful=True)
            host = start_hosts([(pg, 0)], plan.chips_per_host, pod)
            ip, port = ray.get(host[0].address.remote(), timeout=120)
            ours = get_tpu_coordinator_env_vars(ip, 1, 0, str(multislice.MEGASCALE_PORT))
            joined: dict[str, Any] = ray.get(host[0].run.remote(dcn.dcn_host_check, f"{ip}:{port}", 1, 0, 1, ours,
                                                                120, 30.0, False), timeout=300)
            stop_hosts(host, graceful=True)
        finally:
            remove_placement_group(pg)
    finally:
        ray.shutdown()
    assert sorted(checked["megascale_cleared"]) == sorted(multislice.MEGASCALE_ENV), checked
    assert checked["psum"] == sum(range(1, checked["devices_total"] + 1))
    assert joined["megascale"] == ours and joined["psum"] == 1.0


@pytest.mark.unit
def test_the_multi_slice_jobs_policy_admits_the_megascale_port_from_every_slice_to_every_other(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """The TPU pods declare ``mxla`` = the webhook's ``MEGASCALE_PORT`` (cross-slice, 8081, not the in-slice 8471),
    and the job's NetworkPolicy admits it, and any port (JAX's coordinator is picked at run time), between the pods
    of all its replicas: every replica is a slice, and each carries the same template labels."""
    from crd import effective_pod_labels
    from netpol import Pod, admits

    from raytpu.core.manifests import ray_ports
    (tmp_path / "raytpu.yaml").write_text(config(count=3))
    (tmp_path / "outputs.json").write_text(json.dumps(OUTPUTS))
    write_record(tmp_path)
    monkeypatch.chdir(tmp_path)
    assert cli.main(["submit", "train", "--stack", "ray-tpu-cluster", "--dry-run", "--run-id", "r1"]) == 0
    docs = list(yaml.safe_load_all(capsys.readouterr().out))
    policies = [d for d in docs if d["kind"] == "NetworkPolicy"]
    (job,) = [d for d in docs if d["kind"] == "RayJob"]
    (group,) = job["spec"]["rayClusterSpec"]["workerGroupSpecs"]
    (container,) = group["template"]["spec"]["containers"]
    declared = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert declared[ray_ports.MXLA.name] == multislice.MEGASCALE_PORT == 8081
    from ray._private.accelerators.tpu import DEFAULT_MEGASCALE_PORT

    assert str(multislice.MEGASCALE_PORT) == DEFAULT_MEGASCALE_PORT
    labels = effective_pod_labels(group["template"])
    slice_hosts = [Pod("ray", {**labels, "ray.io/worker-group-replica-index": str(r)}, declared) for r in range(2)]
    assert names.CLUSTER_LABEL in labels
    for port in (multislice.MEGASCALE_PORT, 8471, 8482):
        assert admits(policies, slice_hosts[1], port, slice_hosts[0]) and admits(policies, slice_hosts[0], port,
                                                                                 slice_hosts[1])
