"""Benchmark of ``raytpu demo`` with its train driver started during the smoke check (``RAYTPU_DEMO_OVERLAP=1``) beside
the same demo with it started after the smoke (``RAYTPU_DEMO_OVERLAP=0``), alternating, in one run.

    .venv/bin/python bench/demo_overlap.py [--repeats 2] [--json]
    .venv/bin/python bench/demo_overlap.py --before /tmp/base   # this tree beside another checkout (a git worktree
                                                                 # of an earlier commit), each with its own defaults

Each repeat runs both (order alternating) with ``--no-synth`` into a run directory of its own; prints the demo's wall
time, its timeline's phase durations (slice start, smoke check, trainer's start, compile, first step), the seconds
after the slice was up (what the overlap can change; the slice's start is the same work in both and the noisiest
part on a shared machine) and the ratios overlapped/serial of the p50s and of each pair, with the machine's load
average (a shared machine's figures are noisy).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

PHASES = ("ray_joined", "reserved", "smoke_checked", "trainer_started", "compiled", "first_step", "finished")


def demo(overlap: bool, folder: Path, before: str | None = None, synth: bool = False) -> dict[str, Any]:
    """One demo: with ``before``, "overlapped" is this tree and "serial" the checkout ``before`` (first on
    ``PYTHONPATH`` of the demo and every Ray process it starts), each with its own default."""
    report = folder / f"demo-{int(overlap)}.json"
    env = {**os.environ, "RAYTPU_DEMO_OVERLAP": "1" if overlap else "0"}
    if before is not None:
        env.pop("RAYTPU_DEMO_OVERLAP")
        if not overlap:
            env["PYTHONPATH"] = before
    started = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "raytpu", "demo", *(() if synth else ("--no-synth",)),
                           "--report", str(report), "--dir", str(folder / "run"), "--out", str(folder / "cdktf.out")],
                          capture_output=True, text=True, timeout=900, env=env,
                          cwd=before if before is not None and not overlap else None)
    took = time.monotonic() - started
    out: dict[str, Any] = {"exit": done.returncode, "wall_s": round(took, 1)}
    if report.exists():
        document = json.loads(report.read_text())
        out["phases"] = {r["phase"]: r["duration_s"] for r in document["timeline"]["phases"] if r["phase"] in PHASES}
        out["final_loss"] = (document.get("train") or {}).get("final_loss")
        out["peak_memory_mib"] = document.get("peak_memory_mib")
        out["after_slice_s"] = round(sum(v for k, v in out["phases"].items() if k != "ray_joined"), 1)
    if done.returncode:
        out["stderr"] = done.stderr[-1500:]
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--before", default=None, help="a checkout of an earlier commit: 'serial' runs it, "
                        "'overlapped' this tree, each with its defaults (before vs after)")
    parser.add_argument("--synth", action="store_true", help="the stacks synthesized as in `make run` (default "
                        "--no-synth: the synth is the same work in both)")
    args = parser.parse_args(argv)
    folder = Path(tempfile.mkdtemp(prefix="raytpu-bench-demo-"))
    runs: dict[str, list[dict[str, Any]]] = {"overlapped": [], "serial": []}
    load_before = [round(x, 1) for x in os.getloadavg()]
    try:
        for i in range(args.repeats):
            for overlap in ((True, False) if i % 2 == 0 else (False, True)):
                result = demo(overlap, folder, args.before, args.synth)
                runs["overlapped" if overlap else "serial"].append(result)
                print(f"repeat {i + 1} {'overlapped' if overlap else 'serial'}: {json.dumps(result)}",
                      file=sys.stderr, flush=True)
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    out: dict[str, Any] = {"runs": runs, "loadavg_before": load_before, "before": args.before,
                           "loadavg_after": [round(x, 1) for x in os.getloadavg()]}
    for name, got in runs.items():
        for key, label in (("wall_s", "p50_s"), ("after_slice_s", "after_slice_p50_s")):
            values = [r[key] for r in got if r["exit"] == 0 and r.get(key) is not None]
            out[f"{name}_{label}"] = round(statistics.median(values), 1) if values else None
    if out["overlapped_p50_s"] and out["serial_p50_s"]:
        out["ratio"] = round(out["overlapped_p50_s"] / out["serial_p50_s"], 2)
    if out["overlapped_after_slice_p50_s"] and out["serial_after_slice_p50_s"]:
        out["after_slice_ratio"] = round(out["overlapped_after_slice_p50_s"] / out["serial_after_slice_p50_s"], 2)
    out["pair_after_slice_ratios"] = [round(a["after_slice_s"] / b["after_slice_s"], 2)
                                      for a, b in zip(runs["overlapped"], runs["serial"], strict=False)
                                      if a.get("after_slice_s") and b.get("after_slice_s")]
    if args.json:
        print(json.dumps(out, indent=1))
    else:
        print(f"load average before {out['loadavg_before']}, after {out['loadavg_after']}")
        for name, got in runs.items():
            print(f"  {name:<10} p50 {out[f'{name}_p50_s']}s; phases: " +
                  "; ".join(json.dumps(r.get("phases")) for r in got))
        print(f"  overlapped/serial: wall {out.get('ratio')}, after the slice was up {out.get('after_slice_ratio')} "
              f"(each pair: {out['pair_after_slice_ratios']})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
