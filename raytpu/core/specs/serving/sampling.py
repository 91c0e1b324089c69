"""The ``batch`` kind's sampling fields: their rules, checked offline, and each row's vLLM ``SamplingParams``."""

from __future__ import annotations

import math
from typing import Any, Protocol

from raytpu.core.common import errors
from raytpu.core.common.errors import InvalidInput
from raytpu.core.specs import workload_fields
from raytpu.core.specs.kinds import WorkloadKind
from raytpu.core.specs.serving.vllm_rules import DEFAULT_MAX_MODEL_LEN

SAMPLING_FIELDS = workload_fields.group("sampling")
"""WorkloadSpec fields only the ``batch`` kind takes."""
DEFAULT_MAX_TOKENS = 64
DEFAULT_TEMPERATURE = 0.0
"""Greedy unless asked: a rerun of a batch answers as the first run did."""
MAX_TEMPERATURE = 2.0
MAX_STOP_STRINGS = 64
"""A bound of the kit's own (vLLM sets none): each stop string is matched against every row's output as it grows."""


class SamplingWork(Protocol):
    """The fields these rules read; a protocol, so this module does not import the spec."""

    @property
    def kind(self) -> WorkloadKind: ...
    @property
    def max_model_len(self) -> int | None: ...
    @property
    def max_tokens(self) -> int | None: ...
    @property
    def temperature(self) -> float | None: ...
    @property
    def top_p(self) -> float | None: ...
    @property
    def stop(self) -> tuple[str, ...] | None: ...


def _number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def _context(work: SamplingWork) -> int:
    return work.max_model_len if isinstance(work.max_model_len, int) else DEFAULT_MAX_MODEL_LEN


def sampling_problems(work: SamplingWork) -> list[InvalidInput]:
    """Each sampling field given to a kind other than ``batch``, or out of the range vLLM accepts
    (docs/FACTS.md#ray-data-sampling-fields).
    Source: vLLM 0.29.0 ``SamplingParams._verify_args``; ``InputProcessor._validate_model_input``."""
    given = {name: getattr(work, name) for name in SAMPLING_FIELDS if getattr(work, name) is not None}
    if refused := workload_fields.refusals(work.kind.name, given):
        return refused
    found = []
    if "max_tokens" in given:
        tokens, context = given["max_tokens"], _context(work)
        if not (isinstance(tokens, int) and not isinstance(tokens, bool) and 1 <= tokens < context):
            found.append(errors.invalid_value("max_tokens", tokens, "is out of range", f"a whole number from 1 to "
                                              f"{context - 1} (below the context, max_model_len {context}: the "
                                              "prompt takes at least one token of it)"))
    if "temperature" in given and not (_number(given["temperature"]) and 0 <= given["temperature"] <= MAX_TEMPERATURE):
        found.append(errors.invalid_value("temperature", given["temperature"], "is out of range",
                                          f"a number from 0 to {MAX_TEMPERATURE:g} (0: greedy)"))
    if "top_p" in given and not (_number(given["top_p"]) and 0 < given["top_p"] <= 1):
        found.append(errors.invalid_value("top_p", given["top_p"], "is out of range", "a number > 0 and <= 1"))
    if "stop" in given:
        found += stop_problems(given["stop"])
    if "chat_template" in given and not isinstance(given["chat_template"], bool):
        found.append(errors.invalid_value("chat_template", given["chat_template"], "is not a boolean",
                                          "true or false (absent: apply it when the model's tokenizer has one)"))
    return found


def stop_problems(stop: object) -> list[InvalidInput]:
    """``stop`` is a list of at most :data:`MAX_STOP_STRINGS` non-empty strings."""
    valid = f"a list of at most {MAX_STOP_STRINGS} non-empty strings"
    if not isinstance(stop, list | tuple):
        return [errors.invalid_value("stop", stop, "is not a list", valid)]
    if len(stop) > MAX_STOP_STRINGS:
        return [errors.invalid_value("stop", stop, f"holds {len(stop)} strings", valid)]
    return [errors.invalid_value(f"stop[{i}]", item, "is not a non-empty string", valid)
            for i, item in enumerate(stop) if not isinstance(item, str) or not item]


def sampling_params(work: SamplingWork) -> dict[str, Any]:
    """The ``vllm.SamplingParams`` kwargs for ``work``'s rows: its fields, else the defaults and greedy."""
    params: dict[str, Any] = {
        "max_tokens": work.max_tokens if work.max_tokens is not None else DEFAULT_MAX_TOKENS,
        "temperature": float(work.temperature if work.temperature is not None else DEFAULT_TEMPERATURE)}
    if work.top_p is not None:
        params["top_p"] = float(work.top_p)
    if work.stop:
        params["stop"] = list(work.stop)
    return params
