"""Batch inference rows/s through the kit (``workloads/batch.py``) beside the same Ray Data LLM pipeline written by
hand, on the same emulated slice, in pairs whose order alternates (kit-hand, hand-kit, ...: whichever runs first in a
pair meets a colder machine), each run a fresh engine. Target: the median of the per-pair kit/hand ratios >= 0.9x;
the spread (min-max) says how much of a gap is noise.

Both read the same JSONL prompts, run vLLM's CPU build with the tiny offline model and the same engine arguments
(the kit's CPU twin's: :data:`raytpu.core.specs.runtime.data.CPU_TWIN`), the same greedy sampling and no chat template,
and write Parquet as rows are answered. Both time the same span, the streaming write (read, engine start, answers,
write: Ray Data is lazy); ``call_s`` is each whole call (the kit also reads its input's schema and counts its rows
first, and tallies what it wrote after, in one pass).
``--stages`` adds each run's operators: first start and last end after the first operator's start, and their summed
task time, from Ray Data's stats.
Run in ``.venv-serve``::

    .venv-serve/bin/python bench/data.py [--rows 64] [--repeats 3] [--max-tokens 16] [--stages] [--json]
"""

from __future__ import annotations

import argparse
import functools
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from raytpu.core.specs import kinds
from raytpu.core.specs.runtime import data
from raytpu.core.specs.spec import SliceSpec, WorkloadSpec
from raytpu.local.slice import procs, startup
from raytpu.local.slice.connection import speak_auth
from raytpu.workloads import batch, tiny_llm

ORDERS = (("kit", "hand"), ("hand", "kit"))
"""The order of the two runs in even and odd pairs."""
SLICE = SliceSpec.create(name="batch", generation="v6e", topology="2x4", zone="us-east5-b")


def hand_written(source: str, output: str, model: str, max_tokens: int) -> dict[str, Any]:
    """Ray Data LLM as its documentation writes it: read, build_processor, write."""
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
            "temperature": 0.0, "max_tokens": max_tokens}},
        postprocess=lambda row: {"id": row["id"], "prompt": row["prompt"], "generated_text": row["generated_text"],
                                 "num_generated_tokens": row["num_generated_tokens"]})
    ds = ray.data.read_json(source, lines=True)
    t0 = time.monotonic()
    processor(ds).write_parquet(output)  # streamed, as the kit writes
    wall = time.monotonic() - t0
    written = ray.data.read_parquet(output)
    rows = written.count()
    tokens: Any = written.sum("num_generated_tokens")
    return {"rows_out": rows, "wall_s": wall, "rows_per_s": rows / wall, "tokens_per_s": int(tokens or 0) / wall}


def operators(summary: Any) -> dict[str, list[float]]:
    """Each operator of a materialized dataset's stats (parents first): [first start, last end] in seconds after the
    first operator's start, and the summed time of its tasks."""
    found: dict[str, tuple[float, float, float]] = {}

    def walk(node: Any) -> None:
        for parent in node.parents:
            walk(parent)
        for op in node.operators_stats:
            if op.earliest_start_time is not None and op.latest_end_time is not None:
                found[op.operator_name] = (op.earliest_start_time, op.latest_end_time, op.time_total_s)

    walk(summary)
    first = min((start for start, _, _ in found.values()), default=0.0)
    return {name: [round(start - first, 2), round(end - first, 2), round(total, 2)]
            for name, (start, end, total) in found.items()}


class StageRecorder:
    """Wraps ``Dataset.materialize`` to keep the stats of the first dataset materialized in a run (the write's:
    ``write_datasink`` materializes its plan once in the timed span; a later read or aggregate may again)."""

    def __init__(self) -> None:
        self.last: dict[str, list[float]] = {}

    def install(self) -> None:
        import ray.data

        original = ray.data.Dataset.materialize

        def materialize(ds: Any) -> Any:
            out = original(ds)
            if not self.last:
                self.last = operators(out.get_stats_summary())
            return out

        ray.data.Dataset.materialize = materialize  # type: ignore[method-assign]


def timed(call: Any, stages: StageRecorder | None) -> dict[str, Any]:
    """``call()``'s report, with ``call_s`` (the whole call) and, with ``stages``, its operators."""
    if stages is not None:
        stages.last = {}
    t0 = time.monotonic()
    report: dict[str, Any] = call()
    report = {**report, "call_s": time.monotonic() - t0}
    if stages is not None:
        report["stages"] = stages.last
    return report


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rows", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=3, help="pairs (at least 3 for a spread)")
    parser.add_argument("--max-tokens", type=int, default=16)
    parser.add_argument("--stages", action="store_true", help="add each run's operators (Ray Data's stats)")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    model = str(tiny_llm.ensure().path)
    with tempfile.TemporaryDirectory(prefix="bench-data-") as tmp:
        root = Path(tmp)
        source = root / "prompts.jsonl"
        source.write_text("".join(json.dumps({"id": i, "prompt": f"question {i}: what is {i} plus {i}?"}) + "\n"
                                  for i in range(args.rows)))
        cluster = startup.start(SLICE.plan, 1, root / "cluster")
        runs: dict[str, list[dict[str, Any]]] = {"kit": [], "hand": []}
        try:
            speak_auth(cluster)
            import ray

            ray.init(address=cluster.address, log_to_driver=False)
            stages = StageRecorder() if args.stages else None
            if stages is not None:
                stages.install()
            for i in range(args.repeats):
                work = WorkloadSpec(name="batch", kind=kinds.kind("batch"), slice=SLICE, input=str(source),
                                    output=str(root / f"kit-{i}"), max_tokens=args.max_tokens, chat_template=False)
                sides = {"kit": functools.partial(batch.run, work, cpu_model=model),
                         "hand": functools.partial(hand_written, str(source), str(root / f"hand-{i}"), model,
                                                   args.max_tokens)}
                for side in ORDERS[i % 2]:
                    runs[side].append(timed(sides[side], stages))
            ray.shutdown()
        finally:
            procs.stop(root / "cluster")
    ratios = [k["rows_per_s"] / h["rows_per_s"] for k, h in zip(runs["kit"], runs["hand"], strict=True)]
    result: dict[str, Any] = {
        "rows": args.rows, "max_tokens": args.max_tokens, "repeats": args.repeats,
        "orders": ["-".join(ORDERS[i % 2]) for i in range(args.repeats)],
        "ratios": [round(r, 3) for r in ratios], "ratio_median": round(statistics.median(ratios), 3),
        "ratio_min": round(min(ratios), 3), "ratio_max": round(max(ratios), 3), "target": 0.9}
    for side, reports in runs.items():
        for key in ("rows_per_s", "wall_s", "call_s", "tokens_per_s"):
            result[f"{side}_{key}"] = [round(r[key], 3) for r in reports]
        if args.stages:
            result[f"{side}_stages"] = [r["stages"] for r in reports]
    print(json.dumps(result, sort_keys=True) if args.json else
          f"kit {result['kit_rows_per_s']} rows/s, hand-written {result['hand_rows_per_s']} rows/s: kit/hand median "
          f"{result['ratio_median']}x, min {result['ratio_min']}x, max {result['ratio_max']}x over "
          f"{args.repeats} pairs (target >= 0.9x)")
    return 0 if result["ratio_median"] >= 0.9 else 1


if __name__ == "__main__":
    sys.exit(main())
