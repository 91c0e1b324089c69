"""``raytpu validate [CONFIG]``: checks a raytpu.yaml and reports every problem with its field path."""

from __future__ import annotations

import argparse
import sys

HELP = "check a raytpu.yaml; every problem is reported with its field path"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Adds the optional CONFIG path."""
    parser.add_argument("config", metavar="CONFIG", nargs="?", default=None,
                        help="path of the config (default: $RAYTPU_CONFIG, else raytpu.yaml)")


def run(args: argparse.Namespace) -> int:
    """Loads the config; prints a one-line summary per slice when it is valid, and a warning (stderr) for every
    ``security`` setting that opens something to the outside."""
    from raytpu.catalog import RAY_VERSION
    from raytpu.config import default_path, load

    args.config = args.config or default_path()

    spec = load(args.config)
    print(f"{args.config}: valid ({spec.cluster.mode} cluster {spec.cluster.name!r} in {spec.region}, "
          f"{len(spec.slices)} slice kind(s), {len(spec.workloads)} workload(s))")
    for item in spec.slices:
        plan = item.plan
        ray = "" if plan.ray_reservable else f"; Ray {RAY_VERSION} cannot reserve it (no workloads)"
        print(f"  {item.name}: {item.count} x {plan.generation} {plan.topology} = {plan.hosts} host(s) x "
              f"{plan.chips_per_host} chips ({plan.machine_type}), {item.provisioning.name}, {item.zone}{ray}")
    stack = f"{spec.cluster.name}-cluster"
    for warning in spec.security.warnings():
        print(f"warning: {warning}", file=sys.stderr)
    for work in spec.workloads:
        how = ("a RayService the workloads stack applies" if not work.kind.is_job else
               f"a RayJob run by `raytpu submit {work.name} --stack {stack}` (Terraform applies no RayJob)")
        span = f" ({work.slices_per_run} slices per run, joined over DCN)" if work.multislice else ""
        print(f"  {work.name}: {work.kind.name} on {work.slice.name}{span}, {how}")
    return 0
