"""The ``batch`` kind's sampling fields (issue 38 item 8): their rules (raytpu/core/specs/serving/sampling.py), the
spec's JSON, the processor config and rows built from them (raytpu/core/specs/runtime/data.py, workloads/batch.py), and
``ignore_eos`` kept out of production code."""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Any

import pytest
from kind_fields import fields as kind_fields

from raytpu.core.common.errors import InvalidInputs
from raytpu.core.specs import kinds
from raytpu.core.specs.runtime import data
from raytpu.core.specs.serving import sampling
from raytpu.core.specs.spec import SliceSpec, WorkloadSpec

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[1]
ONE_HOST = SliceSpec.create(name="one", generation="v6e", topology="2x4", zone="us-east5-b")
IO = {"input": "gs://my-data/prompts.jsonl", "output": "gs://my-data/answers"}
GIVEN: dict[str, Any] = {"max_tokens": 8, "temperature": 0.5, "top_p": 0.9, "stop": ("END",), "chat_template": False}


def _batch(**fields: Any) -> WorkloadSpec:
    return WorkloadSpec(name="b", kind=kinds.kind("batch"), slice=ONE_HOST, **{**IO, **fields})


def _problems(**fields: Any) -> list[tuple[str, str, str]]:
    with pytest.raises(InvalidInputs) as info:
        _batch(**fields)
    return [(p.field, p.problem, p.valid) for p in info.value.problems]


BAD = [
    # field value, the field named, words of the valid range
    ({"max_tokens": 0}, "max_tokens", "from 1 to 4095"),
    ({"max_tokens": -5}, "max_tokens", "from 1 to 4095"),
    ({"max_tokens": 4096}, "max_tokens", "max_model_len 4096"),
    ({"max_tokens": 1024, "max_model_len": 1024}, "max_tokens", "from 1 to 1023"),
    ({"max_tokens": True}, "max_tokens", "whole number"),
    ({"max_tokens": 8.0}, "max_tokens", "whole number"),
    ({"max_tokens": "8"}, "max_tokens", "whole number"),
    ({"max_tokens": 10**400}, "max_tokens", "from 1 to"),
    ({"temperature": -0.01}, "temperature", "from 0 to 2"),
    ({"temperature": 2.01}, "temperature", "from 0 to 2"),
    ({"temperature": math.nan}, "temperature", "from 0 to 2"),
    ({"temperature": math.inf}, "temperature", "from 0 to 2"),
    ({"temperature": True}, "temperature", "from 0 to 2"),
    ({"temperature": "0.5"}, "temperature", "from 0 to 2"),
    ({"top_p": 0}, "top_p", "> 0 and <= 1"),
    ({"top_p": -0.5}, "top_p", "> 0 and <= 1"),
    ({"top_p": 1.0001}, "top_p", "> 0 and <= 1"),
    ({"top_p": math.nan}, "top_p", "> 0 and <= 1"),
    ({"top_p": False}, "top_p", "> 0 and <= 1"),
    ({"stop": "END"}, "stop", "a list of at most 64 non-empty strings"),
    ({"stop": ("ok", "")}, "stop[1]", "non-empty strings"),
    ({"stop": ("ok", 3)}, "stop[1]", "non-empty strings"),
    ({"stop": tuple(f"s{i}" for i in range(65))}, "stop", "at most 64"),
    ({"stop": {"END": 1}}, "stop", "a list"),
    ({"chat_template": "yes"}, "chat_template", "true or false"),
    ({"chat_template": 1}, "chat_template", "true or false"),
    ({"chat_template": None, "top_p": "all"}, "top_p", "> 0 and <= 1"),
]


@pytest.mark.parametrize(("fields", "field", "valid"), BAD, ids=[f"{b[1]}-{i}" for i, b in enumerate(BAD)])
def test_a_sampling_value_out_of_range_is_refused_naming_the_field_and_the_range(
        fields: dict[str, Any], field: str, valid: str) -> None:
    (found,) = _problems(**fields)
    assert found[0] == field and valid in found[2], found
    assert len(found[1]) < 200  # a bounded excerpt of the value


def test_every_bad_sampling_field_is_reported_at_once() -> None:
    found = _problems(max_tokens=0, temperature=3, top_p=0, stop=("",), chat_template="no")
    assert [f for f, _, _ in found] == ["max_tokens", "temperature", "top_p", "stop[0]", "chat_template"]


@pytest.mark.parametrize("fields", [
    {"max_tokens": 1}, {"max_tokens": 4095}, {"max_tokens": 2047, "max_model_len": 2048}, {"temperature": 0},
    {"temperature": 2}, {"temperature": 0.7}, {"top_p": 1}, {"top_p": 1e-9}, {"stop": ()},
    {"stop": tuple(f"s{i}" for i in range(64))}, {"stop": ("\n\n", "END")}, {"chat_template": True},
    {"chat_template": False}, GIVEN])
def test_sampling_values_in_range_are_accepted(fields: dict[str, Any]) -> None:
    work = _batch(**fields)
    assert all(getattr(work, k) == v for k, v in fields.items())


@pytest.mark.parametrize("kind", [k for k in kinds.NAMES if not kinds.kind(k).batches])
@pytest.mark.parametrize("name", sampling.SAMPLING_FIELDS)
def test_a_sampling_field_is_forbidden_for_other_kinds_naming_it(kind: str, name: str) -> None:
    with pytest.raises(InvalidInputs) as info:
        WorkloadSpec(name="w", kind=kinds.kind(kind), slice=ONE_HOST, **{**kind_fields(kind), name: GIVEN[name]})
    (problem,) = info.value.problems
    assert problem.field == name and f"for kind {kind}" in problem.problem and "kind: batch" in problem.valid


def test_the_fields_travel_in_the_jobs_spec_json() -> None:
    work = _batch(**GIVEN)
    sent = work.to_json()
    assert {k: sent[k] for k in GIVEN} == {**GIVEN, "stop": list(GIVEN["stop"])}  # JSON carries a tuple as a list
    env = work.workload_env()
    assert WorkloadSpec.from_env(env) == work and WorkloadSpec.from_env(env).stop == ("END",)
    assert WorkloadSpec.from_json(_batch().to_json()) == _batch()


def test_a_bad_field_in_the_jobs_spec_json_is_refused_too() -> None:
    import json

    sent = _batch().to_json() | {"temperature": 9}
    with pytest.raises(InvalidInputs) as info:
        WorkloadSpec.from_env({"RAYTPU_WORKLOAD": json.dumps(sent)})
    assert [p.field for p in info.value.problems] == ["temperature"]


def test_the_sampling_params_come_from_the_fields_else_the_kits_defaults() -> None:
    assert sampling.sampling_params(_batch()) == {"max_tokens": sampling.DEFAULT_MAX_TOKENS, "temperature": 0.0}
    assert sampling.sampling_params(_batch(**GIVEN)) == {"max_tokens": 8, "temperature": 0.5, "top_p": 0.9,
                                                         "stop": ["END"]}
    assert sampling.sampling_params(_batch(temperature=1, stop=())) == {"max_tokens": 64, "temperature": 1.0}


def test_the_sampling_params_are_ones_vllm_takes() -> None:
    vllm = pytest.importorskip("vllm", reason="vLLM's CPU build is in .venv-serve")
    params = vllm.SamplingParams(**sampling.sampling_params(_batch(**GIVEN)))
    assert (params.max_tokens, params.temperature, params.top_p, params.stop) == (8, 0.5, 0.9, ["END"])
    assert not params.ignore_eos


def test_the_processor_keeps_failed_rows_and_the_engines_text() -> None:
    config = data.processor_config(_batch(**GIVEN), "Qwen/Qwen3-0.6B")
    assert config["should_continue_on_error"] is True and config["detokenize_stage"] is False
    assert config["log_engine_metrics"] is False and config["engine_kwargs"]["disable_log_stats"] is True
    assert data.cpu_twin(config, "/m")["should_continue_on_error"] is True


def test_answered_rows_carry_no_engine_stats_so_failed_rows_merge_with_them() -> None:
    config = data.processor_config(_batch(engine_kwargs={"disable_log_stats": True, "max_num_seqs": 8}), "m")
    assert config["engine_kwargs"]["disable_log_stats"] is True and config["engine_kwargs"]["max_num_seqs"] == 8
    assert data.cpu_twin(config, "/m")["engine_kwargs"]["disable_log_stats"] is True
    (found,) = _problems(engine_kwargs={"disable_log_stats": False})
    assert found[0] == "engine_kwargs.disable_log_stats" and "true or absent" in found[2]


def test_a_block_of_failed_rows_merges_with_answered_ones_only_without_stats() -> None:
    """The merge Ray Data runs on an engine stage's output: a block of failed rows only (``metrics`` null) beside a
    block of answers; with per-row stats (a struct) Ray 2.60 raises, which :data:`data.NO_ROW_STATS` avoids."""
    import pyarrow as pa
    from ray.data._internal.arrow_ops import transform_pyarrow

    def block(stats: dict[str, float] | None, error: str) -> pa.Table:
        row = {"id": 1, "generated_tokens": [5] if not error else [], "metrics": stats, "__inference_error__": error,
               "time_taken_llm": 0.5 if not error else -1}
        return pa.Table.from_pylist([{"__data": row}])

    merged = transform_pyarrow.concat([block(None, ""), block(None, "E")], promote_types=True)
    assert merged.num_rows == 2
    with pytest.raises(TypeError):
        transform_pyarrow.concat([block({"arrival_time": 1.0}, ""), block(None, "E")], promote_types=True)


def test_the_processor_config_is_one_ray_data_llm_accepts() -> None:
    from ray.data.llm import vLLMEngineProcessorConfig

    parsed = vLLMEngineProcessorConfig(**data.processor_config(_batch(**GIVEN), "m"), chat_template_stage=True)
    assert parsed.should_continue_on_error is True


def test_rows_are_asked_as_chat_messages_or_raw_prompts_with_the_sampling() -> None:
    from raytpu.workloads import batch

    params = sampling.sampling_params(_batch(**GIVEN))
    chat, _ = batch.row_functions(("id", "prompt"), params, True)
    raw, _ = batch.row_functions(("id", "prompt"), params, False)
    row = {"id": 7, "prompt": "2+2?"}
    assert chat(row) == {"messages": [{"role": "user", "content": "2+2?"}], "__raytpu_prompt": "2+2?",
                         "sampling_params": params}
    assert raw(row) == {"prompt": "2+2?", "__raytpu_prompt": "2+2?", "sampling_params": params}


def test_a_failed_row_is_written_with_its_own_columns_and_its_error() -> None:
    """A row Ray Data LLM failed skips the postprocess and carries the engine stage's whole row, its prompt cut short
    (Ray 2.60 ``_generate_with_error_handling``): the output keeps the input's columns, its own prompt, the error."""
    from raytpu.workloads import batch

    _, shape = batch.row_functions(("id", "prompt", "lang"), {"max_tokens": 4}, True)
    failed = {"id": 3, "lang": "en", "prompt": "long...", "__raytpu_prompt": "long " * 3000, "messages": [],
              "prompt_token_ids": None, "num_input_tokens": 0, "generated_tokens": [], "generated_text": "",
              "num_generated_tokens": 0, "request_id": -1, "params": "", "time_taken_llm": -1,
              "__inference_error__": "VLLMValidationError: The decoder prompt (length 3001) is longer than ..."}
    assert shape(failed) == {"id": 3, "prompt": "long " * 3000, "lang": "en", "generated_text": "",
                             "num_input_tokens": 0, "num_generated_tokens": 0,
                             "__inference_error__": failed["__inference_error__"]}


def test_production_code_never_sets_ignore_eos() -> None:
    """Every row stops where the model ends it (or at max_tokens): ``ignore_eos`` is a benchmark's tool (bench/),
    never the kit's."""
    roots = ("raytpu", "workloads", "modules", "stacks", "examples")
    found = []
    for root in roots:
        for folder, _, files in os.walk(ROOT / root):
            found += [f"{folder}/{f}" for f in files if f.endswith((".py", ".yaml", ".toml", ".json", ".txt"))
                      and "ignore_eos" in Path(folder, f).read_text(encoding="utf-8", errors="replace")]
    assert found == []
    assert "ignore_eos" in (ROOT / "bench" / "serve.py").read_text()  # the scan reads what it should


def test_submit_local_runs_the_workload_with_its_sampling_fields() -> None:
    from types import SimpleNamespace

    from raytpu.local.slice.from_config import job_workload

    local: Any = SimpleNamespace(slice_spec=ONE_HOST)  # what job_workload reads of the emulated slice
    moved = job_workload(local, _batch(**GIVEN))
    assert {k: getattr(moved, k) for k in GIVEN} == GIVEN
