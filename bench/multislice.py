"""Benchmark of multi-slice training on the emulated slices: step time and reservation time, one slice beside two.

    .venv/bin/python bench/multislice.py [--repeats 3] [--steps 20] [--json]

One cluster of two emulated v5p 2x2x2 slices (two 4-chip hosts each, the smallest shape Ray 2.60 reserves across
slices), measured side by side in one run:

- reservation: ``ray.util.tpu.SlicePlacementGroup(num_slices=1)`` beside ``num_slices=2`` (what JaxTrainer builds:
  each slice's head held, then one placement group of every host's bundle) until the group is ready, interleaved,
  ``--repeats`` times each; medians and their ratio;
- training: the train workload (``raytpu.workloads.train``, same global batch) with ``slices: 1`` (2 JAX processes,
  8 CPU devices) beside ``slices: 2`` (4 processes, 16 devices, a ``slice x data`` mesh); its median step time and
  the ratio. On one machine the "DCN" is loopback and the devices share the CPUs, so the ratio says what the
  second slice's processes and collective cost here, not what DCN costs on GKE.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time

from raytpu.core.tpu.plan import plan_slice
from raytpu.local.running import jobs
from raytpu.local.slice import procs, startup, state
from raytpu.local.slice.connection import connect


def reserve_seconds(plan_topology: str, generation: str, num_slices: int, chips_per_host: int) -> float:
    """Seconds until a SlicePlacementGroup of ``num_slices`` slices is ready; released afterwards."""
    import ray
    from ray.util.tpu import SlicePlacementGroup

    started = time.monotonic()
    group = SlicePlacementGroup(topology=plan_topology, accelerator_version=generation, num_slices=num_slices,
                                resources_per_bundle={"TPU": chips_per_host, "CPU": 1},
                                head_reservation_timeout_s=60)
    ready = group.placement_group
    assert ready is not None  # one placement group for all slices (pg_per_slice=False)
    ray.get(ready.ready(), timeout=60)
    elapsed = time.monotonic() - started
    group.shutdown()
    time.sleep(0.3)  # let the removal settle before the next reservation
    return elapsed


def train_step_seconds(cluster: state.LocalCluster, slices: int, steps: int, storage: str) -> dict[str, float]:
    """One training run spanning ``slices`` slices: its median step time and wall time."""
    from raytpu.workloads import train

    started = time.monotonic()
    done = jobs.run_workload(cluster, "train", "--storage-path", storage, "--steps", str(steps),
                             "--checkpoint-every", str(steps), timeout_s=600,
                             work=cluster.workload("train", slices))
    summary = train.parse_result(done.stdout)
    if done.returncode != 0 or not summary or not summary["ok"]:
        raise SystemExit(f"train on {slices} slice(s) failed (exit {done.returncode}):\n{done.stderr[-2000:]}")
    return {"step_s": float(summary["step_time_s"]), "wall_s": time.monotonic() - started,
            "devices": float(summary["devices"])}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()

    plan = plan_slice("v5p", "2x2x2")
    figures: dict[str, float] = {}
    with tempfile.TemporaryDirectory(prefix="raytpu-bench-ms-") as directory:
        print(f"starting 2 emulated {plan.ray_pod_type} slices ...", file=sys.stderr)
        cluster = startup.start(plan, 2, directory)
        import ray  # after the start: Ray reads its auth mode once, when it loads (raytpu.local.slice.connection)

        try:
            connect(cluster)
            times: dict[int, list[float]] = {1: [], 2: []}
            for i in range(args.repeats):
                for n in (1, 2):  # interleaved
                    times[n].append(reserve_seconds(plan.topology, plan.generation, n, plan.chips_per_host))
                print(f"reservation repeat {i + 1}/{args.repeats} done", file=sys.stderr)
            ray.shutdown()
            figures["reserve_1_slice_s"] = statistics.median(times[1])
            figures["reserve_2_slices_s"] = statistics.median(times[2])
            for n in (1, 2):
                print(f"training on {n} slice(s) ...", file=sys.stderr)
                run = train_step_seconds(cluster, n, args.steps, f"{directory}/ckpt-{n}")
                figures.update({f"train_{n}_step_s": run["step_s"], f"train_{n}_wall_s": run["wall_s"],
                                f"train_{n}_devices": run["devices"]})
        finally:
            if ray.is_initialized():
                ray.shutdown()
            procs.stop(directory)
    figures["reserve_ratio_2_over_1"] = figures["reserve_2_slices_s"] / figures["reserve_1_slice_s"]
    figures["step_ratio_2_over_1"] = figures["train_2_step_s"] / figures["train_1_step_s"]
    if args.json:
        print(json.dumps(figures, indent=2, sort_keys=True))
        return 0
    rows = [("reserve (SlicePlacementGroup ready)", figures["reserve_1_slice_s"], figures["reserve_2_slices_s"],
             figures["reserve_ratio_2_over_1"]),
            ("train step (median, same global batch)", figures["train_1_step_s"], figures["train_2_step_s"],
             figures["step_ratio_2_over_1"])]
    print(f"{'measure':<40} {'1 slice':>10} {'2 slices':>10} {'2 / 1':>7}")
    for name, one, two, ratio in rows:
        print(f"{name:<40} {one:>9.3f}s {two:>9.3f}s {ratio:>7.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
