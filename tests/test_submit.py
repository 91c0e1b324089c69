"""``raytpu submit`` and ``raytpu smoke`` end to end, at the Kubernetes API boundary.

GKE cannot be reached from the test machine, so the boundary is the Kubernetes API itself: a loopback HTTPS
server (tests/kube_server.py) that speaks the paths the kit uses, validates every applied body against the
vendored KubeRay CRDs and records the requests; credentials are real google-auth Application Default Credentials
(a service-account key file whose token endpoint is that server). Tests script what KubeRay would write into a
RayJob's status and its submitter pod's log, and assert the exact objects applied, the output and exit codes.
"""

from __future__ import annotations

import ast
import copy
import json
import threading
import time
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path
from typing import Any

import pytest
import yaml
from crd import REPO, load_yaml, operator_errors, schema_errors, webhook_errors
from google.oauth2 import service_account
from image_refs import FIXTURE_IMAGES, write_record
from kube_server import KubeApiServer, ServiceAccountKey, TlsFiles, serving, status_body, use_adc

from raytpu import __version__, cli
from raytpu.cluster import gke, google_api, submission
from raytpu.cluster.http_retry import HttpRetry
from raytpu.cluster.kube.kube_client import KubeClient
from raytpu.config import parse
from raytpu.core import core_zip
from raytpu.core.common import names, report
from raytpu.core.manifests import kuberay, preemption
from raytpu.core.specs import kinds
from raytpu.core.specs.cluster.security import SERVE_ENDPOINTS
from raytpu.core.specs.serving.vllm_rules import DEFAULT_MODEL
from raytpu.core.specs.spec import WorkloadSpec
from raytpu.images.record import RECORD_NAME

pytestmark = pytest.mark.unit

CONFIG = """\
project: my-ml-project
region: us-east5
cluster: {name: ray-tpu}
storage: {bucket: my-bucket}
slices:
  - {name: train, generation: v6e, topology: 4x4, zone: us-east5-b, count: 2}
  - {name: serve, generation: v6e, topology: 2x4, zone: us-east5-b, provisioning: spot}
  - {name: dws, generation: v6e, topology: 2x2, zone: us-east5-b, provisioning: queued}
workloads:
  - {name: smoke, kind: smoke, slice: train, image: example.com/ray-tpu:smoke}
  - {name: train, kind: train, slice: train}
  - {name: serve, kind: serve, slice: serve}
"""
STACK = "ray-tpu-cluster"
"""The cluster stack's id: ``<cluster name>-cluster``."""
OUTPUTS = {STACK: {"endpoint": "34.1.2.3", "ca_certificate": "LS0tLS1CRUdJTg==", "cluster_name": "ray-tpu",
                   "location": "us-east5", "project": "my-ml-project", "namespace": "ray",
                   "service_account": "ray-tpu-ray", "bucket": "my-bucket"},
           "ray-tpu-workloads": {}}
"""What ``cdktf deploy --outputs-file`` writes for the two stacks (the workloads stack exports nothing)."""



class Cluster:
    """The deployed stack as ``raytpu`` sees it: a loopback Kubernetes API (tests/kube_server.py) behind the
    outputs file, and scripted RayJob/RayService progress (what KubeRay would write into their status)."""

    def __init__(self, server: KubeApiServer) -> None:
        self.server = server
        self.threads: list[threading.Thread] = []

    def applied(self, plural: str = "") -> list[dict[str, Any]]:
        """The bodies of every server-side apply of KubeRay objects (of ``plural``), in order."""
        return [json.loads(r.body) for r in self.server.of("PATCH", f"/{plural}/" if plural else "/apis/ray.io/")]

    def job(self, name: str, *states: tuple[str, str], log: str = "", plural: str = "rayjobs") -> None:
        """Once ``name`` is applied, moves it through ``states`` (deployment, job status); the submitter pod
        (``job-name=<name>``) with ``log`` appears before the last state, as KubeRay's K8sJobMode runs it."""

        def drive() -> None:
            deadline = time.monotonic() + 20
            while self.server.get_object(plural, name) is None:
                if time.monotonic() > deadline:
                    return
                time.sleep(0.02)
            # a RayJob's states are played once the CLI watches it (its watch lists first, so a state set before
            # would be seen only as the last one, however loaded the machine)
            while plural == "rayjobs" and not any(
                    r.query.get("watch") and r.query.get("fieldSelector") == f"metadata.name={name}"
                    for r in self.server.of("GET", f"/{plural}")):
                if time.monotonic() > deadline:
                    return
                time.sleep(0.02)
            for i, (deployment, job) in enumerate(states):
                if i == len(states) - 1 and log:
                    self.server.add_pod(f"{name}-submit", {"job-name": name}, log.splitlines())
                status = ({"jobDeploymentStatus": deployment, **({"jobStatus": job} if job else {})}
                          if plural == "rayjobs" else {"serviceStatus": deployment,
                                                        "conditions": [{"type": "Ready", "status": job}]})
                self.server.set_status(plural, name, status)
                time.sleep(0.05)

        thread = threading.Thread(target=drive, daemon=True)
        thread.start()
        self.threads.append(thread)

    def tpu_node(self, pool: str, node: str, holder: str | None = None) -> None:
        """A node of node pool ``pool``; with ``holder``, a running pod of another namespace requesting its TPUs."""
        self.server.put({"apiVersion": "v1", "kind": "Node",
                         "metadata": {"name": node, "labels": {"cloud.google.com/gke-nodepool": pool}}},
                        namespace=None)
        if holder:
            self.server.put({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": holder, "namespace": "team-a"},
                             "spec": {"nodeName": node, "containers": [{"name": "w", "image": "x", "resources": {
                                 "requests": {"google.com/tpu": "4"}, "limits": {"google.com/tpu": "4"}}}]},
                             "status": {"phase": "Running"}}, namespace="team-a")


@pytest.fixture
def fake(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, tls: TlsFiles,
         sa_key: ServiceAccountKey) -> Iterator[Cluster]:
    """A working directory with raytpu.yaml and outputs.json pointing at a loopback API server, and Application
    Default Credentials (a service-account key file whose token endpoint is that server): google-auth for real."""
    with serving(tls, sa_key) as server:
        (tmp_path / "raytpu.yaml").write_text(CONFIG)
        write_record(tmp_path)  # the fixture record of built images, beside the config
        outputs = {STACK: {**OUTPUTS[STACK], "endpoint": server.url, "ca_certificate": tls.ca_b64},
                   "ray-tpu-workloads": {}}
        (tmp_path / "outputs.json").write_text(json.dumps(outputs))
        use_adc(server, monkeypatch, tmp_path)
        # Retries are counted here, not waited for (the pause itself: tests/test_kube.py, backoff_s)
        monkeypatch.setattr(HttpRetry, "get_backoff_time", lambda self: 0.0)
        cluster = Cluster(server)
        yield cluster
        for thread in cluster.threads:
            thread.join(timeout=5)
        # no timeline watcher (raytpu.cluster.kube_timeline.KubePhases) outlives its command, whatever way it ended
        assert not [t.name for t in threading.enumerate() if t.name.startswith("raytpu-timeline-")]


def main(*argv: str) -> int:
    return cli.main(list(argv))


def verdict_line(name: str, healthy: bool = True) -> str:
    return report.format_verdict_line({
        "slice": name, "healthy": healthy, "generation": "v6e", "topology": "4x4", "pod_type": "v6e-16",
        "hosts_expected": 4, "hosts_found": 4 if healthy else 3, "duration_s": 12.0,
        "checks": [{"name": "hosts", "ok": healthy, "detail": "" if healthy else "host 3 missing",
                    "value": 4 if healthy else 3, "expected": 4}],
        "hosts": []})


def expected(workload: str, name: str) -> dict[str, Any]:
    """The object ``raytpu submit WORKLOAD`` should apply as ``name`` (train: checkpoints under its run name, in the
    bucket's GCS FUSE mount)."""
    spec = parse(CONFIG)
    args = ["--storage-path", "/mnt/gcs/checkpoints", "--name", name] if workload == "train" else []
    return kuberay.workload_manifest(spec, spec.workload(workload), images=FIXTURE_IMAGES,
                                     service_account="ray-tpu-ray", bucket="my-bucket", namespace="ray", name=name,
                                     args=args)


def carried_spec(manifest: dict[str, Any]) -> WorkloadSpec:
    """The WorkloadSpec a RayJob hands its pod (``RAYTPU_WORKLOAD`` in the runtime env)."""
    return WorkloadSpec.from_env(yaml.safe_load(manifest["spec"]["runtimeEnvYAML"])["env_vars"])


# ---------------------------------------------------------------------- submit


def test_submit_smoke_waits_applies_exact_manifest_streams_the_log_and_prints_verdicts(
        fake: Cluster, capsys: pytest.CaptureFixture[str]) -> None:
    fake.job("smoke-r1", ("Initializing", ""), ("Running", "RUNNING"), ("Complete", "SUCCEEDED"),
             log=f"2026-11-30 job started\n{verdict_line('tpu-a')}\n{verdict_line('tpu-b')}\nbye")
    code = main("submit", "smoke", "--stack", STACK, "--wait", "--run-id", "r1")
    out, err = capsys.readouterr()
    assert code == 0, err
    assert fake.applied() == [expected("smoke", "smoke-r1")]
    manifest = fake.applied()[0]
    assert schema_errors(manifest) == [] and webhook_errors(manifest) == [] and operator_errors(manifest) == []
    assert manifest["spec"]["rayClusterSpec"]["workerGroupSpecs"][0]["replicas"] == 2
    assert "smoke-r1: Running/RUNNING" in err and "smoke-r1: Complete/SUCCEEDED" in err
    assert "2026-11-30 job started" in out and "bye" in out  # the submitter's log, streamed
    assert "✓  tpu-a" in out and "2/2 slices healthy" in out
    # its NetworkPolicy first (no pod ever runs unguarded), then the RayJob, then the policy owned by the RayJob
    policy_path = "/apis/networking.k8s.io/v1/namespaces/ray/networkpolicies/job-smoke-r1"
    assert [r.path for r in fake.server.of("PATCH")] == [
        policy_path, "/apis/ray.io/v1/namespaces/ray/rayjobs/smoke-r1", policy_path]
    policy = kuberay.network_policy(expected("smoke", "smoke-r1"), parse(CONFIG))
    owner = {"apiVersion": "ray.io/v1", "kind": "RayJob", "name": "smoke-r1", "uid": "uid-smoke-r1",
             "blockOwnerDeletion": False, "controller": False}
    assert fake.applied("networkpolicies") == [
        policy, {**policy, "metadata": {**policy["metadata"], "ownerReferences": [owner]}}]
    patch = fake.server.of("PATCH")[1]
    assert patch.query == {"fieldManager": "raytpu", "force": "false", "fieldValidation": "Strict"}
    assert patch.headers["content-type"] == "application/apply-patch+yaml"
    # google-auth got a token from the (loopback) token endpoint, and every API call carries one the server issued
    assert fake.server.of("POST", "/token")
    assert all(r.bearer and r.bearer in fake.server._valid_tokens for r in fake.server.api_requests())


POLICY_PATH = "/apis/networking.k8s.io/v1/namespaces/ray/networkpolicies/job-train-o1"
RAYJOB_PATH = "/apis/ray.io/v1/namespaces/ray/rayjobs/train-o1"


def test_submitted_rayjobs_policy_is_owned_by_it_with_the_exact_owner_patch(fake: Cluster) -> None:
    """At the API boundary: the third request is a server-side apply (the kit's one write mechanism, same field
    manager) of exactly the policy plus one ownerReference to the RayJob's uid from the apply's answer, and the
    server's policy carries it, so the garbage collector deletes it with the RayJob."""
    assert main("submit", "train", "--stack", STACK, "--run-id", "o1") == 0
    policy = kuberay.network_policy(expected("train", "train-o1"), parse(CONFIG))
    owner = {"apiVersion": "ray.io/v1", "kind": "RayJob", "name": "train-o1", "uid": "uid-train-o1",
             "blockOwnerDeletion": False, "controller": False}
    patches = fake.server.of("PATCH")
    assert [r.path for r in patches] == [POLICY_PATH, RAYJOB_PATH, POLICY_PATH]
    assert patches[2].json == {**policy, "metadata": {**policy["metadata"], "ownerReferences": [owner]}}
    assert patches[2].query == {"fieldManager": "raytpu", "force": "false", "fieldValidation": "Strict"}
    assert patches[2].headers["content-type"] == "application/apply-patch+yaml"
    stored = fake.server.get_object("networkpolicies", "job-train-o1")
    assert stored is not None and stored["metadata"]["ownerReferences"] == [owner]
    job = fake.server.get_object("rayjobs", "train-o1")
    assert job is not None and job["metadata"]["uid"] == owner["uid"]


@pytest.mark.parametrize(("status", "body"), [
    (422, status_body(422, "Invalid", 'RayJob.ray.io "train-o1" is invalid: spec: Invalid value')),
    (403, status_body(403, "Forbidden", 'rayjobs.ray.io "train-o1" is forbidden: User cannot patch')),
    (409, status_body(409, "Conflict", "Apply failed with 1 conflict: conflict with \"kubectl\"")),
    (500, status_body(500, "InternalError", "etcdserver: request timed out")),
])
def test_a_failed_rayjob_apply_leaves_no_policy_behind(fake: Cluster, capsys: pytest.CaptureFixture[str],
                                                        status: int, body: dict[str, Any]) -> None:
    """Nothing half-written: the RayJob's apply fails, no RayJob exists, so the policy applied just before it is
    deleted; the apply's own error is the one reported, without a traceback."""
    fake.server.fail("PATCH", RAYJOB_PATH, status, body, times=10)
    assert main("submit", "train", "--stack", STACK, "--run-id", "o1") == 1  # a KubeError
    err = capsys.readouterr().err
    assert err.splitlines()[-1].startswith("error: ") and "Traceback" not in err
    assert fake.server.get_object("networkpolicies", "job-train-o1") is None
    assert fake.server.get_object("rayjobs", "train-o1") is None
    assert [r.path for r in fake.server.of("DELETE")] == [POLICY_PATH]
    assert fake.server.of("DELETE")[0].query == {"propagationPolicy": "Background"}


def test_a_policy_is_kept_when_its_object_exists_after_a_failed_apply(fake: Cluster) -> None:
    """A reply lost after the server created the RayJob: its pods need the policy, so it stays."""
    client = KubeClient(fake.server.url, fake.server.tls.ca_b64, "ray")  # ADC: the fixture's key, as submit's
    policy = kuberay.network_policy(expected("train", "train-o1"), parse(CONFIG))
    fake.server.put(copy.deepcopy(policy))
    fake.server.put(expected("train", "train-o1"))
    with client:
        gke._withdraw(client, policy, "RayJob", "train-o1")
    assert fake.server.get_object("networkpolicies", "job-train-o1") is not None
    assert fake.server.of("DELETE") == []


def test_a_rayservice_update_keeps_its_policy_owned_and_a_failed_one_keeps_it(
        fake: Cluster, capsys: pytest.CaptureFixture[str]) -> None:
    """Re-applying a RayService: its policy's first apply already names the existing owner (an apply without the
    reference would drop it, the kit owning that field), and a failed update never deletes the policy its running
    pods rely on."""
    assert main("submit", "serve", "--stack", STACK) == 0
    owned = fake.applied("networkpolicies")[-1]
    fake.server.fail("PATCH", "/rayservices/serve", 422, status_body(422, "Invalid", "spec: Invalid value"))
    assert main("submit", "serve", "--stack", STACK) == 1
    assert "Traceback" not in capsys.readouterr().err
    assert fake.applied("networkpolicies")[1:] == [owned, owned]
    stored = fake.server.get_object("networkpolicies", "service-serve")
    assert stored is not None and stored["metadata"]["ownerReferences"] == owned["metadata"]["ownerReferences"]
    assert fake.server.of("DELETE") == []


def test_submit_wait_records_the_runs_timeline_from_pods_nodes_events_and_the_driver(
        fake: Cluster, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Where the minutes went, read at the API boundary: the pods wait on capacity (kube-scheduler's
    FailedScheduling, written with ``eventTime`` only, and the autoscaler's TriggeredScaleUp), the TPU nodes turn
    Ready, the pods are bound (PodScheduled), every TPU pod carries the webhook's TPU_WORKER_ID and
    TPU_WORKER_HOSTNAMES; the driver's stamp lines give the Ray phases. Times are whole seconds, as the API's
    ``Time`` fields are."""
    import math

    from test_timeline import FAILED_SCHEDULING, SCALE_UP, iso, node, ray_pod

    from raytpu.cluster import kube_timeline
    from raytpu.core.common import timeline

    monkeypatch.setattr(kube_timeline, "POLL_S", 0.1)
    name = "smoke-tl"
    hosts = [(s, h) for s in range(2) for h in range(4)]  # the smoke workload spans the train slice's 2 copies
    marks: dict[str, float] = {}

    def drive() -> None:
        while fake.server.get_object("rayjobs", name) is None:
            time.sleep(0.02)
        start = math.ceil(time.time())
        time.sleep(max(start - time.time(), 0))
        marks["t"] = start
        fake.server.put(ray_pod(f"{name}-head", name, None, created=start, scheduled=start, node="cpu-0"))
        for s, h in hosts:
            fake.server.put(ray_pod(f"{name}-w{s}{h}", name, h, created=start, scheduled=None, node=None))
        fake.server.put({**FAILED_SCHEDULING, "involvedObject": {"kind": "Pod", "name": f"{name}-w00"},
                         "eventTime": iso(start + 0.2, micro=True)})
        fake.server.put({**SCALE_UP, "involvedObject": {"kind": "Pod", "name": f"{name}-w10"},
                         "firstTimestamp": iso(start), "lastTimestamp": iso(start)})
        fake.server.set_status("rayjobs", name, {"jobDeploymentStatus": "Initializing"})
        time.sleep(max(start + 1.3 - time.time(), 0))
        for s, h in hosts:
            fake.server.put(node(f"tpu-{s}-{h}", start + 1), namespace=None)
            fake.server.put(ray_pod(f"{name}-w{s}{h}", name, h, created=start, scheduled=start + 2,
                                    node=f"tpu-{s}-{h}"))
        time.sleep(max(start + 2.2 - time.time(), 0))
        stamps = [timeline.stamp("ray_joined", "8 hosts", wall=start + 2.3),
                  timeline.stamp("reserved", "slice reserved", wall=start + 2.4),
                  timeline.stamp("compiled", "XLA compile 0.05s", wall=start + 2.45),
                  timeline.stamp("first_step", "first host result", wall=start + 2.5)]
        fake.server.add_pod(f"{name}-submit", {"job-name": name},
                            [timeline.stamp_line(x) for x in stamps] + [verdict_line("tpu-a"), verdict_line("tpu-b")])
        fake.server.set_status("rayjobs", name, {"jobDeploymentStatus": "Running", "jobStatus": "RUNNING"})
        time.sleep(max(start + 2.7 - time.time(), 0))
        fake.server.set_status("rayjobs", name, {"jobDeploymentStatus": "Complete", "jobStatus": "SUCCEEDED"})

    thread = threading.Thread(target=drive, daemon=True)
    thread.start()
    fake.threads.append(thread)
    before = time.time()
    code = main("submit", "smoke", "--stack", STACK, "--wait", "--run-id", "tl", "--report", str(tmp_path / "t.json"))
    out, err = capsys.readouterr()
    assert code == 0, err
    assert "2/2 slices healthy" in out
    document = json.loads((tmp_path / "t.json").read_text())
    assert document["run"] == name
    run = document["timeline"]
    rows = {r["phase"]: r for r in run["phases"]}
    assert list(rows) == list(timeline.PHASES)
    no_trainer = {"smoke_checked", "trainer_started"}  # a smoke run: no smoke before it, no trainer in it
    assert all(r["status"] == "measured" for p, r in rows.items() if p not in no_trainer), rows
    assert {rows[p]["status"] for p in no_trainer} == {"not applicable"}
    offset = marks["t"] - before  # seconds from the recorder's start to the pods' creation, within a fraction
    assert rows["applied"]["at_s"] < offset + 0.01
    assert rows["webhook_env"]["at_s"] == pytest.approx(offset, abs=0.6)
    assert "TPU_WORKER_ID and TPU_WORKER_HOSTNAMES on 8/8 TPU pod(s)" in rows["webhook_env"]["detail"]
    assert rows["nodes_ready"]["at_s"] == pytest.approx(offset + 1, abs=0.6)
    assert rows["scheduled"]["at_s"] == pytest.approx(offset + 2, abs=0.6)
    assert [(w["reason"], w["count"]) for w in rows["scheduled"]["waits"]] == [("TriggeredScaleUp", 1),
                                                                               ("FailedScheduling", 7)]
    assert rows["scheduled"]["waits"][1]["message"] == FAILED_SCHEDULING["message"]
    assert [rows[p]["detail"] for p in ("ray_joined", "reserved", "compiled", "first_step")] == [
        "8 hosts", "slice reserved", "XLA compile 0.05s", "first host result"]
    at = [rows[p]["at_s"] for p in ("ray_joined", "reserved", "compiled", "first_step")]
    assert at == sorted(at) and len(set(at)) == 4 and at[-1] <= run["wall_s"]
    assert sum(r["duration_s"] for r in rows.values()) == pytest.approx(run["wall_s"], abs=0.01)
    assert not [t for t in threading.enumerate() if t.name.startswith("raytpu-timeline-")]
    assert "smoke-tl: where the minutes went" in err and "FailedScheduling x7: 0/3 nodes are available" in err
    # read through the kit's client: the pods by KubeRay's label, each TPU node by name, a pending pod's events
    # (the log streamer reads the submitter's pods by the Job's own label: Kubernetes batch/v1 job-name)
    assert {r.query.get("labelSelector") for r in fake.server.of("GET", "/api/v1/namespaces/ray/pods")} >= {
        "raytpu.dev/ray-cluster=job-smoke-tl", "ray.io/originated-from-cr-name=smoke-tl", "job-name=smoke-tl"}
    assert {r.path for r in fake.server.of("GET", "/api/v1/nodes/")} == {f"/api/v1/nodes/tpu-{s}-{h}" for s, h in hosts}
    assert {r.query["fieldSelector"] for r in fake.server.of("GET", "/api/v1/namespaces/ray/events")} >= {
        f"involvedObject.name={name}-w00"}


def test_submit_train_without_wait_applies_and_returns(fake: Cluster, capsys: pytest.CaptureFixture[str]) -> None:
    code = main("submit", "train", "--stack", STACK, "--run-id", "r2")
    out, _ = capsys.readouterr()
    assert code == 0
    assert fake.applied() == [expected("train", "train-r2")]
    assert "submitted RayJob train-r2" in out
    # the served CRD first (every field the RayJob sets must be declared), then the server-side apply
    # then that both copies it spans are free (each copy's nodes: none here), then that the run's name is free
    # (server-side apply would update an existing run in place)
    policy = ("PATCH", "/apis/networking.k8s.io/v1/namespaces/ray/networkpolicies/job-train-r2")
    assert [(r.method, r.path) for r in fake.server.api_requests()] == [
        ("GET", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/rayjobs.ray.io"),
        ("GET", "/api/v1/nodes"), ("GET", "/api/v1/nodes"),
        ("GET", "/apis/ray.io/v1/namespaces/ray/rayjobs/train-r2"),
        # apply_with_network_policy reads the object again: an existing one's policy stays owned (and is never
        # withdrawn) through its update
        ("GET", "/apis/ray.io/v1/namespaces/ray/rayjobs/train-r2"),
        policy, ("PATCH", "/apis/ray.io/v1/namespaces/ray/rayjobs/train-r2"), policy]


def test_a_run_id_that_names_an_existing_run_is_refused(fake: Cluster, capsys: pytest.CaptureFixture[str]) -> None:
    """Two submissions in the same second get the same base-36 run id: the second must not update the first."""
    assert main("submit", "train", "--stack", STACK, "--run-id", "r7") == 0
    assert main("submit", "train", "--stack", STACK, "--run-id", "r7") == 2
    _, err = capsys.readouterr()
    assert "error: --run-id: 'r7' names RayJob train-r7, which exists" in err
    assert len(fake.applied()) == 1


def test_two_submits_in_one_second_without_a_run_id_are_two_runs(
        fake: Cluster, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 48: a default id whose RayJob exists moves on to the next second's; --run-id is never blamed."""
    monkeypatch.setattr(names, "run_id", lambda now=None: "tk9z00")
    assert main("submit", "train", "--stack", STACK) == 0
    assert main("submit", "train", "--stack", STACK) == 0
    _, err = capsys.readouterr()
    assert "--run-id" not in err
    assert [m["metadata"]["name"] for m in fake.applied() if m["kind"] == "RayJob"] == ["train-tk9z00", "train-tk9z01"]


@pytest.mark.parametrize(("status", "said"), [
    ({"jobDeploymentStatus": "Complete", "jobStatus": "SUCCEEDED"}, "has finished (Complete/SUCCEEDED)"),
    ({"jobDeploymentStatus": "Failed", "jobStatus": "FAILED", "reason": "DeadlineExceeded", "message": "x" * 900},
     "has finished (Failed/FAILED)"),
    ({"jobDeploymentStatus": "Running", "jobStatus": "RUNNING"}, "has not finished (Running/RUNNING)"),
    ({"jobDeploymentStatus": "Initializing"}, "has not finished (Initializing/-)"),
])
def test_a_taken_run_name_is_exit_2_naming_the_command_that_frees_it(
        fake: Cluster, capsys: pytest.CaptureFixture[str], status: dict[str, str], said: str) -> None:
    """Issue 40 item 12: KubeRay v1.7.0 keeps a finished RayJob (shutdownAfterJobFinishes deletes its Ray cluster
    only), so the same --run-id again is refused, naming the state and `raytpu runs cancel RUN --stack S`; nothing
    is deleted or applied; the line stays bounded whatever KubeRay's message."""
    assert main("submit", "train", "--stack", STACK, "--run-id", "r7") == 0
    fake.server.set_status("rayjobs", "train-r7", status)
    capsys.readouterr()
    assert main("submit", "train", "--stack", STACK, "--run-id", "r7") == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: --run-id: 'r7' names RayJob train-r7, which exists and {said}")
    assert f"`raytpu runs cancel train-r7 --stack {STACK}`" in err and "Traceback" not in err
    assert all(len(part) <= 400 for part in err.split("; ")), err
    assert len(fake.applied()) == 1 and fake.server.of("DELETE") == []


def test_a_finished_run_is_submitted_again_under_its_name_after_the_named_cancel(
        fake: Cluster, capsys: pytest.CaptureFixture[str]) -> None:
    """The command the refusal names frees the name; the same submit then applies a new RayJob of that name, whose
    train program resumes from the run's checkpoints (same --name, same storage)."""
    assert main("submit", "train", "--stack", STACK, "--run-id", "r7") == 0
    fake.server.set_status("rayjobs", "train-r7", {"jobDeploymentStatus": "Complete", "jobStatus": "SUCCEEDED"})
    assert main("submit", "train", "--stack", STACK, "--run-id", "r7") == 2
    assert main("runs", "cancel", "train-r7", "--stack", STACK, "--timeout-s", "10") == 0
    assert main("submit", "train", "--stack", STACK, "--run-id", "r7") == 0
    assert fake.applied("rayjobs") == [expected("train", "train-r7")] * 2


def test_an_older_kuberay_is_named_before_anything_is_applied(fake: Cluster,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    """KubeRay 1.5.0's RayJob CRD has no ``authOptions`` (added in 1.5.1, ray-project/kuberay#4179 cherry-picked by
    #4214): the vendored v1.7.0 CRD with that field removed stands in for it."""
    crd = fake.server.crds["rayjobs.ray.io"] = copy.deepcopy(fake.server.crds["rayjobs.ray.io"])
    cluster_schema = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"][
        "rayClusterSpec"]["properties"]
    del cluster_schema["authOptions"]
    assert main("submit", "train", "--stack", STACK, "--run-id", "r9") == 1
    _, err = capsys.readouterr()
    assert err == ("error: kubernetes: the cluster's rayjobs.ray.io (KubeRay) does not declare "
                   "spec.rayClusterSpec.authOptions: its KubeRay is older than the kit's objects need; valid: KubeRay "
                   "1.6.0 or newer: a GKE version whose Ray Operator add-on ships it (GKE does not document which "
                   "KubeRay each version ships; after an upgrade `kubectl get crd rayjobs.ray.io -o yaml` shows the "
                   "fields it serves)\n")
    assert fake.applied() == []


OLDER_KUBERAY = REPO / "tests" / "data" / "kuberay-crds"


@pytest.mark.parametrize(("argv", "crd_name", "release_file", "named"), [
    (("submit", "train"), "rayjobs.ray.io", "v1.5.2/ray.io_rayjobs.yaml",
     "spec.preRunningDeadlineSeconds (KubeRay 1.6.0)"),
    (("submit", "smoke"), "rayjobs.ray.io", "v1.5.2/ray.io_rayjobs.yaml",
     "spec.preRunningDeadlineSeconds (KubeRay 1.6.0)"),
    (("smoke",), "rayjobs.ray.io", "v1.5.2/ray.io_rayjobs.yaml", "spec.preRunningDeadlineSeconds (KubeRay 1.6.0)"),
    (("submit", "serve"), "rayservices.ray.io", "v1.5.0/ray.io_rayservices.yaml",
     "spec.rayClusterConfig.authOptions (KubeRay 1.5.1)"),
], ids=["train", "submit-smoke", "smoke", "serve"])
def test_a_real_older_kuberay_crd_is_refused_naming_the_field_and_its_release(
        fake: Cluster, capsys: pytest.CaptureFixture[str], argv: tuple[str, ...], crd_name: str, release_file: str,
        named: str) -> None:
    """The cluster serves the CRD of the KubeRay release before the field's (vendored unchanged): exit 1 before
    anything is applied, the field, the release that brought it and the kit's minimum named."""
    fake.server.crds[crd_name] = load_yaml((OLDER_KUBERAY / release_file).read_text())
    assert main(*argv, "--stack", STACK, "--run-id", "old") == 1
    _, err = capsys.readouterr()
    assert f"the cluster's {crd_name} (KubeRay) does not declare {named}: its KubeRay is older" in err
    assert "valid: KubeRay 1.6.0 or newer" in err and "Traceback" not in err
    assert fake.applied() == []


def test_the_crd_check_steps_aside_when_reading_crds_is_forbidden(fake: Cluster) -> None:
    """A principal may apply RayJobs without ``container.customResourceDefinitions.get``: the apply itself then
    reports what the server says."""
    fake.server.fail("GET", "customresourcedefinitions", 403, status_body(
        403, "Forbidden", 'customresourcedefinitions.apiextensions.k8s.io "rayjobs.ray.io" is forbidden: requires '
                          'one of ["container.customResourceDefinitions.get"]'))
    assert main("submit", "train", "--stack", STACK, "--run-id", "r8") == 0
    assert fake.applied() == [expected("train", "train-r8")]


def test_submit_failed_job_exits_1_with_error(fake: Cluster, capsys: pytest.CaptureFixture[str]) -> None:
    fake.job("train-r3", ("Running", "RUNNING"), ("Failed", "FAILED"), log="Traceback: boom")
    assert main("submit", "train", "--stack", STACK, "--wait", "--run-id", "r3") == 1
    out, err = capsys.readouterr()
    assert "Traceback: boom" in out  # the driver's log, not ours
    assert err.splitlines()[-1].startswith("error: train-r3: RayJob ended Failed/FAILED")


def test_submit_unhealthy_smoke_exits_1(fake: Cluster, capsys: pytest.CaptureFixture[str]) -> None:
    fake.job("smoke-r4", ("Complete", "SUCCEEDED"), log=verdict_line("tpu-a", healthy=False))
    assert main("submit", "smoke", "--stack", STACK, "--wait", "--run-id", "r4") == 1
    out, err = capsys.readouterr()
    assert "0/1 slices healthy" in out and "unhealthy slice" in err


def test_submit_wait_times_out_with_exit_1(fake: Cluster, capsys: pytest.CaptureFixture[str]) -> None:
    fake.job("train-r5", ("Initializing", ""))
    assert main("submit", "train", "--stack", STACK, "--wait", "--run-id", "r5", "--timeout-s", "1") == 1
    err = capsys.readouterr().err
    assert "error: train-r5: still Initializing/- after 1s" in err and "Traceback" not in err


def test_submit_serve_applies_rayservice_waits_until_ready_and_prints_the_endpoint(
        fake: Cluster, capsys: pytest.CaptureFixture[str]) -> None:
    fake.job("serve", ("WaitForServeDeploymentReady", "False"), ("Running", "True"), plural="rayservices")
    assert main("submit", "serve", "--stack", STACK, "--wait", "--timeout-s", "10", "--report", "t.json") == 0
    out, err = capsys.readouterr()
    assert fake.applied() == [expected("serve", "serve")]
    assert schema_errors(fake.applied()[0]) == [] and operator_errors(fake.applied()[0]) == []
    # KubeRay's Serve Service is <name>-serve-svc (ray-operator/controllers/ray/utils/util.go, v1.7.0)
    assert out.splitlines()[-2:] == ["endpoint: http://serve-serve-svc.ray.svc.cluster.local:8000/v1",
                                     f"model: {DEFAULT_MODEL}"]
    assert "serve: ready" in err
    # no request is sent to the in-cluster endpoint: the first token is said not measured, with why
    rows = {r["phase"]: r for r in json.loads(Path("t.json").read_text())["timeline"]["phases"]}
    assert rows["first_step"]["status"] == "not measured" and rows["first_step"]["at_s"] is None
    assert rows["first_step"]["detail"] == submission.service_unmeasured("cluster-ip")["first_step"]
    assert "reachable from inside the cluster only" in rows["first_step"]["detail"]


@pytest.mark.parametrize("endpoint", SERVE_ENDPOINTS)
def test_every_serve_endpoint_says_why_its_first_token_is_not_measured(endpoint: str) -> None:
    why = submission.service_unmeasured(endpoint)
    assert sorted(why) == ["compiled", "first_step", "ray_joined", "reserved", "trainer_started"]
    assert f"security.serve_endpoint {endpoint}" in why["first_step"] or "serve_api_key_secret" in why["first_step"]
    assert why["first_step"].startswith("first token not measured")


def _stuck_service(fake: Cluster, *, apps: bool, head_ready: bool) -> None:
    """Once ``serve`` is applied, KubeRay's view of it: a pending Ray cluster whose head pod is (not) Ready, and
    (no) Serve application status, which only the operator's reads of the head's dashboard fill in
    (v1.7.0 rayservice_controller.go reconcileServe / getAndCheckServeStatus)."""

    def drive() -> None:
        deadline = time.monotonic() + 20
        while fake.server.get_object("rayservices", "serve") is None and time.monotonic() < deadline:
            time.sleep(0.02)
        fake.server.put({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "serve-x7k2p-head-abcde", "labels": {
            "ray.io/cluster": "serve-x7k2p", "ray.io/node-type": "head", "app.kubernetes.io/name": "kuberay"}},
            "spec": {"containers": [{"name": "ray-head", "image": "vllm/vllm-tpu"}]},
            "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": str(head_ready)}]}})
        pending: dict[str, Any] = {"rayClusterName": "serve-x7k2p"}
        if apps:
            pending["applicationStatuses"] = {"llm": {"status": "DEPLOYING"}}
        fake.server.set_status("rayservices", "serve", {
            "serviceStatus": "", "numServeEndpoints": 0, "pendingServiceStatus": pending,
            "conditions": [{"type": "Ready", "status": "False", "reason": "Initializing"}]})

    thread = threading.Thread(target=drive, daemon=True)
    thread.start()
    fake.threads.append(thread)


@pytest.mark.parametrize(("apps", "head_ready", "security", "named"), [
    (False, True, "", "172.16.0.32/28 (network.master_cidr) and kube-system's konnectivity-agent pods (the default)"),
    (False, True, "security: {operator_from: ['namespace:ray-system']}\n",
     "namespace:ray-system (security.operator_from)"),
    (True, True, "", None),  # the operator read the Serve status: it reaches the head (a slow model load, say)
    (False, False, "", None),  # the head is not Ready yet: the operator does not call it yet
])
def test_wait_names_operator_from_when_the_operator_cannot_reach_the_head(
        fake: Cluster, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, apps: bool,
        head_ready: bool, security: str, named: str | None) -> None:
    """Issue 18 item 13: the NetworkPolicy admits the operator from ``security.operator_from`` (default the control
    plane's range); if the operator calls from elsewhere, it never reads the head's Serve status and the RayService
    stays not ready with no event (the error is only in the operator's log; kuberay PR #1282 shows it with a
    NetworkPolicy that blocks the head). ``--wait`` names the fix in one line."""
    monkeypatch.setattr(gke, "OPERATOR_GRACE_S", 0.0)
    monkeypatch.setattr(gke, "CHECK_EVERY_S", 0.2)
    Path("raytpu.yaml").write_text(CONFIG + security)
    _stuck_service(fake, apps=apps, head_ready=head_ready)
    assert main("submit", "serve", "--stack", STACK, "--wait", "--timeout-s", "1") == 1
    err = capsys.readouterr().err
    hints = [line for line in err.splitlines() if "operator_from" in line]
    assert err.splitlines()[-1] == ("error: serve: RayService not ready after 1s; valid: a larger --timeout-s, or the "
                                    "RayService's status conditions")
    if named is None:
        assert hints == []
        return
    assert hints == [
        "warning: security.operator_from: serve's head pod has been Ready for 0s and KubeRay's operator has read no "
        f"Serve status from its dashboard (:8265): its NetworkPolicy admits the operator only from {named}; valid: "
        "where this cluster's operator runs (README, \"Operator reachability\"), e.g. namespace:<its namespace> for "
        "a self-installed KubeRay"]


def test_a_public_endpoint_needs_its_api_key_secret_before_anything_is_applied(
        fake: Cluster, capsys: pytest.CaptureFixture[str]) -> None:
    """The kubelet cannot mount a Secret that does not exist: the RayService's pods would never start."""
    Path("raytpu.yaml").write_text(CONFIG + "security: {serve_endpoint: public-lb, serve_api_key_secret: serve-key}\n")
    assert main("submit", "serve", "--stack", STACK) == 2
    err = capsys.readouterr().err
    assert ("error: security.serve_api_key_secret: 'serve-key' names no Secret in namespace ray; valid: create it "
            "first: kubectl -n ray create secret generic serve-key") in err
    assert fake.applied() == [] and fake.applied("networkpolicies") == []
    fake.server.put({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "serve-key"},
                     "data": {"api-key": "c2VjcmV0"}})
    fake.server.put({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "serve-serve-svc"},
                     "spec": {"type": "LoadBalancer"}, "status": {"loadBalancer": {"ingress": [{"ip": "34.9.8.7"}]}}})
    fake.job("serve", ("Running", "True"), plural="rayservices")
    assert main("submit", "serve", "--stack", STACK, "--wait", "--timeout-s", "10") == 0
    out = capsys.readouterr().out
    assert out.splitlines()[-3:] == ["endpoint: http://serve-serve-svc.ray.svc.cluster.local:8000/v1",
                                     f"model: {DEFAULT_MODEL}", "load balancer: http://34.9.8.7:8000/v1"]
    (service,) = fake.applied()
    assert service["spec"]["serveService"]["spec"]["type"] == "LoadBalancer"


def test_submit_dry_run_prints_yaml_and_calls_no_api(fake: Cluster, capsys: pytest.CaptureFixture[str]) -> None:
    assert main("submit", "train", "--stack", STACK, "--dry-run", "--run-id", "r6") == 0
    job = expected("train", "train-r6")
    assert list(yaml.safe_load_all(capsys.readouterr().out)) == [kuberay.network_policy(job, parse(CONFIG)), job]
    assert fake.server.requests == []


@pytest.mark.parametrize("command", [("submit", "train"), ("submit", "serve"), ("smoke",)])
def test_a_kit_image_without_a_built_digest_is_exit_2_naming_it_and_the_build_command(
        fake: Cluster, capsys: pytest.CaptureFixture[str], command: tuple[str, ...]) -> None:
    (Path.cwd() / RECORD_NAME).unlink()
    # --dry-run previews an unbuilt image as a marked placeholder (test_images): applying is what is refused
    assert main(*command, "--stack", STACK) == 2
    err = capsys.readouterr().err
    image = "serve" if command[-1] == "serve" else "job"
    assert f"the kit's image '{image}' has no built digest" in err
    assert f"`raytpu images build --stack {STACK}`" in err and "Traceback" not in err
    assert fake.server.requests == []


def test_a_malformed_record_is_exit_2_naming_the_image_and_the_valid_form(
        fake: Cluster, capsys: pytest.CaptureFixture[str]) -> None:
    record = json.loads((Path.cwd() / RECORD_NAME).read_text())
    record["images"]["job"]["ref"] = "us-docker.pkg.dev/p/r/job:latest"
    (Path.cwd() / RECORD_NAME).write_text(json.dumps(record))
    assert main("submit", "train", "--stack", STACK, "--dry-run") == 2
    err = capsys.readouterr().err
    assert "raytpu.images.json: images.job.ref: 'us-docker.pkg.dev/p/r/job:latest'" in err, err
    assert "REGISTRY/IMAGE@sha256:<64 lowercase hex digits>" in err and "Traceback" not in err


def test_every_rayjob_submission_is_a_new_run_and_a_rayservice_keeps_its_name(
        fake: Cluster, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each RayJob submission is ``<workload>-<run id>`` (default run id: :func:`names.run_id`), so it never updates
    an earlier job, and train checkpoints under its own run; re-applying a RayService updates it in place."""
    ids = iter(["k1", "k2", "k3", "k4", "k5"])
    monkeypatch.setattr(names, "run_id", lambda now=None: next(ids))
    for workload in ("train", "train", "smoke", "serve", "serve"):
        assert main("submit", workload, "--stack", STACK) == 0
    applied = fake.applied()
    assert [m["metadata"]["name"] for m in applied] == ["train-k1", "train-k2", "smoke-k3", "serve", "serve"]
    assert applied == [expected("train", "train-k1"), expected("train", "train-k2"), expected("smoke", "smoke-k3"),
                       expected("serve", "serve"), expected("serve", "serve")]
    assert [m["spec"]["entrypoint"] for m in applied[:2]] == [
        f"python -m raytpu.workloads.train --storage-path /mnt/gcs/checkpoints --name {run} "
        f"--start-timeout-s {2 * preemption.RESTART_WAIT_S} --slice-retries {preemption.MAX_PREEMPTIONS}"
        for run in ("train-k1", "train-k2")]  # a v6e 4x4: its head, then its placement group (issue 40 item 8)
    spec = parse(CONFIG)
    assert [carried_spec(m) for m in applied[:3]] == [spec.workload("train")] * 2 + [spec.workload("smoke")]


def test_default_run_id_names_the_job_workload_dash_run_id(fake: Cluster, capsys: pytest.CaptureFixture[str]) -> None:
    before = names.run_id()
    assert main("submit", "train", "--stack", STACK) == 0
    (job,) = fake.applied()
    name = job["metadata"]["name"]
    workload, _, run = name.partition("-")
    assert workload == "train" and run.isalnum() and run == run.lower() and before <= run <= names.run_id()
    assert f"--storage-path /mnt/gcs/checkpoints --name {name}" in job["spec"]["entrypoint"]
    out, err = capsys.readouterr()
    assert f"submitted RayJob {name}" in out and f"checkpoints: gs://my-bucket/checkpoints/{name}" in err


@pytest.mark.parametrize(("argv", "message"), [
    (("submit", "nope", "--stack", STACK), "error: WORKLOAD: 'nope' is not allowed; valid: smoke, train, serve"),
    (("submit", "train", "--stack", STACK, "--outputs", "missing.json"),
     "error: --outputs: cannot read 'missing.json'"),
    (("submit", "train", "--stack", "other"),
     "error: --stack: 'other' is not allowed (cluster stacks in outputs.json); valid: ray-tpu-cluster\n"),
    (("submit", "train", "--stack", "ray-tpu"), "error: --stack: 'ray-tpu' is not allowed"),
    (("submit", "train"), "error: --stack: is required (or --local)"),
    (("submit", "train", "--stack", STACK, "--report", "t.json"),
     "error: --report: 't.json' is the timeline of a run that is followed; valid: a file path, with --wait or --local"),
    (("submit", "train", "--stack", STACK, "--wait", "--report", ""), "error: --report: '' is not a path"),
    (("smoke", "--stack", "ray-tpu"), "error: --stack: 'ray-tpu' is not allowed"),
    (("smoke", "--stack", STACK, "--outputs", "missing.json"), "error: --outputs: cannot read"),
    (("smoke", "--stack", STACK, "--config", "nope.yaml"), "error: config: cannot read 'nope.yaml'"),
])
def test_bad_input_exits_2_with_a_clear_message_and_no_api_call(
        fake: Cluster, capsys: pytest.CaptureFixture[str], argv: tuple[str, ...], message: str) -> None:
    assert main(*argv) == 2
    err = capsys.readouterr().err
    assert err.startswith(message) and "Traceback" not in err
    assert len(err.splitlines()) == 1, err
    assert fake.server.requests == []


def test_ray_operator_missing_is_one_line_and_exit_1(fake: Cluster, capsys: pytest.CaptureFixture[str]) -> None:
    fake.server.serve_ray = False  # the cluster serves no ray.io/v1: the add-on is off
    assert main("submit", "train", "--stack", STACK, "--run-id", "r9") == 1
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1 and "is the Ray Operator add-on enabled?" in err and "Traceback" not in err


def test_no_kubectl_or_gcloud_subprocess_remains_in_raytpu() -> None:
    """The kit talks to GKE through the Kubernetes API and google-auth only: no kubectl or gcloud at run time."""
    root = Path(__file__).resolve().parents[1] / "raytpu"
    offenders = []
    for path in root.rglob("*.py"):
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value in ("kubectl", "gcloud"):
                offenders.append(f"{path.relative_to(root)}:{node.lineno}")
            if isinstance(node, ast.Attribute) and node.attr in ("run", "Popen", "check_output") and \
                    isinstance(node.value, ast.Name) and node.value.id == "subprocess" and \
                    path.parent.name == "cluster":
                offenders.append(f"{path.relative_to(root)}:{node.lineno}")
    assert offenders == []


# ---------------------------------------------------------------------- smoke


def test_smoke_one_job_per_slice_copy_reports_and_exits_1_on_unhealthy(
        fake: Cluster, capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    names = ["smoke-train-0-n1", "smoke-train-1-n1", "smoke-serve-0-n1"]
    fake.job(names[0], ("Running", "RUNNING"), ("Complete", "SUCCEEDED"), log=verdict_line("tpu-train-a"))
    fake.job(names[1], ("Running", "RUNNING"), ("Complete", "SUCCEEDED"),
             log=verdict_line("tpu-train-b", healthy=False))
    fake.job(names[2], ("Running", "RUNNING"), ("Complete", "SUCCEEDED"), log="driver died before a verdict")
    code = main("smoke", "--stack", STACK, "--run-id", "n1", "--report", "out", "--timeout-s", "20")
    out, err = capsys.readouterr()
    assert code == 1
    applied = fake.applied()
    assert [m["metadata"]["name"] for m in applied] == names
    config = parse(CONFIG)
    assert applied == kuberay.smoke_jobs(config, images=FIXTURE_IMAGES, service_account="ray-tpu-ray",
                                         bucket="my-bucket",
                                         namespace="ray", suffix="n1")
    for manifest in applied:
        assert schema_errors(manifest) == [] and webhook_errors(manifest) == [] and operator_errors(manifest) == []
        assert manifest["spec"]["rayClusterSpec"]["workerGroupSpecs"][0]["replicas"] == 1
    assert applied[0]["spec"]["rayClusterSpec"]["headGroupSpec"]["template"]["spec"]["containers"][0]["image"] == (
        "example.com/ray-tpu:smoke")
    assert "warning: slice dws: skipped (queued provisioning" in err
    assert "error: smoke: 2 of 3 slices failed (smoke-train-1-n1 unhealthy, smoke-serve-0-n1 unhealthy)" in err
    assert "1/3 slices healthy" in out
    doc = json.loads((tmp_path / "out" / "smoke.json").read_text())
    assert doc["healthy"] is False and doc["skipped_slices"] == ["dws"] and doc["run_id"] == "n1"
    assert [v["job"] for v in doc["slices"]] == names
    assert doc["slices"][2]["checks"][0]["detail"].startswith("no RAYTPU_SMOKE_VERDICT line")
    serve = config.slice_named("serve").plan  # a job that gave no verdict is still described by its slice's plan
    assert {k: doc["slices"][2][k] for k in ("generation", "topology", "pod_type", "hosts_expected")} == {
        "generation": serve.generation, "topology": serve.topology, "pod_type": serve.ray_pod_type,
        "hosts_expected": serve.hosts}
    root = ET.parse(tmp_path / "out" / "smoke.junit.xml").getroot()
    assert [s.get("name") for s in root.findall("testsuite")] == ["tpu-train-a", "tpu-train-b", "smoke-serve-0-n1"]
    assert root.get("failures") == "2"


def test_smoke_all_healthy_exits_0(fake: Cluster, capsys: pytest.CaptureFixture[str]) -> None:
    for i, name in enumerate(["smoke-train-0-n2", "smoke-train-1-n2", "smoke-serve-0-n2"]):
        fake.job(name, ("Complete", "SUCCEEDED"), log=verdict_line(f"tpu-{i}"))
    assert main("smoke", "--stack", STACK, "--run-id", "n2", "--timeout-s", "20") == 0
    out = capsys.readouterr().out
    assert "3/3 slices healthy" in out
    assert Path("reports/smoke.junit.xml").is_file()
    # each job's timeline, in the table, smoke.json and the nightly summary (smoke.md): here no pod ever appeared
    timelines = json.loads(Path("reports/smoke.json").read_text())["timelines"]
    assert sorted(timelines) == ["smoke-serve-0-n2", "smoke-train-0-n2", "smoke-train-1-n2"]
    for run in timelines.values():
        statuses = {r["phase"]: r["status"] for r in run["phases"]}
        assert statuses["applied"] == statuses["finished"] == "measured"
        assert statuses["scheduled"] == statuses["first_step"] == "not reached"
        assert sum(r["duration_s"] for r in run["phases"]) == pytest.approx(run["wall_s"], abs=0.01)
    assert "smoke-train-0-n2: where the minutes went" in out
    assert not [t for t in threading.enumerate() if t.name.startswith("raytpu-timeline-")]  # none looks on
    assert "`smoke-serve-0-n2`: where the" in Path("reports/smoke.md").read_text()
    page = Path("reports/report.html").read_text()  # issue 42: the page on-call reads, beside smoke.json
    assert "✓ healthy: 3 slice(s)" in page and "smoke-train-0-n2: where the minutes went" in page


def test_smoke_failed_job_with_healthy_verdict_is_still_unhealthy(fake: Cluster,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    for name in ["smoke-train-0-n3", "smoke-train-1-n3"]:
        fake.job(name, ("Complete", "SUCCEEDED"), log=verdict_line(name))
    fake.job("smoke-serve-0-n3", ("Failed", "FAILED"), log=verdict_line("smoke-serve-0-n3"))
    assert main("smoke", "--stack", STACK, "--run-id", "n3", "--timeout-s", "20") == 1
    assert "RayJob ended Failed/FAILED" in capsys.readouterr().out


def test_smoke_timeout_counts_as_unhealthy(fake: Cluster, capsys: pytest.CaptureFixture[str]) -> None:
    code = main("smoke", "--stack", STACK, "--run-id", "n4", "--timeout-s", "1")
    out, _ = capsys.readouterr()
    assert code == 1
    assert "timed out after 1s; RayJob New/-" in out  # applied, but KubeRay never moved it


def test_busy_slice_gets_no_job_and_is_not_a_failure_unless_strict(
        fake: Cluster, capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """A copy whose nodes run another team's TPU pod is ``busy``: no smoke job goes there (smoke and a workload
    never split a slice), the report names the holder, and only ``--strict`` makes it fail the run."""
    fake.tpu_node("train-0", "gke-train-0-a", holder="research-job-worker-0")
    fake.tpu_node("train-1", "gke-train-1-a")
    for run in ("b1", "b2"):
        for name in (f"smoke-train-1-{run}", f"smoke-serve-0-{run}"):
            fake.job(name, ("Complete", "SUCCEEDED"), log=verdict_line(name))
    assert main("smoke", "--stack", STACK, "--run-id", "b1", "--timeout-s", "20", "--report", "out") == 0
    out, err = capsys.readouterr()
    assert [m["metadata"]["name"] for m in fake.applied()] == ["smoke-train-1-b1", "smoke-serve-0-b1"]
    assert "slice train-0: busy (team-a/research-job-worker-0); no smoke job" in err
    assert "busy" in out and "2/3 slices healthy" in out
    doc = json.loads((tmp_path / "out" / "smoke.json").read_text())
    busy = doc["slices"][0]
    assert busy["state"] == "busy" and "team-a/research-job-worker-0" in busy["checks"][0]["detail"]
    root = ET.parse(tmp_path / "out" / "smoke.junit.xml").getroot()
    assert root.get("failures") == "0" and root.find("testsuite/testcase/skipped") is not None
    assert main("smoke", "--stack", STACK, "--run-id", "b2", "--timeout-s", "20", "--strict") == 1
    assert "smoke-train-0-b2 busy" in capsys.readouterr().err


def test_slice_without_capacity_is_unschedulable_not_unhealthy(fake: Cluster,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    """A job whose pods never got capacity is ``unschedulable`` (the scheduler's and autoscaler's events say
    why: spot/flex-start/queued capacity not granted, quota), which exits 0 unless ``--strict``."""
    fake.job("smoke-train-0-u1", ("Complete", "SUCCEEDED"), log=verdict_line("a"))
    fake.job("smoke-serve-0-u1", ("Complete", "SUCCEEDED"), log=verdict_line("b"))
    fake.job("smoke-train-1-u1", ("Initializing", ""))
    fake.server.put({"apiVersion": "v1", "kind": "Pod", "metadata": {
        "name": "smoke-train-1-u1-tpu-worker-0", "labels": {"raytpu.dev/ray-cluster": "job-smoke-train-1-u1"}},
        "spec": {"containers": [{"name": "ray-worker", "image": "x"}]}, "status": {"phase": "Pending"}})
    fake.server.put({"apiVersion": "v1", "kind": "Event", "metadata": {"name": "e1"},
                     "involvedObject": {"kind": "Pod", "name": "smoke-train-1-u1-tpu-worker-0"},
                     "reason": "NotTriggerScaleUp",
                     "message": "pod didn't trigger scale-up: 1 max node group size reached"})
    assert main("smoke", "--stack", STACK, "--run-id", "u1", "--timeout-s", "1") == 0
    out = capsys.readouterr().out
    assert "unschedulable" in out and "NotTriggerScaleUp: pod didn't trigger scale-up" in out


def test_smoke_jobs_carry_their_slices_spec_and_queued_slices_are_skipped_with_a_warning(
        fake: Cluster, capsys: pytest.CaptureFixture[str]) -> None:
    assert main("smoke", "--stack", STACK, "--run-id", "d1", "--dry-run") == 0
    out, err = capsys.readouterr()
    docs = list(yaml.safe_load_all(out))
    jobs = docs[1::2]
    assert docs[::2] == [kuberay.network_policy(job, parse(CONFIG)) for job in jobs]  # each job behind its policy
    assert [j["metadata"]["name"] for j in jobs] == ["smoke-train-0-d1", "smoke-train-1-d1", "smoke-serve-0-d1"]
    spec = parse(CONFIG)
    for job in jobs:
        carried = carried_spec(job)
        assert carried.kind.name == "smoke" and carried.slices_spanned == 1
        assert carried.slice == spec.slice_named(job["metadata"]["labels"][names.SLICE_LABEL])
        assert job["spec"]["entrypoint"] == "python -m raytpu.workloads.smoke"
    assert err.splitlines() == ["warning: slice dws: skipped (queued provisioning cannot run a RayJob with workers)"]
    assert fake.server.requests == []


def test_smoke_with_only_queued_slices_exits_2(fake: Cluster, capsys: pytest.CaptureFixture[str]) -> None:
    Path("raytpu.yaml").write_text(CONFIG.split("slices:")[0] + "slices:\n"
                                   "  - {name: dws, generation: v6e, topology: 2x2, zone: us-east5-b, "
                                   "provisioning: queued}\n")
    assert main("smoke", "--stack", STACK, "--run-id", "q1") == 2
    err = capsys.readouterr().err
    assert err.splitlines()[-1] == ("error: slices: no slice can run a smoke RayJob; valid: at least one slice whose "
                                    "provisioning runs a Ray cluster")
    assert "warning: slice dws: skipped" in err and "Traceback" not in err
    assert fake.server.requests == []


# ---------------------------------------------------------------------- RayJob status and run ids


def test_job_state_reads_kuberay_status() -> None:
    state = gke.job_state("j", {"status": {"jobDeploymentStatus": "Failed", "jobStatus": "",
                                           "reason": "DeadlineExceeded", "message": "no capacity"}})
    assert state.done and not state.succeeded
    assert state.describe() == "Failed/- (DeadlineExceeded: no capacity)"
    assert not gke.job_state("j", {"status": {"jobDeploymentStatus": "Running"}}).done
    assert gke.job_state("j", None).describe() == "not found"


def test_run_id_is_short_dns_safe_and_time_ordered() -> None:
    rid = names.run_id(1_800_000_000)
    assert rid.isalnum() and rid == rid.lower() and len(rid) == 6
    assert names.run_id(1_800_000_000) < names.run_id(1_800_000_001) < names.run_id(1_800_003_600)


# ---------------------------------------------------------------------- the core zip


def test_core_zip_has_one_top_level_package_with_workloads_and_no_cdk(tmp_path: Path) -> None:
    import zipfile

    path = core_zip.build_core_zip(tmp_path / "raytpu.zip")
    entries = zipfile.ZipFile(path).namelist()
    assert {n.split("/", 1)[0] for n in entries} == {core_zip.ZIP_TOP}  # the folder Ray drops on unpacking
    names = [n.split("/", 1)[1] for n in entries]
    assert {n.split("/", 1)[0] for n in names} == {"raytpu"}
    assert {"raytpu/__init__.py", "raytpu/core/tpu/catalog.py", "raytpu/core/tpu/plan.py",
            "raytpu/core/manifests/kuberay.py", "raytpu/core/specs/spec.py", "raytpu/core/specs/kinds.py",
            "raytpu/core/specs/slices/provisioning.py",
            "raytpu/workloads/__init__.py"} <= set(names)
    assert not [n for n in names if n.startswith(("raytpu/stacks/", "raytpu/modules/")) or "__pycache__" in n]
    assert "raytpu/config/__init__.py" not in names  # jobs receive specs; they never parse YAML


def test_upload_core_posts_the_zip_to_the_gcs_json_api(tmp_path: Path, sa_key: ServiceAccountKey) -> None:
    """The upload at the HTTP boundary (GCS cannot be reached from here): a simple media upload
    (https://cloud.google.com/storage/docs/uploading-objects) with the caller's OAuth token, to a loopback server."""
    import zipfile

    seen: dict[str, Any] = {}

    class Storage(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            seen.update(path=self.path, auth=self.headers.get("Authorization"),
                        type=self.headers.get("Content-Type"),
                        body=self.rfile.read(int(self.headers["Content-Length"])))
            self.send_response(200)
            self.end_headers()
            self.wfile.write(b"{}")

        def log_message(self, *args: Any) -> None:
            pass

    httpd = HTTPServer(("127.0.0.1", 0), Storage)
    threading.Thread(target=httpd.handle_request, daemon=True).start()
    creds = service_account.Credentials.from_service_account_info(sa_key.info("https://unused.invalid/token"))
    creds.token = "test-token"
    creds.expiry = None
    try:
        uri = f"gs://my-bucket/raytpu/raytpu-{__version__}.zip"
        google_api.upload_core(uri, creds, api=f"http://127.0.0.1:{httpd.server_address[1]}")
    finally:
        httpd.server_close()
    assert seen["path"] == (f"/upload/storage/v1/b/my-bucket/o?uploadType=media&name=raytpu%2Fraytpu-"
                            f"{__version__}.zip")
    assert seen["auth"] == "Bearer test-token" and seen["type"] == "application/zip"
    (tmp_path / "z.zip").write_bytes(seen["body"])
    names = [n.removeprefix(f"{core_zip.ZIP_TOP}/") for n in zipfile.ZipFile(tmp_path / "z.zip").namelist()]
    assert {"raytpu/core/tpu/plan.py", "raytpu/core/specs/spec.py"} <= set(names)
    assert "raytpu/config/__init__.py" not in names


# ---------------------------------------------------------------------- smoke over DCN (multi-slice workloads)

MULTISLICE_CONFIG = CONFIG.replace("{name: train, kind: train, slice: train}",
                                   "{name: train, kind: train, slice: train, slices: 2}")
"""The train workload's run spans both copies of slice ``train`` over DCN."""


def dcn_verdict_line(name: str, slices: list[str], healthy: bool = True) -> str:
    """A verdict of the multi-slice smoke job: a slice's ICI rows and its ``dcn`` section."""
    line = json.loads(verdict_line(name, healthy).split(" ", 1)[1])
    line["dcn"] = {"slices": slices, "source": "https://jax-ml.github.io/scaling-book/tpus/",
                   "checks": [{"name": "dcn_reach", "ok": healthy, "value": None, "expected": None,
                               "detail": "" if healthy else f"slice {name} cannot reach the coordinator"}],
                   "perf": [{"metric": "dcn_allreduce_busbw", "unit": "GB/s", "worker_id": 0, "device": None,
                             "value": 20.0, "reference": 25.0, "ratio": 0.8, "min_ratio": 0.5, "gates": True,
                             "peer_ratio": None, "min_peer_ratio": None, "ok": healthy}]}
    return report.format_verdict_line(line)


def test_a_multi_slice_workload_adds_one_smoke_job_over_its_copies_after_the_per_copy_jobs(
        fake: Cluster, capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """``smoke-train-dcn``: one RayJob over the N copies the train run spans (``replicas: N``, ``numOfHosts``,
    ``MEGASCALE_NUM_SLICES=N`` as the train RayJob's workers get it, ``--dcn-slices N``), applied only once the
    per-copy jobs are done and deleted, and its verdicts' ``dcn`` sections in smoke.json, smoke.md and the table."""
    Path("raytpu.yaml").write_text(MULTISLICE_CONFIG)
    per_copy = ["smoke-train-0-m1", "smoke-train-1-m1", "smoke-serve-0-m1"]
    for name in per_copy:
        fake.job(name, ("Complete", "SUCCEEDED"), log=verdict_line(name))
    fake.job("smoke-train-dcn-m1", ("Running", "RUNNING"), ("Complete", "SUCCEEDED"),
             log="\n".join(dcn_verdict_line(s, ["tpu-a", "tpu-b"]) for s in ("tpu-a", "tpu-b")))
    assert main("smoke", "--stack", STACK, "--run-id", "m1", "--report", "out", "--timeout-s", "20") == 0
    out, err = capsys.readouterr()
    applied = fake.applied()
    assert [m["metadata"]["name"] for m in applied] == [*per_copy, "smoke-train-dcn-m1"]
    spec = parse(MULTISLICE_CONFIG)
    dcn_job = applied[-1]
    assert [dcn_job] == kuberay.dcn_smoke_jobs(spec, images=FIXTURE_IMAGES, service_account="ray-tpu-ray",
                                               bucket="my-bucket", namespace="ray", suffix="m1")
    assert schema_errors(dcn_job) == [] and webhook_errors(dcn_job) == [] and operator_errors(dcn_job) == []
    group = dcn_job["spec"]["rayClusterSpec"]["workerGroupSpecs"][0]
    train_group = expected_multislice_train(spec)["spec"]["rayClusterSpec"]["workerGroupSpecs"][0]
    assert group["replicas"] == group["minReplicas"] == group["maxReplicas"] == 2
    assert group["numOfHosts"] == spec.slice_named("train").plan.hosts == train_group["numOfHosts"]
    megascale = [e for e in group["template"]["spec"]["containers"][0]["env"] if e["name"].startswith("MEGASCALE")]
    assert megascale == [{"name": "MEGASCALE_NUM_SLICES", "value": "2"}] == [
        e for e in train_group["template"]["spec"]["containers"][0]["env"] if e["name"].startswith("MEGASCALE")]
    head = dcn_job["spec"]["rayClusterSpec"]["headGroupSpec"]["template"]["spec"]["containers"][0]
    assert not [e for e in head.get("env", []) if e["name"].startswith("MEGASCALE")]  # the head is no TPU host
    assert dcn_job["spec"]["entrypoint"] == "python -m raytpu.workloads.smoke --dcn-slices 2"
    assert carried_spec(dcn_job).slices_spanned == 2
    copy_0 = applied[0]["spec"]["rayClusterSpec"]["workerGroupSpecs"][0]["template"]["spec"]["nodeSelector"]
    # every pool of the slice (the copies it spans), where a per-copy job selects its own copy's pool only
    assert group["template"]["spec"]["nodeSelector"] == {
        k: v for k, v in copy_0.items() if k != names.NODE_POOL_LABEL}
    assert copy_0[names.NODE_POOL_LABEL] == "train-0"
    # its NetworkPolicy first, as for every job
    policy_path = "/apis/networking.k8s.io/v1/namespaces/ray/networkpolicies/job-smoke-train-dcn-m1"
    assert policy_path in [r.path for r in fake.server.of("PATCH", policy_path)]
    # the per-copy jobs were deleted (their copies freed) before the multi-slice job was applied
    order = [(r.method, r.path.split("?")[0].rsplit("/", 1)[-1]) for r in fake.server.requests
             if r.method in ("PATCH", "DELETE") and "/rayjobs/" in r.path]
    deleted_at = [order.index(("DELETE", n)) for n in per_copy]
    assert max(deleted_at) < order.index(("PATCH", "smoke-train-dcn-m1"))
    assert "applied RayJob smoke-train-dcn-m1" in err
    assert "DCN (cross-slice all-reduce over tpu-a, tpu-b" in out and "5/5 slices healthy" in out
    doc = json.loads((tmp_path / "out" / "smoke.json").read_text())
    assert [v["job"] for v in doc["slices"]] == [*per_copy, "smoke-train-dcn-m1", "smoke-train-dcn-m1"]
    assert [v["dcn"]["slices"] for v in doc["slices"][3:]] == [["tpu-a", "tpu-b"]] * 2
    assert "dcn" not in doc["slices"][0]
    assert "smoke-train-dcn-m1" in doc["timelines"]
    assert "dcn_allreduce_busbw" in (tmp_path / "out" / "smoke.md").read_text()
    page = (tmp_path / "out" / "report.html").read_text()
    assert page.count("<h3>DCN over tpu-a, tpu-b</h3>") == 2 and "host 0" in page


def expected_multislice_train(spec: Any) -> dict[str, Any]:
    return kuberay.workload_manifest(spec, spec.workload("train"), images=FIXTURE_IMAGES,
                                     service_account="ray-tpu-ray", bucket="my-bucket", namespace="ray",
                                     name="train-r1", args=kinds.kind("train").run_args("train-r1"))


def test_the_multi_slice_smoke_job_is_not_run_when_fewer_than_n_copies_are_free(
        fake: Cluster, capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """A copy held by another team's pod: its per-copy job is ``busy`` and the multi-slice job, which needs both
    copies, is not run (``busy``, the copy and its holder named); nothing of it is applied."""
    Path("raytpu.yaml").write_text(MULTISLICE_CONFIG)
    fake.tpu_node("train-0", "gke-train-0-a", holder="research-job-worker-0")
    fake.tpu_node("train-1", "gke-train-1-a")
    for name in ("smoke-train-1-m2", "smoke-serve-0-m2", "smoke-train-1-m3", "smoke-serve-0-m3"):
        fake.job(name, ("Complete", "SUCCEEDED"), log=verdict_line(name))
    assert main("smoke", "--stack", STACK, "--run-id", "m2", "--report", "out", "--timeout-s", "20") == 0
    err = capsys.readouterr().err
    assert [m["metadata"]["name"] for m in fake.applied()] == ["smoke-train-1-m2", "smoke-serve-0-m2"]
    why = ("spans 2 copies of slice train over DCN and only 1 of 2 are free "
           "(busy: train-0: team-a/research-job-worker-0)")
    assert f"RayJob smoke-train-dcn-m2: not run ({why})" in err
    doc = json.loads((tmp_path / "out" / "smoke.json").read_text())
    dcn = doc["slices"][-1]
    assert dcn["job"] == "smoke-train-dcn-m2" and dcn["state"] == "busy"
    assert dcn["checks"][0]["detail"] == f"not run: {why}"
    assert main("smoke", "--stack", STACK, "--run-id", "m3", "--timeout-s", "20", "--strict") == 1  # only for busy
    assert "smoke-train-dcn-m3 busy" in capsys.readouterr().err


def test_smoke_dry_run_prints_the_multi_slice_job_last_behind_its_policy(
        fake: Cluster, capsys: pytest.CaptureFixture[str]) -> None:
    Path("raytpu.yaml").write_text(MULTISLICE_CONFIG)
    assert main("smoke", "--stack", STACK, "--run-id", "d2", "--dry-run") == 0
    docs = list(yaml.safe_load_all(capsys.readouterr().out))
    jobs = docs[1::2]
    assert [j["metadata"]["name"] for j in jobs] == ["smoke-train-0-d2", "smoke-train-1-d2", "smoke-serve-0-d2",
                                                     "smoke-train-dcn-d2"]
    assert docs[-2] == kuberay.network_policy(jobs[-1], parse(MULTISLICE_CONFIG))
    assert fake.server.requests == []


def test_submit_smoke_on_a_held_copy_applies_nothing_and_names_the_holder(
        fake: Cluster, capsys: pytest.CaptureFixture[str]) -> None:
    """As ``raytpu smoke`` does: a copy whose nodes run another TPU pod (here a RayService's worker) gets no smoke
    RayJob, whose pods would stay Pending; exit 1, nothing applied."""
    fake.tpu_node("train-0", "gke-train-0-a")
    fake.tpu_node("train-1", "gke-train-1-a", holder="serve-raycluster-tpu-worker-0")
    assert main("submit", "smoke", "--stack", STACK, "--run-id", "h1") == 1
    err = capsys.readouterr().err
    assert "train-1 by team-a/serve-raycluster-tpu-worker-0" in err and "would stay Pending" in err
    assert fake.applied() == [] and not fake.server.of("PATCH")


BATCH_ON_SERVE = CONFIG.replace("  - {name: serve, kind: serve, slice: serve}\n", (
    "  - {name: serve, kind: serve, slice: serve}\n"
    "  - {name: offline, kind: batch, slice: serve, input: gs://my-bucket/in.jsonl, output: gs://my-bucket/out}\n"))
"""A batch job on the slice the RayService serves from (validate warns; submit must refuse while it holds it)."""


@pytest.mark.parametrize(("workload", "config", "pool", "holder"), [
    ("train", CONFIG, "train-1", "research-job-worker-0"),
    ("train", CONFIG, "train-0", "serve-raycluster-tpu-worker-0"),
    ("offline", BATCH_ON_SERVE, "serve-0", "serve-raycluster-tpu-worker-0"),
])
def test_submit_any_job_on_a_held_copy_applies_nothing_and_names_the_holder(
        fake: Cluster, capsys: pytest.CaptureFixture[str], workload: str, config: str, pool: str,
        holder: str) -> None:
    """Every job kind, not only smoke: a train (both copies) or batch RayJob whose copy another TPU pod holds would
    sit Pending until its preRunningDeadlineSeconds; exit 1, nothing applied, the holder named."""
    Path("raytpu.yaml").write_text(config)
    fake.tpu_node(pool, f"gke-{pool}-a", holder=holder)
    assert main("submit", workload, "--stack", STACK, "--run-id", "h2") == 1
    err = capsys.readouterr().err
    assert f"{pool} by team-a/{holder}" in err and "would stay Pending" in err and "Traceback" not in err
    assert fake.applied() == [] and not fake.server.of("PATCH")


def test_submit_train_on_a_slice_with_a_free_copy_per_slice_spanned_applies_it(
        fake: Cluster, capsys: pytest.CaptureFixture[str]) -> None:
    """A train run reserving 1 of 2 copies goes ahead while the other copy is held: one free copy is enough."""
    Path("raytpu.yaml").write_text(CONFIG.replace("{name: train, kind: train, slice: train}",
                                                  "{name: train, kind: train, slice: train, slices: 1}"))
    fake.tpu_node("train-0", "gke-train-0-a", holder="serve-raycluster-tpu-worker-0")
    fake.tpu_node("train-1", "gke-train-1-a")
    assert main("submit", "train", "--stack", STACK, "--run-id", "h3") == 0
    assert [m["metadata"]["name"] for m in fake.applied()] == ["train-h3"]


@pytest.mark.parametrize(("workloads", "warned"), [
    ("  - {name: smoke, kind: smoke, slice: serve}\n  - {name: serve, kind: serve, slice: serve}\n", True),
    ("  - {name: smoke, kind: smoke, slice: serve}\n", False),
    ("  - {name: smoke, kind: smoke, slice: train}\n  - {name: serve, kind: serve, slice: serve}\n", False),
])
def test_validate_flags_a_job_on_a_slice_whose_every_copy_a_rayservice_holds(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], workloads: str, warned: bool) -> None:
    path = tmp_path / "raytpu.yaml"
    path.write_text(CONFIG.split("workloads:\n")[0] + "workloads:\n" + workloads)
    assert main("validate", str(path)) == 0
    out, err = capsys.readouterr()
    flagged = "every copy of slice serve is held by RayService 'serve'" in err
    assert flagged is warned, err
    assert ("raytpu submit smoke" not in out) is warned, out


# ---------------------------------------------------------------------- submit --local


LOCAL_CONFIG = CONFIG.replace("{name: train, kind: train, slice: train}",
                              "{name: pretrain, kind: train, slice: train, slices: 2, image: example.com/team:t1}")
"""A train workload with its own name and image, whose run spans both copies of its slice."""


def test_submit_local_runs_the_workload_under_its_own_name_and_image(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """``--local`` gives the job the config's workload (name, image, slices) moved onto the emulated slices, as its
    RayJob gets it on GKE; a recorded two-slice cluster (its state file only: nothing runs)."""
    from raytpu.core.specs.spec import WORKLOAD_ENV
    from raytpu.local.running import jobs as local_jobs
    from raytpu.local.slice import state as local_state

    config = tmp_path / "raytpu.yaml"
    config.write_text(LOCAL_CONFIG)
    cluster = local_state.LocalCluster(str(tmp_path), "/tmp/none", "127.0.0.1:1",
                                       parse(LOCAL_CONFIG).slice_named("train").plan.to_json(), ["s0", "s1"])
    cluster.save()
    given: list[WorkloadSpec | None] = []

    def submit_job(_cluster: local_state.LocalCluster, kind_name: str, *extra: str, **options: Any) -> str:
        given.append(options.get("work"))
        return "SUCCEEDED"

    monkeypatch.setattr(local_jobs, "submit_job", submit_job)
    assert main("submit", "pretrain", "--local", "--config", str(config), "--dir", str(tmp_path),
                "--run-id", "r1") == 0
    assert "Ray job pretrain-r1: SUCCEEDED" in capsys.readouterr().err
    [work] = given
    assert work is not None and (work.name, work.image, work.slices) == ("pretrain", "example.com/team:t1", 2)
    assert work.slice == cluster.slice_spec
    assert json.loads(work.workload_env()[WORKLOAD_ENV])["name"] == "pretrain"


def test_the_local_job_spec_keeps_the_workloads_own_fields_on_the_emulated_slices(tmp_path: Path) -> None:
    """:func:`raytpu.local.slice.from_config.job_workload`: a single-slice job keeps no ``slices`` (one copy per
    run)."""
    from raytpu.local.slice.from_config import job_workload
    from raytpu.local.slice.state import LocalCluster

    spec = parse(LOCAL_CONFIG)
    cluster = LocalCluster(str(tmp_path), "/tmp/none", "127.0.0.1:1", spec.slice_named("train").plan.to_json(),
                           ["s0", "s1"])
    smoke = job_workload(cluster, spec.workload("smoke"))
    assert (smoke.name, smoke.image, smoke.slices, smoke.slice) == ("smoke", "example.com/ray-tpu:smoke", None,
                                                                     cluster.slice_spec)
    train = job_workload(cluster, spec.workload("pretrain"))
    assert (train.name, train.slices, train.multislice) == ("pretrain", 2, True)
    assert WorkloadSpec.from_env(train.workload_env()) == train  # what the job reads back in RAYTPU_WORKLOAD


BATCH_CONFIG = CONFIG + "  - {name: label, kind: batch, slice: serve, input: prompts.jsonl, output: answers}\n"
"""A batch workload (the fourth: ``workloads[3]``) whose local paths are relative to where ``raytpu`` runs."""


@pytest.fixture
def batch_local(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> list[tuple[tuple[str, ...], WorkloadSpec]]:
    """A folder (the current one) with :data:`BATCH_CONFIG`, its input, a model folder ``model`` and a recorded
    emulated slice of the batch workload's shape (its state file only: nothing runs); returns what
    ``local_jobs.submit_job`` is given."""
    from raytpu.local.running import jobs as local_jobs
    from raytpu.local.running import submission as submission_local
    from raytpu.local.slice import state as local_state

    monkeypatch.chdir(tmp_path)
    (tmp_path / "raytpu.yaml").write_text(BATCH_CONFIG)
    (tmp_path / "model").mkdir()
    (tmp_path / "model" / "config.json").write_text("{}")  # a model folder holds its config (issue 68 item 4)
    (tmp_path / "prompts.jsonl").write_text('{"prompt": "hi"}\n')  # a local input must exist (issue 39.3)
    local_state.LocalCluster(str(tmp_path), "/tmp/none", "127.0.0.1:1",
                             parse(BATCH_CONFIG).slice_named("serve").plan.to_json(), ["s0"]).save()
    given: list[tuple[tuple[str, ...], WorkloadSpec]] = []

    def submit_job(_cluster: local_state.LocalCluster, kind_name: str, *extra: str, **options: Any) -> str:
        assert kind_name == "batch"
        given.append((extra, options["work"]))
        return "SUCCEEDED"

    monkeypatch.setattr(local_jobs, "submit_job", submit_job)
    monkeypatch.setattr(submission_local, "has_vllm", lambda: True)  # the serve environment's, not this one's
    return given


def test_submit_local_runs_a_batch_workload_on_its_engines_cpu_twin(
        tmp_path: Path, batch_local: list[tuple[tuple[str, ...], WorkloadSpec]]) -> None:
    """The batch program gets ``--cpu-model`` (absolute) as ``raytpu demo --data`` passes it, and the workload's own
    spec with its local paths made absolute (the job runs from a folder of Ray's choosing)."""
    assert main("submit", "label", "--local", "--dir", str(tmp_path), "--run-id", "r1", "--cpu-model", "model") == 0
    [(extra, work)] = batch_local
    assert extra == ("--cpu-model", str(tmp_path / "model"))
    assert (work.name, work.kind.name, work.input, work.output) == (
        "label", "batch", str(tmp_path / "prompts.jsonl"), str(tmp_path / "answers"))
    assert WorkloadSpec.from_env(work.workload_env()) == work


def test_submit_local_replaces_a_batch_output_only_with_overwrite(
        tmp_path: Path, capsys: pytest.CaptureFixture[str],
        batch_local: list[tuple[tuple[str, ...], WorkloadSpec]]) -> None:
    """An ``output`` that holds something: exit 2 naming the field as ``validate`` does, nothing submitted, the
    user's file untouched; with ``--overwrite`` the program is told to replace it."""
    mine = tmp_path / "answers" / "part-0.parquet"
    mine.parent.mkdir()
    mine.write_bytes(b"the user's results")
    argv = ("submit", "label", "--local", "--dir", str(tmp_path), "--cpu-model", "model")
    assert main(*argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: workloads[3].output: 'answers' exists and would be overwritten; valid: ")
    assert "--overwrite" in err and "Traceback" not in err and len(err.splitlines()) == 1
    assert batch_local == [] and mine.read_bytes() == b"the user's results"
    assert main(*argv, "--overwrite") == 0
    [(extra, _work)] = batch_local
    assert extra == ("--cpu-model", str(tmp_path / "model"), "--overwrite")


@pytest.mark.parametrize(("argv", "message"), [
    (("label", "--local"), "error: --cpu-model: is required for a batch workload on the emulated slice"),
    (("label", "--local", "--cpu-model", "nope"), "error: --cpu-model: 'nope' is not a folder; valid: a local model"),
    (("train", "--local", "--cpu-model", "model"),
     "error: --cpu-model: is for a batch workload; train is a train workload; valid: no --cpu-model for it"),
    (("smoke", "--local", "--overwrite"),
     "error: --overwrite: is for a batch workload; smoke is a smoke workload; valid: no --overwrite for it"),
    (("label", "--stack", STACK, "--overwrite"),
     "error: --overwrite: is for a batch workload run on the emulated slice; valid: --overwrite with --local"),
    (("label", "--stack", STACK, "--cpu-model", "model"), "error: --cpu-model: is for a batch workload run on the "),
])
def test_submit_local_batch_flags_refused_where_they_make_no_sense(
        tmp_path: Path, capsys: pytest.CaptureFixture[str],
        batch_local: list[tuple[tuple[str, ...], WorkloadSpec]], argv: tuple[str, ...], message: str) -> None:
    assert main("submit", *argv, "--dir", str(tmp_path)) == 2
    err = capsys.readouterr().err
    assert err.startswith(message) and "Traceback" not in err and len(err.splitlines()) == 1, err
    assert batch_local == []


def test_the_local_job_spec_carries_a_train_workloads_dataset(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``dataset`` travels to the emulated run (absolute when local); a ``gs://`` one as written."""
    from raytpu.local.slice.from_config import job_workload
    from raytpu.local.slice.state import LocalCluster

    monkeypatch.chdir(tmp_path)
    spec = parse(LOCAL_CONFIG.replace("slices: 2, image", "slices: 2, dataset: data/train.parquet, image"))
    cluster = LocalCluster(str(tmp_path), "/tmp/none", "127.0.0.1:1", spec.slice_named("train").plan.to_json(),
                           ["s0", "s1"])
    assert job_workload(cluster, spec.workload("pretrain")).dataset == str(tmp_path / "data" / "train.parquet")
    remote = parse(LOCAL_CONFIG.replace("slices: 2, image", "slices: 2, dataset: gs://my-data/train.parquet, image"))
    assert job_workload(cluster, remote.workload("pretrain")).dataset == "gs://my-data/train.parquet"


def test_submit_local_batch_without_vllm_here_says_which_environment(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
        batch_local: list[tuple[tuple[str, ...], WorkloadSpec]]) -> None:
    """The job runs the submitting interpreter: without vLLM there it would fail on the slice; exit 1 up front."""
    from raytpu.local.running import submission as submission_local

    monkeypatch.setattr(submission_local, "has_vllm", lambda: False)
    assert main("submit", "label", "--local", "--dir", str(tmp_path), "--cpu-model", "model") == 1
    err = capsys.readouterr().err
    assert "vLLM is not installed" in err and ".venv-serve/bin/raytpu submit NAME --local" in err
    assert batch_local == []


def test_submit_local_prints_nothing_itself_and_hands_the_command_its_lines_and_its_end(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
        batch_local: list[tuple[tuple[str, ...], WorkloadSpec]]) -> None:
    """Issue 43 item 3: library code streams the driver's log and its progress to the command's sinks and hands it the
    followed run; it writes nothing to the console itself."""
    from raytpu.local.running import jobs as local_jobs
    from raytpu.local.running.submission import submit_local
    from raytpu.local.slice import state as local_state
    from raytpu.runs.following import FollowedRun, Streams
    from raytpu.teamcode.prepared import TeamCode

    def submit_job(_cluster: local_state.LocalCluster, _kind_name: str, *_extra: str, **options: Any) -> str:
        options["sink"]("a driver line")
        return "SUCCEEDED"

    monkeypatch.setattr(local_jobs, "submit_job", submit_job)
    out: list[str] = []
    err: list[str] = []
    ended: list[FollowedRun] = []
    work = parse(BATCH_CONFIG).workload("label")
    assert submit_local(work, directory=tmp_path, run_id="r1", timeout_s=5.0, streams=Streams(out.append, err.append,
                        ended.append), cpu_model="model", code=TeamCode("workloads[3]")) == 0
    assert capsys.readouterr() == ("", "")
    assert (out, err) == (["a driver line"], ["Ray job label-r1: SUCCEEDED"])
    [run] = ended
    assert (run.name, run.problem, run.log) == ("label-r1", None, ("a driver line",))


# ---------------------------------------------------------------------- a team's code (issue 38)


TEAM_CONFIG = CONFIG + """\
  - {name: pretrain, kind: train, slice: train, code: ./src, train_loop: 'lm.train:train_loop',
     train_config: {steps: 3}}
"""


def _team_folder(tmp_path: Path) -> None:
    (tmp_path / "raytpu.yaml").write_text(TEAM_CONFIG)
    (tmp_path / "src" / "lm").mkdir(parents=True)
    (tmp_path / "src" / "lm" / "train.py").write_text("def train_loop(config):\n    pass\n")


def test_a_team_dry_run_shows_the_rayjob_with_its_code_and_uploads_nothing(
        fake: Cluster, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    from raytpu.teamcode.bundle import bundle

    _team_folder(tmp_path)
    monkeypatch.setattr(google_api, "upload_code", lambda *a: pytest.fail("--dry-run uploaded"))
    assert main("submit", "pretrain", "--stack", STACK, "--dry-run", "--run-id", "r7") == 0
    out, err = capsys.readouterr()
    job = list(yaml.safe_load_all(out))[-1]
    made = bundle("code", tmp_path / "src", "pretrain")
    assert yaml.safe_load(job["spec"]["runtimeEnvYAML"])["working_dir"] == names.working_dir_uri(made.object_name)
    assert f"code: gs://my-bucket/code/{made.object_name} (1 files; not uploaded: --dry-run)" in err
    size = (tmp_path / "src" / "lm" / "train.py").stat().st_size
    assert f"{size:>14,}  lm/train.py" in err  # every file and its size
    assert fake.server.requests == []


def test_a_secret_the_cluster_lacks_is_exit_2_naming_it_before_anything_is_applied(
        fake: Cluster, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    """A ``secretKeyRef`` to a missing Secret or key holds every Ray pod in CreateContainerConfigError until the
    RayJob's deadline, its slice held (Source: Kubernetes v1 SecretKeySelector: ``optional`` unset, both must exist)."""
    _team_folder(tmp_path)
    (tmp_path / "raytpu.yaml").write_text(TEAM_CONFIG.replace(
        "train_config: {steps: 3}}", "train_config: {steps: 3}, secrets: {WANDB_API_KEY: wandb-key}}"))
    monkeypatch.setattr(google_api, "upload_code", lambda *a: pytest.fail("uploaded before the secret check"))
    assert main("submit", "pretrain", "--stack", STACK, "--run-id", "s1") == 2
    err = capsys.readouterr().err
    assert ("error: workloads[3].secrets.WANDB_API_KEY: 'wandb-key' names no Secret in namespace ray; valid: create "
            "it first: kubectl -n ray create secret generic wandb-key --from-literal=value=...") in err
    fake.server.put({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "wandb-key"},
                     "data": {"WANDB_API_KEY": "c2VjcmV0"}})
    assert main("submit", "pretrain", "--stack", STACK, "--run-id", "s1") == 2
    err = capsys.readouterr().err
    assert "workloads[3].secrets.WANDB_API_KEY: 'wandb-key' has no key value (it holds WANDB_API_KEY)" in err
    assert "Traceback" not in err and fake.applied() == [] and fake.applied("networkpolicies") == []


def test_a_teams_code_is_uploaded_after_the_checks_and_before_the_rayjob(
        fake: Cluster, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    """The upload itself is tested at the GCS boundary (tests/test_team_code.py); here, its place among the calls."""
    _team_folder(tmp_path)
    uploads: list[tuple[str, int]] = []

    def upload(uri: str, data: bytes) -> bool:
        uploads.append((uri, len(fake.server.api_requests())))
        return True

    monkeypatch.setattr(google_api, "upload_code", upload)
    assert main("submit", "pretrain", "--stack", STACK, "--run-id", "r8") == 0
    [(uri, calls_before)] = uploads
    assert uri.startswith("gs://my-bucket/code/pretrain-") and uri.endswith(".zip")
    before = fake.server.api_requests()[:calls_before]  # the CRD, free slice copies, the name is free: reads only
    assert before and {r.method for r in before} == {"GET"}
    assert any(r.path.endswith("/rayjobs/pretrain-r8") for r in before)
    assert "uploaded" in capsys.readouterr().err


def test_a_train_loop_runs_report_carries_its_last_metrics_and_checkpoint(
        fake: Cluster, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    """``--wait --report``: what the team's function last reported, from the driver's summary line in the
    submitter's log (the program that prints it runs for real in tests/test_team_slice.py)."""
    from raytpu.workloads.train import MARKER

    _team_folder(tmp_path)
    monkeypatch.setattr(google_api, "upload_code", lambda uri, data: True)
    summary = {"ok": True, "train_loop": "lm.train:train_loop", "metrics": {"step": 3, "loss": 0.25}, "reports": 3,
               "checkpoint": "/mnt/gcs/checkpoints/pretrain-r9/checkpoint_1", "stamps": [],
               "attempts": [{"attempt": 1, "resumed": False, "started_wall": 1.0, "first_report_wall": 2.0,
                             "reports": 3}]}
    fake.job("pretrain-r9", ("Running", "RUNNING"), ("Complete", "SUCCEEDED"),
             log=f"training\n{MARKER} {json.dumps(summary)}\n")
    report_path = tmp_path / "out" / "pretrain.json"
    assert main("submit", "pretrain", "--stack", STACK, "--run-id", "r9", "--wait", "--report", str(report_path)) == 0
    written = json.loads(report_path.read_text())
    assert written["run"] == "pretrain-r9"
    assert written["train"] == {key: summary[key] for key in ("ok", "train_loop", "metrics", "reports", "checkpoint",
                                                              "attempts")}


def test_a_serve_application_that_failed_to_deploy_is_named_at_once(
        fake: Cluster, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 71 item 4: KubeRay v1.7.0 carries Serve's DEPLOY_FAILED and its message per application
    (``status.pendingServiceStatus.applicationStatuses``, ray.io_rayservices.yaml; Ray 2.60
    ``ray.serve.schema.ApplicationStatus``): ``--wait`` fails on it, quoting the message, instead of waiting out its
    timeout and advising a larger one."""
    monkeypatch.setattr(gke, "CHECK_EVERY_S", 0.2)
    monkeypatch.setattr(gke, "FAILED_GRACE_S", 1.0)  # Serve may recover a DEPLOY_FAILED: it must last (60 s)
    message = ("Traceback (most recent call last):\n  File \"lm/serve.py\", line 3\nModuleNotFoundError: No module "
               "named 'optax'")

    def drive() -> None:
        deadline = time.monotonic() + 20
        while fake.server.get_object("rayservices", "serve") is None and time.monotonic() < deadline:
            time.sleep(0.02)
        fake.server.set_status("rayservices", "serve", {
            "serviceStatus": "", "numServeEndpoints": 0, "pendingServiceStatus": {
                "rayClusterName": "serve-x7k2p",
                "applicationStatuses": {"llm": {"status": "DEPLOY_FAILED", "message": message}}},
            "conditions": [{"type": "Ready", "status": "False", "reason": "Initializing"}]})

    thread = threading.Thread(target=drive, daemon=True)
    thread.start()
    fake.threads.append(thread)
    started = time.monotonic()
    assert main("submit", "serve", "--stack", STACK, "--wait", "--timeout-s", "60") == 1
    assert time.monotonic() - started < 30  # not its 60 s timeout
    err = capsys.readouterr().err
    last = err.splitlines()[-1]
    assert last.startswith("error: serve: Serve application llm DEPLOY_FAILED: ModuleNotFoundError: No module named "
                           "'optax'; valid: fix what the message names")
    assert "a larger --timeout-s" not in last and "Traceback" not in err.replace("Traceback (most recent call", "")


def test_a_service_ready_before_its_apps_run_is_not_done() -> None:
    """KubeRay's Ready counts serve endpoints, which exist before any replica runs (reviewer's finding)."""
    def service(app_status: str) -> dict[str, Any]:
        return {"status": {"conditions": [{"type": "Ready", "status": "True"}],
                           "activeServiceStatus": {"applicationStatuses": {"app": {"status": app_status}}}}}

    assert gke.service_ready(service("DEPLOYING")) and not gke.apps_running(service("DEPLOYING"))
    assert gke.apps_running(service("RUNNING"))


def test_failed_applications_reads_both_clusters_statuses() -> None:
    service = {"status": {"activeServiceStatus": {"applicationStatuses": {"a": {"status": "RUNNING"}}},
                          "pendingServiceStatus": {"applicationStatuses": {
                              "b": {"status": "DEPLOY_FAILED", "message": "x\n  y"}, "c": {"status": "UNHEALTHY"}}}}}
    assert gke.failed_applications(service) == [("b", "x\n  y")]
    generic = {"status": {"pendingServiceStatus": {"applicationStatuses": {"app": {
        "status": "DEPLOY_FAILED", "message": "Failed to update the deployments ['Model'].",
        "serveDeploymentStatuses": {"Model": {"status": "DEPLOY_FAILED", "message": "Replica failed to start: "
                                              "ValueError: bad shape"}}}}}}}
    [(app, said)] = gke.failed_applications(generic)  # the deployment's own message, where the app's only names it
    assert app == "app" and "ValueError: bad shape" in said
    assert gke.failed_applications({}) == []


@pytest.mark.parametrize(("message", "said"), [
    ("Traceback (most recent call last):\n  File \"x.py\", line 1\nImportError: cannot import name 'app'",
     "ImportError: cannot import name 'app'"),
    ("ray.exceptions.RayActorError: The actor died\n", "ray.exceptions.RayActorError: The actor died"),
    ("Deploying app failed: a deployment asks {'TPU': 16}, more than any node has", "Deploying app failed: a "
     "deployment asks {'TPU': 16}, more than any node has"),
    ("Traceback (most recent call last):\nray.exceptions.RayTaskError(RuntimeFailure): build failed\n  File \"b.py\"\n"
     "raytpu.core.common.errors.RuntimeFailure: deployment Huge asks for 8 TPU",
     "raytpu.core.common.errors.RuntimeFailure: deployment Huge asks for 8 TPU"),
    ("", ""), ("ValueError: " + "x" * 1000, "ValueError: " + "x" * 288 + "..."),
])
def test_a_failed_apps_message_comes_down_to_its_exception(message: str, said: str) -> None:
    """What ``submit --wait`` and ``local serve`` quote of Serve's message (a traceback): one bounded line."""
    from raytpu.core.common.errors import exception_line

    assert exception_line(message) == said


@pytest.mark.parametrize("command", [("submit", "train"), ("smoke",)])
def test_an_image_of_another_registry_is_not_run_on_this_stack(
        fake: Cluster, capsys: pytest.CaptureFixture[str], command: tuple[str, ...]) -> None:
    """Issue 71 item 10: the record beside the config is per folder; a second config's (another project's) images
    there are refused on this stack (its ``registry`` output), exit 2 naming the command that builds them, before any
    request: its pods would sit in ImagePullBackOff until their deadline."""
    outputs = json.loads(Path("outputs.json").read_text())
    outputs[STACK]["registry"] = "us-east5-docker.pkg.dev/my-ml-project/raytpu"  # the record's are fixture-project's
    Path("outputs.json").write_text(json.dumps(outputs))
    assert main(*command, "--stack", STACK, "--run-id", "x1") == 2
    err = capsys.readouterr().err
    assert "has no built digest for this stack" in err and f"raytpu images build --stack {STACK}" in err, err
    assert "Traceback" not in err
    assert [r for r in fake.server.requests if r.method != "GET"] == []  # nothing applied


def test_a_rayjob_kuberay_refused_ends_the_wait_at_once(fake: Cluster, capsys: pytest.CaptureFixture[str]) -> None:
    """The reviewer's finding: KubeRay v1.7.0 sets ``jobDeploymentStatus: ValidationFailed`` before any ``jobStatus``
    and never requeues it (RayJobReconciler.Reconcile, validateRayJob): the wait ends there, exit 1."""
    fake.job("train-v1", ("ValidationFailed", ""))
    started = time.monotonic()
    assert main("submit", "train", "--stack", STACK, "--wait", "--run-id", "v1", "--timeout-s", "60") == 1
    assert time.monotonic() - started < 30
    err = capsys.readouterr().err
    assert "RayJob ended ValidationFailed" in err and "Traceback" not in err
