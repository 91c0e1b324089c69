"""Benchmark of how the emulated slice runs ``ray start``: Ray's CLI as installed (it imports its optional ``serve``
subcommand group) beside the kit's launcher (:data:`raytpu.local.slice.launch.RAY_CLI`, the same CLI without that
group), alternating, side by side in one run.

    .venv/bin/python bench/ray_cli.py [--repeats 4] [--generation v6e --topology 4x4]

Each repeat, in alternating order: one bare ``ray start --head`` through each (``bench/local_start.py``'s bare start:
the CLI process's own CPU seconds from its rusage, and its wall time), then the whole emulated slice
(:func:`raytpu.local.slice.startup.start`, head + hosts) through each (wall time and the machine's busy CPU seconds from
``/proc/stat``). Prints p50 of each and the ratios kit/installed.
"""

from __future__ import annotations

import argparse
import os
import secrets
import statistics
import sys
import tempfile
import time

from demo_cpu import busy_s  # bench/ is this script's first sys.path entry
from local_start import bare_start

from raytpu.core.tpu.plan import SlicePlan, plan_slice
from raytpu.local.slice import launch, procs, startup

INSTALLED = "import sys; from ray.scripts.scripts import main; sys.argv[0] = 'ray'; main()"
"""Ray's ``ray`` console script: ``ray.scripts.scripts:main`` (Ray 2.60 ``entry_points``)."""
CLIS = {"installed": INSTALLED, "kit": launch.RAY_CLI}


def slice_start(plan: SlicePlan, cli: str) -> tuple[float, float]:
    """(machine busy CPU seconds, wall seconds) of head + every host registering, started with ``cli``."""
    launch.RAY_CLI = cli
    try:
        with tempfile.TemporaryDirectory(prefix="raytpu-bench-") as directory:
            busy, started = busy_s(), time.monotonic()
            try:
                startup.start(plan, 1, directory, progress=lambda _line: None)
                return busy_s() - busy, time.monotonic() - started
            finally:
                procs.stop(directory)
    finally:
        launch.RAY_CLI = CLIS["kit"]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeats", type=int, default=4)
    parser.add_argument("--generation", default="v6e")
    parser.add_argument("--topology", default="4x4")
    args = parser.parse_args(argv)
    os.environ.setdefault("RAY_AUTH_TOKEN", secrets.token_hex(32))  # token auth as on GKE; one token per process
    plan = plan_slice(args.generation, args.topology)
    figures: dict[str, dict[str, list[float]]] = {name: {"head_cpu": [], "head_wall": [], "slice_cpu": [],
                                                         "slice_wall": []} for name in CLIS}
    for i in range(args.repeats):
        order = list(CLIS) if i % 2 == 0 else list(reversed(CLIS))
        for name in order:
            wall, cpu = bare_start((sys.executable, "-c", CLIS[name]), client_server=name == "installed")
            figures[name]["head_cpu"].append(cpu)
            figures[name]["head_wall"].append(wall)
        for name in order:
            cpu, wall = slice_start(plan, CLIS[name])
            figures[name]["slice_cpu"].append(cpu)
            figures[name]["slice_wall"].append(wall)
        print(f"{i + 1}/{args.repeats}: " + "; ".join(
            f"{name} head {f['head_cpu'][-1]:.2f} CPU-s {f['head_wall'][-1]:.1f}s, slice {f['slice_cpu'][-1]:.1f} "
            f"CPU-s {f['slice_wall'][-1]:.1f}s" for name, f in figures.items()), file=sys.stderr, flush=True)
    p50 = {name: {k: statistics.median(v) for k, v in f.items()} for name, f in figures.items()}
    print(f"ray start through Ray's installed CLI vs the kit's launcher, {args.repeats} repeats alternating, "
          f"{plan.generation} {plan.topology} (head + {plan.hosts} hosts), {len(os.sched_getaffinity(0))} CPUs, "
          f"load average {[round(x, 1) for x in os.getloadavg()]}")
    print(f"{'p50':<10} {'head CLI CPU-s':>14} {'head wall s':>11} {'slice CPU-s':>11} {'slice wall s':>12}")
    for name, f in p50.items():
        print(f"{name:<10} {f['head_cpu']:>14.2f} {f['head_wall']:>11.1f} {f['slice_cpu']:>11.1f} "
              f"{f['slice_wall']:>12.1f}")
    kit, installed = p50["kit"], p50["installed"]
    print("kit/installed: " + ", ".join(f"{k} {kit[k] / installed[k]:.2f}x" for k in kit))
    return 0


if __name__ == "__main__":
    sys.exit(main())
