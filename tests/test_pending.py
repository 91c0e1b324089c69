"""A run that cannot be placed says so (issue 67), without a cluster: :mod:`raytpu.local.running.pending`'s line from
recorded state-API dicts, its bound, its timing in ``submit --local``, and the note ``raytpu runs --local`` shows.

The records are trimmed from a Ray 2.60 cluster of two emulated v6e 2x4 slices (``ray.util.state``
``list_placement_groups(detail=True)`` and ``list_nodes(detail=True)``, each state as ``vars``): a job holding one
host's chips, asking 64 chips (INFEASIBLE) and both hosts of a slice by its label (NO_RESOURCES)."""

from __future__ import annotations

import json
import threading
import time
from typing import Any

import pytest

from raytpu.local.running import pending
from raytpu.local.running import runs as local_runs
from raytpu.runs.run_list import Run, render

pytestmark = pytest.mark.unit

NOW = 1_796_651_352.0
SLICES = ("raytpu-local-v6e-8-0", "raytpu-local-v6e-8-1")


def node(node_id: str, slice_name: str | None, worker: int | None, *, head: bool = False) -> dict[str, Any]:
    """A ``NodeState`` as a dict: a TPU host (``TPU: 4``, its slice and worker labels) or the head."""
    total: dict[str, float] = {"CPU": 2.0, "memory": 24672350208.0, "object_store_memory": 134217728.0,
                               "node:192.0.2.2": 1.0}
    labels = {"ray.io/node-id": node_id}
    if slice_name is not None:
        total |= {"TPU": 4.0, slice_name: 1.0, "accelerator_type:TPU-V6E": 1.0}
        labels |= {"ray.io/tpu-pod-type": "v6e-8", "ray.io/accelerator-type": "TPU-V6E",
                   "ray.io/tpu-worker-id": str(worker), "ray.io/tpu-slice-name": slice_name,
                   "ray.io/tpu-topology": "2x4"}
        if worker == 0:
            total["TPU-v6e-8-head"] = 1.0
    else:
        total["node:__internal_head__"] = 1.0
    return {"node_id": node_id, "node_ip": "192.0.2.2", "is_head_node": head, "state": "ALIVE",
            "state_message": None, "node_name": "192.0.2.2", "resources_total": total, "labels": labels,
            "start_time_ms": 1796651301200, "end_time_ms": 0}


NODES = [node("2a0c228a" + "0" * 48, None, None, head=True),
         node("9316bfb3" + "0" * 48, SLICES[0], 0), node("2d04630e" + "0" * 48, SLICES[0], 1),
         node("40bdbd41" + "0" * 48, SLICES[1], 0), node("56e8c694" + "0" * 48, SLICES[1], 1)]


def group(pg_id: str, state: str, scheduling: str, bundles: list[tuple[dict[str, float], str, dict[str, str]]], *,
          job: str = "04000000", name: str = "", waited_s: float = 32.0) -> dict[str, Any]:
    """A ``PlacementGroupState`` as a dict; ``bundles``: (unit resources, node id or "", label selector)."""
    received = int((NOW - waited_s) * 1e9)
    return {"placement_group_id": pg_id + job, "name": name, "creator_job_id": job, "state": state,
            "bundles": [{"bundle_id": {"placement_group_id": pg_id + job, "bundle_index": i},
                         "unit_resources": resources, "node_id": node_id, "label_selector": selector}
                        for i, (resources, node_id, selector) in enumerate(bundles)],
            "is_detached": False,
            "stats": {"creation_request_received_ns": str(received), "scheduling_started_time_ns": str(received),
                      "scheduling_attempt": 1, "scheduling_state": scheduling, "scheduling_latency_us": "0",
                      "end_to_end_creation_latency_us": "0", "highest_retry_delay_ms": 0.0},
            "topology_strategy": {}, "topology_assignments": {}}


ON_SLICE_0 = {"ray.io/tpu-slice-name": SLICES[0]}
HOLDING = group("c76b7a5ca9365746b415b9c4", "CREATED", "FINISHED",
                [({"TPU": 4.0, "CPU": 1.0}, NODES[1]["node_id"], {})], waited_s=40)
NEVER = group("e6471ba6ee8a294e9ec1e207", "PENDING", "INFEASIBLE", [({"TPU": 64.0}, "", {})], name="never")
BY_LABEL = group("8cfdcd0efa5ce250d629c665", "PENDING", "NO_RESOURCES", [({"TPU": 4.0}, "", ON_SLICE_0)] * 2,
                 waited_s=31)
GONE = group("aaaa0efa5ce250d629c665bb", "REMOVED", "REMOVED",
             [({"TPU": 4.0}, NODES[3]["node_id"], {}), ({"TPU": 4.0}, NODES[4]["node_id"], {})], job="03000000")
GROUPS = [HOLDING, NEVER, BY_LABEL, GONE]


def test_the_line_names_the_pending_bundles_rays_state_and_what_each_slice_has_free() -> None:
    """Free = a host's total less what placed groups hold there (a removed group holds nothing)."""
    waiting = pending.waiting_of(GROUPS, "04000000", NOW)
    assert [g["name"] for g in waiting] == ["never", ""]  # longest waiting first
    line = pending.waiting_line(waiting[0], "04000000", NODES, GROUPS, NOW, more=len(waiting) - 1)
    assert line == ("waiting 32s for placement group never of job 04000000 (1 bundle x {TPU: 64}; Ray: INFEASIBLE; "
                    "1 more pending): free: raytpu-local-v6e-8-0 host 0: TPU 0/4, CPU 1/2; host 1: TPU 4/4, CPU 2/2; "
                    "raytpu-local-v6e-8-1 hosts 0,1: TPU 4/4, CPU 2/2 each")
    unnamed = pending.waiting_line(BY_LABEL, "04000000", NODES, GROUPS, NOW)
    assert unnamed.startswith("waiting 31s for placement group 8cfdcd0efa5c of job 04000000 (2 bundles x {TPU: 4} "
                              "on ray.io/tpu-slice-name=raytpu-local-v6e-8-0; Ray: NO_RESOURCES): free: "), unnamed


def test_a_slice_with_no_free_chip_reads_busy() -> None:
    both = group("bbbb", "CREATED", "FINISHED", [({"TPU": 4.0, "CPU": 1.0}, NODES[3]["node_id"], {}),
                                                 ({"TPU": 4.0, "CPU": 1.0}, NODES[4]["node_id"], {})])
    assert pending.free_hosts(NODES, [both]) == ["raytpu-local-v6e-8-0 hosts 0,1: TPU 4/4, CPU 2/2 each",
                                                 "raytpu-local-v6e-8-1: busy (TPU 0/4 each)"]
    one = group("cccc", "CREATED", "FINISHED", [({"TPU": 4.0}, NODES[3]["node_id"], {})])
    uneven = [node("dddd", SLICES[1], 1) | {"resources_total": {"TPU": 8.0, "CPU": 2.0}}, NODES[3]]
    assert pending.free_hosts(uneven, [one, both | {"state": "REMOVED"}]) == [
        "raytpu-local-v6e-8-1 host 0: TPU 0/4, CPU 2/2; host 1: TPU 8/8, CPU 2/2"]
    dead = [NODES[1] | {"state": "DEAD"}, NODES[2]]
    assert pending.free_hosts(dead, []) == ["raytpu-local-v6e-8-0 host 1: TPU 4/4, CPU 2/2"]


def test_what_a_group_asks_counts_bundles_of_one_shape_and_shows_their_label_selectors() -> None:
    reserve = group("eeee", "PENDING", "NO_RESOURCES",
                    [({"CPU": 1.0, "TPU": 4.0}, "", ON_SLICE_0 | {"ray.io/tpu-worker-id": str(i)}) for i in range(4)]
                    + [({"TPU-v6e-8-head": 1.0, "memory": 2.0 * 2**30}, "", {})])
    assert pending.asks(reserve) == ("4 bundles x {TPU: 4, CPU: 1} + 1 bundle x {TPU-v6e-8-head: 1, memory: 2GiB} "
                                     "on ray.io/tpu-slice-name=raytpu-local-v6e-8-0, ray.io/tpu-worker-id in 0-3")
    assert pending.asks(group("ffff", "PENDING", "QUEUED", [])) == "no bundles"


def test_a_group_that_asks_no_tpu_shows_the_other_nodes_cpus() -> None:
    cpu = group("abcd", "PENDING", "NO_RESOURCES", [({"CPU": 8.0}, "", {})])
    line = pending.waiting_line(cpu, "04000000", NODES, [HOLDING, cpu], NOW)
    assert line.endswith("; head: CPU 2/2"), line


def test_the_line_stays_bounded_and_counts_the_slices_left_out() -> None:
    many = [node(f"n{s:02d}{w}", f"raytpu-local-v6e-8-{s}", w) for s in range(40) for w in range(2)]
    holds = group("1111", "CREATED", "FINISHED", [({"TPU": 1.0 + s % 3}, f"n{s:02d}0", {}) for s in range(40)])
    line = pending.waiting_line(NEVER, "04000000", many, [holds], NOW)
    assert len(line) <= pending.LIMIT, len(line)
    shown = line.count("raytpu-local-v6e-8-")
    assert line.endswith(f"; +{40 - shown} more slices"), line
    assert 1 < shown < 40
    selectors = {f"label-{i}": "x" * 60 for i in range(8)}
    wide = group("2222", "PENDING", "NO_RESOURCES", [({f"custom-{i}": 1.0}, "", selectors) for i in range(6)])
    cut = pending.waiting_line(wide, "04000000", many, [holds], NOW, more=3)
    assert len(cut) <= pending.LIMIT and "...; Ray: NO_RESOURCES; 3 more pending): free: " in cut, cut
    assert cut.endswith("; +39 more"), cut  # a group that asks no TPU: the other nodes count too
    assert pending.waiting_line(NEVER, "04000000", [NODES[0]], [], NOW).endswith(": free: no TPU host is alive")


class Source:
    """The state API as recorded dicts; counts each call, raises ``fail`` when set."""

    def __init__(self, groups: list[dict[str, Any]], job: str | None = "04000000") -> None:
        self.all, self.job = groups, job
        self.calls: list[str] = []
        self.fail: Exception | None = None

    def job_id(self, submission_id: str) -> str | None:
        self.calls.append("job")
        return self.job

    def groups(self, job_id: str | None = None) -> list[dict[str, Any]]:
        self.calls.append(f"groups {job_id}")
        if self.fail is not None:
            raise self.fail
        return [g for g in self.all if job_id is None or g["creator_job_id"] == job_id]

    def nodes(self) -> list[dict[str, Any]]:
        self.calls.append("nodes")
        return NODES


def test_a_watch_says_a_pending_group_after_20s_then_every_minute_and_one_call_a_look_otherwise() -> None:
    young = [HOLDING, group("e6471ba6ee8a294e9ec1e207", "PENDING", "INFEASIBLE", [({"TPU": 64.0}, "", {})],
                            name="never", waited_s=0)]
    source = Source(young, job=None)
    clock = [NOW]
    watch = pending.Watch(source, "stuck-t1", lambda _line: None, clock=lambda: clock[0])
    assert watch.look() is None and source.calls == ["job"]  # the driver has not connected: no job id yet
    source.job = "04000000"
    seen = {}
    for at in (5, 10, 15, 19, 20, 25, 50, 79, 80, 85, 140):
        clock[0] = NOW + at
        seen[at] = watch.look()
    assert [at for at, line in seen.items() if line] == [20, 80, 140]
    assert str(seen[20]).startswith("waiting 20s for placement group never of job 04000000 (1 bundle x {TPU: 64}")
    assert str(seen[80]).startswith("waiting 80s for placement group never")
    looks = [c for c in source.calls if c != "job"]
    assert looks.count("groups 04000000") == 11 and looks.count("nodes") == 3  # the rest: one call a look
    source.all = [HOLDING]  # placed (or given up): quiet, and a new wait is said after 20 s again
    clock[0] = NOW + 150
    assert watch.look() is None and watch.said_at is None


def test_a_watch_never_raises_into_the_submit_and_says_a_failing_look_once() -> None:
    source = Source(GROUPS)
    source.fail = ConnectionError("dashboard gone")
    said: list[str] = []
    watch = pending.Watch(source, "stuck-t1", said.append, look_s=0.005)
    watch.start()
    deadline = time.monotonic() + 10
    while source.calls.count("groups 04000000") < 8 and time.monotonic() < deadline:
        time.sleep(0.01)
    watch.stop()
    assert said == ["stuck-t1: could not read its placement groups (ConnectionError: 'dashboard gone'); a pending "
                    "one may go unsaid"]
    assert watch._thread is not None and not watch._thread.is_alive()


def test_a_watch_says_through_its_sink_with_the_runs_name_and_stops_with_the_block() -> None:
    source = Source(GROUPS)
    said: list[str] = []
    done = threading.Event()

    def say(line: str) -> None:
        said.append(line)
        done.set()

    watch = pending.Watch(source, "stuck-t1", say, look_s=0.005, clock=lambda: NOW)
    watch.start()
    assert done.wait(10)
    watch.stop()
    assert said[0].startswith("stuck-t1: waiting 32s for placement group never of job 04000000")
    calls = len(source.calls)
    time.sleep(0.05)
    assert len(source.calls) == calls  # stopped


def test_job_waits_reads_the_nodes_only_when_a_running_job_waits() -> None:
    source = Source([HOLDING, GONE])
    assert pending.job_waits(source, ["04000000", "03000000"], NOW) == {}
    assert source.calls == ["groups None"]
    assert pending.job_waits(source, [], NOW) == {} and source.calls == ["groups None"]
    source = Source(GROUPS)
    found = pending.job_waits(source, ["04000000", "05000000"], NOW)
    assert list(found) == ["04000000"] and found["04000000"].startswith("waiting 32s for placement group never")
    assert source.calls == ["groups None", "nodes"]


class Jobs:
    """What :func:`raytpu.local.running.runs.list_runs` asks of the Job Submission API."""

    def __init__(self) -> None:
        from ray.job_submission import JobDetails, JobStatus, JobType

        def job(sid: str, job_id: str, status: Any) -> Any:
            return JobDetails(type=JobType.SUBMISSION, submission_id=sid, job_id=job_id, status=status,
                              entrypoint="python tools/wait.py", start_time=1_000_000, metadata={})

        self.jobs = [job("stuck-t1", "04000000", JobStatus.RUNNING), job("done-t0", "03000000", JobStatus.SUCCEEDED)]

    def list_jobs(self) -> list[Any]:
        return self.jobs

    def get_address(self) -> str:
        return "http://127.0.0.1:1"


def test_runs_local_shows_a_running_runs_wait_as_a_note_and_a_json_key(monkeypatch: pytest.MonkeyPatch) -> None:
    source = Source(GROUPS)
    monkeypatch.setattr(pending, "StateApi", lambda dashboard: source)
    found = local_runs.list_runs(Jobs(), now=NOW)  # type: ignore[arg-type]
    waits = {r.run: r.waiting_for for r in found}
    assert waits["done-t0"] is None and str(waits["stuck-t1"]).startswith("waiting 32s for placement group never")
    table = render(found, as_json=False).splitlines()
    assert table[0].split() == ["RUN", "OBJECT", "KIND", "WORKLOAD", "SLICE", "STATE", "AGE"]
    assert table[-2:] == ["", f"stuck-t1: {waits['stuck-t1']}"]
    rows = {r["run"]: r for r in json.loads(render(found, as_json=True))["runs"]}
    assert rows["stuck-t1"]["waiting_for"] == waits["stuck-t1"]
    assert "waiting_for" not in rows["done-t0"]  # a run that waits for nothing keeps the keys it always had
    assert set(rows["done-t0"]) == {"run", "object", "kind", "workload", "slice", "state", "age_s", "started_at",
                                    "done"}

    source.fail = ConnectionError("dashboard gone")  # a failed look: the runs are listed, without notes
    assert [r.waiting_for for r in local_runs.list_runs(Jobs(), now=NOW)] == [None, None]  # type: ignore[arg-type]


def test_a_table_without_waits_is_the_table_it_was() -> None:
    run = Run("train-r1", "Ray job", "train", "train", "s", "RUNNING", 1.0, "", False)
    assert render([run], as_json=False).splitlines()[-1].startswith("train-r1")
