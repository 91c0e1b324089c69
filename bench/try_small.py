"""The team example tried small on the emulated slice: ``local up``, ``submit pretrain --local --set ...``, ``local
down``, with the whole cluster's peak memory (:class:`raytpu.local.slice.memory.PeakMemory`, PSS and RSS of every
process of this cluster) and each step's wall time. Issue 47.4: find ``--set`` values that fit a 2-core, 24 GiB machine.
The submit runs twice on the same slice: cold (the lock's venv is built in the run folder) and warm (found there).

    .venv/bin/python bench/try_small.py --set train_config.d_model=256 --set train_config.steps=20 ...
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

from raytpu.local.slice import state
from raytpu.local.slice.memory import PeakMemory

CONFIG = "examples/team_project/raytpu.yaml"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--set", action="append", default=[], dest="overrides", metavar="KEY=VALUE")
    args = parser.parse_args()
    prefix = f"{state.TMP_PREFIX}trysmall{os.getpid()}-"
    env = {**os.environ, state.ENV_TMP_PREFIX: prefix, "RAY_USAGE_STATS_ENABLED": "0"}
    raytpu = [sys.executable, "-m", "raytpu"]
    sets = [word for value in args.overrides for word in ("--set", value)]
    out: dict[str, object] = {"set": args.overrides}
    with tempfile.TemporaryDirectory() as run_dir, PeakMemory(tag_prefix=prefix) as memory:
        steps = {"up": [*raytpu, "local", "up", "--config", CONFIG, "--dir", run_dir],
                 "submit": [*raytpu, "submit", "pretrain", "--config", CONFIG, "--local", "--dir", run_dir, *sets]}
        steps["submit_warm"] = steps["submit"]
        try:
            for name, command in steps.items():
                start = time.monotonic()
                done = subprocess.run(command, env=env, check=False, capture_output=True, text=True)
                out[f"{name}_s"] = round(time.monotonic() - start, 1)
                out[f"{name}_rc"] = done.returncode
                if done.returncode:
                    out[f"{name}_stderr"] = done.stderr[-1500:]
                    out[f"{name}_stdout"] = done.stdout[-3000:]
                    break
        finally:
            subprocess.run([*raytpu, "local", "down", "--dir", run_dir], env=env, check=False, capture_output=True)
    out["peak_pss_gib"] = round(memory.peak_pss_bytes / 2**30, 2)
    out["peak_rss_gib"] = round(memory.peak_rss_bytes / 2**30, 2)
    print(json.dumps(out, indent=2))
    return 0 if out.get("submit_rc") == 0 and out.get("submit_warm_rc") == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
