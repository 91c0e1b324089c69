"""Issue 69 item 2: a member who holds Kubernetes rights in the team's namespace only (the Role of
docs/guides/teams.md) can submit, list, read and cancel that team's runs.

At the Kubernetes API boundary (tests/kube_server.py): every cluster-scoped read answers 403 as GKE's RBAC would for
such a member, and every call the commands make in a namespace is checked against the guide's Role, as the RBAC
authorizer would (verb from the request: GET of one object ``get``, of a collection ``list``, with ``watch`` ``watch``;
PATCH ``patch``, and ``create`` too when server-side apply creates the object; DELETE ``delete``).
Source: https://kubernetes.io/docs/reference/access-authn-authz/authorization/#determine-the-request-verb;
https://kubernetes.io/docs/reference/using-api/server-side-apply/ (apply creating an object needs create).
"""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from crd import REPO
from kube_server import KubeApiServer, Recorded, ServiceAccountKey, TlsFiles, forbidden, serving, stack_folder

from raytpu import cli

pytestmark = pytest.mark.unit

GUIDE = REPO / "docs" / "guides" / "teams.md"
TEAM_NS = "raytpu-research"
CONFIG = """\
project: my-ml-project
region: us-east5
cluster: {name: ray-tpu}
storage: {bucket: my-bucket}
slices: [{name: train, generation: v6e, topology: 4x4, zone: us-east5-b}]
teams: [{name: research, quota: {train: 16}}]
workloads:
  - {name: train, kind: train, slice: train, team: research, priority: high}
"""
STACK = "ray-tpu-cluster"
OUTPUTS = {"cluster_name": "ray-tpu", "location": "us-east5", "project": "my-ml-project", "namespace": "ray",
           "service_account": "ray-tpu-ray", "bucket": "my-bucket"}
CLUSTER_SCOPED = (r"^(?!.*/namespaces/)/(api/v1|apis/[^/]+/[^/]+)/"
                  r"(nodes|pods|namespaces|customresourcedefinitions|clusterqueues|mutatingwebhookconfigurations)")
_PATH = re.compile(r"^/(?:api/v1|apis/(?P<group>[^/]+)/[^/]+)/namespaces/(?P<ns>[^/]+)/(?P<resource>[^/]+)"
                   r"(?:/(?P<name>[^/]+))?(?:/(?P<sub>log))?$")


def guide_role() -> dict[str, Any]:
    """The Role the guide gives a team member (its only ``kind: Role`` YAML block)."""
    blocks = re.findall(r"```yaml\n(.*?)```", GUIDE.read_text(), re.S)
    (role,) = [doc for block in blocks if (doc := yaml.safe_load(block)) and doc.get("kind") == "Role"]
    return dict(role)


def needs(request: Recorded, created: set[str]) -> list[tuple[str, str, str, str]]:
    """(namespace, API group, resource, verb) the RBAC authorizer checks for ``request``."""
    match = _PATH.match(request.path)
    assert match, request.path
    resource = match["resource"] + (f"/{match['sub']}" if match["sub"] else "")
    group, ns, name = match["group"] or "", match["ns"], match["name"]
    if request.method == "GET":
        verbs = ["watch" if request.query.get("watch") else "get" if name else "list"]
    elif request.method == "PATCH":
        verbs = ["patch"] + (["create"] if f"{resource}/{name}" not in created else [])
        created.add(f"{resource}/{name}")
    else:
        verbs = {"DELETE": ["delete"], "POST": ["create"]}[request.method]
    return [(ns, group, resource, verb) for verb in verbs]


def allowed(role: dict[str, Any], group: str, resource: str, verb: str) -> bool:
    return any(group in rule["apiGroups"] and resource in rule["resources"] and verb in rule["verbs"]
               for rule in role["rules"])


@pytest.fixture
def member(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, tls: TlsFiles,
           sa_key: ServiceAccountKey) -> Iterator[KubeApiServer]:
    """The team's config and outputs, and an API server that forbids every cluster-scoped read."""
    with serving(tls, sa_key) as server:
        stack_folder(server, monkeypatch, tmp_path, CONFIG, STACK, OUTPUTS)
        server.fail("GET", CLUSTER_SCOPED, 403, forbidden("get", "customresourcedefinitions", "apiextensions.k8s.io",
                                                          "", "container.customResourceDefinitions.get"),
                    times=10_000)
        yield server


def test_the_guides_role_is_a_namespaced_role_of_the_teams_namespace() -> None:
    role = guide_role()
    assert role["apiVersion"] == "rbac.authorization.k8s.io/v1" and role["metadata"]["namespace"] == TEAM_NS


def test_a_member_submits_lists_reads_and_cancels_with_the_guides_role_alone(
        member: KubeApiServer, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["submit", "train", "--stack", STACK, "--run-id", "r1"]) == 0
    assert "applied RayJob train-r1 in namespace raytpu-research" in capsys.readouterr().err
    job = member.get_object("rayjobs", "train-r1", TEAM_NS)
    assert job is not None and job["spec"]["suspend"] is True
    member.add_pod("train-r1-submit", {"job-name": "train-r1"}, ["driver: started"], namespace=TEAM_NS)

    assert cli.main(["runs", "--stack", STACK, "--team", "research"]) == 0
    assert "train-r1" in capsys.readouterr().out
    assert cli.main(["runs", "logs", "train-r1", "--stack", STACK, "--team", "research"]) == 0
    assert capsys.readouterr().out == "driver: started\n"

    def gone() -> None:  # KubeRay's finalizer stops the job; the submitter pod goes with it
        time.sleep(0.3)
        member.remove("pods", "train-r1-submit", namespace=TEAM_NS)

    remover = threading.Thread(target=gone)
    remover.start()
    assert cli.main(["runs", "cancel", "train-r1", "--stack", STACK, "--team", "research"]) == 0
    remover.join()

    role, created = guide_role(), set[str]()
    checked = [need for r in member.api_requests() if "/namespaces/" in r.path for need in needs(r, created)]
    assert checked
    assert {ns for ns, *_ in checked} == {TEAM_NS}
    refused = sorted({(g, res, v) for _, g, res, v in checked if not allowed(role, g, res, v)})
    assert refused == [], f"calls the guide's Role does not allow: {refused}"
