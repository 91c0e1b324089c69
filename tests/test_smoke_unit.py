"""workloads/smoke.py pieces that need no cluster: inventory, timeout messages, verdicts of broken slices."""

from __future__ import annotations

import argparse
from typing import Any

import pytest

from raytpu.plan import SlicePlan, plan_slice
from raytpu.report import parse_verdict_line
from raytpu.workloads import smoke

pytestmark = pytest.mark.unit


def node(plan: SlicePlan, slice_name: str, worker: int, alive: bool = True) -> dict[str, Any]:
    base = {"ray.io/accelerator-type": plan.ray_accelerator_type, "ray.io/tpu-slice-name": slice_name,
            "ray.io/tpu-worker-id": str(worker), "ray.io/tpu-topology": plan.topology,
            "ray.io/tpu-pod-type": plan.ray_pod_type}
    return {"NodeID": f"{slice_name}-{worker}", "Alive": alive, "NodeManagerAddress": "10.0.0.1",
            "Labels": base, "Resources": {"TPU": plan.chips_per_host}}


@pytest.fixture
def plan() -> SlicePlan:
    return plan_slice("v6e", "4x4")


def test_inventory_groups_hosts_by_slice_and_names_missing_workers(plan: SlicePlan) -> None:
    nodes = [node(plan, "a", w) for w in range(plan.hosts)] + [node(plan, "b", w) for w in (0, 1, 3)]
    nodes.append(node(plan, "b", 2, alive=False))
    other = node(plan, "c", 0)
    other["Labels"]["ray.io/tpu-pod-type"] = "v6e-8"  # another shape: ignored
    nodes.append(other)
    found = smoke.inventory(plan, nodes)
    assert list(found) == ["a", "b"]
    assert found["a"].complete and found["b"].missing == [2]
    assert found["b"].describe() == "b (missing worker 2)"


def test_timeout_message_names_the_slice_and_its_missing_hosts(plan: SlicePlan) -> None:
    inv = smoke.SliceInventory("b", {0: {}, 1: {}}, plan.hosts)
    message = smoke._timeout_message(plan, "b", 5.0, {"b": inv}, set())
    assert "slice 'b'" in message and "missing workers 2, 3" in message and "within 5s" in message


def args(**overrides: Any) -> argparse.Namespace:
    return smoke.build_parser().parse_args([x for k, v in overrides.items() for x in (f"--{k}", str(v))])


def test_incomplete_slice_is_unhealthy_without_a_reservation_attempt(plan: SlicePlan) -> None:
    inv = smoke.SliceInventory("b", {w: node(plan, "b", w) for w in (0, 1, 3)}, plan.hosts)
    verdict = smoke.check_slice(plan, inv, args())
    assert not verdict["healthy"] and verdict["hosts_found"] == 3 and verdict["hosts_expected"] == plan.hosts
    checks = {c["name"]: c for c in verdict["checks"]}
    assert "missing worker id(s) 2" in checks["hosts_present"]["detail"]
    assert not checks["reservation"]["ok"] and "not attempted" in checks["reservation"]["detail"]
    assert [h["worker_id"] for h in verdict["hosts"] if not h["ok"]] == [2]


def test_wrong_topology_label_is_a_host_problem(plan: SlicePlan) -> None:
    nodes = {w: node(plan, "a", w) for w in range(plan.hosts)}
    nodes[1]["Labels"]["ray.io/tpu-topology"] = "2x8"
    inv = smoke.SliceInventory("a", nodes, plan.hosts)
    inv_missing = smoke.SliceInventory("a", {k: v for k, v in nodes.items() if k != 3}, plan.hosts)
    verdict = smoke.check_slice(plan, inv_missing, args())
    assert any("ray.io/tpu-topology" in p for h in verdict["hosts"] for p in h["problems"])
    assert inv.complete


def test_perf_checks_are_informational_off_tpu_and_gating_on_tpu(plan: SlicePlan) -> None:
    check = smoke._check("matmul_tflops_ratio", False, "slow", 0.01, 0.4)
    assert smoke._gate(dict(check), enforce=False, where="cpu devices")["ok"]
    assert not smoke._gate(dict(check), enforce=True, where="tpu devices")["ok"]


def test_verdict_lines_round_trip_through_the_report_parser(plan: SlicePlan, capsys: pytest.CaptureFixture[str]) \
        -> None:
    from raytpu.report import format_verdict_line

    inv = smoke.SliceInventory("b", {}, plan.hosts)
    verdict = smoke.check_slice(plan, inv, args())
    print(format_verdict_line(verdict))
    assert parse_verdict_line(capsys.readouterr().out) == verdict
