"""Ray Data on the slice: the paths a workload reads and writes, the ``batch`` kind's rules, its processor config.

Paths are ``gs://BUCKET/PATH`` or local, Parquet or JSON lines; the engine follows the serving rules. The kit's
pipeline and ``bench/data.py`` build from here (docs/FACTS.md#ray-data-specs). Standard library only.
"""

from __future__ import annotations

import os
import posixpath
import re
from collections.abc import Mapping
from typing import Any, Protocol

from raytpu.core.common import errors
from raytpu.core.common.errors import InvalidInput
from raytpu.core.specs import workload_fields
from raytpu.core.specs.runtime import xla_cache
from raytpu.core.specs.serving.vllm_rules import DEFAULT_MAX_MODEL_LEN, VLLM_VERSION, jax_devices, parallel_sizes
from raytpu.core.tpu.catalog import generation
from raytpu.core.tpu.plan import SlicePlan, plan_slice


class BatchWork(Protocol):
    """The fields of a batch workload its engine is built from; a protocol, so this module does not import the spec."""

    @property
    def plan(self) -> SlicePlan: ...
    @property
    def engine_kwargs(self) -> Mapping[str, Any] | None: ...
    @property
    def max_model_len(self) -> int | None: ...
    @property
    def slices_spanned(self) -> int: ...
    @property
    def vllm_version(self) -> str | None: ...

DATA_FIELDS = ("input", "output")
"""WorkloadSpec fields only the ``batch`` kind takes (and requires)."""
JSONL_SUFFIXES = (".jsonl", ".json")
PATH_VALID = ("gs://BUCKET/PATH or a local path (absolute, or relative to where the job runs); Parquet (a file or a "
              "folder of .parquet files) or JSON lines (.jsonl)")

MULTI_HOST_PR = "https://github.com/ray-project/ray/pull/65422"
"""Multi-host TPU batch inference for Ray Data LLM: open, in neither Ray 2.56 nor 2.60 (one engine, one node).
Source: ray-project/ray#65422 (open), tracking issue ray-project/ray#57137 (docs/FACTS.md#ray-data-batch)."""

DEFAULT_BATCH_SIZE = 64
PROMPT_COLUMN = "prompt"
"""The column of ``input`` holding each row's prompt (text); every other column is carried to ``output``."""


def data_format(path: str) -> str:
    """``jsonl`` for a path ending in ``.jsonl``/``.json`` (a file or a folder), else ``parquet``."""
    return "jsonl" if path.rstrip("/").lower().endswith(JSONL_SUFFIXES) else "parquet"


READ_SUFFIXES = (".parquet", *JSONL_SUFFIXES)
"""The suffixes of what the kit reads and writes; a folder (no suffix, or a trailing ``/``) is Parquet files."""
_IPV4 = re.compile(r"^\d{1,3}(?:\.\d{1,3}){3}$")
_BUCKET_PART = re.compile(r"^[a-z0-9](?:[a-z0-9_-]{0,61}[a-z0-9])?$")
GCS_VALID = ("gs://BUCKET/PATH: a bucket of 3-63 lowercase letters, digits, '-', '_' (dotted names: up to 222, each "
             "part up to 63), starting and ending with a letter or digit, not an IP address, not starting with goog "
             "or holding google; an object path of at most 1024 bytes, not . or ..")


def _gcs_problem(uri: str) -> str | None:
    """What breaks Cloud Storage's naming rules in ``gs://BUCKET/PATH``, or None.
    Source: https://cloud.google.com/storage/docs/buckets#naming, https://cloud.google.com/storage/docs/objects#naming"""
    bucket, _, path = uri[len("gs://"):].partition("/")
    if not bucket or not path.strip("/"):
        return "names no object path in the bucket"
    if not 3 <= len(bucket) <= (222 if "." in bucket else 63) or \
            not all(_BUCKET_PART.match(part) for part in bucket.split(".")):
        return f"names the bucket {errors.excerpt(bucket)}, which Cloud Storage does not allow"
    if _IPV4.match(bucket) or bucket.startswith("goog") or "google" in bucket:
        return f"names the bucket {errors.excerpt(bucket)}, a name Cloud Storage reserves (IP address, goog*, google)"
    if len(path.encode()) > 1024 or path.strip("/") in (".", ".."):
        return "names an object path Cloud Storage does not allow (over 1024 bytes, or . or ..)"
    return None


def path_problems(field: str, value: object) -> list[InvalidInput]:
    """A data path: ``gs://BUCKET/PATH`` or local, not blank, no control characters, Parquet or JSON lines."""
    if not isinstance(value, str):
        return [errors.invalid_value(field, value, "is not a path", PATH_VALID)]
    if not value.strip() or value != value.strip() or any(ord(c) < 32 for c in value):
        return [errors.invalid_value(field, value, "is blank, padded or holds control characters", PATH_VALID)]
    if value[:3].lower() == "gs:" and not value.startswith("gs://"):
        return [errors.invalid_value(field, value, "is a misspelt gs:// URI (not a local path either)", GCS_VALID)]
    if value.startswith("gs://"):
        if problem := _gcs_problem(value):
            return [errors.invalid_value(field, value, problem, GCS_VALID)]
    elif "://" in value:
        return [errors.invalid_value(field, value, "uses a scheme the kit does not read", PATH_VALID)]
    name = value.rstrip("/").rsplit("/", 1)[-1]
    suffix = os.path.splitext(name)[1].lower()
    if suffix and not value.endswith("/") and suffix not in READ_SUFFIXES:
        return [errors.invalid_value(field, value, f"ends in {errors.excerpt(suffix, 20)}, a format not read here",
                                     f"{', '.join(READ_SUFFIXES)} or a folder of .parquet files (end a folder whose "
                                     "name has a dot with /)")]
    return []


def _parts(path: str) -> tuple[str, ...]:
    """``path`` as comparable parts: ``gs://b/x/`` and ``gs://b/./x`` alike, ``./a`` and ``a/`` alike."""
    if path.startswith("gs://"):
        bucket, _, rest = path[len("gs://"):].partition("/")
        return ("gs://" + bucket, *filter(None, posixpath.normpath("/" + rest).split("/")))
    norm = os.path.normpath(path)
    return tuple(p for p in norm.split(os.sep) if p not in ("", ".")) if not os.path.isabs(norm) else \
        ("/", *filter(None, norm.split(os.sep)))


def overlap(input: str, output: str) -> str | None:
    """How ``output`` overlaps ``input``, textually: ``is``, ``holds``, ``sits inside``; None when apart."""
    a, b = _parts(input), _parts(output)
    if a == b:
        return "is"
    if a[:len(b)] == b:
        return "holds"
    if b[:len(a)] == a:
        return "sits inside"
    return None


def overlap_problems(input: str, output: str, field: str = "output", *, resolve: bool = False) -> list[InvalidInput]:
    """``output`` that is, holds or sits inside ``input`` (writing it would destroy or mix with the prompts);
    ``resolve`` also compares local paths as this machine resolves them."""
    how = overlap(input, output)
    if how is None and resolve and not input.startswith("gs://") and not output.startswith("gs://"):
        how = overlap(os.path.realpath(input), os.path.realpath(output))
    if how is None:
        return []
    what = {"is": "is the input", "holds": "holds the input", "sits inside": "sits inside the input"}[how]
    return [errors.invalid_value(field, output, f"{what} ({errors.excerpt(input, tail=True)}): writing it would "
                                 "overwrite or mix with the prompts", "a path apart from input (neither inside it "
                                 "nor holding it)")]


def local_input_problems(field: str, path: str) -> list[InvalidInput]:
    """A local ``input``/``dataset`` that does not exist here (gs:// is judged by the program)."""
    if path.startswith("gs://") or os.path.exists(path):
        return []
    return [errors.invalid_value(field, path, f"does not exist (looked in {errors.excerpt(os.getcwd(), tail=True)})",
                                 "an existing Parquet file or folder, or JSON lines file, or gs://BUCKET/PATH")]


def single_host_shapes(gen: str) -> list[str]:
    """The topologies of ``gen`` that are one host and Ray reserves: where Ray Data LLM (2.56, 2.60) runs an engine."""
    shapes = []
    for topology in generation(gen).topologies:
        plan = plan_slice(gen, topology)
        if plan.single_host and plan.ray_reservable:
            shapes.append(f"{gen} {topology} ({plan.machine_type})")
    return shapes


def batch_problems(*, kind: str, plan: SlicePlan, input: object, output: object,
                   ray_version: str) -> list[InvalidInput]:
    """The ``batch`` kind's own rules: ``input`` and ``output`` given, paths, distinct; a single-host slice.
    ``ray_version``: the Ray the job's pods run."""
    if not workload_fields.takes(kind, "input"):
        return workload_fields.refusals(kind, {"input": input, "output": output})
    found = []
    for name, value in (("input", input), ("output", output)):
        if value is not None:
            found += path_problems(name, value)
        elif workload_fields.requires(kind, name):
            found.append(errors.missing(name, "(a batch workload reads input and writes output)", PATH_VALID))
    if not found and isinstance(input, str) and isinstance(output, str):
        found += overlap_problems(input, output)
    if not plan.single_host:
        found.append(errors.invalid_value(
            "slice", f"{plan.generation} {plan.topology} ({plan.hosts} hosts)",
            f"is a multi-host slice: Ray {ray_version}'s Data LLM runs one vLLM engine on one host (multi-host TPU "
            f"batch inference is only proposed, in an open, unmerged pull request: {MULTI_HOST_PR})",
            "a single-host slice: " + ", ".join(single_host_shapes(plan.generation))))
    return found


def output_exists(path: str) -> bool:
    """A local output that holds something (a file, or a folder with entries); gs:// is judged by the program."""
    if path.startswith("gs://"):
        return False
    return os.path.isfile(path) or (os.path.isdir(path) and any(os.scandir(path)))


def output_problems(field: str, path: str, overwrite: bool) -> list[InvalidInput]:
    """``output`` exists and ``overwrite`` was not asked for: nothing of the user's is replaced unasked."""
    if overwrite or not output_exists(path):
        return []
    return [errors.invalid_value(field, path, "exists and would be overwritten",
                                 "a path that does not exist yet (or an empty folder), or --overwrite")]


def run_problems(input: str, output: str, overwrite: bool, prefix: str = "") -> list[InvalidInput]:
    """Where a batch runs: a local input that exists, an output apart from it, empty unless ``overwrite``."""
    found = local_input_problems("input", input) + overlap_problems(input, output, resolve=True)
    found += [] if found else output_problems("output", output, overwrite)
    return [p.at(prefix) for p in found]


# ------------------------------------------------------------------------------------------- the processor


ROW_FAILURES: dict[str, Any] = {"should_continue_on_error": True, "detokenize_stage": False,
                                "log_engine_metrics": False}
"""A refused row is kept with its error and the run goes on; the answer is the engine's text; no stat logger.
Source: Ray 2.60/2.56 ``ProcessorConfig.should_continue_on_error``, ``DetokenizeUDF`` (docs/FACTS.md#ray-data-sampling,
docs/FACTS.md#ray-data-specs)."""
ERROR_COLUMN = "__inference_error__"
"""Ray Data LLM's column of a failed row's message (empty for an answered row), kept in ``output``."""
NO_ROW_STATS = {"disable_log_stats": True}
"""Answered rows' ``metrics`` stay null, as failed rows' are, so Ray Data can merge their blocks.
Source: Ray 2.60/2.56 ``transform_pyarrow._backfill_missing_fields`` (docs/FACTS.md#ray-data-sampling)."""


def row_stats_problems(engine_kwargs: Mapping[str, Any] | None) -> list[InvalidInput]:
    """A batch workload's ``engine_kwargs`` may not turn per-row stats back on (:data:`NO_ROW_STATS`)."""
    value = (engine_kwargs or {}).get("disable_log_stats", True)
    if value is True:
        return []
    return [errors.invalid_value("engine_kwargs.disable_log_stats", value, "would give answered rows stats that "
                                 "failed rows lack, which Ray Data cannot write in one dataset",
                                 "true or absent (for kind batch)")]


def engine_kwargs(work: BatchWork) -> dict[str, Any]:
    """vLLM engine args of a batch workload on its TPU host: TP = the host's JAX devices, one ``uni`` process.
    Source: vLLM 0.29.0 ``ParallelConfig.__post_init__``; Ray 2.56/2.60 ``vLLMEngineStage.post_init``
    (docs/FACTS.md#ray-data-specs)."""
    extra = dict(work.engine_kwargs or {})
    tp, _ = parallel_sizes(extra, jax_devices(work.plan))
    base = {"tensor_parallel_size": tp, "max_model_len": work.max_model_len or DEFAULT_MAX_MODEL_LEN,
            "distributed_executor_backend": "uni"}
    return base | extra | NO_ROW_STATS


def processor_config(work: BatchWork, model_source: str) -> dict[str, Any]:
    """The kwargs of ``vLLMEngineProcessorConfig`` for ``work``: one engine per slice copy, all its host's chips.
    Source: Ray 2.56/2.60 ``vLLMEngineStage.post_init``, ``OfflineProcessorConfig.runtime_env``
    (docs/FACTS.md#ray-data-specs)."""
    plan = work.plan
    cache = xla_cache.cache_dir(model_source, plan, work.vllm_version or VLLM_VERSION)
    return {
        "model_source": model_source,
        "runtime_env": {"env_vars": xla_cache.engine_env(cache)},
        "engine_kwargs": engine_kwargs(work),
        "accelerator_type": plan.ray_accelerator_type,
        "placement_group_config": {"bundles": [{"TPU": plan.chips_per_host, "CPU": 1}], "strategy": "STRICT_PACK"},
        "concurrency": work.slices_spanned,
        "batch_size": DEFAULT_BATCH_SIZE,
        **ROW_FAILURES,
    }


CPU_TWIN: dict[str, Any] = {
    "engine_kwargs": {"tensor_parallel_size": 1, "pipeline_parallel_size": 1, "enforce_eager": True,
                      "max_model_len": 1024, "distributed_executor_backend": "uni"},
    "env_vars": {"VLLM_CPU_KVCACHE_SPACE": "1", "VLLM_CPU_OMP_THREADS_BIND": "nobind", "OMP_NUM_THREADS": "1",
                 "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "VLLM_NO_USAGE_STATS": "1"},
}
"""What the local CPU twin changes in :func:`processor_config`: one CPU bundle, TP 1, eager, vLLM's CPU env."""


def cpu_twin(config: Mapping[str, Any], model_source: str) -> dict[str, Any]:
    """The TPU ``config`` (:func:`processor_config`) with :data:`CPU_TWIN` applied, reading ``model_source``."""
    twin = {k: v for k, v in config.items() if k not in ("accelerator_type", "placement_group_config")}
    twin["model_source"] = model_source
    twin["engine_kwargs"] = {**config["engine_kwargs"], **CPU_TWIN["engine_kwargs"]}
    twin["placement_group_config"] = {"bundles": [{"CPU": 1}]}
    twin["runtime_env"] = {"env_vars": dict(CPU_TWIN["env_vars"])}
    return twin
