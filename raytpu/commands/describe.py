"""``raytpu describe GENERATION TOPOLOGY`` (or ``raytpu describe v6e-16``): the SlicePlan, as JSON or as a slice map
(:mod:`raytpu.console.slice_map`)."""

from __future__ import annotations

import argparse
import json

from raytpu.console.slice_map import render
from raytpu.core.common import errors
from raytpu.core.tpu.catalog import ACCELERATOR_TYPE, accelerator_prefixes, from_accelerator_type
from raytpu.core.tpu.plan import plan_slice

HELP = "show the SlicePlan of one slice shape (hosts, chips, machine type, placement, Ray pod type)"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Adds GENERATION, TOPOLOGY, ``--machine-type`` and ``--json``."""
    parser.add_argument("generation", metavar="GENERATION",
                        help="v4, v5e, v5p, v6e or tpu7x; or an accelerator type such as v6e-16, v5litepod-16, v5p-128 "
                             "(TensorCores: 64 chips) or tpu7x-128, without TOPOLOGY")
    parser.add_argument("topology", metavar="TOPOLOGY", nargs="?", default=None, help="e.g. 4x4 or 2x2x4")
    parser.add_argument("--machine-type", help="TPU VM shape; default: the one that fits (see `raytpu catalog`)")
    parser.add_argument("--json", action="store_true", help="print the plan as JSON")


def run(args: argparse.Namespace) -> int:
    """Plans the slice and prints it; invalid shapes raise InvalidInput (exit 2)."""
    named = from_accelerator_type(args.generation)
    if named is not None and args.topology is not None:
        raise errors.forbidden("TOPOLOGY", args.topology, f"with the accelerator type {args.generation!r}",
                               f"either `describe {args.generation}` or `describe {named[0]} {named[1]}`")
    if named is None and args.topology is None and ACCELERATOR_TYPE.match(args.generation.lower()):
        raise errors.invalid_value("generation", args.generation, "is not an accelerator type of the catalog",
                                   "<prefix>-<size> with prefix " + ", ".join(accelerator_prefixes()))
    if named is None and args.topology is None:
        raise errors.missing("TOPOLOGY", f"after the generation {args.generation!r}",
                             "GENERATION TOPOLOGY (v6e 4x4), or an accelerator type alone (v6e-16): see "
                             "`raytpu describe --help`")
    generation_name, topology = named or (args.generation, args.topology)
    plan = plan_slice(generation_name, topology, args.machine_type)
    print(json.dumps(plan.to_json(), indent=2) if args.json else render(plan))
    return 0
