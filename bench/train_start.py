"""Benchmark: where the train workload's start goes, process by process (issue 51 item 2, the demo's trainer phase).

    .venv/bin/python bench/train_start.py [--repeats 2] [--steps 30] [--json]

Brings up the example's emulated train slice once, runs the train workload's driver on it ``--repeats`` times (as
``raytpu demo`` does: ``--steps``, a checkpoint every third of them), and for each run lists every Ray worker process
the run started, from the Ray session logs: when its core worker began (the first line of its
``python-core-worker-*.log``), on which node (``head`` or host ``i``) and what it runs (the actor's class or the task's
name, from ``worker-*.out``), relative to the driver's start, beside the driver's own stamps (``reserved`` is when
the training function started on the workers). Each process Ray starts is a new Python process that imports what its
actor needs; the table shows which wait for each other. The cluster is stopped by PID at the end, whatever failed.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path
from typing import Any

from raytpu.config import load
from raytpu.core.common import timeline
from raytpu.local.running import jobs
from raytpu.local.slice import procs, startup, state
from raytpu.local.slice.from_config import config_slice_plan

EXAMPLE = Path(__file__).resolve().parents[1] / "raytpu.example.yaml"
FIRST_LINE = re.compile(r"^\[(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}) ")
NAME = re.compile(r":(actor_name|task_name):([\w.]+)")


def processes(temp_dir: Path, since: float) -> list[dict[str, Any]]:
    """Every worker process whose core worker started after ``since`` (epoch s): start, node, what it runs."""
    found = []
    for log in temp_dir.glob("*/session_2*/logs/python-core-worker-*.log"):  # not session_latest, its link
        head = FIRST_LINE.match(log.open(errors="replace").readline())
        if head is None:
            continue
        started = datetime.strptime(head.group(1), "%Y-%m-%d %H:%M:%S,%f").timestamp()  # Ray logs local time
        if started < since:
            continue
        pid = log.stem.rsplit("_", 1)[1]
        outs = list(log.parent.glob(f"worker-*-{pid}.out"))
        named = NAME.search(outs[0].read_text(errors="replace")) if outs else None
        node = int(log.parts[-4].split("-", 1)[0])
        found.append({"at_s": round(started - since, 2), "node": "head" if node == 0 else f"host {node - 1}",
                      "runs": named.group(2) if named else "(idle worker)"})
    return sorted(found, key=lambda p: p["at_s"])


def one_run(cluster: state.LocalCluster, folder: Path, steps: int) -> dict[str, Any]:
    """The train driver once; its process starts and stamps relative to its start."""
    started = time.time()
    done = jobs.run_workload(cluster, "train", "--storage-path", str(folder), "--steps", str(steps),
                             "--checkpoint-every", str(max(steps // 3, 1)), timeout_s=600)
    took = time.time() - started
    stamps = {s["phase"]: round(s["wall"] - started, 2) for s in timeline.parse_stamp_lines(done.stdout)}
    return {"exit": done.returncode, "wall_s": round(took, 1), "stamps": stamps,
            "processes": processes(Path(cluster.temp_dir), started)}


def _print(index: int, run: dict[str, Any]) -> None:
    print(f"run {index + 1}: exit {run['exit']}, {run['wall_s']} s; stamps (s after the driver started): "
          + ", ".join(f"{k} {v}" for k, v in run["stamps"].items()))
    print(f"  {'at s':>6} | {'node':<7} | process")
    for p in run["processes"]:
        print(f"  {p['at_s']:6.2f} | {p['node']:<7} | {p['runs']}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    for flag in ("repeats", "steps"):
        if getattr(args, flag) < 1:
            print(f"error: --{flag}: {getattr(args, flag)!r} must be at least 1; valid: 1, 2, ...", file=sys.stderr)
            return 2
    plan = config_slice_plan(load(str(EXAMPLE)))
    with tempfile.TemporaryDirectory(prefix="raytpu-bench-train-start-") as directory:
        try:
            cluster = startup.start(plan, 1, directory, progress=lambda line: print(line, file=sys.stderr))
            runs = [one_run(cluster, Path(directory) / f"checkpoints-{i}", args.steps) for i in range(args.repeats)]
        finally:
            procs.stop(directory)
    if args.json:
        print(json.dumps({"runs": runs}, indent=2))
    else:
        for i, run in enumerate(runs):
            _print(i, run)
    return 0 if all(r["exit"] == 0 for r in runs) else 1


if __name__ == "__main__":
    raise SystemExit(main())
