"""The outside-app example (examples/platform_app): a platform team's own CDK app that imports
raytpu.stacks and raytpu.modules, adds a slice and a bucket of its own, and synthesizes."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from _synth import PLATFORM_APP, RESEARCH, by_name, resources, synth_platform_app
from image_refs import FIXTURE_REFS

pytestmark = [pytest.mark.synth, pytest.mark.timeout(300)]


@pytest.fixture(scope="module")
def stacks() -> dict[str, dict[str, Any]]:
    return synth_platform_app()[1]


def test_outside_app_synthesizes_both_stacks(stacks: dict[str, Any]) -> None:
    assert sorted(stacks) == ["acme-cluster", "acme-workloads"]


def test_outside_app_slice_becomes_a_pool(stacks: dict[str, Any]) -> None:
    cluster = stacks["acme-cluster"]
    pools = by_name(cluster, "google_container_node_pool")
    assert sorted(pools) == ["ray-head", "research-0", "train-0", "train-1"]
    research = pools["research-0"]
    assert research["node_config"]["machine_type"] == "ct5p-hightpu-4t"
    assert research["node_count"] == 4
    assert research["placement_policy"] == {"type": "COMPACT", "tpu_topology": "2x2x4"}
    assert research["node_config"]["spot"] is True
    # the node label the slice's TPU pods select (a nodeSelector: the TPU webhook replaces a multi-host pod's affinity)
    assert {p: pools[p]["node_config"]["labels"] for p in ("research-0", "train-0", "train-1")} == {
        "research-0": {"raytpu.dev/slice": "research"}, "train-0": {"raytpu.dev/slice": "train"},
        "train-1": {"raytpu.dev/slice": "train"}}
    assert research["node_locations"] == ["us-east5-a"]
    assert pools["train-1"]["node_config"]["reservation_affinity"]["values"] == ["acme-v6e"]
    assert pools["ray-head"]["node_locations"] == ["us-east5-b"]  # head pool zones: the YAML's slices


def test_outside_app_outputs_are_the_stack_outputs_schema(stacks: dict[str, Any]) -> None:
    from raytpu.cluster.outputs import StackOutputs

    outputs = stacks["acme-cluster"]["output"]
    declared = {n: o for n, o in outputs.items() if not n.startswith("cross-stack-output-")}
    assert sorted(declared) == sorted(StackOutputs.names())
    assert declared["namespace"]["value"] == "ml"  # the app's own namespace reaches `raytpu submit`


def test_outside_app_workload_runs_on_its_own_slice(stacks: dict[str, Any]) -> None:
    from crd import cluster_spec, operator_errors, schema_errors, webhook_errors

    objects = {m["manifest"]["metadata"]["name"]: m["manifest"]
               for m in resources(stacks["acme-workloads"], "kubernetes_manifest").values()}
    # the YAML's smoke workload is a RayJob: `raytpu submit`'s, not Terraform's; the RayService sits behind its policy
    assert {n: o["kind"] for n, o in objects.items()} == {"research-serve": "RayService",
                                                          "service-research-serve": "NetworkPolicy"}
    policy = objects.pop("service-research-serve")
    assert policy["spec"]["podSelector"]["matchLabels"] == {"raytpu.dev/ray-cluster": "service-research-serve"}
    service = objects["research-serve"]
    assert service["metadata"]["labels"]["raytpu.dev/slice"] == "research"
    assert service["metadata"]["namespace"].startswith("${kubernetes_namespace_v1.")
    [group] = cluster_spec(service)["workerGroupSpecs"]
    # docs/FACTS.md#kuberay-crds: numOfHosts = hosts (v5p 2x2x4: 4 VMs of 4 chips), one replica per slice.
    assert (group["numOfHosts"], group["replicas"]) == (4, 1)
    assert group["template"]["spec"]["nodeSelector"] == {
        "cloud.google.com/gke-tpu-accelerator": "tpu-v5p-slice", "cloud.google.com/gke-tpu-topology": "2x2x4",
        "cloud.google.com/gke-spot": "true", "raytpu.dev/slice": "research"}
    (app,) = json.loads(service["spec"]["serveConfigV2"])["applications"]
    (llm,) = app["args"]["llm_configs"]
    assert llm["accelerator_config"] == {"kind": "tpu", "topology": "2x2x4"}
    assert llm["engine_kwargs"]["tensor_parallel_size"] == 16
    for manifest in objects.values():
        assert schema_errors(manifest) == [] and webhook_errors(manifest) == [] and operator_errors(manifest) == []


def test_outside_app_cannot_hand_terraform_a_one_shot_job(tmp_path: Path) -> None:
    """Migration: an app that still adds a RayJob to the workloads stack gets an error naming what to run."""
    from raytpu.config import load
    from raytpu.core.common.errors import InvalidInput
    from raytpu.core.specs.kinds import kind
    from raytpu.core.specs.spec import SliceSpec, WorkloadSpec
    from raytpu.modules.parts.cdk import App
    from raytpu.stacks.cluster import ClusterStack, ClusterStackProps
    from raytpu.stacks.workloads import WorkloadsStack, WorkloadsStackProps

    app = App(outdir=str(tmp_path))  # App() makes its outdir at once: never cdktf.out in the repo
    cluster = ClusterStack(app, "acme-cluster", ClusterStackProps(spec=load(PLATFORM_APP.parent / "platform.yaml")))
    research = SliceSpec.create(**RESEARCH)
    cluster.add_slice(research)
    workloads = WorkloadsStack(app, "acme-workloads", WorkloadsStackProps(cluster=cluster, images=FIXTURE_REFS))
    with pytest.raises(InvalidInput) as info:
        workloads.add_workload(WorkloadSpec(name="research-train", kind=kind("train"), slice=research))
    assert str(info.value) == (
        "kind: 'train' of workload 'research-train' is a one-shot RayJob, which Terraform does not apply (a finished "
        "RayJob stays: redeploys do nothing, deleting it re-runs the job); valid: `raytpu submit research-train "
        "--stack acme-ray-cluster` for the job (list it in the config's workloads), add_workload for RayServices")


def test_outside_app_module_and_props(stacks: dict[str, Any]) -> None:
    cluster = stacks["acme-cluster"]
    buckets = by_name(cluster, "google_storage_bucket")
    assert sorted(buckets) == ["acme-ml-platform-acme-ray-ray", "acme-ml-platform-datasets"]
    assert buckets["acme-ml-platform-datasets"]["labels"] == {"managed-by": "raytpu", "team": "platform"}
    namespace = next(iter(resources(stacks["acme-workloads"], "kubernetes_namespace_v1").values()))
    assert namespace["metadata"][0]["name"] == "ml"
    master = next(iter(resources(cluster, "google_container_cluster").values()))
    assert master["master_authorized_networks_config"]["cidr_blocks"] == [
        {"cidr_block": "198.51.100.0/24", "display_name": "corp-vpn"}]
    # control_plane: ip: the DNS endpoint refuses outside traffic; the provider reaches the IP endpoint with the CA
    assert master["control_plane_endpoints_config"] == {"dns_endpoint_config": {"allow_external_traffic": False}}
    provider = stacks["acme-workloads"]["provider"]["kubernetes"][0]
    assert provider["cluster_ca_certificate"].startswith("${base64decode(data.terraform_remote_state.")
