"""A team's requirements, cold and warm (issue 47.1), side by side in one run:

- ``resolve``: the lock against the job image's pins, empty lock cache (uv, PyPI) vs the cache (no uv);
- ``venv``: the venv per lock built from uv's wheel cache (what Ray's ``uv`` runtime env does on every host at every
  start, from a wheel cache at best) vs found built (nothing installed: what an image per lock costs at start);
- ``submit`` (with ``--dir`` of a running emulated slice, ``raytpu local up``): ``raytpu submit NAME --local`` of a
  small held-out project until its train_loop's first report, cold (empty caches, no venv) vs warm.

    .venv/bin/python bench/requirements.py [--packages optax] [--dir RUN_DIR] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from raytpu.images import team
from raytpu.teamcode import envs, requirements

CONFIG = """\
project: my-ml-project
region: us-east5
cluster: {name: ray-tpu}
slices:
  - {name: train, generation: v6e, topology: 2x4, machine_type: ct6e-standard-4t, zone: us-east5-b, count: 2}
workloads:
  - name: benchreqs
    kind: train
    slice: train
    code: ./src
    requirements: requirements.txt
    train_loop: bench_lm.train:train_loop
    train_config: {steps: 1}
"""
TRAIN = "import {module}\nimport ray.train\n\n\ndef train_loop(config):\n    ray.train.report({{'step': 1}})\n"


def timed(fn: object) -> tuple[float, object]:
    start = time.perf_counter()
    out = fn()  # type: ignore[operator]
    return time.perf_counter() - start, out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--packages", nargs="+", default=["optax"])
    parser.add_argument("--module", default="optax", help="what the bench train_loop imports")
    parser.add_argument("--dir", help="run folder of a running emulated slice: also time submit --local")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    figures: dict[str, float] = {}
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        src = root / "src"
        (src / "bench_lm").mkdir(parents=True)
        (src / "bench_lm" / "__init__.py").write_text("")
        (src / "bench_lm" / "train.py").write_text(TRAIN.format(module=args.module))
        (src / "requirements.txt").write_text("\n".join(args.packages) + "\n")
        (root / "raytpu.yaml").write_text(CONFIG)
        cache = root / "locks"
        image = team.base_lock()
        figures["resolve_cold_s"], lock = timed(lambda: requirements.resolve("r", src, "requirements.txt",
                                                                            image=image, cache=cache))
        figures["resolve_warm_s"], _ = timed(lambda: requirements.resolve("r", src, "requirements.txt", image=image,
                                                                         cache=cache))
        assert isinstance(lock, requirements.Lock)
        figures["venv_install_s"], _ = timed(lambda: envs.ensure(root / "run", lock))
        figures["venv_found_s"], _ = timed(lambda: envs.ensure(root / "run", lock))
        figures["extras"] = len(lock.extras)
        if args.dir:
            env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_AUTH")} | {
                "XDG_CACHE_HOME": str(root / "xdg")}

            def submit(run_id: str) -> None:
                done = subprocess.run([sys.executable, "-m", "raytpu", "submit", "benchreqs", "--local", "--wait",
                                       "--config", str(root / "raytpu.yaml"), "--dir", args.dir, "--run-id",
                                       run_id], capture_output=True, text=True, env=env, cwd=root, check=False)
                if done.returncode != 0:
                    raise SystemExit(f"submit {run_id}: exit {done.returncode}: {done.stderr[-2000:]}")

            envs_dir = Path(args.dir) / "envs" / lock.digest
            if envs_dir.exists():
                import shutil

                shutil.rmtree(envs_dir)
            stamp = f"{int(time.time()) % 36**4:x}"[-4:]
            figures["submit_cold_s"], _ = timed(lambda: submit(f"bc{stamp}"))
            figures["submit_warm_s"], _ = timed(lambda: submit(f"bw{stamp}"))
    if args.json:
        print(json.dumps(figures))
    else:
        for key, value in figures.items():
            print(f"{key:16} {value:8.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
