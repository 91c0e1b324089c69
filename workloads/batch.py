"""Offline batch inference on one TPU host: Ray Data reads ``input``, Ray Data LLM's vLLM engine processor answers each
row's ``prompt`` with the workload's sampling (:mod:`raytpu.core.specs.serving.sampling`), Ray Data writes ``output`` as
rows are answered, a failed row with its error; the report gives rows in, out and failed, rows/s and tokens/s.

The processor is ``ray.data.llm.build_processor`` over a ``vLLMEngineProcessorConfig`` built by
:func:`raytpu.core.specs.runtime.data.processor_config` (the serving rules: TP = the host's JAX devices); ``--cpu-model
PATH`` runs its CPU twin (:func:`raytpu.core.specs.runtime.data.cpu_twin`, vLLM's CPU build) with the model at PATH, as
on the emulated slice. An ``output`` that exists is refused before anything is read (exit 2, ``output``) unless
``--overwrite``.
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Callable, Mapping
from typing import Any

from raytpu.core.common import errors
from raytpu.core.specs.runtime import data
from raytpu.core.specs.serving import chat_template, sampling
from raytpu.core.specs.serving.vllm_rules import DEFAULT_MODEL
from raytpu.core.specs.spec import WorkloadSpec
from raytpu.workloads.support._entry import Parser, check_address, guarded

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
    """The dataset at ``path``: JSON lines or Parquet (:func:`raytpu.core.specs.runtime.data.data_format`)."""
    import ray.data

    return ray.data.read_json(path, lines=True) if data.data_format(path) == "jsonl" else ray.data.read_parquet(path)


FIRST_LINE_BYTES = 1 << 20  # how much of a JSON lines input input_columns reads for its first row


def input_columns(path: str, ds: Any) -> tuple[str, ...]:
    """The input's columns: Parquet's from its metadata; JSON lines' from its first row (the first file by name, for a
    folder), read here: ``ds.schema()`` would read a whole file of up to a block's size before the run reads it again
    (Source: Ray 2.60 ``Dataset._base_schema`` runs ``limit(1)``; ``PandasJSONDatasource._estimate_chunksize`` sizes
    each chunk to ``target_max_block_size``, 128 MiB)."""
    if data.data_format(path) != "jsonl":
        return tuple(ds.schema().names)
    from pyarrow import fs

    filesystem, where = fs.FileSystem.from_uri(path if path.startswith("gs://") else os.path.abspath(path))
    if filesystem.get_file_info(where).type == fs.FileType.Directory:
        found = sorted(f.path for f in filesystem.get_file_info(fs.FileSelector(where, recursive=True))
                       if f.type == fs.FileType.File and not f.base_name.startswith((".", "_")))
        if not found:
            raise errors.invalid_value("input", path, "is a folder with no files", "JSON lines, one object a row")
        where = found[0]
    with filesystem.open_input_stream(where, compression="detect") as stream:
        head = stream.read(FIRST_LINE_BYTES)
    line = next((raw for raw in head.splitlines() if raw.strip()), b"")
    try:
        row = json.loads(line) if line else None
    except ValueError:
        row = None
    if not isinstance(row, dict):
        raise errors.invalid_value("input", path, f"does not begin with a JSON object row within "
                                   f"{FIRST_LINE_BYTES // 2**20} MiB ({where})", "JSON lines, one object a row")
    return tuple(row)


def write(ds: Any, path: str, overwrite: bool) -> None:
    """Writes ``ds`` to ``path`` in its format, streaming (each write task writes its own file as its rows are
    answered: a run cut short keeps its finished tasks' files); replaces what is there only with ``overwrite``. No
    folder marker on ``gs://`` (pyarrow's would read the bucket's metadata, which the pods' object roles may not).
    Source: Ray 2.60 ``Dataset.write_datasink``, ``try_create_dir``; arrow ``gcsfs.cc``
    (docs/FACTS.md#ray-data-sampling)."""
    options = {"mode": "overwrite" if overwrite else "error", "try_create_dir": not path.startswith("gs://")}
    if data.data_format(path) == "jsonl":
        ds.write_json(path, **options)
    else:
        ds.write_parquet(path, **options)


ANSWER_COLUMNS = ("generated_text", "num_input_tokens", "num_generated_tokens", data.ERROR_COLUMN)
"""What ``output`` adds to each input row: the answer, its token counts and Ray Data LLM's error column."""
_PROMPT_KEY = "__raytpu_prompt"
"""The row's own prompt: Ray's chat template stage replaces ``prompt``, and a failed row carries it cut short."""


def row_functions(columns: tuple[str, ...], params: dict[str, Any], chat: bool) -> tuple[
        Callable[..., dict[str, Any]], Callable[..., dict[str, Any]]]:
    """The processor's preprocess (the prompt, as a user message when ``chat``, and vLLM's ``SamplingParams``) and the
    shape of an output row (input columns and :data:`ANSWER_COLUMNS`; a failed row skips the postprocess, Ray 2.60
    ``wrap_postprocess``). Closures over plain values, which Ray Data ships by value: its workers import no kit."""
    prompt, key, error = data.PROMPT_COLUMN, _PROMPT_KEY, data.ERROR_COLUMN

    def preprocess(row: dict[str, Any]) -> dict[str, Any]:
        text = str(row[prompt])
        asked = {"messages": [{"role": "user", "content": text}]} if chat else {"prompt": text}
        return {**asked, key: text, "sampling_params": params}

    def shape(row: dict[str, Any]) -> dict[str, Any]:
        return {**{c: row[key] if c == prompt else row.get(c) for c in columns},
                "generated_text": row.get("generated_text") or "",
                "num_input_tokens": int(row.get("num_input_tokens") or 0),
                "num_generated_tokens": int(row.get("num_generated_tokens") or 0), error: row.get(error) or ""}

    return preprocess, shape


def has_chat_template(model_source: str, trust_remote_code: bool = False) -> bool:
    """Whether the model's processor (``AutoProcessor``: a text model's tokenizer) has a chat template, read as Ray
    Data LLM's chat template stage reads it. Source: Ray 2.60/2.56 ``ChatTemplateUDF.__init__``
    (docs/FACTS.md#ray-data-sampling)."""
    from ray.llm._internal.common.utils.download_utils import NodeModelDownloadable, download_model_files
    from transformers import AutoProcessor

    path = download_model_files(model_id=model_source, mirror_config=None,
                                download_model=NodeModelDownloadable.TOKENIZER_ONLY, download_extra_files=False)
    processor = AutoProcessor.from_pretrained(path, trust_remote_code=trust_remote_code)
    return bool(getattr(processor, "chat_template", None))


def build(config: dict[str, Any], columns: tuple[str, ...], params: dict[str, Any], chat: bool,
          template_kwargs: Mapping[str, Any] | None = None) -> Any:
    """The Ray Data LLM processor of ``config`` (keyword arguments of ``vLLMEngineProcessorConfig``) with the chat
    template stage when ``chat``, given ``template_kwargs`` (``chat_template_kwargs``); its rows shaped by
    :func:`row_functions`. Source: Ray 2.60 ``ray.data.llm.build_processor`` ``builder_kwargs``
    (``build_vllm_engine_processor(chat_template_kwargs=...)``; raytpu.core.specs.serving.chat_template)."""
    from ray.data.llm import build_processor, vLLMEngineProcessorConfig

    preprocess, shape = row_functions(columns, params, chat)
    builder = {"chat_template_kwargs": dict(template_kwargs)} if chat and template_kwargs else None
    processor = build_processor(vLLMEngineProcessorConfig(**config, chat_template_stage=chat), preprocess=preprocess,
                                builder_kwargs=builder)
    return lambda ds: processor(ds).map(shape)


class RowCount:  # a Ray actor: the input's rows as they stream by (counted)
    def __init__(self) -> None:
        self.rows = 0

    def add(self, rows: int) -> None:
        self.rows += rows

    def total(self) -> int:
        return self.rows


def counted(ds: Any, counter: Any) -> Any:
    """``ds``, each batch's rows added to the ``counter`` actor as it streams by: the input is read once. A JSON input
    has no row count in its metadata, so ``Dataset.count()`` reads all of it before the run reads it again
    (Source: Ray 2.60 ``Dataset.count``: ``_meta_count`` (Parquet), else a ``Count`` over the whole plan)."""

    def add(batch: Any) -> Any:
        import ray

        ray.get(counter.add.remote(batch.num_rows))
        return batch

    return ds.map_batches(add, batch_format="pyarrow", zero_copy_batch=True)


def tally(ds: Any) -> dict[str, int]:
    """Rows, failed rows and both token sums of a written ``output``, in one pass over it."""
    error = data.ERROR_COLUMN

    def count(batch: Any) -> dict[str, list[int]]:
        import pyarrow.compute as pc

        failed = pc.sum(pc.not_equal(batch[error], "")).as_py() if batch.num_rows else 0
        return {"rows": [batch.num_rows], "failed": [failed or 0],
                "generated": [pc.sum(batch["num_generated_tokens"]).as_py() or 0],
                "prompt": [pc.sum(batch["num_input_tokens"]).as_py() or 0]}

    names = ("rows", "failed", "generated", "prompt")
    sums = ds.map_batches(count, batch_format="pyarrow").sum(list(names))
    return {n: int(sums[f"sum({n})"] or 0) for n in names} if sums else dict.fromkeys(names, 0)


def run(work: WorkloadSpec, *, overwrite: bool = False, cpu_model: str | None = None,
        model_source: str | None = None) -> dict[str, Any]:
    """Reads, infers and writes ``work``'s batch (streaming: rows are written as they are answered); returns the
    report, counted from what was written."""
    assert work.input is not None and work.output is not None  # the spec requires both for kind batch
    refuse_taken(work.output, overwrite)
    ds = read(work.input)
    columns = input_columns(work.input, ds)
    if data.PROMPT_COLUMN not in columns:
        raise errors.invalid_value("input", work.input, f"has no {data.PROMPT_COLUMN!r} column (it has "
                                   f"{', '.join(columns) or 'none'})", f"rows with a {data.PROMPT_COLUMN!r} column")
    taken = [c for c in ANSWER_COLUMNS if c in columns]
    if taken:
        raise errors.invalid_value("input", work.input, f"has the column {taken[0]!r}, which output adds",
                                   "input columns other than " + ", ".join(ANSWER_COLUMNS))
    source = model_source or work.model_source or work.model or DEFAULT_MODEL
    config = data.processor_config(work, source)
    if cpu_model is not None:
        config = data.cpu_twin(config, cpu_model)
    chat = work.chat_template if work.chat_template is not None else has_chat_template(
        config["model_source"], bool(config["engine_kwargs"].get("trust_remote_code")))
    params = sampling.sampling_params(work)
    processor = build(config, columns, params, chat,
                      chat_template.batch_kwargs(work.model, work.model_source, work.chat_template_kwargs))
    import ray

    counter: Any = ray.remote(num_cpus=0)(RowCount).remote()
    t0 = time.monotonic()
    write(processor(counted(ds, counter)), work.output, overwrite)
    wall = time.monotonic() - t0
    rows_in = int(ray.get(counter.total.remote()))
    done = tally(read(work.output)) if rows_in else {"rows": 0, "failed": 0, "generated": 0, "prompt": 0}
    # wall_s: from the first row read to the last row written, the engine's start included (Ray Data is lazy)
    return {"rows_in": rows_in, "rows_out": done["rows"], "rows_failed": done["failed"], "wall_s": round(wall, 3),
            "rows_per_s": round(done["rows"] / wall, 3) if wall else 0.0,
            "tokens_per_s": round(done["generated"] / wall, 3) if wall else 0.0,
            "generated_tokens": done["generated"], "prompt_tokens": done["prompt"], "chat_template": chat,
            "sampling": params, "input": work.input, "output": work.output,
            "model": cpu_model or source, "engine": "cpu-twin" if cpu_model else work.plan.ray_accelerator_type}


def main(argv: list[str] | None = None) -> int:
    parser = Parser(prog="python -m raytpu.workloads.batch", description=__doc__.split("\n")[0])
    parser.add_argument("--overwrite", action="store_true", help="replace an output that exists")
    parser.add_argument("--cpu-model", default=None, metavar="PATH",
                        help="run the CPU twin of the engine with the model at PATH (the emulated slice)")
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
        check_address(args.address or os.environ.get("RAY_ADDRESS"))  # a closed port: exit 1 now, not in minutes
        import ray

        ray.init(address=args.address or os.environ.get("RAY_ADDRESS"), ignore_reinit_error=True,
                 log_to_driver=False)
        report = run(work, overwrite=args.overwrite, cpu_model=args.cpu_model)
        print(REPORT_PREFIX + json.dumps(report, sort_keys=True), flush=True)
        if report["rows_failed"]:
            print(f"warning: {report['rows_failed']} of {report['rows_out']} rows failed; each has its error in "
                  f"column {data.ERROR_COLUMN} of {work.output}", file=sys.stderr, flush=True)
        if args.report:
            with open(args.report, "w", encoding="utf-8") as out:
                json.dump(report, out, indent=2, sort_keys=True)
        return 0 if report["rows_out"] == report["rows_in"] else 1

    return guarded(body)


if __name__ == "__main__":
    sys.exit(main())
