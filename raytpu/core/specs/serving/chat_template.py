"""``workloads[].chat_template_kwargs``: keyword arguments for the model's chat template (Qwen3's
``{enable_thinking: false}`` turns its thinking mode off), for the engine kinds; where each engine takes them.

- ``batch``: Ray Data LLM's chat template stage, ``build_processor(..., builder_kwargs={"chat_template_kwargs": ...})``,
  which ``ChatTemplateUDF`` passes to ``apply_chat_template(conversation, tokenize=False, chat_template=...,
  add_generation_prompt=..., continue_final_message=..., **chat_template_kwargs)``.
  Source: Ray 2.60 ``ray.data.llm.build_processor`` (builder_kwargs), ``build_vllm_engine_processor``,
  ``ray.llm._internal.batch.stages.chat_template_stage.ChatTemplateUDF.__call__``.
- ``serve``: vLLM's ``FrontendArgs.default_chat_template_kwargs`` (the server's defaults, a request's own
  ``chat_template_kwargs`` on top), an ``engine_kwargs`` key Ray Serve LLM routes to the frontend.
  Source: vLLM 0.29.0 ``FrontendArgs`` (:data:`raytpu.core.specs.serving.vllm_rules.VLLM_FRONTEND_ARGS`); Ray 2.60
  ``VLLMEngineConfig.from_llm_config`` (FrontendArgs fields to ``frontend_kwargs``).

A batch of a built-in model that thinks (Qwen3: :attr:`raytpu.core.tpu.models.ModelShape.thinks`) gets
``{enable_thinking: false}`` unless the config gives ``chat_template_kwargs`` (:func:`batch_kwargs`): a batch's
``generated_text`` is the answer, not the model's reasoning cut off by ``max_tokens``. A serving workload keeps the
model's own default: each request may set ``chat_template_kwargs`` itself.

Standard library only."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

from raytpu.core.common import errors
from raytpu.core.common.errors import InvalidInput
from raytpu.core.specs import workload_fields
from raytpu.core.specs.serving.vllm_rules import sized_model
from raytpu.core.tpu.models import by_hf_id

FIELD = "chat_template_kwargs"
SERVE_ENGINE_KEY = "default_chat_template_kwargs"
"""The vLLM frontend argument a serving workload's ``chat_template_kwargs`` becomes."""
RESERVED = ("conversation", "tokenize", "chat_template", "add_generation_prompt", "continue_final_message")
"""Names Ray's chat template stage already passes to ``apply_chat_template``: one of them again is a TypeError
("got multiple values") on every row. Source: Ray 2.60 ``ChatTemplateUDF.__call__``."""
NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,63}$")
"""A template variable's name: a Jinja identifier (what a template can read)."""
MAX_JSON = 4096
"""A bound of the kit's own: the kwargs travel in every row's config and the RayService's serveConfigV2."""
VALID = ("a mapping of template variable names to JSON values, such as {enable_thinking: false} (names: letters, "
         "digits, _; not " + ", ".join(RESERVED) + ")")


def problems(kind_name: str, takes_model: bool, batches: bool, value: object, chat_template: bool | None,
             engine_kwargs: Mapping[str, Any] | None) -> list[InvalidInput]:
    """What is wrong with a workload's ``chat_template_kwargs``: on a kind without an engine, not a mapping of
    names to JSON values, a name Ray's stage passes itself, on a batch whose ``chat_template: false`` never applies
    the template, beside ``engine_kwargs.default_chat_template_kwargs`` (two sources for one setting)."""
    if value is None:
        return []
    if not workload_fields.takes(kind_name, FIELD):
        return [workload_fields.refusal(FIELD, value, kind_name)]
    if not isinstance(value, Mapping) or not value:
        return [errors.invalid_value(FIELD, value, "is not a non-empty mapping", VALID)]
    found = [errors.invalid_value(f"{FIELD}.{key}" if isinstance(key, str) else FIELD, key,
                                  "is not a template variable name" if key not in RESERVED else
                                  "is passed by Ray's chat template stage itself", VALID)
             for key in value if not isinstance(key, str) or not NAME.match(key) or key in RESERVED]
    try:
        text = json.dumps(dict(value), allow_nan=False)
    except (TypeError, ValueError):
        return [*found, errors.invalid_value(FIELD, value, "holds a value JSON cannot carry", VALID)]
    if len(text) > MAX_JSON:
        found.append(errors.invalid_value(FIELD, value, f"is {len(text)} characters of JSON", f"at most {MAX_JSON}"))
    if batches and chat_template is False:
        found.append(errors.invalid_value(FIELD, value, "has no effect with chat_template: false (the rows are sent "
                                          "as raw prompts)", "leave chat_template out or true, or drop "
                                          "chat_template_kwargs"))
    if not batches and engine_kwargs and SERVE_ENGINE_KEY in engine_kwargs:
        found.append(errors.invalid_value(FIELD, value, f"is given twice (engine_kwargs.{SERVE_ENGINE_KEY} too)",
                                          f"one of chat_template_kwargs and engine_kwargs.{SERVE_ENGINE_KEY}"))
    return found


NO_THINKING: dict[str, Any] = {"enable_thinking": False}
"""What a batch of a model that thinks gets when its config gives no ``chat_template_kwargs``. Source: the Qwen3 model
cards, "Switching Between Thinking and Non-Thinking Mode" (docs/FACTS.md#vllm-chat-template)."""


def batch_kwargs(model: str | None, model_source: str | None, value: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """The ``chat_template_kwargs`` a batch's chat template stage gets: the config's ``value`` when it gives one (it
    wins, whatever it says), else :data:`NO_THINKING` for a built-in model that thinks (the model whose shape rules
    the workload, :func:`raytpu.core.specs.serving.vllm_rules.sized_model`), else none."""
    if value is not None:
        return dict(value)
    shape = by_hf_id(sized_model(model, model_source))
    return dict(NO_THINKING) if shape is not None and shape.thinks else None


def engine_kwargs(value: Mapping[str, Any] | None) -> dict[str, Any]:
    """The ``engine_kwargs`` entry a serving workload's ``chat_template_kwargs`` becomes (empty without one)."""
    return {SERVE_ENGINE_KEY: dict(value)} if value else {}
