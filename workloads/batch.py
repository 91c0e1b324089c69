"""Offline batch inference on one TPU host: Ray Data reads ``input``, Ray Data LLM's vLLM engine processor answers each
row's ``prompt``, Ray Data writes ``output``; the report gives rows in and out, rows/s and tokens/s.

The processor is ``ray.data.llm.build_processor`` over a ``vLLMEngineProcessorConfig`` built by
:func:`raytpu.core.data.processor_config` (the serving rules: TP = the host's JAX devices); ``--cpu-model PATH`` runs
its CPU twin (:func:`raytpu.core.data.cpu_twin`, vLLM's CPU build) with the model at PATH, as on the emulated slice.
An ``output`` that exists is refused before anything is read (exit 2, ``output``) unless ``--overwrite``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Callable
from typing import Any

from raytpu.core import data, errors
from raytpu.core.spec import WorkloadSpec
from raytpu.core.vllm_rules import DEFAULT_MODEL
from raytpu.workloads._entry import guarded

REPORT_PREFIX = "batch: "
"""The line the report is printed on (``batch: {json}``), which ``raytpu submit --wait`` and the tests read."""


def output_taken(path: str) -> bool:
    """``path`` holds something already: a local file or non-empty folder, or a ``gs://`` object or prefix."""
    if not path.startswith("gs://"):
        return data.output_exists(path)
    from pyarrow import fs

    filesystem, where = fs.FileSystem.from_uri(path)
    info = filesystem.get_file_info(where)
    if info.type == fs.FileType.File:
        return True
    return info.type == fs.FileType.Directory and bool(
        filesystem.get_file_info(fs.FileSelector(where, allow_not_found=True)))


def refuse_taken(output: str, overwrite: bool) -> None:
    """InvalidInput naming ``output`` when it holds something and ``overwrite`` was not asked for."""
    if not overwrite and output_taken(output):
        raise errors.invalid_value("output", output, "exists and would be overwritten",
                                   "a path that does not exist yet (or an empty folder), or --overwrite")


def read(path: str) -> Any:
    """The dataset at ``path``: JSON lines or Parquet (:func:`raytpu.core.data.data_format`)."""
    import ray.data

    return ray.data.read_json(path, lines=True) if data.data_format(path) == "jsonl" else ray.data.read_parquet(path)


def write(ds: Any, path: str, overwrite: bool) -> None:
    """Writes ``ds`` to ``path`` in its format; replaces what is there only with ``overwrite``. A ``gs://`` output
    makes no folder marker: pyarrow's GcsFileSystem would read the bucket's metadata for it at the bucket's root
    (``storage.buckets.get``, which the pods' object roles lack). Source: Ray 2.60 ``Dataset.write_parquet``
    ``try_create_dir``; apache/arrow ``gcsfs.cc`` ``CreateDirMarkerRecursive``."""
    options = {"mode": "overwrite" if overwrite else "error", "try_create_dir": not path.startswith("gs://")}
    if data.data_format(path) == "jsonl":
        ds.write_json(path, **options)
    else:
        ds.write_parquet(path, **options)


def row_functions(columns: tuple[str, ...], max_tokens: int) -> tuple[Callable[..., dict[str, Any]],
                                                                       Callable[..., dict[str, Any]]]:
    """The processor's preprocess (a row as the engine takes it: its prompt and the sampling) and postprocess (the
    input row's columns, the answer and its token counts). Closures over plain values: Ray Data ships them by value,
    so its map workers import nothing of the kit to run them (module functions are pickled by reference, and each
    worker imports their module), as with a hand-written pipeline's lambdas."""
    prompt, sampling = data.PROMPT_COLUMN, data.sampling_params(max_tokens)

    def preprocess(row: dict[str, Any]) -> dict[str, Any]:
        return {"prompt": str(row[prompt]), "sampling_params": sampling}

    def postprocess(row: dict[str, Any]) -> dict[str, Any]:
        return {**{c: row[c] for c in columns}, "generated_text": row["generated_text"],
                "num_input_tokens": row["num_input_tokens"], "num_generated_tokens": row["num_generated_tokens"]}

    return preprocess, postprocess


def build(config: dict[str, Any], columns: tuple[str, ...], max_tokens: int) -> Any:
    """The Ray Data LLM processor of ``config`` (keyword arguments of ``vLLMEngineProcessorConfig``): raw prompts
    (no chat template), tokenized and detokenized by the processor's own stages."""
    from ray.data.llm import build_processor, vLLMEngineProcessorConfig

    preprocess, postprocess = row_functions(columns, max_tokens)
    return build_processor(vLLMEngineProcessorConfig(**config, chat_template_stage=False),
                           preprocess=preprocess, postprocess=postprocess)


def run(work: WorkloadSpec, *, overwrite: bool = False, cpu_model: str | None = None,
        max_tokens: int = data.DEFAULT_MAX_TOKENS, model_source: str | None = None) -> dict[str, Any]:
    """Reads, infers and writes ``work``'s batch; returns the report."""
    assert work.input is not None and work.output is not None  # the spec requires both for kind batch
    refuse_taken(work.output, overwrite)
    ds = read(work.input)
    columns = tuple(ds.schema().names)
    if data.PROMPT_COLUMN not in columns:
        raise errors.invalid_value("input", work.input, f"has no {data.PROMPT_COLUMN!r} column (it has "
                                   f"{', '.join(columns) or 'none'})", f"rows with a {data.PROMPT_COLUMN!r} column")
    rows_in = ds.count()
    source = model_source or work.model_source or work.model or DEFAULT_MODEL
    config = data.processor_config(work, source)
    if cpu_model is not None:
        config = data.cpu_twin(config, cpu_model)
    processor = build(config, columns, max_tokens)
    t0 = time.monotonic()
    out = processor(ds).materialize()
    wall = time.monotonic() - t0
    rows_out = out.count()
    # one pass over the answers for both token counts (each Dataset.sum is an execution of its own)
    sums = out.sum(["num_generated_tokens", "num_input_tokens"]) if rows_out else {}
    generated, prompt_tokens = (int(sums[f"sum({c})"]) if rows_out else 0
                                for c in ("num_generated_tokens", "num_input_tokens"))
    write(out, work.output, overwrite)
    # wall_s: from the first row read to the last answer, the engine's start included (Ray Data is lazy)
    return {"rows_in": rows_in, "rows_out": rows_out, "wall_s": round(wall, 3),
            "rows_per_s": round(rows_out / wall, 3) if wall else 0.0,
            "tokens_per_s": round(generated / wall, 3) if wall else 0.0,
            "generated_tokens": generated, "prompt_tokens": prompt_tokens,
            "input": work.input, "output": work.output, "model": cpu_model or source,
            "engine": "cpu-twin" if cpu_model else work.plan.ray_accelerator_type}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m raytpu.workloads.batch", description=__doc__.split("\n")[0])
    parser.add_argument("--overwrite", action="store_true", help="replace an output that exists")
    parser.add_argument("--cpu-model", default=None, metavar="PATH",
                        help="run the CPU twin of the engine with the model at PATH (the emulated slice)")
    parser.add_argument("--max-tokens", type=int, default=data.DEFAULT_MAX_TOKENS, help="tokens generated per row")
    parser.add_argument("--address", default=None, help="Ray address (default $RAY_ADDRESS, else a new local Ray)")
    parser.add_argument("--report", default=None, metavar="FILE", help="also write the report (JSON) here")
    args = parser.parse_args(argv)

    def body() -> int:
        work = WorkloadSpec.from_env()
        if not work.kind.batches:
            raise errors.invalid_value("RAYTPU_WORKLOAD", work.kind.name, "is not a batch workload", "kind: batch")
        assert work.input is not None and work.output is not None  # the spec requires both for kind batch
        # before Ray: nothing is read, started or written
        errors.raise_found(data.run_problems(work.input, work.output, args.overwrite))
        refuse_taken(work.output, args.overwrite)
        import ray

        ray.init(address=args.address or os.environ.get("RAY_ADDRESS"), ignore_reinit_error=True,
                 log_to_driver=False)
        report = run(work, overwrite=args.overwrite, cpu_model=args.cpu_model, max_tokens=args.max_tokens)
        print(REPORT_PREFIX + json.dumps(report, sort_keys=True), flush=True)
        if args.report:
            with open(args.report, "w", encoding="utf-8") as out:
                json.dump(report, out, indent=2, sort_keys=True)
        return 0 if report["rows_out"] == report["rows_in"] else 1

    return guarded(body)


if __name__ == "__main__":
    sys.exit(main())
