"""``raytpu local up|status|down|smoke``: an emulated TPU slice on this machine (real Ray, JAX on CPU).

``up`` starts a Ray head plus one Ray node per emulated TPU host, with the resources, labels and
``TPU_*`` environment a GKE TPU slice has (see :mod:`raytpu.local`); by default the train slice of
``raytpu.example.yaml`` (or of ``--config``). State lives in ``$RAYTPU_LOCAL_DIR`` (default
``.raytpu/local``), so later ``status``, ``smoke`` and ``down`` find it. Progress goes to stderr.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

HELP = "run an emulated TPU slice locally: up, status, down, smoke"

DEFAULT_CONFIG = "raytpu.example.yaml"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Adds the ``up``, ``status``, ``down`` and ``smoke`` actions."""
    parser.add_argument("--dir", default=None, help="run directory (default: $RAYTPU_LOCAL_DIR or .raytpu/local)")
    actions = parser.add_subparsers(dest="action", metavar="ACTION")
    actions.required = True
    up = actions.add_parser("up", help="start the emulated slice(s)")
    up.add_argument("--config", default=None,
                    help=f"take the slice from this config (default: {DEFAULT_CONFIG} when no --generation)")
    up.add_argument("--slice", dest="slice_name", default=None,
                    help="config slice to emulate (default: the train workload's slice, else the first)")
    up.add_argument("--generation", default=None, help="emulate this generation instead of a config slice")
    up.add_argument("--topology", default=None, help="with --generation")
    up.add_argument("--machine-type", default=None, help="with --generation")
    up.add_argument("--slices", type=int, default=1, help="how many such slices (default 1)")
    up.add_argument("--timeout-s", type=float, default=180.0, help="bound on the start (default 180)")
    status = actions.add_parser("status", help="show each node: slice, host, node id, resources, alive")
    status.add_argument("--json", action="store_true")
    actions.add_parser("down", help="stop every process of the local cluster (by PID) and clean up")
    smoke = actions.add_parser("smoke", help="run the smoke workload on the local cluster")
    smoke.add_argument("--json", action="store_true", help="print the verdicts as JSON instead of a table")
    smoke.add_argument("--report", default=None, metavar="DIR", help="also write smoke.json and smoke.junit.xml")
    smoke.add_argument("--timeout-s", type=float, default=300.0)


def _progress(line: str) -> None:
    sys.stderr.write(f"raytpu local: {line}\n")
    sys.stderr.flush()


def plan_from_args(args: argparse.Namespace) -> Any:
    """The SlicePlan to emulate: ``--generation/--topology``, else a slice of the config."""
    from raytpu import errors
    from raytpu.config import load
    from raytpu.plan import plan_slice

    if args.generation or args.topology:
        if not (args.generation and args.topology):
            raise errors.missing("topology" if args.generation else "generation", "with the other",
                                 "both --generation and --topology, or neither (use the config's slice)")
        return plan_slice(args.generation, args.topology, args.machine_type)
    path = args.config or DEFAULT_CONFIG
    if not Path(path).exists():
        raise errors.invalid_value("config", path, "does not exist",
                                   "a raytpu.yaml path, or --generation and --topology")
    return config_slice_plan(load(path), args.slice_name)


def config_slice_plan(spec: Any, slice_name: str | None = None) -> Any:
    """The plan of ``slice_name``, else of the train workload's slice, else of the first slice."""
    if slice_name is None:
        trains = [w.slice for w in spec.workloads if w.kind.name == "train"]
        return (trains[0] if trains else spec.slices[0]).plan
    return spec.slice(slice_name, "--slice").plan


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
    return int({"up": _up, "status": _status, "down": _down, "smoke": _smoke}[args.action](args))


def _up(args: argparse.Namespace) -> int:
    from raytpu import local

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
    from raytpu import local, report

    cluster = _cluster(args)
    plan = cluster.slice_plan
    _progress(f"smoke check of {len(cluster.slices)} {plan.ray_pod_type} slice(s) at {cluster.address}")
    done = local.run_workload(cluster, "smoke", timeout_s=args.timeout_s)
    verdicts = report.parse_verdict_lines(done.stdout)
    if not verdicts:
        tail = "\n".join(done.stderr.strip().splitlines()[-20:])
        sys.stderr.write(f"error: local.smoke: the smoke workload printed no verdict (exit {done.returncode}):\n"
                         f"{tail}\n")
        return 1
    if args.report:
        json_path, junit_path = report.write_reports(verdicts, args.report)
        _progress(f"wrote {json_path} and {junit_path}")
    if args.json:
        print(json.dumps({"healthy": report.all_healthy(verdicts), "slices": verdicts}, indent=2, sort_keys=True))
    else:
        print(report.render_table(verdicts))
    return 0 if report.all_healthy(verdicts) and done.returncode == 0 else 1
