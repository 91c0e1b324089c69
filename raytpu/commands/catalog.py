"""``raytpu catalog``: every TPU generation and its valid topologies."""

from __future__ import annotations

import argparse
import json

from raytpu.core.tpu.catalog import GENERATIONS, RAY_VERSION
from raytpu.core.tpu.plan import plan_slice

HELP = "list every TPU generation and its valid topologies"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Adds ``--json``."""
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")


def catalog_json() -> dict[str, dict[str, object]]:
    """The catalog as JSON: one entry per generation with its facts and topologies."""
    out: dict[str, dict[str, object]] = {}
    for gen in GENERATIONS.values():
        out[gen.name] = {
            "gke_accelerator": gen.gke_accelerator,
            "machine_types": {m.name: m.chips for m in gen.machine_types},
            "mesh_dims": gen.mesh_dims,
            "hbm_gib_per_chip": gen.hbm_gib_per_chip,
            "peak_bf16_tflops_per_chip": gen.peak_bf16_tflops_per_chip,
            "tensorcores_per_chip": gen.tensorcores_per_chip,
            "ray_accelerator_type": gen.ray_accelerator_type,
            "multi_host_placement": gen.multi_host_placement,
            "min_gke_version": gen.min_gke_version,
            "zones_seen": list(gen.zones),
            "hbm_gbps_per_chip": gen.hbm_gbps_per_chip,
            "ici_gbps_per_chip": gen.ici_gbps_per_chip,
            "topologies": list(gen.topologies),
            "ray_reservable_topologies": [t for t in gen.topologies if t in gen.ray_topologies],
            "single_host_topologies": list(gen.single_host_topologies),
        }
    return out


def run(args: argparse.Namespace) -> int:
    """Prints the catalog."""
    if args.json:
        print(json.dumps(catalog_json(), indent=2))
        return 0
    for gen in GENERATIONS.values():
        machines = ", ".join(f"{m.name} ({m.chips})" for m in gen.machine_types)
        print(f"{gen.name}  {gen.gke_accelerator}  {gen.mesh_dims}D  {gen.ray_accelerator_type}  "
              f"HBM {gen.hbm_gib_per_chip:g} GiB/chip  {gen.peak_bf16_tflops_per_chip:g} bf16 TFLOP/s/chip")
        print(f"  machine types: {machines}")
        rows = [f"{topo}({plan_slice(gen.name, topo).hosts}h){'' if topo in gen.ray_topologies else '*'}"
                for topo in gen.topologies]
        print("  topologies (hosts; * = GKE only: Ray " + RAY_VERSION + " cannot reserve it): " + " ".join(rows))
    return 0
