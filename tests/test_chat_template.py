"""``workloads[].chat_template_kwargs`` (issue 49 item 10): Qwen3, the kit's default model, thinks unless its chat
template gets ``enable_thinking: false``. Batch passes it to Ray Data LLM's chat template stage, serve to vLLM's
frontend default; bad values are exit 2 naming the field (raytpu/core/specs/serving/chat_template.py)."""

from __future__ import annotations

import inspect
from typing import Any

import pytest

from raytpu.core.common.errors import InvalidInput, InvalidInputs
from raytpu.core.manifests import serving
from raytpu.core.specs import kinds
from raytpu.core.specs.serving import chat_template, vllm_rules
from raytpu.core.specs.spec import SliceSpec, WorkloadSpec

pytestmark = pytest.mark.unit

ONE_HOST = SliceSpec.create(name="one", generation="v6e", topology="2x4", zone="us-east5-b")
IO = {"input": "gs://my-data/prompts.jsonl", "output": "gs://my-data/answers"}
OFF = {"enable_thinking": False}


def _work(kind: str, **fields: Any) -> WorkloadSpec:
    return WorkloadSpec(name="w", kind=kinds.kind(kind), slice=ONE_HOST, **({**IO, **fields} if kind == "batch"
                                                                           else fields))


def test_serve_passes_it_as_vllms_frontend_default() -> None:
    """Source: vLLM 0.29.0 FrontendArgs.default_chat_template_kwargs; Ray 2.60 VLLMEngineConfig.from_llm_config"""
    assert chat_template.SERVE_ENGINE_KEY in vllm_rules.VLLM_FRONTEND_ARGS
    assert chat_template.SERVE_ENGINE_KEY not in vllm_rules.IMAGE_VLLM_NOT_YET
    config = serving.llm_config(_work("serve", chat_template_kwargs=OFF))
    assert config["engine_kwargs"]["default_chat_template_kwargs"] == OFF
    assert "default_chat_template_kwargs" not in serving.llm_config(_work("serve"))["engine_kwargs"]
    assert serving.engine_cli_args({"default_chat_template_kwargs": OFF}) == [
        "--default-chat-template-kwargs", '{"enable_thinking": false}']


def test_batch_passes_it_to_ray_data_llms_chat_template_stage(monkeypatch: pytest.MonkeyPatch) -> None:
    """Source: Ray 2.60 ray.data.llm.build_processor builder_kwargs, build_vllm_engine_processor chat_template_kwargs"""
    import ray.data.llm
    from ray.llm._internal.batch.processor.vllm_engine_proc import build_vllm_engine_processor

    from raytpu.workloads import batch

    assert "builder_kwargs" in inspect.signature(ray.data.llm.build_processor).parameters
    assert "chat_template_kwargs" in inspect.signature(build_vllm_engine_processor).parameters
    seen: list[dict[str, Any]] = []

    def build_processor(config: Any, **kw: Any) -> Any:
        seen.append(kw)
        return lambda ds: ds

    monkeypatch.setattr(ray.data.llm, "build_processor", build_processor)
    batch.build({"model_source": "m"}, ("prompt",), {"max_tokens": 4}, True, OFF)
    batch.build({"model_source": "m"}, ("prompt",), {"max_tokens": 4}, True, None)
    assert seen[0]["builder_kwargs"] == {"chat_template_kwargs": OFF} and seen[1]["builder_kwargs"] is None


def test_it_travels_in_the_workloads_json() -> None:
    work = _work("batch", chat_template_kwargs=OFF)
    assert WorkloadSpec.from_json(work.to_json()).chat_template_kwargs == OFF


@pytest.mark.parametrize(("kind", "fields", "field", "said"), [
    ("train", {"chat_template_kwargs": OFF}, "chat_template_kwargs", "only with kinds serve and batch"),
    ("serve", {"chat_template_kwargs": ["enable_thinking"]}, "chat_template_kwargs", "is not a non-empty mapping"),
    ("serve", {"chat_template_kwargs": {}}, "chat_template_kwargs", "is not a non-empty mapping"),
    ("batch", {"chat_template_kwargs": {"tokenize": True}}, "chat_template_kwargs.tokenize",
     "is passed by Ray's chat template stage itself"),
    ("batch", {"chat_template_kwargs": {"enable thinking": False}}, "chat_template_kwargs.enable thinking",
     "is not a template variable name"),
    ("batch", {"chat_template_kwargs": {"x": float("nan")}}, "chat_template_kwargs", "JSON cannot carry"),
    ("batch", {"chat_template_kwargs": OFF, "chat_template": False}, "chat_template_kwargs",
     "has no effect with chat_template: false"),
    ("serve", {"chat_template_kwargs": OFF, "engine_kwargs": {"default_chat_template_kwargs": OFF}},
     "chat_template_kwargs", "is given twice"),
], ids=["train", "list", "empty", "reserved", "name", "nan", "no-template", "twice"])
def test_a_bad_value_is_refused_naming_the_field(kind: str, fields: dict[str, Any], field: str, said: str) -> None:
    """Source: Ray 2.60 ChatTemplateUDF.__call__ (the names it passes apply_chat_template itself)"""
    with pytest.raises((InvalidInput, InvalidInputs)) as info:
        _work(kind, **fields)
    error = info.value
    problems = error.problems if isinstance(error, InvalidInputs) else [error] if isinstance(error, InvalidInput) else (
        [])
    assert any(p.field == field and said in str(p) for p in problems), str(info.value)


# ------------------------------------------------------------------------- issue 71 item 12: Qwen3 thinks by default


def test_the_built_in_models_that_think_are_the_qwen3_chat_models() -> None:
    """Source: the Qwen3-0.6B and Qwen3-8B model cards, "Switching Between Thinking and Non-Thinking Mode"
    (enable_thinking=True by default); Qwen3-8B-Base is pretrained only (docs/FACTS.md#vllm-chat-template)."""
    from raytpu.core.tpu.models import MODELS

    assert sorted(m.hf_id or m.name for m in MODELS.values() if m.thinks) == ["Qwen/Qwen3-0.6B", "Qwen/Qwen3-8B"]
    assert vllm_rules.DEFAULT_MODEL == "Qwen/Qwen3-0.6B"  # the README's batch example runs it


@pytest.mark.parametrize(("model", "model_source", "given", "gets"), [
    (None, None, None, OFF),  # the default model, Qwen3-0.6B
    ("Qwen/Qwen3-8B", None, None, OFF),
    ("qwen3-8b", None, None, OFF),  # the table's own name
    (None, "Qwen/Qwen3-0.6B", None, OFF),
    ("Qwen/Qwen3-8B", "gs://my-models/qwen3-8b", None, OFF),  # a gs:// copy of its weights: still that model
    ("Qwen/Qwen3-8B-Base", None, None, None),  # pretrained only: no thinking mode
    ("meta-llama/Llama-3.1-8B-Instruct", None, None, None),
    ("mistralai/Mixtral-8x7B-Instruct-v0.1", None, None, None),
    ("someone/unknown-model", None, None, None),
    (None, "gs://my-models/unknown", None, None),  # the weights' model is not known
    (None, "/models/qwen3", None, None),
    (None, None, {"enable_thinking": True}, {"enable_thinking": True}),  # an explicit value wins, whatever it says
    (None, None, OFF, OFF),
    ("Qwen/Qwen3-8B", None, {"custom": 1}, {"custom": 1}),  # given without enable_thinking: exactly as given
    ("meta-llama/Llama-3.1-8B-Instruct", None, {"enable_thinking": False}, OFF),
])
def test_a_batch_of_a_qwen3_gets_thinking_off_unless_its_config_says(
        model: str | None, model_source: str | None, given: dict[str, Any] | None,
        gets: dict[str, Any] | None) -> None:
    assert chat_template.batch_kwargs(model, model_source, given) == gets


@pytest.mark.parametrize(("fields", "gets"), [
    ({}, OFF),
    ({"model": "Qwen/Qwen3-8B"}, OFF),
    ({"chat_template_kwargs": {"enable_thinking": True}}, {"enable_thinking": True}),
    ({"model": "Qwen/Qwen3-8B-Base"}, None),
    ({"model": "mistralai/Mixtral-8x7B-Instruct-v0.1"}, None),
], ids=["default", "qwen3-8b", "explicit", "base", "mixtral"])
@pytest.mark.parametrize("cpu_model", [None, "/models/tiny"], ids=["tpu", "cpu-twin"])
def test_the_batch_job_builds_its_processor_with_them(monkeypatch: pytest.MonkeyPatch, fields: dict[str, Any],
                                                      gets: dict[str, Any] | None, cpu_model: str | None) -> None:
    """What ``python -m raytpu.workloads.batch`` builds from the spec it receives (RAYTPU_WORKLOAD's JSON): the
    processor config of the model, and the chat template stage's kwargs (Ray Data and the engine stubbed)."""
    import ray

    from raytpu.workloads import batch

    work = WorkloadSpec.from_json(_work("batch", **fields).to_json())
    built: list[tuple[dict[str, Any], bool, Any]] = []

    def build(config: dict[str, Any], columns: tuple[str, ...], params: dict[str, Any], chat: bool,
              template_kwargs: Any = None) -> Any:
        built.append((config, chat, template_kwargs))
        return lambda ds: ds

    class Remote:  # ray.remote(...)(RowCount): .remote() makes the actor, .total.remote() asks it
        def __init__(self, cls: Any) -> None:
            self.total = self

        def remote(self) -> Any:
            return self

    monkeypatch.setattr(batch, "refuse_taken", lambda output, overwrite: None)
    monkeypatch.setattr(batch, "read", lambda path: "dataset")
    monkeypatch.setattr(batch, "input_columns", lambda path, ds: ("prompt",))
    monkeypatch.setattr(batch, "has_chat_template", lambda source, trust=False: True)
    monkeypatch.setattr(batch, "build", build)
    monkeypatch.setattr(batch, "counted", lambda ds, counter: ds)
    monkeypatch.setattr(batch, "write", lambda ds, path, overwrite: None)
    monkeypatch.setattr(ray, "remote", lambda **kw: Remote)
    monkeypatch.setattr(ray, "get", lambda ref: 0)
    batch.run(work, cpu_model=cpu_model)
    ((config, chat, template_kwargs),) = built
    assert chat is True and template_kwargs == gets
    assert config["model_source"] == (cpu_model or work.model or vllm_rules.DEFAULT_MODEL)
