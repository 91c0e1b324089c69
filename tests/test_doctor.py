"""``raytpu doctor``: the cluster read through the loopback Kubernetes API (tests/kube_server.py) with recorded objects
of a healthy cluster and of each broken case, google-auth for real (ADC: a service-account key whose token endpoint is
the server), and nothing written back (the server sees only GETs); ``--local`` on the emulated slice (slice tier)."""

from __future__ import annotations

import copy
import json
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from image_refs import FIXTURE_REFS
from kube_server import KubeApiServer, ServiceAccountKey, TlsFiles, forbidden, serving, stack_folder

from raytpu import cli
from raytpu.cluster.doctor import GCSFUSE_DRIVER, GSA_ANNOTATION, WEBHOOK_SERVICE
from raytpu.config import parse
from raytpu.core.common import checkup, names
from raytpu.core.common.names import NODE_POOL_LABEL
from raytpu.core.tpu.plan import ACCELERATOR_LABEL, TOPOLOGY_LABEL, TPU_RESOURCE

CONFIG = """\
project: my-ml-project
region: us-east5
cluster: {name: ray-tpu}
slices:
  - {name: train, generation: v6e, topology: 4x4, zone: us-east5-b, count: 2}
workloads:
  - {name: train, kind: train, slice: train}
"""
STACK = "ray-tpu-cluster"
SPEC = parse(CONFIG)
PLAN = SPEC.slices[0].plan
KSA = "ray-tpu-ray"
OUTPUTS = {"cluster_name": "ray-tpu", "location": "us-east5", "project": "my-ml-project", "namespace": "ray",
           "service_account": KSA, "bucket": SPEC.bucket}
JOB = "train-abc123"
DIGEST = next(iter(FIXTURE_REFS.values()))


def node(pool: str, index: int, **labels: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": f"gke-{pool}-{index}", "labels": {
                NODE_POOL_LABEL: pool, ACCELERATOR_LABEL: PLAN.gke_accelerator, TOPOLOGY_LABEL: PLAN.topology,
                **labels}},
            "spec": {"taints": [{"key": "google.com/tpu", "value": "present", "effect": "NoSchedule"}]},
            "status": {"allocatable": {TPU_RESOURCE: str(PLAN.chips_per_host), "cpu": "180"},
                       "conditions": [{"type": "Ready", "status": "True"}]}}


def healthy(server: KubeApiServer) -> None:
    """What a healthy deployed stack serves: every pool's nodes, the webhook, the CSI driver, the KSA, a running job."""
    for pool in SPEC.slices[0].pool_names:
        for i in range(PLAN.hosts):
            server.put(node(pool, i), namespace=None)
    server.put({"apiVersion": "admissionregistration.k8s.io/v1", "kind": "MutatingWebhookConfiguration",
                "metadata": {"name": "ray-tpu-webhook"},
                "webhooks": [{"name": "tpu.ray.io", "clientConfig": {"service": {
                    "name": WEBHOOK_SERVICE, "namespace": "gke-managed-ray", "path": "/mutate"}}}]}, namespace=None)
    server.put({"apiVersion": "storage.k8s.io/v1", "kind": "CSIDriver", "metadata": {"name": GCSFUSE_DRIVER}},
               namespace=None)
    server.put({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {
        "name": KSA, "annotations": {GSA_ANNOTATION: "ray-tpu-ray@my-ml-project.iam.gserviceaccount.com"}}})
    server.put({"apiVersion": "ray.io/v1", "kind": "RayJob", "metadata": {"name": JOB, "labels": names.MANAGED_BY},
                "status": {"jobDeploymentStatus": "Running", "jobStatus": "RUNNING"}})
    running_pod(server, f"{JOB}-head", DIGEST)


def running_pod(server: KubeApiServer, name: str, image: str) -> None:
    server.put({"apiVersion": "v1", "kind": "Pod",
                # a Ray pod as KubeRay v1.7.0 labels it (labelPod) plus the kit's template label
                "metadata": {"name": name, "labels": {"ray.io/cluster": f"{JOB}-raycluster-x",
                                                      "raytpu.dev/ray-cluster": f"job-{JOB}"}},
                "spec": {"nodeName": "gke-train-0-0", "containers": [{"name": "ray-head", "image": image, "resources": {
                    "requests": {TPU_RESOURCE: "4"}, "limits": {TPU_RESOURCE: "4"}}}]},
                "status": {"phase": "Running", "containerStatuses": [
                    {"name": "ray-head", "image": image, "imageID": image},
                    {"name": "gke-gcsfuse-sidecar", "image": "gke.gcr.io/gcs-fuse-csi-driver-sidecar-mounter:v1",
                     "imageID": "gke.gcr.io/gcs-fuse@sha256:" + "0" * 64}]}})


@pytest.fixture
def cluster(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, tls: TlsFiles,
            sa_key: ServiceAccountKey) -> Iterator[KubeApiServer]:
    """A healthy cluster behind outputs.json, the config and the images record in the working folder."""
    with serving(tls, sa_key) as server:
        stack_folder(server, monkeypatch, tmp_path, CONFIG, STACK, OUTPUTS)
        healthy(server)
        yield server


def doctor(capsys: pytest.CaptureFixture[str], *extra: str) -> tuple[int, dict[str, Any]]:
    code = cli.main(["doctor", "--stack", STACK, "--json", *extra])
    return code, json.loads(capsys.readouterr().out)


def rows(document: dict[str, Any], state: str) -> dict[str, dict[str, str]]:
    return {r["check"]: r for r in document["checks"] if r["state"] == state}


def only_reads(server: KubeApiServer) -> None:
    assert {r.method for r in server.api_requests()} == {"GET"}


pytestmark = pytest.mark.unit


def test_a_healthy_cluster_holds_every_check(cluster: KubeApiServer, capsys: pytest.CaptureFixture[str]) -> None:
    code, document = doctor(capsys)
    assert code == 0, rows(document, "fail")
    assert document["ok"] and document["doctor"] == "cluster" and document["stack"] == STACK
    assert document["counts"] == {"ok": len(document["checks"]), "fail": 0, "unknown": 0}
    assert all(set(r) == set(checkup.KEYS) for r in document["checks"])
    checks = {r["check"]: r for r in document["checks"]}
    assert checks["gke version"]["found"] == "1.35.1-gke.1396000"
    assert {"crd rayjobs.ray.io", "tpu webhook", "gcs fuse csi driver", "service account", "bucket", "images",
            "slice train pool train-0", "slice train pool train-1 holders"} <= set(checks)
    assert checks["slice train pool train-0 holders"]["found"].startswith("busy: ray/")
    assert "GKE documents no KubeRay version" in checks["crd rayjobs.ray.io"]["expected"]
    only_reads(cluster)


def test_the_table_has_one_row_per_check(cluster: KubeApiServer, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["doctor", "--stack", STACK]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].split()[:4] == ["check", "found", "expected", "fix"]
    assert any(line.startswith("gke version") and " ✓ " in line for line in out)


def _old_crd(server: KubeApiServer) -> None:
    crd = copy.deepcopy(server.crds["rayjobs.ray.io"])
    spec = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]
    del spec["preRunningDeadlineSeconds"]
    server.crds = {**server.crds, "rayjobs.ray.io": crd}


BROKEN: dict[str, tuple[Callable[[KubeApiServer], object], str, str]] = {
    # case: (break it, the failing check, a word its found names)
    "a node missing": (lambda s: s._objects.pop(("nodes", None, "gke-train-1-3")), "slice train pool train-1",
                       "3 of 4 hosts Ready"),
    "a label wrong": (lambda s: s.put(node("train-0", 2, **{TOPOLOGY_LABEL: "2x4"}), namespace=None),
                      "slice train pool train-0", f"{TOPOLOGY_LABEL}=2x4"),
    "an old CRD": (_old_crd, "crd rayjobs.ray.io", "spec.preRunningDeadlineSeconds (KubeRay 1.6.0)"),
    "no webhook": (lambda s: s._objects.pop(("mutatingwebhookconfigurations", None, "ray-tpu-webhook")),
                   "tpu webhook", "none"),
    "no GCS FUSE driver": (lambda s: s._objects.pop(("csidrivers", None, GCSFUSE_DRIVER)), "gcs fuse csi driver",
                           "absent"),
    "a foreign image": (lambda s: running_pod(s, f"{JOB}-worker", "docker.io/someone/ray@sha256:" + "f" * 64),
                        "images", "docker.io/someone/ray"),
    "an old control plane": (lambda s: setattr(s, "git_version", "v1.30.1-gke.1000000"), "gke version",
                             "1.30.1-gke.1000000"),
    "no Workload Identity annotation": (lambda s: s.put({"apiVersion": "v1", "kind": "ServiceAccount",
                                                         "metadata": {"name": KSA}}), "service account", "(none)"),
    "a job waiting": (lambda s: (s.set_status("rayjobs", JOB, {"jobDeploymentStatus": "Initializing"}), s.put(
        {"apiVersion": "v1", "kind": "Event", "metadata": {"name": "e1"}, "involvedObject": {"name": JOB},
         "reason": "FailedScheduling", "message": "0/9 nodes are available", "lastTimestamp": "2026-01-01T00:01:00Z"})),
                      f"rayjobs {JOB}", "FailedScheduling: 0/9 nodes"),
    "a service not serving": (lambda s: s.put({
        "apiVersion": "ray.io/v1", "kind": "RayService", "metadata": {"name": "serve", "labels": names.MANAGED_BY},
        "status": {"conditions": [{"type": "Ready", "status": "False"}]}}),
                              "rayservices serve", "not ready"),
}


@pytest.mark.parametrize("case", sorted(BROKEN))
def test_each_broken_case_is_one_failing_row(case: str, cluster: KubeApiServer,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    breaks, check, found = BROKEN[case]
    breaks(cluster)
    code, document = doctor(capsys)
    failed = rows(document, "fail")
    assert code == 1 and not document["ok"]
    assert list(failed) == [check], failed
    assert found in failed[check]["found"] and failed[check]["fix"]
    only_reads(cluster)


def test_a_forbidden_list_is_a_question_mark_naming_the_permission(cluster: KubeApiServer,
                                                                    capsys: pytest.CaptureFixture[str]) -> None:
    cluster.fail("GET", "^/api/v1/nodes$", 403, forbidden("list", "nodes", "", "", "container.nodes.list"), times=9)
    cluster.fail("GET", "mutatingwebhookconfigurations", 403,
                 forbidden("list", "mutatingwebhookconfigurations", "admissionregistration.k8s.io", "",
                           "container.mutatingWebhookConfigurations.list"), times=9)
    code, document = doctor(capsys)
    unknown = rows(document, "unknown")
    assert code == 0 and document["counts"]["unknown"] == 5  # 2 pools, their 2 holders (nodes first), the webhook
    assert unknown["tpu webhook"]["found"] == ("forbidden: list mutatingwebhookconfigurations "
                                               "(API group admissionregistration.k8s.io)")
    assert unknown["slice train pool train-0"]["found"] == "forbidden: list nodes (API group core)"
    assert unknown["slice train pool train-0 holders"]["found"] == "forbidden: list nodes (API group core)"
    assert unknown["slice train pool train-0"]["mark"] == "?"
    only_reads(cluster)


def test_report_dir_gets_doctor_json(cluster: KubeApiServer, capsys: pytest.CaptureFixture[str],
                                     tmp_path: Path) -> None:
    code, document = doctor(capsys, "--report", "reports")
    assert code == 0
    assert json.loads((tmp_path / "reports" / "doctor.json").read_text()) == document


def test_the_smoke_report_page_shows_the_doctor_table(cluster: KubeApiServer, capsys: pytest.CaptureFixture[str],
                                                      tmp_path: Path) -> None:
    (tmp_path / "reports").mkdir()
    (tmp_path / "reports" / "smoke.json").write_text(json.dumps({"format": 1, "stack": STACK, "slices": []}))
    _old_crd(cluster)
    code, _ = doctor(capsys, "--report", "reports")
    assert code == 1
    page = (tmp_path / "reports" / "report.html").read_text()  # the smoke page drawn again, the table in it
    assert "raytpu doctor of stack ray-tpu-cluster" in page and "1 of " in page
    assert "✗ crd rayjobs.ray.io" in page and "✓ gke version" in page
    assert cli.main(["report", "reports/smoke.json", "--out", "again.html"]) == 0
    assert "✗ crd rayjobs.ray.io" in (tmp_path / "again.html").read_text()


def _service_on(server: KubeApiServer, ksa: str) -> None:
    """A kit RayService whose pods run as ``ksa`` (one applied before the per-cluster KSA runs as ``ray``)."""
    head = {"template": {"spec": {"serviceAccountName": ksa}}}
    server.put({"apiVersion": "ray.io/v1", "kind": "RayService",
                "metadata": {"name": "serve", "labels": names.MANAGED_BY},
                "spec": {"rayClusterConfig": {"headGroupSpec": head}},
                "status": {"conditions": [{"type": "Ready", "status": "True"}]}})


@pytest.mark.parametrize("legacy", [None, "drop", "keep"])
def test_a_rayservice_still_on_the_old_ksa_is_named_and_fails_unless_legacy_ksa_keeps_it_bound(
        legacy: str | None, cluster: KubeApiServer, capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """Review finding b (docs/FACTS.md#networking-legacy-ksa-services): KubeRay v1.7.0 applies no pod template change to
    a running RayService with upgradeStrategy None (rayservice_controller.go shouldPrepareNewCluster), so one started
    before the upgrade runs as ``ray`` until re-created, and ``legacy_ksa: drop`` removes that KSA's binding."""
    if legacy is not None:
        (tmp_path / "raytpu.yaml").write_text(CONFIG.replace("cluster: {name: ray-tpu}",
                                                             f"cluster: {{name: ray-tpu, legacy_ksa: {legacy}}}"))
    _service_on(cluster, KSA)
    code, document = doctor(capsys)
    assert code == 0 and {r["check"]: r for r in document["checks"]}["pods' service account"]["state"] == "ok"
    _service_on(cluster, "ray")
    code, document = doctor(capsys)
    row = {r["check"]: r for r in document["checks"]}["pods' service account"]
    assert row["found"].startswith("RayService serve on ray")
    assert f"raytpu submit serve --stack {STACK} --replace" in (row["fix"] if row["state"] == "fail" else row["found"])
    assert (code, row["state"]) == ((0, "ok") if legacy == "keep" else (1, "fail"))
    only_reads(cluster)


def _job(server: KubeApiServer, state: str, started_ago_s: float | None = None, deadline_s: int = 600) -> None:
    from datetime import UTC, datetime

    status: dict[str, Any] = {"jobDeploymentStatus": state}
    if started_ago_s is not None:
        status["startTime"] = datetime.fromtimestamp(time.time() - started_ago_s, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    server.put({"apiVersion": "ray.io/v1", "kind": "RayJob",
                "metadata": {"name": "old-run", "labels": names.MANAGED_BY},
                "spec": {"preRunningDeadlineSeconds": deadline_s}, "status": status})


@pytest.mark.parametrize(("state", "ago", "pods", "failing"), [
    ("Initializing", 60, False, False),  # waiting for capacity inside its deadline: information
    ("Initializing", 900, False, True),  # past its preRunningDeadlineSeconds: stuck
    ("Failed", None, False, False),  # failed, its cluster gone (KubeRay keeps the object): history
    ("Failed", None, True, True),  # failed while its pods still hold the slice
])
def test_a_run_keeps_the_doctor_red_only_while_it_is_stuck_now(
        cluster: KubeApiServer, capsys: pytest.CaptureFixture[str], state: str, ago: float | None, pods: bool,
        failing: bool) -> None:
    """Issue 71 item 9: an old failed or a capacity-queued RayJob kept ``doctor --stack`` red for ever. Source: KubeRay
    v1.7.0 checkPreRunningDeadlineAndUpdateStatusIfNeeded (status.startTime + spec.preRunningDeadlineSeconds)."""
    _job(cluster, state, ago)
    if pods:
        cluster.put({"apiVersion": "v1", "kind": "Pod", "metadata": {
            "name": "old-run-head", "labels": {"ray.io/cluster": "old-run-raycluster-x",
                                               "raytpu.dev/ray-cluster": "job-old-run"}},
            "spec": {"containers": [{"name": "ray-head", "image": "x"}]}, "status": {"phase": "Running"}})
    code, document = doctor(capsys)
    checks = {r["check"]: r for r in document["checks"]}
    row = checks.get("rayjobs old-run")
    assert (code == 1) is failing and (row is not None and row["state"] == "fail") is failing, checks
    if state == "Initializing" and not failing:
        assert row is not None and row["state"] == "ok" and "left of its preRunningDeadlineSeconds" in row["found"]
    only_reads(cluster)


def test_the_service_account_row_reads_the_pods_that_run(cluster: KubeApiServer,
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    """Issue 71 item 9: a RayService updated in place names the stack's KSA in its spec while its pods, started before
    the upgrade, still run as ``ray``: the live pods' ``serviceAccountName`` is what runs."""
    _service_on(cluster, KSA)
    cluster.put({"apiVersion": "v1", "kind": "Pod", "metadata": {
        "name": "serve-head",
        "labels": {"ray.io/cluster": "serve-raycluster-x", "raytpu.dev/ray-cluster": "service-serve"}},
        "spec": {"serviceAccountName": "ray", "containers": [{"name": "ray-head", "image": "x"}]},
        "status": {"phase": "Running"}})
    code, document = doctor(capsys)
    row = {r["check"]: r for r in document["checks"]}["pods' service account"]
    assert code == 1 and row["state"] == "fail" and row["found"].startswith("RayService serve on ray"), row


def test_a_waiting_run_whose_pod_cannot_start_is_red_inside_its_deadline(
        cluster: KubeApiServer, capsys: pytest.CaptureFixture[str]) -> None:
    """The reviewer's finding: a missing Secret or image is no capacity wait (kubelet ContainerStateWaiting.reason)."""
    _job(cluster, "Initializing", 60)
    cluster.put({"apiVersion": "v1", "kind": "Pod", "metadata": {
        "name": "old-run-head", "labels": {"raytpu.dev/ray-cluster": "job-old-run"}},
        "spec": {"containers": [{"name": "ray-head", "image": "x"}]},
        "status": {"phase": "Pending", "containerStatuses": [
            {"name": "ray-head", "state": {"waiting": {"reason": "CreateContainerConfigError"}}}]}})
    code, document = doctor(capsys)
    row = {r["check"]: r for r in document["checks"]}["rayjobs old-run"]
    assert code == 1 and row["state"] == "fail" and "CreateContainerConfigError" in row["found"], row
