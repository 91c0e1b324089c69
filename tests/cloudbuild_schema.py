"""Cloud Build's request schema, read from the vendored proto (``tests/data/cloudbuild-v1/cloudbuild.proto``), and a
check of a JSON body against it by the proto3 JSON mapping (https://protobuf.dev/programming-guides/json/):
lowerCamelCase field names, int64 as a string or a number, ``bytes`` as base64 (standard or URL-safe, padded or
not), enums by name, ``google.protobuf.Duration`` as
``"<seconds>s"``, ``map<string, V>`` as an object.

What a request may not carry: an unknown field, a field of the wrong JSON type, an enum value the proto does not
declare, two members of one ``oneof``, an ``OUTPUT_ONLY`` field, and it must carry each field that is
``(google.api.field_behavior) = REQUIRED`` or documented "Required." (``Build.steps``, ``BuildStep.name``: the
reference marks them required in their comments only).
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

PROTO = Path(__file__).parent / "data" / "cloudbuild-v1" / "cloudbuild.proto"
_TOKEN = re.compile(r'//[^\n]*|"(?:[^"\\]|\\.)*"|[A-Za-z_][A-Za-z0-9_.]*|-?\d+|\S')
SCALARS = {"string", "bytes", "bool", "int32", "int64", "uint32", "uint64", "sint32", "sint64", "fixed32", "fixed64",
           "sfixed32", "sfixed64", "double", "float"}
DURATION = re.compile(r"^-?\d+(\.\d{1,9})?s$")
BASE64 = re.compile(r"^(?:[A-Za-z0-9+/]*={0,2}|[A-Za-z0-9_-]*={0,2})$")
TIMESTAMP = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d{1,9})?Z$")


@dataclass
class Field:
    name: str
    json_name: str
    type: str
    repeated: bool = False
    map_value: str | None = None
    oneof: str | None = None
    required: bool = False
    output_only: bool = False


@dataclass
class Schema:
    messages: dict[str, dict[str, Field]] = field(default_factory=dict)
    """Fully nested name (``Build.FailureInfo``) -> its fields by JSON name."""
    enums: dict[str, set[str]] = field(default_factory=dict)


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(p[:1].upper() + p[1:] for p in rest)


@functools.cache
def schema() -> Schema:
    """Every message and enum of the vendored proto."""
    tokens = _TOKEN.findall(PROTO.read_text())
    found = Schema()
    _parse_block(tokens, 0, [], found, None)
    return found


def _skip_statement(tokens: list[str], i: int) -> int:
    """Past the next ``;`` at depth 0 (``option (x) = { ... };`` and ``[(x) = { ... }]`` nest)."""
    depth = 0
    while i < len(tokens):
        tok = tokens[i]
        if tok in ("{", "["):
            depth += 1
        elif tok in ("}", "]"):
            depth -= 1
            if tok == "}" and depth == 0 and tokens[i + 1] != ";":
                return i + 1
        elif tok == ";" and depth == 0:
            return i + 1
        i += 1
    return i


def _parse_block(tokens: list[str], i: int, scope: list[str], out: Schema, oneof: str | None) -> int:
    comment: list[str] = []
    while i < len(tokens):
        tok = tokens[i]
        if tok.startswith("//"):
            comment.append(tok[2:].strip())
            i += 1
            continue
        if tok == "}":
            return i + 1
        if tok in ("message", "enum", "service") and tokens[i + 2] == "{":
            name = tokens[i + 1]
            if tok == "message":
                out.messages.setdefault(".".join([*scope, name]), {})
                i = _parse_block(tokens, i + 3, [*scope, name], out, None)
            elif tok == "enum":
                values, i = set(), i + 3
                while tokens[i] != "}":
                    if re.match(r"^[A-Z][A-Z0-9_]*$", tokens[i]) and tokens[i + 1] == "=":
                        values.add(tokens[i])
                    i += 1
                out.enums[".".join([*scope, name])] = values
                i += 1
            else:
                depth, i = 0, i + 2
                while True:
                    depth += {"{": 1, "}": -1}.get(tokens[i], 0)
                    i += 1
                    if depth == 0:
                        break
            comment = []
            continue
        if tok == "oneof" and tokens[i + 2] == "{":
            i = _parse_block(tokens, i + 3, scope, out, tokens[i + 1])
            comment = []
            continue
        if tok in ("option", "reserved", "syntax", "package", "import") or not scope:
            i = _skip_statement(tokens, i)
            comment = []
            continue
        # a field: [repeated|optional] TYPE name = N [options];  or  map<K, V> name = N [options];
        end = _skip_statement(tokens, i)
        words = tokens[i:end]
        repeated = words[0] == "repeated"
        words = words[1:] if words[0] in ("repeated", "optional") else words
        map_value = None
        if words[0] == "map":
            map_value, words = words[4], ["map", *words[6:]]
        type_, name = words[0], words[1]
        text = " ".join(words)
        out.messages[".".join(scope)][_camel(name)] = Field(
            name=name, json_name=_camel(name), type=type_, repeated=repeated, map_value=map_value, oneof=oneof,
            required="REQUIRED" in text or (bool(comment) and comment[0].startswith("Required.")),
            output_only="OUTPUT_ONLY" in text)
        comment = []
        i = end
    return i


def _resolve(type_: str, scope: str, names: set[str] | dict[str, Any]) -> str | None:
    """A type name as proto resolves it: innermost scope first."""
    parts = scope.split(".")
    for n in range(len(parts), -1, -1):
        candidate = ".".join([*parts[:n], type_])
        if candidate in names:
            return candidate
    return None


def request_errors(message: str, body: Any, path: str = "", *, response: bool = False) -> list[str]:
    """Every way ``body`` breaks message ``message`` as a request (empty: it conforms); with ``response``, as an
    answer (output-only fields allowed, required ones not demanded): the loopback server checks its own answers."""
    path = path or message
    s = schema()
    if not isinstance(body, dict):
        return [f"{path}: {body!r} is not a JSON object"]
    fields = s.messages[message]
    found = [f"{path}.{key}: no such field of {message}" for key in body if key not in fields]
    oneofs: dict[str, list[str]] = {}
    for key, f in fields.items():
        if key not in body:
            if f.required and not response:
                found.append(f"{path}.{key}: required")
            continue
        value = body[key]
        if f.output_only and not response:
            found.append(f"{path}.{key}: output only, not for requests")
        if f.oneof:
            oneofs.setdefault(f.oneof, []).append(key)
        if f.map_value is not None:
            if not isinstance(value, dict):
                found.append(f"{path}.{key}: {value!r} is not a map")
            else:
                for k, v in value.items():
                    found += _value_errors(f.map_value, message, v, f"{path}.{key}[{k!r}]", response)
        elif f.repeated:
            if not isinstance(value, list):
                found.append(f"{path}.{key}: {value!r} is not a list")
            else:
                if f.required and not value and not response:
                    found.append(f"{path}.{key}: required, and empty")
                for n, item in enumerate(value):
                    found += _value_errors(f.type, message, item, f"{path}.{key}[{n}]", response)
        else:
            found += _value_errors(f.type, message, value, f"{path}.{key}", response)
    found += [f"{path}: more than one of oneof {name} ({', '.join(keys)})" for name, keys in oneofs.items()
              if len(keys) > 1]
    if message == "BuildStep" and "script" in body:  # BuildStep.script: "the user cannot specify the entrypoint or
        found += [f"{path}.{key}: not with script" for key in ("args", "entrypoint") if key in body]  # args"
    return found


def _value_errors(type_: str, scope: str, value: Any, path: str, response: bool) -> list[str]:
    s = schema()
    if type_ == "google.protobuf.Duration":
        return [] if isinstance(value, str) and DURATION.match(value) else [f"{path}: {value!r} is not a Duration"]
    if type_ == "google.protobuf.Timestamp":
        return [] if isinstance(value, str) and TIMESTAMP.match(value) else [f"{path}: {value!r} is not a Timestamp"]
    if type_ == "string":
        return [] if isinstance(value, str) else [f"{path}: {value!r} is not a string"]
    if type_ == "bytes":
        base64_ok = isinstance(value, str) and bool(BASE64.match(value)) and len(value.rstrip("=")) % 4 != 1
        return [] if base64_ok else [f"{path}: {value!r} is not base64 (a bytes field)"]
    if type_ == "bool":
        return [] if isinstance(value, bool) else [f"{path}: {value!r} is not a boolean"]
    if type_ in ("int64", "uint64", "sint64", "fixed64", "sfixed64"):
        ok = (isinstance(value, int) and not isinstance(value, bool)) or (isinstance(value, str) and
                                                                          re.match(r"^-?\d+$", value))
        return [] if ok else [f"{path}: {value!r} is not an int64 (a number or a string of digits)"]
    if type_ in SCALARS:
        ok = isinstance(value, int | float) and not isinstance(value, bool)
        return [] if ok else [f"{path}: {value!r} is not a number"]
    enum = _resolve(type_, scope, s.enums)
    if enum is not None:
        return [] if value in s.enums[enum] else [f"{path}: {value!r} is not one of {enum} {sorted(s.enums[enum])}"]
    nested = _resolve(type_, scope, s.messages)
    if nested is None:
        return [f"{path}: type {type_} is not in the vendored proto"]
    return request_errors(nested, value, path, response=response)
