"""A spec's fields as JSON and back, derived from the dataclass's fields and their annotated types.

Why: specs copied by hand-written field lists dropped fields (issue 49: ``raytpu smoke`` lost ``compile_cache``,
``compile_budget_s`` and ``ray_disk_gib``). Encoding by field and decoding by annotation carries a new field with no
edit. Standard library only (it ships to the pods).
"""

from __future__ import annotations

import dataclasses
import types
import typing
from collections.abc import Mapping
from typing import Any

from raytpu.core.specs.kinds import WorkloadKind, kind


def encode(value: object) -> Any:
    """``value`` as plain JSON types: a kind by its name, a spec by its own ``to_json``, a dataclass by its fields,
    tuples as lists."""
    if value is None or isinstance(value, str | int | float | bool):
        return value
    if isinstance(value, WorkloadKind):
        return value.name
    if callable(getattr(value, "to_json", None)):
        return value.to_json()  # type: ignore[attr-defined]
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: encode(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, Mapping):
        return {str(k): encode(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [encode(v) for v in value]
    raise TypeError(f"{type(value).__name__} is not a JSON value")


def field_types(cls: Any) -> dict[str, Any]:
    """The annotated type of each init field of dataclass ``cls``."""
    hints = typing.get_type_hints(cls)
    return {f.name: hints[f.name] for f in dataclasses.fields(cls) if f.init}


def decode(hint: Any, value: Any) -> Any:
    """The inverse of :func:`encode` for a field annotated ``hint``."""
    if value is None:
        return None
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (typing.Union, types.UnionType):
        options = [a for a in args if a is not type(None)]
        if len(options) > 1 and isinstance(value, Mapping):  # a spec among plain types: a JSON object is the spec
            options = [a for a in options if isinstance(a, type) and dataclasses.is_dataclass(a)] or [Any]
        return decode(options[0], value) if len(options) == 1 else value
    if origin in (dict, Mapping) and len(args) == 2 and isinstance(value, Mapping):
        return {k: decode(args[1], v) for k, v in value.items()}
    if hint is WorkloadKind:
        return kind(value)
    if origin is tuple and isinstance(value, list | tuple):
        item = args[0] if args else Any
        return tuple(decode(item, v) for v in value)
    if isinstance(hint, type) and isinstance(value, Mapping):
        if callable(getattr(hint, "from_json", None)):
            return hint.from_json(value)  # type: ignore[attr-defined]
        if dataclasses.is_dataclass(hint):
            types_of = field_types(hint)
            return hint(**{k: decode(types_of.get(k, Any), v) for k, v in value.items()})
    return value
