"""A team's own code on the slice: the code fields' rules that need no file system, and the ``RAYTPU_*`` env.

The folder's own checks read files (:mod:`raytpu.teamcode`). Standard library only (it ships to the pods).
"""

from __future__ import annotations

import datetime
import json
import math
import re
import shlex
from collections.abc import Mapping
from typing import Any

from raytpu.core.common import errors
from raytpu.core.common.errors import InvalidInput
from raytpu.core.specs import workload_fields
from raytpu.core.specs.kinds import WorkloadKind
from raytpu.core.tpu.plan import SlicePlan

CODE_FIELDS = workload_fields.group("code")
"""The workload fields that bring a team's code (``raytpu.yaml``; the CLI contract)."""

_IDENTIFIER = r"[A-Za-z_][A-Za-z0-9_]*"
TRAIN_LOOP = re.compile(rf"^(?P<module>{_IDENTIFIER}(\.{_IDENTIFIER})*):(?P<function>{_IDENTIFIER})$")
TRAIN_LOOP_VALID = "MODULE:FUNCTION, a module inside `code` and a function of it taking one argument, e.g. " \
                   "lm.train:train_loop"
MAX_TRAIN_CONFIG_BYTES = 64 * 1024
"""``train_config`` travels as JSON in the RayJob: hyperparameters, not data (docs/FACTS.md#spec-user-code).
Source: https://etcd.io/docs/v3.5/dev-guide/limit/ (an object is at most 1.5 MiB)."""
MAX_ENTRYPOINT_CHARS = 4096
PYTHONS = ("python", "python3")
"""An entrypoint starting with one of these runs a script (or ``-m`` module) the kit looks for inside ``code``."""
PYTHON_VALUE_OPTIONS = ("-W", "-X", "-Q")
"""Python options that take the next word as their value (so it is not the script)."""

SUBMITTER_SHELL = frozenset("$`;&|<>()\\#*?[]{}~!")
"""Characters bash would act on in an entrypoint before Ray sees it (expansions, lists, redirections, globs)."""

ENV_PREFIX = "RAYTPU_"

SHIPPED_CODE = "."
"""``code`` in the spec a job receives: the folder ships as the job's ``runtime_env.working_dir``, which Ray makes the
driver's current folder, so the submitting machine's absolute path would only leak it.
Source: Ray 2.60 ``ray._private.runtime_env.working_dir.WorkingDirPlugin.modify_context`` (``cd <dir> &&``)."""


def workload_problems(kind: WorkloadKind, *, image: str | None, code: object, train_loop: object,
                      train_config: object, entrypoint: object, requirements: object = None) -> list[InvalidInput]:
    """Which code fields ``kind`` takes, and how they go together (a ``train_loop`` without ``code``: in ``image``)."""
    given = {"code": code, "train_loop": train_loop, "train_config": train_config, "entrypoint": entrypoint}
    found = workload_fields.refusals(kind.name, {name: None if value is None else _shown(value)
                                                 for name, value in given.items()})
    if entrypoint is None and workload_fields.requires(kind.name, "entrypoint"):
        found.append(errors.missing("entrypoint", f"for kind {kind.name} (the team's own Ray driver)",
                                    "a command run in the code folder, e.g. python tools/reserve.py"))
    elif entrypoint is not None and workload_fields.takes(kind.name, "entrypoint"):
        found += entrypoint_words("entrypoint", entrypoint)[1]
    if kind.code_entry == "train_loop":
        if train_loop is not None:
            found += train_loop_problems("train_loop", train_loop)
            if code is None and image is None:
                found.append(errors.missing("code", "for train_loop on the kit's image (it carries no team code)",
                                            "code: ./src (a folder shipped with every run), or image: a team "
                                            "image whose Python path holds the module"))
        for name in ("code", "train_config"):
            if given[name] is not None and train_loop is None:
                found.append(errors.forbidden(name, _shown(given[name]), "without train_loop (the kit's own trainer "
                                              "takes neither)", f"train_loop: MODULE:FUNCTION with {name}"))
        if train_config is not None:
            found += train_config_problems("train_config", train_config)
    if requirements is not None and code is None:
        found.append(errors.forbidden("requirements", requirements, "without code (the file is read from the code "
                                      "folder)", "code: ./src with requirements: requirements.txt inside it"))
    elif requirements is not None and image is not None:
        found.append(errors.forbidden("requirements", requirements, f"with image {image} (the kit resolves and "
                                      "layers requirements on its own job image only)", "requirements on the kit's "
                                      "image (no `image`), or the libraries built into your own image"))
    elif requirements is not None and (not isinstance(requirements, str) or not requirements.strip()):
        found.append(errors.invalid_value("requirements", requirements, "is not a file path",
                                          "a file inside `code`, e.g. requirements.txt"))
    if code is not None and (not isinstance(code, str) or not code.strip() or "://" in code):
        found.append(errors.invalid_value("code", code, "is not a local folder path",
                                          "a folder relative to the config file, e.g. ./src"))
    return found


def _shown(value: object) -> object:
    """A mapping or list as YAML's flow style would show it (JSON), not as Python's repr."""
    return json.dumps(value, default=str) if isinstance(value, Mapping | list | tuple) else value


def split_train_loop(value: str) -> tuple[str, str]:
    """``(module, function)`` of a valid ``train_loop``."""
    module, _, function = value.partition(":")
    return module, function


def train_loop_problems(field: str, value: object) -> list[InvalidInput]:
    """``MODULE:FUNCTION`` with Python identifiers on both sides."""
    if isinstance(value, str) and TRAIN_LOOP.match(value) and not any(
            part in _KEYWORDS for part in re.split(r"[.:]", value)):
        return []
    return [errors.invalid_value(field, value, "is not MODULE:FUNCTION", TRAIN_LOOP_VALID)]


_KEYWORDS = frozenset(("False", "None", "True", "and", "as", "assert", "async", "await", "break", "class",
                       "continue", "def", "del", "elif", "else", "except", "finally", "for", "from", "global", "if",
                       "import", "in", "is", "lambda", "nonlocal", "not", "or", "pass", "raise", "return", "try",
                       "while", "with", "yield"))


def train_config_problems(field: str, value: object) -> list[InvalidInput]:
    """A mapping of string keys JSON carries as it is (no NaN, dates or binary), within the size limit."""
    valid = "a mapping of hyperparameters (strings, numbers, booleans, null, lists and mappings of them), e.g. " \
            "{steps: 20000, lr: 3.0e-4}"
    if not isinstance(value, Mapping):
        return [errors.invalid_value(field, _shown(value), f"is a {_yaml_type(value)}, not a mapping", valid)]
    bad = _unjsonable(value, field)
    if bad is not None:
        where, item = bad
        return [errors.invalid_value(where, _as_yaml(item), f"is a {_yaml_type(item)}, which JSON cannot carry as "
                                     "written", valid)]
    size = len(json.dumps(value, separators=(",", ":")))
    if size > MAX_TRAIN_CONFIG_BYTES:
        return [errors.invalid_value(field, _shown(value), f"is {size:,} bytes as JSON",
                                     f"at most {MAX_TRAIN_CONFIG_BYTES:,} bytes (data belongs in `dataset` or "
                                     "`code`, not in hyperparameters)")]
    return []


def _unjsonable(value: object, path: str) -> tuple[str, object] | None:
    """The first value under ``value`` (and its config path) that JSON would not carry unchanged."""
    if value is None or isinstance(value, bool | int | str):
        return None
    if isinstance(value, float):
        return None if math.isfinite(value) else (path, value)
    if isinstance(value, Mapping):
        for key, item in value.items():
            if not isinstance(key, str):
                return f"{path}[{key!r}]", key
            found = _unjsonable(item, errors.join_path(path, key if key.isidentifier() else f"[{key!r}]"))
            if found:
                return found
        return None
    if isinstance(value, list | tuple):
        for i, item in enumerate(value):
            if found := _unjsonable(item, f"{path}[{i}]"):
                return found
        return None
    return path, value


def _as_yaml(value: object) -> str:
    """A value as YAML writes it (``.nan``, ``2024-01-01``), not as Python's repr."""
    if isinstance(value, float):
        return ".nan" if math.isnan(value) else ("-.inf" if value < 0 else ".inf")
    if isinstance(value, datetime.date):
        return value.isoformat()
    return f"!!{_yaml_type(value)}"


def _yaml_type(value: object) -> str:
    """A value's type as YAML calls it."""
    names = {bool: "boolean", int: "integer", float: "number", str: "string", list: "list", tuple: "list",
             type(None): "null", dict: "mapping", bytes: "binary", set: "set"}
    for kind, name in names.items():
        if isinstance(value, kind):
            return name
    return "timestamp" if isinstance(value, datetime.date) else type(value).__name__


def entrypoint_words(field: str, value: object) -> tuple[list[str], list[InvalidInput]]:
    """The entrypoint split as a shell splits it, or why it cannot be."""
    valid = "a command run in the code folder, e.g. python tools/reserve.py --topology 4x4"
    if not isinstance(value, str) or not value.strip():
        return [], [errors.invalid_value(field, value, "is empty", valid)]
    if len(value) > MAX_ENTRYPOINT_CHARS:
        return [], [errors.invalid_value(field, value, f"is {len(value):,} characters long",
                                         f"at most {MAX_ENTRYPOINT_CHARS:,} characters (put long commands in a "
                                         "script inside `code`)")]
    if "\n" in value or "\0" in value:
        return [], [errors.invalid_value(field, value, "holds a line break or NUL", "one command line")]
    if odd := sorted({repr(c)[1:-1] for c in value if c.isspace() and c not in " \t"}):
        # bash splits words only at space, tab and newline, so `x.py\r--flag` stays one word (shlex would split it)
        # Source: KubeRay v1.7.0 common/job.go BuildJobSubmitCommand (entrypoint unquoted after `--` in `bash -ce`)
        return [], [errors.invalid_value(field, value, f"holds whitespace {' '.join(odd)}, which the submitter's "
                                         "bash keeps inside a word (it splits only at space and tab)",
                                         "one command line separated by spaces or tabs")]
    if shell := sorted({c for c in value if c in SUBMITTER_SHELL}):
        # Source: KubeRay v1.7.0 common/job.go BuildJobSubmitCommand (the entrypoint follows `--` unquoted, run by
        # `bash -ce` in the submitter pod)
        return [], [errors.invalid_value(field, value, f"holds {' '.join(shell)}, which the RayJob's submitter "
                                         "shell would act on itself (KubeRay runs the entrypoint unquoted in bash "
                                         "in the submitter pod, not on the Ray cluster)",
                                         "one command with plain arguments (quotes are fine); put pipes, "
                                         "variables and && in a script inside code")]
    try:
        return shlex.split(value), []
    except ValueError as exc:
        return [], [errors.invalid_value(field, value, f"is not a command line ({exc})", valid)]


def entrypoint_target(words: list[str]) -> tuple[str, str] | None:
    """What an entrypoint runs from the code folder: ``("script", PATH)`` or ``("module", NAME)``; else None."""
    if not words:
        return None
    first = words[0]
    if first.rsplit("/", 1)[-1] not in PYTHONS:
        return ("script", first) if first.startswith("./") else None
    args = iter(words[1:])
    for word in args:
        if word == "-m":
            return ("module", next(args, ""))
        if word == "-c" or word.startswith("-c"):
            return None
        if word in PYTHON_VALUE_OPTIONS:
            next(args, None)
            continue
        if word.startswith("-"):
            continue
        return ("script", word)
    return None


def run_env(plan: SlicePlan, *, slices: int, storage: str, run: str) -> dict[str, str]:
    """The ``RAYTPU_*`` variables a team's driver and workers read: the slice's shape and the run's checkpoints."""
    return {f"{ENV_PREFIX}{key}": str(value) for key, value in {
        "GENERATION": plan.generation, "TOPOLOGY": plan.topology, "HOSTS": plan.hosts,
        "CHIPS_PER_HOST": plan.chips_per_host, "SLICES": slices, "ACCELERATOR_TYPE": plan.ray_accelerator_type,
        "POD_TYPE": plan.ray_pod_type, "STORAGE": storage, "RUN": run}.items()}


def as_json(value: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """``train_config`` as plain JSON types (YAML's tuples as lists)."""
    return None if value is None else json.loads(json.dumps(value))
