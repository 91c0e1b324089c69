"""A team's ``train_loop`` on its slice: the JaxTrainer the kit builds around the team's function, with what the kit's
own trainer gets (slice, storage, restart budget, dataset, ``train_config``); what it reports is gathered on the
driver for the summary and the timeline (docs/FACTS.md#ray-train-team-train).
"""

from __future__ import annotations

import argparse
import functools
import importlib
import logging
import os
import signal
import sys
import time
from collections.abc import Callable
from typing import Any

from raytpu.core.common import errors
from raytpu.core.common.timeline import Stamp, compile_started, stamp, stamp_line
from raytpu.core.common.train_result import result_line
from raytpu.core.specs.runtime import compile_cache, user_code
from raytpu.core.specs.spec import WorkloadSpec
from raytpu.workloads.support.compile_watch import CompileWatch
from raytpu.workloads.support.job_worker_env import job_runtime_env

MAX_METRIC_CHARS = 2000
SINK_WAIT_S = 10.0
"""How long rank 0 and the driver wait on the report sink; past it (or with the sink gone) the run goes on."""
NO_REPORTS: dict[str, Any] = {"attempts": [], "reports": 0, "last": None}


def load_train_loop(train_loop: str) -> Callable[..., Any]:
    """The team's function, imported from the working folder (the code zip) or the image; InvalidInput naming
    ``train_loop`` when it cannot be (exit 2, before any slice is reserved)."""
    module_name, function = user_code.split_train_loop(train_loop)
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        module = importlib.import_module(module_name)
    except Exception as exc:  # the team's import failed: its own error, one line
        raise errors.invalid_value("train_loop", train_loop, f"cannot be imported from {os.getcwd()} "
                                   f"({type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''})",
                                   user_code.TRAIN_LOOP_VALID) from exc
    found = getattr(module, function, None)
    if not callable(found):
        raise errors.invalid_value("train_loop", train_loop, f"{module_name} has no function {function}",
                                   user_code.TRAIN_LOOP_VALID)
    return found


def plain(value: Any) -> Any:
    """A reported metric as JSON carries it (numpy and JAX scalars as numbers; anything else as a short string)."""
    if value is None or isinstance(value, bool | int | float | str):
        return value
    if isinstance(value, dict):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [plain(v) for v in value]
    try:
        return float(value) if getattr(value, "size", 1) == 1 else str(value)[:MAX_METRIC_CHARS]
    except (TypeError, ValueError):
        return str(value)[:MAX_METRIC_CHARS]


class Reports:
    """What the run reported, kept on the driver's node (a Ray actor): attempts and reports, in order."""

    def __init__(self) -> None:
        self.attempts: list[dict[str, Any]] = []
        self.reports = 0
        self.last: dict[str, Any] | None = None
        self._started: set[int] = set()  # the ranks that started in the current attempt
        self._compiles: list[dict[int, dict[str, Any]]] = []  # per attempt: each rank's compile
        self._attempt_of: dict[int, int] = {}  # rank -> the attempt it started last

    def started(self, wall: float, resumed: bool, rank: int = 0) -> None:
        """A rank entered the team's function. A rank that already started in the current attempt opens the next (a
        restart), whichever rank comes first; a rank's own calls arrive in the order it made them (Ray 2.60 runs one
        caller's calls to an actor in order), so its compile is counted in the attempt it started."""
        if not self.attempts or rank in self._started:
            self.attempts.append({"attempt": len(self.attempts) + 1, "started_wall": wall, "resumed": resumed,
                                  "first_report_wall": None, "reports": 0})
            self._started = set()
            self._compiles.append({})
        current = self.attempts[-1]
        current["started_wall"] = min(current["started_wall"], wall)
        self._started.add(rank)
        self._attempt_of[rank] = len(self.attempts) - 1

    def compiled(self, summary: dict[str, Any], rank: int = 0) -> None:
        """A rank's compile so far (:class:`CompileWatch`), kept until its attempt's first report: rank 0's as the
        attempt's ``compile``, with every rank's in its ``processes`` as a kit run's (the first report waits for the
        last)."""
        index = self._attempt_of.get(rank)
        if index is None or self.attempts[index]["first_report_wall"] is not None:
            return
        compiles = self._compiles[index]
        compiles[rank] = {"process": rank, **{k: summary.get(k) for k in ("s", "hits", "misses", "wall")}}
        attempt = self.attempts[index]
        if rank == 0:
            attempt["compile"] = dict(summary)
        if "compile" in attempt:
            attempt["compile"]["processes"] = [compiles[r] for r in sorted(compiles)]

    def reported(self, wall: float, metrics: dict[str, Any], checkpoint: str | None) -> None:
        self.reports += 1
        self.last = {"wall": wall, "metrics": metrics, "checkpoint": checkpoint}
        if self.attempts:
            current = self.attempts[-1]
            current["reports"] += 1
            current["first_report_wall"] = current["first_report_wall"] or wall

    def summary(self) -> dict[str, Any]:
        return {"attempts": self.attempts, "reports": self.reports, "last": self.last}


def report_log(sink: Any) -> Any:
    """A Ray Train ``UserCallback`` (it runs on the controller) that passes every report to ``sink``: rank 0's
    metrics and the checkpoint's path. Source: Ray 2.60 ``ray.train.UserCallback.after_report``."""
    from ray.train import UserCallback

    class ReportLog(UserCallback):
        def after_report(self, run_context: Any, metrics: list[dict[str, Any]], checkpoint: Any) -> None:
            tell(sink, "reported", time.time(), plain(metrics[0] if metrics else {}),
                 checkpoint.path if checkpoint is not None else None)

    return ReportLog()


def tell(sink: Any, method: str, *args: Any) -> Any:
    """``sink.<method>.remote(*args)``, never raising: the sink only gathers the summary, and losing it (its node
    gone) must not fail the run (issue 49). Returns the call's ref, or None."""
    try:
        return getattr(sink, method).remote(*args)
    except Exception as exc:  # a dead actor's handle, a closed connection: the report is lost, the run goes on
        print(f"train: report sink unreachable ({type(exc).__name__}); the summary may miss this {method}",
              file=sys.stderr, flush=True)
        return None


def pinned_sink() -> Any:
    """The report sink, pinned to the driver's node (0 CPUs) as Ray Train pins its controller, so a TPU host's
    loss never takes it. Source: Ray 2.60 ``ray.train.v2.api.data_parallel_trainer.DataParallelTrainer.
    _initialize_and_run_controller`` (``label_selector={RAY_NODE_ID_KEY: get_runtime_context().get_node_id()}``)."""
    import ray

    node = ray.get_runtime_context().get_node_id()
    key = ray._raylet.RAY_NODE_ID_KEY  # type: ignore[attr-defined]
    return ray.remote(num_cpus=0, label_selector={key: node})(Reports).remote()


def gathered(sink: Any) -> tuple[dict[str, Any], str | None]:
    """What the sink gathered, or nothing and why (the sink lost or not answering within :data:`SINK_WAIT_S`)."""
    import ray

    try:
        return ray.get(sink.summary.remote(), timeout=SINK_WAIT_S), None
    except Exception as exc:  # ActorDiedError, GetTimeoutError: the summary goes out without the reports
        return dict(NO_REPORTS), f"{type(exc).__name__}: {str(exc).strip().splitlines()[0][:300] if str(exc) else ''}"


def run_attempt(train_loop: str, sink: Any, config: dict[str, Any], *, configured: bool = True) -> Any:
    """One worker's attempt: it tells ``sink`` it started (and whether from a checkpoint), then the team's function
    runs with its ``train_config``, or with no argument when it takes none and none is set (``configured``: the
    workload sets ``train_config``; :func:`raytpu.core.specs.runtime.user_code.train_loop_arguments`, validate's
    rule)."""
    import ray
    import ray.train

    from raytpu.workloads import local_secrets

    local_secrets.load()  # the emulated slice's secrets (GKE: the kubelet's secretKeyRef env)
    function = load_train_loop(train_loop)
    rank = ray.train.get_context().get_world_rank()
    started = tell(sink, "started", time.time(), ray.train.get_checkpoint() is not None, rank)
    if rank == 0 and started is not None:  # bounded, never raising: recorded before the attempt's first report
        ray.wait([started], timeout=SINK_WAIT_S)
    with CompileWatch(on_compile=lambda watch: tell(sink, "compiled", watch.summary(), rank)):
        return function(*user_code.train_loop_arguments(function, config, configured))


def build_trainer(work: WorkloadSpec, args: argparse.Namespace, sink: Any, slice_name: str | None,
                  datasets: dict[str, Any] | None) -> Any:
    """The JaxTrainer around the team's function: the kit trainer's scaling, failure and checkpoint settings."""
    from ray.train.v2.api.config import CheckpointConfig, RunConfig
    from ray.train.v2.jax import JaxTrainer

    from raytpu.workloads.support.preemption import failure_config
    from raytpu.workloads.support.slice_training import scaling_config

    assert work.train_loop is not None
    # a team's checkpoint may be sharded per rank: never registered without a preempted slice's shards (issue 49)
    failures = failure_config(args, relax_collectives=False)
    run = RunConfig(name=args.name, storage_path=args.storage_path, failure_config=failures,
                    checkpoint_config=CheckpointConfig(num_to_keep=args.keep_checkpoints), callbacks=[report_log(sink)])
    return JaxTrainer(functools.partial(run_attempt, work.train_loop, sink, configured=work.train_config is not None),
                      train_loop_config=dict(work.train_config or {}), datasets=datasets,
                      scaling_config=scaling_config(work.plan, slice_name, work.slices_per_run), run_config=run)


def read_dataset(path: str | None) -> dict[str, Any] | None:
    """``datasets`` for a workload's ``dataset``, read as is (``ray.train.get_dataset_shard("train")``)."""
    from raytpu.workloads.support.train_data import DATASET, open_dataset

    return None if path is None else {DATASET: open_dataset(path)}


def run(args: argparse.Namespace, work: WorkloadSpec, env: dict[str, str]) -> dict[str, Any]:
    """Fits the team's function on the slice; returns the summary (printed as ``RAYTPU_TRAIN_RESULT {json}``)."""
    import ray

    from raytpu.workloads.support.slice_training import (
        PIN_NOTICE,
        compile_verdict,
        ray_assumed_hosts,
        reserve_for_pinning,
        stamp_joined,
        start_autoscaling_coordinator,
    )

    assert work.train_loop is not None
    # a bad train_loop (or a train_config its function cannot take) is exit 2 here, before any slice is reserved
    parameters = user_code.LoopParameters.of_function(load_train_loop(work.train_loop))
    if parameters is not None:
        errors.raise_found(user_code.loop_call_problems("", work.train_loop, parameters, work.train_config))
    # the workers' working folder stays the code folder (Ray Train 2.60 moves them to a session folder by default:
    # ray.train.v2.api.data_parallel_trainer, RAY_CHDIR_TO_TRIAL_DIR), so the team's relative paths resolve
    os.environ.setdefault("RAY_CHDIR_TO_TRIAL_DIR", "0")
    plan, slices = work.plan, work.slices_per_run
    if not ray.is_initialized():  # workers' output reaches the driver's log (Ray Train keeps it in files too)
        ray.init(address=args.address or os.environ.get("RAY_ADDRESS") or "auto", log_to_driver=True,
                 logging_level=logging.ERROR, runtime_env=job_runtime_env({"env_vars": env}))
    datasets = read_dataset(work.dataset)
    sink = pinned_sink()
    start_autoscaling_coordinator()
    t0 = time.monotonic()
    summary: dict[str, Any] = {"ok": False, "train_loop": work.train_loop, "slice": f"{plan.generation} "
                               f"{plan.topology}", "slices": slices, "workers": plan.hosts * slices,
                               "name": args.name, "storage_path": args.storage_path}
    held, result = None, None
    signal.signal(signal.SIGTERM, _stopped)  # a stopped job (runs cancel, a deadline) still reports what it did
    try:
        stamp_joined(plan)
        if ray_assumed_hosts(plan) != plan.hosts:
            print(f"train: {PIN_NOTICE} of {plan.hosts} hosts for the workers", file=sys.stderr, flush=True)
            held = reserve_for_pinning(plan, args.start_timeout_s * max(args.slice_retries, 1))
            summary["pinned_slice"] = held.slice_name
            print(f"train: workers pinned to slice {held.slice_name}", file=sys.stderr, flush=True)
        result = build_trainer(work, args, sink, held.slice_name if held else None, datasets).fit()
    except (Exception, KeyboardInterrupt) as exc:  # the team's exception inside TrainingFailedError, no slice, stop
        summary["error"] = f"{type(exc).__name__}: {str(exc).strip().splitlines()[0][:500] if str(exc) else ''}"
    finally:
        if held is not None:
            held.release()
    summary["duration_s"] = round(time.monotonic() - t0, 2)
    reports, lost = gathered(sink)
    if lost is not None:
        summary["reports_lost"] = lost
        print(f"train: the run's reports were lost ({lost}); the summary has the result only", file=sys.stderr,
              flush=True)
    last = reports["last"] or {}
    summary.update(reports=reports["reports"], attempts=reports["attempts"], metrics=last.get("metrics"),
                   checkpoint=last.get("checkpoint"), stamps=team_stamps(reports["attempts"]))
    compiled = [a["compile"] for a in reports["attempts"] if a.get("compile")]
    if compiled:
        summary.update(compile=compiled[-1], compile_attempts=compiled,
                       **compile_verdict(compiled[-1], work.compile_budget_s))
    if result is not None:
        if result.error is not None:
            summary["error"] = f"{type(result.error).__name__}: {str(result.error).splitlines()[0][:500]}"
        summary["checkpoint"] = result.checkpoint.path if result.checkpoint else summary["checkpoint"]
        summary["ok"] = result.error is None
    print(result_line(summary), flush=True)
    return summary


def _stopped(signum: int, frame: Any) -> None:
    """SIGTERM (Ray's ``stop_job`` sends it, then SIGKILL a few seconds later): out of ``fit()`` to the summary."""
    raise KeyboardInterrupt(f"stopped by signal {signum}")


def team_stamps(attempts: list[dict[str, Any]]) -> list[Stamp]:
    """``reserved`` when the first attempt's workers started, ``first_step`` at the run's first report; a later
    attempt's first report is a resume (printed, not a first step)."""
    made: list[Stamp] = []
    if attempts:
        first = attempts[0]
        made.append(stamp("reserved", "JaxTrainer's workers placed on the slice and the team's function started: "
                          "since the driver joined, Ray Train's controller, the slice's placement group and its worker "
                          "actors", wall=first["started_wall"]))
        if (compiled := first.get("compile")) and compiled.get("wall"):
            last = compile_cache.last_to_finish(compiled)
            made.append(compile_started(last["wall"], last["s"], "JaxTrainer's workers placed, then the team's "
                                        "function up to its first compile (imports, set-up)"))
            made.append(stamp("compiled", compile_cache.describe_processes(compiled), wall=last["wall"]))
        if first["first_report_wall"]:
            kind = "resumed from a checkpoint" if first["resumed"] else "first"
            made.append(stamp("first_step", f"the team's function reported ({kind} report)",
                              wall=first["first_report_wall"]))
    for item in made:
        print(stamp_line(item), flush=True)
    for attempt in attempts[1:]:
        if attempt["first_report_wall"]:
            print(f"train: attempt {attempt['attempt']} resumed{' from a checkpoint' if attempt['resumed'] else ''}"
                  f"; its first report {attempt['first_report_wall'] - attempt['started_wall']:.1f}s after it "
                  "started", file=sys.stderr, flush=True)
    return made
