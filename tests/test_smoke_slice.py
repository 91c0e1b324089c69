"""Whole-slice reservation and the smoke check on emulated slices (real Ray, JAX on CPU).

The session's cluster of two 2-host slices (``two_slices``, conftest); tests run in file order and the later
ones break it (a host killed), the last one makes it whole again (the host replaced). Faults a CPU cannot have
(a slow device, a host whose check raises) are injected through the smoke program's documented
``RAYTPU_SMOKE_INJECT_*`` hooks.
"""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest
from html_reports import in_chromium, marked, needs_chromium

from raytpu.core.common import report, timeline
from raytpu.core.tpu.catalog import expected_busbw, generation
from raytpu.core.tpu.plan import SlicePlan, plan_slice
from raytpu.local.running import jobs
from raytpu.local.slice import diagnose, procs, startup, state, status_table
from raytpu.workloads.smoke import cli, driver
from raytpu.workloads.smoke.faults import ENV_INJECT_ERROR, ENV_INJECT_SLOW
from raytpu.workloads.smoke.options import MIN_PEER_RATIO
from raytpu.workloads.support import slices
from raytpu.workloads.support._entry import end_quiet_driver

pytestmark = [pytest.mark.slice, pytest.mark.timeout(300)]

SHORT_S = 4.0
STATE: dict[str, Any] = {}
"""Carries a pending placement group from one test to the next (tests run in file order)."""


def connect(cluster: state.LocalCluster) -> None:
    import logging

    import ray

    if ray.is_initialized():
        ray.shutdown()
    ray.init(address=cluster.address, log_to_driver=False, logging_level=logging.ERROR)


@pytest.fixture(scope="module")
def plan() -> SlicePlan:
    """v6e 2x4 as two 4-chip hosts (xpk's shape): the smallest multi-host slice."""
    return plan_slice("v6e", "2x4", generation("v6e").multi_host_machine_type.name)


@pytest.fixture(scope="module")
def cluster(two_slices: state.LocalCluster, plan: SlicePlan) -> Iterator[state.LocalCluster]:
    assert two_slices.slice_plan == plan
    connect(two_slices)
    yield two_slices
    import ray

    ray.shutdown()


def bundle_nodes(pg: Any) -> list[str]:
    import ray
    from ray.util.placement_group import placement_group_table

    table = placement_group_table(pg)
    assert table["state"] == "CREATED", table
    node_ids = list(table["bundles_to_node_id"].values())
    assert node_ids and ray.is_initialized()
    return node_ids


def slice_of(node_ids: list[str]) -> set[tuple[str, str]]:
    import ray

    labels = {n["NodeID"]: n["Labels"] for n in ray.nodes()}
    return {(labels[n]["ray.io/tpu-slice-name"], labels[n]["ray.io/tpu-worker-id"]) for n in node_ids}


def run_smoke(cluster: state.LocalCluster, *extra: str) -> subprocess.CompletedProcess[str]:
    return jobs.run_workload(cluster, "smoke", "--reserve-timeout-s", "30", *extra, timeout_s=240)


def only_verdict(done: subprocess.CompletedProcess[str]) -> report.Verdict:
    verdicts = report.parse_verdict_lines(done.stdout)
    assert len(verdicts) == 1, (done.stdout[-2000:], done.stderr[-3000:])
    return verdicts[0]


def checks_of(verdict: Mapping[str, Any]) -> dict[str, report.Check]:
    return {c["name"]: c for c in verdict["checks"]}


def test_hosts_carry_the_gke_labels_and_only_worker_0_the_head_resource(cluster: state.LocalCluster,
                                                                          plan: SlicePlan) -> None:
    rows = [r for r in status_table.status(cluster) if r.worker_id >= 0]
    assert len(rows) == 2 * plan.hosts
    assert all(r.alive and r.labels_ok for r in rows)
    assert [plan.head_resource in r.resources for r in rows] == [w == 0 for _ in cluster.slices
                                                                  for w in range(plan.hosts)]


def test_whole_slice_reservation_lands_on_one_slice(cluster: state.LocalCluster, plan: SlicePlan) -> None:
    held = slices.reserve_slice(plan, timeout_s=30)
    try:
        placed = slice_of(bundle_nodes(held.placement_group))
        assert {name for name, _ in placed} == {held.slice_name}
        assert {worker for _, worker in placed} == {str(w) for w in range(plan.hosts)}
    finally:
        held.release()


def test_bundle_i_lands_on_the_host_with_worker_id_i(cluster: state.LocalCluster, plan: SlicePlan) -> None:
    """Bundle i runs JAX process i: it must be TPU worker i (smoke pins it; Ray's SPREAD alone does not)."""
    import ray
    from ray.util.placement_group import placement_group_table

    for name in cluster.slices * 2:
        held = slices.reserve_slice(plan, slice_name=name, timeout_s=30)
        try:
            labels = {n["NodeID"]: n["Labels"] for n in ray.nodes()}
            placed = placement_group_table(held.placement_group)["bundles_to_node_id"]
            assert {int(i): (labels[node]["ray.io/tpu-slice-name"], labels[node]["ray.io/tpu-worker-id"])
                    for i, node in placed.items()} == {i: (name, str(i)) for i in range(plan.hosts)}
        finally:
            held.release()


def test_a_topology_ray_refuses_ends_in_a_verdict_and_holds_nothing(cluster: state.LocalCluster,
                                                                     plan: SlicePlan) -> None:
    """Ray 2.60's SlicePlacementGroup raises ValueError outside VALID_TPU_TOPOLOGY
    (``ray.util.tpu.SlicePlacementGroup._validate_tpu_config``); v6e 1x8 is not in it
    (``ray._private.accelerators.tpu.VALID_TPU_TOPOLOGY``). The check names the cause and leaves the slice free."""
    name = cluster.slices[0]
    refused = dataclasses.replace(plan, topology="1x8")
    verdict = driver.check_slice(refused, slices.inventory(plan)[name],
                                 cli.parse_options(["--reserve-timeout-s", "10"]))
    assert not verdict["healthy"]
    reservation = checks_of(verdict)["reservation"]
    assert not reservation["ok"] and "ValueError" in reservation["detail"] and "'1x8'" in reservation["detail"]
    held = slices.reserve_slice(plan, slice_name=name, timeout_s=10)  # the claimed head was given back
    held.release()


def test_a_driver_ends_only_the_ray_connection_it_made(cluster: state.LocalCluster) -> None:
    """The smoke and train drivers end their own connection after their last line (Ray's exit hook sleeps 0.5 s
    first: Ray 2.60 ``ray._private.worker.shutdown``); a caller's connection (here the module's) stays usable."""
    import ray

    end_quiet_driver(connected_here=False)
    assert ray.is_initialized() and ray.cluster_resources().get("TPU", 0) > 0


def test_rays_slice_placement_group_also_takes_one_whole_slice(cluster: state.LocalCluster,
                                                                 plan: SlicePlan) -> None:
    import ray
    from ray.util.tpu import slice_placement_group

    spg = slice_placement_group(plan.topology, plan.ray_accelerator_type, chips_per_vm=plan.chips_per_host,
                                head_reservation_timeout_s=30)
    try:
        ray.get(spg.placement_group.ready(), timeout=30)
        assert len({name for name, _ in slice_of(bundle_nodes(spg.placement_group))}) == 1
    finally:
        spg.shutdown()


def test_two_reservations_take_different_slices_and_a_third_waits(cluster: state.LocalCluster,
                                                                   plan: SlicePlan) -> None:
    first = slices.reserve_slice(plan, timeout_s=30)
    second = slices.reserve_slice(plan, timeout_s=30)
    try:
        assert {first.slice_name, second.slice_name} == set(cluster.slices)
        assert slice_of(bundle_nodes(first.placement_group)).isdisjoint(slice_of(bundle_nodes(second.placement_group)))
        with pytest.raises(TimeoutError, match="busy"):
            slices.reserve_slice(plan, timeout_s=SHORT_S)
    finally:
        first.release()
        second.release()
    again = slices.reserve_slice(plan, timeout_s=30)  # released slices are free again
    again.release()


def test_smoke_passes_on_healthy_slices(cluster: state.LocalCluster, plan: SlicePlan) -> None:
    done = run_smoke(cluster)
    verdicts: Sequence[Mapping[str, Any]] = report.parse_verdict_lines(done.stdout)  # as JSON: figures checked below
    failed = [(v["slice"], c["name"], c.get("detail", "")[:400]) for v in verdicts for c in v["checks"]
              if not c["ok"] and not c.get("informational")]
    assert done.returncode == 0, (failed, done.stderr[-3000:])
    assert sorted(v["slice"] for v in verdicts) == sorted(cluster.slices)
    floors = generation(plan.generation).smoke
    assert floors is not None
    for v in verdicts:
        assert v["healthy"] and v["hosts_found"] == plan.hosts
        checks = {c["name"]: c for c in v["checks"]}
        assert checks["psum"]["value"] == checks["psum"]["expected"] == plan.chips * (plan.chips + 1) / 2
        assert checks["devices_total"]["value"] == plan.chips
        # catalog floors are reported but do not gate on CPU devices; the peer ratios gate everywhere
        for name in ("matmul_tflops_ratio", "hbm_bandwidth_ratio", "allreduce_bandwidth_gbps", "hbm_ratio"):
            assert checks[name]["informational"] and "informational" in checks[name]["detail"]
        for name in ("matmul_tflops_peer_ratio", "hbm_bandwidth_peer_ratio"):
            assert checks[name]["ok"] and not checks[name].get("informational")
        # the TPU_* env is not compared with labels copied from it; what is independent is named, not gating here
        assert checks["device_kind"]["informational"] and checks["worker_hostnames"]["informational"]
        # one matmul and one HBM row per device, the ICI figure against the catalog's, the latency apart
        rows = {(r["metric"], r["worker_id"], r["device"]): r for r in v["perf"]}
        assert {k for k in rows if k[2] is not None} == {(m, w, d) for m in ("matmul_tflops", "hbm_bandwidth")
                                                         for w in range(plan.hosts)
                                                         for d in range(plan.chips_per_host)}
        assert all(r["value"] > 0 and not r["gates"] and r["min_peer_ratio"] == MIN_PEER_RATIO
                   for k, r in rows.items() if k[2] is not None)
        ici = rows[("allreduce_busbw", None, None)]
        expected = expected_busbw(plan.generation, plan.topology)
        assert expected is not None
        assert ici["value"] > 0 and ici["reference"] == pytest.approx(expected.busbw_gbps)
        assert ici["min_ratio"] == floors.busbw_of_expected and not ici["gates"]
        assert checks["allreduce_bandwidth_gbps"]["expected"] == pytest.approx(floors.busbw_of_expected
                                                                               * ici["reference"])
        # each mesh axis's own all-reduce, reported (informational) on the emulated slice
        for axis in (a for a in expected.axes if a.size > 1):
            row = rows[(f"allreduce_busbw_{axis.name}", None, None)]
            assert row["value"] > 0 and not row["gates"] and row["reference"] == pytest.approx(axis.busbw_gbps)
            assert checks[f"allreduce_axis_{axis.name}_gbps"]["informational"]
        assert rows[("allreduce_latency", None, None)]["value"] > 0 and checks["allreduce_latency_us"]["value"] > 0
        table = report.render_table([v])
        assert "gates here: no" in table and "gates here: yes" in table and "allreduce_busbw" in table
        # the timeline stamps it made, in the verdict and as lines (raytpu.core.common.timeline): the slice reserved,
        # then the first host result, and (issue 41) when the slowest host's last compile ended, judged after
        assert [s["phase"] for s in v["stamps"]] == ["reserved", "first_step", "compiled"]
        assert "cache hit" in v["stamps"][2]["detail"] and checks["compile"]["informational"]
        assert v["stamps"][0]["wall"] <= v["stamps"][1]["wall"] and v["slice"] in v["stamps"][0]["detail"]
    lines = timeline.parse_stamp_lines(done.stdout)
    assert lines[0]["phase"] == "ray_joined" and all(s in lines for v in verdicts for s in v["stamps"])


def workers_started(cluster: state.LocalCluster) -> dict[str, int]:
    """Worker processes each node's raylet has started, by node (``head`` or ``<slice>/<worker id>``), counted in its
    own log. Source: Ray 2.60 ``WorkerPool::StartWorkerProcess`` ("Started worker process with pid")."""
    counts = {}
    for node in cluster.nodes:
        if node.killed:
            continue
        logs = {os.path.realpath(log) for log in diagnose.raylet_logs(node.temp)}  # session_latest links to one
        counts["head" if node.role == "head" else f"{node.slice_name}/{node.worker_id}"] = sum(
            Path(log).read_text(errors="replace").count("Started worker process with pid") for log in logs)
    return counts


def test_the_smoke_starts_one_worker_process_per_host_and_none_on_the_head(cluster: state.LocalCluster,
                                                                             plan: SlicePlan) -> None:
    """Each host's check runs in one Ray actor (raytpu.workloads.smoke.host_process). As a task it cost every host a
    second worker process that never ran anything, and the head a third: a raylet starts one more worker for a task
    lease with a backlog (Ray 2.60 ``WorkerPool::PrestartWorkers``, "Prestarting 1 workers given lease backlog size
    1"); an actor gets just its own process."""
    before = workers_started(cluster)
    done = run_smoke(cluster)
    assert done.returncode == 0, done.stderr[-3000:]
    started = {node: n - before[node] for node, n in workers_started(cluster).items()}
    assert started == {"head": 0} | {f"{name}/{w}": 1 for name in cluster.slices for w in range(plan.hosts)}, started


def test_a_slow_device_is_named_and_makes_its_slice_unhealthy(cluster: state.LocalCluster, plan: SlicePlan,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """One device 10x slower than its peers (a delay injected into its timed loops) fails the slice on any
    hardware, and the verdict names that device."""
    monkeypatch.setenv(ENV_INJECT_SLOW, "1:2:10")
    done = run_smoke(cluster, "--slice-name", cluster.slices[0])
    assert done.returncode == 1, done.stderr[-3000:]
    v = only_verdict(done)
    checks = checks_of(v)
    assert not v["healthy"] and v["injected"] == [f"{ENV_INJECT_SLOW}: host 1 device 2 slowed x10"]
    for name in ("matmul_tflops_peer_ratio", "hbm_bandwidth_peer_ratio"):
        assert not checks[name]["ok"] and checks[name]["detail"].startswith("host 1 device 2 at 0.")
    assert sorted((r["metric"], r["worker_id"], r["device"]) for r in v["perf"] if not r["ok"]) == [
        ("hbm_bandwidth", 1, 2), ("matmul_tflops", 1, 2)]
    assert [h["worker_id"] for h in v["hosts"] if not h["ok"]] == [1]
    assert report.headline(v).startswith(f"slice {cluster.slices[0]} unhealthy: host 1: device 2: matmul_tflops")
    STATE["slow_verdict"] = v  # drawn in Chromium below


def test_a_host_whose_check_raises_gives_a_verdict_naming_it(cluster: state.LocalCluster,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(ENV_INJECT_ERROR, "1")
    started = time.monotonic()
    done = run_smoke(cluster, "--slice-name", cluster.slices[0])
    assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr[-3000:]
    assert time.monotonic() - started < 120  # host 0 is stopped, not left waiting for its peer until the limit
    v = only_verdict(done)
    host_checks = checks_of(v)["host_checks"]
    assert not v["healthy"] and not host_checks["ok"]
    assert host_checks["detail"].startswith("host 1: RuntimeError: fault injected") and "stopped host(s) 0" in \
        host_checks["detail"]
    assert [h["worker_id"] for h in v["hosts"] if not h["ok"]] == [1]


def test_one_host_missing_nothing_is_placed_and_the_timeout_names_the_slice(cluster: state.LocalCluster,
                                                                            plan: SlicePlan) -> None:
    import ray
    from ray.util.placement_group import placement_group_table
    from ray.util.tpu import slice_placement_group

    broken, healthy = cluster.slices
    procs.kill_host(cluster, broken, 1)
    _wait_dead(broken, 1)
    with pytest.raises(TimeoutError) as caught:
        slices.reserve_slice(plan, slice_name=broken, timeout_s=SHORT_S)
    assert broken in str(caught.value) and "missing worker 1" in str(caught.value)
    assert "nothing was placed" in str(caught.value)

    # Ray's own call, unpinned, while the intact slice is busy: its head lands on the broken slice's
    # worker 0 and the worker bundles stay pending (no partial placement).
    held = slices.reserve_slice(plan, slice_name=healthy, timeout_s=30)
    try:
        spg = slice_placement_group(plan.topology, plan.ray_accelerator_type, chips_per_vm=plan.chips_per_host,
                                    head_reservation_timeout_s=10)
        ready, _ = ray.wait([spg.placement_group.ready()], timeout=SHORT_S)
        assert not ready
        table = placement_group_table(spg.placement_group)
        assert table["state"] != "CREATED" and not any(table["bundles_to_node_id"].values())
        STATE["pending_spg"] = spg  # the next test removes it
    finally:
        held.release()


def test_smoke_fails_on_the_broken_slice_naming_the_missing_host(cluster: state.LocalCluster) -> None:
    spg = STATE.pop("pending_spg", None)
    if spg is not None:  # free the healthy slice's competitor first
        spg.shutdown()
    broken, healthy = cluster.slices
    done = run_smoke(cluster, "--check-timeout-s", "15")  # the missing host is waited for, up to the limit
    assert done.returncode == 1
    assert f"waiting up to 15s for {broken} (missing worker 1)" in done.stderr
    verdicts = {v["slice"]: v for v in report.parse_verdict_lines(done.stdout)}
    assert verdicts[healthy]["healthy"]
    bad = verdicts[broken]
    assert not bad["healthy"] and bad["hosts_found"] == bad["hosts_expected"] - 1
    present = next(c for c in bad["checks"] if c["name"] == "hosts_present")
    assert not present["ok"] and "missing worker id(s) 1" in present["detail"]
    assert [h["worker_id"] for h in bad["hosts"] if not h["ok"]] == [1]
    # one structured line per slice for Cloud Logging (jsonPayload): what the alerting metric counts and on-call reads
    entries = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    logged = {e[report.LOG_KEY]["slice"]: e for e in entries}
    assert logged[broken]["severity"] == "ERROR" and logged[broken][report.LOG_KEY]["state"] == "unhealthy"
    assert logged[broken]["message"] == f"slice {broken} unhealthy: 1 of {bad['hosts_expected']} host(s) missing"
    assert logged[healthy]["severity"] == "INFO"
    STATE["missing_verdicts"] = [bad, verdicts[healthy]]


@needs_chromium
def test_the_emulated_slices_pages_mark_the_slow_chip_and_the_missing_host(plan: SlicePlan, tmp_path: Path) -> None:
    """Issue 42 on the emulated slice's own verdicts (a device made slow, a host killed) in headless Chromium."""
    per_host = plan.chips_per_host
    slow = in_chromium(tmp_path, "emulated-slow-chip", {"slices": [STATE.pop("slow_verdict")]})
    assert marked(slow) == ([1 * per_host + 2], [])  # host 1 device 2, as injected
    gone = in_chromium(tmp_path, "emulated-missing-host", {"slices": STATE.pop("missing_verdicts")})
    assert marked(gone) == ([], list(range(1 * per_host, 2 * per_host)))  # worker 1 killed


def test_a_replacement_host_that_joins_late_is_waited_for_and_makes_the_slice_whole(
        cluster: state.LocalCluster, plan: SlicePlan) -> None:
    broken, _ = cluster.slices
    outcome: dict[str, subprocess.CompletedProcess[str]] = {}
    waiting = threading.Thread(target=lambda: outcome.setdefault("smoke", run_smoke(cluster)))
    waiting.start()  # the smoke check starts while worker 1 is still missing
    time.sleep(3)
    startup.add_host(cluster, broken, 1)
    waiting.join(timeout=240)
    done = outcome["smoke"]
    assert done.returncode == 0, done.stderr[-3000:]
    assert f"for {broken} (missing worker 1)" in done.stderr
    assert sorted(v["slice"] for v in report.parse_verdict_lines(done.stdout) if v["healthy"]) == sorted(cluster.slices)
    held = slices.reserve_slice(plan, slice_name=broken, timeout_s=30)
    try:
        assert {name for name, _ in slice_of(bundle_nodes(held.placement_group))} == {broken}
    finally:
        held.release()


def _wait_dead(slice_name: str, worker: int, timeout_s: float = 90) -> None:
    import time

    import ray

    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        alive = [n for n in ray.nodes() if n["Alive"] and n["Labels"].get("ray.io/tpu-slice-name") == slice_name
                 and n["Labels"].get("ray.io/tpu-worker-id") == str(worker)]
        if not alive:
            return
        time.sleep(0.5)
    raise AssertionError(f"{slice_name} worker {worker} still alive in the GCS after {timeout_s}s")
