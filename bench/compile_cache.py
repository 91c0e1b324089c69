"""JAX's persistent compilation cache, cold vs warm, side by side in one run: the team example's training step
(examples/team_project/src/lm: forward, backward, AdamW) compiled by a cold process into an empty cache folder, then
by a warm process over the same folder. JAX only (no Ray, no kit): runs unchanged on a TPU chip or on CPU.

    python bench/compile_cache.py --out DIR [--preset auto|small|example]

Each process prints one JSON line (``compile_s``: XLA compile seconds, or loads from the cache, from JAX's own
``/jax/core/compile/backend_compile_duration`` events; ``hits``/``misses``: ``/jax/compilation_cache/cache_hits`` and
``cache_misses``; ``first_step_s``: wall time to the first step's result, tracing included), then the parent prints
``{"cold_s", "warm_s", "ratio", "hits", "misses", ...}`` (hits and misses per process). Presets: ``small`` is the
example's defaults (CPU seconds), ``example`` the example's ``pretrain`` model (examples/team_project/raytpu.yaml) at
batch 8 for one chip; ``auto`` picks ``example`` on TPU.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
PRESETS: dict[str, dict[str, Any]] = {
    "small": {},
    "example": {"batch_size": 8, "seq_len": 2048, "d_model": 1024, "n_heads": 8, "n_layers": 24, "vocab": 32768,
                "remat": "dots", "attention": "auto"},
}
EVENTS = {"compile": "/jax/core/compile/backend_compile_duration", "hit": "/jax/compilation_cache/cache_hits",
          "miss": "/jax/compilation_cache/cache_misses"}
"""JAX 0.10.2: ``jax._src.dispatch.BACKEND_COMPILE_EVENT``; ``jax._src.compiler.compile_or_get_cached``;
``jax._src.compilation_cache.put_executable_and_time``."""


def one_process(cache: str, preset: str) -> dict[str, Any]:
    """Compiles and runs the first step once, with the persistent cache at ``cache`` (every entry kept: no time or
    size floor); what JAX's monitoring events said."""
    import jax
    import jax.monitoring

    jax.config.update("jax_compilation_cache_dir", cache)
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
    jax.config.update("jax_persistent_cache_min_entry_size_bytes", -1)
    seen = {"compile_s": 0.0, "compiles": 0, "hits": 0, "misses": 0}

    def on_duration(event: str, duration_secs: float, **_: str | int) -> None:
        if event == EVENTS["compile"]:
            seen["compile_s"] += duration_secs
            seen["compiles"] += 1

    def on_event(event: str, **_: str | int) -> None:
        seen["hits"] += event == EVENTS["hit"]
        seen["misses"] += event == EVENTS["miss"]

    jax.monitoring.register_event_duration_secs_listener(on_duration)
    jax.monitoring.register_event_listener(on_event)
    sys.path.insert(0, str(ROOT / "examples" / "team_project" / "src"))
    from lm import step
    from lm.config import resolve
    from lm.data import Batches

    if preset == "auto":
        preset = "example" if jax.devices()[0].platform == "tpu" else "small"
    c = resolve(PRESETS[preset])
    started = time.perf_counter()
    mesh = step.make_mesh(c, jax.devices()[:1])
    params, opt_state, p_sharding, o_sharding = step.init_state(c, mesh)
    train_step = step.make_train_step(c, mesh, p_sharding, o_sharding)
    batch = Batches(c, step.batch_sharding(mesh)).next()
    params, opt_state, loss = train_step(params, opt_state, batch)
    jax.block_until_ready(loss)
    return {**seen, "compile_s": round(seen["compile_s"], 3), "first_step_s": round(time.perf_counter() - started, 3),
            "preset": preset, "device": str(jax.devices()[0].device_kind), "jax": jax.__version__}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True, help="folder for the cache (emptied first) and result.json")
    parser.add_argument("--preset", choices=["auto", *PRESETS], default="auto")
    parser.add_argument("--child", choices=["cold", "warm"], help=argparse.SUPPRESS)
    args = parser.parse_args()
    out = Path(args.out).resolve()
    cache = out / "jax-cache"
    if args.child:
        print(json.dumps({"process": args.child, **one_process(str(cache), args.preset)}), flush=True)
        return 0
    if cache.exists() and any(cache.iterdir()):
        import shutil

        shutil.rmtree(cache)  # a cold process needs an empty cache
    cache.mkdir(parents=True, exist_ok=True)
    runs: dict[str, dict[str, Any]] = {}
    for which in ("cold", "warm"):
        done = subprocess.run([sys.executable, __file__, "--out", str(out), "--preset", args.preset,
                               "--child", which], capture_output=True, text=True, env=os.environ.copy())
        if done.returncode != 0:
            print(done.stderr[-3000:], file=sys.stderr)
            return 1
        runs[which] = json.loads(done.stdout.strip().splitlines()[-1])
        print(json.dumps(runs[which]), flush=True)
    cold, warm = runs["cold"], runs["warm"]
    result = {"cold_s": cold["compile_s"], "warm_s": warm["compile_s"],
              "ratio": round(warm["compile_s"] / cold["compile_s"], 3) if cold["compile_s"] else None,
              "hits": {"cold": cold["hits"], "warm": warm["hits"]},
              "misses": {"cold": cold["misses"], "warm": warm["misses"]},
              "first_step_s": {"cold": cold["first_step_s"], "warm": warm["first_step_s"]},
              "preset": cold["preset"], "device": cold["device"], "jax": cold["jax"],
              "cache_files": sum(1 for _ in cache.iterdir())}
    (out / "result.json").write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps(result), flush=True)
    return 0 if warm["hits"] > 0 else 1


if __name__ == "__main__":
    sys.exit(main())
