"""The outside-app example (examples/platform_app): a platform team's own CDK app that imports
raytpu.stacks and raytpu.modules, adds a slice and a bucket of its own, and synthesizes."""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

import pytest
from _synth import REPO, by_name, read_stacks, resources

pytestmark = [pytest.mark.synth, pytest.mark.timeout(300)]

APP = REPO / "examples" / "platform_app" / "app.py"


@pytest.fixture(scope="module")
def stacks(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, Any]]:
    out = tmp_path_factory.mktemp("platform") / "cdktf.out"
    result = subprocess.run([sys.executable, str(APP), str(out)], cwd=tmp_path_factory.getbasetemp(),
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    return read_stacks(out)


def test_outside_app_synthesizes_both_stacks(stacks: dict[str, Any]) -> None:
    assert sorted(stacks) == ["acme-cluster", "acme-workloads"]


def test_outside_app_slice_becomes_a_pool_and_an_output(stacks: dict[str, Any]) -> None:
    cluster = stacks["acme-cluster"]
    pools = by_name(cluster, "google_container_node_pool")
    assert sorted(pools) == ["ray-head", "research-0", "train-0", "train-1"]
    research = pools["research-0"]
    assert research["node_config"]["machine_type"] == "ct5p-hightpu-4t"
    assert research["node_count"] == 4
    assert research["placement_policy"] == {"type": "COMPACT", "tpu_topology": "2x2x4"}
    assert research["node_config"]["spot"] is True
    assert research["node_locations"] == ["us-east5-a"]
    assert json.loads(cluster["output"]["slice_research_plan"]["value"])["ray_pod_type"] == "v5p-32"
    assert pools["train-1"]["node_config"]["reservation_affinity"]["values"] == ["acme-v6e"]
    assert pools["ray-head"]["node_locations"] == ["us-east5-b"]  # head pool zones: the YAML's slices


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
