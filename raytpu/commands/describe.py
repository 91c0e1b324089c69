"""``raytpu describe GENERATION TOPOLOGY`` (or ``raytpu describe v6e-16``): the SlicePlan, as JSON or as a slice map."""

from __future__ import annotations

import argparse
import json

from raytpu import errors
from raytpu.catalog import ACCELERATOR_TYPE, RAY_VERSION, accelerator_prefixes, from_accelerator_type, generation
from raytpu.plan import SlicePlan, plan_slice

HELP = "show the SlicePlan of one slice shape (hosts, chips, machine type, placement, Ray pod type)"

MAX_MAP_ROWS = 16


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Adds GENERATION, TOPOLOGY, ``--machine-type`` and ``--json``."""
    parser.add_argument("generation", metavar="GENERATION",
                        help="v4, v5e, v5p, v6e or tpu7x; or an accelerator type such as v6e-16, v5litepod-16, v5p-128 "
                             "(TensorCores: 64 chips) or tpu7x-128, without TOPOLOGY")
    parser.add_argument("topology", metavar="TOPOLOGY", nargs="?", default=None, help="e.g. 4x4 or 2x2x4")
    parser.add_argument("--machine-type", help="TPU VM shape; default: the one that fits (see `raytpu catalog`)")
    parser.add_argument("--json", action="store_true", help="print the plan as JSON")


def slice_map(plan: SlicePlan) -> str:
    """A picture of the slice: one row per host, one cell per chip, worker 0 marked as Ray's head."""
    width = len(str(plan.chips - 1))
    lines = []
    for host in range(min(plan.hosts, MAX_MAP_ROWS)):
        first = host * plan.chips_per_host
        cells = " ".join(f"[{chip:>{width}}]" for chip in range(first, first + plan.chips_per_host))
        role = f"  <- {plan.head_resource}" if host == 0 else ""
        lines.append(f"  host {host:>{len(str(plan.hosts - 1))}}  {cells}{role}")
    if plan.hosts > MAX_MAP_ROWS:
        lines.append(f"  ... {plan.hosts - MAX_MAP_ROWS} more hosts of {plan.chips_per_host} chips")
    return "\n".join(lines)


def render(plan: SlicePlan) -> str:
    """The human form of a plan: a summary line, the map, then the derived settings."""
    hosts = "1 host" if plan.single_host else f"{plan.hosts} hosts"
    selector = ", ".join(f"{k}={v}" for k, v in plan.node_selector.items())
    return "\n".join([
        f"{plan.generation} {plan.topology}: {plan.chips} chips on {hosts} x {plan.chips_per_host} chips "
        f"({plan.machine_type})",
        "",
        slice_map(plan),
        "",
        f"  placement            {plan.placement}",
        f"  ray pod type         {plan.ray_pod_type} ({plan.ray_accelerator_type}, head resource {plan.head_resource})",
        f"  ray reservable       {_reservable(plan)}",
        f"  kuberay numOfHosts   {plan.hosts}   google.com/tpu per pod: {plan.chips_per_host}",
        f"  node selector        {selector}",
        f"  per chip             {plan.hbm_gib_per_chip:g} GiB HBM, {plan.peak_bf16_tflops_per_chip:g} bf16 TFLOP/s",
        f"  slice peak           {plan.peak_bf16_tflops_per_chip * plan.chips / 1000:.1f} bf16 PFLOP/s, "
        f"{plan.hbm_gib_per_chip * plan.chips:g} GiB HBM",
    ])


def _reservable(plan: SlicePlan) -> str:
    if plan.ray_reservable:
        return f"yes (Ray {RAY_VERSION} slice_placement_group)"
    nearest = ", ".join(generation(plan.generation).nearest_ray_topologies(plan.topology))
    return (f"NO: GKE provisions it, but Ray {RAY_VERSION} cannot reserve it as one slice (nearest it can: "
            f"{nearest}); fine for a slice with no Ray workloads")


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
