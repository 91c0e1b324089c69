"""Unit tests of raytpu.kuberay: manifests validate against the KubeRay v1.7.0 CRDs and the TPU webhook's rules."""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

import pytest
import yaml
from crd import effective_pod_labels, operator_errors, schema_errors, webhook_errors

from raytpu import kuberay
from raytpu.catalog import GENERATIONS, generation
from raytpu.config import Config, parse
from raytpu.errors import InvalidInput
from raytpu.plan import ACCELERATOR_LABEL, TOPOLOGY_LABEL, TPU_RESOURCE, SlicePlan, plan_slice

pytestmark = pytest.mark.unit

MODES = ("standard", "autopilot")
PROVISIONING = ("on-demand", "spot", "reservation", "flex-start", "queued")  # spelled out: an independent list


def _plan_cases() -> list[tuple[str, str, str | None]]:
    """Per generation: smallest, two multi-host shapes and the largest; plus every machine type of 2x4."""
    cases: list[tuple[str, str, str | None]] = []
    for name in GENERATIONS:
        tops = generation(name).topologies
        cases += [(name, t, None) for t in dict.fromkeys([tops[0], tops[1], tops[3], tops[-1]])]
    for name in GENERATIONS:
        gen = generation(name)
        for machine in gen.machine_types:
            try:
                plan_slice(name, "2x4", machine.name)
            except InvalidInput:
                continue
            cases.append((name, "2x4", machine.name))
    return cases


PLAN_CASES = _plan_cases()
PLAN_IDS = [f"{g}-{t}-{m or 'default'}" for g, t, m in PLAN_CASES]


def _target(plan: SlicePlan, mode: str = "standard", provisioning: str = "on-demand", slices: int = 2,
            compute_class: str | None = None) -> kuberay.Target:
    return kuberay.Target(plan=plan, slices=slices, provisioning=provisioning, mode=mode,
                          compute_class=compute_class,
                          reservation="my-res" if provisioning == "reservation" else None)


PODS = kuberay.Pods(image="us-docker.pkg.dev/p/r/ray-tpu:2.60.0", service_account="ray-ksa", bucket="my-bucket")


def _all_kinds(target: kuberay.Target) -> list[dict[str, Any]]:
    out = [kuberay.ray_cluster("rc", target, PODS)]
    if target.provisioning != "queued":
        out.append(kuberay.ray_job("rj", target, PODS, entrypoint="python -m x",
                                   runtime=kuberay.runtime_env(["gs://b/raytpu.zip"])))
        out.append(kuberay.ray_service("rs", target, PODS, serve=kuberay.serve_config(target.plan)))
    return out


def _worker(manifest: dict[str, Any]) -> dict[str, Any]:
    spec = manifest["spec"]
    cluster = {"RayCluster": spec, "RayJob": spec.get("rayClusterSpec"),
               "RayService": spec.get("rayClusterConfig")}[manifest["kind"]]
    return cluster["workerGroupSpecs"][0]


def _walk(node: Any) -> list[Any]:
    out = [node]
    if isinstance(node, dict):
        for v in node.values():
            out += _walk(v)
    elif isinstance(node, list):
        for v in node:
            out += _walk(v)
    return out


# ---------------------------------------------------------------------- CRD schema + webhook, table-driven


@pytest.mark.parametrize(("gen", "topology", "machine"), PLAN_CASES, ids=PLAN_IDS)
@pytest.mark.parametrize("mode", MODES)
def test_every_kind_validates_against_crd_and_webhook_for_each_plan(gen: str, topology: str, machine: str | None,
                                                                    mode: str) -> None:
    plan = plan_slice(gen, topology, machine)
    for manifest in _all_kinds(_target(plan, mode, compute_class="raytpu-x" if mode == "autopilot" else None)):
        assert schema_errors(manifest) == [], manifest["kind"]
        assert webhook_errors(manifest) == [], manifest["kind"]
        assert operator_errors(manifest) == [], manifest["kind"]
        group = _worker(manifest)
        assert group["numOfHosts"] == plan.hosts
        assert group["replicas"] == group["minReplicas"] == group["maxReplicas"] == 2


@pytest.mark.parametrize("provisioning", PROVISIONING)
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize(("gen", "topology", "machine"),
                         [("v6e", "4x4", None), ("tpu7x", "2x2x2", None), ("v5e", "2x4", "ct5lp-hightpu-8t")])
def test_every_provisioning_mode_validates(provisioning: str, mode: str, gen: str, topology: str,
                                           machine: str | None) -> None:
    plan = plan_slice(gen, topology, machine)
    for compute_class in ((None, "raytpu-train") if mode == "autopilot" else (None,)):
        for manifest in _all_kinds(_target(plan, mode, provisioning, compute_class=compute_class)):
            assert schema_errors(manifest) == [], (manifest["kind"], schema_errors(manifest))
            assert webhook_errors(manifest) == []
            assert operator_errors(manifest) == []


# ---------------------------------------------------------------------- specific properties


@pytest.mark.parametrize(("machine", "hosts", "tpus"), [("ct6e-standard-8t", 1, "8"), ("ct6e-standard-4t", 2, "4")])
def test_v6e_2x4_worker_group_follows_machine_type(machine: str, hosts: int, tpus: str) -> None:
    plan = plan_slice("v6e", "2x4", machine)
    group = kuberay.worker_group(_target(plan, slices=3), PODS)
    container = group["template"]["spec"]["containers"][0]
    assert group["numOfHosts"] == hosts
    assert group["replicas"] == 3
    assert container["resources"] == {"requests": {TPU_RESOURCE: tpus}, "limits": {TPU_RESOURCE: tpus}}
    assert group["template"]["spec"]["nodeSelector"] == plan.node_selector
    ports = [p for p in container.get("ports", []) if p["containerPort"] == kuberay.MXLA_PORT]
    assert ports == ([] if hosts == 1 else [{"containerPort": 8081, "name": "mxla"}])


def test_worker_env_has_tpu_settings_and_extra_env() -> None:
    group = kuberay.worker_group(_target(plan_slice("v6e", "4x4")), PODS, env={"A": "1"})
    env = {e["name"]: e["value"] for e in group["template"]["spec"]["containers"][0]["env"]}
    assert env == {"JAX_PLATFORMS": "tpu,cpu", "ENABLE_PJRT_COMPATIBILITY": "true", "A": "1"}


@pytest.mark.parametrize(("provisioning", "mode", "compute_class", "selected", "tolerated"), [
    ("on-demand", "standard", None, {}, set()),
    ("spot", "standard", None, {kuberay.SPOT_LABEL: "true"}, {kuberay.SPOT_LABEL}),
    ("spot", "autopilot", None, {kuberay.SPOT_LABEL: "true"}, {kuberay.SPOT_LABEL}),
    ("spot", "autopilot", "cc", {kuberay.COMPUTE_CLASS_LABEL: "cc"}, set()),
    ("reservation", "standard", None, {}, set()),
    ("reservation", "autopilot", None,
     {kuberay.RESERVATION_NAME_LABEL: "my-res", kuberay.RESERVATION_AFFINITY_LABEL: "specific"}, set()),
    ("flex-start", "standard", None, {kuberay.FLEX_START_LABEL: "true"}, {kuberay.FLEX_START_LABEL}),
    ("flex-start", "autopilot", "cc", {kuberay.COMPUTE_CLASS_LABEL: "cc"}, set()),
    ("queued", "standard", None, {kuberay.QUEUED_LABEL: "true"}, {kuberay.QUEUED_LABEL}),
])
def test_provisioning_adds_its_selector_and_toleration(provisioning: str, mode: str, compute_class: str | None,
                                                       selected: dict[str, str], tolerated: set[str]) -> None:
    plan = plan_slice("v6e", "4x4")
    group = kuberay.worker_group(_target(plan, mode, provisioning, compute_class=compute_class), PODS)
    spec = group["template"]["spec"]
    assert spec["nodeSelector"] == {**plan.node_selector, **selected}
    keys = {t["key"] for t in spec["tolerations"]}
    assert keys == {TPU_RESOURCE, *tolerated}


def test_pods_are_not_relabelled_away_from_kuberay_so_the_webhook_sees_them() -> None:
    manifest = kuberay.ray_cluster("rc", _target(plan_slice("v6e", "4x4")),
                                   kuberay.Pods(labels={"team": "ml"}))
    template = manifest["spec"]["workerGroupSpecs"][0]["template"]
    assert "app.kubernetes.io/name" not in template["metadata"]["labels"]
    assert effective_pod_labels(template)["app.kubernetes.io/name"] == "kuberay"


def test_gcs_fuse_volume_ksa_and_annotation_on_every_pod() -> None:
    manifest = kuberay.ray_cluster("rc", _target(plan_slice("v6e", "4x4")), PODS)
    for template in (manifest["spec"]["headGroupSpec"]["template"],
                     manifest["spec"]["workerGroupSpecs"][0]["template"]):
        assert template["metadata"]["annotations"] == {"gke-gcsfuse/volumes": "true"}
        assert template["spec"]["serviceAccountName"] == "ray-ksa"
        assert template["spec"]["volumes"][0]["csi"] == {
            "driver": "gcsfuse.csi.storage.gke.io",
            "volumeAttributes": {"bucketName": "my-bucket", "mountOptions": "implicit-dirs"}}
        assert template["spec"]["containers"][0]["volumeMounts"] == [{"name": "gcs-bucket", "mountPath": "/mnt/gcs"}]


def test_no_bucket_means_no_volume_and_no_annotation() -> None:
    manifest = kuberay.ray_cluster("rc", _target(plan_slice("v6e", "4x4")), kuberay.Pods())
    head = manifest["spec"]["headGroupSpec"]["template"]
    assert "volumes" not in head["spec"] and "metadata" not in head
    assert "serviceAccountName" not in head["spec"]


def test_services_stay_cluster_ip_only() -> None:
    for manifest in _all_kinds(_target(plan_slice("v6e", "4x4"))):
        cluster = manifest["spec"].get("rayClusterSpec") or manifest["spec"].get("rayClusterConfig") \
            or manifest["spec"]
        assert cluster["headGroupSpec"]["serviceType"] == "ClusterIP"
        assert "enableIngress" not in cluster["headGroupSpec"]
        assert "LoadBalancer" not in json.dumps(manifest)
        assert "serveService" not in manifest["spec"]


def test_ray_job_has_bounded_unattended_knobs() -> None:
    limits = kuberay.JobLimits(active_deadline_s=100, pre_running_deadline_s=50, ttl_s=7, backoff_limit=1)
    job = kuberay.ray_job("j", _target(plan_slice("v6e", "4x4")), PODS, entrypoint="python -m x", limits=limits,
                          runtime=kuberay.runtime_env(["gs://b/z.zip"], {"K": "V"}))
    spec = job["spec"]
    assert (spec["shutdownAfterJobFinishes"], spec["ttlSecondsAfterFinished"], spec["activeDeadlineSeconds"],
            spec["preRunningDeadlineSeconds"], spec["backoffLimit"], spec["submissionMode"]) == (
        True, 7, 100, 50, 1, "K8sJobMode")
    assert yaml.safe_load(spec["runtimeEnvYAML"]) == {"py_modules": ["gs://b/z.zip"], "env_vars": {"K": "V"}}


@pytest.mark.parametrize(("field", "value"), [("submission_mode", "Nope"), ("active_deadline_s", 0),
                                              ("pre_running_deadline_s", -1), ("ttl_s", -1)])
def test_job_limits_reject_bad_values(field: str, value: Any) -> None:
    with pytest.raises(InvalidInput, match=field):
        kuberay.JobLimits(**{field: value})


def test_target_rejects_unknown_provisioning_and_mode() -> None:
    plan = plan_slice("v6e", "4x4")
    with pytest.raises(InvalidInput, match="provisioning: 'cheap' is not allowed; valid: on-demand, spot"):
        kuberay.Target(plan=plan, provisioning="cheap")
    with pytest.raises(InvalidInput, match=r"cluster\.mode"):
        kuberay.Target(plan=plan, mode="serverless")
    with pytest.raises(InvalidInput, match="slices"):
        kuberay.Target(plan=plan, slices=0)


@pytest.mark.parametrize("builder", ["job", "service"])
def test_queued_provisioning_rejects_ray_job_and_service_clearly(builder: str) -> None:
    target = _target(plan_slice("v6e", "4x4"), provisioning="queued")
    with pytest.raises(InvalidInput) as info:
        if builder == "job":
            kuberay.ray_job("j", target, PODS, entrypoint="x")
        else:
            kuberay.ray_service("s", target, PODS, serve={})
    assert info.value.field == "provisioning"
    assert "single PodSet" in info.value.problem


def test_serve_config_reserves_whole_slices_and_shards_over_all_chips() -> None:
    plan = plan_slice("v6e", "4x4")
    service = kuberay.ray_service("llm", _target(plan, slices=2), PODS,
                                  serve=kuberay.serve_config(plan, model="m", replicas=2))
    assert service["spec"]["upgradeStrategy"] == {"type": "None"}
    app = yaml.safe_load(service["spec"]["serveConfigV2"])["applications"][0]
    assert app["import_path"] == "ray.serve.llm:build_openai_app"
    llm = app["args"]["llm_configs"][0]
    assert llm["accelerator_type"] == plan.ray_accelerator_type
    assert llm["accelerator_config"] == {"kind": "tpu", "topology": "4x4"}
    assert llm["engine_kwargs"]["tensor_parallel_size"] == plan.chips == 16
    assert llm["deployment_config"]["autoscaling_config"] == {"min_replicas": 2, "max_replicas": 2}
    assert llm["runtime_env"]["env_vars"]["TPU_MULTIHOST_BACKEND"] == "ray"
    env = {e["name"]: e["value"] for e in _worker(service)["template"]["spec"]["containers"][0]["env"]}
    assert env["TPU_MULTIHOST_BACKEND"] == "ray"


@pytest.mark.serve
def test_serve_config_is_accepted_by_ray_serve_llm() -> None:
    """The serveConfigV2 args parse as Ray 2.60's LLMServingArgs (skipped without ray[llm])."""
    builder = pytest.importorskip("ray.llm._internal.serve.core.ingress.builder")
    plan = plan_slice("v6e", "2x4")
    args = kuberay.serve_config(plan)["applications"][0]["args"]
    parsed = builder.LLMServingArgs.model_validate(args)
    config = parsed.llm_configs[0]
    config = config if not isinstance(config, dict) else pytest.fail("llm_configs not parsed")
    assert config.accelerator_type == plan.ray_accelerator_type


def test_upgrade_strategy_is_checked() -> None:
    with pytest.raises(InvalidInput, match="upgrade_strategy"):
        kuberay.ray_service("s", _target(plan_slice("v6e", "4x4")), PODS, serve={}, upgrade_strategy="Rolling")


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


@pytest.mark.parametrize("mode", MODES)
def test_workload_manifests_one_per_workload_valid_and_tokens_kept(mode: str) -> None:
    config = parse(CONFIG.replace("MODE", mode))
    manifests = kuberay.workload_manifests(config, service_account=TOKEN_KSA, bucket=TOKEN_BUCKET, namespace="ml")
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
            assert selector[kuberay.COMPUTE_CLASS_LABEL] == f"raytpu-{m['metadata']['labels'][kuberay.SLICE_LABEL]}"
        else:
            assert kuberay.COMPUTE_CLASS_LABEL not in selector
    smoke, train, serve, big = manifests
    llm = yaml.safe_load(serve["spec"]["serveConfigV2"])["applications"][0]["args"]["llm_configs"][0]
    assert llm["model_loading_config"] == {"model_id": "org/model-x", "model_source": "org/model-x"}
    assert llm["engine_kwargs"]["tensor_parallel_size"] == 8
    assert smoke["spec"]["entrypoint"] == ("python -m raytpu.workloads.smoke --generation v6e --topology 4x4 "
                                           "--machine-type ct6e-standard-4t --slices 2")
    assert _worker(smoke)["replicas"] == 2
    assert yaml.safe_load(smoke["spec"]["runtimeEnvYAML"]) == {
        "py_modules": [f"file:///mnt/gcs/raytpu/raytpu-{kuberay.__version__}.zip"]}
    assert kuberay.core_zip_uri("b") == f"gs://b/raytpu/raytpu-{kuberay.__version__}.zip"
    assert train["spec"]["entrypoint"] == (
        "python -m raytpu.workloads.train --generation v6e --topology 2x4 --machine-type ct6e-standard-4t "
        f"--storage-path gs://{TOKEN_BUCKET}/checkpoints/train")
    assert _worker(train)["numOfHosts"] == 2
    assert _worker(train)["template"]["spec"]["containers"][0]["image"] == "example.com/ray-tpu:1"
    flex = _worker(big)["template"]["spec"]["nodeSelector"].get(kuberay.FLEX_START_LABEL)
    assert flex == ("true" if mode == "standard" else None)  # on Autopilot the ComputeClass carries it
    assert _worker(big)["template"]["spec"]["nodeSelector"][TOPOLOGY_LABEL] == "2x2x4"
    assert _worker(big)["template"]["spec"]["nodeSelector"][ACCELERATOR_LABEL] == plan_slice(
        "tpu7x", "2x2x4").gke_accelerator


def test_workload_manifests_take_py_modules_uri_and_compute_class_overrides() -> None:
    config = parse(CONFIG.replace("MODE", "autopilot"))
    manifests = kuberay.workload_manifests(config, service_account="k", bucket="b", py_modules="gs://x/y.zip",
                                           compute_classes={"train": "custom"})
    assert yaml.safe_load(manifests[0]["spec"]["runtimeEnvYAML"])["py_modules"] == ["gs://x/y.zip"]
    assert _worker(manifests[0])["template"]["spec"]["nodeSelector"][kuberay.COMPUTE_CLASS_LABEL] == "custom"


def test_workload_on_queued_slice_is_invalid_input() -> None:
    """`raytpu validate` rejects this config; the builders guard configs assembled in code too."""
    text = CONFIG.replace("MODE", "standard").replace("provisioning: spot", "provisioning: queued")
    with pytest.raises(InvalidInput, match="provisioning: 'queued' is not allowed for a RayService"):
        kuberay.workload_manifests(Config.model_validate(yaml.safe_load(text)), service_account="k", bucket="b")


def test_smoke_jobs_one_single_slice_job_per_slice_copy() -> None:
    serve_workload = "  - {name: serve, kind: serve, slice: serve, model: org/model-x}\n"
    text = CONFIG.replace("MODE", "standard").replace("provisioning: spot", "provisioning: queued")
    text = text.replace(serve_workload, "")
    jobs = kuberay.smoke_jobs(parse(text), service_account="k", bucket="b", image="img", suffix="abc")
    assert [j["metadata"]["name"] for j in jobs] == ["smoke-train-0-abc", "smoke-train-1-abc",
                                                     "smoke-small-0-abc", "smoke-big-0-abc"]
    for job in jobs:
        assert schema_errors(job) == []
        assert webhook_errors(job) == []
        assert _worker(job)["replicas"] == 1
        assert "--slices" not in job["spec"]["entrypoint"]
        assert _worker(job)["template"]["spec"]["containers"][0]["image"] == "img"


def test_builders_return_fresh_json_serialisable_dicts() -> None:
    target = _target(plan_slice("v6e", "4x4"))
    a = kuberay.ray_cluster("rc", target, PODS)
    b = kuberay.ray_cluster("rc", target, PODS)
    assert a == b and a is not b
    a["spec"]["workerGroupSpecs"][0]["template"]["spec"]["nodeSelector"]["x"] = "y"
    assert "x" not in target.plan.node_selector
    assert json.loads(json.dumps(b)) == b


# ---------------------------------------------------------------------- the validators are not vacuous


def _job() -> dict[str, Any]:
    return kuberay.ray_job("j", _target(plan_slice("v6e", "4x4")), PODS, entrypoint="x")


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
    manifest = kuberay.ray_job("j", _target(plan_slice("v6e", "4x4")), PODS, entrypoint="x",
                               runtime=kuberay.runtime_env(["file:///z.zip"]))
    assert operator_errors(manifest) == []
    mutate(manifest)
    assert any(expected in e for e in operator_errors(manifest)), operator_errors(manifest)


def test_builders_reject_names_kuberay_would_reject() -> None:
    with pytest.raises(InvalidInput, match="at most 47 characters"):
        kuberay.ray_job("j" * 48, _target(plan_slice("v6e", "4x4")), PODS, entrypoint="x")
    with pytest.raises(InvalidInput, match="RayService name"):
        kuberay.ray_service("Serve", _target(plan_slice("v6e", "4x4")), PODS, serve={})


# ---------------------------------------------------------------------- import boundary


def test_kuberay_and_report_import_no_cdktn_ray_or_jax() -> None:
    code = ("import sys, raytpu.kuberay, raytpu.report; "
            "bad = sorted(m for m in sys.modules if m.split('.')[0] in ('cdktn', 'ray', 'jax', 'constructs')); "
            "print(bad); sys.exit(1 if bad else 0)")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stdout + result.stderr


# ---------------------------------------------------------------------- the shipped example configs


@pytest.mark.parametrize("path", ["raytpu.example.yaml", "examples/autopilot.yaml"])
def test_example_configs_workloads_and_smoke_jobs_validate(path: str) -> None:
    from crd import REPO

    from raytpu.config import load

    config = load(REPO / path)
    manifests = kuberay.workload_manifests(config, service_account="ray-ksa", bucket="b") + kuberay.smoke_jobs(
        config, service_account="ray-ksa", bucket="b", suffix="x1")
    assert len(manifests) >= len(config.workloads) + 1
    for m in manifests:
        assert schema_errors(m) == [] and webhook_errors(m) == [] and operator_errors(m) == [], m["metadata"]
