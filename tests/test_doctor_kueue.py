"""``raytpu doctor --stack`` with ``teams`` (issue 69 item 4): Kueue's release, its Ray integrations and each team's
queues and identity against the config, read through the loopback Kubernetes API as Kueue v0.19.2's chart and the
kit's stacks leave them (Source: Kueue v0.19.2 charts/kueue/templates/manager). Nothing is written back."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kube_server import KubeApiServer, ServiceAccountKey, TlsFiles, forbidden, serving, stack_folder
from test_doctor import GSA_ANNOTATION, OUTPUTS, STACK, doctor, healthy, only_reads, rows

from raytpu.config import parse
from raytpu.core.manifests import kueue
from raytpu.core.specs.cluster.teams import service_account_id

pytestmark = pytest.mark.unit

CONFIG = """\
project: my-ml-project
region: us-east5
cluster: {name: ray-tpu}
slices:
  - {name: train, generation: v6e, topology: 4x4, zone: us-east5-b, count: 2}
teams: [{name: research, quota: {train: 16}}, {name: product, quota: {train: 16}}]
workloads:
  - {name: train, kind: train, slice: train, slices: 1, team: research}
"""
SPEC = parse(CONFIG)
KSA = "ray-tpu-ray"


def manager_config(frameworks: list[str]) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "kueue-manager-config"},
            "data": {"controller_manager_config.yaml": yaml.safe_dump(
                {"apiVersion": "config.kueue.x-k8s.io/v1beta2", "kind": "Configuration",
                 "integrations": {"frameworks": frameworks}})}}


def kueue_deployment(tag: str) -> dict[str, Any]:
    return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "kueue-controller-manager"},
            "spec": {"template": {"spec": {"containers": [
                {"name": "manager", "image": f"registry.k8s.io/kueue/kueue:{tag}"}]}}}}


def team_ksa(team: str, gsa: str | None = None) -> dict[str, Any]:
    email = gsa or f"{service_account_id('ray-tpu', team)}@my-ml-project.iam.gserviceaccount.com"
    return {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": KSA, "annotations": {
        GSA_ANNOTATION: email}}}


@pytest.fixture
def cluster(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, tls: TlsFiles,
            sa_key: ServiceAccountKey) -> Iterator[KubeApiServer]:
    """A healthy cluster with Kueue as the cluster stack installs it and the queues the workloads stack makes."""
    with serving(tls, sa_key) as server:
        stack_folder(server, monkeypatch, tmp_path, CONFIG, STACK, OUTPUTS)
        healthy(server)
        server.put(kueue_deployment("v0.19.2"), namespace="kueue-system")
        server.put(manager_config(["batch/job", "ray.io/rayjob", "ray.io/raycluster"]), namespace="kueue-system")
        for obj in kueue.objects(SPEC):
            if obj["kind"] in ("ClusterQueue", "LocalQueue"):  # what the doctor reads
                server.put(obj, namespace=obj["metadata"].get("namespace"))
        for team in SPEC.teams:
            server.put(team_ksa(team.name), namespace=team.namespace)
        yield server


def test_kueue_and_the_queues_as_deployed_hold(cluster: KubeApiServer, capsys: pytest.CaptureFixture[str]) -> None:
    code, document = doctor(capsys)
    assert code == 0, rows(document, "fail")
    checks = {r["check"]: r for r in document["checks"]}
    assert checks["kueue version"]["found"] == "v0.19.2"
    assert checks["queue research"]["found"] == "raytpu-train 16"
    assert {"kueue integrations", "local queue research", "service account product"} <= set(checks)
    only_reads(cluster)


@pytest.mark.parametrize("case, check", [
    ("old kueue", "kueue version"), ("no ray integration", "kueue integrations"), ("quota drift", "queue product"),
    ("no local queue", "local queue research"), ("another team's identity", "service account research")])
def test_each_drift_is_one_failing_row(case: str, check: str, cluster: KubeApiServer,
                                       capsys: pytest.CaptureFixture[str]) -> None:
    if case == "old kueue":
        cluster.put(kueue_deployment("v0.13.4"), namespace="kueue-system")
    elif case == "no ray integration":
        cluster.put(manager_config(["batch/job", "ray.io/raycluster"]), namespace="kueue-system")
    elif case == "quota drift":
        queue = next(o for o in kueue.objects(SPEC) if o["metadata"]["name"] == "raytpu-product")
        queue["spec"]["resourceGroups"][0]["flavors"][0]["resources"][0]["nominalQuota"] = 8
        cluster.put(queue, namespace=None)
    elif case == "no local queue":
        cluster.remove("localqueues", "raytpu-research", namespace="raytpu-research")
    else:
        cluster.put(team_ksa("research", team_ksa("product")["metadata"]["annotations"][GSA_ANNOTATION]),
                    namespace="raytpu-research")
    code, document = doctor(capsys)
    failing = rows(document, "fail")
    assert code == 1 and list(failing) == [check], failing
    assert failing[check]["fix"]


def test_a_forbidden_cluster_queue_is_a_question_mark(cluster: KubeApiServer,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    cluster.fail("GET", "/clusterqueues/raytpu-research", 403,
                 forbidden("get", "clusterqueues", "kueue.x-k8s.io", "raytpu-research",
                           "container.thirdPartyObjects.get"))
    code, document = doctor(capsys)
    assert code == 0
    assert rows(document, "unknown")["queue research"]["found"].startswith("forbidden: get clusterqueues")
