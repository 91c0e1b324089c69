"""Reading a file a user hands the kit: bounded in size, UTF-8, YAML with one value per key. A 10 MB file, a UTF-16
save, a duplicated key or an alias bomb gets one ``error:`` line (exit 2), not a traceback, a hang or a silent
last-wins. Limits: docs/DESIGN.md ("Limits")."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from typing import Any, ClassVar

import yaml

from raytpu.core.common.errors import InvalidInput, excerpt

MAX_BYTES = 1 << 20
"""The largest config read (1 MiB): a hundred slices and workloads with comments take under 100 KiB."""

MAX_NODES = 20_000
"""The most YAML nodes a config may hold, every alias counted as the nodes it stands for (a billion-laughs bomb
stops here, not in whatever later writes it out)."""

_BASE: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
"""libyaml's parser when PyYAML has it: it refuses deep nesting itself, where the pure-Python one recurses."""
_BOOL, _INT = "tag:yaml.org,2002:bool", "tag:yaml.org,2002:int"


class _Loader(_BASE):
    """PyYAML's safe loader with YAML 1.2 core scalars (YAML 1.1 reads ``12:30`` as 750, ``010`` as 8, ``no`` as false).
    Source: https://yaml.org/spec/1.2.2/#1032-tag-resolution"""

    yaml_implicit_resolvers: ClassVar[dict[Any, Any]] = {
        first: [(tag, rule) for tag, rule in rules if tag not in (_BOOL, _INT)]
        for first, rules in _BASE.yaml_implicit_resolvers.items()}


_Loader.add_implicit_resolver(_BOOL, re.compile(r"^(?:true|True|TRUE|false|False|FALSE)$"), list("tTfF"))
_Loader.add_implicit_resolver(_INT, re.compile(r"^[-+]?[0-9]+$"), list("-+0123456789"))
_Loader.add_constructor(_INT, lambda loader, node: int(loader.construct_scalar(node), 10))

_UTF16_BOMS = (b"\xff\xfe", b"\xfe\xff")
_SHOWN = 200
"""Characters of a path an error shows (its end, where the name is)."""


def read_text(path: Path, field: str, valid: str, limit: int = MAX_BYTES) -> str:
    """The text of the file at ``path`` (named ``field`` in errors): at most ``limit`` bytes, UTF-8 (a UTF-8
    byte-order mark is dropped). ``valid`` says what the file should be."""
    shown = excerpt(str(path), _SHOWN, tail=True)
    try:
        if path.exists() and not path.is_dir() and not path.is_file():  # a FIFO would block the open, /dev/zero
            raise InvalidInput(field, f"{shown} is not a regular file (a FIFO, socket or device)", valid)
        with path.open("rb") as handle:
            data = handle.read(limit + 1)
    except OSError as exc:
        raise InvalidInput(field, f"cannot read {shown} ({exc.strerror or exc})", valid) from exc
    if len(data) > limit:
        raise InvalidInput(field, f"{shown} is over {_size(limit)}", f"a file of at most {_size(limit)} ({valid})")
    if data.startswith(_UTF16_BOMS):
        raise InvalidInput(field, f"{shown} is UTF-16 text (it starts with a UTF-16 byte-order mark)",
                           "UTF-8 text: save it as UTF-8")
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = data[:exc.start].count(b"\n") + 1
        column = exc.start - (data.rfind(b"\n", 0, exc.start) + 1) + 1
        raise InvalidInput(field, f"{shown} is not UTF-8 text (byte 0x{data[exc.start]:02x} at line "
                           f"{line}, column {column})", "UTF-8 text: save it as UTF-8") from exc


def _size(count: int) -> str:
    return f"{count / (1 << 20):g} MiB" if count >= 1 << 20 else f"{count / 1024:g} KiB"


Loc = tuple[str | int, ...]


def load_yaml(text: str, source: str, field_of: Callable[[Loc], str] = lambda loc: "config",
              max_nodes: int = MAX_NODES) -> Any:
    """The value of YAML ``text`` (from ``source``); InvalidInput for a repeated key or more than ``max_nodes`` nodes,
    aliases expanded. ``field_of`` names a location's field (``workloads[2].model``)."""
    loader = _Loader(text)
    try:
        try:
            node = loader.get_single_node()
        except yaml.YAMLError as exc:
            mark = getattr(exc, "problem_mark", None)
            where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
            problem = getattr(exc, "problem", None) or "unreadable YAML"
            raise InvalidInput("config", f"{source} is not valid YAML{where}: {problem}",
                               "a YAML mapping as in raytpu.example.yaml") from exc
        if node is None:
            return None
        _check(node, source, field_of, max_nodes)
        try:
            return loader.construct_document(node)
        except (yaml.YAMLError, ValueError, TypeError, OverflowError) as exc:  # e.g. a date 2024-13-45
            mark = getattr(exc, "problem_mark", None)
            where = f" at line {mark.line + 1}" if mark else ""
            raise InvalidInput("config", f"{source} holds a value the kit cannot read{where}: "
                               f"{excerpt(str(getattr(exc, 'problem', None) or exc), 120)}",
                               "plain YAML scalars, lists and mappings as in raytpu.example.yaml") from exc
    finally:
        loader.dispose()


def _check(root: yaml.Node, source: str, field_of: Callable[[Loc], str], max_nodes: int) -> None:
    """Walks the node graph as its value will be walked (aliases expanded), stopping past ``max_nodes``."""
    seen = 0
    stack: list[tuple[yaml.Node, Loc]] = [(root, ())]
    checked: set[int] = set()  # mappings whose keys were checked (an alias repeats a node, not its keys' problems)
    while stack:
        node, loc = stack.pop()
        seen += 1
        if seen > max_nodes:
            raise InvalidInput(field_of(loc), f"{source} holds over {max_nodes:,} YAML values here or before "
                               "(aliases counted as what they repeat)",
                               f"a config of at most {max_nodes:,} values, aliases expanded")
        _readable(node, loc, source, field_of)
        if isinstance(node, yaml.SequenceNode):
            stack.extend((item, (*loc, i)) for i, item in reversed(list(enumerate(node.value))))
        elif isinstance(node, yaml.MappingNode):
            if id(node) not in checked:
                checked.add(id(node))
                _unique_keys(node, loc, source, field_of)
            stack.extend((value, (*loc, _key(key))) for key, value in reversed(node.value))


_TAGS = frozenset(f"tag:yaml.org,2002:{name}" for name in ("str", "int", "float", "bool", "null", "seq", "map",
                                                           "timestamp"))
"""The YAML tags a config may hold: the core schema's (a ``!env`` or ``!!python/name`` tag is refused by name)."""
MAX_INT_DIGITS = 30
"""The most digits an integer may have (Python refuses over 4,300; no field of the kit needs 30)."""


def _readable(node: yaml.Node, loc: Loc, source: str, field_of: Callable[[Loc], str]) -> None:
    """A node the kit reads: a core-schema tag, scalar keys, a bounded integer; else one error naming its field."""
    line = node.start_mark.line + 1
    if node.tag not in _TAGS:
        tag = node.tag.replace("tag:yaml.org,2002:", "!!")
        raise InvalidInput(field_of(loc), f"has the YAML tag {excerpt(tag, 60)} (line {line} of {source}), which "
                           "the kit does not read", "plain values without tags (strings, numbers, true/false, "
                           "lists, mappings); put the value itself in the file")
    if node.tag == _INT and isinstance(node, yaml.ScalarNode) and len(node.value.lstrip("+-")) > MAX_INT_DIGITS:
        raise InvalidInput(field_of(loc), f"is an integer of {len(node.value.lstrip('+-')):,} digits (line {line} "
                           f"of {source})", f"an integer of at most {MAX_INT_DIGITS} digits")
    if isinstance(node, yaml.MappingNode):
        for key, _ in node.value:
            if not isinstance(key, yaml.ScalarNode):
                kind = "list" if isinstance(key, yaml.SequenceNode) else "mapping"
                raise InvalidInput(field_of(loc) if loc else "config", f"has a {kind} as a key (line "
                                   f"{key.start_mark.line + 1} of {source})", "keys that are plain names, e.g. "
                                   "name: value")


def _unique_keys(node: yaml.MappingNode, loc: Loc, source: str, field_of: Callable[[Loc], str]) -> None:
    first: dict[object, int] = {}
    for key, _ in node.value:
        name = _key(key)
        if name in first:
            raise InvalidInput(field_of((*loc, name)), f"is given twice in {source} (lines {first[name]} and "
                               f"{key.start_mark.line + 1}): YAML keeps only the last",
                               "each key once in a mapping")
        first[name] = key.start_mark.line + 1


def _key(node: yaml.Node) -> str:
    """A mapping key as a location part: a scalar's text (``1`` and ``"1"`` are one key to a reader), else a
    bounded excerpt of the node."""
    return node.value if isinstance(node, yaml.ScalarNode) else f"<{node.tag.rsplit(':', 1)[-1]} key>"
