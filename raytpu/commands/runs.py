"""``raytpu runs``: the workload runs on a deployed stack (``--stack``) or on the emulated slice (``--local``): list
them, print a run's driver output or a training rank's output (``logs RUN [--rank N] [--follow]``), cancel one and
free its slice (``cancel RUN``).

On a stack: the RayJobs and RayServices the kit made, through the Kubernetes API as ``submit`` reaches it
(:mod:`raytpu.cluster.runs`). Locally: the Job Submission API jobs of the cluster ``raytpu local up`` recorded
(:mod:`raytpu.local.running.runs`). Exit 0 ok, 1 runtime failure (unreachable cluster, a timeout), 2 bad input (an
unknown RUN, named with the known runs).
"""

from __future__ import annotations

import argparse
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
    """Chooses the side once (:func:`raytpu.console.sides.side_for`), then lists, prints logs or cancels there."""
    from raytpu.console.sides import side_for
    from raytpu.core.common import errors
    from raytpu.runs.run_list import pick, render

    action = getattr(args, "action", None)
    if (given := getattr(args, "config", None)) is not None:
        raise errors.forbidden("--config", given, "for runs (it reads no config: it lists every run of the "
                               "stack or the emulated slice)", "leave it out; --stack NAME or --local [--dir DIR]")
    team = getattr(args, "team", None)
    # refused one at a time, as before the side was chosen: --stack before --team
    stack_only = [*([errors.forbidden("--stack", args.stack, "with --local", "one of --stack NAME or --local")]
                    if args.stack else []),
                  *([errors.forbidden("--team", team, "with --local (the emulated slice has no queues: every run is "
                                      "listed)", "--team with --stack")] if team is not None else [])]
    local_only = ([errors.forbidden("--dir", args.dir, "without --local", "--dir with --local")]
                  if args.dir is not None else [])
    side = side_for(args, args.local, with_local=stack_only[:1], without_local=local_only, detect=True,
                    valid="the cluster stack's id, <cluster name>-cluster; or --local for the emulated slice "
                          "(`raytpu local up` starts one)")
    timeout_s = args.timeout_s or (600.0 if action == "cancel" else FOLLOW_S)
    try:
        found = side.list_runs()
        if action is None:
            print(render(found, args.json, side.usage()))
            return 0
        chosen = pick(found, args.run)
        if action == "cancel":
            side.cancel(chosen, timeout_s=timeout_s, progress=_say)
        else:
            side.logs(chosen, rank=getattr(args, "rank", None), follow=getattr(args, "follow", False),
                      timeout_s=timeout_s, sink=_out)
    finally:
        side.close()
    return 0


FOLLOW_S = 366 * 24 * 3600.0
"""``--follow`` with no ``--timeout-s``: until the run ends (a run's deadline is at most a year; issue 49)."""


def _say(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def _out(line: str) -> None:
    print(line, flush=True)
