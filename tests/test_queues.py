"""Issue 69 item 4: ``raytpu runs --team`` and ``submit --wait`` say where a team's run stands in Kueue's queue: its
queue, position, priority and why Kueue has not admitted it, and the team's chips in use against its quota.

At the Kubernetes API boundary (the loopback API server of tests/kube_server.py): the Workloads, LocalQueue and
ClusterQueue are written as Kueue v0.19.2 writes them (each fixture validated against its vendored CRD), since no
Kueue runs here.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kube_server import KubeApiServer, ServiceAccountKey, TlsFiles, forbidden, serving, use_adc
from kueue_crd import schema_errors

from raytpu import cli
from raytpu.cluster import queues
from raytpu.cluster.kube.kube_client import KubeClient
from raytpu.cluster.kube_timeline import KubePhases
from raytpu.cluster.outputs import StackOutputs
from raytpu.cluster.submission import StackRun
from raytpu.config import parse
from raytpu.core.manifests import kueue
from raytpu.images import team

pytestmark = pytest.mark.unit

CONFIG = """\
project: my-ml-project
region: us-east5
cluster: {name: ray-tpu}
storage: {bucket: my-bucket}
slices: [{name: train, generation: v6e, topology: 4x4, zone: us-east5-b}]
teams: [{name: research, quota: {train: 16}}]
workloads:
  - {name: pretrain, kind: train, slice: train, team: research, priority: low}
  - {name: sweep, kind: train, slice: train, team: research, priority: high}
"""
STACK = "ray-tpu-cluster"
TEAM_NS = "raytpu-research"
OUTPUTS = {"cluster_name": "ray-tpu", "location": "us-east5", "project": "my-ml-project", "namespace": "ray",
           "service_account": "ray-tpu-ray", "bucket": "my-bucket"}
QUOTA_MESSAGE = ("couldn't assign flavors to pod set tpu: insufficient unused quota for google.com/tpu in flavor "
                 "raytpu-train, 16 more needed")


def team_job(server: KubeApiServer, workload: str, run: str, created: str) -> dict[str, Any]:
    """The RayJob ``raytpu submit`` applies for a team's ``workload``, as the server keeps it (suspended)."""
    spec = parse(CONFIG)
    outputs = StackOutputs(**OUTPUTS, endpoint=server.url, ca_certificate="")
    work = spec.workload(workload)
    job = StackRun.of(spec, work, outputs, STACK, run, team.prepare(spec, work)).manifest({}, None, preview=True)
    job["metadata"]["creationTimestamp"] = created
    return server.put(job, namespace=TEAM_NS)


def workload_of(job: dict[str, Any], priority: str, value: int, *, admitted: bool = False,
                checks: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """The Workload Kueue v0.19.2 makes for ``job`` (``jobframework``: named ``rayjob-<name>-<hash>``, labelled with
    the job's UID), pending on quota unless ``admitted``."""
    name = job["metadata"]["name"]
    condition = ({"type": "Admitted", "status": "True", "reason": "Admitted", "message": "The workload is admitted"}
                 if admitted else
                 {"type": "QuotaReserved", "status": "False", "reason": "Pending", "message": QUOTA_MESSAGE})
    status: dict[str, Any] = {"conditions": [{**condition, "lastTransitionTime": "2026-01-01T00:00:05Z"}]}
    if checks:
        status["admissionChecks"] = checks
    return {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "Workload",
            "metadata": {"name": f"rayjob-{name}-3f2a1", "namespace": TEAM_NS,
                         "creationTimestamp": job["metadata"]["creationTimestamp"],
                         "labels": {queues.JOB_UID_LABEL: job["metadata"]["uid"]}},
            "spec": {"queueName": TEAM_NS, "priority": value,
                     "priorityClassRef": {"group": "kueue.x-k8s.io", "kind": "WorkloadPriorityClass",
                                          "name": f"raytpu-{priority}"},
                     "podSets": [{"name": "head", "count": 1,
                                  "template": {"spec": {"containers": [{"name": "ray-head", "image": "x"}]}}}]},
            "status": status}


def as_written(obj: dict[str, Any]) -> dict[str, Any]:
    """``obj`` without the metadata the API server sets (what its CRD's schema judges)."""
    meta = {k: v for k, v in obj["metadata"].items() if k in ("name", "namespace", "labels")}
    return {**obj, "metadata": meta}


def local_queue(used: int, pending: int) -> dict[str, Any]:
    return {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "LocalQueue",
            "metadata": {"name": TEAM_NS, "namespace": TEAM_NS}, "spec": {"clusterQueue": TEAM_NS},
            "status": {"pendingWorkloads": pending, "flavorsUsage": [
                {"name": "raytpu-train", "resources": [{"name": "google.com/tpu", "total": used}]}]}}


@pytest.fixture
def api(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, tls: TlsFiles,
        sa_key: ServiceAccountKey) -> Iterator[KubeApiServer]:
    """Two queued runs of team research (the older at low priority), its LocalQueue holding all 16 of its chips,
    and its ClusterQueue as the kit's cluster stack makes it."""
    with serving(tls, sa_key) as server:
        (tmp_path / "outputs.json").write_text(json.dumps(
            {STACK: {**OUTPUTS, "endpoint": server.url, "ca_certificate": tls.ca_b64}}))
        use_adc(server, monkeypatch, tmp_path)
        low = team_job(server, "pretrain", "r1", "2026-01-01T00:00:00Z")
        high = team_job(server, "sweep", "r2", "2026-01-01T00:10:00Z")
        objects = [workload_of(low, "low", 100), workload_of(high, "high", 10000), local_queue(16, 2),
                   next(o for o in kueue.objects(parse(CONFIG)) if o["kind"] == "ClusterQueue")]
        for obj in objects:
            assert schema_errors(as_written(obj)) == [], obj["kind"]
            server.put(obj, namespace=TEAM_NS)
        yield server


def test_runs_of_a_team_say_where_each_waits_and_the_queues_use(api: KubeApiServer,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["runs", "--stack", STACK, "--team", "research"]) == 0
    out = capsys.readouterr().out
    assert ("sweep-r2: queued in raytpu-research at priority high, 1 of 2 waiting: " + QUOTA_MESSAGE) in out
    assert ("pretrain-r1: queued in raytpu-research at priority low, 2 of 2 waiting: " + QUOTA_MESSAGE) in out
    assert "queue raytpu-research: 16 of 16 chips of raytpu-train in use, 2 waiting" in out
    paths = {r.path for r in api.api_requests() if "/namespaces/" in r.path}
    assert paths and all(f"/namespaces/{TEAM_NS}/" in p for p in paths), paths  # its namespace only

    assert cli.main(["runs", "--stack", STACK, "--team", "research", "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)
    queued = {r["run"]: r["queue"] for r in shown["runs"]}
    assert queued["pretrain-r1"] == {"queue": TEAM_NS, "priority": "low", "position": 2, "waiting": 2,
                                     "why": QUOTA_MESSAGE}
    assert shown["usage"] == ["queue raytpu-research: 16 of 16 chips of raytpu-train in use, 2 waiting"]


def test_a_member_without_cluster_rights_sees_the_use_without_the_quota(
        api: KubeApiServer, capsys: pytest.CaptureFixture[str]) -> None:
    """A team member's Role is the namespace's: the cluster-scoped ClusterQueue (the quota) is forbidden."""
    api.fail("GET", "/clusterqueues/", 403, forbidden("get", "clusterqueues", "kueue.x-k8s.io", TEAM_NS,
                                                      "container.thirdPartyObjects.get"))
    assert cli.main(["runs", "--stack", STACK, "--team", "research"]) == 0
    assert "queue raytpu-research: 16 chips of raytpu-train in use, 2 waiting" in capsys.readouterr().out


def test_submit_wait_says_the_queue_at_once_then_every_minute(api: KubeApiServer) -> None:
    outputs = StackOutputs(**OUTPUTS, endpoint=api.url, ca_certificate=api.tls.ca_b64)
    now = [0.0]
    with KubeClient(outputs.endpoint, outputs.ca_certificate, TEAM_NS) as client:
        job = client.get("RayJob", "pretrain-r1")
        assert job is not None
        phases = KubePhases(client, "pretrain-r1", job, multi_host=True, clock=lambda: now[0])
        assert phases.queue_line() == (f"pretrain-r1: queued in {TEAM_NS} at priority low, 2 of 2 waiting: "
                                       f"{QUOTA_MESSAGE}")
        now[0] = 30.0
        assert phases.queue_line() is None  # not again within the minute
        api.put(workload_of(job, "low", 100, admitted=True), namespace=TEAM_NS)
        now[0] = 61.0
        assert phases.queue_line() is None  # admitted: Kueue has nothing more to say
        now[0] = 200.0
        assert phases.queue_line() is None


def test_a_pending_admission_check_is_what_a_run_waits_for() -> None:
    """Queued provisioning: the ProvisioningRequest asks GKE for the slice; its check stays Pending until GKE has it.
    Source: Kueue v0.19.2 apis/kueue/v1beta2 ``AdmissionCheckState`` (Pending, Ready, Retry, Rejected)."""
    job = {"metadata": {"name": "pretrain-r1", "uid": "u1", "creationTimestamp": "2026-01-01T00:00:00Z"}}
    check = {"name": kueue.PROVISIONING_CHECK, "state": "Pending", "lastTransitionTime": "2026-01-01T00:00:05Z",
             "message": "Waiting for resources. Currently there are not enough resources available to fulfill the "
                        "request."}
    workload = workload_of(job, "normal", 1000, checks=[check])
    assert schema_errors(as_written(workload)) == []
    line = queues.queue_states([workload])["u1"].line()
    assert f"admission check {kueue.PROVISIONING_CHECK} Pending: Waiting for resources" in line


def test_the_queue_order_is_kueues_priority_then_age() -> None:
    """Source: Kueue v0.19.2 pkg/cache/queue ``queueOrderingFunc``."""
    def job(uid: str, created: str) -> dict[str, Any]:
        return {"metadata": {"name": uid, "uid": uid, "creationTimestamp": created}}

    found = queues.queue_states([
        workload_of(job("old-low", "2026-01-01T00:00:00Z"), "low", 100),
        workload_of(job("new-high", "2026-01-01T02:00:00Z"), "high", 10000),
        workload_of(job("old-high", "2026-01-01T01:00:00Z"), "high", 10000),
        workload_of(job("running", "2025-12-31T00:00:00Z"), "normal", 1000, admitted=True)])
    assert [(uid, s.position) for uid, s in sorted(found.items(), key=lambda i: i[1].position or 0)] == [
        ("running", None), ("old-high", 1), ("new-high", 2), ("old-low", 3)]


def test_runs_refuses_a_team_on_the_emulated_slice(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["runs", "--local", "--team", "research"]) == 2
    assert capsys.readouterr().err.startswith("error: --team: 'research' is not allowed with --local")


@pytest.mark.parametrize("team", ["Research", "r" * 40 + "!", ""])
def test_runs_refuses_a_team_name_that_is_none(team: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["runs", "--stack", STACK, "--team", team]) == 2
    assert capsys.readouterr().err.startswith("error: --team: ")
