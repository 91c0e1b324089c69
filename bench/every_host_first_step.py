"""Benchmark: a small multi-host JAX program to its first step through ``raytpu submit NAME --local`` with ``run_on:
every_host``, beside the same program started by hand as one process per emulated host (coordinator address and
process ids given by hand), side by side in one run.

    .venv/bin/python bench/every_host_first_step.py [--max-pairs 8] [--agree 0.15] [--json]

One emulated v6e 4x4 slice (4 hosts x 4 chips) is started once (not timed) and stopped by PID at the end. Each pair
runs both paths in turn (alternating which goes first): the time from launching the command to the program's first
step on every host (a jitted sum over all 16 devices; process 0 writes its wall time to a file: no log parsing), and
the command's end. Pairs run until the last 3 pairs' ratios (kit/hand) agree within ``--agree`` of their median, at
most ``--max-pairs``. Prints each pair, the median ratio and the machine's load average.
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from raytpu.local.slice import procs as local_procs
from raytpu.local.slice import startup, state

PROGRAM = '''\
import os, sys, time
import jax
import jax.numpy as jnp
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

args = dict(a.split("=", 1) for a in sys.argv[1:])
if "coordinator" in args:  # by hand
    jax.distributed.initialize(args["coordinator"], int(args["processes"]), int(args["process"]))
else:  # on the slice: from the environment
    jax.distributed.initialize()
mesh = Mesh(jax.devices(), ("d",))
ones = jax.make_array_from_callback((jax.device_count(),), NamedSharding(mesh, P("d")), lambda i: jnp.ones((1,)))
total = float(jax.jit(jnp.sum, out_shardings=NamedSharding(mesh, P()))(ones))
if jax.process_index() == 0:
    with open(os.path.join(args["marks"], args["tag"]), "w") as f:
        f.write(repr(time.time()))
print("step", total, flush=True)
'''

CONFIG = """\
project: my-ml-project
region: us-east5
cluster: {{name: ray-tpu}}
slices:
  - {{name: train, generation: v6e, topology: 4x4, machine_type: ct6e-standard-4t, zone: us-east5-b}}
workloads:
  - name: plain
    kind: job
    slice: train
    code: ./src
    entrypoint: python step.py marks={marks} tag={tag}
    run_on: every_host
"""


def first_step_wall(marks: Path, tag: str) -> float | None:
    path = marks / tag
    return float(path.read_text()) if path.exists() else None


def kit(folder: Path, cluster: state.LocalCluster, marks: Path) -> dict[str, Any]:
    """``raytpu submit plain --local`` of the every-host program."""
    tag = f"k{secrets.token_hex(2)}"
    config = folder / "raytpu.yaml"
    config.write_text(CONFIG.format(marks=marks, tag=tag))
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_AUTH")}
    started = time.time()
    done = subprocess.run([sys.executable, "-m", "raytpu", "submit", "plain", "--local", "--config", str(config),
                           "--dir", cluster.run_dir, "--run-id", tag], capture_output=True, text=True, timeout=600,
                          env=env, cwd=folder)
    return result(done, started, first_step_wall(marks, tag))


def hand(folder: Path, cluster: state.LocalCluster, marks: Path) -> dict[str, Any]:
    """Four processes of this interpreter, each given the coordinator, the process count and its id, 4 CPU devices
    each (what the emulated hosts give JAX), started at once."""
    tag = f"h{secrets.token_hex(2)}"
    with __import__("socket").socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    base = {k: v for k, v in os.environ.items() if not k.startswith(("RAY_", "RAYTPU_"))}
    env = {**base, "JAX_PLATFORMS": "cpu", "JAX_NUM_CPU_DEVICES": "4"}
    started = time.time()
    procs = [subprocess.Popen([sys.executable, "step.py", f"coordinator=127.0.0.1:{port}", "processes=4",
                               f"process={i}", f"marks={marks}", f"tag={tag}"], cwd=folder / "src", env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) for i in range(4)]
    outs = [p.communicate(timeout=600)[0] for p in procs]
    code = max(p.returncode for p in procs)
    done = subprocess.CompletedProcess(["hand"], code, outs[0], "\n".join(outs))
    return result(done, started, first_step_wall(marks, tag))


def result(done: subprocess.CompletedProcess[str], started: float, first: float | None) -> dict[str, Any]:
    return {"exit": done.returncode, "first_step_s": None if first is None else round(first - started, 2),
            "total_s": round(time.time() - started, 2),
            **({} if done.returncode == 0 else {"stderr": done.stderr[-800:], "stdout": done.stdout[-800:]})}


def agreed(ratios: list[float], within: float) -> bool:
    """The last three ratios lie within ``within`` of their median."""
    if len(ratios) < 3:
        return False
    last = ratios[-3:]
    mid = statistics.median(last)
    return all(abs(r - mid) <= within * mid for r in last)


def run(max_pairs: int, within: float) -> dict[str, Any]:
    from raytpu.core.tpu.plan import plan_slice

    folder = Path(tempfile.mkdtemp(prefix="raytpu-bench-every-host-"))
    marks = folder / "marks"
    marks.mkdir()
    (folder / "src").mkdir()
    (folder / "src" / "step.py").write_text(PROGRAM)
    plan = plan_slice("v6e", "4x4", "ct6e-standard-4t")
    load_before = os.getloadavg()
    cluster = startup.start(plan, 1, folder / "cluster", owner="bench/every_host_first_step.py")
    out: dict[str, Any] = {"slice": "v6e 4x4 (4 hosts x 4 chips)", "pairs": [],
                           "loadavg_before": [round(x, 1) for x in load_before]}
    ratios: list[float] = []
    try:
        for i in range(max_pairs):
            order = [("kit", kit), ("hand", hand)] if i % 2 == 0 else [("hand", hand), ("kit", kit)]
            pair = {name: fn(folder, cluster, marks) for name, fn in order}
            out["pairs"].append(pair)
            if pair["kit"]["first_step_s"] and pair["hand"]["first_step_s"]:
                ratios.append(round(pair["kit"]["first_step_s"] / pair["hand"]["first_step_s"], 2))
            print(f"pair {i + 1}: kit {pair['kit']['first_step_s']}s (command {pair['kit']['total_s']}s), hand "
                  f"{pair['hand']['first_step_s']}s (command {pair['hand']['total_s']}s), ratio "
                  f"{ratios[-1] if ratios else None}", file=sys.stderr, flush=True)
            if agreed(ratios, within):
                break
    finally:
        local_procs.stop(folder / "cluster")
        shutil.rmtree(folder, ignore_errors=True)
    out["loadavg_after"] = [round(x, 1) for x in os.getloadavg()]
    out["ratios"] = ratios
    out["agreed"] = agreed(ratios, within)
    out["first_step_ratio"] = statistics.median(ratios[-3:]) if ratios else None
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--max-pairs", type=int, default=8)
    parser.add_argument("--agree", type=float, default=0.15, help="how close the last 3 ratios must be")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    out = run(args.max_pairs, args.agree)
    if args.json:
        print(json.dumps(out, indent=1))
    else:
        print(f"{out['slice']}; load average before {out['loadavg_before']}, after {out['loadavg_after']}")
        print(f"  kit/hand first step, per pair: {out['ratios']} (last 3 agree: {out['agreed']})")
        print(f"  median of the last 3: {out['first_step_ratio']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
