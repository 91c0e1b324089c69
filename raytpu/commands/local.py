"""``raytpu local up|status|down|smoke|serve``: an emulated TPU slice on this machine (real Ray, JAX on CPU).

``up`` starts a Ray head plus one Ray node per emulated TPU host, with the resources, labels and
``TPU_*`` environment a GKE TPU slice has (see :mod:`raytpu.local`); by default the train slice of the config
(``--config``, else ``raytpu.yaml``, else ``raytpu.example.yaml``: :func:`raytpu.config.choose`). State lives in
``$RAYTPU_LOCAL_DIR`` (default ``.raytpu/local``), so later ``status``, ``smoke``, ``serve`` and ``down`` find
it. Progress goes to stderr.

``serve`` deploys the config's serving workload (its model fields and engine args; the model itself is the
tiny offline one) as the CPU twin of its Ray Serve LLM app onto the running slice (:mod:`raytpu.local.running.deploy`),
prints ``endpoint:`` and ``model:`` and leaves it serving until ``down``; it needs vLLM's CPU build
(``.venv-serve``, ``make serve``). What a config becomes there: :mod:`raytpu.local.slice.from_config`.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from raytpu.core.tpu.plan import SlicePlan
    from raytpu.local.slice.state import LocalCluster

HELP = "run an emulated TPU slice locally: up, status, down, smoke, serve, preempt"

DIR_HELP = "run directory (default: $RAYTPU_LOCAL_DIR or .raytpu/local)"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Adds the ``up``, ``status``, ``down`` and ``smoke`` actions."""
    from raytpu.console import argtypes
    from raytpu.console.cli_args import LOCAL_DEFAULT, add_api_key_file

    parser.add_argument("--dir", default=None, type=argtypes.path, help=DIR_HELP)
    actions = parser.add_subparsers(dest="action", metavar="ACTION")
    actions.required = True
    up = actions.add_parser("up", help="start the emulated slice(s)")
    up.add_argument("--config", default=None, type=argtypes.path,
                    help=f"take the slice from this config (default, when no --generation: {LOCAL_DEFAULT})")
    up.add_argument("--slice", dest="slice_name", default=None,
                    help="config slice to emulate (default: the train workload's slice, else the first)")
    up.add_argument("--generation", default=None, help="emulate this generation instead of a config slice (or an "
                    "accelerator type such as v6e-16 or v5p-8, without --topology)")
    up.add_argument("--topology", default=None, help="with --generation")
    up.add_argument("--machine-type", default=None, help="with --generation")
    up.add_argument("--slices", type=argtypes.positive_int, default=1, help="how many such slices (default 1)")
    up.add_argument("--timeout-s", type=argtypes.positive_seconds, default=None,
                    help="bound on the start (default: 60 s plus 60 s per node)")
    status = actions.add_parser("status", help="show each node: slice, host, node id, resources, alive")
    status.add_argument("--json", action="store_true")
    down = actions.add_parser("down", help="stop every process of the local cluster (by PID) and clean up")
    smoke = actions.add_parser("smoke", help="run the smoke workload on the local cluster")
    smoke.add_argument("--json", action="store_true", help="print the verdicts as JSON instead of a table")
    smoke.add_argument("--report", default=None, type=argtypes.path, metavar="DIR",
                       help="also write smoke.json, smoke.junit.xml and report.html (the page on-call reads)")
    smoke.add_argument("--timeout-s", type=argtypes.positive_seconds, default=300.0,
                       help="bound on the smoke run (default 300)")
    smoke.add_argument("--dcn-slices", type=argtypes.positive_int, default=None, metavar="N",
                       help="also all-reduce across N slices over DCN, as a multi-slice run (workloads[].slices: N) "
                            "spans them (default: N of the config's multi-slice train workload, when the local "
                            "cluster has N slices)")
    smoke.add_argument("--config", default=None, type=argtypes.path,
                       help=f"the config whose multi-slice train workload sets the default --dcn-slices (default: "
                            f"{LOCAL_DEFAULT}, if present)")
    serve = actions.add_parser("serve", help="deploy the serving workload (vLLM's CPU build) onto the local slice "
                               "and print its OpenAI endpoint; it serves until `down`")
    serve.add_argument("--config", default=None, type=argtypes.path,
                       help=f"take the serving workload from this config (default: {LOCAL_DEFAULT}, if present)")
    serve.add_argument("--workload", default=None, help="the config's serving workload (default: the first)")
    serve.add_argument("--ask", action="store_true", help="then ask a few questions with the openai client")
    serve.add_argument("--timeout-s", type=argtypes.positive_seconds, default=420.0,
                       help="bound on the deploy (default 420)")
    add_api_key_file(serve)
    preempt = actions.add_parser("preempt", help="preempt one emulated host as GKE does: its node drains for a "
                                 "preemption (as on SIGTERM), it is killed after the notice, a replacement starts")
    preempt.add_argument("--host", type=argtypes.worker_index, default=None, metavar="N",
                         help="the host's TPU_WORKER_ID (default: the slice's last host)")
    preempt.add_argument("--slice", dest="slice_name", default=None, help="its slice (default: the first)")
    preempt.add_argument("--notice-s", type=argtypes.notice_seconds, default=10.0, metavar="S",
                         help="seconds from the notice to the kill (default 10; 0: no notice, a host crash)")
    preempt.add_argument("--no-replace", action="store_true", help="leave the host gone (no capacity back)")
    for action in (up, status, down, smoke, serve, preempt):  # `local status --dir X` as well as `local --dir X status`
        action.add_argument("--dir", default=argparse.SUPPRESS, type=argtypes.path, help=DIR_HELP)


def _progress(line: str) -> None:
    sys.stderr.write(f"raytpu local: {line}\n")
    sys.stderr.flush()


def plan_from_args(args: argparse.Namespace) -> SlicePlan:
    """The SlicePlan to emulate (:func:`raytpu.local.slice.chosen_plan.emulated_plan`)."""
    from raytpu.local.slice.chosen_plan import emulated_plan

    return emulated_plan(args.generation, args.topology, args.machine_type, args.config, args.slice_name)


def _cluster(args: argparse.Namespace) -> LocalCluster:
    """The recorded cluster (a command checks its arguments against it, then :func:`_alive`)."""
    from raytpu.core.common.errors import RuntimeFailure
    from raytpu.local.slice import state

    cluster = state.LocalCluster.load(state.run_dir(args.dir))
    if cluster is None:
        raise RuntimeFailure(f"local: no local cluster recorded in {state.run_dir(args.dir)}; "
                             "start one with `raytpu local up`")
    return cluster


def _alive(cluster: LocalCluster) -> LocalCluster:
    """``cluster`` with its head checked: exit 1 with what to run when it is gone, never a hang."""
    from raytpu.local.slice.connection import check_head

    check_head(cluster)
    return cluster


def run(args: argparse.Namespace) -> int:
    """Dispatches the action."""
    return int({"up": _up, "status": _status, "down": _down, "smoke": _smoke, "serve": _serve,
                "preempt": _preempt}[args.action](args))


def _up(args: argparse.Namespace) -> int:
    from raytpu.console.cli_args import refuse_combinations
    from raytpu.core.common.errors import raise_found
    from raytpu.local.slice import state
    from raytpu.local.slice.chosen_plan import start_timeout_problems
    from raytpu.local.slice.run_lock import hold
    from raytpu.local.slice.startup import announce_started, start

    generation = ("--generation", args.generation is not None)
    refuse_combinations(together=[(("--config", args.config is not None), generation),
                                  (("--slice", args.slice_name is not None), generation)],
                        without=[(("--machine-type", args.machine_type is not None), generation)])
    raise_found(start_timeout_problems(args.timeout_s))  # before anything starts
    plan = plan_from_args(args)
    with hold(state.run_dir(args.dir), "raytpu local up"):
        cluster = start(plan, args.slices, args.dir, progress=_progress, timeout_s=args.timeout_s,
                        owner="raytpu local up")
        announce_started(cluster, plan, lambda text: print(text, flush=True))
    return 0


def _status(args: argparse.Namespace) -> int:
    from raytpu.local.slice.status_table import healthy, render_status, status, status_document, status_header

    cluster = _alive(_cluster(args))
    rows = status(cluster)
    print(json.dumps(status_document(cluster, rows), indent=2) if args.json else
          f"{status_header(cluster)}\n{render_status(rows)}")
    return 0 if healthy(rows) else 1  # a host replaced since (a preempt) is no fault


def _down(args: argparse.Namespace) -> int:
    """Ends the command holding the run directory first (a drill), then stops the cluster: nothing left running."""
    from raytpu.local.slice import procs, state
    from raytpu.local.slice.run_lock import hold

    where = state.run_dir(args.dir)
    if not where.is_dir():
        _progress(f"nothing to stop ({where} does not exist)")
        return 0
    with hold(where, "raytpu local down", take_over=True, progress=_progress):
        count = procs.stop(where)
    _progress(f"stopped ({count} process group(s) and leftover process(es) signalled)" if count
              else "nothing to stop")
    return 0


def _smoke(args: argparse.Namespace) -> int:
    """Checks the flags against the recorded cluster, runs :func:`raytpu.local.running.smoke_run.run_smoke`, prints the
    verdicts and the timeline, writes ``--report``."""
    from raytpu.console import report_html
    from raytpu.console.cli_args import refuse_combinations
    from raytpu.core.common import errors, report, timeline
    from raytpu.local.running.smoke_run import dcn_problems, run_smoke
    from raytpu.local.slice.from_config import dcn_slices_of, optional_config

    dcn_slices = ("--dcn-slices", args.dcn_slices is not None)
    refuse_combinations(together=[(("--config", args.config is not None), dcn_slices)])
    if args.report:  # written after the run: refused before it
        from raytpu.console import machine

        errors.raise_found(machine.output_folder_problems("--report", args.report))
    recorder = timeline.Recorder.for_command()
    cluster = _cluster(args)
    errors.raise_found(dcn_problems(args.dcn_slices, len(cluster.slices)))
    _alive(cluster)  # the head, once the arguments are known good
    if args.dcn_slices is None:  # the explicit flag wins
        args.dcn_slices, why = dcn_slices_of(optional_config(args.config), cluster.slice_plan, len(cluster.slices))
        if why:
            _progress(why)
    done = run_smoke(cluster, args.dcn_slices, args.timeout_s, recorder, _progress)
    runs = {"smoke": done.timeline}
    if not done.verdicts:
        sys.stderr.write(f"error: local.smoke: the smoke workload printed no verdict (exit {done.returncode}):\n"
                         f"{done.stderr}\n")
        sys.stderr.write(timeline.render(done.timeline) + "\n")
        return 1
    if args.report:
        json_path, junit_path = report.write_reports(done.verdicts, args.report, timelines=runs)
        _progress(f"wrote {json_path}, {junit_path} and {report_html.write_beside(json_path)}")
    if args.json:
        print(json.dumps({"format": report.FORMAT, "healthy": report.all_healthy(done.verdicts),
                          "slices": done.verdicts, "timeline": done.timeline}, indent=2, sort_keys=True))
        sys.stderr.write(timeline.render(done.timeline) + "\n")
    else:
        print(report.render_table(done.verdicts))
        print()
        print(timeline.render(done.timeline))
    return 0 if report.all_healthy(done.verdicts) and done.returncode == 0 else 1


def _serve(args: argparse.Namespace) -> int:
    """``raytpu submit NAME --local``'s serving deploy (:meth:`raytpu.local.running.side.LocalSide.serve`), kept under
    its first name; without a config, the kit's own serving workload."""
    from raytpu.console import machine
    from raytpu.console.followed_run import streams
    from raytpu.local.running.side import LocalSide
    from raytpu.local.slice.from_config import config_serving_workload, serving_on_slice

    chosen = config_serving_workload(args.config, args.workload)  # a wrong --workload is said before the cluster
    code = None if chosen is None else chosen.team_code()
    side = LocalSide(args.dir, check_environment=machine.check_environment, cluster=_cluster(args))
    work = side.default_serving() if chosen is None else serving_on_slice(side.cluster(), chosen.work)
    said = side.deploy(work, timeout_s=args.timeout_s, api_key_file=args.api_key_file, code=code,
                       streams=streams(None))
    if args.ask and "model" in said:
        from raytpu.local.running.llm_client import ask

        ask(said["endpoint"], said["model"])
    return 0


def _preempt(args: argparse.Namespace) -> int:
    from raytpu.local.slice import state
    from raytpu.local.slice.preempt import preempt, running_cluster, target
    from raytpu.local.slice.run_lock import hold

    where = state.run_dir(args.dir)
    with hold(where, "raytpu local preempt"):  # a second drill is refused first, whatever the cluster's state
        cluster = running_cluster(where)
        node = target(cluster, args.host, args.slice_name)
        record = preempt(cluster, node, args.notice_s, replace=not args.no_replace, progress=_progress)
    print(json.dumps(record.to_json(), indent=2, sort_keys=True))
    return 0
