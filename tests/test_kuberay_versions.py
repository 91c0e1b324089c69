"""Which KubeRay release the kit's objects need, checked against real CRDs: every field path the kit emits is declared
by v1.7.0's CRD of its kind, and the release before the one :data:`kuberay.NEWEST_FIELDS` names lacks exactly
those fields (KubeRay v1.5.2's RayJob CRD, v1.5.0's RayService CRD, both vendored unchanged from
ray-project/kuberay ``ray-operator/config/crd/bases/``; docs/FACTS.md#kuberay-release-floor). A RayJob's precondition
(the ``RayWorkload`` construct) is judged by Terraform itself against both."""

from __future__ import annotations

import functools
import json
import re
from pathlib import Path
from typing import Any

import pytest
from _synth import only, read_stacks
from crd import REPO, load_yaml
from emitted import every_object
from test_synth import _terraform_console

from raytpu.cluster.kube.crd_schema import undeclared_fields
from raytpu.core.manifests import kuberay

CRDS = REPO / "tests" / "data" / "kuberay-crds"
FILES = {"RayCluster": "ray.io_rayclusters.yaml", "RayJob": "ray.io_rayjobs.yaml",
         "RayService": "ray.io_rayservices.yaml"}
PREVIOUS = {"RayJob": ("v1.5.2", "RayJob"), "RayService": ("v1.5.0", "RayService"),
            "RayCluster": ("v1.5.0", "RayService")}
"""Per kind: the release before its NEWEST_FIELDS' release, and the vendored CRD of that release that holds its
schema (a RayCluster's spec is the RayService's ``rayClusterConfig``, one Go type; checked at v1.7.0 below)."""


def _version(tag: str) -> tuple[int, ...]:
    return tuple(int(p) for p in tag.lstrip("v").split("."))


@functools.cache
def _schema(tag: str, kind: str) -> dict[str, Any]:
    crd = load_yaml((CRDS / tag / FILES[kind]).read_text())
    return next(v for v in crd["spec"]["versions"] if v["name"] == "v1")["schema"]["openAPIV3Schema"]


def _cluster_spec(schema: dict[str, Any], kind: str) -> dict[str, Any]:
    spec = schema["properties"]["spec"]
    return {"RayCluster": spec, "RayJob": spec["properties"].get("rayClusterSpec"),
            "RayService": spec["properties"].get("rayClusterConfig")}[kind]


def _without_descriptions(node: Any) -> Any:
    if isinstance(node, dict):
        return {k: _without_descriptions(v) for k, v in node.items() if k != "description"}
    return [_without_descriptions(n) for n in node] if isinstance(node, list) else node


def _previous_schema(kind: str) -> dict[str, Any]:
    """The schema of ``kind`` in the release before its NEWEST_FIELDS' (a RayCluster's from the RayService's)."""
    tag, holder = PREVIOUS[kind]
    schema = _schema(tag, holder)
    if kind == holder:
        return schema
    return {"type": "object", "properties": {**schema["properties"], "spec": _cluster_spec(schema, holder)}}


@functools.cache
def _emitted() -> dict[str, list[dict[str, Any]]]:
    """Every object ``raytpu submit``/``smoke`` and the workloads stack emit (tests/emitted.py), and a standalone
    RayCluster of each of their train workloads (the public builder ``kuberay.ray_cluster``)."""
    out: dict[str, list[dict[str, Any]]] = {kind: [] for kind in FILES}
    for item in every_object():
        out[item.obj["kind"]].append(item.obj)
        for work in item.spec.workloads:
            if work.kind.trains and item.obj["metadata"]["name"].startswith(f"{work.name}-r1"):
                out["RayCluster"].append(kuberay.ray_cluster(
                    "rc", work, kuberay.Pods(image="img", service_account="ray", bucket="b", cluster="c"),
                    autopilot=item.spec.cluster.autopilot))
    return out


def _paths(objs: list[dict[str, Any]], schema: dict[str, Any]) -> set[str]:
    return {re.sub(r"\[\d+\]", "[]", f) for obj in objs for f in undeclared_fields(obj, schema)}


@pytest.mark.unit
@pytest.mark.parametrize("kind", sorted(FILES))
def test_every_field_the_kit_emits_is_declared_by_kuberay_v1_7_0(kind: str) -> None:
    assert _emitted()[kind], kind
    assert _paths(_emitted()[kind], _schema("v1.7.0", kind)) == set()


@pytest.mark.unit
@pytest.mark.parametrize("kind", sorted(FILES))
def test_the_release_before_the_newest_lacks_exactly_the_newest_fields(kind: str) -> None:
    """Everything else the kit emits was there already: NEWEST_FIELDS names the fields of the newest release the
    kind needs, no more, no fewer."""
    fields, release = kuberay.NEWEST_FIELDS[kind]
    tag, _ = PREVIOUS[kind]
    assert _version(tag) < _version(release)
    assert _paths(_emitted()[kind], _previous_schema(kind)) == set(fields)


@pytest.mark.unit
def test_a_ray_cluster_spec_is_one_schema_in_all_three_kinds() -> None:
    """What lets the RayService CRD of v1.5.0 stand in for the RayCluster one: KubeRay's ``RayClusterSpec`` type."""
    specs = [_without_descriptions(_cluster_spec(_schema("v1.7.0", kind), kind)) for kind in sorted(FILES)]
    assert specs[0] == specs[1] == specs[2]


@pytest.mark.unit
def test_the_minimum_is_the_newest_release_any_kind_needs() -> None:
    releases = sorted((release for _, release in kuberay.NEWEST_FIELDS.values()), key=_version)
    assert kuberay.MIN_KUBERAY_VERSION == releases[-1] == "1.6.0"
    assert sorted(kuberay.NEWEST_FIELDS) == sorted(FILES)


def _top_fields_only(schema: dict[str, Any], field_path: str) -> dict[str, Any]:
    """``schema`` cut to the keys along ``field_path``'s parents (each node's property names, no deeper), as a CRD:
    small enough for ``terraform console``, and the same verdict on the field."""
    parts = field_path.split(".")
    node = schema
    pruned: dict[str, Any] = {}
    out = pruned
    for part in parts[:-1]:
        out["properties"] = {name: {} for name in node["properties"]}
        node, out = node["properties"][part], out["properties"][part]
    out["properties"] = {name: {} for name in node["properties"]}
    return {"spec": {"versions": [{"name": "v1", "schema": {"openAPIV3Schema": pruned}}]}}


@pytest.mark.synth
def test_a_ray_job_applied_by_terraform_refuses_kuberay_1_5_naming_the_field_and_release(tmp_path: Path) -> None:
    """A platform app that applies a RayJob with ``RayWorkload`` (requires: NEWEST_FIELDS) gets a plan-time
    precondition naming the field and KubeRay 1.6.0; Terraform judges it against the real CRDs of v1.7.0 (true)
    and v1.5.2 (false)."""
    from raytpu.modules.parts.cdk import App, TerraformStack, kubernetes_provider
    from raytpu.modules.ray_workload import RayWorkload, RayWorkloadProps

    job = next(obj for obj in _emitted()["RayJob"] if obj["metadata"]["name"] == "train-r1")
    app = App(outdir=str(tmp_path))
    stack = TerraformStack(app, "jobs")
    kubernetes_provider.KubernetesProvider(stack, "kubernetes", host="https://example.invalid")
    RayWorkload(stack, "train", RayWorkloadProps(manifest=job, requires=kuberay.NEWEST_FIELDS["RayJob"]))
    app.synth()
    (condition,) = only(read_stacks(tmp_path)["jobs"], "kubernetes_manifest")["lifecycle"]["precondition"]
    (field_path,), release = kuberay.NEWEST_FIELDS["RayJob"]
    assert f"RayJob CRD without {field_path}, which KubeRay {release} brought" in condition["error_message"]
    assert "KubeRay 1.6.0 or newer" in condition["error_message"]
    reference = re.search(r"data\.kubernetes_resource\.[\w-]+\.object", condition["condition"])
    assert reference is not None
    cases = [condition["condition"][2:-1].replace(
        reference[0], f"jsondecode({json.dumps(json.dumps(_top_fields_only(_schema(tag, 'RayJob'), field_path)))})")
        for tag in ("v1.7.0", "v1.5.2")]
    assert re.findall(r"\b(true|false)\b", _terraform_console(f"[{', '.join(cases)}]")) == ["true", "false"]
