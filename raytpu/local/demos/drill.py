"""The preemption drill: a training run on the emulated slice, one host preempted mid-run
(:mod:`raytpu.local.slice.preempt`), and what it cost: steps lost, time to resume, from which checkpoint (``raytpu demo
--preempt``, the slice tests, ``bench/preempt.py``). Steps lost are measured from rank 0's progress file, not inferred.
Multi-slice: the run resumes on N whole slices or waits; ``resumed_on_slices`` is what the resumed processes report, not
the plan. Source: Ray 2.60 ``TrainController._execute_resize_decision`` (docs/FACTS.md#preemption-drill). Standard
library at import."""

from __future__ import annotations

import shutil
import threading
import time
from pathlib import Path
from typing import Any

from raytpu.core.common import timeline
from raytpu.core.common.errors import RuntimeFailure
from raytpu.core.common.train_result import parse_result
from raytpu.local.running.jobs import run_workload
from raytpu.local.slice.preempt import Preemption, preempt, target
from raytpu.local.slice.state import LocalCluster, Progress
from raytpu.workloads.support.preemption import read_progress

STEP_SLEEP_S = 0.3
"""A pause per step, so the drill lands mid-run on a fast machine too."""


def drill(cluster: LocalCluster, notice_s: float, storage: str | Path, *, steps: int = 40, every: int = 10,
          at_step: int | None = None, host: int | None = None, slice_name: str | None = None,
          slices: int = 1, progress: Progress | None = None, timeout_s: float = 480.0) -> dict[str, Any]:
    """Runs the train workload on ``cluster`` over ``slices`` whole slices (checkpoints every ``every`` steps under
    ``storage``), preempts ``host`` with ``notice_s`` of notice (0: a crash) once step ``at_step`` (default: half) is
    done, and waits for the end. Returns ``{"train": summary, "preemption": section, "stdout": driver output}``.
    RuntimeFailure when the run ended, or stopped stepping, before ``at_step``."""
    say = progress or (lambda _line: None)
    storage = Path(storage)
    shutil.rmtree(storage, ignore_errors=True)
    storage.mkdir(parents=True)
    progress_file = storage / "progress.jsonl"
    at_step = at_step or max(steps // 2, 1)
    node = target(cluster, host, slice_name)  # a bad --host is refused before the run starts
    work = cluster.workload("train", slices)  # more slices than the cluster has: InvalidInput, before the run
    done: dict[str, Any] = {}

    def run() -> None:
        try:
            done["run"] = run_workload(cluster, "train", "--storage-path", str(storage), "--steps", str(steps),
                                       "--checkpoint-every", str(every), "--step-sleep-s", str(STEP_SLEEP_S),
                                       "--max-failures", "2", "--progress-file", str(progress_file),
                                       timeout_s=timeout_s, work=work)
        except RuntimeFailure as exc:
            done["error"] = exc

    driver = threading.Thread(target=run, daemon=True)
    driver.start()
    deadline = time.monotonic() + timeout_s
    while not any(p["step"] >= at_step for p in read_progress(progress_file)):
        if not driver.is_alive() or time.monotonic() > deadline:
            driver.join(timeout=5)
            raise RuntimeFailure(f"local.drill: the run ended or stalled before step {at_step}: "
                                 f"{done.get('error') or _tail(done)}")
        time.sleep(0.1)
    say(f"step {at_step} done: preempting {node.slice_name} worker {node.worker_id} "
        f"({'notice ' + format(notice_s, 'g') + 's' if notice_s else 'no notice: a crash'})")
    record = preempt(cluster, node, notice_s, progress=say)
    driver.join(timeout=max(deadline - time.monotonic(), 1.0))
    if "run" not in done:
        raise RuntimeFailure(f"local.drill: the run did not end after the preemption: {done.get('error')}")
    summary = parse_result(done["run"].stdout) or {}
    return {"train": summary, "stdout": done["run"].stdout, "exit_code": done["run"].returncode,
            "preemption": section(record, summary, read_progress(progress_file), every, cluster, slices)}


def _tail(done: dict[str, Any]) -> str:
    run = done.get("run")
    return run.stderr.strip()[-1500:] if run is not None else "no output"


def section(record: Preemption, summary: dict[str, Any], steps_seen: list[dict[str, Any]], every: int,
            cluster: LocalCluster, slices: int = 1) -> dict[str, Any]:
    """The report's ``preemption`` section: ``notice_s``, ``checkpoint_at_notice``, ``steps_lost`` (last step done by
    the attempt killed, minus the step the next attempt started from), ``resumed_after_s`` (notice, or kill, to the
    first step after the restart), the checkpoint, the slices (:func:`whole_slices`), the phases
    (:data:`timeline.PREEMPTION_PHASES`)."""
    gone = record.gone_wall or 0.0
    # by attempt, not by clock: a step in flight at the kill may still be recorded just after it, and is lost
    attempt = max((p["restarts"] for p in steps_seen if p["wall"] <= gone), default=0)
    before = [p["step"] for p in steps_seen if p["restarts"] <= attempt]
    after = [p for p in steps_seen if p["restarts"] > attempt]
    last_before = max(before, default=0)
    resumed_from = after[0]["step"] - 1 if after else None
    notices = [n for n in summary.get("notices") or [] if n.get("seen_wall", 0) >= (record.notice_wall or gone)]
    at_notice = bool(summary.get("resumed_at_notice")) and bool(notices) and notices[-1]["step"] == resumed_from
    started = record.notice_wall or gone
    first = after[0] if after else None
    out: dict[str, Any] = {
        "notice_s": record.notice_s, "host": f"{record.slice_name} worker {record.worker_id}", "how": record.how,
        "checkpoint_at_notice": at_notice, "last_step_before_kill": last_before, "resumed_from_step": resumed_from,
        "resumed_from": (f"the checkpoint written at the notice (step {resumed_from})" if at_notice else
                         f"the last periodic checkpoint (step {resumed_from}, every {every} steps)"
                         if resumed_from is not None and resumed_from % every == 0 else
                         f"step {resumed_from}" if resumed_from is not None else "no resume"),
        "steps_lost": None if resumed_from is None else last_before - resumed_from,
        "resumed_after_s": round(first["wall"] - started, 2) if first else None,
        "resumed_on_slices": summary.get("ray_slices"),
        "resumed_on_whole_slice": bool(first) and whole_slices(summary, cluster, slices, record.slice_name),
        "restarts": summary.get("restarts"), "run_ok": bool(summary.get("ok")),
    }
    out["timeline"] = phases(record, notices, first, started)
    return out


def whole_slices(summary: dict[str, Any], cluster: LocalCluster, slices: int, preempted: str) -> bool:
    """Whether the last attempt ran on ``slices`` whole slices, the preempted host's among them: its processes'
    ``ray_slices`` are exactly ``slices`` slices with all their hosts, and its devices all their chips."""
    plan = cluster.slice_plan
    held = summary.get("ray_slices") or {}
    return (len(held) == slices and preempted in held and set(held) <= set(cluster.slices)
            and all(n == plan.hosts for n in held.values()) and summary.get("devices") == plan.chips * slices)


def phases(record: Preemption, notices: list[dict[str, Any]], first: dict[str, Any] | None,
           started: float) -> timeline.Timeline:
    """The preemption's phases, from the notice (or the kill) to now."""
    recorder = timeline.Recorder(start=(time.monotonic() - (time.time() - started), started),
                                 phases=timeline.PREEMPTION_PHASES)

    def at(phase: str, wall: float, detail: str) -> None:
        recorder.take([timeline.stamp(phase, detail, wall=wall, phases=timeline.PREEMPTION_PHASES)])

    if record.notice_wall is None:
        recorder.absent("notice", "no notice: a host crash")
        recorder.absent("checkpoint_at_notice", "no notice, so no checkpoint at it")
    else:
        at("notice", record.notice_wall, f"{record.slice_name} worker {record.worker_id} drained for a preemption "
           f"(DRAIN_NODE_REASON_PREEMPTION, deadline {record.notice_s:g}s ahead), as its ray start does on SIGTERM")
        if notices:
            at("checkpoint_at_notice", notices[-1]["seen_wall"], f"ray.train.get_preemption_info() returned after "
               f"step {notices[-1]['step']}; checkpoint written, no more steps")
        else:
            recorder.note("checkpoint_at_notice", "the run saw no notice before the kill")
    at("killed", record.gone_wall or started, f"SIGKILL to the host's processes ({record.how})")
    if record.replaced_wall:
        at("replaced", record.replaced_wall, "a replacement host registered, as KubeRay recreates the pod")
    if first:
        at("resumed", first["wall"], f"step {first['step']} done after the restart (restart {first['restarts']})")
    return recorder.finish("the run ended")
