"""Batch inference rows/s through the kit (``workloads/batch.py``) beside the same Ray Data LLM pipeline written by
hand, on the same emulated slice, interleaved (kit, hand, kit, hand, ...), each run a fresh engine. Target: kit >= 0.9x.

Both read the same JSONL prompts, run vLLM's CPU build with the tiny offline model and the same engine arguments
(the kit's CPU twin's: :data:`raytpu.core.data.CPU_TWIN`), and write Parquet; both times include the engine's start
(Ray Data is lazy). Run in ``.venv-serve``::

    .venv-serve/bin/python bench/data.py [--rows 64] [--repeats 2] [--max-tokens 16] [--json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from raytpu import local
from raytpu.core import data, kinds
from raytpu.core.spec import SliceSpec, WorkloadSpec
from raytpu.local.connection import speak_auth
from raytpu.workloads import batch, tiny_llm

SLICE = SliceSpec.create(name="batch", generation="v6e", topology="2x4", zone="us-east5-b")


def hand_written(source: str, output: str, model: str, max_tokens: int) -> dict[str, Any]:
    """Ray Data LLM as its documentation writes it: read, build_processor, materialize, write."""
    import ray.data
    from ray.data.llm import build_processor, vLLMEngineProcessorConfig

    config = vLLMEngineProcessorConfig(
        model_source=model, batch_size=data.DEFAULT_BATCH_SIZE, concurrency=1, chat_template_stage=False,
        engine_kwargs=dict(data.CPU_TWIN["engine_kwargs"]), runtime_env={"env_vars": dict(data.CPU_TWIN["env_vars"])},
        # without it Ray Data LLM asks for num_gpus = TP x PP (vLLMEngineStage.post_init), which no CPU host has
        placement_group_config={"bundles": [{"CPU": 1}]})
    processor = build_processor(
        config,
        preprocess=lambda row: {"prompt": row["prompt"], "sampling_params": {
            "temperature": 0.0, "max_tokens": max_tokens, "ignore_eos": True}},
        postprocess=lambda row: {"id": row["id"], "prompt": row["prompt"], "generated_text": row["generated_text"],
                                 "num_generated_tokens": row["num_generated_tokens"]})
    ds = ray.data.read_json(source, lines=True)
    t0 = time.monotonic()
    out = processor(ds).materialize()
    wall = time.monotonic() - t0
    rows = out.count()
    out.write_parquet(output)
    return {"rows_out": rows, "wall_s": wall, "rows_per_s": rows / wall,
            "tokens_per_s": int(out.sum("num_generated_tokens")) / wall}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rows", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--max-tokens", type=int, default=16)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    model = str(tiny_llm.ensure().path)
    with tempfile.TemporaryDirectory(prefix="bench-data-") as tmp:
        root = Path(tmp)
        source = root / "prompts.jsonl"
        source.write_text("".join(json.dumps({"id": i, "prompt": f"question {i}: what is {i} plus {i}?"}) + "\n"
                                  for i in range(args.rows)))
        cluster = local.start(SLICE.plan, 1, root / "cluster")
        runs: dict[str, list[dict[str, Any]]] = {"kit": [], "hand": []}
        try:
            speak_auth(cluster)
            import ray

            ray.init(address=cluster.address, log_to_driver=False)
            for i in range(args.repeats):
                work = WorkloadSpec(name="batch", kind=kinds.kind("batch"), slice=SLICE, input=str(source),
                                    output=str(root / f"kit-{i}"))
                runs["kit"].append(batch.run(work, cpu_model=model, max_tokens=args.max_tokens))
                runs["hand"].append(hand_written(str(source), str(root / f"hand-{i}"), model, args.max_tokens))
            ray.shutdown()
        finally:
            local.stop(root / "cluster")
    ratios = [k["rows_per_s"] / h["rows_per_s"] for k, h in zip(runs["kit"], runs["hand"], strict=True)]
    result = {"rows": args.rows, "max_tokens": args.max_tokens, "repeats": args.repeats,
              "kit_rows_per_s": [round(r["rows_per_s"], 3) for r in runs["kit"]],
              "hand_rows_per_s": [round(r["rows_per_s"], 3) for r in runs["hand"]],
              "ratio_median": round(statistics.median(ratios), 3), "ratios": [round(r, 3) for r in ratios],
              "target": 0.9}
    print(json.dumps(result, sort_keys=True) if args.json else
          f"kit {result['kit_rows_per_s']} rows/s, hand-written {result['hand_rows_per_s']} rows/s: "
          f"kit/hand median {result['ratio_median']}x (target >= 0.9x)")
    return 0 if result["ratio_median"] >= 0.9 else 1


if __name__ == "__main__":
    sys.exit(main())
