"""A plain multi-host JAX program, no Ray in it: joins the hosts with ``jax.distributed.initialize()``, sums one
value per device over every device of the run and checks the total, as a team's first step on a new slice would.

    python tools/allreduce.py [--rounds 3]

Run once on every TPU host of the run (``run_on: every_host``); each host prints its rank and what it saw. Exit 0
when every round's sum is right, 1 when not.
"""

from __future__ import annotations

import argparse
import sys
import time


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args(argv)

    import jax
    import jax.numpy as jnp
    from jax.sharding import Mesh, NamedSharding
    from jax.sharding import PartitionSpec as P

    jax.distributed.initialize()  # coordinator, process count and id from the host's environment
    rank, count, devices = jax.process_index(), jax.process_count(), jax.device_count()
    print(f"rank {rank} of {count}: {jax.local_device_count()} local devices of {devices} "
          f"({jax.devices()[0].platform})", flush=True)
    mesh = Mesh(jax.devices(), ("d",))
    def shard(index: tuple[slice, ...] | None) -> jax.Array:  # device i holds i + 1
        assert index is not None
        return jnp.full((1,), (index[0].start or 0) + 1.0)

    values = jax.make_array_from_callback((devices,), NamedSharding(mesh, P("d")), shard)
    total = jax.jit(jnp.sum, out_shardings=NamedSharding(mesh, P()))
    expected = devices * (devices + 1) / 2
    for round_ in range(args.rounds):
        started = time.perf_counter()
        got = float(total(values))
        print(f"rank {rank} round {round_}: sum {got:g} (expected {expected:g}) in "
              f"{(time.perf_counter() - started) * 1e3:.1f} ms", flush=True)
        if got != expected:
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
