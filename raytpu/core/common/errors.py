"""The kit's named errors: one place that formats every "field: problem; valid: ..." message (CLI: exit 2)."""

from __future__ import annotations

import dataclasses
import datetime
import errno
import os
import re
import reprlib
import sys
import traceback
from collections.abc import Callable, Iterable, Sequence
from typing import TypeVar

T = TypeVar("T")

EXIT_RUNTIME = 1
EXIT_INVALID = 2
EXIT_INTERRUPTED = 130
"""Ctrl-C or SIGTERM, for every command (docs/DESIGN.md, the CLI contract)."""

_MAX_LISTED = 12
MAX_EXCERPT = 80
"""Characters of a bad value an error line shows (its length is said when it is cut)."""
_MAX_PART = 400
"""Characters of a message's problem or valid part: nothing a user typed makes an error line long."""


class RaytpuError(Exception):
    """Base of the kit's errors; ``exit_code`` is what the CLI exits with."""

    exit_code = EXIT_RUNTIME


class InvalidInput(RaytpuError, ValueError):
    """One bad value: which field, what is wrong with it, and what would be valid."""

    exit_code = EXIT_INVALID

    def __init__(self, field: str, problem: str, valid: str) -> None:
        self.field = _bounded(field, _MAX_PART)
        self.problem = _bounded(problem, _MAX_PART)
        self.valid = _bounded(valid, _MAX_PART)
        super().__init__(f"{self.field}: {self.problem}; valid: {self.valid}")

    def at(self, prefix: str) -> InvalidInput:
        """The same problem, its field placed under ``prefix`` (``slices[1]`` + ``reservation``)."""
        return InvalidInput(join_path(prefix, self.field), self.problem, self.valid)


def excerpt(value: object, limit: int = MAX_EXCERPT, *, tail: bool = False) -> str:
    """``value`` as an error shows it, cut to about ``limit`` characters (the tail with ``tail``): a string quoted, any
    other value as the user wrote it in YAML (``true``, ``null``, ``{a: 1}``, ``[x]``: never a Python repr such as
    ``True`` or ``{'a': 1}``; issue 48). Containers are cut by depth and length, so an alias bomb costs no more than a
    short string."""
    if tail and isinstance(value, str) and len(value) > limit:
        return f"{'...' + value[-limit:]!r} ({len(value)} characters)"
    try:
        shown = repr(value)[: limit * 4] if isinstance(value, str) else yaml_flow(value, limit)
    except ValueError:  # an int past Python's 4300-digit str limit
        return f"a whole number of {value.bit_length() if isinstance(value, int) else '?'} bits"
    if len(shown) <= limit:
        return shown
    return f"{shown[:limit]}..." + (f" ({len(value)} characters)" if isinstance(value, str) else "")


_FLOW_ITEMS = 6
"""Items of a list or mapping an excerpt shows (then ``...``)."""
_FLOW_DEPTH = 3
_PLAIN = re.compile(r"[A-Za-z_/.][A-Za-z0-9_./@+-]*\Z")
_YAML_WORDS = frozenset({"true", "false", "null", "yes", "no", "on", "off", "y", "n", "~"})


def yaml_flow(value: object, limit: int = MAX_EXCERPT, depth: int = 0) -> str:
    """``value`` in YAML's flow style, bounded (about ``limit`` characters a string, :data:`_FLOW_ITEMS` items a
    container, :data:`_FLOW_DEPTH` levels): what a user wrote in ``raytpu.yaml`` reads back as they wrote it."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)[: limit * 4]
    if isinstance(value, datetime.date):  # YAML 1.1's timestamp (2024-01-01): as the user wrote it, not a repr
        return value.isoformat()
    if isinstance(value, str):
        if _PLAIN.match(value) and value.lower() not in _YAML_WORDS and len(value) <= limit:
            return value
        cut = value[:limit]
        return "'" + cut.replace("'", "''") + "'" + ("..." if len(value) > limit else "")
    if dataclasses.is_dataclass(value) and not isinstance(value, type):  # a spec read from YAML: its fields
        value = {f.name: getattr(value, f.name) for f in dataclasses.fields(value)
                 if getattr(value, f.name) is not None}
    if isinstance(value, dict | list | tuple | set | frozenset):
        if depth >= _FLOW_DEPTH:
            return "{...}" if isinstance(value, dict) else "[...]"
        if isinstance(value, dict):
            items = list(value.items())
            shown = [f"{yaml_flow(k, limit, depth + 1)}: {yaml_flow(v, limit, depth + 1)}"
                     for k, v in items[:_FLOW_ITEMS]]
            opened, closed = "{", "}"
        else:
            items = list(value)
            shown = [yaml_flow(v, limit, depth + 1) for v in items[:_FLOW_ITEMS]]
            opened, closed = "[", "]"
        more = [f"... ({len(items)} items)"] if len(items) > _FLOW_ITEMS else []
        return opened + ", ".join(shown + more) + closed
    return _REPR.repr(value)


_REPR = reprlib.Repr()
_REPR.maxlevel, _REPR.maxstring, _REPR.maxother, _REPR.maxlong = 3, MAX_EXCERPT, MAX_EXCERPT, MAX_EXCERPT


def _bounded(text: str, limit: int) -> str:
    """``text`` with its middle elided past ``limit`` characters: the last guard against a huge error line."""
    if len(text) <= limit:
        return text
    return f"{text[:limit - 60]} ...({len(text) - limit + 40} characters)... {text[-20:]}"


class InvalidInputs(RaytpuError, ValueError):
    """Several bad values found in one pass (a config file), reported together."""

    exit_code = EXIT_INVALID

    def __init__(self, problems: Sequence[InvalidInput]) -> None:
        self.problems = list(problems)
        super().__init__("\n".join(str(p) for p in self.problems))


def join_path(prefix: str, field: str) -> str:
    """``slices[1]`` + ``zone`` -> ``slices[1].zone``; ``labels`` + ``['Team']`` -> ``labels['Team']``."""
    if not prefix:
        return field
    return f"{prefix}{field}" if field.startswith("[") else f"{prefix}.{field}"


def join_key(path: str, key: object) -> str:
    """``path`` and a mapping's ``key`` as a field path shows it: ``train_config.lr``, ``train_config['a b']``, and a
    key YAML typed as it wrote it (``train_config[2024-01-01]``, ``train_config[3]``), never a Python repr."""
    if isinstance(key, str):
        return join_path(path, key if key.isidentifier() else f"[{key!r}]")
    return f"{path}[{yaml_flow(key)}]"


def problems_of(error: InvalidInput | InvalidInputs) -> list[InvalidInput]:
    """The single problems an error carries."""
    return list(error.problems) if isinstance(error, InvalidInputs) else [error]


class Problems:
    """Collects every problem of one pass (``raytpu validate`` reports them all), each under its path."""

    def __init__(self) -> None:
        self.items: list[InvalidInput] = []

    def add(self, problem: InvalidInput, prefix: str = "") -> None:
        """Records ``problem`` under ``prefix``."""
        self.items.append(problem.at(prefix))

    def build(self, prefix: str, make: Callable[[], T]) -> T | None:
        """Runs ``make``; its problems are recorded under ``prefix`` and None is returned instead."""
        try:
            return make()
        except (InvalidInput, InvalidInputs) as exc:
            for problem in problems_of(exc):
                self.add(problem, prefix)
            return None

    def __bool__(self) -> bool:
        return bool(self.items)

    def raise_any(self) -> None:
        """Raises every recorded problem at once (InvalidInputs), if there is one."""
        if self.items:
            raise InvalidInputs(self.items)


def raise_found(found: Sequence[InvalidInput]) -> None:
    """Raises the problems one pass found, together (one as InvalidInput, several as InvalidInputs; none: nothing)."""
    if len(found) == 1:
        raise found[0]
    if found:
        raise InvalidInputs(found)


class RuntimeFailure(RaytpuError):
    """Something ran and failed (an unhealthy slice, a failed job): exit 1, ``<problem>; valid: <valid>``.
    Raise it ``from`` its cause (shown under ``RAYTPU_DEBUG=1``)."""

    exit_code = EXIT_RUNTIME

    def __init__(self, problem: str, valid: str | None = None) -> None:
        self.problem = problem
        self.valid = valid
        super().__init__(problem if valid is None else f"{problem}; valid: {valid}")


DEBUG_ENV = "RAYTPU_DEBUG"
"""``RAYTPU_DEBUG=1``: an error is followed by the traceback of what caused it (otherwise one line each)."""


def report(error: RaytpuError) -> None:
    """Writes an error to stderr, one ``error: ...`` line per problem; ``RAYTPU_DEBUG=1`` adds the cause's traceback."""
    for problem in problems_of(error) if isinstance(error, InvalidInput | InvalidInputs) else [error]:
        sys.stderr.write(f"error: {problem}\n")
    if os.environ.get(DEBUG_ENV, "") not in ("", "0"):
        sys.stderr.write("".join(traceback.format_exception(error)))


def listing(values: Iterable[object], limit: int = _MAX_LISTED) -> str:
    """Joins valid values for a message, eliding the middle of very long lists."""
    items = [str(v) for v in values]
    if len(items) <= limit:
        return ", ".join(items)
    head = items[: limit - 2]
    return ", ".join([*head, f"... ({len(items) - limit + 1} more)", items[-1]])


def invalid_choice(field: str, value: object, choices: Iterable[object], hint: str = "") -> InvalidInput:
    """A value that is not one of a known set; lists the set."""
    valid = listing(choices)
    return InvalidInput(field, f"{excerpt(value)} is not allowed{hint}", valid)


def invalid_value(field: str, value: object, rule: str, valid: str) -> InvalidInput:
    """A value that breaks a rule (format, range); states the rule and what would be valid."""
    return InvalidInput(field, f"{excerpt(value)} {rule}", valid)


def unmatched(field: str, value: object, pattern: re.Pattern[str], rule: str, valid: str) -> list[InvalidInput]:
    """No problem when ``value`` is a string ``pattern`` matches; else one :func:`invalid_value`."""
    return [] if isinstance(value, str) and pattern.match(value) else [invalid_value(field, value, rule, valid)]


def missing(field: str, why: str, valid: str) -> InvalidInput:
    """A field that must be present in this context."""
    return InvalidInput(field, f"is required {why}", valid)


def forbidden(field: str, value: object, why: str, valid: str) -> InvalidInput:
    """A field that must be absent in this context."""
    return InvalidInput(field, f"{excerpt(value)} is not allowed {why}", valid)


FULL_DISK = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EROFS})
"""A write the file system itself refused (no space, over quota, read-only), not the path (a file where a folder
belongs, another user's folder)."""


def full_disk(exc: OSError) -> bool:
    """Whether ``exc`` is a write the file system refused (:data:`FULL_DISK`)."""
    return exc.errno in FULL_DISK


def folder_valid(exc: OSError, flag: str = "--dir", folder: str = "run folder") -> str:
    """What to do about a ``folder`` (chosen with ``flag``: an option or a variable) that ``exc`` says cannot be
    written: an error line's ``valid:`` part."""
    if exc.errno in (errno.ENOSPC, errno.EDQUOT):
        return f"free space on that disk, or a {folder} on another ({flag})"
    if exc.errno in (errno.EROFS, errno.EACCES, errno.EPERM):
        return f"a writable {folder} ({flag})"
    return f"a {folder} this user can write ({flag})"


MAX_JSON_BYTES = 1 << 20
"""The largest JSON file a flag names (1 MiB): a model's config.json or a price table is a few KiB."""
MAX_JSON_DEPTH = 32
"""The deepest nesting read from such a file (a config.json nests three levels)."""


class _Pairs(dict[str, object]):
    """A JSON object that remembers a key it was given twice (json keeps the last silently)."""

    twice: str | None = None


def _pairs(items: list[tuple[str, object]]) -> _Pairs:
    found = _Pairs()
    for key, value in items:
        if key in found and found.twice is None:
            found.twice = key
        found[key] = value
    return found


def _walk_json(value: object, field: str, depth: int = 0) -> None:
    """Refuses a key given twice or nesting past :data:`MAX_JSON_DEPTH`, naming where in the file."""
    if depth > MAX_JSON_DEPTH:
        raise InvalidInput(field, f"nests deeper than {MAX_JSON_DEPTH} levels", f"JSON nested at most "
                           f"{MAX_JSON_DEPTH} levels")
    if isinstance(value, _Pairs):
        if value.twice is not None:
            raise InvalidInput(join_path(field, value.twice), "is given twice in the file: JSON keeps only the last",
                               "each key once in an object")
        for key, item in value.items():
            _walk_json(item, join_path(field, key), depth + 1)
    elif isinstance(value, list):
        for index, item in enumerate(value):
            _walk_json(item, f"{field}[{index}]", depth + 1)


def nesting(value: object, limit: int) -> int:
    """How many levels of lists and objects ``value`` (parsed JSON) nests, counted without recursion and only up to
    ``limit + 1`` (a file nested thousands deep costs no more than one nested ``limit``)."""
    deepest, stack = 0, [(value, 0)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict | list) and depth <= limit:
            deepest = max(deepest, depth + 1)
            stack.extend((child, depth + 1) for child in (item.values() if isinstance(item, dict) else item))
    return deepest


def read_json_file(path: str, field: str, what: str) -> object:
    """The JSON in the file at ``path``; InvalidInput naming ``field`` for a non-regular file, size, encoding, depth
    or a repeated key (docs/FACTS.md#spec-common). ``what`` says what it should be."""
    import json
    import stat

    try:
        mode = os.stat(path).st_mode
        if not stat.S_ISREG(mode):
            kind = "a folder" if stat.S_ISDIR(mode) else "not a regular file (a FIFO, socket or device)"
            raise invalid_value(field, path, f"is {kind}", f"the path of {what}, a regular file")
        with open(path, "rb") as handle:
            data = handle.read(MAX_JSON_BYTES + 1)
    except OSError as exc:
        raise invalid_value(field, path, f"cannot be read ({exc.strerror or exc})", f"the path of {what}") from exc
    if len(data) > MAX_JSON_BYTES:
        raise invalid_value(field, path, f"is over {MAX_JSON_BYTES >> 20} MiB", f"{what} of at most 1 MiB")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise invalid_value(field, path, "is not UTF-8 text", what) from exc
    try:
        value = json.loads(text, object_pairs_hook=_pairs)
    except json.JSONDecodeError as exc:
        raise invalid_value(field, path, f"is not JSON ({exc.msg}, line {exc.lineno})", what) from exc
    except RecursionError as exc:
        raise invalid_value(field, path, f"nests deeper than {MAX_JSON_DEPTH} levels", what) from exc
    _walk_json(value, field)
    return value


_EXCEPTION_LINE = re.compile(r"^[A-Za-z_][\w.]*(\([\w.]+\))?: \S")
"""How Python prints an exception under its traceback: ``module.Name: message`` (Ray: ``RayTaskError(Name): ...``)."""


def exception_line(message: str, limit: int = 300) -> str:
    """A failure's message (often a whole Python traceback, as Serve reports a failed app) as one line: the
    exception's type and message, else its last line, at most ``limit`` characters."""
    lines = [line.strip() for line in str(message or "").splitlines() if line.strip()]
    found = next((line for line in reversed(lines) if _EXCEPTION_LINE.match(line)), lines[-1] if lines else "")
    return found if len(found) <= limit else found[:limit] + "..."
