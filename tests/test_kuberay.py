"""Unit tests of raytpu.core.manifests.kuberay: manifests built from specs validate against the KubeRay v1.7.0 CRDs and
the GKE Ray TPU webhook's rules, and every RayJob carries its WorkloadSpec to the pod (which never re-plans).

Upstream rules the validators in ``tests/crd.py`` encode:

- CRD schemas: ``ray-operator/config/crd/bases/ray.io_{rayclusters,rayjobs,rayservices}.yaml`` at KubeRay v1.7.0
  (vendored in ``tests/data/kuberay-crds/v1.7.0``);
- TPU webhook: GoogleCloudPlatform/ai-on-gke ``ray-on-gke/tpu/kuberay-tpu-webhook/main.go``
  (``validateRayCluster``: ``numOfHosts == max(chips(topology) / google.com/tpu per pod, 1)``; it only mutates
  pods labelled ``app.kubernetes.io/name: kuberay``);
- operator: ``ray-operator/controllers/ray/utils/validation.go`` (names, replicas, RayJob fields).
"""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

import kind_fields
import pytest
import yaml
from crd import effective_pod_labels, load_yaml, operator_errors, schema_errors, webhook_errors
from image_refs import FIXTURE_IMAGES, FIXTURE_REFS

from raytpu import __version__, images
from raytpu.config import parse
from raytpu.core.common import names
from raytpu.core.common.errors import InvalidInput, InvalidInputs
from raytpu.core.manifests import engine_pods, kuberay, pod_security, preemption, ray_ports, serving, smoke_runs
from raytpu.core.specs import kinds
from raytpu.core.specs.cluster.cluster_parts import GkeSpec
from raytpu.core.specs.runtime import compile_cache
from raytpu.core.specs.serving import vllm_rules
from raytpu.core.specs.slices import multislice
from raytpu.core.specs.slices.provisioning import MODES
from raytpu.core.specs.slices.provisioning import generation_problems as provisioning_generation_problems
from raytpu.core.specs.spec import WORKLOAD_ENV, ClusterSpec, SecretKeyRef, SliceSpec, WorkloadSpec
from raytpu.core.tpu.catalog import GENERATIONS, RAY_VERSION, generation
from raytpu.core.tpu.plan import ACCELERATOR_LABEL, TOPOLOGY_LABEL, TPU_RESOURCE, plan_slice

pytestmark = pytest.mark.unit

CLUSTER_MODES = ("standard", "autopilot")
PROVISIONING = ("on-demand", "spot", "reservation", "flex-start", "queued")  # spelled out: an independent list
ZONE = "us-east5-b"
BUCKET = "my-bucket"
KSA = "ray-ksa"
IMAGE = "us-docker.pkg.dev/p/r/ray-tpu:2.60.0"

# The labels GKE puts on nodes of each capacity type (and taints them with, value "true", effect NoSchedule):
# Spot https://cloud.google.com/kubernetes-engine/docs/concepts/spot-vms#scheduling-workloads,
# flex-start https://cloud.google.com/kubernetes-engine/docs/how-to/dws-flex-start-training-tpu,
# queued https://cloud.google.com/kubernetes-engine/docs/how-to/provisioningrequest;
# Autopilot selects a custom ComputeClass by ``cloud.google.com/compute-class``
# (https://cloud.google.com/kubernetes-engine/docs/concepts/about-custom-compute-classes).
SPOT = "cloud.google.com/gke-spot"
FLEX_START = "cloud.google.com/gke-flex-start"
QUEUED = "cloud.google.com/gke-queued"
COMPUTE_CLASS = "cloud.google.com/compute-class"
STANDARD_FLAG = {"on-demand": None, "spot": SPOT, "reservation": None, "flex-start": FLEX_START, "queued": QUEUED}


def _plan_cases() -> list[tuple[str, str, str | None]]:
    """Per generation: smallest, two multi-host shapes and the largest Ray reserves; plus every machine type of 2x4.

    (GKE provisions a few larger shapes Ray cannot reserve as one slice; a workload on them is rejected before
    any manifest is built: see ``test_a_shape_ray_cannot_reserve_gets_no_manifest``.)
    """
    cases: list[tuple[str, str, str | None]] = []
    for name in GENERATIONS:
        gen = generation(name)
        tops = gen.topologies
        largest = [t for t in tops if t in gen.ray_topologies][-1]
        cases += [(name, t, None) for t in dict.fromkeys([tops[0], tops[1], tops[3], largest])]
    for name in GENERATIONS:
        for machine in generation(name).machine_types:
            try:
                plan_slice(name, "2x4", machine.name)
            except InvalidInput:
                continue
            cases.append((name, "2x4", machine.name))
    return cases


PLAN_CASES = _plan_cases()
PLAN_IDS = [f"{g}-{t}-{m or 'default'}" for g, t, m in PLAN_CASES]


def _slice(gen: str = "v6e", topology: str = "4x4", machine: str | None = None, provisioning: str = "on-demand",
           count: int = 2, name: str = "train") -> SliceSpec:
    extra: dict[str, Any] = {"reservation": "my-res"} if provisioning == "reservation" else {}
    return SliceSpec.create(name=name, generation=gen, topology=topology, zone=ZONE, machine_type=machine,
                            provisioning=provisioning, count=count, **extra)


def _servable(item: SliceSpec) -> bool:
    """Ray Serve LLM 2.60 places a replica on this slice (not a v5e/v6e 2x4 of 4-chip hosts: test_serving)."""
    return not vllm_rules.slice_problems(item.plan)


def _work(item: SliceSpec | None = None, kind: str = "smoke", name: str = "w", **extra: Any) -> WorkloadSpec:
    return WorkloadSpec(name=name, kind=kinds.kind(kind), slice=item or _slice(), **{**kind_fields.fields(kind),
                                                                                  **extra})


def _cluster(item: SliceSpec, mode: str = "standard", with_workloads: bool = True) -> ClusterSpec:
    # serve names a model of its own: the default model's 16 attention heads do not take the TP of the largest
    # slices (issue 18 item 4; test_serving), and these tests are about the manifests of every slice shape
    works = tuple(WorkloadSpec(name=k, kind=kinds.kind(k), slice=item, image=IMAGE,
                               model="org/model" if kinds.KINDS[k].takes_model else None, **kind_fields.fields(k))
                  for k in (kinds.NAMES if with_workloads else ())
                  if (not kinds.KINDS[k].takes_model or _servable(item)) and kind_fields.runs_on(k, item.plan))
    return ClusterSpec(project="my-ml-project", region="us-east5", cluster=GkeSpec(name="ray-tpu", mode=mode),
                       slices=(item,), workloads=works)


PODS = kuberay.Pods(image=IMAGE, service_account=KSA, bucket=BUCKET, cluster="ray-tpu")


def _manifests(spec: ClusterSpec, run: str = "") -> list[dict[str, Any]]:
    """A standalone RayCluster plus the object of every workload, as ``raytpu submit`` builds them."""
    out = [kuberay.ray_cluster("rc", spec.workloads[0], PODS, autopilot=spec.cluster.autopilot)]
    for work in spec.workloads:
        name = f"{work.name}-{run}" if run and work.kind.is_job else work.name
        out.append(kuberay.workload_manifest(
            spec, work, images=FIXTURE_IMAGES, service_account=KSA, bucket=BUCKET, namespace="ray", name=name,
            args=work.kind.run_args(name)))
    return out


_cluster_of = kuberay.ray_cluster_of


def _worker(manifest: dict[str, Any]) -> dict[str, Any]:
    return _cluster_of(manifest)["workerGroupSpecs"][0]


def _runtime(job: dict[str, Any]) -> dict[str, Any]:
    loaded = load_yaml(job["spec"]["runtimeEnvYAML"])  # KubeRay parses runtimeEnvYAML as YAML
    assert isinstance(loaded, dict)
    return loaded


def _expected_placement(item: SliceSpec, mode: str) -> tuple[dict[str, str], set[str]]:
    """(extra nodeSelector, extra toleration keys) of a slice, from the spelled-out table above."""
    if mode == "autopilot" and item.provisioning.name != "queued":  # queued has no ComputeClass priority
        # a multi-host tpu7x slice also selects its workload policy (Ironwood rejects COMPACT;
        # docs/FACTS.md#gke-node-pools-placement)
        policy = {"cloud.google.com/placement-policy-name": names.workload_policy_name("ray-tpu", item.name)}
        return {COMPUTE_CLASS: f"raytpu-{item.name}", **(policy if item.plan.placement == "workload-policy" else {})}, \
            set()
    flag = STANDARD_FLAG[item.provisioning.name]
    # Standard also selects the slice's own node label, which its pools set (a nodeSelector: the TPU webhook
    # replaces a multi-host pod's affinity; kuberay.tpu_placement)
    own = {names.SLICE_LABEL: item.name} if mode == "standard" else {}
    return ({flag: "true", **own}, {flag}) if flag else (own, set())


# ---------------------------------------------------------------------- CRD schema + webhook, table-driven


def test_the_registry_has_exactly_the_documented_provisioning_modes() -> None:
    assert tuple(MODES) == PROVISIONING
    assert tuple(kinds.KINDS) == ("smoke", "train", "job", "serve", "batch")


@pytest.mark.parametrize(("gen", "topology", "machine"), PLAN_CASES, ids=PLAN_IDS)
@pytest.mark.parametrize("provisioning", PROVISIONING)
@pytest.mark.parametrize("mode", CLUSTER_MODES)
def test_every_kind_validates_against_crd_and_webhook_for_each_plan_provisioning_and_mode(
        gen: str, topology: str, machine: str | None, provisioning: str, mode: str) -> None:
    if provisioning_generation_problems((MODES[provisioning],), gen):  # flex-start on v4: GKE offers none
        with pytest.raises(InvalidInputs, match="is not offered for"):
            _slice(gen, topology, machine, provisioning)
        return
    item = _slice(gen, topology, machine, provisioning)
    plan = item.plan
    if not MODES[provisioning].runs_ray:
        # queued: the pool gets nodes only through a ProvisioningRequest, which the kit does not make (GKE API
        # NodePool.QueuedProvisioning.enabled; docs/FACTS.md#preemption-restart-waits)
        for kind in kinds.NAMES:
            with pytest.raises(InvalidInputs, match="the kit makes none"):
                _work(item, kind)
        if mode == "autopilot":  # queued is a node-pool setting: Autopilot has no pool to queue (issue 18, item 9)
            with pytest.raises(InvalidInputs, match=r"not allowed with cluster\.mode: autopilot"):
                _cluster(item, mode, with_workloads=False)
        else:
            _cluster(item, mode, with_workloads=False)  # the slice itself is valid
        return
    manifests = _manifests(_cluster(item, mode), run="r1")
    batch = _servable(item) and item.plan.single_host
    assert [m["kind"] for m in manifests] == (["RayCluster", "RayJob", "RayJob", "RayJob"]
                                              + ["RayService"] * _servable(item) + ["RayJob"] * batch)
    selected, tolerated = _expected_placement(item, mode)
    for manifest in manifests:
        assert schema_errors(manifest) == [], (manifest["kind"], schema_errors(manifest))
        assert webhook_errors(manifest) == [], manifest["kind"]
        assert operator_errors(manifest) == [], manifest["kind"]
        group = _worker(manifest)
        assert group["numOfHosts"] == plan.hosts
        assert group["replicas"] == group["minReplicas"] == group["maxReplicas"] == 2
        pod = group["template"]["spec"]
        tpus = str(plan.chips_per_host)
        resources = pod["containers"][0]["resources"]
        assert resources["requests"][TPU_RESOURCE] == resources["limits"][TPU_RESOURCE] == tpus
        # Standard: CPU and memory requested from the machine type (not BestEffort); Autopilot sets its own
        # and Autopilot's 1 GiB ephemeral-storage default is replaced by Ray's files' 10Gi (an engine's is larger)
        assert {"cpu", "memory"} <= resources["requests"].keys() if mode == "standard" else (
            resources["limits"] == {TPU_RESOURCE: tpus} and resources["requests"].keys() ==
            {TPU_RESOURCE, "ephemeral-storage"} and int(resources["requests"]["ephemeral-storage"][:-2]) >= 10)
        head = _cluster_of(manifest)["headGroupSpec"]["template"]["spec"]["containers"][0]
        assert ("ephemeral-storage" in head["resources"]["requests"]) is (mode == "autopilot")
        assert pod["nodeSelector"] == {**plan.node_selector, **selected}
        assert {t["key"] for t in pod["tolerations"]} == {TPU_RESOURCE, *tolerated}


@pytest.mark.parametrize(("gen", "topology"), [
    (g, next(t for t in reversed(generation(g).topologies) if t not in generation(g).ray_topologies))
    for g in GENERATIONS if set(generation(g).topologies) - set(generation(g).ray_topologies)])
def test_a_shape_ray_cannot_reserve_gets_no_manifest(gen: str, topology: str) -> None:
    """Ray 2.60's ``slice_placement_group`` raises outside VALID_TPU_TOPOLOGY
    (ray-project/ray: python/ray/util/tpu.py); the spec refuses the workload, naming the nearest shapes."""
    item = _slice(gen, topology)
    with pytest.raises(InvalidInputs) as info:
        _work(item, "train")
    (problem,) = info.value.problems
    assert problem.field == "slice" and "cannot reserve as one slice" in problem.problem
    assert all(t in problem.valid for t in generation(gen).nearest_ray_topologies(topology))


# ---------------------------------------------------------------------- provisioning, from the registry


@pytest.mark.parametrize("provisioning", PROVISIONING)
@pytest.mark.parametrize("mode", CLUSTER_MODES)
def test_tpu_placement_comes_from_the_provisioning_registry(provisioning: str, mode: str) -> None:
    item = _slice(provisioning=provisioning)
    selector, tolerations = kuberay.tpu_placement(item, autopilot=mode == "autopilot", cluster="ray-tpu")
    selected, tolerated = _expected_placement(item, mode)
    assert selector == {**item.plan.node_selector, **selected}
    # every TPU node is tainted google.com/tpu=present:NoSchedule
    # (https://cloud.google.com/kubernetes-engine/docs/concepts/tpus#tpu-taints)
    assert tolerations[0] == {"key": TPU_RESOURCE, "operator": "Exists", "effect": "NoSchedule"}
    assert {t["key"] for t in tolerations} == {TPU_RESOURCE, *tolerated}
    mode_spec = MODES[provisioning]
    if mode == "standard" or mode_spec.priority is None:
        flag, tolerate = mode_spec.pod_placement()
        own = {names.SLICE_LABEL: item.name} if mode == "standard" else {}
        assert (selector, tolerations[1:]) == ({**item.plan.node_selector, **flag, **own}, tolerate)
        for toleration in tolerate:
            assert toleration == {"key": mode_spec.pod_flag, "operator": "Equal", "value": "true",
                                  "effect": "NoSchedule"}
    else:  # the ComputeClass carries spot / reservation / flex-start on Autopilot
        assert selector[COMPUTE_CLASS] == names.compute_class_name(item.name) == "raytpu-train"
        assert not {SPOT, FLEX_START, QUEUED} & set(selector)


def test_autopilot_slices_each_select_their_own_compute_class() -> None:
    items = (_slice(name="train"), _slice(name="batch", provisioning="spot", topology="2x4"))
    spec = ClusterSpec(project="my-ml-project", region="us-east5", cluster=GkeSpec(name="ray-tpu", mode="autopilot"),
                       slices=items, workloads=(_work(items[0], "train", "train"), _work(items[1], "serve", "serve")))
    selectors = [_worker(m)["template"]["spec"]["nodeSelector"][COMPUTE_CLASS] for m in _manifests(spec)[1:]]
    assert selectors == ["raytpu-train", "raytpu-batch"]


# ---------------------------------------------------------------------- the pod gets its spec, never re-plans


@pytest.mark.parametrize("mode", CLUSTER_MODES)
@pytest.mark.parametrize(("gen", "topology", "machine"), PLAN_CASES, ids=PLAN_IDS)
def test_every_rayjob_carries_its_workload_spec_and_a_plain_entrypoint(gen: str, topology: str,
                                                                        machine: str | None, mode: str) -> None:
    spec = _cluster(_slice(gen, topology, machine, "spot"), mode)
    jobs = [m for m in _manifests(spec, run="r9") if m["kind"] == "RayJob"]
    batch = ["batch-r9"] * any(w.kind.name == "batch" for w in spec.workloads)
    assert [j["metadata"]["name"] for j in jobs] == ["smoke-r9", "train-r9", "job-r9", *batch]
    for job, work in zip(jobs, [w for w in spec.workloads if w.kind.is_job], strict=True):
        runtime = _runtime(job)
        assert runtime["py_modules"] == [names.py_modules_uri()]
        carried = runtime["env_vars"][WORKLOAD_ENV]
        assert WorkloadSpec.from_json(json.loads(carried)) == work
        assert WorkloadSpec.from_env(runtime["env_vars"]) == work
        program = work.entrypoint or f"python -m raytpu.workloads.{work.kind.program}"
        run = job["metadata"]["name"]
        attempt_s = preemption.RESTART_WAIT_S * multislice.reservation_waits(work.plan, work.slices_per_run)
        flags = (f" --storage-path /mnt/gcs/checkpoints --name {run}"  # spot: waits for a replacement slice
                 f" --start-timeout-s {attempt_s} --slice-retries {preemption.MAX_PREEMPTIONS}"
                 f" --max-failures {preemption.MAX_FAILURES_RECLAIMABLE}"
                 if work.kind.name == "train" else "")
        assert job["spec"]["entrypoint"] == program + flags
        for replanning in ("--generation", "--topology", "--machine-type", "--slices"):
            assert replanning not in job["spec"]["entrypoint"]


def test_ray_job_spec_in_env_overrides_a_stale_one_and_keeps_other_env() -> None:
    work = _work(kind="train")
    stale = _work(_slice(topology="2x4"), kind="train").workload_env()
    job = kuberay.ray_job("j", work, PODS, args=["--name", "j"],
                          runtime=kuberay.runtime_env(["gs://b/z.zip"], {"K": "V", **stale}))
    cache = compile_cache.job_env(None, mount=names.GCS_MOUNT_PATH, image=PODS.image, generation="v6e",
                                  topology=work.plan.topology)
    assert _runtime(job) == {"py_modules": ["gs://b/z.zip"], "env_vars": {"K": "V", **cache, **work.workload_env()}}
    assert job["spec"]["entrypoint"] == "python -m raytpu.workloads.train --name j"


@pytest.mark.parametrize(("kind", "limits"), [
    ("smoke", (True, 300, 1200 + 1800, 1200, 0, "K8sJobMode")),
    ("train", (True, 600, 3600 + 24 * 3600, 3600, 0, "K8sJobMode")),
])
def test_ray_job_has_its_kinds_bounded_unattended_knobs(kind: str, limits: tuple[Any, ...]) -> None:
    """activeDeadlineSeconds = the wait for capacity (preRunningDeadlineSeconds) + the kind's run time: KubeRay
    v1.7.0 starts both clocks at the RayJob's start (``initRayJobStatusIfNeed``), before any pod (issue 40 item 12)."""
    spec = kuberay.ray_job("j", _work(kind=kind), PODS)["spec"]
    assert (spec["shutdownAfterJobFinishes"], spec["ttlSecondsAfterFinished"], spec["activeDeadlineSeconds"],
            spec["preRunningDeadlineSeconds"], spec["backoffLimit"], spec["submissionMode"]) == limits


def test_a_serving_kind_becomes_a_rayservice_named_like_its_workload() -> None:
    spec = _cluster(_slice())
    service = kuberay.workload_manifest(spec, spec.workload("serve"), images=FIXTURE_IMAGES, service_account=KSA,
                                        bucket=BUCKET)
    assert (service["kind"], service["metadata"]["name"]) == ("RayService", "serve")
    assert "runtimeEnvYAML" not in service["spec"] and "entrypoint" not in service["spec"]


@pytest.mark.parametrize(("field", "value"), [("submission_mode", "Nope"), ("active_deadline_s", 0),
                                              ("pre_running_deadline_s", -1), ("ttl_s", -1), ("backoff_limit", -1)])
def test_job_limits_reject_bad_values(field: str, value: Any) -> None:
    with pytest.raises(InvalidInput, match=field):
        kinds.JobLimits(**{field: value})


def test_job_limits_report_every_bad_value_together() -> None:
    with pytest.raises(InvalidInputs) as caught:
        kinds.JobLimits(ttl_s=-1, active_deadline_s=0)
    assert sorted(p.field for p in caught.value.problems) == ["active_deadline_s", "ttl_s"]


# ---------------------------------------------------------------------- specific properties


@pytest.mark.parametrize(("machine", "cpu", "memory"), [
    # (machine type, GKE allocatable: vCPUs and GiB minus GKE's reservation; 90% of it is the worker's request)
    ("ct6e-standard-4t", "161532m", "643960Mi"),  # 180 vCPU, 720 GiB -> 179.48 vCPU, 698.74 GiB allocatable
    # GKE runs it with SMT off: 180 vCPU (cluster-autoscaler's NewMachineTypeInfo("ct6e-standard-8t", 180, 1440)
    # .withThreadsPerCoreOverride(1)); 360 was Compute Engine's thread count, and 323127m never fit (issue 18)
    ("ct6e-standard-8t", "161532m", "1294241Mi"),  # 180 vCPU, 1440 GiB -> 179.48 vCPU, 1404.34 GiB
    ("ct5lp-hightpu-4t", "100485m", "167087Mi"),  # 112 vCPU, 192 GiB -> 111.65 vCPU, 181.30 GiB
])
def test_a_tpu_worker_requests_most_of_its_hosts_allocatable_cpu_and_memory(machine: str, cpu: str,
                                                                             memory: str) -> None:
    """GKE reserves CPU (6% of the first core, 1% of the second, 0.5% of the next two, 0.25% above four) and memory
    (25/20/10/6/2% tiers plus a 100 MiB eviction threshold) on every node
    (https://cloud.google.com/kubernetes-engine/docs/concepts/plan-node-sizes#memory_and_cpu_reservations)."""
    gen = "v5e" if machine.startswith("ct5lp") else "v6e"
    resources = kuberay.host_resources(_slice(gen, "2x4", machine).plan, autopilot=False)
    assert (resources["requests"]["cpu"], resources["requests"]["memory"], resources["limits"]["memory"]) == (
        cpu, memory, memory)
    assert "cpu" not in resources["limits"]  # no CFS throttling of the host's input pipeline


@pytest.mark.parametrize(("machine", "hosts", "tpus"), [("ct6e-standard-8t", 1, "8"), ("ct6e-standard-4t", 2, "4")])
def test_v6e_2x4_worker_group_follows_machine_type(machine: str, hosts: int, tpus: str) -> None:
    item = _slice("v6e", "2x4", machine, count=3)
    group = kuberay.worker_group(_work(item), PODS, autopilot=False)
    container = group["template"]["spec"]["containers"][0]
    assert group["numOfHosts"] == hosts
    assert group["replicas"] == 3
    shape = generation("v6e").machine_type(machine)
    cpu, memory = f"{int(shape.allocatable_cpu_m * 0.9)}m", f"{int(shape.allocatable_memory_mib * 0.9)}Mi"
    assert container["resources"] == {"requests": {TPU_RESOURCE: tpus, "cpu": cpu, "memory": memory},
                                      "limits": {TPU_RESOURCE: tpus, "memory": memory}}
    assert group["template"]["spec"]["nodeSelector"] == {**item.plan.node_selector, names.SLICE_LABEL: item.name}
    ports = [p for p in container.get("ports", []) if p["containerPort"] == ray_ports.MXLA.number]
    assert ports == ([] if hosts == 1 else [{"containerPort": 8081, "name": "mxla", "protocol": "TCP"}])


def test_worker_group_spans_the_workloads_slices_not_the_slice_count() -> None:
    item = _slice(count=3)
    assert kuberay.worker_group(_work(item, slices=2), PODS, autopilot=False)["replicas"] == 2
    assert kuberay.worker_group(_work(item), PODS, autopilot=False)["replicas"] == 3


def test_worker_env_has_tpu_settings_and_extra_env() -> None:
    group = kuberay.worker_group(_work(), PODS, autopilot=False, env={"A": "1"})
    env = {e["name"]: e["value"] for e in group["template"]["spec"]["containers"][0]["env"]}
    assert env == {"JAX_PLATFORMS": "tpu,cpu", "ENABLE_PJRT_COMPATIBILITY": "true", "A": "1",
                   "HOME": pod_security.HOME, "USER": pod_security.USER}


def test_pods_are_not_relabelled_away_from_kuberay_so_the_webhook_sees_them() -> None:
    manifest = kuberay.ray_cluster("rc", _work(), kuberay.Pods(image=IMAGE, labels={"team": "ml"}))
    template = manifest["spec"]["workerGroupSpecs"][0]["template"]
    assert "app.kubernetes.io/name" not in template["metadata"]["labels"]
    assert effective_pod_labels(template)["app.kubernetes.io/name"] == "kuberay"


def test_gcs_fuse_volume_ksa_and_annotation_on_every_pod() -> None:
    manifest = kuberay.ray_cluster("rc", _work(), PODS)
    for template in (manifest["spec"]["headGroupSpec"]["template"],
                     manifest["spec"]["workerGroupSpecs"][0]["template"]):
        assert template["metadata"]["annotations"] == {"gke-gcsfuse/volumes": "true"}
        assert template["spec"]["serviceAccountName"] == KSA
        # uid/gid: "If you set runAsUser or runAsGroup ... you must set the uid and gid mount flags"
        # (GoogleCloudPlatform/gcs-fuse-csi-driver docs/authentication.md), else the mount is root's, read-only to Ray
        assert template["spec"]["volumes"][0]["csi"] == {
            "driver": "gcsfuse.csi.storage.gke.io",
            "volumeAttributes": {"bucketName": BUCKET, "mountOptions": "implicit-dirs,uid=1000,gid=100"}}
        assert template["spec"]["securityContext"]["runAsUser"] == 1000
        assert template["spec"]["securityContext"]["runAsGroup"] == 100
        assert template["spec"]["containers"][0]["volumeMounts"][0] == {"name": "gcs-bucket", "mountPath": "/mnt/gcs"}


def test_no_bucket_means_no_volume_and_no_annotation() -> None:
    manifest = kuberay.ray_cluster("rc", _work(), kuberay.Pods(image=IMAGE))
    head = manifest["spec"]["headGroupSpec"]["template"]
    assert [v["name"] for v in head["spec"]["volumes"]] == list(pod_security.SCRATCH)  # emptyDirs only
    assert "annotations" not in head["metadata"]
    assert "serviceAccountName" not in head["spec"]


def test_no_ray_pod_mounts_dev_shm_so_kuberay_adds_its_sized_one() -> None:
    """KubeRay mounts a memory emptyDir at /dev/shm on every Ray container, sized to the container's memory, unless
    the template already mounts that path (then it adds nothing: the kit's would have no size limit) or sets
    ``plasma-directory``. Source: KubeRay v1.7.0 ``BuildPod``/``addEmptyDir``/``makeEmptyDirVolume``."""
    job = kuberay.ray_job("rj", _work(), kuberay.Pods(image=IMAGE))
    cluster = kuberay.ray_cluster_of(job)
    for group in (cluster["headGroupSpec"], *cluster["workerGroupSpecs"]):
        assert "plasma-directory" not in group["rayStartParams"]
    for template in kuberay.pod_templates(job):
        assert not [m for c in template["spec"]["containers"] for m in c.get("volumeMounts", [])
                    if m["mountPath"] == "/dev/shm"]


def test_services_stay_cluster_ip_only() -> None:
    for manifest in _manifests(_cluster(_slice())):
        cluster = _cluster_of(manifest)
        assert cluster["headGroupSpec"]["serviceType"] == "ClusterIP"
        assert "enableIngress" not in cluster["headGroupSpec"]
        assert "LoadBalancer" not in json.dumps(manifest)
        assert "serveService" not in manifest["spec"]


@pytest.mark.parametrize("kind", kinds.NAMES)
def test_a_queued_slice_runs_no_ray_workload_of_any_kind(kind: str) -> None:
    with pytest.raises(InvalidInputs) as info:
        _work(_slice(topology="4x4" if kind_fields.runs_on(kind, plan_slice("v6e", "4x4")) else "2x4",
                     machine="ct6e-standard-8t" if kind == "batch" else None, provisioning="queued"), kind)
    (problem,) = info.value.problems
    assert problem.field == "slice"
    assert "the kit makes none" in problem.problem
    assert problem.valid.endswith("on-demand, spot, reservation, flex-start")


def test_ray_service_serves_the_specs_app_with_a_local_xla_cache() -> None:
    item = _slice("v6e", "4x4", count=2)
    work = _work(item, "serve", model="m")
    service = kuberay.ray_service("llm", work, PODS)
    assert service["spec"]["upgradeStrategy"] == {"type": "None"}  # NewCluster would need a second set of slices
    config = yaml.safe_load(service["spec"]["serveConfigV2"])
    assert config == serving.serve_config(work, mounted_bucket=BUCKET, py_modules=(names.py_modules_uri(),))
    (app,) = config["applications"]  # the ingress comes from the kit's core zip, as RayJobs' programs do
    assert app["runtime_env"] == {"py_modules": [f"file:///mnt/gcs/raytpu/raytpu-{__version__}-{names.core_zip_digest()}.zip"]}
    assert app["args"]["ingress_cls_config"] == {"ingress_cls": "raytpu.workloads.openai_ingress:OpenAIErrorIngress"}
    pod = _worker(service)["template"]["spec"]
    env = {e["name"]: e["value"] for e in pod["containers"][0]["env"]}
    assert env["TPU_MULTIHOST_BACKEND"] == "ray"
    head = service["spec"]["rayClusterConfig"]["headGroupSpec"]["template"]["spec"]["containers"][0]
    for container_env in (env, {e["name"]: e["value"] for e in head["env"]}):  # the proxies and every replica
        assert serving.SERVE_HOT_PATH_ENV.items() <= container_env.items()
    assert not [v for v in pod["volumes"] if v["name"] == "xla-cache"]  # the XLA cache lives in the mounted bucket
    llm_env = app["args"]["llm_configs"][0]["runtime_env"]["env_vars"]
    assert llm_env["VLLM_XLA_CACHE_PATH"].startswith(f"{names.GCS_MOUNT_PATH}/xla-cache/vllm/")
    head_ports = service["spec"]["rayClusterConfig"]["headGroupSpec"]["template"]["spec"]["containers"][0]["ports"]
    assert {"containerPort": serving.SERVE_PORT, "name": "serve", "protocol": "TCP"} in head_ports


def test_each_kind_runs_its_kit_image_by_digest_with_that_images_ray_unless_the_team_brings_its_own() -> None:
    refs = FIXTURE_REFS
    assert images.pod_image(_work(kind="serve"), refs, stack="s") == images.PodImage(refs["serve"], "2.56.0")
    for kind in ("smoke", "train"):
        assert images.pod_image(_work(kind=kind), refs, stack="s") == images.PodImage(refs["job"], "2.60.0")
    own = images.pod_image(_work(kind="serve", image="example.com/serve:1"), refs, stack="s")
    assert own == images.PodImage("example.com/serve:1", RAY_VERSION)  # the team's image carries the kit's Ray


@pytest.mark.parametrize(("gen", "topology", "count", "zone"), [
    ("v6e", "4x4", 2, ZONE), ("tpu7x", "2x2x2", 1, "us-central1-c"), ("v6e", "2x4", 3, ZONE)])
def test_every_tpu_host_of_a_rayservice_runs_a_serve_proxy_for_kuberays_readiness_probe(
        gen: str, topology: str, count: int, zone: str) -> None:
    """KubeRay v1.7.0 gives a RayService worker container with no readinessProbe of its own an exec probe, ``bash -c
    "wget ... :52365/api/local_raylet_healthz | grep success && wget ... :8000/-/healthz | grep success"``,
    failureThreshold 1 (ray-operator/controllers/ray/common/pod.go initLivenessAndReadinessProbe; utils/constant.go
    BaseWgetHealthCommand, ServeReadinessProbeFailureThreshold). Serve runs a proxy only on the head and on nodes with
    a replica (Ray 2.60 ray/serve/config.py ProxyLocation.EveryNode; _private/controller.py _update_proxy_nodes), so
    every TPU pod gets one ingress replica: one per node (max_replicas_per_node), as many as TPU pods."""
    item = SliceSpec.create(name="serve", generation=gen, topology=topology, zone=zone, count=count)
    work = _work(item, "serve")
    service = kuberay.ray_service("llm", work, PODS)
    config = yaml.safe_load(service["spec"]["serveConfigV2"])
    assert config["proxy_location"] == "EveryNode"
    group = _worker(service)
    app = config["applications"][0]
    if work.plan.single_host:  # direct streaming: the LLM server is the ingress, one replica per one-host slice
        llm = app["args"]["llm_configs"][0]
        assert app["import_path"] == serving.DIRECT_BUILDER and "ingress_deployment_config" not in app["args"]
        # every Ray container runs Serve's HAProxy mode: HAProxy forwards to the replica's own HTTP port
        for group_spec in (service["spec"]["rayClusterConfig"]["headGroupSpec"], group):
            values = {e["name"]: e.get("value") for e in group_spec["template"]["spec"]["containers"][0]["env"]}
            assert serving.DIRECT_STREAMING_ENV.items() <= values.items()
        assert group["numOfHosts"] == 1
        assert llm["deployment_config"]["autoscaling_config"]["min_replicas"] == group["replicas"]
        assert llm["accelerator_config"] == {"kind": "tpu", "topology": topology}  # a whole slice (host) each
    else:
        ingress = app["args"]["ingress_deployment_config"]
        assert ingress == {"num_replicas": group["numOfHosts"] * group["replicas"], "max_replicas_per_node": 1}
        names = {e["name"] for e in group["template"]["spec"]["containers"][0]["env"]}
        assert not names & serving.DIRECT_STREAMING_ENV.keys()  # Serve's Python proxies, one per TPU host
    # the head runs no replica (num-cpus 0): each ingress replica (Serve's default 1 CPU) lands on a TPU pod
    assert service["spec"]["rayClusterConfig"]["headGroupSpec"]["rayStartParams"]["num-cpus"] == "0"
    # KubeRay's probe is the one that runs (it is injected only when the container sets none): the default image,
    # tpu-inference's nightly from its docker/Dockerfile (python:3.12-slim-bookworm + apt wget), has bash and wget
    assert "readinessProbe" not in group["template"]["spec"]["containers"][0]
    assert images.for_kind("serve").base.startswith("docker.io/vllm/vllm-tpu:nightly-")
    # the local twin's proxy is the head's (raytpu local serve starts Serve HeadOnly): it streams direct
    twin = serving.serve_config(work, cpu_model=("tiny", "/m"))["applications"][0]["args"]
    assert "ingress_deployment_config" not in twin


@pytest.mark.parametrize(("gen", "topology", "count", "zone"), [
    ("v6e", "2x4", 1, ZONE), ("v6e", "2x4", 3, ZONE), ("v6e", "4x4", 2, ZONE), ("tpu7x", "2x2x2", 1, "us-central1-c")])
def test_where_haproxy_serves_the_llm_app_its_endpoint_leaves_the_cpu_head_out(
        gen: str, topology: str, count: int, zone: str) -> None:
    """KubeRay v1.7.0's serve Service selects pods labelled ``ray.io/serve=true``; it labels the head so once the
    head's proxy answers ``/-/healthz``, unless the RayService sets ``excludeHeadPodFromServeSvc``
    (ray-operator/controllers/ray/rayservice_controller.go ``updateHeadPodServeLabel``; common/service.go
    ``BuildServeService``), and Serve always runs a proxy on the head
    (Ray 2.60 ``ServeController._update_proxy_nodes``). With HAProxy (single-host slices) the head (2 CPUs,
    ``num-cpus: 0``) would only forward to the TPU host, whose HAProxy answers the probe from the same backends. A
    multi-host slice (Python proxies) keeps KubeRay's default."""
    item = SliceSpec.create(name="serve", generation=gen, topology=topology, zone=zone, count=count)
    work = _work(item, "serve")
    service = kuberay.ray_service("llm", work, PODS)
    assert service["spec"].get("excludeHeadPodFromServeSvc") is (True if work.plan.single_host else None)
    assert schema_errors(service) == []  # a field of the vendored v1.7.0 CRD


def test_upgrade_strategy_is_checked() -> None:
    with pytest.raises(InvalidInput, match="upgrade_strategy"):
        kuberay.ray_service("s", _work(kind="serve"), PODS, upgrade_strategy="Rolling")


# ---------------------------------------------------------------------- from the config


CONFIG = """
project: my-ml-project
region: us-east5
cluster: {name: ray-tpu, mode: MODE}
slices:
  - {name: train, generation: v6e, topology: 4x4, zone: us-east5-b, count: 2}
  - {name: serve, generation: v6e, topology: 2x4, zone: us-east5-b, provisioning: spot}
  - {name: small, generation: v6e, topology: 2x4, machine_type: ct6e-standard-4t, zone: us-east5-b,
     provisioning: reservation, reservation: r1}
  - {name: big, generation: tpu7x, topology: 2x2x4, zone: us-east5-b, provisioning: flex-start}
workloads:
  - {name: smoke, kind: smoke, slice: train}
  - {name: train, kind: train, slice: small, image: example.com/ray-tpu:1}
  - {name: serve, kind: serve, slice: serve, model: org/model-x}
  - {name: big-smoke, kind: smoke, slice: big}
"""
TOKEN_KSA = "${TfToken[TOKEN.12]}"
TOKEN_BUCKET = "${TfToken[TOKEN.13]}"


def _stack_manifests(spec: ClusterSpec, **kwargs: Any) -> list[dict[str, Any]]:
    """What the workloads stack applies: one object per workload, train checkpointing under its own name."""
    return [kuberay.workload_manifest(spec, work, images=FIXTURE_IMAGES, args=work.kind.run_args(work.name),
                                      **kwargs) for work in spec.workloads]


@pytest.mark.parametrize("mode", CLUSTER_MODES)
def test_workload_manifests_one_per_workload_valid_and_tokens_kept(mode: str) -> None:
    spec = parse(CONFIG.replace("MODE", mode))
    manifests = _stack_manifests(spec, service_account=TOKEN_KSA, bucket=TOKEN_BUCKET, namespace="ml")
    assert [(m["kind"], m["metadata"]["name"]) for m in manifests] == [
        ("RayJob", "smoke"), ("RayJob", "train"), ("RayService", "serve"), ("RayJob", "big-smoke")]
    for m in manifests:
        assert schema_errors(m) == [], schema_errors(m)
        assert webhook_errors(m) == []
        assert operator_errors(m) == []
        assert m["metadata"]["namespace"] == "ml"
        template = _worker(m)["template"]
        assert template["spec"]["serviceAccountName"] == TOKEN_KSA
        assert template["spec"]["volumes"][0]["csi"]["volumeAttributes"]["bucketName"] == TOKEN_BUCKET
        selector = template["spec"]["nodeSelector"]
        if mode == "autopilot":
            assert selector[COMPUTE_CLASS] == f"raytpu-{m['metadata']['labels'][names.SLICE_LABEL]}"
        else:
            assert COMPUTE_CLASS not in selector
    smoke, train, serve, big = manifests
    llm = yaml.safe_load(serve["spec"]["serveConfigV2"])["applications"][0]["args"]["llm_configs"][0]
    assert llm["model_loading_config"] == {"model_id": "org/model-x", "model_source": "org/model-x"}
    assert llm["engine_kwargs"]["tensor_parallel_size"] == 8
    assert smoke["spec"]["entrypoint"] == "python -m raytpu.workloads.smoke"
    assert _worker(smoke)["replicas"] == 2
    runtime = _runtime(smoke)
    assert runtime["py_modules"] == [f"file:///mnt/gcs/raytpu/raytpu-{__version__}-{names.core_zip_digest()}.zip"]
    cache = compile_cache.cache_dir(names.GCS_MOUNT_PATH, "compile-cache", _worker(smoke)["template"]["spec"][
        "containers"][0]["image"], "v6e", spec.workload("smoke").plan.topology)
    assert runtime["env_vars"] == {WORKLOAD_ENV: runtime["env_vars"][WORKLOAD_ENV], **compile_cache.env(cache)}
    carried = WorkloadSpec.from_env(runtime["env_vars"])
    assert carried == spec.workload("smoke") and carried.slices_spanned == 2
    assert carried.plan == spec.slice_named("train").plan
    assert names.core_zip_uri("b") == f"gs://b/raytpu/raytpu-{__version__}-{names.core_zip_digest()}.zip"
    assert train["spec"]["entrypoint"] == (  # on-demand too: a restart budget that covers a re-created slice
        "python -m raytpu.workloads.train --storage-path /mnt/gcs/checkpoints --name train"
        f" --start-timeout-s {preemption.RESTART_WAIT_S} --slice-retries {preemption.MAX_PREEMPTIONS}")
    assert WorkloadSpec.from_env(_runtime(train)["env_vars"]).plan.machine_type == "ct6e-standard-4t"
    assert _worker(train)["numOfHosts"] == 2
    assert _worker(train)["template"]["spec"]["containers"][0]["image"] == "example.com/ray-tpu:1"
    flex = _worker(big)["template"]["spec"]["nodeSelector"].get(FLEX_START)
    assert flex == ("true" if mode == "standard" else None)  # on Autopilot the ComputeClass carries it
    assert _worker(big)["template"]["spec"]["nodeSelector"][TOPOLOGY_LABEL] == "2x2x4"
    assert _worker(big)["template"]["spec"]["nodeSelector"][ACCELERATOR_LABEL] == plan_slice(
        "tpu7x", "2x2x4").gke_accelerator
    assert [m["metadata"]["labels"] for m in manifests] == [
        {"app.kubernetes.io/managed-by": "raytpu", names.WORKLOAD_LABEL: k, names.SLICE_LABEL: s}
        for k, s in [("smoke", "train"), ("train", "small"), ("serve", "serve"), ("smoke", "big")]]


def test_workload_manifest_takes_a_py_modules_uri_and_the_slices_compute_class() -> None:
    spec = parse(CONFIG.replace("MODE", "autopilot"))
    manifest = kuberay.workload_manifest(spec, spec.workload("smoke"), images=FIXTURE_IMAGES, service_account="k",
                                         bucket="b", py_modules="gs://x/y.zip")
    assert _runtime(manifest)["py_modules"] == ["gs://x/y.zip"]
    assert _worker(manifest)["template"]["spec"]["nodeSelector"][COMPUTE_CLASS] == "raytpu-train"


def test_workload_on_queued_slice_is_invalid_input_with_its_config_path() -> None:
    """`raytpu validate` rejects this config: the error carries the workload's path."""
    text = CONFIG.replace("MODE", "standard").replace("provisioning: spot", "provisioning: queued")
    with pytest.raises(InvalidInputs) as info:
        parse(text)
    (problem,) = info.value.problems
    assert problem.field == "workloads[2].slice" and "the kit makes none" in problem.problem


def test_smoke_jobs_one_single_slice_job_per_slice_copy_queued_left_out() -> None:
    serve_workload = "  - {name: serve, kind: serve, slice: serve, model: org/model-x}\n"
    text = CONFIG.replace("MODE", "standard").replace("provisioning: spot", "provisioning: queued")
    spec = parse(text.replace(serve_workload, ""))
    jobs = kuberay.smoke_jobs(spec, images=images.resolver({}, stack="s"), service_account="k", bucket="b",
                              image="img:1", suffix="abc")
    assert [j["metadata"]["name"] for j in jobs] == ["smoke-train-0-abc", "smoke-train-1-abc",
                                                     "smoke-small-0-abc", "smoke-big-0-abc"]
    works = smoke_runs.smoke_workloads(spec, image="img:1")
    assert [run.base for run in works] == ["smoke-train-0", "smoke-train-1", "smoke-small-0", "smoke-big-0"]
    # Copy i's job selects copy i's pool: both copies carry the one slice label, so without the pool's own label
    # (GKE's cloud.google.com/gke-nodepool, https://cloud.google.com/kubernetes-engine/docs/how-to/node-pools) two
    # jobs could check one copy and leave the other unchecked.
    pools = [_worker(j)["template"]["spec"]["nodeSelector"][names.NODE_POOL_LABEL] for j in jobs]
    assert pools == [run.pool for run in works] == ["train-0", "train-1", "small-0", "big-0"]
    for job, run in zip(jobs, works, strict=True):
        work = run.work
        assert schema_errors(job) == []
        assert webhook_errors(job) == []
        assert operator_errors(job) == []
        assert _worker(job)["replicas"] == 1
        assert job["spec"]["entrypoint"] == "python -m raytpu.workloads.smoke"
        carried = WorkloadSpec.from_env(_runtime(job)["env_vars"])
        assert carried == work and carried.slices_spanned == 1 and carried.kind.name == "smoke"
        assert carried.slice == spec.slice_named(job["metadata"]["labels"][names.SLICE_LABEL])
        assert _worker(job)["template"]["spec"]["containers"][0]["image"] == "img:1"


def test_autopilot_smoke_jobs_name_no_node_pool() -> None:
    """Autopilot makes its own pools (the slice's ComputeClass provisions one per job): there is none to name."""
    spec = parse(CONFIG.replace("MODE", "autopilot"))
    jobs = kuberay.smoke_jobs(spec, images=FIXTURE_IMAGES, service_account="k", bucket="b")
    assert jobs and not [j for j in jobs if names.NODE_POOL_LABEL in _worker(j)["template"]["spec"]["nodeSelector"]]


def test_smoke_jobs_take_the_image_of_the_slices_smoke_workload_else_of_any_workload_on_it() -> None:
    text = CONFIG.replace("MODE", "standard").replace("{name: smoke, kind: smoke, slice: train}",
                                                      "{name: smoke, kind: smoke, slice: train, image: s:1}")
    spec = parse(text)
    used = {j["metadata"]["name"]: _worker(j)["template"]["spec"]["containers"][0]["image"]
              for j in kuberay.smoke_jobs(spec, images=FIXTURE_IMAGES, service_account="k", bucket="b")}
    job = FIXTURE_REFS["job"]
    assert used == {"smoke-train-0": "s:1", "smoke-train-1": "s:1", "smoke-serve-0": job,
                    "smoke-small-0": "example.com/ray-tpu:1", "smoke-big-0": job}


def test_builders_return_fresh_json_serialisable_dicts() -> None:
    work = _work()
    a = kuberay.ray_cluster("rc", work, PODS)
    b = kuberay.ray_cluster("rc", work, PODS)
    assert a == b and a is not b
    a["spec"]["workerGroupSpecs"][0]["template"]["spec"]["nodeSelector"]["x"] = "y"
    assert "x" not in work.plan.node_selector
    assert json.loads(json.dumps(b)) == b


# ---------------------------------------------------------------------- the validators are not vacuous


def _job() -> dict[str, Any]:
    return kuberay.ray_job("j", _work(), PODS)


@pytest.mark.parametrize(("mutate", "expected"), [
    (lambda m: m["spec"].__setitem__("entryPoint", "x"), "entryPoint"),
    (lambda m: _worker(m).__setitem__("numHosts", 4), "numHosts"),
    (lambda m: _worker(m)["template"]["spec"]["containers"][0].__setitem__("imagePullPolicyy", "x"), "imagePull"),
    (lambda m: _worker(m).__setitem__("numOfHosts", "4"), "'4' is not of type 'integer'"),
    (lambda m: m["spec"].__setitem__("shutdownAfterJobFinishes", "yes"), "is not of type 'boolean'"),
    (lambda m: _worker(m)["template"]["spec"].__setitem__("tolerations", {"key": "a"}), "is not of type 'array'"),
    (lambda m: m.__setitem__("kind", "RayJobs"), "kind"),
    (lambda m: m["spec"].pop("rayClusterSpec") and m["spec"].__setitem__("rayClusterSpec", {}), "headGroupSpec"),
])
def test_schema_validator_rejects_unknown_fields_and_wrong_types(mutate: Any, expected: str) -> None:
    manifest = _job()
    assert schema_errors(manifest) == []
    mutate(manifest)
    found = schema_errors(manifest)
    assert found and any(expected in e for e in found), found


def test_schema_validator_accepts_int_or_string_quantities() -> None:
    manifest = _job()
    resources = manifest["spec"]["rayClusterSpec"]["headGroupSpec"]["template"]["spec"]["containers"][0]["resources"]
    resources["limits"]["cpu"] = 2
    assert schema_errors(manifest) == []
    resources["limits"]["cpu"] = [2]
    assert schema_errors(manifest)


@pytest.mark.parametrize(("mutate", "expected"), [
    (lambda g: g.__setitem__("numOfHosts", 2), "numOfHosts 2 != 4"),
    (lambda g: g["template"]["spec"]["nodeSelector"].pop(TOPOLOGY_LABEL), f"lacks {TOPOLOGY_LABEL}"),
    (lambda g: g["template"]["spec"]["nodeSelector"].pop(ACCELERATOR_LABEL), f"lacks {ACCELERATOR_LABEL}"),
    (lambda g: g["template"].setdefault("metadata", {}).setdefault("labels", {}).__setitem__(
        "app.kubernetes.io/name", "mine"), "webhook will not see them"),
    (lambda g: g["template"]["spec"]["containers"][0]["resources"]["requests"].__setitem__(TPU_RESOURCE, "1"),
     "requests != limits"),
])
def test_webhook_checker_catches_each_rule(mutate: Any, expected: str) -> None:
    manifest = _job()
    mutate(_worker(manifest))
    found = webhook_errors(manifest)
    assert any(expected in e for e in found), found


@pytest.mark.parametrize(("mutate", "expected"), [
    (lambda m: m["metadata"].__setitem__("name", "j" * 48), "DNS-1035"),
    (lambda m: m["metadata"].__setitem__("name", "Job_1"), "DNS-1035"),
    (lambda m: _worker(m).__setitem__("maxReplicas", 1), "outside [2, 1]"),
    (lambda m: m["spec"].__setitem__("shutdownAfterJobFinishes", False), "without shutdownAfterJobFinishes"),
    (lambda m: m["spec"].__setitem__("runtimeEnvYAML", "- a list"), "runtimeEnvYAML"),
])
def test_operator_checker_catches_each_rule(mutate: Any, expected: str) -> None:
    manifest = kuberay.ray_job("j", _work(), PODS, runtime=kuberay.runtime_env(["file:///z.zip"]))
    assert operator_errors(manifest) == []
    mutate(manifest)
    assert any(expected in e for e in operator_errors(manifest)), operator_errors(manifest)


def test_builders_reject_names_kuberay_would_reject() -> None:
    with pytest.raises(InvalidInput, match="at most 47 characters"):
        kuberay.ray_job("j" * 48, _work(), PODS)
    with pytest.raises(InvalidInput, match="RayService name"):
        kuberay.ray_service("Serve", _work(kind="serve"), PODS)


# ---------------------------------------------------------------------- import boundary


def test_kuberay_spec_and_report_import_no_cdktn_ray_jax_pydantic_or_yaml() -> None:
    """They run inside Ray jobs (the core zip): no CDK, no Ray/JAX at import, and no config parsing."""
    code = ("import sys, raytpu.core.manifests.kuberay, raytpu.core.common.report, raytpu.core.specs.spec; "
            "bad = sorted(m for m in sys.modules if m.split('.')[0] in "
            "('cdktn', 'ray', 'jax', 'constructs', 'pydantic', 'yaml')); "
            "bad += ['raytpu.config'] if 'raytpu.config' in sys.modules else []; "
            "print(bad); sys.exit(1 if bad else 0)")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stdout + result.stderr


# ---------------------------------------------------------------------- the shipped example configs


@pytest.mark.parametrize("path", ["raytpu.example.yaml", "examples/autopilot.yaml"])
def test_example_configs_workloads_and_smoke_jobs_validate(path: str) -> None:
    from crd import REPO

    from raytpu.config import load

    spec = load(REPO / path)
    manifests = _stack_manifests(spec, service_account="ray-ksa", bucket="b") + kuberay.smoke_jobs(
        spec, images=FIXTURE_IMAGES, service_account="ray-ksa", bucket="b", suffix="x1")
    assert len(manifests) == len(spec.workloads) + sum(s.count for s in spec.slices if s.provisioning.runs_ray)
    for m in manifests:
        assert schema_errors(m) == [] and webhook_errors(m) == [] and operator_errors(m) == [], m["metadata"]
        if m["kind"] == "RayJob":
            assert WorkloadSpec.from_env(_runtime(m)["env_vars"]).slice in spec.slices


@pytest.mark.parametrize(("gen", "topology", "zone"), [("v6e", "4x4", ZONE), ("v6e", "2x4", ZONE),
                                                       ("tpu7x", "2x2x2", "us-central1-c")])
def test_a_token_secret_reaches_every_ray_container_of_the_rayservice_as_a_file(gen: str, topology: str,
                                                                                 zone: str) -> None:
    """The Hugging Face token reaches every Ray container as a read-only file that ``HF_TOKEN_PATH`` names, never as an
    env var: huggingface_hub 2.4.0 ``utils._auth.get_token`` reads ``HF_TOKEN``, then the file at
    ``constants.HF_TOKEN_PATH`` (the ``HF_TOKEN_PATH`` variable); checkov CKV_K8S_35 prefers secrets as files. Valid
    against KubeRay v1.7.0's RayService CRD and Kubernetes v1.34's PodSpec."""
    import k8s_schema

    item = SliceSpec.create(name="serve", generation=gen, topology=topology, zone=zone, count=1)
    secret = SecretKeyRef(name="hf-secret", key="hf_api_token")
    service = kuberay.ray_service("llm", _work(item, "serve", model="meta-llama/Llama-3.1-8B-Instruct",
                                               hf_token_secret=secret), PODS)
    assert schema_errors(service) == []
    templates = kuberay.pod_templates(service)
    assert len(templates) == 2  # head and the TPU workers
    directory, _, name = engine_pods.HF_TOKEN_FILE.rpartition("/")
    for template in templates:
        assert k8s_schema.schema_errors(template["spec"], "PodSpec") == []
        (container,) = template["spec"]["containers"]
        assert {"name": "HF_TOKEN_PATH", "value": engine_pods.HF_TOKEN_FILE} in container["env"]
        assert not [e for e in container["env"]
                    if e["name"] == "HF_TOKEN" or "secretKeyRef" in e.get("valueFrom", {})]
        (volume,) = [v for v in template["spec"]["volumes"] if v["name"] == engine_pods.HF_TOKEN_VOLUME]
        assert volume["secret"] == {"secretName": "hf-secret", "items": [{"key": "hf_api_token", "path": name}],
                                    "defaultMode": 0o440}
        mount = {"name": engine_pods.HF_TOKEN_VOLUME, "mountPath": directory, "readOnly": True}
        assert mount in container["volumeMounts"]
    plain = kuberay.ray_service("llm", _work(item, "serve"), PODS)
    assert not [e for t in kuberay.pod_templates(plain) for e in t["spec"]["containers"][0].get("env", [])
                if e["name"].startswith("HF_TOKEN")]
