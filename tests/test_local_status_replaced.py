"""``raytpu local status`` after a host was replaced (``local preempt``, a drill; round 5's leftover in issue 48): the
killed host stays recorded (marked killed), and it used to be a row ``ALIVE NO`` that made the command exit 1 on a
whole slice. It is now a row ``replaced``; a host killed and not replaced is still a fault (exit 1)."""

from __future__ import annotations

from pathlib import Path

import pytest

from raytpu.core.tpu.plan import plan_slice
from raytpu.local.slice import state, status_table

pytestmark = pytest.mark.unit

PLAN = plan_slice("v6e", "2x4", "ct6e-standard-4t")  # two 4-chip hosts


def gcs_node(worker_id: int) -> dict[str, object]:
    """``ray.nodes()``'s entry of a live host of slice ``s-0``."""
    return {"Alive": True, "NodeID": f"node{worker_id}" + "0" * 12, "Labels": PLAN.ray_labels("s-0", worker_id),
            "Resources": {"TPU": 4.0, "CPU": 1.0}}


def cluster(tmp_path: Path, *hosts: state.NodeProc) -> state.LocalCluster:
    head = state.NodeProc(role="head", pid=10, log="")
    return state.LocalCluster(run_dir=str(tmp_path), temp_dir="/tmp/raytpu-x", address="127.0.0.1:1",
                              plan=PLAN.to_json(), slices=["s-0"], nodes=[head, *hosts])


def host(pid: int, worker_id: int, killed: bool = False) -> state.NodeProc:
    return state.NodeProc(role="host", pid=pid, log="", slice_name="s-0", worker_id=worker_id, killed=killed)


@pytest.fixture(autouse=True)
def processes_as_recorded(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every recorded process runs unless it was killed (the emulated hosts' process groups)."""
    monkeypatch.setattr(status_table, "node_alive", lambda _cluster, node: not node.killed)


def test_a_replaced_host_is_a_row_of_its_own_and_no_fault(tmp_path: Path) -> None:
    replaced = cluster(tmp_path, host(11, 0), host(12, 1, killed=True), host(13, 1))
    head = {"Alive": True, "NodeID": "h" * 16, "Labels": {}, "Resources": {"node:__internal_head__": 1.0}}
    rows = status_table.status_rows(replaced, [head, gcs_node(0), gcs_node(1)])
    assert [(r.pid, r.alive, r.replaced, r.labels_ok) for r in rows] == [
        (10, True, False, True), (11, True, False, True), (12, False, True, True), (13, True, False, True)]
    assert rows[2].node_id == "" and rows[3].node_id == "node10000000"  # the live node is the replacement's
    assert status_table.healthy(rows)
    table = status_table.render_status(rows).splitlines()
    assert table[3].split()[:5] == ["s-0", "1", "12", "-", "replaced"]


def test_a_host_killed_and_not_replaced_is_still_a_fault(tmp_path: Path) -> None:
    broken = cluster(tmp_path, host(11, 0), host(12, 1, killed=True))
    head = {"Alive": True, "NodeID": "h" * 16, "Labels": {}, "Resources": {"node:__internal_head__": 1.0}}
    rows = status_table.status_rows(broken, [head, gcs_node(0)])
    assert [(r.pid, r.alive, r.replaced) for r in rows] == [(10, True, False), (11, True, False), (12, False, False)]
    assert not status_table.healthy(rows)
    assert "NO" in status_table.render_status(rows).splitlines()[3].split()
