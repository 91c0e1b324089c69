"""The kit's demo as library code (``raytpu demo``, ``make run``; ``--serve``: ``make serve``): every step on an
emulated slice of the config, its report, the teardown always. The command parses flags and prints what this returns;
lines go to the sinks it passes (``say``: progress on stderr, ``show``: output on stdout)."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from raytpu.local.slice.state import Progress

if TYPE_CHECKING:
    import subprocess
    from collections.abc import Callable, Iterator

    from raytpu.core.common.timeline import Recorder
    from raytpu.core.specs.spec import ClusterSpec, WorkloadSpec
    from raytpu.core.tpu.plan import SlicePlan
    from raytpu.local.slice.memory import PeakMemory
    from raytpu.local.slice.state import LocalCluster

TEARDOWN_GRACE_S = 0.25
"""SIGTERM to SIGKILL when the training demo's slice goes (its drivers have exited; no serving engine, whose cleanup
keeps :func:`raytpu.local.slice.procs.stop`'s default): the processes that heed SIGTERM are gone within 0.2 s, while the
GCS, raylets and runtime-env agents ignore it and outlast any grace (docs/FACTS.md#local-teardown)."""

OVERLAP_ENV = "RAYTPU_DEMO_OVERLAP"
"""``1`` starts the train step's driver once the smoke check's first host check returned (:class:`EarlyTrain`); by
default after the smoke ended: in a bench run (bench/demo_overlap.py) on a swamped machine (load 17-62) both
overlapped demos' smoke checks judged a device slow and neither serial one's did, and on a quiet one it gained nothing
(0.99x after the slice was up)."""


@dataclass
class DemoOptions:
    """What ``raytpu demo`` was asked for (its flags, checked by the command)."""

    config: str
    report: str
    steps: int = 30
    out: str = "cdktf.out"
    no_synth: bool = False
    dir: str = ".raytpu/demo"
    preempt: bool = False
    notice_s: float = 10.0


@dataclass
class Demo:
    """One demo run: its options, report, timeline and sinks."""

    options: DemoOptions
    report: dict[str, Any]
    recorder: Recorder
    say: Progress
    show: Progress

    def step(self, name: str, ok: bool, started: float, why: str = "", **details: Any) -> None:
        """Records a step; a failed one says ``why`` on its line (the full account is in the report)."""
        self.report["steps"].append({"step": name, "ok": ok, "duration_s": round(time.monotonic() - started, 2),
                                     **details})
        line = f"{'ok  ' if ok else 'FAIL'} {name} ({time.monotonic() - started:.1f}s)"
        self.say(line if ok or not why else f"{line}: {why}")


def run_demo(options: DemoOptions, say: Progress, show: Progress,
             described: Callable[[ClusterSpec], None] = lambda _spec: None) -> tuple[dict[str, Any], PeakMemory]:
    """The demo's steps (validate, synth, slice up, smoke, train, teardown); returns its report (every key but
    ``timeline`` complete, ``ok`` set) and the memory it sampled. ``described`` gets the config once validated (the
    command prints its slices). InvalidInputs for a bad config, before anything starts."""
    from raytpu.core.common import timeline
    from raytpu.core.common.report import FORMAT
    from raytpu.local.slice import state
    from raytpu.local.slice.from_config import config_slice_plan
    from raytpu.local.slice.memory import PeakMemory

    t0 = time.monotonic()
    demo = Demo(options, {"format": FORMAT, "config": options.config, "steps": [], "ok": False, "smoke": [],
                          "train": None}, timeline.Recorder.for_command(), say, show)
    spec = _validate(demo)  # InvalidInputs -> exit 2 before anything starts
    described(spec)
    plan = config_slice_plan(spec)
    with claim(options.dir):
        synthesized = _start_synth_step(demo)  # beside the slice's start: the two share no state
        # a temp-dir prefix of our own: the memory sampler counts this cluster's processes, nobody else's
        os.environ[state.ENV_TMP_PREFIX] = f"{state.TMP_PREFIX}d{os.getpid()}-"
        with PeakMemory(tag_prefix=os.environ[state.ENV_TMP_PREFIX]) as memory:
            _on_the_slice(demo, spec, plan, synthesized)
    report = demo.report
    report["timeline"] = demo.recorder.finish("torn down")
    report["peak_memory_mib"] = round(memory.peak_pss_bytes / 2**20)
    report["peak_memory_rss_sum_mib"] = round(memory.peak_rss_bytes / 2**20)
    report["duration_s"] = round(time.monotonic() - t0, 1)
    report["ok"] = all(s["ok"] for s in report["steps"])
    return report, memory


def write_report(report: dict[str, Any], path: Path) -> None:
    """Writes the report (the smoke verdicts also as ``smoke.json`` and ``smoke.junit.xml`` beside it)."""
    from raytpu.core.common import report as smoke_report

    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(report, indent=2, sort_keys=True) + "\n")
    if report["smoke"]:
        smoke_report.write_reports(report["smoke"], path.parent)


@contextlib.contextmanager
def claim(directory: str, *clusters: Path) -> Iterator[None]:
    """The demo's run directory held for this demo (:mod:`raytpu.local.slice.run_lock`), refused (exit 2, naming
    ``--dir``) when another command holds it or a cluster the demo did not start runs there (or in ``clusters``,
    its parts' folders): the demo stops only its own cluster."""
    from raytpu.local.slice import state
    from raytpu.local.slice.run_lock import hold
    from raytpu.local.slice.startup import refuse_running

    where = state.run_dir(directory)
    with hold(where, "raytpu demo"):
        for folder in (where, *clusters):
            refuse_running(state.run_dir(folder))
        yield


def smoke_args(dcn_slices: int | None) -> tuple[str, ...]:
    """The smoke program's flags in the demo: ``--dcn-slices N`` when the emulated cluster covers a multi-slice
    train workload's N slices (:func:`raytpu.local.slice.from_config.dcn_slices_of`)."""
    return ("--dcn-slices", str(dcn_slices)) if dcn_slices else ()


def synth_available() -> bool:
    import importlib.util

    try:
        return all(importlib.util.find_spec(m) is not None for m in ("cdktn", "raytpu.stacks.app"))
    except (ImportError, ValueError):
        return False


def _start_synth(config_path: str, out: str) -> subprocess.Popen[str]:
    import subprocess

    # `raytpu synth` calls raytpu.stacks.app.synth; a child process keeps jsii's node runtime out of the demo.
    return subprocess.Popen([sys.executable, "-m", "raytpu", "synth", config_path, "--out", out],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _validate(demo: Demo) -> ClusterSpec:
    """The ``validate`` step: the config read (every rule)."""
    from raytpu.config import load

    started = time.monotonic()
    spec = load(demo.options.config)
    demo.step("validate", True, started, slices=len(spec.slices), workloads=len(spec.workloads))
    return spec


def _start_synth_step(demo: Demo) -> Callable[[], None]:
    """Starts the ``synth`` step in a child process; returns what waits for it and records the step in its place
    (after ``validate``; idempotent). Skipped with ``--no-synth`` or without the CDK layer."""
    options, report = demo.options, demo.report
    if options.no_synth:
        report["steps"].append({"step": "synth", "ok": True, "skipped": "--no-synth"})
        return lambda: None
    if not synth_available():
        report["steps"].append({"step": "synth", "ok": True, "skipped": "raytpu.stacks.app or cdktn not installed"})
        demo.say("skip synth: raytpu.stacks.app or cdktn is not installed")
        return lambda: None
    demo.say(f"synthesizing the stacks of {options.config} into {options.out} (beside the slice's start)")
    synth_started = time.monotonic()
    synth_proc = _start_synth(options.config, options.out)
    place = len(report["steps"])

    def finish() -> None:
        if synth_proc.returncode is not None:
            return
        out, err = synth_proc.communicate(timeout=600)
        files = [line.strip() for line in out.splitlines() if line.strip()]
        demo.step("synth", synth_proc.returncode == 0, synth_started, files=files,
                  **({} if synth_proc.returncode == 0 else {"stderr": err[-2000:]}))
        report["steps"].insert(place, report["steps"].pop())
    return finish


def _on_the_slice(demo: Demo, spec: ClusterSpec, plan: SlicePlan, synthesized: Callable[[], None]) -> None:
    """The steps on an emulated slice of ``plan`` (up, then the synth started beside it is waited for, smoke,
    train), then its ``teardown``, always; a failure is the report's ``error`` step."""
    from raytpu.local.slice import procs
    early: EarlyTrain | None = None
    try:
        cluster = _slice_up(demo, plan)
        synthesized()
        if demo.options.preempt:
            _smoke(demo, cluster, spec, plan)
            _train_preempted(demo, cluster)
        else:
            early = EarlyTrain(cluster, demo.options.steps)
            _smoke(demo, cluster, spec, plan, on_measured=early.launch if overlapped() else None)
            _train(demo, early)
    except Exception as exc:  # the report names the failure; teardown below always runs
        demo.report["steps"].append({"step": "error", "ok": False, "error": f"{type(exc).__name__}: {exc}"})
        demo.say(f"FAIL {type(exc).__name__}: {exc}")
    finally:
        synthesized()  # the child reaped, its step recorded, whatever failed
        started = time.monotonic()
        procs.stop(demo.options.dir, grace_s=TEARDOWN_GRACE_S)
        if early is not None:
            early.join(30.0)  # a driver started early ends with its cluster
        demo.step("teardown", True, started)


def overlapped() -> bool:
    """Whether the train driver starts during the smoke check (:data:`OVERLAP_ENV`; default no)."""
    return os.environ.get(OVERLAP_ENV) == "1"


SMOKE_TIMEOUT_S = 240.0
"""The smoke step's bound (its driver is killed past it)."""
TRAIN_TIMEOUT_S = 300.0
"""The train step's bound once its workers may be placed; a driver started during the smoke check gets
:data:`SMOKE_TIMEOUT_S` more."""


class EarlyTrain:
    """The train step's driver, started once the smoke check's first host check returned (its ``first_step`` stamp:
    a host returns past ``jax.distributed.shutdown``'s barrier, so every host's measurements are done and no CPU the
    driver takes skews the smoke's verdict, which judges each device against the slice's median (started at the
    smoke's ``reserved`` stamp it failed a loaded run's smoke with one device at 0.18x): the driver's start, imports,
    ``ray.init`` and JaxTrainer's controller
    overlap the end of the smoke check (its last results, verdict, release, exit), and its placement group
    waits until the smoke releases the slice (Ray places a pending group once its bundles are free). Such a driver's
    wait for its workers (``--start-timeout-s``) is the smoke's own bound, so a slow smoke check never fails the
    training; its start after the smoke keeps the train workload's default. Started after the smoke when it never
    got a host's result."""

    def __init__(self, cluster: LocalCluster, steps: int) -> None:
        self.cluster, self.steps = cluster, steps
        self.started: float | None = None
        self.during_smoke = False
        self._thread: threading.Thread | None = None
        self._done: subprocess.CompletedProcess[str] | None = None
        self._error: BaseException | None = None
        self._lock = threading.Lock()

    def launch(self, during_smoke: bool = True) -> None:
        """Starts the driver (once)."""
        from raytpu.local.running import jobs

        with self._lock:
            if self._thread is not None:
                return
            self.started, self.during_smoke = time.monotonic(), during_smoke
            storage = Path(self.cluster.run_dir) / "checkpoints"
            shutil.rmtree(storage, ignore_errors=True)  # earlier demos' checkpoints (each launch is a new run name)

            early = ("--start-timeout-s", f"{SMOKE_TIMEOUT_S:g}") if during_smoke else ()
            bound = TRAIN_TIMEOUT_S + (SMOKE_TIMEOUT_S if during_smoke else 0.0)

            def drive() -> None:
                try:
                    self._done = jobs.run_workload(
                        self.cluster, "train", "--storage-path", str(storage), "--steps", str(self.steps),
                        "--checkpoint-every", str(max(self.steps // 3, 1)), *early, timeout_s=bound)
                except BaseException as exc:  # raised on the demo's thread by result()
                    self._error = exc

            self._thread = threading.Thread(target=drive, name="raytpu-demo-train", daemon=True)
            self._thread.start()

    def join(self, timeout_s: float | None = None) -> None:
        if self._thread is not None:
            self._thread.join(timeout_s)

    def result(self) -> subprocess.CompletedProcess[str]:
        """The driver's end (started now if it was not)."""
        self.launch(during_smoke=False)
        self.join()
        if self._error is not None:
            raise self._error
        assert self._done is not None
        return self._done


def _slice_up(demo: Demo, plan: SlicePlan) -> LocalCluster:
    """The ``local slice up`` step: one emulated slice of ``plan`` in the demo's own run directory."""
    from raytpu.core.common import timeline
    from raytpu.local.slice import startup
    from raytpu.local.slice.phases import emulated_phases

    started = time.monotonic()
    skipped = any(s["step"] == "synth" and s.get("skipped") for s in demo.report["steps"])
    demo.recorder.mark("applied", f"validated{'' if skipped else '; the stacks synthesize beside the slice'}; the "
                       "emulated slice starts (where GKE would get the RayJob)", timeline.EMULATED)
    emulated_phases(demo.recorder)  # each host gets the webhook's variables as it is launched
    # clears a dead leftover; no log monitor: the demo's smoke and train drivers take no worker output
    cluster = startup.start(plan, 1, demo.options.dir, progress=demo.say, owner="raytpu demo", log_monitor=False)
    demo.recorder.mark("ray_joined", f"{plan.hosts} Ray node(s) registered with ray.io/tpu-slice-name="
                       f"{cluster.slices[0]} and their ray.io/tpu-worker-id")
    demo.step("local slice up", True, started, address=cluster.address, slices=cluster.slices,
              hosts=plan.hosts, chips_per_host=plan.chips_per_host)
    return cluster


def _smoke(demo: Demo, cluster: LocalCluster, spec: ClusterSpec, plan: SlicePlan,
           on_measured: Callable[[], None] | None = None) -> None:
    """The ``smoke`` step: the smoke workload on the slice (across the train workload's DCN span when it fits); its
    verdicts go to ``report["smoke"]``; ``on_measured`` is called once the first host check returned."""
    from raytpu.core.common import report as smoke_report
    from raytpu.core.common import timeline
    from raytpu.local.running import jobs
    from raytpu.local.slice.from_config import dcn_slices_of

    started = time.monotonic()
    dcn_slices, why = dcn_slices_of(spec, plan, len(cluster.slices))
    if why:
        demo.say(why)

    def heard(line: str) -> None:
        if on_measured is not None and any(s["phase"] == "first_step" for s in timeline.parse_stamp_lines(line)):
            on_measured()

    done = jobs.run_workload(cluster, "smoke", *smoke_args(dcn_slices), timeout_s=SMOKE_TIMEOUT_S, on_stdout=heard)
    verdicts = demo.report["smoke"] = smoke_report.parse_verdict_lines(done.stdout)
    demo.recorder.take(s for s in timeline.parse_stamp_lines(done.stdout) if s["phase"] == "reserved")
    demo.recorder.mark("smoke_checked", f"the smoke check's {len(verdicts)} verdict(s) read (exit {done.returncode})")
    why = "; ".join(smoke_report.headline(v) for v in verdicts if smoke_report.state_of(v) != "healthy")
    demo.step("smoke", done.returncode == 0 and smoke_report.all_healthy(verdicts), started,
              why=why or f"exit {done.returncode}" + ("" if verdicts else ", no verdict"),
              exit_code=done.returncode,
              **({} if verdicts else {"stderr": done.stderr[-2000:]}))


def _train(demo: Demo, early: EarlyTrain) -> None:
    """The ``train`` step: a few JaxTrainer steps with checkpoints in the run directory (its driver started during
    the smoke check: :class:`EarlyTrain`); its result goes to ``report["train"]`` and its phases to the timeline."""
    from raytpu.core.common import timeline
    from raytpu.workloads.train import parse_result

    done = early.result()
    started = early.started if early.started is not None else time.monotonic()
    train = demo.report["train"] = parse_result(done.stdout)
    stamps = {s["phase"]: s for s in timeline.parse_stamp_lines(done.stdout)}
    if "trainer_started" in stamps:  # from the smoke check's end: the train job's driver, then JaxTrainer's start
        placed = (f"; its workers placed at {stamps['reserved']['wall'] - demo.recorder.start_wall:.1f}s"
                  if "reserved" in stamps else "")
        driver = ("the train job's driver (started while the smoke check held the slice), " if early.during_smoke
                  else "the train job's driver, ")
        stamps["trainer_started"]["detail"] = driver + stamps["trainer_started"]["detail"] + placed
    demo.recorder.take(stamps[phase] for phase in ("trainer_started", "compiled", "first_step") if phase in stamps)
    ok = done.returncode == 0 and bool(train and train.get("ok"))
    demo.step("train", ok, started, why=str((train or {}).get("error") or f"exit {done.returncode}"),
              exit_code=done.returncode,
              **({} if train else {"stderr": done.stderr[-2000:]}))


def _train_preempted(demo: Demo, cluster: LocalCluster) -> None:
    """The ``train`` step with a host preempted mid-run (:func:`raytpu.local.demos.drill.drill`): the run's result goes
    to ``report["train"]``, what the preemption cost to ``report["preemption"]``. It passes when the run finished on a
    whole slice and, with a notice, resumed from the checkpoint written at it with at most one step lost."""
    from raytpu.core.common import timeline
    from raytpu.core.specs.runtime import compile_cache
    from raytpu.local.demos.drill import drill

    options, report = demo.options, demo.report
    started = time.monotonic()
    steps = max(options.steps, 20)  # a periodic checkpoint, then the preemption halfway, then steps after the resume
    done = drill(cluster, options.notice_s, Path(cluster.run_dir) / "checkpoints", steps=steps,
                 every=max(steps // 3, 1), progress=demo.say)
    train = report["train"] = done["train"]
    cut = report["preemption"] = done["preemption"]
    stamps = [s for s in timeline.parse_stamp_lines(done["stdout"])
              if s["phase"] in ("trainer_started", "compiled", "first_step")]
    demo.recorder.take(stamps)
    compiled = compile_cache.first_and_resumed(train.get("compile_attempts") or [])
    if compiled is not None:  # the resumed start's compile beside the first one's: what the cache saved
        cut["compile"] = compiled
    ok = done["exit_code"] == 0 and bool(train.get("ok")) and cut["resumed_on_whole_slice"] and (
        not options.notice_s or (cut["checkpoint_at_notice"] and (cut["steps_lost"] or 0) <= 1))
    demo.step("train (preempted)", ok, started, why=str(train.get("error") or f"steps lost {cut['steps_lost']}, "
              f"checkpoint at notice {cut['checkpoint_at_notice']}"), exit_code=done["exit_code"])


def serve_demo(config: str, directory: str, say: Progress, show: Progress) -> tuple[dict[str, Any], PeakMemory]:
    """``make serve``: the config's serving workload on its own emulated slice (``directory``-serve), asked, torn
    down; returns the report (``timeline`` and ``duration_s`` set) and the memory sampled. InvalidInput when the config
    has no serving workload.

    Its timeline (:mod:`raytpu.core.common.timeline`) runs up to the first token: ``first_step`` is stamped when the
    official ``openai`` client gets the first streamed content of the first question
    (:mod:`raytpu.local.running.llm_client`)."""
    from raytpu.config import load
    from raytpu.core.common import timeline
    from raytpu.core.common.errors import InvalidInput
    from raytpu.local.slice import procs, state
    from raytpu.local.slice.memory import PeakMemory

    t0 = time.monotonic()
    recorder = timeline.Recorder.for_command()
    serving = [w for w in load(config).workloads if w.kind.serves]
    if not serving:
        raise InvalidInput("config", f"{config} has no serving workload", "a config with a `kind: serve` "
                           "workload, e.g. raytpu.example.yaml")
    where = f"{directory}-serve"
    os.environ[state.ENV_TMP_PREFIX] = f"{state.TMP_PREFIX}s{os.getpid()}-"
    report: dict[str, Any] = {"config": config, "serve": serving[0].name, "ok": False, "answers": []}
    with claim(where), PeakMemory(tag_prefix=os.environ[state.ENV_TMP_PREFIX]) as memory:
        try:
            _serve_and_ask(config, serving[0], where, report, recorder, say, show)
        except Exception as exc:  # one line names the failure; teardown below always runs
            report["error"] = f"{type(exc).__name__}: {exc}"
            say(f"FAIL {type(exc).__name__}: {exc}")
        finally:
            procs.stop(where)
    report["timeline"] = recorder.finish("torn down")
    report["peak_memory_mib"] = round(memory.peak_pss_bytes / 2**20)
    report["peak_memory_rss_sum_mib"] = round(memory.peak_rss_bytes / 2**20)
    report["duration_s"] = round(time.monotonic() - t0, 1)
    return report, memory


def _serve_and_ask(config: str, work: WorkloadSpec, directory: str, report: dict[str, Any],
                   recorder: Recorder, say: Progress, show: Progress) -> None:
    """An emulated slice of ``work``'s slice in ``directory``, ``work`` deployed on it and asked a few questions
    with the openai client: the endpoint, model, answers and ``ok`` go to ``report``, the phases to ``recorder``."""
    from raytpu.core.common import timeline
    from raytpu.local.running.deploy import deploy_serve
    from raytpu.local.running.llm_client import ask
    from raytpu.local.slice import startup
    from raytpu.local.slice.from_config import serving_workload
    from raytpu.local.slice.phases import emulated_phases

    recorder.mark("applied", "validated; the emulated slice starts (where GKE would get the RayService)",
                  timeline.EMULATED)
    emulated_phases(recorder)  # each host gets the webhook's variables as it is launched
    plan = work.plan
    cluster = startup.start(plan, 1, directory, progress=say, owner="raytpu demo --serve")
    recorder.mark("ray_joined", f"{plan.hosts} Ray node(s) registered with ray.io/tpu-slice-name="
                  f"{cluster.slices[0]} and their ray.io/tpu-worker-id")
    url, model = deploy_serve(cluster, serving_workload(cluster, config, work.name), 420.0, recorder=recorder)
    deployed_s = recorder.elapsed()
    show(f"endpoint: {url}\nmodel: {model}")
    report.update(endpoint=url, model=model)
    results = ask(url, model)
    report["answers"] = [{"ttft_s": round(r.ttft_s, 3), "completion_tokens": r.completion_tokens,
                          "prompt_tokens": r.prompt_tokens, "tokens_per_s": round(r.tokens_per_s, 1),
                          "finish_reason": r.finish_reason} for r in results]
    first = results[0] if results else None
    if first is not None and first.first_token_wall is not None:
        recorder.take([timeline.stamp("first_step", f"first token: the openai client's first streamed "
                                      f"content of the first question ({first.ttft_s * 1000:.0f} ms after "
                                      f"it was sent); before it the deploy program returned the endpoint at "
                                      f"{deployed_s:.1f}s (once /v1/models listed the model) and the client "
                                      "listed the models",
                                      wall=first.first_token_wall)])
    report["ok"] = bool(results) and all(r.completion_tokens > 0 for r in results)
