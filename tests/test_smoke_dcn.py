"""The smoke check's DCN part (:mod:`raytpu.workloads.smoke.dcn`) without a cluster: which slice is named cut off,
how the hosts' figures are judged (gating on real TPU only, as the ICI rows), the reach probe on real sockets, bad
input, and the verdict's ``dcn`` section in the table, headline and JUnit. The emulated two-slice run is
``tests/test_multislice.py::test_smoke_all_reduces_across_two_slices_over_dcn_and_names_a_slice_cut_off``."""

from __future__ import annotations

import re
import socket
import time
from pathlib import Path
from typing import Any

import pytest

from raytpu.core.common import report
from raytpu.core.common.errors import InvalidInput
from raytpu.core.tpu.plan import SlicePlan, plan_slice
from raytpu.workloads.smoke import cli, dcn
from raytpu.workloads.smoke.measure import ENV_EMULATED
from raytpu.workloads.smoke.options import SmokeOptions
from raytpu.workloads.smoke.verdict import new_check, slice_verdict

pytestmark = pytest.mark.unit

NAMES = ["slice-a", "slice-b", "slice-c"]


@pytest.fixture
def plan() -> SlicePlan:
    return plan_slice("v5p", "2x2x2")


@pytest.fixture(autouse=True)
def not_emulated(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(ENV_EMULATED, raising=False)


def result(slice_id: int, worker: int, gbps: float, platform: str = "tpu", emulated: bool = False,
           slices: int = 3) -> dict[str, Any]:
    return {"process_id": slice_id * 2 + worker, "slice_id": slice_id, "platform": platform, "devices": 4,
            "psum": slices * (slices + 1) / 2, "host_gbps": gbps, "mib_per_device": 256.0, "iters": 10,
            "emulated": emulated, "megascale": {"MEGASCALE_SLICE_ID": str(slice_id), "MEGASCALE_NUM_SLICES": "3"}}


def healthy_run(gbps: float = 20.0, **kwargs: Any) -> dcn.DcnRun:
    return dcn.DcnRun({(s, w): result(s, w, gbps, **kwargs) for s in range(3) for w in range(2)}, {}, [])


def checks(section: report.DcnSection) -> dict[str, report.Check]:
    return {c["name"]: c for c in section["checks"]}


def test_a_slice_whose_hosts_fail_is_named_and_the_waiting_ones_are_not() -> None:
    run = dcn.DcnRun({}, {(2, 0): "ConnectionError: cannot reach", (2, 1): "ConnectionError: cannot reach"},
                     [(0, 0), (0, 1), (1, 0), (1, 1)])
    assert dcn.cut_off_slices(run, 3) == {2: "host 0: ConnectionError: cannot reach; host 1: ConnectionError: "
                                             "cannot reach"}


def test_when_every_slice_fails_the_coordinators_slice_is_named() -> None:
    run = dcn.DcnRun({}, {(0, 0): "ConnectionError: refused", (1, 0): "ConnectionError: refused"}, [(0, 1), (1, 1)])
    named = dcn.cut_off_slices(run, 2)
    assert list(named) == [0] and named[0].startswith("no other slice reached the coordinator on its host 0")


def test_with_no_failure_a_slice_that_gave_nothing_is_named() -> None:
    run = dcn.DcnRun({(0, 0): result(0, 0, 1.0)}, {}, [(0, 1), (1, 0), (1, 1)])
    assert dcn.cut_off_slices(run, 2) == {1: "host(s) 0, 1 gave no result within the limit"}


def test_on_tpu_a_slow_dcn_gates_and_makes_every_slice_of_the_run_unhealthy(plan: SlicePlan) -> None:
    sections = dcn.judge_dcn(plan, NAMES, healthy_run(gbps=3.0), SmokeOptions())
    for name in NAMES:
        busbw = checks(sections[name])["dcn_allreduce_busbw_gbps"]
        assert not busbw["ok"] and not busbw.get("informational")
        assert busbw["expected"] == 0.5 * 200 / 8 and busbw["value"] == 3.0  # ct5p-hightpu-4t: 200 Gbps
        assert dcn.LINE_RATE_SOURCE in busbw["detail"] and "ct5p-hightpu-4t: 200 Gbps" in busbw["detail"]
        assert [r["metric"] for r in sections[name]["perf"]] == ["dcn_allreduce_busbw"] * 2
        assert all(r["gates"] and not r["ok"] for r in sections[name]["perf"])
    verdicts = [slice_verdict(plan, n, plan.hosts, [new_check("psum", True, "")], {}, time.monotonic())
                for n in NAMES]
    dcn.attach(verdicts, sections)
    assert [v["healthy"] for v in verdicts] == [False] * 3


def test_on_tpu_a_fast_dcn_passes(plan: SlicePlan) -> None:
    sections = dcn.judge_dcn(plan, NAMES, healthy_run(gbps=20.0), SmokeOptions())
    found = checks(sections["slice-b"])
    assert found["dcn_reach"]["ok"] and found["dcn_psum"]["ok"] and found["dcn_allreduce_busbw_gbps"]["ok"]
    assert sections["slice-b"]["megascale"]["MEGASCALE_SLICE_ID"] == "1"


@pytest.mark.parametrize(("kwargs", "mode"), [({"platform": "cpu"}, "auto"), ({"emulated": True}, "auto"),
                                              ({}, "off")])
def test_off_tpu_or_emulated_the_dcn_floor_is_informational(plan: SlicePlan, kwargs: dict[str, Any],
                                                             mode: Any) -> None:
    sections = dcn.judge_dcn(plan, NAMES, healthy_run(gbps=0.01, **kwargs), SmokeOptions(perf_thresholds=mode))
    busbw = checks(sections["slice-a"])["dcn_allreduce_busbw_gbps"]
    assert busbw["ok"] and busbw["informational"] and "not met here" in busbw["detail"]
    assert all(r["ok"] and not r["gates"] for r in sections["slice-a"]["perf"])


def test_a_cut_off_slice_fails_alone_and_the_others_stay_healthy(plan: SlicePlan) -> None:
    run = dcn.DcnRun({}, {(1, 0): "ConnectionError: cannot reach the DCN coordinator 10.0.0.1:1234 within 30s"},
                     [(0, 0), (0, 1), (1, 1), (2, 0), (2, 1)])
    sections = dcn.judge_dcn(plan, NAMES, run, SmokeOptions())
    reach = checks(sections["slice-b"])["dcn_reach"]
    assert not reach["ok"] and reach["detail"].startswith("slice slice-b cannot reach the other slices")
    assert "host 0: ConnectionError: cannot reach the DCN coordinator" in reach["detail"]
    verdicts = [slice_verdict(plan, n, plan.hosts, [], {}, time.monotonic()) for n in NAMES]
    dcn.attach(verdicts, sections, cut_off=1)
    assert [v["healthy"] for v in verdicts] == [True, False, True]
    assert report.headline(verdicts[1]).startswith("slice slice-b unhealthy: dcn_reach: slice slice-b cannot")
    assert "slice-b dials a closed port" in verdicts[0]["injected"][0]
    table = report.render_table(verdicts)
    assert "DCN (cross-slice all-reduce over slice-a, slice-b, slice-c" in table and "dcn_reach" in table
    junit = report.junit_xml(verdicts)
    assert junit.count("<failure") == 1 and "cannot reach the other slices" in junit


def test_fewer_slices_than_the_run_spans_fail_every_slice_found(plan: SlicePlan) -> None:
    from raytpu.workloads.support.slices import SliceInventory

    found = [SliceInventory("slice-a", {0: {}, 1: {}}, plan.hosts)]
    sections = dcn.check_dcn(plan, found, SmokeOptions(), 2, limit_s=5)
    reach = checks(sections["slice-a"])["dcn_reach"]
    assert not reach["ok"] and "1 v5p-16 slice(s) found, a multi-slice run spans 2" in reach["detail"], reach


def test_reach_connects_to_a_listener_and_names_a_closed_port() -> None:
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        assert dcn.reach(f"127.0.0.1:{server.getsockname()[1]}", 5) < 5
    held, port = dcn._closed_port()
    try:
        with pytest.raises(ConnectionError, match=rf"cannot reach the DCN coordinator 127.0.0.1:{port} within 1s"):
            dcn.reach(f"127.0.0.1:{port}", 1)
    finally:
        held.close()


@pytest.mark.parametrize("value", ["x", "-1", "2", "1.5", " 1"])
def test_a_bad_cut_off_injection_is_invalid_input(value: str) -> None:
    with pytest.raises(InvalidInput) as caught:
        dcn.unreachable_from_env(2, {dcn.ENV_INJECT_UNREACHABLE: value})
    assert caught.value.exit_code == 2 and dcn.ENV_INJECT_UNREACHABLE in str(caught.value)
    assert "0..1" in str(caught.value)


@pytest.mark.parametrize(("value", "more"), [("0", []), ("-2", []), ("3", []), ("99", []),
                                           ("2", ["--slice-name", "one"])])
def test_a_bad_dcn_slices_exits_2_naming_the_flag_before_any_ray(value: str, more: list[str],
                                                                 monkeypatch: pytest.MonkeyPatch,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    import ray

    from raytpu.config import load

    spec = load(Path(__file__).resolve().parent.parent / "raytpu.example.yaml")
    for key, env in spec.workload("smoke").workload_env().items():
        monkeypatch.setenv(key, env)

    def no_ray(*_args: Any, **_kwargs: Any) -> None:
        raise AssertionError("ray.init reached")

    monkeypatch.setattr(ray, "init", no_ray)
    assert cli.main(["--dcn-slices", value, *more]) == 2
    err = capsys.readouterr().err
    assert "--dcn-slices" in err and value in err and ("--slice-name" if more else "1..") in err
    assert "Traceback" not in err


@pytest.mark.parametrize(("value", "valid"), [("0", "1 to 1000000"), ("-1", "1 to 1000000"), ("3", "1..2"),
                                              ("40", "1..2")])
def test_local_smoke_refuses_more_dcn_slices_than_the_cluster_has(value: str, valid: str, tmp_path: Path,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    """A recorded two-slice cluster (its state file only: nothing runs); exit 2 before any workload starts. Below 1
    is refused while parsing (issue 28 item 9), before the cluster is read; above its slices, once it is read."""
    from raytpu import cli as raytpu_cli
    from raytpu.local.slice.state import LocalCluster

    plan = plan_slice("v5p", "2x2x2")
    LocalCluster(str(tmp_path), "/tmp/none", "127.0.0.1:1", plan.to_json(), ["s0", "s1"]).save()
    assert raytpu_cli.main(["local", "--dir", str(tmp_path), "smoke", "--dcn-slices", value]) == 2
    err = capsys.readouterr().err
    assert "--dcn-slices" in err and value in err and valid in err and "Traceback" not in err


@pytest.mark.parametrize(("gen", "topology", "gbps", "line_rate", "healthy"), [
    ("v6e", "4x4", 12.5, 50.0, False),  # ct6e-standard-4t, 400 Gbps: 25% of it passed the old 25 GB/s figure
    ("v6e", "4x4", 26.0, 50.0, True),
    ("tpu7x", "2x2x2", 20.0, 50.0, False),  # tpu7x-standard-4t, 400 Gbps
    ("v5p", "2x2x2", 13.0, 25.0, True),  # ct5p-hightpu-4t, 200 Gbps
    ("v5e", "4x4", 6.0, 12.5, False),  # ct5lp-hightpu-4t, 100 Gbps
    ("v5e", "4x4", 7.0, 12.5, True),
    ("v4", "2x2x2", 13.0, dcn.DCN_GBPS_PER_HOST, True),  # ct4p-hightpu-4t: no published figure, the book's
])
def test_on_tpu_the_dcn_floor_is_half_the_hosts_own_line_rate(gen: str, topology: str, gbps: float,
                                                               line_rate: float, healthy: bool) -> None:
    sliced = plan_slice(gen, topology)
    sections = dcn.judge_dcn(sliced, NAMES, healthy_run(gbps=gbps), SmokeOptions())
    busbw = checks(sections["slice-a"])["dcn_allreduce_busbw_gbps"]
    assert busbw["ok"] is healthy and not busbw.get("informational")
    assert busbw["expected"] == 0.5 * line_rate
    assert all(r["reference"] == line_rate for r in sections["slice-a"]["perf"])
    assert sections["slice-a"]["source"] == dcn.line_rate(sliced)[1]


def test_every_multi_host_machine_type_has_a_line_rate_or_is_named_as_unpublished() -> None:
    from raytpu.core.tpu.catalog import GENERATIONS

    machines = [g.multi_host_machine_type for g in GENERATIONS.values()]
    unpublished = {m.name for m in machines if m.network_gbps is None}
    assert unpublished == {"ct4p-hightpu-4t"}


class _Device:
    """What :func:`dcn.slice_rows` reads of a JAX device."""

    def __init__(self, platform: str, process_index: int, id: int, slice_index: int = 0) -> None:
        self.platform, self.process_index, self.id, self.slice_index = platform, process_index, id, slice_index

    def __repr__(self) -> str:
        return f"{self.platform}:p{self.process_index}/d{self.id}/s{self.slice_index}"


def test_on_tpu_devices_are_grouped_by_slice_index_not_by_process_index() -> None:
    """Issue 40 item 7: on TPU the runtime numbers processes itself (v6e 4x4 reports: not the id given to
    jax.distributed.initialize), so process 1 may be a host of slice 1 while process 2 is one of slice 0; grouping by
    ``process_index // hosts`` would put both slices' devices in one row and time an ICI all-reduce."""
    # 2 slices x 2 hosts x 2 devices; the runtime gave slice 0's hosts processes 0 and 2, slice 1's 1 and 3
    devices = [_Device("tpu", p, p * 2 + d, slice_index=p % 2) for p in range(4) for d in range(2)]
    rows = dcn.slice_rows(devices, slices=2, hosts_per_slice=2)
    assert [[d.slice_index for d in row] for row in rows] == [[0] * 4, [1] * 4]
    assert [[d.process_index for d in row] for row in rows] == [[0, 0, 2, 2], [1, 1, 3, 3]]


def test_off_tpu_devices_are_grouped_by_the_process_the_run_gave_each_host() -> None:
    """CPU devices carry slice_index 0 on every process: there the run's own numbering (host i of slice s is process
    s x hosts + i) groups them."""
    devices = [_Device("cpu", p, p, slice_index=0) for p in range(4)]
    rows = dcn.slice_rows(devices, slices=2, hosts_per_slice=2)
    assert [[d.process_index for d in row] for row in rows] == [[0, 1], [2, 3]]


@pytest.mark.parametrize(("indices", "says"), [
    ([0, 0, 0, 0], "{0: 4}"),  # one slice seen: libtpu got no MEGASCALE env
    ([0, 0, 0, 1], "{0: 3, 1: 1}"),  # unequal rows
    ([0, 0, 2, 2], "{0: 2, 2: 2}"),  # a slice index past the run's slices
])
def test_slices_that_do_not_split_the_devices_evenly_are_a_runtime_error_naming_the_counts(
        indices: list[int], says: str) -> None:
    devices = [_Device("tpu", p, p, slice_index=s) for p, s in enumerate(indices)]
    with pytest.raises(RuntimeError, match=re.escape(f"devices by slice_index: {says} (slice: devices)")):
        dcn.slice_rows(devices, slices=2, hosts_per_slice=2)
