"""``raytpu local up|status|down|smoke|serve``: an emulated TPU slice on this machine (real Ray, JAX on CPU).

``up`` starts a Ray head plus one Ray node per emulated TPU host, with the resources, labels and
``TPU_*`` environment a GKE TPU slice has (see :mod:`raytpu.local`); by default the train slice of the config
(``--config``, else ``raytpu.yaml``, else ``raytpu.example.yaml``: :func:`raytpu.config.choose`). State lives in
``$RAYTPU_LOCAL_DIR`` (default ``.raytpu/local``), so later ``status``, ``smoke``, ``serve`` and ``down`` find
it. Progress goes to stderr.

``serve`` deploys the config's serving workload (its model fields and engine args; the model itself is the
tiny offline one) as the CPU twin of its Ray Serve LLM app onto the running slice, prints ``endpoint:`` and
``model:`` and leaves it serving until ``down``; it needs vLLM's CPU build (``.venv-serve``, ``make serve``).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any

HELP = "run an emulated TPU slice locally: up, status, down, smoke, serve"

LOCAL_DEFAULT = "$RAYTPU_CONFIG, else raytpu.yaml, else raytpu.example.yaml"
"""The local commands' default config, as help says it (:func:`raytpu.config.choose` with ``local``)."""
MAX_START_S = 24 * 3600.0
"""The longest ``up --timeout-s``: a start that needs a day is not a start."""

DIR_HELP = "run directory (default: $RAYTPU_LOCAL_DIR or .raytpu/local)"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Adds the ``up``, ``status``, ``down`` and ``smoke`` actions."""
    from raytpu import argtypes

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
                       help="also write smoke.json and smoke.junit.xml")
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
    serve.add_argument("--api-key-file", default=None, type=argtypes.path,
                       help="require the API key in this file (Authorization: Bearer <key>) on every request, as "
                            "security.serve_api_key_secret does on GKE")
    for action in (up, status, down, smoke, serve):  # `local status --dir X` as well as `local --dir X status`
        action.add_argument("--dir", default=argparse.SUPPRESS, type=argtypes.path, help=DIR_HELP)


def _echo(line: str) -> None:
    sys.stderr.write(f"{line}\n")


def _progress(line: str) -> None:
    sys.stderr.write(f"raytpu local: {line}\n")
    sys.stderr.flush()


def plan_from_args(args: argparse.Namespace) -> Any:
    """The SlicePlan to emulate: ``--generation/--topology``, else a slice of the config."""
    from raytpu import errors
    from raytpu.catalog import from_accelerator_type
    from raytpu.config import choose, load
    from raytpu.plan import plan_slice

    named = from_accelerator_type(args.generation, "--generation") if args.generation and not args.topology else None
    if named is not None:  # --generation v6e-16: an accelerator type names both
        return plan_slice(*named, args.machine_type)
    if args.generation or args.topology:
        if not (args.generation and args.topology):
            raise errors.missing("topology" if args.generation else "generation", "with the other",
                                 "both --generation and --topology, or neither (use the config's slice)")
        return plan_slice(args.generation, args.topology, args.machine_type)
    path = choose(args.config, local=True)
    if not Path(path).exists():
        raise errors.invalid_value("config", path, "does not exist",
                                   "a raytpu.yaml path, or --generation and --topology")
    return config_slice_plan(load(path), args.slice_name)


def config_slice_plan(spec: Any, slice_name: str | None = None) -> Any:
    """The plan of ``slice_name``, else of the train workload's slice, else of the first slice."""
    if slice_name is None:
        trains = [w.slice for w in spec.workloads if w.kind.trains]
        return (trains[0] if trains else spec.slices[0]).plan
    return spec.slice_named(slice_name, "--slice").plan


def dcn_slices_of(spec: Any, plan: Any, available: int) -> tuple[int | None, str | None]:
    """The ``--dcn-slices`` a smoke check passes by itself on a local cluster of ``available`` slices of ``plan``, and
    the line that says so: N when a train workload of ``spec`` on a slice of that plan spans N > 1 slices and the
    cluster has N, else None with why the DCN check is skipped; (None, None) without such a workload."""
    from raytpu import multislice

    span, name = multislice.widest(w for w in (spec.workloads if spec is not None else ()) if w.plan == plan)
    if name is None:
        return None, None
    if available >= span:
        return span, (f"train workload {name} spans {span} slices over DCN: the smoke check also all-reduces across "
                      f"{span} of the local cluster's {available} slices (--dcn-slices {span})")
    return None, (f"DCN check skipped: train workload {name} spans {span} slices and the local cluster has "
                  f"{available} (`raytpu local up --slices {span}` for it)")


def _smoke_config(path: str | None) -> Any:
    """The config ``raytpu local smoke`` reads its default ``--dcn-slices`` from: ``--config``, else the local
    commands' default (:func:`raytpu.config.choose`) when present, else None."""
    from raytpu.config import choose, load

    path = choose(path, local=True)
    return load(path) if Path(path).exists() else None


def _cluster(args: argparse.Namespace) -> Any:
    from raytpu import local
    from raytpu.errors import RuntimeFailure

    cluster = local.LocalCluster.load(local.run_dir(args.dir))
    if cluster is None:
        raise RuntimeFailure(f"local: no local cluster recorded in {local.run_dir(args.dir)}; "
                             "start one with `raytpu local up`")
    return cluster


def run(args: argparse.Namespace) -> int:
    """Dispatches the action."""
    return int({"up": _up, "status": _status, "down": _down, "smoke": _smoke, "serve": _serve}[args.action](args))


def _up(args: argparse.Namespace) -> int:
    from raytpu import local
    from raytpu.errors import invalid_value

    if args.timeout_s is not None and not 0 < args.timeout_s <= MAX_START_S:  # nan too: before anything starts
        raise invalid_value("--timeout-s", args.timeout_s, "is not a bound on the start",
                            f"seconds in (0, {MAX_START_S:g}], or no --timeout-s (60 s plus 60 s per node)")
    plan = plan_from_args(args)
    cluster = local.start(plan, args.slices, args.dir, progress=_progress, timeout_s=args.timeout_s)
    print(f"RAY_ADDRESS={cluster.address}")
    print(f"slices: {', '.join(cluster.slices)} ({plan.generation} {plan.topology}, {plan.hosts} host(s) "
          f"x {plan.chips_per_host} chips)")
    print("next: raytpu local status | raytpu local smoke | raytpu local down")
    return 0


def _status(args: argparse.Namespace) -> int:
    from dataclasses import asdict

    from raytpu import local

    cluster = _cluster(args)
    rows = local.status(cluster)
    if args.json:
        print(json.dumps({"address": cluster.address, "slices": cluster.slices, "plan": cluster.plan,
                          "nodes": [asdict(r) for r in rows]}, indent=2))
    else:
        plan = cluster.slice_plan
        print(f"{cluster.address}  {plan.generation} {plan.topology} x {len(cluster.slices)} slice(s)  "
              f"run dir {cluster.run_dir}")
        print(local.render_status(rows))
    return 0 if all(r.alive for r in rows) else 1


def _down(args: argparse.Namespace) -> int:
    from raytpu import local

    count = local.stop(args.dir)
    _progress(f"stopped ({count} process group(s) and leftover process(es) signalled)" if count
              else "nothing to stop")
    return 0


def _smoke(args: argparse.Namespace) -> int:
    from raytpu import local, report, timeline

    recorder = timeline.Recorder.for_command()
    cluster = _cluster(args)
    plan = cluster.slice_plan
    if args.dcn_slices is not None and not 1 <= args.dcn_slices <= len(cluster.slices):
        from raytpu.errors import invalid_value

        raise invalid_value("--dcn-slices", args.dcn_slices, "is more slices than this local cluster has"
                            if args.dcn_slices > 1 else "is not a number of slices",
                            f"1..{len(cluster.slices)} (`raytpu local up --slices N` for more)")
    if args.dcn_slices is None:  # the explicit flag wins
        args.dcn_slices, why = dcn_slices_of(_smoke_config(args.config), plan, len(cluster.slices))
        if why:
            _progress(why)
    _progress(f"smoke check of {len(cluster.slices)} {plan.ray_pod_type} slice(s) at {cluster.address}")
    emulated_phases(recorder, cluster.hosts_recorded_wall())
    recorder.mark("applied", "the smoke driver started on the emulated slice, as a RayJob's submitter starts it",
                  timeline.EMULATED)
    extra = ("--dcn-slices", str(args.dcn_slices)) if args.dcn_slices else ()
    done = local.run_workload(cluster, "smoke", *extra, timeout_s=args.timeout_s)
    recorder.take(timeline.parse_stamp_lines(done.stdout))
    verdicts = report.parse_verdict_lines(done.stdout)
    runs = {"smoke": recorder.finish("verdicts read" if verdicts else "the driver ended with no verdict")}
    if not verdicts:
        tail = "\n".join(done.stderr.strip().splitlines()[-20:])
        sys.stderr.write(f"error: local.smoke: the smoke workload printed no verdict (exit {done.returncode}):\n"
                         f"{tail}\n")
        sys.stderr.write(timeline.render(runs["smoke"]) + "\n")
        return 1
    if args.report:
        json_path, junit_path = report.write_reports(verdicts, args.report, timelines=runs)
        _progress(f"wrote {json_path} and {junit_path}")
    if args.json:
        print(json.dumps({"healthy": report.all_healthy(verdicts), "slices": verdicts, "timeline": runs["smoke"]},
                         indent=2, sort_keys=True))
        sys.stderr.write(timeline.render(runs["smoke"]) + "\n")
    else:
        print(report.render_table(verdicts))
        print()
        print(timeline.render(runs["smoke"]))
    return 0 if report.all_healthy(verdicts) and done.returncode == 0 else 1


def emulated_phases(recorder: Any, hosts_started_wall: float | None = None) -> None:
    """What the emulated slice lacks or imitates, said in the timeline (never faked): no Kubernetes scheduler and no
    TPU nodes; the webhook's variables set by ``raytpu local`` itself on every host it launches (at
    ``hosts_started_wall``, a wall-clock time; default now: the hosts are being launched)."""
    from raytpu import timeline

    recorder.absent("scheduled", "no Kubernetes scheduler on the emulated slice: its hosts are local Ray nodes")
    recorder.absent("nodes_ready", "no TPU nodes on the emulated slice (JAX CPU devices stand in for chips)")
    recorder.take([timeline.stamp(
        "webhook_env", "TPU_WORKER_ID, TPU_WORKER_HOSTNAMES, TPU_NAME given to each emulated host at launch by "
        "`raytpu local` (raytpu.local.host_env), as the GKE TPU webhook gives them at pod admission",
        timeline.EMULATED, wall=hosts_started_wall)])


def serving_workload(cluster: Any, config: str | None = None, name: str | None = None) -> Any:
    """The serving WorkloadSpec to deploy on ``cluster``: the config's (``name``, else its first serving
    workload) moved onto the local slice, else the defaults. Its slice must be the one running."""
    from dataclasses import replace

    from raytpu import errors
    from raytpu.config import choose, load
    from raytpu.spec import SERVING_FIELDS

    local_work = cluster.workload("serve")
    path = choose(config, local=True)
    if config is None and not Path(path).exists():
        if name is not None:
            raise errors.missing("config", "with --workload", "--config naming a raytpu.yaml")
        return local_work
    serving = [w for w in load(path).workloads if w.kind.takes_model]
    chosen = [w for w in serving if name in (None, w.name)]
    if not chosen:
        if name is None:
            return local_work
        raise errors.invalid_choice("workload", name, [w.name for w in serving] or ["(no serving workload)"])
    work = chosen[0]
    if work.plan != cluster.slice_plan:
        running = cluster.slice_plan
        raise errors.invalid_value("workload", work.name, f"runs on a {work.plan.generation} {work.plan.topology} "
                                   f"slice; the local cluster emulates {running.generation} {running.topology}",
                                   f"`raytpu local down` then `raytpu local up --slice {work.slice.name}`")
    return replace(local_work, name=work.name, **{f: getattr(work, f) for f in SERVING_FIELDS})


def deploy_serve(cluster: Any, work: Any, timeout_s: float, api_key_file: str | None = None,
                 recorder: Any = None) -> tuple[str, str]:
    """Runs the serve workload on ``cluster`` (progress on stderr); returns its (endpoint URL, model). The
    workload's timeline stamps (:mod:`raytpu.timeline`: the app ``RUNNING``) go to ``recorder`` when given."""
    import importlib.util

    from raytpu import local, timeline
    from raytpu.errors import RuntimeFailure

    if importlib.util.find_spec("vllm") is None:
        raise RuntimeFailure(f"local.serve: vLLM is not installed in {sys.executable}'s environment",
                             "the serve environment (`make serve` builds .venv-serve; then `.venv-serve/bin/raytpu "
                             "local up --slice serve` and `.venv-serve/bin/raytpu local serve`)")
    _progress(f"deploying {work.name} (CPU twin) onto {cluster.address}")
    key_args = ("--api-key-file", os.path.abspath(api_key_file)) if api_key_file else ()
    done = local.run_workload(cluster, "serve", "--deploy-timeout-s", f"{timeout_s:g}", *key_args,
                              timeout_s=timeout_s + 60, echo=_echo, work=work)
    if recorder is not None:
        recorder.take(timeline.parse_stamp_lines(done.stdout))
    found = dict(line.split(": ", 1) for line in done.stdout.splitlines()
                 if ": " in line and not line.startswith(timeline.MARK))
    if done.returncode != 0 or not {"endpoint", "model"} <= found.keys():
        raise RuntimeFailure(f"local.serve: the serve workload exited {done.returncode} without an endpoint",
                             "its log above")
    return found["endpoint"].strip(), found["model"].strip()


def _serve(args: argparse.Namespace) -> int:
    cluster = _cluster(args)
    url, model = deploy_serve(cluster, serving_workload(cluster, args.config, args.workload), args.timeout_s,
                              args.api_key_file)
    print(f"endpoint: {url}")
    print(f"model: {model}")
    sys.stdout.flush()
    if args.ask:
        from raytpu.llm_client import ask

        ask(url, model)
    _progress("serving until `raytpu local down`")
    return 0
