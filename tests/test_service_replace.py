"""A serve workload re-submitted with another Ray cluster spec (issue 49 review finding a;
docs/FACTS.md#ray-serve-changed-spec): KubeRay v1.7.0 never applies a changed ``rayClusterConfig`` to a running
RayService whose ``upgradeStrategy`` is None, so ``raytpu submit`` refuses the change (exit 2 naming ``--replace``;
nothing applied or deleted), and with ``--replace`` deletes the RayService, waits for it to go, then applies it anew. A
change of ``serveConfigV2`` only (which KubeRay does apply) and the CRD defaults the API server adds are not a cluster
change. Judged at the loopback API server.

Source: KubeRay v1.7.0 ray-operator/controllers/ray/rayservice_controller.go shouldPrepareNewCluster,
shouldUpdateCluster
"""

from __future__ import annotations

from typing import Any

import pytest
from test_submit import STACK, Cluster, fake, main  # noqa: F401  (fake: the loopback stack fixture)

pytestmark = pytest.mark.unit


def _stored(cluster: Cluster) -> dict[str, Any]:
    found = cluster.server.get_object("rayservices", "serve")
    assert found is not None
    return found


def _restore(cluster: Cluster, obj: dict[str, Any]) -> None:
    for key in ("resourceVersion", "uid", "creationTimestamp", "generation"):
        obj["metadata"].pop(key, None)
    cluster.server.put(obj)


def test_a_changed_cluster_spec_is_refused_without_replace_and_nothing_is_applied_or_deleted(
        fake: Cluster, capsys: pytest.CaptureFixture[str]) -> None:  # noqa: F811
    assert main("submit", "serve", "--stack", STACK) == 0
    live = _stored(fake)
    head = live["spec"]["rayClusterConfig"]["headGroupSpec"]["template"]["spec"]["containers"][0]
    head["image"] = head["image"] + "-old"  # the RayService as an earlier submit left it
    _restore(fake, live)
    capsys.readouterr()
    patches = len(fake.server.of("PATCH", "/rayservices/"))
    assert main("submit", "serve", "--stack", STACK) == 2
    err = capsys.readouterr().err
    (line,) = [x for x in err.splitlines() if x.startswith("error:")]
    assert line.startswith("error: --replace: is not given, and this submit changes RayService serve's Ray cluster "
                           "spec (at 'spec.rayClusterConfig.headGroupSpec.template.spec.containers[0].image')")
    assert "valid: --replace" in line and "Traceback" not in err
    assert len(fake.server.of("PATCH", "/rayservices/")) == patches
    assert fake.server.of("DELETE") == []
    assert _stored(fake)["spec"]["rayClusterConfig"]["headGroupSpec"]["template"]["spec"]["containers"][0][
        "image"].endswith("-old")


def test_replace_deletes_the_rayservice_waits_for_it_then_applies_the_new_spec(
        fake: Cluster, capsys: pytest.CaptureFixture[str]) -> None:  # noqa: F811
    assert main("submit", "serve", "--stack", STACK) == 0
    wanted = _stored(fake)["spec"]["rayClusterConfig"]
    live = _stored(fake)
    live["spec"]["rayClusterConfig"]["workerGroupSpecs"][0]["template"]["spec"]["containers"][0]["env"] = []
    _restore(fake, live)
    assert main("submit", "serve", "--stack", STACK, "--replace") == 0
    err = capsys.readouterr().err
    assert "RayService's Ray cluster spec changed at" in err and "--replace: deleting it first" in err
    deletes = [r.path for r in fake.server.of("DELETE")]
    assert any(p.endswith("/rayservices/serve") for p in deletes), deletes
    requests = [(r.method, r.path) for r in fake.server.requests]
    deleted_at = max(i for i, (m, p) in enumerate(requests) if m == "DELETE" and p.endswith("/rayservices/serve"))
    assert any(m == "PATCH" and p.endswith("/rayservices/serve") for m, p in requests[deleted_at:])
    assert _stored(fake)["spec"]["rayClusterConfig"] == wanted


def test_server_defaults_and_a_serve_config_change_alone_are_applied_in_place(
        fake: Cluster, capsys: pytest.CaptureFixture[str]) -> None:  # noqa: F811
    """The API server adds a CRD's defaults (KubeRay v1.7.0's RayService CRD: a container port's ``protocol``
    defaults to TCP); KubeRay applies a new ``serveConfigV2`` to the running cluster itself."""
    assert main("submit", "serve", "--stack", STACK) == 0
    live = _stored(fake)
    head = live["spec"]["rayClusterConfig"]["headGroupSpec"]["template"]["spec"]["containers"][0]
    for port in head.get("ports", []):
        port.setdefault("protocol", "TCP")
    head.setdefault("terminationMessagePolicy", "File")
    live["spec"]["serveConfigV2"] = "applications: []"
    _restore(fake, live)
    assert main("submit", "serve", "--stack", STACK) == 0
    assert fake.server.of("DELETE") == []
    assert _stored(fake)["spec"]["serveConfigV2"] != "applications: []"
