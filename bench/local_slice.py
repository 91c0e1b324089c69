"""Benchmark of the local emulated slice: start time, whole-slice reservation latency, smoke duration.

    .venv/bin/python bench/local_slice.py [--repeats 3] [--config raytpu.example.yaml] [--json]

Each repeat starts a fresh cluster (head + one Ray node per emulated host), connects a driver, reserves
the whole slice ``--reservations`` times (``raytpu.workloads.support.slices.reserve_slice``: completeness check,
head claim, pinned ``slice_placement_group``, bounded wait), runs the smoke workload as a driver process
(as a RayJob would), and tears the cluster down. Prints medians (and min/max) as a table.

Baselines measured side by side on the same cluster, with their ratios: a bare Ray placement group of the
same bundles (one ``{"TPU": chips_per_host}`` per host, STRICT_SPREAD) for the reservation, and a driver
that only connects and disconnects (``ray.init``/``ray.shutdown``) for the smoke workload.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import secrets
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from raytpu.config import load
from raytpu.core.common import report
from raytpu.core.tpu.plan import SlicePlan, plan_slice
from raytpu.local.running import jobs
from raytpu.local.slice import procs, startup
from raytpu.local.slice.from_config import config_slice_plan


def one_repeat(plan: SlicePlan, reservations: int) -> dict[str, float]:
    """One fresh cluster: its start time, reservation latencies (median), smoke wall and in-workload time."""
    import ray
    from ray.util.placement_group import placement_group, remove_placement_group

    from raytpu.workloads.support import slices

    with tempfile.TemporaryDirectory(prefix="raytpu-bench-") as directory:
        started = time.monotonic()
        cluster = startup.start(plan, 1, directory)
        figures = {"start_s": time.monotonic() - started}
        try:
            ray.init(address=cluster.address, log_to_driver=False, logging_level=logging.ERROR)
            latencies: dict[str, list[float]] = {"reserve_s": [], "plain_pg_s": []}
            for _ in range(reservations):  # interleaved: the kit's reservation, then the bare primitive
                started = time.monotonic()
                held = slices.reserve_slice(plan, timeout_s=60)
                latencies["reserve_s"].append(time.monotonic() - started)
                held.release()
                time.sleep(0.2)  # let the removal settle before the next reservation
                started = time.monotonic()
                group = placement_group([{"TPU": plan.chips_per_host, "CPU": 0}] * plan.hosts,
                                        strategy="STRICT_SPREAD")
                ray.get(group.ready(), timeout=60)
                latencies["plain_pg_s"].append(time.monotonic() - started)
                remove_placement_group(group)
                time.sleep(0.2)
            ray.shutdown()
            figures.update({k: statistics.median(v) for k, v in latencies.items()})
            started = time.monotonic()
            subprocess.run([sys.executable, "-c", "import ray; ray.init(); ray.shutdown()"],
                           env=cluster.driver_env(), check=True, capture_output=True, timeout=120)
            figures["bare_driver_s"] = time.monotonic() - started
            started = time.monotonic()
            done = jobs.run_workload(cluster, "smoke", timeout_s=300)
            figures["smoke_s"] = time.monotonic() - started
            verdict = report.parse_verdict_line(done.stdout)
            if done.returncode != 0 or verdict is None:
                raise SystemExit(f"smoke failed (exit {done.returncode}):\n{done.stderr[-2000:]}")
            figures["smoke_checks_s"] = float(verdict["duration_s"])
        finally:
            if ray.is_initialized():
                ray.shutdown()
            started = time.monotonic()
            procs.stop(directory)
            figures["stop_s"] = time.monotonic() - started
    return figures


LABELS = {
    "start_s": "slice start (head + hosts registered)",
    "reserve_s": "whole-slice reservation latency",
    "plain_pg_s": "  baseline: bare placement group, same bundles",
    "smoke_s": "smoke workload, wall (driver start to exit)",
    "smoke_checks_s": "smoke checks inside the workload",
    "bare_driver_s": "  baseline: driver that only connects",
    "stop_s": "teardown",
}


def main(argv: list[str] | None = None) -> int:
    """Runs the benchmark and prints the table (or JSON)."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--reservations", type=int, default=5, help="reservations per repeat")
    parser.add_argument("--config", default="raytpu.example.yaml", help="emulate this config's train slice")
    parser.add_argument("--generation", default=None)
    parser.add_argument("--topology", default=None)
    parser.add_argument("--machine-type", default=None)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    os.environ.setdefault("RAY_AUTH_TOKEN", secrets.token_hex(32))  # token auth as on GKE; one token per process
    if args.generation and args.topology:
        plan = plan_slice(args.generation, args.topology, args.machine_type)
    else:
        plan = config_slice_plan(load(Path(args.config)))
    rows = []
    for i in range(args.repeats):
        figures = one_repeat(plan, args.reservations)
        print(f"repeat {i + 1}/{args.repeats}: " + ", ".join(f"{k} {v:.2f}" for k, v in figures.items()),
              file=sys.stderr)
        rows.append(figures)
    summary = {k: {"median": statistics.median(r[k] for r in rows), "min": min(r[k] for r in rows),
                   "max": max(r[k] for r in rows)} for k in LABELS}
    if args.json:
        print(json.dumps({"plan": plan.to_json(), "repeats": args.repeats, "figures": summary,
                          "ratios": ratios(summary)}, indent=2))
        return 0
    print(f"local emulated slice: {plan.generation} {plan.topology}, {plan.hosts} hosts x {plan.chips_per_host} "
          f"chips, {args.repeats} repeats on {os.cpu_count()} CPUs")
    width = max(len(v) for v in LABELS.values())
    print(f"{'figure'.ljust(width)}  {'median':>9}  {'min':>9}  {'max':>9}")
    for key, label in LABELS.items():
        s = summary[key]
        print(f"{label.ljust(width)}  {s['median']:>8.3f}s  {s['min']:>8.3f}s  {s['max']:>8.3f}s")
    for name, value in ratios(summary).items():
        print(f"ratio {name}: {value:.2f}x")
    return 0


def ratios(summary: dict[str, dict[str, float]]) -> dict[str, float]:
    """The kit's figures over their side-by-side baselines (medians)."""
    def over(a: str, b: str) -> float:
        return summary[a]["median"] / max(summary[b]["median"], 1e-9)

    return {"reservation / bare placement group": over("reserve_s", "plain_pg_s"),
            "smoke wall / bare driver": over("smoke_s", "bare_driver_s")}


if __name__ == "__main__":
    sys.exit(main())
