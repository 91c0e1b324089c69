"""Reserve one whole TPU slice with Ray's own API, run one task per host in it, print what each host saw.

    python tools/reserve.py [--topology 4x4] [--accelerator v6e] [--chips-per-host 4] [--timeout-s 600]

Flags default to the job's environment (RAYTPU_TOPOLOGY, RAYTPU_GENERATION, RAYTPU_CHIPS_PER_HOST). The reservation
is ``ray.util.tpu.slice_placement_group(topology, accelerator_version, ..., chips_per_vm=...)`` (Ray 2.60: one
bundle of a host's chips per host, gang-scheduled on one slice by its ``ray.io/tpu-slice-name`` label).
``chips_per_vm`` matters where a topology is ambiguous: Ray alone takes a v5e/v6e 2x4 for one 8-chip host
(``ray.util.tpu.SlicePlacementGroup`` docstring). Exit 0 when every host answered, 1 when not, 2 on bad flags.
"""

from __future__ import annotations

import argparse
import os
import socket
import sys
import time
from typing import Any

COLUMNS = ("bundle", "node", "TPU_WORKER_ID", "jax devices", "local devices", "checksum")


def parse_args(argv: list[str] | None = None, env: dict[str, str] | None = None) -> argparse.Namespace:
    """Flags over the RAYTPU_* environment; a missing topology or accelerator is a usage error (exit 2)."""
    env = dict(os.environ if env is None else env)
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--topology", default=env.get("RAYTPU_TOPOLOGY"), help="e.g. 4x4 (default $RAYTPU_TOPOLOGY)")
    parser.add_argument("--accelerator", default=env.get("RAYTPU_GENERATION"),
                        help="generation, e.g. v6e or TPU-V6E (default $RAYTPU_GENERATION)")
    parser.add_argument("--chips-per-host", type=int, default=_int_or_none(env.get("RAYTPU_CHIPS_PER_HOST")),
                        help="chips of one host (default $RAYTPU_CHIPS_PER_HOST; else Ray's guess)")
    parser.add_argument("--timeout-s", type=float, default=600.0, help="how long to wait for a whole free slice")
    args = parser.parse_args(argv)
    for flag, env_name in (("topology", "RAYTPU_TOPOLOGY"), ("accelerator", "RAYTPU_GENERATION")):
        if not getattr(args, flag):
            parser.error(f"--{flag} is required (or set {env_name}), e.g. --topology 4x4 --accelerator v6e")
    if args.chips_per_host is not None and args.chips_per_host < 1:
        parser.error(f"--chips-per-host: {args.chips_per_host} must be at least 1")
    return args


def _int_or_none(value: str | None) -> int | None:
    return int(value) if value and value.isdigit() else None


def host_report(bundle: int) -> dict[str, Any]:
    """What one host sees: its node, TPU_WORKER_ID, JAX's devices and a local bf16 matmul's checksum."""
    import jax
    import jax.numpy as jnp
    import ray

    x = jnp.arange(256 * 256, dtype=jnp.float32).reshape(256, 256) % 7 / 7
    checksum = float(jnp.sum(jnp.dot(x.astype(jnp.bfloat16), x.astype(jnp.bfloat16)).astype(jnp.float32)))
    return {"bundle": bundle, "node": ray.get_runtime_context().get_node_id()[:12], "host": socket.gethostname(),
            "TPU_WORKER_ID": os.environ.get("TPU_WORKER_ID", "-"), "jax devices": jax.device_count(),
            "local devices": jax.local_device_count(), "checksum": round(checksum, 1)}


def table(rows: list[dict[str, Any]]) -> str:
    """The hosts as an aligned text table, one row per bundle."""
    cells = [list(COLUMNS)] + [[str(row[c]) for c in COLUMNS] for row in rows]
    widths = [max(len(line[i]) for line in cells) for i in range(len(COLUMNS))]
    return "\n".join("  ".join(cell.ljust(w) for cell, w in zip(line, widths, strict=True)).rstrip() for line in cells)


def run(args: argparse.Namespace) -> int:
    import ray
    from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy
    from ray.util.tpu import slice_placement_group

    ray.init()
    started = time.monotonic()
    try:
        reservation = slice_placement_group(args.topology, args.accelerator, chips_per_vm=args.chips_per_host)
    except ValueError as exc:  # Ray's own check of the topology and generation
        print(f"reserve: {exc}", file=sys.stderr)
        return 2
    except RuntimeError as exc:  # no whole slice free within Ray's head reservation timeout
        print(f"reserve: {exc}", file=sys.stderr)
        return 1
    try:
        pg = reservation.placement_group
        ray.get(pg.ready(), timeout=args.timeout_s)
        reservation.release_head_pgs()  # the bundles hold every host now (Ray 2.60 release_head_pgs docstring)
        print(f"reserved {args.accelerator} {reservation.topology}: {reservation.num_hosts} host(s) of "
              f"{reservation.chips_per_host} chips in {time.monotonic() - started:.1f}s", flush=True)
        task = ray.remote(host_report)
        refs = [task.options(num_cpus=0, resources={"TPU": reservation.devices_per_host},
                             scheduling_strategy=PlacementGroupSchedulingStrategy(
                                 placement_group=pg, placement_group_bundle_index=i)).remote(i)
                for i in range(reservation.num_bundles)]
        rows = ray.get(refs, timeout=args.timeout_s)
    except (ray.exceptions.GetTimeoutError, ray.exceptions.RayError) as exc:
        print(f"reserve: {type(exc).__name__}: {str(exc)[:500]}", file=sys.stderr)
        return 1
    finally:
        reservation.shutdown()
    print(table(rows))
    workers = sorted(str(r["TPU_WORKER_ID"]) for r in rows)
    ok = len(rows) == reservation.num_hosts and len(set(workers)) == len(rows) and all(r["jax devices"] for r in rows)
    print("ok" if ok else f"FAILED: expected {reservation.num_hosts} distinct hosts, got workers {workers}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(run(parse_args()))
