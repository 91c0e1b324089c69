"""``workloads[].ray_disk_gib``: on Autopilot the ephemeral-storage request of every Ray container of a non-engine
workload, which Autopilot also makes the pod's limit (docs/FACTS.md#autopilot-ephemeral-limit); refused where it means
nothing."""

from __future__ import annotations

import kind_fields
import pytest
import yaml
from emitted import MATRIX
from image_refs import FIXTURE_IMAGES

from raytpu import config
from raytpu.core.common.errors import InvalidInput, InvalidInputs
from raytpu.core.manifests import kuberay
from raytpu.core.specs.serving import node_disk
from raytpu.core.specs.spec import ClusterSpec

pytestmark = pytest.mark.unit

def _parse(mode: str = "autopilot", kind: str = "train", field: str = "ray_disk_gib: 200") -> ClusterSpec:
    """The matrix config of tests/emitted.py in ``mode`` with one ``kind`` workload on its multi-host slice."""
    data = yaml.safe_load(MATRIX.replace("MODE", mode))
    data["workloads"] = [{"name": "work", "kind": kind, "slice": "multi", **kind_fields.fields(kind),
                          **yaml.safe_load("{" + field + "}")}]
    return config.parse(yaml.safe_dump(data))


def _requests(text_field: str, kind: str = "train") -> list[dict[str, str]]:
    spec = _parse(kind=kind, field=text_field)
    obj = kuberay.workload_manifest(spec, spec.workloads[0], images=FIXTURE_IMAGES, service_account="ray",
                                    bucket="b", name="work-r1")
    return [t["spec"]["containers"][0]["resources"]["requests"] for t in kuberay.pod_templates(obj)[:2]]


HEAD_MAX = f"{node_disk.AUTOPILOT_POD_MAX_GIB - node_disk.GCSFUSE_SIDECAR_GIB}Gi"
"""The head's container with the bucket mounted: the general-purpose class's 10 GiB per Pod less the sidecar's 5."""


@pytest.mark.parametrize("kind", ["train", "smoke", "job"])
def test_tpu_workers_request_what_the_workload_declares_the_head_at_most_its_class_allows(kind: str) -> None:
    assert [r["ephemeral-storage"] for r in _requests("ray_disk_gib: 200", kind)] == [HEAD_MAX, "200Gi"]


def test_a_small_declaration_reaches_the_head_too() -> None:
    assert [r["ephemeral-storage"] for r in _requests("ray_disk_gib: 3")] == ["3Gi", "3Gi"]


def test_without_it_the_allowance_stays_on_the_workers_and_the_head_fits_its_class() -> None:
    assert [r["ephemeral-storage"] for r in _requests("image: example.com/x:1")] == [
        HEAD_MAX, f"{node_disk.SCRATCH_GIB:g}Gi"]


def _gib(quantity: str) -> float:
    """A ``NGi`` or ``NMi`` quantity in GiB (the kit writes only these)."""
    return float(quantity[:-2]) / (1024 if quantity.endswith("Mi") else 1)


def test_no_general_purpose_pod_the_kit_emits_on_autopilot_asks_for_more_than_autopilot_allows() -> None:
    """Every non-TPU pod (the head, the RayJob submitter) of every emitted Autopilot object: its containers'
    ephemeral-storage requests (Autopilot's 1 GiB default where none is set) plus the GCS FUSE sidecar's 5 GiB
    where the pod mounts the bucket stay within the class's per-Pod maximum, or Autopilot rejects the pod.
    Source: GKE autopilot-resource-requests, "must be between 10 MiB and 10 GiB" (docs/FACTS.md#autopilot-pod-max)"""
    from emitted import every_object, pods_of
    checked = 0
    for item in every_object():
        if item.mode != "autopilot":
            continue
        for role, pod in pods_of(item.obj):
            spec = pod["spec"]
            if any("google.com/tpu" in c.get("resources", {}).get("requests", {}) for c in spec["containers"]):
                continue
            total = sum(_gib(c.get("resources", {}).get("requests", {}).get("ephemeral-storage", "1Gi"))
                        for c in spec["containers"])
            sidecar = node_disk.GCSFUSE_SIDECAR_GIB if pod["metadata"].get("annotations", {}).get(
                kuberay.GCSFUSE_ANNOTATION) == "true" else 0
            assert total + sidecar <= node_disk.AUTOPILOT_POD_MAX_GIB, (item.name, role, total, sidecar)
            checked += 1
    assert checked > 20


def test_the_largest_declaration_fills_an_accelerator_pod_to_autopilots_maximum_with_the_sidecar() -> None:
    """A TPU worker's Pod is its container's request plus the GCS FUSE sidecar's 5 GiB; one GiB more is refused.
    Source: GKE autopilot-resource-requests#min-max-requests, 56 TiB for accelerator Pods, read second-hand
    (docs/FACTS.md#autopilot-tpu-pod-ceiling)"""
    top = node_disk.RAY_DISK_GIB[1]
    assert top + node_disk.GCSFUSE_SIDECAR_GIB == node_disk.AUTOPILOT_ACCELERATOR_POD_MAX_GIB == 56 * 1024
    assert _requests(f"ray_disk_gib: {top}")[1]["ephemeral-storage"] == f"{top}Gi"


@pytest.mark.parametrize(("mode", "kind", "field", "said"), [
    ("autopilot", "train", "ray_disk_gib: 0", f"0 is out of range; valid: 1 to {node_disk.RAY_DISK_GIB[1]} GiB"),
    ("autopilot", "train", "ray_disk_gib: 99999999", "99999999 is out of range"),
    # Source: GKE autopilot-resource-requests#min-max-requests (56 TiB per accelerator Pod;
    # docs/FACTS.md#autopilot-tpu-pod-ceiling)
    ("autopilot", "smoke", "ray_disk_gib: 57340", "57340 is out of range; valid: 1 to 57339 GiB (a TPU worker's "
     "Pod, with the GCS FUSE sidecar's 5 GiB, within Autopilot's 56 TiB per accelerator Pod)"),
    ("autopilot", "train", "ray_disk_gib: lots", "'lots': input should be a valid integer"),
    ("autopilot", "train", "ray_disk_gib: true", "valid: a whole number"),
    ("autopilot", "serve", "ray_disk_gib: 50", "is not allowed for kind serve; valid: leave it out"),
    ("standard", "train", "ray_disk_gib: 50", "is not allowed with cluster.mode: standard"),
], ids=["zero", "above-any-disk", "over-autopilot-accelerator-pod", "text", "bool", "engine", "standard"])
def test_bad_ray_disk_gib_is_refused_naming_the_field(mode: str, kind: str, field: str, said: str) -> None:
    with pytest.raises((InvalidInput, InvalidInputs)) as info:
        _parse(mode, kind, field)
    assert "workloads[0].ray_disk_gib" in str(info.value) and said in str(info.value), str(info.value)
