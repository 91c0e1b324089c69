"""The team example's training step (examples/team_project/src/lm: forward, backward, AdamW) on the chip this process
sees, as a plain JAX program: step time, tokens/s and model FLOP utilization.

    PYTHONPATH=examples/team_project/src python bench/team_step.py [--json] [--only NAME ...]

MFU = model FLOPs per step / step time / peak, peak = 197e12 bf16 FLOP/s (TPU v5e). Model FLOPs per step =
6 x matmul params x tokens + 12 x layers x d_model x seq^2 x batch (``lm.model.model_flops_per_step``: matmul params
leave out the embedding and position lookups; attention is counted without its causal half, as PaLM's MFU does).
Each configuration runs in a fresh jit; the first two steps (compile, warm-up) are not timed.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "examples" / "team_project" / "src"))

PEAK_BF16_FLOPS = 197e12
"""TPU v5e's peak bf16 matmul rate per chip (https://cloud.google.com/tpu/docs/v5e)."""

BASE = {"seq_len": 2048, "vocab": 32768, "steps": 1000, "warmup": 100, "lr": 3e-4}
CONFIGS: dict[str, dict[str, Any]] = {
    "371m-einsum": BASE | {"d_model": 1024, "n_layers": 24, "n_heads": 8, "batch_size": 8, "attention": "einsum",
                           "remat": "dots"},
    "371m-flash": BASE | {"d_model": 1024, "n_layers": 24, "n_heads": 8, "batch_size": 8, "attention": "flash",
                          "remat": "dots"},
    "371m-splash": BASE | {"d_model": 1024, "n_layers": 24, "n_heads": 8, "batch_size": 8, "attention": "splash",
                           "remat": "dots"},
    "557m-flash-full": BASE | {"d_model": 1536, "n_layers": 16, "n_heads": 12, "batch_size": 8,
                               "attention": "flash", "remat": "full"},
    "843m-flash-full": BASE | {"d_model": 2048, "n_layers": 14, "n_heads": 16, "batch_size": 8, "attention": "flash",
                               "remat": "full"},
}


def measure(name: str, given: dict[str, Any], steps: int) -> dict[str, Any]:
    """One configuration's timed steps on the default device."""
    import jax
    import numpy as np
    from lm import model, step
    from lm.config import resolve
    from lm.data import Batches

    c = resolve(given)
    mesh = step.make_mesh(c, jax.devices()[:1])
    params, opt_state, p_sharding, o_sharding = step.init_state(c, mesh)
    train_step = step.make_train_step(c, mesh, p_sharding, o_sharding)
    batches = Batches(c, step.batch_sharding(mesh))
    data = [batches.next() for _ in range(2)]
    started = time.perf_counter()
    for i in range(2):
        params, opt_state, loss = train_step(params, opt_state, data[i])
    jax.block_until_ready(loss)
    compile_s = time.perf_counter() - started
    times = []
    for i in range(steps):
        started = time.perf_counter()
        params, opt_state, loss = train_step(params, opt_state, data[i % 2])
        jax.block_until_ready(loss)
        times.append(time.perf_counter() - started)
    step_s = float(np.median(times))
    flops = model.model_flops_per_step(c, c.batch_size)
    return {"name": name, "params": model.param_count(params), "matmul_params": model.matmul_params(c),
            "attention": model.attention_kind(c), "remat": c.remat, "batch": c.batch_size, "seq": c.seq_len,
            "d_model": c.d_model, "layers": c.n_layers, "heads": c.n_heads, "head_dim": c.head_dim,
            "compile_s": round(compile_s, 1), "step_s": round(step_s, 4), "step_s_min": round(min(times), 4),
            "tokens_per_s": round(c.batch_size * c.seq_len / step_s), "model_tflops_per_step": round(flops / 1e12, 2),
            "mfu": round(flops / step_s / PEAK_BF16_FLOPS, 4), "loss": float(loss),
            "device": str(jax.devices()[0].device_kind)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="one JSON list on stdout")
    parser.add_argument("--only", nargs="*", choices=sorted(CONFIGS), help="these configurations (default: all)")
    parser.add_argument("--steps", type=int, default=10, help="timed steps per configuration")
    args = parser.parse_args()
    results = []
    for name in args.only or CONFIGS:
        try:
            result = measure(name, CONFIGS[name], args.steps)
        except Exception as exc:  # one configuration out of memory must not lose the others' figures
            result = {"name": name, "error": f"{type(exc).__name__}: {str(exc)[:300]}"}
        results.append(result)
        print(json.dumps(result), file=sys.stderr, flush=True)
    if args.json:
        print(json.dumps(results, indent=1))
    else:
        for r in results:
            print(r["name"], r.get("error") or f"{r['step_s']*1e3:.0f} ms/step {r['tokens_per_s']} tok/s "
                  f"MFU {r['mfu']:.1%}")
    return 0 if all("error" not in r for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
