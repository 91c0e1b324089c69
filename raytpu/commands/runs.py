"""``raytpu runs``: the workload runs on a deployed stack (``--stack``) or on the emulated slice (``--local``): list
them, print a run's driver output or a training rank's output (``logs RUN [--rank N] [--follow]``), cancel one and
free its slice (``cancel RUN``).

On a stack: the RayJobs and RayServices the kit made, through the Kubernetes API as ``submit`` reaches it
(:mod:`raytpu.cluster.runs`). Locally: the Job Submission API jobs of the cluster ``raytpu local up`` recorded
(:mod:`raytpu.local.runs`). Exit 0 ok, 1 runtime failure (unreachable cluster, a timeout), 2 bad input (an unknown
RUN, named with the known runs).
"""

from __future__ import annotations

import argparse
import dataclasses
import sys

HELP = "list the workload runs on a stack or the emulated slice; follow a run's logs, or cancel it"


def _target(parser: argparse.ArgumentParser) -> None:
    """Where the runs are: a stack (its outputs) or the emulated slice; and how long a wait may take."""
    from raytpu.console import argtypes
    from raytpu.console.cli_args import add_stack_target

    add_stack_target(parser, stack_note="; required unless --local")
    parser.add_argument("--local", action="store_true", help="the emulated slice's runs (`raytpu local up`); the "
                        "default when no --stack is given and an emulated slice is up")
    parser.add_argument("--config", type=argtypes.path, help=argparse.SUPPRESS)  # named in its error, not parsed away
    parser.add_argument("--dir", type=argtypes.path, help="with --local: the local cluster's run directory")
    parser.add_argument("--team", type=_team, help="with --stack: a team's runs (its namespace, raytpu-TEAM), their "
                        "place in its queue and its chips in use")
    parser.add_argument("--timeout-s", type=argtypes.positive_seconds,
                        help="how long --follow or cancel waits (default: --follow until the run ends, cancel 600); "
                             "past it, exit 1")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Adds the listing's options and the ``logs`` and ``cancel`` actions (each takes the same options)."""
    _target(parser)
    parser.add_argument("--json", action="store_true", help="the runs as JSON: {runs: [{run, kind, ...}]}")
    actions = parser.add_subparsers(dest="action", metavar="ACTION")
    # options given after the action land on its parser; SUPPRESS keeps those given before it
    logs = actions.add_parser("logs", help="the driver's output, or a training rank's (--rank)",
                              argument_default=argparse.SUPPRESS)
    logs.add_argument("run", metavar="RUN", help="a run's name, as `raytpu runs` lists it")
    logs.add_argument("--rank", type=_rank, help="the training function's output of this world rank")
    logs.add_argument("--follow", action="store_true", help="stream until the run ends")
    _target(logs)
    cancel = actions.add_parser("cancel", help="stop the run and free its slice", argument_default=argparse.SUPPRESS)
    cancel.add_argument("run", metavar="RUN", help="a run's name, as `raytpu runs` lists it")
    _target(cancel)


def _team(text: str) -> str:
    """A team's name (``teams[].name``): a DNS label."""
    from raytpu.core.specs.field_rules import DNS_LABEL

    if not DNS_LABEL.match(text):
        raise argparse.ArgumentTypeError(f"{text[:40]!r} is not a team name; valid: a teams[].name of the config (a "
                                         "DNS label: lowercase letters, digits, hyphens)")
    return text


def _rank(text: str) -> int:
    """A world rank: an integer >= 0."""
    if not text.isdigit():
        raise argparse.ArgumentTypeError(f"{text[:40]!r} is not a world rank; valid: an integer >= 0 (rank 0 is "
                                         "the first training worker)")
    return int(text)


def run(args: argparse.Namespace) -> int:
    """Lists, prints logs or cancels, on the stack or the emulated slice."""
    from raytpu.core.common import errors

    action = getattr(args, "action", None)
    if (given := getattr(args, "config", None)) is not None:
        raise errors.forbidden("--config", given, "for runs (it reads no config: it lists every run of the "
                               "stack or the emulated slice)", "leave it out; --stack NAME or --local [--dir DIR]")
    if args.local and args.stack:
        raise errors.forbidden("--stack", args.stack, "with --local", "one of --stack NAME or --local")
    if getattr(args, "team", None) is not None and args.local:
        raise errors.forbidden("--team", args.team, "with --local (the emulated slice has no queues: every run is "
                               "listed)", "--team with --stack")
    if args.dir is not None and not args.local:
        raise errors.forbidden("--dir", args.dir, "without --local", "--dir with --local")
    if not args.local and not args.stack:
        from raytpu import local

        if local.LocalCluster.load(local.run_dir(None)) is None:  # no emulated slice here either: say both ways
            raise errors.missing("--stack", "(or --local)", "the cluster stack's id, <cluster name>-cluster; or "
                                 "--local for the emulated slice (`raytpu local up` starts one)")
        args.local = True  # only an emulated slice is up: its runs (issue 68 item 6)
    timeout_s = args.timeout_s or (600.0 if action == "cancel" else FOLLOW_S)
    if args.local:
        return _local(args, action, timeout_s)
    return _stack(args, action, timeout_s)


FOLLOW_S = 366 * 24 * 3600.0
"""``--follow`` with no ``--timeout-s``: until the run ends (a run's deadline is at most a year; issue 49)."""


def _say(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def _out(line: str) -> None:
    print(line, flush=True)


def _stack(args: argparse.Namespace, action: str | None, timeout_s: float) -> int:
    from raytpu.cluster import gke, runs
    from raytpu.cluster.outputs import StackOutputs
    from raytpu.runs.run_list import pick, render

    outputs = StackOutputs.read(args.outputs, args.stack)
    team = getattr(args, "team", None)
    if team is not None:  # the team's namespace: a member whose Role is that namespace's reads only there
        from raytpu.core.specs.teams import NAMESPACE_PREFIX

        outputs = dataclasses.replace(outputs, namespace=f"{NAMESPACE_PREFIX}{team}")
    with gke.connect(outputs) as client:
        found = runs.list_runs(client)
        if action is None:
            print(render(found, args.json, runs.queue_usage(client) if team is not None else ()))
            return 0
        chosen = pick(found, args.run)
        if action == "cancel":
            runs.cancel(client, chosen, timeout_s=timeout_s, progress=_say)
        elif getattr(args, "rank", None) is not None:
            runs.rank_log(client, chosen, args.rank)
        else:
            runs.driver_log(client, chosen, follow=getattr(args, "follow", False), timeout_s=timeout_s, sink=_out)
    return 0


def _local(args: argparse.Namespace, action: str | None, timeout_s: float) -> int:
    from raytpu import local
    from raytpu.core.common import errors
    from raytpu.local import runs
    from raytpu.runs.run_list import pick, render

    cluster = local.LocalCluster.load(local.run_dir(args.dir))
    if cluster is None:
        raise errors.RuntimeFailure(f"local: no local cluster recorded in {local.run_dir(args.dir)}",
                                    "start one with `raytpu local up`")
    client = runs.jobs_client(cluster)
    found = runs.list_runs(client)
    if action is None:
        print(render(found, args.json))
        return 0
    chosen = pick(found, args.run)
    follow = getattr(args, "follow", False)
    if action == "cancel":
        runs.cancel(cluster, client, chosen, timeout_s=timeout_s, progress=_say)
    elif getattr(args, "rank", None) is not None:
        runs.rank_log(cluster, client, chosen, args.rank, follow=follow, timeout_s=timeout_s, sink=_out)
    else:
        runs.driver_log(client, chosen, follow=follow, timeout_s=timeout_s, sink=_out)
    return 0
