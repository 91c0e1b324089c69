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
import sys
from pathlib import Path
from typing import Any

HELP = "run the example end to end locally: validate, describe, synth, emulated slice, smoke, train, report"

DEFAULT_REPORT = "reports/demo.json"
DEFAULT_SERVE_REPORT = "reports/demo-serve.json"
MAX_STEPS = 100_000
DEFAULT_NOTICE_S = 10.0
DEFAULT_SERVE_PYTHON = ".venv-serve/bin/python"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Adds ``--config``, ``--report``, ``--steps``, ``--out``, ``--no-synth``."""
    from raytpu.console import argtypes
    from raytpu.console.cli_args import LOCAL_DEFAULT

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


def smoke_args(dcn_slices: int | None) -> tuple[str, ...]:
    """The smoke program's flags in the demo (:func:`raytpu.local.demos.demo.smoke_args`)."""
    from raytpu.local.demos.demo import smoke_args as flags

    return flags(dcn_slices)


def check_args(args: argparse.Namespace) -> None:
    """The flags a demo only uses after minutes of work (training steps, the report at the end), and flags that
    cannot go together: refused first."""
    from raytpu.console.cli_args import refuse_combinations
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
    from raytpu.console import machine
    from raytpu.local.demos.data_demo import DEFAULT_REPORT as DEFAULT_DATA_REPORT

    default = DEFAULT_SERVE_REPORT if args.serve else DEFAULT_DATA_REPORT if args.data else DEFAULT_REPORT
    errors.raise_found(machine.output_file_problems("--report", args.report or default))
    # synth's node runtime, Ray's and vLLM's caches write in them; vLLM and Hugging Face keep theirs under
    # XDG_CACHE_HOME when it is set (VLLM_CACHE_ROOT, HF_HOME), and the tiny model's under HOME
    machine.check_environment("TMPDIR", "HOME", *(("XDG_CACHE_HOME",) if args.serve or args.data else ()))
    if not args.no_synth and not args.serve and not args.data:
        from raytpu.stacks.synth_out import check

        check(args.out)  # the synth step's folder: refused now, not as a failed step minutes later


def run(args: argparse.Namespace) -> int:
    """Runs the demo (:mod:`raytpu.local.demos.demo`); returns 0 when every step passed."""
    from raytpu.config import choose
    from raytpu.local.demos import demo

    check_args(args)
    args.config = choose(args.config, local=True)
    if args.serve:
        return serve_demo(args)
    if args.data:
        from raytpu.local.demos import data_demo

        where = f"{args.dir}-data"
        with demo.claim(where, *(Path(where) / part / "cluster" for part in ("batch", "train"))):
            return data_demo.run_demo(args.report or data_demo.DEFAULT_REPORT, where, args.serve_python)
    options = demo.DemoOptions(config=args.config, report=args.report or DEFAULT_REPORT, steps=args.steps,
                               out=args.out, no_synth=args.no_synth, dir=args.dir, preempt=args.preempt,
                               notice_s=args.notice_s)
    report, _memory = demo.run_demo(options, _say, _show, described=_describe)
    path = Path(options.report)
    demo.write_report(report, path)
    from raytpu.core.common import report as smoke_report

    verdicts = report["smoke"]
    print(render_report(report, smoke_report.render_table(verdicts) if verdicts else "no smoke verdict"))
    print(f"\nreport written to {path}")
    return 0 if report["ok"] else 1


def _show(text: str) -> None:
    print(text, flush=True)


def _describe(spec: Any) -> None:
    """Each slice of the validated config as a map (:func:`raytpu.console.slice_map.render`)."""
    from raytpu.console.slice_map import render

    for item in spec.slices:
        print(f"== slice {item.name!r}\n{render(item.plan)}\n")


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
                  *_per_process_compile(train.get("compile") or {}),
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


def _per_process_compile(compile: dict[str, Any]) -> list[str]:
    """Each host's compile and cache hits where the start ran on more than one (the first step waits for the last)."""
    processes = compile.get("processes") or []
    if len(processes) < 2:
        return []
    each = ", ".join(f"{p['s']:.2f}s/{p['hits']}" for p in processes)
    return [f"  compile per host  {each} (seconds/cache hits, by JAX process; JAX writes the cache from process 0)"]


def _compile_lines(compiled: dict[str, Any] | None) -> list[str]:
    if not compiled:
        return []
    return [f"  compile           {compiled['first_s']:.2f}s first start, {compiled['resumed_s']:.2f}s resumed "
            f"({compiled['resumed_hits']} cache hit(s), {compiled['resumed_misses']} miss(es))"]


def _num(value: Any, unit: str = "") -> str:
    return "-" if value is None else f"{value:.4g}{unit}"


def serve_demo(args: argparse.Namespace) -> int:
    """``make serve`` (:func:`raytpu.local.demos.demo.serve_demo`): prints the timeline up to the first token; 0 when it
    passed."""
    import json

    from raytpu.core.common import timeline
    from raytpu.local.demos import demo

    report, memory = demo.serve_demo(args.config, args.dir, _say, _show)
    path = Path(args.report if args.report is not None else DEFAULT_SERVE_REPORT)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(report, indent=2, sort_keys=True) + "\n")
    print("\n== " + timeline.render(report["timeline"]))
    print(f"\npeak memory {memory.peak_pss_bytes / 2**30:.2f} GiB PSS of every process (RSS sum "
          f"{memory.peak_rss_bytes / 2**30:.2f} GiB), wall time {report['duration_s']:.0f}s, torn down, "
          f"{'PASSED' if report['ok'] else 'FAILED'}")
    print(f"report written to {path}")
    return 0 if report["ok"] else 1
