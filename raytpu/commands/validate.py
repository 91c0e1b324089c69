"""``raytpu validate [CONFIG]``: checks a raytpu.yaml and reports every problem with its field path."""

from __future__ import annotations

import argparse

HELP = "check a raytpu.yaml; every problem is reported with its field path"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Adds the optional CONFIG path."""
    parser.add_argument("config", metavar="CONFIG", nargs="?", default=None,
                        help="path of the config (default: $RAYTPU_CONFIG, else raytpu.yaml)")


def run(args: argparse.Namespace) -> int:
    """Loads the config; prints a one-line summary per slice when it is valid."""
    from raytpu.config import default_path, load

    args.config = args.config or default_path()

    config = load(args.config)
    print(f"{args.config}: valid ({config.cluster.mode} cluster {config.cluster.name!r} in {config.region}, "
          f"{len(config.slices)} slice kind(s), {len(config.workloads)} workload(s))")
    for item in config.slices:
        plan = item.plan()
        print(f"  {item.name}: {item.count} x {plan.generation} {plan.topology} = {plan.hosts} host(s) x "
              f"{plan.chips_per_host} chips ({plan.machine_type}), {item.provisioning}, {item.zone}")
    return 0
