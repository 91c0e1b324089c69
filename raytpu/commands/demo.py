"""``raytpu demo``: what ``make run`` runs — the whole kit on this machine, no cloud account needed.

1. validate and describe the config (default: ``raytpu.yaml`` when present, else ``raytpu.example.yaml``;
   :func:`raytpu.config.choose` says which on stderr);
2. synthesize its stacks (``raytpu synth`` in a child process) when the CDK layer is installed;
3. bring up an emulated slice of the config's train slice (``raytpu.local``);
4. run the smoke workload and a few JaxTrainer steps on it, as a RayJob would;
5. print a readable report and write it as JSON (``--report``, default ``reports/demo.json``; the smoke
   verdicts also as ``smoke.json`` and ``smoke.junit.xml`` beside it);
6. tear everything down, always.

Exit 0 when every step passed, 1 when one failed (the report says which), 2 for a bad config.

``--serve`` (``make serve``, in ``.venv-serve``) is the serving demo instead: an emulated slice of the
config's serving workload's slice, its app deployed as ``raytpu local serve`` does, a few questions asked with
the official ``openai`` client (time to first token, tokens/s), peak memory, the timeline up to the first token,
and the teardown, always; its JSON report is ``--report`` (default ``reports/demo-serve.json``).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import sys
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import subprocess
    from collections.abc import Callable, Iterator

    from raytpu.core.common.timeline import Recorder
    from raytpu.core.specs.spec import ClusterSpec, WorkloadSpec
    from raytpu.core.tpu.plan import SlicePlan
    from raytpu.local import LocalCluster, PeakMemory

HELP = "run the example end to end locally: validate, describe, synth, emulated slice, smoke, train, report"

DEFAULT_REPORT = "reports/demo.json"
DEFAULT_SERVE_REPORT = "reports/demo-serve.json"
MAX_STEPS = 100_000
DEFAULT_NOTICE_S = 10.0
DEFAULT_SERVE_PYTHON = ".venv-serve/bin/python"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Adds ``--config``, ``--report``, ``--steps``, ``--out``, ``--no-synth``."""
    from raytpu.cli import argtypes
    from raytpu.cli.cli_args import LOCAL_DEFAULT

    parser.add_argument("--config", default=None, type=argtypes.path,
                        help=f"config to demo (default: {LOCAL_DEFAULT})")
    parser.add_argument("--report", default=None, type=argtypes.path,
                        help=f"JSON report path (default: {DEFAULT_REPORT}; with --serve {DEFAULT_SERVE_REPORT})")
    parser.add_argument("--steps", type=argtypes.positive_int, default=30, help="training steps (default 30)")
    parser.add_argument("--out", default="cdktf.out", type=argtypes.path,
                        help="synth output directory (default: cdktf.out)")
    parser.add_argument("--no-synth", action="store_true", help="skip synthesizing the stacks")
    parser.add_argument("--dir", default=".raytpu/demo", type=argtypes.path,
                        help="run directory of the demo's local cluster")
    parser.add_argument("--serve", action="store_true", help="the serving demo instead (make serve): slice up, "
                        "deploy, ask with the openai client, tear down")
    parser.add_argument("--preempt", action="store_true", help="preempt one host mid-run (raytpu local preempt) "
                        "and report what it cost: the report's `preemption` section")
    parser.add_argument("--notice-s", type=argtypes.notice_seconds, default=None, metavar="S",
                        help="with --preempt: the notice before the kill (default 10; 0: none, a host crash)")
    parser.add_argument("--data", action="store_true", help="the Ray Data demo instead (make data): batch inference "
                        "and training from a dataset on emulated slices, reports/demo-data.json")
    parser.add_argument("--serve-python", default=None, type=argtypes.path,
                        help="with --data: the interpreter with vLLM's CPU build (default .venv-serve/bin/python)")


def _say(line: str) -> None:
    sys.stderr.write(f"raytpu demo: {line}\n")
    sys.stderr.flush()


def _step(report: dict[str, Any], name: str, ok: bool, started: float, why: str = "", **details: Any) -> None:
    """Records a step; a failed one says ``why`` on its line (the full account is in the report)."""
    report["steps"].append({"step": name, "ok": ok, "duration_s": round(time.monotonic() - started, 2), **details})
    line = f"{'ok  ' if ok else 'FAIL'} {name} ({time.monotonic() - started:.1f}s)"
    _say(line if ok or not why else f"{line}: {why}")


def _synth_available() -> bool:
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


def smoke_args(dcn_slices: int | None) -> tuple[str, ...]:
    """The smoke program's flags in the demo: ``--dcn-slices N`` when the emulated cluster covers a multi-slice
    train workload's N slices (:func:`raytpu.local.from_config.dcn_slices_of`)."""
    return ("--dcn-slices", str(dcn_slices)) if dcn_slices else ()


def check_args(args: argparse.Namespace) -> None:
    """The flags a demo only uses after minutes of work (training steps, the report at the end), and flags that
    cannot go together: refused first."""
    from raytpu.cli.cli_args import refuse_combinations
    from raytpu.core.common import errors
    from raytpu.core.common.errors import invalid_value

    preempt, serve, data = ("--preempt", args.preempt), ("--serve", args.serve), ("--data", args.data)
    refuse_combinations(together=[(preempt, serve), (preempt, data), (serve, data)],
                        without=[(("--notice-s", args.notice_s is not None), preempt),
                                 (("--serve-python", args.serve_python is not None), data)])
    args.notice_s = DEFAULT_NOTICE_S if args.notice_s is None else args.notice_s
    args.serve_python = args.serve_python or DEFAULT_SERVE_PYTHON

    if not 1 <= args.steps <= MAX_STEPS:
        raise invalid_value("--steps", args.steps, "is out of range", f"1 to {MAX_STEPS} training steps")
    if args.report is not None and (args.report == "" or Path(args.report).is_dir()):
        raise invalid_value("--report", args.report, "is not a file path (a folder, or empty)",
                            "the path of the JSON report to write")
    from raytpu.cli import machine
    from raytpu.local.data_demo import DEFAULT_REPORT as DEFAULT_DATA_REPORT

    default = DEFAULT_SERVE_REPORT if args.serve else DEFAULT_DATA_REPORT if args.data else DEFAULT_REPORT
    errors.raise_found(machine.output_file_problems("--report", args.report or default))
    machine.check_environment("TMPDIR", "HOME")  # synth's node runtime, Ray's and vLLM's caches write in them
    if not args.no_synth and not args.serve and not args.data:
        from raytpu.stacks.synth_out import check

        check(args.out)  # the synth step's folder: refused now, not as a failed step minutes later


def run(args: argparse.Namespace) -> int:
    """Runs the demo; returns 0 when every step passed."""
    from raytpu import local
    from raytpu.config import choose
    from raytpu.core.common import timeline
    from raytpu.core.common.report import FORMAT
    from raytpu.local.from_config import config_slice_plan

    check_args(args)
    args.config = choose(args.config, local=True)
    if args.serve:
        return serve_demo(args)
    if args.data:
        from raytpu.local import data_demo

        where = f"{args.dir}-data"
        with claim(where, *(Path(where) / part / "cluster" for part in ("batch", "train"))):
            return data_demo.run_demo(args.report or data_demo.DEFAULT_REPORT, where, args.serve_python)
    t0 = time.monotonic()
    recorder = timeline.Recorder.for_command()
    args.report = args.report or DEFAULT_REPORT
    report: dict[str, Any] = {"format": FORMAT, "config": args.config, "steps": [], "ok": False,
                              "smoke": [], "train": None}
    spec = _validate(args.config, report)  # InvalidInputs -> exit 2 before anything starts
    plan = config_slice_plan(spec)
    with claim(args.dir):
        _synth(args, report)
        # a temp-dir prefix of our own: the memory sampler counts this cluster's processes, nobody else's
        os.environ[local.ENV_TMP_PREFIX] = f"{local.TMP_PREFIX}d{os.getpid()}-"
        with local.PeakMemory(tag_prefix=os.environ[local.ENV_TMP_PREFIX]) as memory:
            _on_the_slice(args, spec, plan, report, recorder)
    report["timeline"] = recorder.finish("torn down")
    return _write_report(report, Path(args.report), memory, t0)


@contextlib.contextmanager
def claim(directory: str, *clusters: Path) -> Iterator[None]:
    """The demo's run directory held for this demo (:mod:`raytpu.local.run_lock`), refused (exit 2, naming
    ``--dir``) when another command holds it or a cluster the demo did not start runs there (or in ``clusters``,
    its parts' folders): the demo stops only its own cluster."""
    from raytpu import local
    from raytpu.local.run_lock import hold
    from raytpu.local.startup import refuse_running

    where = local.run_dir(directory)
    with hold(where, "raytpu demo"):
        for folder in (where, *clusters):
            refuse_running(local.run_dir(folder))
        yield


def _validate(config: str, report: dict[str, Any]) -> ClusterSpec:
    """The ``validate`` step: the config read (every rule), and each slice described."""
    from raytpu.cli.slice_map import render
    from raytpu.config import load

    started = time.monotonic()
    spec = load(config)
    _step(report, "validate", True, started, slices=len(spec.slices), workloads=len(spec.workloads))
    for item in spec.slices:
        print(f"== slice {item.name!r}\n{render(item.plan)}\n")
    return spec


def _synth(args: argparse.Namespace, report: dict[str, Any]) -> None:
    """The ``synth`` step, in a child process; skipped with ``--no-synth`` or without the CDK layer."""
    if args.no_synth:
        report["steps"].append({"step": "synth", "ok": True, "skipped": "--no-synth"})
    elif not _synth_available():
        report["steps"].append({"step": "synth", "ok": True, "skipped": "raytpu.stacks.app or cdktn not installed"})
        _say("skip synth: raytpu.stacks.app or cdktn is not installed")
    else:
        _say(f"synthesizing the stacks of {args.config} into {args.out}")
        synth_started = time.monotonic()
        synth_proc = _start_synth(args.config, args.out)
        out, err = synth_proc.communicate(timeout=600)
        files = [line.strip() for line in out.splitlines() if line.strip()]
        _step(report, "synth", synth_proc.returncode == 0, synth_started, files=files,
              **({} if synth_proc.returncode == 0 else {"stderr": err[-2000:]}))


def _on_the_slice(args: argparse.Namespace, spec: ClusterSpec, plan: SlicePlan, report: dict[str, Any],
                  recorder: Recorder) -> None:
    """The steps on an emulated slice of ``plan`` (up, smoke, train), then its ``teardown``, always; a failure is the
    report's ``error`` step."""
    from raytpu import local
    early: EarlyTrain | None = None
    try:
        cluster = _slice_up(args, plan, report, recorder)
        if args.preempt:
            _smoke(cluster, spec, plan, report, recorder)
            _train_preempted(cluster, args, report, recorder)
        else:
            early = EarlyTrain(cluster, args.steps)
            _smoke(cluster, spec, plan, report, recorder,
                   on_reserved=early.launch if os.environ.get(OVERLAP_ENV) == "1" else None)
            _train(cluster, report, recorder, early)
    except Exception as exc:  # the report names the failure; teardown below always runs
        report["steps"].append({"step": "error", "ok": False, "error": f"{type(exc).__name__}: {exc}"})
        _say(f"FAIL {type(exc).__name__}: {exc}")
    finally:
        started = time.monotonic()
        local.stop(args.dir)
        if early is not None:
            early.join(30.0)  # a driver started early ends with its cluster
        _step(report, "teardown", True, started)


OVERLAP_ENV = "RAYTPU_DEMO_OVERLAP"
"""``1`` starts the train step's driver once the smoke check holds the slice; default: after the smoke ended (one
loaded pair of bench/demo_overlap.py had the overlap slower, 1.44x: not the default until a quiet run says so)."""


class EarlyTrain:
    """The train step's driver, started as soon as the smoke check holds the slice (its ``reserved`` stamp): the
    driver's start, imports, ``ray.init`` and JaxTrainer's controller overlap the smoke check, and its placement group
    waits until the smoke releases the slice (Ray places a pending group once its bundles are free; the wait is bounded
    by the train workload's ``--start-timeout-s``). Started after the smoke when it never reserved."""

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
        from raytpu import local

        with self._lock:
            if self._thread is not None:
                return
            self.started, self.during_smoke = time.monotonic(), during_smoke
            storage = Path(self.cluster.run_dir) / "checkpoints"
            shutil.rmtree(storage, ignore_errors=True)  # earlier demos' checkpoints (each launch is a new run name)

            def drive() -> None:
                try:
                    self._done = local.run_workload(
                        self.cluster, "train", "--storage-path", str(storage), "--steps", str(self.steps),
                        "--checkpoint-every", str(max(self.steps // 3, 1)), timeout_s=300)
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


def _slice_up(args: argparse.Namespace, plan: SlicePlan, report: dict[str, Any], recorder: Recorder) -> LocalCluster:
    """The ``local slice up`` step: one emulated slice of ``plan`` in the demo's own run directory."""
    from raytpu import local
    from raytpu.core.common import timeline
    from raytpu.local.phases import emulated_phases

    started = time.monotonic()
    synthesized = any(s["step"] == "synth" and not s.get("skipped") for s in report["steps"])
    recorder.mark("applied", f"validated{' and synthesized' if synthesized else ''}; the emulated slice "
                  "starts (where GKE would get the RayJob)", timeline.EMULATED)
    emulated_phases(recorder)  # each host gets the webhook's variables as it is launched
    cluster = local.start(plan, 1, args.dir, progress=_say, owner="raytpu demo")  # clears a dead leftover
    recorder.mark("ray_joined", f"{plan.hosts} Ray node(s) registered with ray.io/tpu-slice-name="
                  f"{cluster.slices[0]} and their ray.io/tpu-worker-id")
    _step(report, "local slice up", True, started, address=cluster.address, slices=cluster.slices,
          hosts=plan.hosts, chips_per_host=plan.chips_per_host)
    return cluster


def _smoke(cluster: LocalCluster, spec: ClusterSpec, plan: SlicePlan, report: dict[str, Any],
           recorder: Recorder, on_reserved: Callable[[], None] | None = None) -> None:
    """The ``smoke`` step: the smoke workload on the slice (across the train workload's DCN span when it fits); its
    verdicts go to ``report["smoke"]``; ``on_reserved`` is called once it holds the slice."""
    from raytpu import local
    from raytpu.core.common import report as smoke_report
    from raytpu.core.common import timeline
    from raytpu.local.from_config import dcn_slices_of

    started = time.monotonic()
    dcn_slices, why = dcn_slices_of(spec, plan, len(cluster.slices))
    if why:
        _say(why)
    def heard(line: str) -> None:
        if on_reserved is not None and any(s["phase"] == "reserved" for s in timeline.parse_stamp_lines(line)):
            on_reserved()

    done = local.run_workload(cluster, "smoke", *smoke_args(dcn_slices), timeout_s=240, on_stdout=heard)
    verdicts = report["smoke"] = smoke_report.parse_verdict_lines(done.stdout)
    recorder.take(s for s in timeline.parse_stamp_lines(done.stdout) if s["phase"] == "reserved")
    recorder.mark("smoke_checked", f"the smoke check's {len(verdicts)} verdict(s) read (exit {done.returncode})")
    why = "; ".join(smoke_report.headline(v) for v in verdicts if smoke_report.state_of(v) != "healthy")
    _step(report, "smoke", done.returncode == 0 and smoke_report.all_healthy(verdicts), started,
          why=why or f"exit {done.returncode}" + ("" if verdicts else ", no verdict"),
          exit_code=done.returncode,
          **({} if verdicts else {"stderr": done.stderr[-2000:]}))


def _train(cluster: LocalCluster, report: dict[str, Any], recorder: Recorder, early: EarlyTrain) -> None:
    """The ``train`` step: a few JaxTrainer steps with checkpoints in the run directory (its driver started during
    the smoke check: :class:`EarlyTrain`); its result goes to ``report["train"]`` and its phases to the timeline."""
    from raytpu.core.common import timeline
    from raytpu.workloads.train import parse_result

    done = early.result()
    started = early.started if early.started is not None else time.monotonic()
    train = report["train"] = parse_result(done.stdout)
    stamps = {s["phase"]: s for s in timeline.parse_stamp_lines(done.stdout)}
    if "trainer_started" in stamps:  # from the smoke check's end: the train job's driver, then JaxTrainer's start
        placed = (f"; its workers placed at {stamps['reserved']['wall'] - recorder.start_wall:.1f}s"
                  if "reserved" in stamps else "")
        driver = ("the train job's driver (started while the smoke check held the slice), " if early.during_smoke
                  else "the train job's driver, ")
        stamps["trainer_started"]["detail"] = driver + stamps["trainer_started"]["detail"] + placed
    recorder.take(stamps[phase] for phase in ("trainer_started", "compiled", "first_step") if phase in stamps)
    ok = done.returncode == 0 and bool(train and train.get("ok"))
    _step(report, "train", ok, started, why=str((train or {}).get("error") or f"exit {done.returncode}"),
          exit_code=done.returncode,
          **({} if train else {"stderr": done.stderr[-2000:]}))


def _train_preempted(cluster: LocalCluster, args: argparse.Namespace, report: dict[str, Any],
                     recorder: Recorder) -> None:
    """The ``train`` step with a host preempted mid-run (:func:`raytpu.local.drill.drill`): the run's result goes to
    ``report["train"]``, what the preemption cost to ``report["preemption"]``. It passes when the run finished on a
    whole slice and, with a notice, resumed from the checkpoint written at it with at most one step lost."""
    from raytpu.core.common import timeline
    from raytpu.core.specs import compile_cache
    from raytpu.local.drill import drill

    started = time.monotonic()
    steps = max(args.steps, 20)  # a periodic checkpoint, then the preemption halfway, then steps after the resume
    done = drill(cluster, args.notice_s, Path(cluster.run_dir) / "checkpoints", steps=steps,
                 every=max(steps // 3, 1), progress=_say)
    train = report["train"] = done["train"]
    cut = report["preemption"] = done["preemption"]
    stamps = [s for s in timeline.parse_stamp_lines(done["stdout"])
              if s["phase"] in ("trainer_started", "compiled", "first_step")]
    recorder.take(stamps)
    compiled = compile_cache.first_and_resumed(train.get("compile_attempts") or [])
    if compiled is not None:  # the resumed start's compile beside the first one's: what the cache saved
        cut["compile"] = compiled
    ok = done["exit_code"] == 0 and bool(train.get("ok")) and cut["resumed_on_whole_slice"] and (
        not args.notice_s or (cut["checkpoint_at_notice"] and (cut["steps_lost"] or 0) <= 1))
    _step(report, "train (preempted)", ok, started, why=str(train.get("error") or f"steps lost {cut['steps_lost']}, "
          f"checkpoint at notice {cut['checkpoint_at_notice']}"), exit_code=done["exit_code"])


def _write_report(report: dict[str, Any], path: Path, memory: PeakMemory, t0: float) -> int:
    """Completes the report (memory, duration, ok), writes it (the smoke verdicts as ``smoke.json`` and
    ``smoke.junit.xml`` beside it), prints it; 0 when every step passed."""
    from raytpu.core.common import report as smoke_report
    verdicts = report["smoke"]
    report["peak_memory_mib"] = round(memory.peak_pss_bytes / 2**20)
    report["peak_memory_rss_sum_mib"] = round(memory.peak_rss_bytes / 2**20)
    report["duration_s"] = round(time.monotonic() - t0, 1)
    report["ok"] = all(s["ok"] for s in report["steps"])
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(report, indent=2, sort_keys=True) + "\n")
    if verdicts:
        smoke_report.write_reports(verdicts, path.parent)  # smoke.json + smoke.junit.xml beside it
    print(render_report(report, smoke_report.render_table(verdicts) if verdicts else "no smoke verdict"))
    print(f"\nreport written to {path}")
    return 0 if report["ok"] else 1


def render_report(report: dict[str, Any], smoke_table: str) -> str:
    """The demo's summary: steps, smoke table, training figures."""
    lines = ["== demo steps"]
    for s in report["steps"]:
        mark = "✓" if s["ok"] else "✗"
        extra = f"skipped: {s['skipped']}" if s.get("skipped") else s.get("error", "").strip()
        if "\n" in extra:  # a start failure carries a log tail: show its first and last line here
            lines_of = extra.splitlines()
            extra = f"{lines_of[0]} ... {lines_of[-1]}"
        lines.append(f"  {mark} {s['step']:<15} {s.get('duration_s', 0):>6.1f}s  {extra}".rstrip())
    lines += ["", "== smoke", smoke_table, "", "== train (JaxTrainer, one worker per host)"]
    train = report.get("train")
    if train:
        lines += [f"  steps             {train.get('steps_done')}/{train.get('steps')} ({train.get('steps_run')} run "
                  f"now) on {train.get('workers')} workers, {train.get('devices')} devices, global batch "
                  f"{train.get('global_batch')}",
                  f"  loss              {_num(train.get('first_loss'))} -> {_num(train.get('final_loss'))}",
                  f"  compile time      {_num(train.get('compile_time_s'), 's')} (once, before the first step; "
                  f"{train.get('compiles_during_steps', '-')} compilations while stepping; "
                  f"{(train.get('compile') or {}).get('hits', '-')} cache hit(s))",
                  f"  step time         {_num(train.get('step_time_s'), 's')} (median, compilation excluded)",
                  f"  throughput        {_num(train.get('samples_per_s'))} samples/s",
                  f"  checkpoint        {train.get('checkpoint')}"]
        if train.get("error"):
            lines.append(f"  error             {train['error']}")
    else:
        lines.append("  no training result")
    if report.get("timeline"):
        from raytpu.core.common import timeline
        lines += ["", "== " + timeline.render(report["timeline"])]
    cut = report.get("preemption")
    if cut:
        from raytpu.core.common import timeline
        notice = f"notice {cut['notice_s']:g}s" if cut["notice_s"] else "no notice: a host crash"
        lines += ["", f"== preemption of {cut['host']} ({notice})",
                  f"  resumed from      {cut['resumed_from']}",
                  f"  steps lost        {cut['steps_lost']} (last step before the kill {cut['last_step_before_kill']})",
                  f"  resumed after     {_num(cut['resumed_after_s'], 's')} (to the first step after the restart)",
                  f"  whole slice       {cut['resumed_on_whole_slice']}",
                  *_compile_lines(cut.get("compile")),
                  "", "== " + timeline.render(cut["timeline"], "the preemption")]
    lines += ["", f"wall time {report['duration_s']:.1f}s, peak memory {report['peak_memory_mib']} MiB "
              f"(PSS of every process; RSS sum {report['peak_memory_rss_sum_mib']} MiB), "
              f"{'PASSED' if report['ok'] else 'FAILED'}"]
    return "\n".join(lines)


def _compile_lines(compiled: dict[str, Any] | None) -> list[str]:
    if not compiled:
        return []
    return [f"  compile           {compiled['first_s']:.2f}s first start, {compiled['resumed_s']:.2f}s resumed "
            f"({compiled['resumed_hits']} cache hit(s), {compiled['resumed_misses']} miss(es))"]


def _num(value: Any, unit: str = "") -> str:
    return "-" if value is None else f"{value:.4g}{unit}"


def serve_demo(args: argparse.Namespace) -> int:
    """``make serve``: the config's serving workload on its own emulated slice, asked, torn down; 0 on success.

    Its timeline (:mod:`raytpu.core.common.timeline`) runs up to the first token: ``first_step`` is stamped when the
    official ``openai`` client gets the first streamed content of the first question
    (:mod:`raytpu.local.llm_client`)."""
    from raytpu import local
    from raytpu.config import load
    from raytpu.core.common import timeline
    from raytpu.core.common.errors import InvalidInput

    t0 = time.monotonic()
    recorder = timeline.Recorder.for_command()
    serving = [w for w in load(args.config).workloads if w.kind.serves]
    if not serving:
        raise InvalidInput("config", f"{args.config} has no serving workload", "a config with a `kind: serve` "
                           "workload, e.g. raytpu.example.yaml")
    directory = f"{args.dir}-serve"
    os.environ[local.ENV_TMP_PREFIX] = f"{local.TMP_PREFIX}s{os.getpid()}-"
    report: dict[str, Any] = {"config": args.config, "serve": serving[0].name, "ok": False, "answers": []}
    with claim(directory), local.PeakMemory(tag_prefix=os.environ[local.ENV_TMP_PREFIX]) as memory:
        try:
            _serve_and_ask(args.config, serving[0], directory, report, recorder)
        except Exception as exc:  # one line names the failure; teardown below always runs
            report["error"] = f"{type(exc).__name__}: {exc}"
            _say(f"FAIL {type(exc).__name__}: {exc}")
        finally:
            local.stop(directory)
    report["timeline"] = recorder.finish("torn down")
    return _write_serve_report(report, Path(args.report if args.report is not None else DEFAULT_SERVE_REPORT),
                               memory, t0)


def _serve_and_ask(config: str, work: WorkloadSpec, directory: str, report: dict[str, Any],
                   recorder: Recorder) -> None:
    """An emulated slice of ``work``'s slice in ``directory``, ``work`` deployed on it and asked a few questions
    with the openai client: the endpoint, model, answers and ``ok`` go to ``report``, the phases to ``recorder``."""
    from raytpu import local
    from raytpu.core.common import timeline
    from raytpu.local.deploy import deploy_serve
    from raytpu.local.from_config import serving_workload
    from raytpu.local.llm_client import ask
    from raytpu.local.phases import emulated_phases

    recorder.mark("applied", "validated; the emulated slice starts (where GKE would get the RayService)",
                  timeline.EMULATED)
    emulated_phases(recorder)  # each host gets the webhook's variables as it is launched
    plan = work.plan
    cluster = local.start(plan, 1, directory, progress=_say, owner="raytpu demo --serve")
    recorder.mark("ray_joined", f"{plan.hosts} Ray node(s) registered with ray.io/tpu-slice-name="
                  f"{cluster.slices[0]} and their ray.io/tpu-worker-id")
    url, model = deploy_serve(cluster, serving_workload(cluster, config, work.name), 420.0, recorder=recorder)
    deployed_s = recorder.elapsed()
    print(f"endpoint: {url}\nmodel: {model}", flush=True)
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


def _write_serve_report(report: dict[str, Any], path: Path, memory: PeakMemory, t0: float) -> int:
    """Completes the serving report (memory, duration), writes it, prints its timeline; 0 when it passed."""
    from raytpu.core.common import timeline
    report["peak_memory_mib"] = round(memory.peak_pss_bytes / 2**20)
    report["peak_memory_rss_sum_mib"] = round(memory.peak_rss_bytes / 2**20)
    report["duration_s"] = round(time.monotonic() - t0, 1)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(report, indent=2, sort_keys=True) + "\n")
    print("\n== " + timeline.render(report["timeline"]))
    print(f"\npeak memory {memory.peak_pss_bytes / 2**30:.2f} GiB PSS of every process (RSS sum "
          f"{memory.peak_rss_bytes / 2**30:.2f} GiB), wall time {time.monotonic() - t0:.0f}s, torn down, "
          f"{'PASSED' if report['ok'] else 'FAILED'}")
    print(f"report written to {path}")
    return 0 if report["ok"] else 1
