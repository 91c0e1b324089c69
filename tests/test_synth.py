"""Synth tests of the stacks and the app: the example configs (Standard and Autopilot) synthesized once
each, cross-stack references resolved in the JSON, the GCS backend, `raytpu synth` and `npx cdktf synth`."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import pytest
from _synth import (
    AUTOPILOT_EXAMPLE,
    AUTOPILOT_NOTICE_CONFIG,
    DEFAULT_NOTICE_CONFIGS,
    EVERY_MODE,
    EXAMPLES,
    IRON,
    NOTICE_CONFIG,
    REPO,
    RESEARCH,
    STANDARD_EXAMPLE,
    by_name,
    cdktf_cli,
    only,
    read_stacks,
    resources,
    synth_added_slices,
    synth_config,
    synth_text,
)
from image_refs import FIXTURE_REFS, write_record

from raytpu.core.common import names
from raytpu.core.manifests import kuberay
from raytpu.stacks.synth_out import check as check_out

pytestmark = [pytest.mark.synth, pytest.mark.timeout(600)]


@pytest.fixture(scope="module")
def standard() -> dict[str, dict[str, Any]]:
    return synth_config(str(STANDARD_EXAMPLE))[1]


@pytest.fixture(scope="module")
def autopilot() -> dict[str, dict[str, Any]]:
    return synth_config(str(AUTOPILOT_EXAMPLE))[1]


def test_example_apps_have_a_cluster_and_a_workloads_stack(standard: dict, autopilot: dict) -> None:
    assert sorted(standard) == ["ray-tpu-cluster", "ray-tpu-workloads"]
    assert sorted(autopilot) == ["ray-tpu-auto-cluster", "ray-tpu-auto-workloads"]


def test_standard_cluster_is_private_hardened_and_runs_the_ray_operator(standard: dict) -> None:
    cluster = only(standard["ray-tpu-cluster"], "google_container_cluster")
    assert cluster["addons_config"]["ray_operator_config"] == [{
        "enabled": True, "ray_cluster_logging_config": {"enabled": True},
        "ray_cluster_monitoring_config": {"enabled": True}}]
    assert cluster["addons_config"]["gcs_fuse_csi_driver_config"] == {"enabled": True}
    assert cluster["workload_identity_config"] == {"workload_pool": "my-ml-project.svc.id.goog"}
    assert cluster["private_cluster_config"]["enable_private_nodes"] is True
    assert cluster["master_authorized_networks_config"]["gcp_public_cidrs_access_enabled"] is False
    assert cluster["enable_shielded_nodes"] is True
    assert cluster["node_config"]["shielded_instance_config"]["enable_secure_boot"] is True
    assert cluster["datapath_provider"] == "ADVANCED_DATAPATH"
    assert cluster["release_channel"] == {"channel": "RAPID"}
    assert cluster["deletion_protection"] is True
    assert cluster["remove_default_node_pool"] is True
    assert cluster["resource_labels"] == {"managed-by": "raytpu"}
    assert "min_master_version" not in cluster  # the release channel chooses; the floor is a precondition
    # Node upgrades (which recreate slices) only on weekends, 02:00-08:00 UTC: 48 h in any 32 days, GKE's minimum
    # (https://cloud.google.com/kubernetes-engine/docs/maintenance-window); provider: recurring_window's three
    # fields are Required, RFC 3339 times and an RFC 5545 rule (resource_container_cluster.go).
    assert cluster["maintenance_policy"] == {"recurring_window": {
        "start_time": "2025-01-04T02:00:00Z", "end_time": "2025-01-04T08:00:00Z",
        "recurrence": "FREQ=WEEKLY;BYDAY=SA,SU"}}
    assert _floor(cluster) == ("1.31.2-gke.1115000", "v6e on Standard")  # v6e's minimum beats the Ray add-on's
    assert "enable_autopilot" not in cluster


_FLOOR = re.compile(r"older than (\S+), which (.+) needs;")


def _floor(cluster: dict[str, Any]) -> tuple[str, str]:
    """(version, what needs it) of the cluster's version-floor precondition (its error message says both)."""
    (condition,) = cluster["lifecycle"]["precondition"]
    match = _FLOOR.search(condition["error_message"])
    assert match, condition["error_message"]
    return match[1], match[2]


def _terraform_console(expression: str) -> str:
    """Evaluates one expression with Terraform itself (``terraform console``: built-in functions only, no
    provider, no state)."""
    with tempfile.TemporaryDirectory() as empty:
        done = subprocess.run(["terraform", "console"], input=expression, cwd=empty, capture_output=True, text=True,
                              timeout=60, env={**os.environ, "TF_CLI_CONFIG_FILE": "/dev/null",
                                               "CHECKPOINT_DISABLE": "1"})
    assert done.returncode == 0, done.stderr
    return done.stdout


@pytest.mark.parametrize("example", ["standard", "autopilot"])
def test_the_version_floor_is_judged_by_terraform_against_the_channels_default(example: str,
                                                                               request: pytest.FixtureRequest) -> None:
    """The precondition as synthesized, evaluated by Terraform with the data source's value replaced by versions
    around the floor. ``min_master_version`` is sent as the create version and GKE refuses stale patch versions
    (resource_container_cluster.go: InitialClusterVersion), so the kit leaves it to the release channel
    (``google_container_engine_versions.release_channel_default_version[<channel>]``, a map keyed by channel)."""
    stacks = request.getfixturevalue(example)
    cluster_stack = next(s for sid, s in stacks.items() if sid.endswith("-cluster"))
    cluster = only(cluster_stack, "google_container_cluster")
    (versions_id,) = cluster_stack["data"]["google_container_engine_versions"]
    condition = cluster["lifecycle"]["precondition"][0]["condition"]
    channel = cluster["release_channel"]["channel"]
    reference = f'data.google_container_engine_versions.{versions_id}.release_channel_default_version["{channel}"]'
    assert condition.startswith("${") and reference in condition
    floor, _ = _floor(cluster)
    major, minor, patch, build = (int(p) for p in re.split(r"[.]|-gke[.]", floor))
    cases = {floor: True, f"{major}.{minor}.{patch}-gke.{build - 1}": False,
             f"{major}.{minor}.{patch}-gke.{build + 1}": True, f"{major}.{minor + 1}.0-gke.1": True,
             f"{major}.{minor - 1}.99-gke.99999999": False,
             f"{major + 1}.0.0-gke.0": True, "not-a-version": False}
    listed = ", ".join(condition[2:-1].replace(reference, json.dumps(v)) for v in cases)
    verdicts = re.findall(r"\b(true|false)\b", _terraform_console(f"[{listed}]"))
    assert verdicts == [str(v).lower() for v in cases.values()], cases


def _pruned_crd(kind: str, field_path: str, keep_last: bool) -> dict[str, Any]:
    """The vendored v1.7.0 CRD of ``kind`` cut down to the schema nodes along ``field_path`` (the last one left out
    when not ``keep_last``: a CRD of a KubeRay that predates the field)."""
    from crd import crd

    full = next(v for v in crd(kind)["spec"]["versions"] if v["name"] == "v1")["schema"]["openAPIV3Schema"]
    parts = field_path.split(".")
    pruned: dict[str, Any] = {}
    node, out = full, pruned
    for i, part in enumerate(parts):
        if i == len(parts) - 1 and not keep_last:
            break
        out["properties"] = {part: {}}
        node, out = node["properties"][part], out["properties"][part]
    out.update({k: v for k, v in node.items() if k == "type"})
    return {"spec": {"versions": [{"name": "v1", "schema": {"openAPIV3Schema": pruned}}]}}


def test_the_kuberay_version_check_is_judged_by_terraform_against_the_crds(standard: dict) -> None:
    """Each KubeRay object of the workloads stack carries a precondition over the live CRD
    (``data.kubernetes_resource``): ``kubernetes_manifest`` plans against the cluster's CRDs, so an older KubeRay
    would fail the plan on a field it lacks (a RayService's ``authOptions``: KubeRay 1.5.1). Terraform
    evaluates each condition here against the vendored v1.7.0 CRD and against it without the field."""
    stack = standard["ray-tpu-workloads"]
    checked = 0
    for manifest in resources(stack, "kubernetes_manifest").values():
        kind = manifest["manifest"]["kind"]
        if kind not in kuberay.NEWEST_FIELDS:
            continue
        conditions = manifest["lifecycle"]["precondition"]
        fields, version = kuberay.NEWEST_FIELDS[kind]
        assert [f for f in fields if not any(f"{f}, which KubeRay {version} brought" in c["error_message"]
                                             for c in conditions)] == []
        for condition, field_path in zip(conditions, fields, strict=True):
            reference = re.search(r"data\.kubernetes_resource\.[\w-]+\.object", condition["condition"])
            assert reference is not None
            cases = [condition["condition"][2:-1].replace(reference[0], f"jsondecode({json.dumps(json.dumps(crd))})")
                     for crd in (_pruned_crd(kind, field_path, True), _pruned_crd(kind, field_path, False))]
            verdicts = re.findall(r"\b(true|false)\b", _terraform_console(f"[{', '.join(cases)}]"))
            assert verdicts == ["true", "false"], (kind, field_path)
            checked += 1
    assert checked == 1  # the one RayService (Terraform applies no RayJob)


def test_alerting_is_opt_in_and_pages_with_the_slice_and_its_cause(standard: dict, autopilot: dict) -> None:
    """The autopilot example opts in (``alerting.notification_channels``); the standard one does not. The metric
    counts the smoke jobs' structured lines (``jsonPayload.raytpu_smoke.state="unhealthy"``; GKE ships container
    stdout to Cloud Logging, which reads a JSON line as jsonPayload); the policy's subject and body are Monitoring
    documentation variables, escaped from Terraform (``$${`` is a literal ``${`` in Terraform's JSON syntax).

    The policy matches the same log lines itself (a LogMatch condition with the metric's filter and extractors) rather
    than reading the metric: a policy on a metric created in the same apply fails for up to 10 minutes
    (issue 18 item 2; tests/test_first_apply.py), so ``${log.extracted_label.*}`` replaced ``${metric.label.*}``."""
    assert resources(standard["ray-tpu-cluster"], "google_logging_metric") == {}
    cluster = autopilot["ray-tpu-auto-cluster"]
    (metric,) = resources(cluster, "google_logging_metric").values()
    assert metric["filter"] == ('resource.type="k8s_container" AND resource.labels.cluster_name="ray-tpu-auto" AND '
                                'resource.labels.namespace_name="ray" AND jsonPayload.raytpu_smoke.state="unhealthy"')
    assert metric["label_extractors"] == {"slice": "EXTRACT(jsonPayload.raytpu_smoke.slice)",
                                          "reason": "EXTRACT(jsonPayload.message)"}
    assert {label["key"] for label in metric["metric_descriptor"]["labels"]} == {"slice", "reason"}
    (policy,) = resources(cluster, "google_monitoring_alert_policy").values()
    assert policy["notification_channels"] == ["projects/my-ml-project/notificationChannels/1234567890"]
    (condition,) = policy["conditions"]
    assert condition["condition_matched_log"] == {"filter": metric["filter"],
                                                  "label_extractors": metric["label_extractors"]}
    subject = _terraform_console(json.dumps(policy["documentation"]["subject"]))
    # what Monitoring receives, as Terraform reads it
    assert "TPU slice ${log.extracted_label.slice} unhealthy" in subject


def test_standard_pools_follow_the_slice_plans(standard: dict) -> None:
    pools = by_name(standard["ray-tpu-cluster"], "google_container_node_pool")
    assert sorted(pools) == ["ray-head", "serve-0", "train-0"]
    train, serve, head = pools["train-0"], pools["serve-0"], pools["ray-head"]
    assert (train["node_config"]["machine_type"], train["node_count"]) == ("ct6e-standard-4t", 4)
    assert train["placement_policy"] == {"type": "COMPACT", "tpu_topology": "4x4"}
    assert (serve["node_config"]["machine_type"], serve["node_count"]) == ("ct6e-standard-8t", 1)
    assert "placement_policy" not in serve and serve["node_config"]["spot"] is True
    assert head["node_config"]["machine_type"] == "n2-standard-8"
    assert head["node_locations"] == ["us-east5-b"]
    node_sa = "${google_service_account.node-identity_sa_B6B5F54D.email}"
    assert {p["node_config"]["service_account"] for p in pools.values()} == {node_sa}


def test_tpu_pools_get_hugepages_and_a_spot_slices_window_and_the_cluster_its_version_floor(
        standard: dict) -> None:
    """Issue 41 item 4 and issue 40 item 4, on the synthesized JSON: every TPU pool sets
    ``linux_node_config.transparent_hugepage_enabled`` (ALWAYS, or MADVISE where the slice turns it off), the head
    pool none; only the spot slice with ``preemption_notice_s: 120`` sets ``kubelet_config`` (120 s, 15 s for system
    pods), and the cluster's precondition then asks for GKE 1.35.0-gke.1171000. Its RayService's workers get 105 s
    of grace and a 100 s drain preStop (the serving image's Ray 2.56)."""
    example = by_name(standard["ray-tpu-cluster"], "google_container_node_pool")
    assert {n: p["node_config"].get("linux_node_config") for n, p in example.items()} == {
        "ray-head": None, "serve-0": {"transparent_hugepage_enabled": "TRANSPARENT_HUGEPAGE_ENABLED_ALWAYS"},
        "train-0": {"transparent_hugepage_enabled": "TRANSPARENT_HUGEPAGE_ENABLED_ALWAYS"}}
    assert all("kubelet_config" not in p["node_config"] for p in example.values())
    stacks = synth_text(NOTICE_CONFIG)
    cluster_stack = stacks["ray-tpu-cluster"]
    pools = by_name(cluster_stack, "google_container_node_pool")
    assert pools["serve-0"]["node_config"]["kubelet_config"] == {
        "shutdown_grace_period_seconds": 120, "shutdown_grace_period_critical_pods_seconds": 15}
    assert pools["train-0"]["node_config"]["linux_node_config"] == {
        "transparent_hugepage_enabled": "TRANSPARENT_HUGEPAGE_ENABLED_MADVISE"}
    assert "kubelet_config" not in pools["train-0"]["node_config"]
    assert _floor(only(cluster_stack, "google_container_cluster")) == ("1.35.0-gke.1171000",
                                                                       "a preemption notice above 30 s")
    (service,) = [m["manifest"] for m in resources(stacks["ray-tpu-workloads"], "kubernetes_manifest").values()
                  if m["manifest"]["kind"] == "RayService"]
    worker = kuberay.ray_cluster_of(service)["workerGroupSpecs"][0]["template"]["spec"]
    assert worker["terminationGracePeriodSeconds"] == 105
    assert "signal.alarm(102)" in worker["containers"][0]["lifecycle"]["preStop"]["exec"]["command"][-1]



_VERSION_ARG = re.compile(r'regex\("[^"]*", ([^()]+)\)')


def _control_plane_checks(stacks: dict[str, dict[str, Any]]) -> dict[str, tuple[dict[str, str], str]]:
    """Pool or ComputeClass name -> (its precondition, the Terraform reference it reads the version from, a
    cross-stack output resolved to the cluster stack's own expression)."""
    cluster_id = next(s for s in stacks if s.endswith("-cluster"))
    outputs = {k: v["value"] for k, v in stacks[cluster_id].get("output", {}).items()}
    found = {}
    for stack in stacks.values():
        for rtype in ("google_container_node_pool", "kubernetes_manifest"):
            for res in resources(stack, rtype).values():
                for check in res.get("lifecycle", {}).get("precondition", []):
                    if "control plane runs" not in check["error_message"]:
                        continue
                    (reference,) = set(_VERSION_ARG.findall(check["condition"]))
                    output = reference.rsplit(".outputs.", 1)[-1]
                    name = res["name"] if rtype != "kubernetes_manifest" else res["manifest"]["metadata"]["name"]
                    found[name] = (check, outputs.get(output, f"${{{reference}}}"))
    return found


def test_a_long_window_is_checked_against_the_clusters_own_control_plane() -> None:
    """Issue 40: the cluster's precondition judges the release channel's default version, so a cluster lagging its
    channel would pass it and GKE would then refuse the 120 s window. The Standard pool and the Autopilot
    ComputeClass that carry the window each check the cluster's computed ``master_version`` (the workloads stack
    through a cross-stack output); Terraform judges it: true for 1.35.1-gke.100, false for 1.34.9-gke.1."""
    standard = synth_text(NOTICE_CONFIG)
    autopilot = synth_text(AUTOPILOT_NOTICE_CONFIG)
    checks = {**_control_plane_checks(standard), **_control_plane_checks(autopilot)}
    assert sorted(checks) == ["raytpu-batch", "serve-0"]  # only what carries a window; not train-0 nor head pools
    pool_cluster = next(iter(resources(standard["ray-tpu-cluster"], "google_container_cluster")))
    auto_cluster = next(iter(resources(autopilot["ray-tpu-auto-cluster"], "google_container_cluster")))
    assert checks["serve-0"][1] == f"${{google_container_cluster.{pool_cluster}.master_version}}"
    assert checks["raytpu-batch"][1] == f"${{google_container_cluster.{auto_cluster}.master_version}}"
    pool = by_name(standard["ray-tpu-cluster"], "google_container_node_pool")["serve-0"]
    assert pool["lifecycle"]["ignore_changes"]  # the TPU host drift it ignored still is
    cases = {"1.35.1-gke.100": True, "1.34.9-gke.1": False, "1.35.0-gke.1171000": True, "1.35.0-gke.1170999": False}
    for check, _ in checks.values():
        assert "1.35.0-gke.1171000" in check["error_message"] and "valid:" in check["error_message"]
        (reference,) = set(_VERSION_ARG.findall(check["condition"]))
        listed = ", ".join(check["condition"][2:-1].replace(reference, json.dumps(v)) for v in cases)
        verdicts = re.findall(r"\b(true|false)\b", _terraform_console(f"[{listed}]"))
        assert verdicts == [str(v).lower() for v in cases.values()], cases


@pytest.mark.parametrize(("version", "applies"), [("1.35.1-gke.100", True), ("1.34.9-gke.1", False)])
def test_a_new_clusters_unknown_version_passes_the_plan_and_is_judged_at_apply(version: str, applies: bool,
                                                                              tmp_path: Path) -> None:
    """A new cluster's ``master_version`` is unknown at plan: the pool's precondition, as synthesized, lets the plan
    through and Terraform judges it at apply. Here ``terraform_data`` (built in, no provider) stands for the cluster:
    its ``output`` is unknown until it is created."""
    check, _ = _control_plane_checks(synth_text(NOTICE_CONFIG))["serve-0"]
    (reference,) = set(_VERSION_ARG.findall(check["condition"]))
    condition = check["condition"][2:-1].replace(reference, "terraform_data.cluster.output")
    (tmp_path / "main.tf").write_text(
        f'resource "terraform_data" "cluster" {{\n  input = {json.dumps(version)}\n}}\n'
        'resource "terraform_data" "pool" {\n  lifecycle {\n    precondition {\n'
        f'      condition = {condition}\n      error_message = {json.dumps(check["error_message"])}\n'
        '    }\n  }\n}\n')
    env = {**os.environ, "TF_CLI_CONFIG_FILE": "/dev/null", "CHECKPOINT_DISABLE": "1", "TF_IN_AUTOMATION": "1"}

    def terraform(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(["terraform", *args, "-input=false", "-no-color"], cwd=tmp_path, env=env,
                              capture_output=True, text=True, timeout=120)

    assert terraform("init").returncode == 0
    plan = terraform("plan")
    assert plan.returncode == 0 and "known after apply" in plan.stdout, plan.stderr
    applied = terraform("apply", "-auto-approve")
    assert (applied.returncode == 0) == applies, applied.stderr
    assert ("Resource precondition failed" in applied.stderr) == (not applies)

@pytest.mark.parametrize("mode", ["standard", "autopilot"])
def test_gkes_default_notice_stated_emits_no_kubelet_fields_and_no_version_need(mode: str,
                                                                                request: pytest.FixtureRequest) -> None:
    """``preemption_notice_s: 30`` is GKE's default window for Spot VMs; the kubelet shutdown fields of the pool
    and of the ComputeClass arrived with GKE 1.35 (compute-class-api 33b4e26, 2026-01-06), so stating 30 emits
    none of them, adds no precondition and leaves the cluster's floor where the example has it."""
    example = request.getfixturevalue(mode)
    stacks = synth_text(DEFAULT_NOTICE_CONFIGS[mode])
    cluster_id = next(s for s in stacks if s.endswith("-cluster"))
    assert all("kubelet_config" not in p["node_config"]
               for p in resources(stacks[cluster_id], "google_container_node_pool").values())
    classes = [m["manifest"] for s in stacks.values() for m in resources(s, "kubernetes_manifest").values()
               if m["manifest"]["kind"] == "ComputeClass"]
    assert all("kubeletConfig" not in c["spec"]["priorityDefaults"]["nodeSystemConfig"] for c in classes)
    assert bool(classes) == (mode == "autopilot")
    assert _control_plane_checks(stacks) == {}
    assert _floor(only(stacks[cluster_id], "google_container_cluster")) == _floor(
        only(example[cluster_id], "google_container_cluster"))

CHECKPOINT_VERSIONS_RULE = {"action": {"type": "Delete"},
                            "condition": {"days_since_noncurrent_time": 1, "matches_prefix": ["checkpoints/"],
                                          "with_state": "ARCHIVED"}}
"""Issue 71 item 11: a checkpoint Ray Train deletes past ``keep_checkpoints`` becomes a noncurrent version of the
versioned bucket; under ``checkpoints/`` such versions go after a day, not the other objects' 30.
Source: https://cloud.google.com/storage/docs/lifecycle#dayssincenoncurrenttime"""


@pytest.mark.parametrize("example", [STANDARD_EXAMPLE, AUTOPILOT_EXAMPLE], ids=["standard", "autopilot"])
def test_deleted_checkpoints_noncurrent_versions_go_after_a_day(example: Path, standard: dict,
                                                                autopilot: dict) -> None:
    stacks = standard if example == STANDARD_EXAMPLE else autopilot
    (bucket,) = [only(s, "google_storage_bucket") for s in stacks.values() if resources(s, "google_storage_bucket")]
    rules = bucket["lifecycle_rule"]
    assert [r for r in rules if "checkpoints/" in r["condition"].get("matches_prefix", [])] == [
        CHECKPOINT_VERSIONS_RULE]
    # the other versions keep their 30 days, and no rule touches a live checkpoint
    assert {"action": {"type": "Delete"}, "condition": {"days_since_noncurrent_time": 30,
                                                        "with_state": "ARCHIVED"}} in rules
    assert bucket["versioning"] == {"enabled": True}


def test_network_bucket_and_identity(standard: dict) -> None:
    stack = standard["ray-tpu-cluster"]
    subnet = only(stack, "google_compute_subnetwork")
    assert subnet["private_ip_google_access"] is True and subnet["log_config"]["flow_sampling"] == 0.5
    assert [r["range_name"] for r in subnet["secondary_ip_range"]] == ["pods", "services"]
    assert only(stack, "google_compute_router_nat")["log_config"] == {"enable": True, "filter": "ERRORS_ONLY"}
    bucket = only(stack, "google_storage_bucket")
    assert bucket["name"] == "my-ml-project-ray-tpu-ray"
    assert bucket["uniform_bucket_level_access"] is True
    assert bucket["public_access_prevention"] == "enforced"
    assert bucket["versioning"] == {"enabled": True}
    # JAX's cache never evicts (jax_compilation_cache_max_size -1; jax-v0.10.2 docs/persistent_compilation_cache.md
    # asks for an age rule): the cache folders, and only they, expire; checkpoints' live objects never do.
    old_versions, checkpoints, caches = bucket["lifecycle_rule"]
    assert old_versions["condition"] == {"days_since_noncurrent_time": 30, "with_state": "ARCHIVED"}
    assert checkpoints == CHECKPOINT_VERSIONS_RULE
    assert caches == {"action": {"type": "Delete"},
                      "condition": {"age": 30, "matches_prefix": ["compile-cache/", "xla-cache/vllm/"],
                                    "with_state": "LIVE"}}
    binding = only(stack, "google_service_account_iam_member")
    assert binding["role"] == "roles/iam.workloadIdentityUser"
    assert binding["member"] == "serviceAccount:my-ml-project.svc.id.goog[ray/ray-tpu-ray]"  # one KSA name per cluster
    # the cluster (the identity pool exists only once it does), and the IAM API it calls (tests/test_first_apply.py)
    (iam_api,) = [k for k, r in resources(stack, "google_project_service").items()
                  if r["service"] == "iam.googleapis.com"]
    assert binding["depends_on"] == ["google_container_cluster.gke_cluster_C5D95197",
                                     f"google_project_service.{iam_api}"]
    ray = next(k for k, r in resources(stack, "google_service_account").items()
               if r["account_id"] == "raytpu-ray-tpu-ray")
    grants = {g["role"]: g for g in resources(stack, "google_storage_bucket_iam_member").values()
              if g["member"] == f"serviceAccount:${{google_service_account.{ray}.email}}"}
    # exactly what the workloads use: objects (read, write, delete checkpoints), and storage.buckets.get, which
    # pyarrow's GcsFileSystem calls (apache/arrow cpp/src/arrow/filesystem/gcsfs.cc GetBucketMetadata) and
    # roles/storage.objectUser lacks (https://cloud.google.com/storage/docs/access-control/iam-roles)
    # objects: read all (objectViewer), write (objectUser) only under conditions on the folders the pods write
    # (issue 49 item 5: tests/test_bucket_scope.py)
    assert sorted(grants) == ["roles/storage.legacyBucketReader", "roles/storage.objectUser",
                              "roles/storage.objectViewer"]
    for grant in grants.values():
        assert grant["bucket"] == "${google_storage_bucket.storage_bucket_6AF501AE.name}"
        assert grant["member"].startswith("serviceAccount:${google_service_account.")
    roles = sorted(r["role"] for r in resources(stack, "google_project_iam_member").values())
    assert "roles/owner" not in roles and "roles/editor" not in roles and "roles/logging.logWriter" in roles


@pytest.mark.parametrize("example", ["standard", "autopilot"])
def test_the_image_registry_is_a_docker_repository_the_nodes_pull_from_and_the_builder_pushes_to(
        example: str, standard: dict, autopilot: dict) -> None:
    """The kit's images live in the cluster's region (``raytpu images build``); the node service account may pull
    (roles/artifactregistry.reader), the builder that Cloud Build runs as may push (roles/artifactregistry.writer),
    https://cloud.google.com/artifact-registry/docs/access-control#roles; no one else is granted anything there."""
    stacks = standard if example == "standard" else autopilot
    cluster_id = next(s for s in stacks if s.endswith("-cluster"))
    stack = stacks[cluster_id]
    repo = only(stack, "google_artifact_registry_repository")
    name = cluster_id.removesuffix("-cluster")
    assert (repo["format"], repo["repository_id"]) == ("DOCKER", f"{name}-images")
    assert repo["location"] == ("us-east5" if example == "standard" else "us-central1")
    assert repo["docker_config"] == {"immutable_tags": True}
    accounts = {r["account_id"]: k for k, r in resources(stack, "google_service_account").items()}
    node, builder = accounts[f"raytpu-{name}-node"], accounts[f"raytpu-{name}-img"]
    repo_id = next(iter(resources(stack, "google_artifact_registry_repository")))
    grants = {(g["role"], g["member"])
              for g in resources(stack, "google_artifact_registry_repository_iam_member").values()
              if g["repository"] == f"${{google_artifact_registry_repository.{repo_id}.name}}"}
    assert grants == {("roles/artifactregistry.reader", f"serviceAccount:${{google_service_account.{node}.email}}"),
                      ("roles/artifactregistry.writer", f"serviceAccount:${{google_service_account.{builder}.email}}")}
    # the builder reads its build context and writes its streamed log in the bucket (raytpu.images.build), nothing more
    bucket_grants = [(g["role"], g["bucket"]) for g in resources(stack, "google_storage_bucket_iam_member").values()
                     if g["member"] == f"serviceAccount:${{google_service_account.{builder}.email}}"]
    (bucket_id,) = resources(stack, "google_storage_bucket")
    assert bucket_grants == [("roles/storage.objectUser", f"${{google_storage_bucket.{bucket_id}.name}}")]
    assert not [r for r in resources(stack, "google_project_iam_member").values()
                if r["member"].endswith(f"{builder}.email}}")]
    outputs = stack["output"]
    assert outputs["registry"]["value"] == f"${{google_artifact_registry_repository.{repo_id}.registry_uri}}"
    assert outputs["builder_service_account"]["value"] == f"${{google_service_account.{builder}.email}}"


@pytest.mark.parametrize("example", ["standard", "autopilot"])
def test_cluster_stack_outputs_exactly_the_stack_outputs_schema(example: str, standard: dict,
                                                                autopilot: dict) -> None:
    """`raytpu submit`/`smoke` read StackOutputs: the cluster stack writes those names and nothing else."""
    from raytpu.cluster.outputs import StackOutputs

    stacks = standard if example == "standard" else autopilot
    cluster_id, workloads_id = sorted(stacks)
    written = stacks[cluster_id]["output"]
    # The only other outputs are cdktn's own plumbing for the workloads stack's cross-stack references:
    # sensitive, and each one read by the workloads stack (not a name `raytpu submit` reads).
    plumbing = {n: o for n, o in written.items() if n.startswith("cross-stack-output-")}
    read = {ref.split(".")[-1] for ref in _remote_state_refs(stacks[workloads_id])}
    assert set(plumbing) == read
    assert all(o["sensitive"] is True and "description" not in o for o in plumbing.values())
    outputs = {n: o for n, o in written.items() if n not in plumbing}
    assert sorted(outputs) == sorted(StackOutputs.names())
    descriptions = StackOutputs.descriptions()
    assert set(descriptions) == set(StackOutputs.names())
    for name, output in outputs.items():
        assert output["description"] == descriptions[name] and descriptions[name], name
        assert output.get("sensitive", False) is False, name
    region = "us-east5" if example == "standard" else "us-central1"
    assert outputs["location"]["value"] == region
    assert outputs["project"]["value"] == "my-ml-project"
    cluster = "ray-tpu" if example == "standard" else "ray-tpu-auto"
    assert (outputs["namespace"]["value"], outputs["service_account"]["value"]) == ("ray", f"{cluster}-ray")
    assert outputs["endpoint"]["value"].startswith("${google_container_cluster.gke_cluster_")
    assert outputs["cluster_name"]["value"].startswith("${google_container_cluster.gke_cluster_")
    assert outputs["bucket"]["value"].startswith("${google_storage_bucket.storage_bucket_")
    assert "output" not in stacks[workloads_id]


def _remote_state_refs(value: Any) -> set[str]:
    """Every ``data.terraform_remote_state.<name>.outputs.<output>`` a stack reads, inside function calls too."""
    return set(re.findall(r"data\.terraform_remote_state\.[A-Za-z0-9_-]+\.outputs\.[A-Za-z0-9_-]+",
                          json.dumps(value)))


@pytest.mark.parametrize("example", ["standard", "autopilot"])
def test_cross_stack_references_resolve(example: str, standard: dict, autopilot: dict) -> None:
    stacks = standard if example == "standard" else autopilot
    cluster_id, workloads_id = sorted(stacks)
    cluster, workloads = stacks[cluster_id], stacks[workloads_id]
    refs = _remote_state_refs(workloads)
    assert refs, "the workloads stack reads the cluster stack's outputs"
    remote = workloads["data"]["terraform_remote_state"]
    assert list(remote) == [f"cross-stack-reference-input-{cluster_id}"]
    for ref in refs:
        _, _, name, outputs, output = ref.split(".", 4)
        assert name in remote and outputs == "outputs"
        assert output in cluster["output"], f"{ref} names an output the cluster stack does not declare"
    provider = workloads["provider"]["kubernetes"][0]
    assert provider["host"].startswith("https://${data.terraform_remote_state.")
    # control_plane: dns (the default): the kubernetes provider reaches GKE's DNS-based endpoint, whose certificate
    # is publicly trusted (no CA), with a Google access token that IAM checks; the endpoint attribute is
    # control_plane_endpoints_config.0.dns_endpoint_config.0.endpoint (provider resource_container_cluster.go;
    # GKE: https://cloud.google.com/kubernetes-engine/docs/concepts/network-isolation)
    assert "cluster_ca_certificate" not in provider
    (host_ref,) = [r for r in refs if r in provider["host"]]
    assert cluster["output"][host_ref.rsplit(".", 1)[1]]["value"].endswith(
        ".control_plane_endpoints_config[0].dns_endpoint_config[0].endpoint}")
    (gke,) = cluster["resource"]["google_container_cluster"].values()
    assert gke["control_plane_endpoints_config"] == {"dns_endpoint_config": {"allow_external_traffic": True}}
    # an ephemeral resource's token, never in state (issue 18 item 14; tests/test_first_apply.py)
    assert provider["token"] == "${ephemeral.google_client_config.client.access_token}"
    assert "TfToken" not in json.dumps(workloads) and "TfToken" not in json.dumps(cluster)


def test_workloads_stack_applies_long_lived_objects_only(standard: dict) -> None:
    """Terraform applies the RayService; the config's RayJobs (smoke, train) are `raytpu submit`'s: KubeRay deletes
    a finished job's cluster but not the RayJob (docs/FACTS.md#kuberay-finished-rayjob), so a Terraform-owned job would
    never re-run on a deploy and would re-run when deleted."""
    stack = standard["ray-tpu-workloads"]
    manifests = resources(stack, "kubernetes_manifest")
    objects = {m["manifest"]["metadata"]["name"]: m["manifest"] for m in manifests.values()}
    assert {n: o["kind"] for n, o in objects.items()} == {"serve": "RayService", "service-serve": "NetworkPolicy"}
    # the RayService waits for its NetworkPolicy: none of its pods ever runs unguarded
    (service,) = [m for m in manifests.values() if m["manifest"]["kind"] == "RayService"]
    (policy_id,) = [k for k, m in manifests.items() if m["manifest"]["kind"] == "NetworkPolicy"]
    assert service["depends_on"] == [f"kubernetes_manifest.{policy_id}"]
    ksa = only(stack, "kubernetes_service_account_v1")
    assert ksa["metadata"]["annotations"]["iam.gke.io/gcp-service-account"].startswith(
        "${data.terraform_remote_state.")
    text = json.dumps(objects["serve"])
    assert "${kubernetes_service_account_v1." in text  # the KSA, by reference
    assert "${data.terraform_remote_state." in text  # the bucket, from the cluster stack
    assert all(o["metadata"]["namespace"].startswith("${kubernetes_namespace_v1.") for o in objects.values())


def test_local_backend_without_state_bucket(standard: dict) -> None:
    for stack in standard.values():
        assert "local" in stack["terraform"]["backend"]


def test_autopilot_cluster_has_no_node_pools_and_gets_compute_classes(autopilot: dict) -> None:
    cluster_stack = autopilot["ray-tpu-auto-cluster"]
    cluster = only(cluster_stack, "google_container_cluster")
    assert cluster["enable_autopilot"] is True
    assert "node_config" not in cluster and "remove_default_node_pool" not in cluster
    assert cluster["addons_config"]["ray_operator_config"][0]["enabled"] is True
    assert cluster["cluster_autoscaling"]["auto_provisioning_defaults"]["service_account"].startswith(
        "${google_service_account.node-identity")
    assert "min_master_version" not in cluster
    assert _floor(cluster) == ("1.34.1-gke.3084001", "tpu7x on Autopilot")
    assert resources(cluster_stack, "google_container_node_pool") == {}
    # Autopilot places the multi-host tpu7x slice ("big", 2x2x2) by a HIGH_THROUGHPUT workload policy its pods
    # select with cloud.google.com/placement-policy-name (docs/FACTS.md#gke-node-pools-placement; Ironwood rejects
    # COMPACT:
    # https://cloud.google.com/kubernetes-engine/docs/how-to/tpu-ironwood)
    (policy,) = resources(cluster_stack, "google_compute_resource_policy").values()
    assert policy["workload_policy"] == {"type": "HIGH_THROUGHPUT", "accelerator_topology": "2x2x2"}
    assert policy["name"] == names.workload_policy_name("ray-tpu-auto", "big") and policy["region"] == "us-central1"
    classes = {m["manifest"]["metadata"]["name"]: m["manifest"]
               for m in resources(autopilot["ray-tpu-auto-workloads"], "kubernetes_manifest").values()
               if m["manifest"]["kind"] == "ComputeClass"}
    assert sorted(classes) == ["raytpu-batch", "raytpu-big", "raytpu-train"]
    # every priority holds the slice's one zone (issue 27 item 6: compute-class-api Priority.Location.Zones)
    assert classes["raytpu-train"]["spec"]["priorities"] == [
        {"tpu": {"type": "tpu-v6e-slice", "count": 4, "topology": "4x4"},
         "reservations": {"affinity": "Specific", "specific": [{"name": "v6e-training", "project": "my-ml-project"}]},
         "location": {"zones": ["us-central1-b"]}},
        {"tpu": {"type": "tpu-v6e-slice", "count": 4, "topology": "4x4"}, "spot": True,  # fallback: [spot]
         "location": {"zones": ["us-central1-b"]}},
    ]
    assert classes["raytpu-batch"]["spec"]["priorities"] == [{
        "tpu": {"type": "tpu-v5-lite-podslice", "count": 8, "topology": "2x4"}, "spot": True,
        "location": {"zones": ["us-central1-a"]}}]
    assert classes["raytpu-big"]["spec"]["priorities"][0]["flexStart"] == {"enabled": True}
    assert classes["raytpu-big"]["spec"]["priorities"][0]["location"] == {"zones": ["us-central1-c"]}


def test_autopilot_example_uses_a_gcs_backend(autopilot: dict) -> None:
    for sid, stack in autopilot.items():
        assert stack["terraform"]["backend"] == {"gcs": {"bucket": "my-ml-project-tfstate", "prefix": f"raytpu/{sid}"}}
    remote = autopilot["ray-tpu-auto-workloads"]["data"]["terraform_remote_state"]
    assert next(iter(remote.values()))["backend"] == "gcs"


# ------------------------------------------------------------------------------------ the CLI, the app


def _raytpu(*args: str, cwd: Path = REPO) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "raytpu", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=300)


def _strip(stack: dict[str, Any]) -> dict[str, Any]:
    """A stack without what legitimately differs between two synths of the same config: the local
    backend's state paths, which cdktn makes absolute from the working directory."""
    copy = json.loads(json.dumps(stack))
    backend = copy.get("terraform", {}).get("backend", {})
    if "local" in backend:
        backend["local"].pop("path", None)
    for remote in copy.get("data", {}).get("terraform_remote_state", {}).values():
        if remote.get("backend") == "local":
            remote["config"].pop("path", None)
    return copy


def _with_record(directory: Path, config: Path) -> Path:
    """A copy of ``config`` in ``directory`` with the fixture record of built images beside it (what the CLI and
    cdktf.json's app read; the in-process synth of ``_synth`` is given the same refs)."""
    directory.mkdir(exist_ok=True)
    copy = directory / config.name
    copy.write_text(config.read_text())
    write_record(directory)
    return copy


def test_raytpu_synth_writes_the_stacks_and_matches_the_app(tmp_path: Path, standard: dict) -> None:
    result = _raytpu("synth", str(_with_record(tmp_path / "cfg", STANDARD_EXAMPLE)), "--out", str(tmp_path / "out"))
    assert result.returncode == 0, result.stderr
    assert "raytpu synth: done" in result.stderr
    written = read_stacks(tmp_path / "out")
    assert sorted(written) == sorted(standard)
    assert [line for line in result.stdout.splitlines()] == [
        str(tmp_path / "out" / "stacks" / sid / "cdk.tf.json") for sid in sorted(standard)]
    for sid in standard:
        assert _strip(written[sid]) == _strip(standard[sid])
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".out.")], "no temporary dir left behind"


def test_raytpu_synth_bad_config_exits_2_and_writes_nothing(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text(STANDARD_EXAMPLE.read_text().replace("topology: 4x4", "topology: 4x5"))
    out = tmp_path / "out"
    result = _raytpu("synth", str(bad), "--out", str(out))
    assert result.returncode == 2
    assert result.stderr.startswith("error: slices[0].topology:")
    assert "Traceback" not in result.stderr
    assert not out.exists() and list(tmp_path.iterdir()) == [bad]


def test_raytpu_synth_replaces_an_old_outdir_atomically(tmp_path: Path) -> None:
    """An old output (marked ``.raytpu-synth``: stacks/synth_out.py; a folder of the user's files is refused, see
    tests/test_synth_out.py) is replaced as a whole; the new one has a mkdir's mode, not the old one's 0700."""
    from raytpu.stacks.synth_out import write_marker

    out = tmp_path / "out"
    (out / "stacks" / "stale").mkdir(parents=True)
    write_marker(out)
    out.chmod(0o700)
    result = _raytpu("synth", str(STANDARD_EXAMPLE), "--out", str(out))
    assert result.returncode == 0, result.stderr
    assert sorted(p.name for p in (out / "stacks").iterdir()) == ["ray-tpu-cluster", "ray-tpu-workloads"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]
    assert out.stat().st_mode & 0o077, "the umask's mode, as mkdir gives"


def test_app_reads_raytpu_config_else_raytpu_yaml() -> None:
    from raytpu.config import default_path

    assert default_path({"RAYTPU_CONFIG": "x.yaml"}) == "x.yaml"
    assert default_path({}) == "raytpu.yaml"


def test_npx_cdktf_synth_matches_raytpu_synth(tmp_path: Path, autopilot: dict) -> None:
    """CI exercises the node CLI once: `npx cdktf synth` (cdktf.json's app) == `raytpu synth`."""
    cdktf = cdktf_cli()
    out = tmp_path / "cdktf.out"
    env = {**os.environ, "RAYTPU_CONFIG": str(_with_record(tmp_path / "cfg", AUTOPILOT_EXAMPLE)),
           "CHECKPOINT_DISABLE": "1", "CI": "1",
           "CDKTF_DISABLE_PLUGIN_CACHE_ENV": "1"}
    result = subprocess.run([str(cdktf), "synth", "--output", str(out)], cwd=REPO, env=env,
                            capture_output=True, text=True, timeout=400)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    written = read_stacks(out)
    assert sorted(written) == sorted(autopilot)
    for sid in autopilot:
        assert _strip(written[sid]) == _strip(autopilot[sid]), sid
    # The core zip asset: same relative path (its hash) and the same bytes as the in-process synth.
    ours = synth_config(str(AUTOPILOT_EXAMPLE))[0]
    source = only(written["ray-tpu-auto-cluster"], "google_storage_bucket_object")["source"]
    asset = out / "stacks" / "ray-tpu-auto-cluster" / source
    assert asset.is_file(), source
    assert asset.read_bytes() == (ours / "stacks" / "ray-tpu-auto-cluster" / source).read_bytes()
    assert shutil.which("node") is not None
    # cdktf.json's app marks the output, so `raytpu synth --out cdktf.out` may replace it (stacks/synth_out.py)
    assert (out / ".raytpu-synth").is_file()
    check_out(str(out))


def test_data_buckets_are_granted_to_the_ray_pods_account_on_each_bucket_only() -> None:
    """storage.data_buckets (issue 40 item 2): read is roles/storage.objectViewer on that bucket, read-write
    roles/storage.objectUser plus roles/storage.legacyBucketReader (storage.buckets.get, which pyarrow's GcsFileSystem
    calls to create an output's folders: apache/arrow gcsfs.cc CreateDirMarkerRecursive); bucket-level members, no
    project-wide storage role, and no other account gains anything there."""
    stack = synth_text(EVERY_MODE)["modes-cluster"]
    ray = next(k for k, r in resources(stack, "google_service_account").items()
               if r["account_id"] == "raytpu-modes-ray")
    member = f"serviceAccount:${{google_service_account.{ray}.email}}"
    grants = {(g["bucket"], g["role"]): g["member"]
              for g in resources(stack, "google_storage_bucket_iam_member").values()
              if not g["bucket"].startswith("${")}
    assert grants == {("team-data", "roles/storage.objectViewer"): member,
                      ("team-results", "roles/storage.objectUser"): member,
                      ("team-results", "roles/storage.legacyBucketReader"): member}
    assert not [r for r in resources(stack, "google_project_iam_member").values() if "storage" in r["role"]]


def test_every_provisioning_mode_through_the_config() -> None:
    stacks = synth_text(EVERY_MODE)
    cluster = stacks["modes-cluster"]
    pools = by_name(cluster, "google_container_node_pool")
    assert sorted(pools) == ["fs-0", "od-0", "od-1", "qd-0", "ray-head", "rs-0", "sp-0"]
    assert pools["od-1"]["node_count"] == 4 and pools["od-1"]["placement_policy"]["tpu_topology"] == "2x2x4"
    assert pools["sp-0"]["node_count"] == 2 and pools["sp-0"]["node_config"]["spot"] is True
    assert pools["rs-0"]["node_config"]["reservation_affinity"]["values"] == ["r1"]
    assert "placement_policy" not in pools["rs-0"]  # one ct6e-standard-8t host
    # a run duration on a reserved pool too (provider 8.7.0 node_config.max_run_duration: no tie to flex_start)
    assert pools["rs-0"]["node_config"]["max_run_duration"] == "86400s"
    assert "flex_start" not in pools["rs-0"]["node_config"]
    assert all("max_run_duration" not in pools[p]["node_config"] for p in ("od-0", "od-1", "sp-0", "qd-0"))
    flex = pools["fs-0"]
    assert flex["node_config"]["flex_start"] is True and flex["node_config"]["max_run_duration"] == "7200s"
    assert flex["node_config"]["disk_size_gb"] == 200
    assert flex["autoscaling"] == {"min_node_count": 0, "max_node_count": 16, "location_policy": "ANY"}
    # a workload policy: type Required but empty, tpu_topology stated as GKE stores it (see test_modules)
    assert sorted(flex["placement_policy"]) == ["policy_name", "tpu_topology", "type"]
    assert flex["placement_policy"]["type"] == "" and flex["placement_policy"]["tpu_topology"] == "4x4x4"
    assert flex["placement_policy"]["policy_name"].startswith("${google_compute_resource_policy.gke_slice-fs-0_")
    wp_name = names.workload_policy_name("modes", "fs-0")  # per cluster: unique in the project and region
    assert by_name(cluster, "google_compute_resource_policy")[wp_name]["workload_policy"] == {
        "type": "HIGH_THROUGHPUT", "accelerator_topology": "4x4x4"}
    assert pools["qd-0"]["queued_provisioning"] == {"enabled": True}
    assert pools["qd-0"]["autoscaling"]["min_node_count"] == 0
    assert _floor(only(cluster, "google_container_cluster")) == ("1.34.0-gke.2201000", "tpu7x on Standard")
    assert sorted(pools["ray-head"]["node_locations"]) == ["us-central1-a", "us-central1-b", "us-central1-c"]
    assert only(cluster, "google_storage_bucket")["name"] == "modes-ckpt"


def _stack(path: Path) -> Any:
    from raytpu.config import load
    from raytpu.modules.parts.cdk import App
    from raytpu.stacks.cluster import ClusterStack, ClusterStackProps

    return ClusterStack(App(outdir=tempfile.mkdtemp()), "c", ClusterStackProps(spec=load(path)))


# A slice that does not fit the cluster it is added to: (example, slice fields, reported path). Paths index the
# slice as the next entry of `slices` (both examples list their slices first, so the new one is the last).
ADD_SLICE_REJECTS = [
    ("standard", dict(name="train", generation="v6e", topology="2x4", zone="us-east5-b"), "slices[2].name"),
    ("standard", dict(name="east", generation="v6e", topology="2x4", zone="us-east1-d"), "slices[2].zone"),
    ("standard", dict(name="fb", generation="v6e", topology="2x4", zone="us-east5-b", provisioning="spot",
                      fallback=("flex-start",)), "slices[2].fallback"),
    ("autopilot", dict(name="big", generation="v6e", topology="2x4", zone="us-central1-b"), "slices[3].name"),
    ("autopilot", dict(name="west", generation="v6e", topology="2x4", zone="us-west4-a"), "slices[3].zone"),
    ("autopilot", dict(name="disk", generation="v6e", topology="2x4", zone="us-central1-b", disk_size_gib=200),
     "slices[3].disk_size_gib"),
]


@pytest.mark.parametrize(("example", "fields", "path"), ADD_SLICE_REJECTS,
                         ids=[f"{e}-{p}" for e, _, p in ADD_SLICE_REJECTS])
def test_add_slice_that_does_not_fit_raises_with_its_config_path(example: str, fields: dict[str, Any],
                                                                 path: str) -> None:
    from raytpu.core.common.errors import InvalidInputs
    from raytpu.core.specs.spec import SliceSpec

    stack = _stack(EXAMPLES[example])
    before = stack.spec
    with pytest.raises(InvalidInputs) as info:
        stack.add_slice(SliceSpec.create(**fields))
    assert [p.field for p in info.value.problems] == [path]
    assert stack.spec == before, "a rejected slice leaves the stack's spec as it was"
    assert sorted(stack.pools) == sorted(s.name for s in before.slices)


def test_add_workload_on_a_foreign_slice_or_a_taken_name_raises_with_its_config_path() -> None:
    from raytpu.config import load
    from raytpu.core.common.errors import InvalidInputs
    from raytpu.core.specs.kinds import kind
    from raytpu.core.specs.spec import SliceSpec, WorkloadSpec
    from raytpu.modules.parts.cdk import App
    from raytpu.stacks.cluster import ClusterStack, ClusterStackProps
    from raytpu.stacks.workloads import WorkloadsStack, WorkloadsStackProps

    app = App(outdir=tempfile.mkdtemp())
    stack = ClusterStack(app, "c", ClusterStackProps(spec=load(STANDARD_EXAMPLE)))
    workloads = WorkloadsStack(app, "w", WorkloadsStackProps(cluster=stack, images=FIXTURE_REFS))
    foreign = SliceSpec.create(name="foreign", generation="v6e", topology="2x4", zone="us-east5-b")
    cases = [(WorkloadSpec(name="elsewhere", kind=kind("serve"), slice=foreign), "workloads[3].slice"),
             (WorkloadSpec(name="train", kind=kind("serve"), slice=stack.spec.slices[1]), "workloads[3].name")]
    for work, path in cases:
        with pytest.raises(InvalidInputs) as info:
            workloads.add_workload(work)
        assert [p.field for p in info.value.problems] == [path]
    # the stack applies the config's one RayService; its two RayJobs are `raytpu submit`'s
    assert len(workloads.workloads) == 1 and len(stack.spec.workloads) == 3


@pytest.fixture(scope="module")
def extended() -> dict[str, dict[str, Any]]:
    return synth_added_slices()[1]


def _objects(stack: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {m["manifest"]["metadata"]["name"]: m["manifest"] for m in resources(stack, "kubernetes_manifest").values()}


def test_added_slices_get_their_pools_and_raise_the_cluster_version(extended: dict) -> None:
    cluster = extended["std-cluster"]
    pools = by_name(cluster, "google_container_node_pool")
    assert sorted(pools) == ["iron-0", "ray-head", "research-0", "serve-0", "train-0"]
    research = pools["research-0"]
    assert (research["node_config"]["machine_type"], research["node_count"]) == ("ct5p-hightpu-4t", 4)
    assert research["placement_policy"] == {"type": "COMPACT", "tpu_topology": "2x2x4"}
    assert research["node_config"]["spot"] is True and research["node_locations"] == ["us-east5-a"]
    assert sorted(pools["iron-0"]["placement_policy"]) == ["policy_name", "tpu_topology", "type"]  # workload policy
    # docs/FACTS.md#tpu-catalog-gke: tpu7x on Standard needs 1.34.0-gke.2201000 (the example's v6e alone: 1.31.2).
    assert _floor(only(cluster, "google_container_cluster")) == ("1.34.0-gke.2201000", "tpu7x on Standard")
    from raytpu.cluster.outputs import StackOutputs

    for sid in ("std-cluster", "auto-cluster"):  # added slices add no outputs
        declared = [n for n in extended[sid]["output"] if not n.startswith("cross-stack-output-")]
        assert sorted(declared) == sorted(StackOutputs.names()), sid


@pytest.mark.parametrize(("name", "kind"), [("research-serve", "RayService"), ("iron-serve", "RayService")])
def test_workload_on_an_added_slice_selects_that_slice(extended: dict, name: str, kind: str) -> None:
    from crd import cluster_spec, operator_errors, schema_errors, webhook_errors

    from raytpu.core.specs.spec import SliceSpec

    objects = _objects(extended["std-workloads"])
    assert {"serve"} <= set(objects) and not {"smoke", "train"} & set(objects)  # the config's RayService only
    manifest = objects[name]
    assert manifest["kind"] == kind
    item = SliceSpec.create(**(RESEARCH if name.startswith("research") else IRON))
    plan = item.plan
    assert manifest["metadata"]["labels"]["raytpu.dev/slice"] == item.name
    [group] = cluster_spec(manifest)["workerGroupSpecs"]
    template = group["template"]["spec"]
    # docs/FACTS.md#kuberay-crds: numOfHosts = hosts per slice; google.com/tpu requests == limits == chips per host;
    # nodeSelector gke-tpu-accelerator + gke-tpu-topology (+ the mode's node label: Spot's
    # cloud.google.com/gke-spot, https://cloud.google.com/kubernetes-engine/docs/concepts/spot-vms).
    assert group["numOfHosts"] == plan.hosts and group["replicas"] == item.count
    selector = dict(plan.node_selector)
    if item.provisioning.name == "spot":
        selector["cloud.google.com/gke-spot"] = "true"
    selector["raytpu.dev/slice"] = item.name  # the label its pools give their nodes (a Standard cluster)
    assert template["nodeSelector"] == selector
    [container] = template["containers"]
    tpus = str(plan.chips_per_host)
    assert container["resources"]["requests"]["google.com/tpu"] == container["resources"]["limits"]["google.com/tpu"]
    assert container["resources"]["limits"]["google.com/tpu"] == tpus
    if kind == "RayJob":
        env = json.loads(manifest["spec"]["runtimeEnvYAML"])["env_vars"]
        assert json.loads(env["RAYTPU_WORKLOAD"])["slice"] == item.to_json()  # the pod never re-plans
    assert schema_errors(manifest) == [] and webhook_errors(manifest) == [] and operator_errors(manifest) == []


@pytest.mark.parametrize(("work", "slice_name", "priority"), [
    ("burst-serve", "burst", {"tpu": {"type": "tpu-v6e-slice", "count": 8, "topology": "2x4"},
                              "flexStart": {"enabled": True}, "location": {"zones": ["us-central1-b"]}}),
    ("late-serve", "late", {"tpu": {"type": "tpu-v5-lite-podslice", "count": 4, "topology": "2x2"}, "spot": True,
                            "location": {"zones": ["us-central1-a"]}}),
])
def test_autopilot_added_slice_gets_a_compute_class_its_workload_selects(extended: dict, work: str,
                                                                         slice_name: str,
                                                                         priority: dict[str, Any]) -> None:
    objects = _objects(extended["auto-workloads"])
    compute_class = objects[f"raytpu-{slice_name}"]
    assert compute_class["kind"] == "ComputeClass"
    assert compute_class["spec"]["priorities"] == [priority]
    [group] = objects[work]["spec"]["rayClusterConfig"]["workerGroupSpecs"]
    # docs/FACTS.md#gke-cluster-terraform: pods select their ComputeClass with cloud.google.com/compute-class.
    assert group["template"]["spec"]["nodeSelector"]["cloud.google.com/compute-class"] == f"raytpu-{slice_name}"
    assert resources(extended["auto-cluster"], "google_container_node_pool") == {}


@pytest.mark.parametrize("example", ["standard", "autopilot"])
def test_synthesized_kuberay_objects_pass_the_crd_schemas_and_webhook_rules(
        example: str, standard: dict, autopilot: dict) -> None:
    """What the workloads stack applies (tokens and all) is what the KubeRay v1.7.0 CRDs accept."""
    from crd import operator_errors, schema_errors, webhook_errors

    stacks = standard if example == "standard" else autopilot
    workloads = stacks[sorted(stacks)[1]]
    objects = [m["manifest"] for m in resources(workloads, "kubernetes_manifest").values()
               if m["manifest"]["apiVersion"] == "ray.io/v1"]
    assert len(objects) == 1  # the RayService (RayJobs are `raytpu submit`'s)
    for manifest in objects:
        name = manifest["metadata"]["name"]
        assert schema_errors(manifest) == [], name
        assert webhook_errors(manifest) == [], name
        assert operator_errors(manifest) == [], name


def test_synth_is_byte_identical_wherever_it_runs(tmp_path: Path) -> None:
    """Without ``storage.state_bucket`` the local backend and the workloads stack's remote-state lookup name the
    state file by a path relative to the stack's directory, so two checkouts (here: two working directories)
    synthesize the same bytes; cdktf's default names an absolute path of the project root."""
    example = Path(__file__).resolve().parents[1] / "raytpu.example.yaml"
    outs = []
    for where in ("a/deep/checkout", "b"):
        cwd = tmp_path / where
        cwd.mkdir(parents=True)
        done = subprocess.run([sys.executable, "-m", "raytpu", "synth", str(example), "--out", "out"], cwd=cwd,
                              capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stderr[-2000:]
        outs.append(cwd / "out" / "stacks")
    files = sorted(p.relative_to(outs[0]) for p in outs[0].rglob("*") if p.is_file())
    assert files and files == sorted(p.relative_to(outs[1]) for p in outs[1].rglob("*") if p.is_file())
    for rel in files:
        assert (outs[0] / rel).read_bytes() == (outs[1] / rel).read_bytes(), rel
    text = (outs[0] / "ray-tpu-workloads" / "cdk.tf.json").read_text()
    assert str(tmp_path) not in text and '"path": "../../../terraform.ray-tpu-cluster.tfstate"' in text


BIG_MODELS = """
project: my-ml-project
region: us-east5
cluster: {name: big, mode: MODE}
storage: {bucket: big-ckpt}
slices:
  - {name: hf, generation: v6e, topology: 2x4, zone: us-east5-b}
  - {name: gcs, generation: v6e, topology: 2x4, zone: us-east5-b}
  - {name: batch, generation: v6e, topology: 2x4, zone: us-east5-b}
workloads:
  - {name: hf, kind: serve, slice: hf, model: meta-llama/Llama-3.3-70B-Instruct,
     hf_token_secret: {name: hf-secret, key: token}}
  - {name: gcs, kind: serve, slice: gcs, model: meta-llama/Llama-3.3-70B-Instruct,
     model_source: gs://big-ckpt/models/llama-3.3-70b}
  - {name: batch, kind: batch, slice: batch, model: meta-llama/Llama-3.3-70B-Instruct,
     model_source: gs://big-ckpt/models/llama-3.3-70b, input: gs://big-ckpt/in.jsonl, output: gs://big-ckpt/out}
"""
"""Llama 3.3 70B (131.4 GiB of bf16 weights) from Hugging Face, read in place from the kit's bucket, and in a batch
job (Ray Data LLM downloads even the kit's bucket)."""


def test_a_70b_model_gets_a_boot_disk_that_holds_its_weights_unless_read_in_place() -> None:
    """Issue 40 item 1: GKE leaves 43.8 GiB of a 100 GiB boot disk allocatable (docs/FACTS.md#disk-vllm-xla-cache); the
    kit sizes a Standard pool's disk from what its engine writes per host, and its pods request that ephemeral
    storage."""
    from raytpu.core.specs.serving import node_disk

    stacks = synth_text(BIG_MODELS.replace("MODE", "standard"))
    pools = by_name(stacks["big-cluster"], "google_container_node_pool")
    disks = {name: pools[name]["node_config"]["disk_size_gb"] for name in ("hf-0", "gcs-0", "batch-0")}
    assert disks == {"hf-0": 290, "gcs-0": 100, "batch-0": 290}  # 280 holds 144.3 GiB < 142Gi + the sidecar's 5Gi
    assert node_disk.allocatable_gib(290) >= 131.4 + node_disk.SCRATCH_GIB > node_disk.allocatable_gib(270)
    services = _objects(stacks["big-workloads"])
    requests = {name: cluster_resources(services[name]) for name in ("hf", "gcs")}
    assert requests == {"hf": "142Gi", "gcs": "10Gi"}
    for name in ("hf", "gcs"):  # every engine pod's requests, the GCS FUSE sidecar's 5Gi default included, fit
        pod_gib = int(requests[name].removesuffix("Gi")) + node_disk.GCSFUSE_SIDECAR_GIB
        assert mounts_gcsfuse(services[name]) and pod_gib + node_disk.MARGIN_GIB <= \
            node_disk.allocatable_gib(disks[f"{name}-0"])
    from crd import operator_errors, schema_errors, webhook_errors
    for manifest in (m for m in services.values() if m["kind"] == "RayService"):  # KubeRay v1.7.0's CRDs, webhook
        assert schema_errors(manifest) == [] and webhook_errors(manifest) == [] and operator_errors(manifest) == []
    config = json.loads(services["gcs"]["spec"]["serveConfigV2"])  # the bucket's literal name matched: in place
    assert config["applications"][0]["args"]["llm_configs"][0]["model_loading_config"]["model_source"] == \
        "/mnt/gcs/models/llama-3.3-70b"


def test_on_autopilot_the_engines_request_the_storage_their_weights_need() -> None:
    stacks = synth_text(BIG_MODELS.replace("MODE", "autopilot"))
    assert not resources(stacks["big-cluster"], "google_container_node_pool")
    services = _objects(stacks["big-workloads"])
    assert {name: cluster_resources(services[name]) for name in ("hf", "gcs")} == {"hf": "142Gi", "gcs": "10Gi"}


def mounts_gcsfuse(manifest: dict[str, Any]) -> bool:
    """The TPU worker pods mount the bucket through GCS FUSE: the CSI webhook injects its sidecar."""
    [group] = manifest["spec"]["rayClusterConfig"]["workerGroupSpecs"]
    return bool(group["template"]["metadata"]["annotations"].get("gke-gcsfuse/volumes") == "true")


def cluster_resources(manifest: dict[str, Any]) -> str:
    """The TPU worker container's ``ephemeral-storage`` request."""
    [group] = manifest["spec"]["rayClusterConfig"]["workerGroupSpecs"]
    return str(group["template"]["spec"]["containers"][0]["resources"]["requests"]["ephemeral-storage"])


def test_an_engine_added_after_its_slices_pools_grows_their_boot_disk(tmp_path: Path) -> None:
    """An outside app adds a RayService (WorkloadsStack.add_workload) after the cluster stack made the slice's pools:
    the pools grow to hold its weights, as if the workload had been in the config."""
    from raytpu.config import parse
    from raytpu.core.specs.kinds import kind
    from raytpu.core.specs.spec import SecretKeyRef, WorkloadSpec
    from raytpu.modules.parts.cdk import App
    from raytpu.stacks.cluster import ClusterStack, ClusterStackProps
    from raytpu.stacks.workloads import WorkloadsStack, WorkloadsStackProps

    text = BIG_MODELS.replace("MODE", "standard").split("workloads:")[0]
    app = App(outdir=str(tmp_path))
    cluster = ClusterStack(app, "late-cluster", ClusterStackProps(spec=parse(text)))
    work = WorkloadsStack(app, "late-workloads", WorkloadsStackProps(cluster=cluster, images=FIXTURE_REFS))
    work.add_workload(WorkloadSpec(name="hf", kind=kind("serve"), slice=cluster.spec.slice_named("hf"),
                                   model="meta-llama/Llama-3.3-70B-Instruct",
                                   hf_token_secret=SecretKeyRef(name="hf-secret", key="token")))
    app.synth()
    pools = by_name(read_stacks(tmp_path)["late-cluster"], "google_container_node_pool")
    assert {n: pools[n]["node_config"]["disk_size_gb"] for n in ("hf-0", "gcs-0")} == {"hf-0": 290, "gcs-0": 100}
