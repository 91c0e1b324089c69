"""Synth benchmark: raytpu's app beside a framework floor, and 32 slices beside 1.

Each measurement is a fresh process (what a user waits for: interpreter, jsii/node start, imports,
construct tree, synth, JSON written), run interleaved so that machine noise hits every case alike:

- ``floor``: a bare CDK Terrain app that imports the same provider binding modules as raytpu and
  declares one ``google_container_cluster`` (the cost of the framework itself);
- ``example``: ``raytpu synth raytpu.example.yaml`` (both stacks);
- ``slices-1`` / ``slices-32``: ``raytpu synth`` of the example with 1 and with 32 slice kinds
  (each its own node pool and output).

Targets: example / floor <= 1.5; slices-32 / slices-1 <= 1.3. Prints a table; ``--json FILE`` writes
the figures. ``python bench/synth.py [--repeats N] [--json FILE]``; exits 1 when a target is missed
and ``--check`` is given.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]
EXAMPLE = REPO / "raytpu.example.yaml"
TARGETS = {"example/floor": 1.5, "slices-32/slices-1": 1.3}


def floor_app(outdir: str) -> None:
    """The framework floor: one cluster in a bare app.

    ``raytpu.modules.parts.cdk`` is the one module that imports cdktn and the provider bindings (nothing of
    raytpu's constructs), so importing it gives the floor exactly raytpu's binding imports.
    """
    from raytpu.modules.parts import cdk

    app = cdk.App(outdir=outdir)
    stack = cdk.TerraformStack(app, "floor")
    cdk.google_provider.GoogleProvider(stack, "google", project="my-ml-project", region="us-east5")
    cdk.container_cluster.ContainerCluster(stack, "cluster", name="ray-tpu", location="us-east5",
                                           enable_autopilot=True, deletion_protection=True)
    app.synth()


def slices_config(count: int, directory: Path) -> Path:
    """The example config with ``count`` slice kinds (v6e 4x4, one pool each) and no workloads."""
    data = yaml.safe_load(EXAMPLE.read_text())
    base = data["slices"][0]
    data["slices"] = [{**base, "name": f"s{i}"} for i in range(count)]
    data["workloads"] = [{"name": "smoke", "kind": "smoke", "slice": "s0"}]
    path = directory / f"slices-{count}.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def commands(work: Path) -> dict[str, list[str]]:
    """Case name -> the command that synthesizes it into a fresh directory under ``work``."""
    raytpu = [sys.executable, "-m", "raytpu", "synth"]
    return {
        "floor": [sys.executable, __file__, "--floor", str(work / "floor.out")],
        "example": [*raytpu, str(EXAMPLE), "--out", str(work / "example.out")],
        "slices-1": [*raytpu, str(slices_config(1, work)), "--out", str(work / "slices-1.out")],
        "slices-32": [*raytpu, str(slices_config(32, work)), "--out", str(work / "slices-32.out")],
    }


def measure(repeats: int, warmup: int = 1) -> dict[str, list[float]]:
    """Wall seconds of each case, ``repeats`` times, interleaved (after ``warmup`` unrecorded rounds)."""
    times: dict[str, list[float]] = {}
    with tempfile.TemporaryDirectory(prefix="raytpu-bench-") as tmp:
        cases = commands(Path(tmp))
        for round_ in range(warmup + repeats):
            for name, cmd in cases.items():
                started = time.perf_counter()
                subprocess.run(cmd, cwd=REPO, check=True, capture_output=True)
                if round_ >= warmup:
                    times.setdefault(name, []).append(time.perf_counter() - started)
    return times


def summarize(times: dict[str, list[float]]) -> dict[str, object]:
    """Medians, ratios and whether each target is met."""
    medians = {name: statistics.median(values) for name, values in times.items()}
    ratios = {
        "example/floor": medians["example"] / medians["floor"],
        "slices-32/slices-1": medians["slices-32"] / medians["slices-1"],
    }
    return {
        "repeats": len(times["floor"]),
        "cpus": os.cpu_count(),
        "medians_s": medians,
        "samples_s": times,
        "ratios": ratios,
        "targets": TARGETS,
        "met": {k: ratios[k] <= TARGETS[k] for k in TARGETS},
    }


def table(result: dict[str, object]) -> str:
    """The result as a text table."""
    medians: dict[str, float] = result["medians_s"]  # type: ignore[assignment]
    samples: dict[str, list[float]] = result["samples_s"]  # type: ignore[assignment]
    ratios: dict[str, float] = result["ratios"]  # type: ignore[assignment]
    lines = [f"synth benchmark: {result['repeats']} interleaved repeats, {result['cpus']} CPUs, fresh process each",
             f"{'case':<12} {'median s':>9} {'min s':>7} {'max s':>7}"]
    for name, median in medians.items():
        lines.append(f"{name:<12} {median:>9.2f} {min(samples[name]):>7.2f} {max(samples[name]):>7.2f}")
    for name, ratio in ratios.items():
        verdict = "ok" if ratio <= TARGETS[name] else "MISSED"
        lines.append(f"{name:<19} ratio {ratio:.2f} (target <= {TARGETS[name]}) {verdict}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """Runs the benchmark (or, with --floor, only the floor app, which the benchmark runs as a process)."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeats", type=int, default=5, help="measured rounds (default 5)")
    parser.add_argument("--json", metavar="FILE", help="also write the figures as JSON")
    parser.add_argument("--check", action="store_true", help="exit 1 when a target is missed")
    parser.add_argument("--floor", metavar="OUTDIR", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.floor:
        floor_app(args.floor)
        return 0
    result = summarize(measure(args.repeats))
    print(table(result))
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2) + "\n")
    met: dict[str, bool] = result["met"]  # type: ignore[assignment]
    return 1 if args.check and not all(met.values()) else 0


if __name__ == "__main__":
    sys.exit(main())
