"""Benchmark: a team's small function from ``raytpu submit NAME --local`` to its first step, beside the same function
started with ``ray job submit`` by hand (a plain JaxTrainer driver), on one running emulated slice, side by side.

    .venv/bin/python bench/team_first_step.py [--repeats 3] [--json]

One emulated v6e 4x4 slice (4 hosts x 4 chips, as the demo) is started once (not timed) and stopped by PID at the
end. Each repeat runs both paths in turn (alternating which goes first) on the same cluster: the time from launching
the command to the function's first ``ray.train.report`` (rank 0 writes its wall time to a file: no log parsing),
and the time to the command's end. ``submit --local``'s own timeline (``--report``) says where its seconds went.
Prints p50 of each path, the ratio kit/hand in the same run, and the machine's load average (a shared machine's
figures are noisy).
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

from raytpu.local.slice import procs, startup, state

TRAIN = '''\
import os, time
import ray.train


def train_loop(config):
    import jax.numpy as jnp
    ctx = ray.train.get_context()
    for step in range(config["steps"]):
        loss = float(jnp.sum(jnp.ones((8, 8))) / (step + 1))
        ray.train.report({"step": step + 1, "loss": loss})
        if step == 0 and ctx.get_world_rank() == 0:
            with open(os.path.join(config["marks"], config["tag"]), "w") as f:
                f.write(repr(time.time()))
'''

HAND = '''\
import json, sys
import ray
from ray.train.v2.api.config import RunConfig, ScalingConfig
from ray.train.v2.jax import JaxTrainer
from lm.train import train_loop

ray.init()
config = json.loads(sys.argv[1])
JaxTrainer(train_loop, train_loop_config=config,
           scaling_config=ScalingConfig(use_tpu=True, topology="4x4", accelerator_type="TPU-V6E", num_workers=4,
                                        resources_per_worker={"TPU": 4, "CPU": 1}),
           run_config=RunConfig(name=config["tag"], storage_path=sys.argv[2])).fit()
print("hand run done")
'''

CONFIG = """\
project: my-ml-project
region: us-east5
cluster: {{name: ray-tpu}}
slices:
  - {{name: train, generation: v6e, topology: 4x4, machine_type: ct6e-standard-4t, zone: us-east5-b}}
workloads:
  - name: pretrain
    kind: train
    slice: train
    code: ./src
    train_loop: lm.train:train_loop
    train_config: {{steps: 2, marks: {marks}, tag: TAG}}
"""


def project(folder: Path, marks: Path) -> Path:
    """The team's project: a config and a code folder with the function (``TAG`` is set per run)."""
    for rel, text in {"src/lm/__init__.py": "", "src/lm/train.py": TRAIN, "src/hand.py": HAND,
                      "raytpu.yaml": CONFIG.format(marks=marks)}.items():
        (folder / rel).parent.mkdir(parents=True, exist_ok=True)
        (folder / rel).write_text(text)
    return folder / "raytpu.yaml"


def first_step_wall(marks: Path, tag: str) -> float | None:
    path = marks / tag
    return float(path.read_text()) if path.exists() else None


def kit(config: Path, cluster: state.LocalCluster, marks: Path) -> dict[str, Any]:
    """``raytpu submit pretrain --local`` with this repeat's tag; its timeline from ``--report``."""
    tag = f"k{secrets.token_hex(2)}"  # a --run-id: at most 6 characters
    config.write_text(CONFIG.format(marks=marks).replace("tag: TAG", f"tag: {tag}"))
    report = config.parent / f"{tag}.json"
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_AUTH")}
    started = time.time()
    done = subprocess.run([sys.executable, "-m", "raytpu", "submit", "pretrain", "--local", "--config", str(config),
                           "--dir", cluster.run_dir, "--run-id", tag, "--report", str(report)],
                          capture_output=True, text=True, timeout=600, env=env, cwd=config.parent)
    ended = time.time()
    first = first_step_wall(marks, tag)
    phases = {}
    if report.exists():
        phases = {r["phase"]: r["duration_s"] for r in json.loads(report.read_text())["timeline"]["phases"]
                  if r["at_s"] is not None}
    return {"exit": done.returncode, "first_step_s": None if first is None else round(first - started, 2),
            "total_s": round(ended - started, 2), "phases": phases,
            **({} if done.returncode == 0 else {"stderr": done.stderr[-800:], "stdout": done.stdout[-1500:]})}


def hand(config: Path, cluster: state.LocalCluster, marks: Path) -> dict[str, Any]:
    """``ray job submit --working-dir src -- PYTHON hand.py CONFIG STORAGE``: the function in a plain JaxTrainer (this
    interpreter, as ``submit --local`` puts it first on the job's PATH)."""
    tag = f"h{secrets.token_hex(2)}"
    train_config = {"steps": 2, "marks": str(marks), "tag": tag}
    env = {**os.environ, **cluster.ray_cli_env()}
    ray_cli = str(Path(sys.executable).with_name("ray"))
    started = time.time()
    done = subprocess.run([ray_cli, "job", "submit", "--working-dir", str(config.parent / "src"),
                           "--submission-id", tag, "--", sys.executable, "hand.py", json.dumps(train_config),
                           str(Path(cluster.run_dir) / "hand-checkpoints")],
                          capture_output=True, text=True, timeout=600, env=env, cwd=config.parent)
    ended = time.time()
    first = first_step_wall(marks, tag)
    return {"exit": done.returncode, "first_step_s": None if first is None else round(first - started, 2),
            "total_s": round(ended - started, 2),
            **({} if done.returncode == 0 else {"stderr": done.stderr[-800:], "stdout": done.stdout[-1500:]})}


def p50(runs: list[dict[str, Any]], key: str) -> float | None:
    values = [r[key] for r in runs if r.get(key) is not None]
    return round(statistics.median(values), 2) if values else None


def run(repeats: int) -> dict[str, Any]:
    from raytpu.config import load
    from raytpu.local.slice.from_config import config_slice_plan

    folder = Path(tempfile.mkdtemp(prefix="raytpu-bench-team-"))
    marks = folder / "marks"
    marks.mkdir()
    config = project(folder, marks)
    plan = config_slice_plan(load(str(config)))
    directory = folder / "cluster"
    load_before = os.getloadavg()
    cluster = startup.start(plan, 1, directory, owner="bench/team_first_step.py")
    out: dict[str, Any] = {"slice": f"{plan.generation} {plan.topology} ({plan.hosts} hosts)", "kit": [], "hand": [],
                           "loadavg_before": [round(x, 1) for x in load_before]}
    try:
        for i in range(repeats):
            order = [("kit", kit), ("hand", hand)] if i % 2 == 0 else [("hand", hand), ("kit", kit)]
            for name, fn in order:
                result = fn(config, cluster, marks)
                out[name].append(result)
                print(f"repeat {i + 1} {name}: {json.dumps(result)}", file=sys.stderr, flush=True)
    finally:
        procs.stop(directory)
        shutil.rmtree(folder, ignore_errors=True)
    out["loadavg_after"] = [round(x, 1) for x in os.getloadavg()]
    for name in ("kit", "hand"):
        out[f"{name}_first_step_p50_s"] = p50(out[name], "first_step_s")
        out[f"{name}_total_p50_s"] = p50(out[name], "total_s")
    if out["kit_first_step_p50_s"] and out["hand_first_step_p50_s"]:
        out["first_step_ratio"] = round(out["kit_first_step_p50_s"] / out["hand_first_step_p50_s"], 2)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    out = run(args.repeats)
    if args.json:
        print(json.dumps(out, indent=1))
    else:
        print(f"{out['slice']}; load average before {out['loadavg_before']}, after {out['loadavg_after']}")
        for name in ("kit", "hand"):
            print(f"  {name:<5} first step p50 {out[f'{name}_first_step_p50_s']}s, command p50 "
                  f"{out[f'{name}_total_p50_s']}s")
        print(f"  kit/hand first step: {out.get('first_step_ratio')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
