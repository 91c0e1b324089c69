"""raytpu.core.common.timeline (phases, recorder, table, JSON) and raytpu.cluster.kube_timeline (phases read from
Kubernetes objects).

The Kubernetes objects here are shaped as the API serves them (core/v1 Pod ``status.conditions`` PodScheduled,
``spec.nodeName``, ``spec.containers[].env``; Node ``status.conditions`` Ready; core/v1 Event ``reason``,
``message``, ``eventTime``/``firstTimestamp``, ``count``/``series``); tests/test_submit.py reads them through the
kit's client from the loopback API server, end to end.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from raytpu.cluster import kube_timeline
from raytpu.core.common import timeline
from raytpu.core.specs.runtime import compile_cache

pytestmark = pytest.mark.unit


class Clock:
    """A monotonic and a wall clock that move together when told."""

    def __init__(self, wall: float = 1_800_000_000.0) -> None:
        self.mono = 100.0
        self.wall = wall

    def advance(self, seconds: float) -> None:
        self.mono += seconds
        self.wall += seconds


def recorder(clock: Clock) -> timeline.Recorder:
    return timeline.Recorder(monotonic=lambda: clock.mono, wall=lambda: clock.wall)


def test_every_phase_is_listed_in_order_and_the_durations_add_up_to_the_wall_time() -> None:
    clock = Clock()
    rec = recorder(clock)
    clock.advance(0.5)
    rec.mark("applied", "applied")
    start = clock.wall - 0.5
    # stamps made elsewhere carry wall-clock times; they are placed by them, whenever they arrive
    rec.take([timeline.stamp("scheduled", "bound", wall=start + 30.0),
              timeline.stamp("nodes_ready", "ready", wall=start + 25.0),  # before "scheduled": adds nothing
              timeline.stamp("webhook_env", "env", wall=start + 1.0),
              timeline.stamp("ray_joined", "joined", wall=start + 50.0),
              timeline.stamp("reserved", "reserved", wall=start + 51.0),
              timeline.stamp("smoke_checked", "smoke", wall=start + 55.0),
              timeline.compile_started(start + 70.0, 10.0, "trainer's start"),
              timeline.stamp("compiled", "XLA compile", wall=start + 70.0),
              timeline.stamp("first_step", "step 1", wall=start + 80.0)])
    clock.advance(99.5)
    run = rec.finish("done")
    assert [r["phase"] for r in run["phases"]] == list(timeline.PHASES)
    assert run["wall_s"] == 100.0
    took = {r["phase"]: r["duration_s"] for r in run["phases"]}
    assert took == {"applied": 0.5, "scheduled": 29.5, "nodes_ready": 0.0, "webhook_env": 0.0, "ray_joined": 20.0,
                    "reserved": 1.0, "smoke_checked": 4.0, "trainer_started": 5.0, "compiled": 10.0,
                    "first_step": 10.0, "finished": 20.0}
    assert sum(took.values()) == pytest.approx(run["wall_s"])
    at = {r["phase"]: r["at_s"] for r in run["phases"]}
    assert at["nodes_ready"] == 25.0 and at["webhook_env"] == 1.0  # when it happened is kept as it was
    assert all(r["status"] == timeline.MEASURED for r in run["phases"])
    assert json.loads(json.dumps(run)) == run


def test_phases_that_do_not_exist_are_said_so_and_unreached_ones_add_nothing() -> None:
    clock = Clock()
    rec = recorder(clock)
    rec.mark("applied", "driver started", timeline.EMULATED)
    rec.absent("scheduled", "no scheduler here")
    rec.take([timeline.stamp("scheduled", "late stamp", wall=clock.wall + 1)])  # cannot undo "not applicable"
    rec.note("first_step", "not measured by this command")
    clock.advance(10.0)
    run = rec.finish()
    rows = {r["phase"]: r for r in run["phases"]}
    assert rows["applied"]["status"] == timeline.EMULATED
    assert rows["scheduled"] == {"phase": "scheduled", "status": timeline.NOT_APPLICABLE, "at_s": None,
                                 "duration_s": 0.0, "detail": "no scheduler here"}
    assert rows["first_step"]["status"] == timeline.NOT_REACHED
    assert rows["first_step"]["detail"] == "not measured by this command"
    assert rows["finished"]["duration_s"] == 10.0
    assert sum(r["duration_s"] for r in run["phases"]) == pytest.approx(run["wall_s"])


def test_the_earliest_stamp_of_a_phase_wins_and_one_before_the_run_shows_as_before() -> None:
    clock = Clock()
    rec = recorder(clock)
    rec.take([timeline.stamp("reserved", "second", wall=clock.wall + 5),
              timeline.stamp("reserved", "first", wall=clock.wall + 3),
              timeline.stamp("nodes_ready", "ready for hours", wall=clock.wall - 3600)])
    clock.advance(6)
    run = rec.finish()
    rows = {r["phase"]: r for r in run["phases"]}
    assert rows["reserved"]["detail"] == "first" and rows["reserved"]["at_s"] == 3.0
    assert rows["nodes_ready"]["at_s"] == -3600.0 and rows["nodes_ready"]["duration_s"] == 0.0
    table = timeline.render(run)
    assert next(line for line in table.splitlines() if "nodes_ready" in line).split()[:3] == [
        "nodes_ready", "before", "0.0s"]


def test_a_stamp_past_the_end_is_clamped_to_the_run() -> None:
    clock = Clock()
    rec = recorder(clock)
    rec.take([timeline.stamp("first_step", "clock skew", wall=clock.wall + 50)])
    clock.advance(10)
    run = rec.finish()
    assert sum(r["duration_s"] for r in run["phases"]) == pytest.approx(10.0)


@pytest.mark.parametrize("phase", ["", "Applied", "first-step", "done"])
def test_an_unknown_phase_is_refused_with_the_valid_ones(phase: str) -> None:
    with pytest.raises(ValueError, match="valid: applied, scheduled"):
        timeline.stamp(phase, "x")
    with pytest.raises(ValueError, match="unknown phase"):
        timeline.Recorder().mark(phase, "x")


def test_stamp_lines_survive_a_log_prefix_and_bad_lines_are_skipped() -> None:
    made = timeline.stamp("reserved", "slice s-0 reserved", wall=1_800_000_000.25)
    log = "\n".join([f"(pid=42) {timeline.stamp_line(made)}", f"{timeline.MARK} {{not json",
                     f"{timeline.MARK} {json.dumps({'phase': 'nope', 'wall': 1.0})}",
                     f"{timeline.MARK} {json.dumps({'phase': 'reserved'})}", "plain line"])
    assert timeline.parse_stamp_lines(log) == [made]


def test_the_table_shows_each_phase_its_share_status_and_waits() -> None:
    clock = Clock()
    rec = recorder(clock)
    rec.mark("applied", "RayJob applied")
    rec.waited("scheduled", [{"reason": "FailedScheduling", "message": "0/3 nodes are available", "at_s": 1.0,
                              "count": 4}])
    rec.waited("scheduled", [{"reason": "FailedScheduling", "message": "0/3 nodes are available", "at_s": 1.0,
                              "count": 6}])  # the same event seen again: its count grows, no second row
    clock.advance(40)
    rec.mark("scheduled", "bound")
    clock.advance(10)
    table = timeline.render(rec.finish())
    lines = table.splitlines()
    assert lines[0].startswith("where the minutes went (50.0s from ")
    assert lines[1].split() == ["phase", "at", "took", "share", "status", "detail"]
    assert any(line.split()[:5] == ["scheduled", "40.0s", "40.0s", "80%", "measured"] for line in lines)
    assert sum("FailedScheduling x6: 0/3 nodes are available" in line for line in lines) == 1
    md = timeline.render_markdown({"smoke-x": rec.finish()})
    assert "| scheduled | 40.0s | 40.0s | measured | bound; waiting: FailedScheduling: 0/3 nodes are available |" in md


# ---------------------------------------------------------------------------------------------- Kubernetes side

T0 = 1_800_000_000  # 2027-01-15T08:00:00Z


def iso(seconds: float, micro: bool = False) -> str:
    from datetime import UTC, datetime

    value = datetime.fromtimestamp(seconds, UTC)
    return value.strftime("%Y-%m-%dT%H:%M:%S.%fZ" if micro else "%Y-%m-%dT%H:%M:%SZ")


def ray_pod(name: str, job: str, worker: int | None, *, created: float, scheduled: float | None,
            node: str | None, hostnames: bool = True) -> dict[str, Any]:
    """A KubeRay pod of RayJob ``job`` (a TPU worker when ``worker`` is a number, else the head) as the API serves
    it: KubeRay's labels, the webhook's env on a TPU worker, PodScheduled True once bound, else False/Unschedulable."""
    env = [{"name": "RAY_CLUSTER_NAME", "value": f"{job}-raycluster"}]
    resources: dict[str, Any] = {"requests": {"cpu": "1"}}
    if worker is not None:
        env += [{"name": "TPU_WORKER_ID", "value": str(worker)}, {"name": "TPU_NAME", "value": f"{job}-tpu-0"}]
        if hostnames:
            env.append({"name": "TPU_WORKER_HOSTNAMES", "value": "tpu-0-0.h,tpu-0-1.h"})
        resources = {"requests": {"google.com/tpu": "4"}, "limits": {"google.com/tpu": "4"}}
    condition = ({"type": "PodScheduled", "status": "True", "lastProbeTime": None,
                  "lastTransitionTime": iso(scheduled)} if scheduled is not None else
                 {"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "lastProbeTime": None,
                  "lastTransitionTime": iso(created), "message": "0/3 nodes are available"})
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "creationTimestamp": iso(created), "labels": {
                "raytpu.dev/ray-cluster": f"job-{job}", "ray.io/node-type": "head" if worker is None else "worker",
                "app.kubernetes.io/name": "kuberay"}},
            "spec": {**({"nodeName": node} if node else {}),
                     "containers": [{"name": "ray-worker" if worker is not None else "ray-head", "image": "x",
                                     "env": env, "resources": resources}]},
            "status": {"phase": "Running" if scheduled is not None else "Pending", "conditions": [condition]}}


def node(name: str, ready: float) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name}, "status": {"conditions": [
        {"type": "MemoryPressure", "status": "False", "lastTransitionTime": iso(ready - 5)},
        {"type": "Ready", "status": "True", "reason": "KubeletReady", "lastTransitionTime": iso(ready)}]}}


FAILED_SCHEDULING = {
    # kube-scheduler writes through events.k8s.io/v1: eventTime set, firstTimestamp null (as seen in
    # opsgenie/kubernetes-event-exporter#194); message format "0/N nodes are available: M Insufficient <resource>"
    "apiVersion": "v1", "kind": "Event", "metadata": {"name": "w0.1", "creationTimestamp": iso(T0 + 1)},
    "involvedObject": {"kind": "Pod", "name": "w0"}, "reason": "FailedScheduling", "type": "Warning",
    "message": "0/3 nodes are available: 3 Insufficient google.com/tpu. preemption: 0/3 nodes are available: "
               "3 No preemption victims found for incoming pod.",
    "eventTime": iso(T0 + 1.5, micro=True), "firstTimestamp": None, "lastTimestamp": None,
    "series": {"count": 7, "lastObservedTime": iso(T0 + 40, micro=True)}, "reportingComponent": "default-scheduler",
    "action": "Scheduling"}
SCALE_UP = {
    # the cluster autoscaler writes core/v1 events: firstTimestamp/lastTimestamp/count (message as GKE shows it,
    # e.g. 2i2c-org/infrastructure#2185)
    "apiVersion": "v1", "kind": "Event", "metadata": {"name": "w0.2"}, "involvedObject": {"kind": "Pod", "name": "w0"},
    "reason": "TriggeredScaleUp", "type": "Normal", "source": {"component": "cluster-autoscaler"},
    "message": "pod triggered scale-up: [{https://www.googleapis.com/compute/v1/projects/p/zones/us-east5-b/"
               "instanceGroups/gke-ray-tpu-train-0-grp 0->2 (max: 2)}]",
    "firstTimestamp": iso(T0 + 2), "lastTimestamp": iso(T0 + 2), "count": 1, "eventTime": None}


def test_phases_from_pods_nodes_and_events() -> None:
    pods = [ray_pod("head", "j", None, created=T0, scheduled=T0 + 1, node="cpu-1"),
            ray_pod("w0", "j", 0, created=T0 + 0.0, scheduled=T0 + 61, node="tpu-a"),
            ray_pod("w1", "j", 1, created=T0 + 1, scheduled=T0 + 62, node="tpu-b")]
    nodes = {"tpu-a": node("tpu-a", T0 + 55), "tpu-b": node("tpu-b", T0 + 58)}
    made, waits = kube_timeline.phases_from(pods, nodes, {"w0": [FAILED_SCHEDULING, SCALE_UP]}, 3, 2, True)
    by = {s["phase"]: s for s in made}
    assert by["scheduled"]["wall"] == T0 + 62 and "3 Ray pod(s)" in by["scheduled"]["detail"]
    assert by["nodes_ready"]["wall"] == T0 + 58 and by["nodes_ready"]["detail"] == "2 TPU node(s) Ready"
    assert by["webhook_env"]["wall"] == T0 + 1
    assert by["webhook_env"]["detail"] == ("TPU_WORKER_ID and TPU_WORKER_HOSTNAMES on 2/2 TPU pod(s) "
                                           "(TPU_WORKER_ID 0, 1)")
    assert [(w["reason"], w["count"], when) for w, when in waits] == [("FailedScheduling", 7, T0 + 1.5),
                                                                      ("TriggeredScaleUp", 1, T0 + 2)]
    assert waits[0][0]["message"].startswith("0/3 nodes are available: 3 Insufficient google.com/tpu.")


def test_a_phase_is_reached_only_when_every_pod_shows_it() -> None:
    pods = [ray_pod("head", "j", None, created=T0, scheduled=T0 + 1, node="cpu-1"),
            ray_pod("w0", "j", 0, created=T0, scheduled=T0 + 61, node="tpu-a", hostnames=False),
            ray_pod("w1", "j", 1, created=T0, scheduled=None, node=None)]
    made, _ = kube_timeline.phases_from(pods, {"tpu-a": node("tpu-a", T0 + 55)}, {}, 3, 2, True)
    assert made == []  # w1 unbound (so its node is unknown) and w0 lacks TPU_WORKER_HOSTNAMES
    made, _ = kube_timeline.phases_from(pods[:2], {"tpu-a": node("tpu-a", T0 + 55)}, {}, 3, 2, True)
    assert made == []  # two of the three pods KubeRay will create
    single = [ray_pod("head", "j", None, created=T0, scheduled=T0 + 1, node="cpu-1"),
              ray_pod("w0", "j", 0, created=T0, scheduled=T0 + 3, node="tpu-a", hostnames=False)]
    made, _ = kube_timeline.phases_from(single, {"tpu-a": node("tpu-a", T0 + 2)}, {}, 2, 1, False)
    assert [s["phase"] for s in made] == ["scheduled", "nodes_ready", "webhook_env"]  # one host: no hostnames


def test_expected_pods_reads_the_kuberay_worker_groups() -> None:
    job = {"spec": {"rayClusterSpec": {"workerGroupSpecs": [{"replicas": 2, "numOfHosts": 4}]}}}
    service = {"spec": {"rayClusterConfig": {"workerGroupSpecs": [{"replicas": 1, "numOfHosts": 2},
                                                                  {"replicas": 1}]}}}
    assert kube_timeline.expected_pods(job) == (9, 8)
    assert kube_timeline.expected_pods(service) == (4, 3)


@pytest.mark.parametrize(("value", "seconds"), [("2027-01-15T08:00:00Z", T0), ("2027-01-15T08:00:01.500000Z", T0 + 1.5),
                                                (None, None), ("", None), ("yesterday", None), (5, None)])
def test_kubernetes_times_parse(value: Any, seconds: float | None) -> None:
    assert kube_timeline.parse_time(value) == seconds


def assert_phases_tile_the_run(run: Mapping[str, Any]) -> None:
    """The phases reached do not overlap (each starts where the one before it ended, in order) and their durations add
    up to the wall time; a phase not reached adds nothing."""
    previous = 0.0
    for row in run["phases"]:
        if row["at_s"] is None:
            assert row["duration_s"] == 0.0 and row["status"] in (timeline.NOT_REACHED, timeline.NOT_APPLICABLE), row
            continue
        end = min(max(row["at_s"], previous), run["wall_s"])
        assert row["duration_s"] == pytest.approx(end - previous, abs=0.002), row
        assert row["duration_s"] >= 0.0
        previous = end
    assert previous == pytest.approx(run["wall_s"], abs=0.002)
    assert sum(r["duration_s"] for r in run["phases"]) == pytest.approx(run["wall_s"], abs=0.01)


def _compile_s(run: Mapping[str, Any]) -> float:
    return next(r["duration_s"] for r in run["phases"] if r["phase"] == "compiled")


def test_a_recorded_demos_phases_tile_its_run_and_compiled_is_the_compile_alone() -> None:
    recorded = json.loads((Path(__file__).parent / "data" / "demo_timeline.json").read_text())
    run = recorded["timeline"]
    assert_phases_tile_the_run(run)
    rows = {r["phase"]: r for r in run["phases"]}
    assert [p for p in timeline.PHASES if rows[p]["status"] == timeline.MEASURED] == [
        "ray_joined", "reserved", "smoke_checked", "trainer_started", "compiled", "first_step", "finished"]
    # what jax.monitoring timed on the process whose compile ended last: the first step waited for it
    assert _compile_s(run) == pytest.approx(compile_cache.last_to_finish(recorded["compile"])["s"], abs=0.002)


def _train_metrics(placed: float, compile_s: float, compiled_wall: float, first_step: float) -> dict[str, Any]:
    return {"placed_wall": placed, "workers": 4, "slice_name": "s0", "first_step_wall": first_step, "first_step": 1,
            "compile_attempts": [{"s": compile_s, "hits": 7, "misses": 0, "wall": compiled_wall}]}


@pytest.mark.parametrize("compile_s", [0.14, 3.0])
def test_a_demos_timeline_names_the_smoke_check_the_trainers_start_and_the_compile_apart(
        compile_s: float, capsys: pytest.CaptureFixture[str]) -> None:
    from raytpu.workloads.train import train_stamps

    clock = Clock()
    rec = recorder(clock)
    start = clock.wall
    rec.mark("applied", "slice starts", timeline.EMULATED)
    clock.advance(16.6)
    rec.mark("ray_joined", "4 nodes")
    rec.take([timeline.stamp("reserved", "smoke's bundles", wall=start + 18.0)])
    clock.advance(15.3)
    rec.mark("smoke_checked", "1 verdict")  # at 31.9 s
    rec.take(train_stamps(_train_metrics(placed=start + 46.0, compile_s=compile_s, compiled_wall=start + 50.0,
                                         first_step=start + 50.5)))
    clock.advance(25.0)
    run = rec.finish("torn down")
    assert_phases_tile_the_run(run)
    took = {r["phase"]: r["duration_s"] for r in run["phases"]}
    assert took["smoke_checked"] == pytest.approx(13.9)  # the smoke check, after its reservation
    assert took["compiled"] == pytest.approx(compile_s)  # the compile alone, not the trainer's start
    assert took["trainer_started"] == pytest.approx(50.0 - compile_s - 31.9)
    assert "imports and set-up" in {r["phase"]: r["detail"] for r in run["phases"]}["trainer_started"]
    assert "RAYTPU_TIMELINE" in capsys.readouterr().out


def test_the_compiled_phase_is_the_compile_the_first_step_waited_for_the_last_process_to_finish(
        capsys: pytest.CaptureFixture[str]) -> None:
    """Process 0 loaded every executable from the cache; process 2 compiled 1.2 s and finished last: the first step (a
    collective) waited for it, so ``compiled`` is its compile and the trainer's start runs up to its compile's start
    (JAX 0.10.2 ``jax._src.compiler._cache_write`` writes from process 0 only; docs/FACTS.md#compile-cache-jax)."""
    from raytpu.workloads.train import train_stamps

    placed = 1000.0
    processes = [{"s": 0.04, "hits": 7, "misses": 0, "wall": placed + 3.0},
                 {"s": 1.1, "hits": 0, "misses": 7, "wall": placed + 3.9},
                 {"s": 1.2, "hits": 0, "misses": 7, "wall": placed + 4.2},
                 {"s": 1.15, "hits": 0, "misses": 7, "wall": placed + 4.0}]
    metrics = _train_metrics(placed=placed, compile_s=0.04, compiled_wall=placed + 3.0, first_step=placed + 4.5)
    metrics["compile_attempts"][0]["processes"] = processes
    stamps = {s["phase"]: s for s in train_stamps(metrics)}
    assert stamps["compiled"]["wall"] == placed + 4.2
    assert stamps["trainer_started"]["wall"] == pytest.approx(placed + 4.2 - 1.2)
    assert stamps["compiled"]["detail"] == ("XLA compile 1.20s before the first step on process 2, the last of 4 to "
                                            "finish: 0 cache hit(s), 7 miss(es); process 0: 0.04s, 7 hit(s), 0 "
                                            "miss(es)")
    assert "imports and set-up 3.0s" in stamps["trainer_started"]["detail"]
    capsys.readouterr()


def test_a_submitted_team_runs_timeline_has_no_smoke_check_and_tiles_the_run(
        capsys: pytest.CaptureFixture[str]) -> None:
    from raytpu.workloads.support.team_train import Reports, team_stamps

    clock = Clock()
    rec = recorder(clock)
    start = clock.wall
    rec.mark("applied", "submitted", timeline.EMULATED)
    reports = Reports()
    reports.started(start + 5.0, resumed=False)
    reports.compiled({"s": 0.5, "hits": 0, "misses": 2, "wall": start + 8.0})
    reports.reported(start + 9.0, {"loss": 1.0}, None)
    rec.take(timeline.parse_stamp_lines("\n".join(timeline.stamp_line(s) for s in
                                                  team_stamps(reports.summary()["attempts"]))))
    clock.advance(12.0)
    run = rec.finish()
    assert_phases_tile_the_run(run)
    rows = {r["phase"]: r for r in run["phases"]}
    assert rows["smoke_checked"]["status"] == timeline.NOT_APPLICABLE
    assert [rows[p]["duration_s"] for p in ("reserved", "trainer_started", "compiled", "first_step")] == [
        5.0, 2.5, 0.5, 1.0]
    capsys.readouterr()


def test_a_program_that_compiles_without_a_trainer_says_so() -> None:
    clock = Clock()
    rec = recorder(clock)
    rec.take([timeline.stamp("compiled", "smoke's compile", wall=clock.wall + 1.0)])
    clock.advance(2.0)
    rows = {r["phase"]: r for r in rec.finish()["phases"]}
    assert rows["trainer_started"]["status"] == timeline.NOT_APPLICABLE
    assert rows["trainer_started"]["detail"] == timeline.NO_TRAINER
    unreached = {r["phase"]: r for r in recorder(Clock()).finish()["phases"]}
    assert unreached["trainer_started"]["status"] == timeline.NOT_REACHED  # stopped before any compile


class _PendingCluster:
    """The three reads :class:`KubePhases` makes, answered with the pods and the scheduler's event above (the exact
    JSON the Kubernetes API returns for them): a stand-in for the API, as GKE cannot be reached from here."""

    def __init__(self, pods: list[dict[str, Any]]) -> None:
        self.pods_now = pods

    def pods(self, selector: str) -> list[dict[str, Any]]:
        return self.pods_now

    def get(self, kind: str, name: str) -> dict[str, Any] | None:
        return None

    def events(self, selector: str) -> list[dict[str, Any]]:
        return [FAILED_SCHEDULING] if selector.endswith("=w0") else []


def test_a_run_whose_pods_wait_says_what_for_after_20_s_then_every_minute() -> None:
    """Issue 67 item 5 on GKE: from the pods' state, what the run waits for and the scheduler's word on what is free."""
    pending = [ray_pod("head", "j", None, created=T0, scheduled=T0 + 1, node="cpu-1"),
               ray_pod("w0", "j", 0, created=T0, scheduled=None, node=None),
               ray_pod("w1", "j", 1, created=T0, scheduled=None, node=None)]
    cluster = _PendingCluster(pending)
    now = [0.0]
    job = {"spec": {"rayClusterSpec": {"workerGroupSpecs": [{"replicas": 1, "numOfHosts": 2}]}}}
    watcher = kube_timeline.KubePhases(cluster, "j", job, True, clock=lambda: now[0])  # type: ignore[arg-type]
    said = []
    for at in (0, 10, 21, 50, 81, 100):
        now[0] = float(at)
        watcher.sample()
        said.append((at, watcher.waiting_line()))
    lines = [(at, line) for at, line in said if line]
    assert [at for at, _ in lines] == [21, 81]
    assert lines[0][1].startswith("j: waiting 21s: 2 of 3 pod(s) not scheduled (of 3 the RayJob makes); "
                                  "FailedScheduling: '0/3 nodes are available: 3 Insufficient google.com/tpu.")
    cluster.pods_now = [ray_pod(p, "j", w, created=T0, scheduled=T0 + 200, node=f"tpu-{p}")
                        for p, w in (("head", None), ("w0", 0), ("w1", 1))]
    now[0] = 130.0
    watcher.sample()
    assert watcher.waiting_line() is None  # scheduled: nothing more to say
