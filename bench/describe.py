"""Start-to-exit time of ``raytpu describe v6e 4x4 --json`` beside ``python -c pass``, in one run.

The two commands alternate so machine noise hits both alike; the report gives medians, the
ratio, and whether the describe median is inside its budget (exit 1 when it is not).

    .venv/bin/python bench/describe.py [--repeats 30] [--budget-s 0.35] [--json]
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path


def time_once(argv: list[str]) -> float:
    start = time.perf_counter()
    subprocess.run(argv, check=True, stdout=subprocess.DEVNULL)
    return time.perf_counter() - start


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=30)
    parser.add_argument("--budget-s", type=float, default=0.35)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    script = shutil.which("raytpu", path=str(Path(sys.executable).parent)) or "raytpu"
    commands = {"python -c pass": [sys.executable, "-c", "pass"],
                "raytpu describe v6e 4x4 --json": [script, "describe", "v6e", "4x4", "--json"]}
    samples: dict[str, list[float]] = {name: [] for name in commands}
    for argv in commands.values():  # warm the page cache and .pyc files once
        time_once(argv)
    for _ in range(args.repeats):
        for name, argv in commands.items():
            samples[name].append(time_once(argv))
    medians = {name: statistics.median(values) for name, values in samples.items()}
    floor, describe = medians.values()
    result = {"repeats": args.repeats, "median_s": medians, "ratio": describe / floor,
              "budget_s": args.budget_s, "within_budget": describe < args.budget_s}
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        print(f"{'command':<34} {'median s':>9} {'min s':>8} {'max s':>8}")
        for name, values in samples.items():
            print(f"{name:<34} {medians[name]:>9.3f} {min(values):>8.3f} {max(values):>8.3f}")
        verdict = "within" if result["within_budget"] else "OVER"
        print(f"ratio describe / python: {result['ratio']:.2f}x; describe median {describe:.3f} s is {verdict} "
              f"the {args.budget_s} s budget ({args.repeats} interleaved runs each)")
    return 0 if result["within_budget"] else 1


if __name__ == "__main__":
    sys.exit(main())
