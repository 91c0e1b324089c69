"""The human form of a SlicePlan: a summary line, a map of its hosts and chips, the settings derived from it
(``raytpu describe``, ``raytpu demo``). Standard library only (plus the catalog and the plan)."""

from __future__ import annotations

from raytpu.core.tpu.catalog import RAY_VERSION, generation
from raytpu.core.tpu.plan import SlicePlan

MAX_MAP_ROWS = 16


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
