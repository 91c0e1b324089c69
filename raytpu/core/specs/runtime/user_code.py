"""A team's own code on the slice: the code fields' rules that need no file system, and the ``RAYTPU_*`` env.

The folder's own checks read files (:mod:`raytpu.teamcode`). Standard library only (it ships to the pods).
"""

from __future__ import annotations

import ast
import datetime
import inspect
import json
import math
import re
import shlex
from collections.abc import Callable, Mapping
from dataclasses import dataclass
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
TRAIN_LOOP_VALID = "MODULE:FUNCTION, a module inside `code` and a function of it taking one argument (its " \
                   "train_config) or none, e.g. lm.train:train_loop"
MAX_TRAIN_CONFIG_BYTES = 64 * 1024
"""``train_config`` travels as JSON in the RayJob: hyperparameters, not data (docs/FACTS.md#spec-user-code).
Source: https://etcd.io/docs/v3.5/dev-guide/limit/ (an object is at most 1.5 MiB)."""
MAX_ENTRYPOINT_CHARS = 4096
PYTHON_COMMAND = re.compile(r"^python(3(\.\d+)?)?$")
"""``python``, ``python3``, ``python3.11``: however the entrypoint spells the interpreter, its script is checked."""
ASSIGNMENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")
"""A variable assignment bash reads before the command word. Source: bash(1) "SIMPLE COMMAND EXPANSION"."""
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
    found = workload_fields.refusals(kind.name, {name: None if value is None else value
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
                found.append(errors.forbidden(name, given[name], "without train_loop (the kit's own trainer "
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




DRIVER, EVERY_HOST = "driver", "every_host"
RUN_ON = (DRIVER, EVERY_HOST)
"""``workloads[].run_on`` of a ``kind: job``: the entrypoint as a Ray driver on the head (default), or once per TPU
host of the run (docs/FACTS.md#run-on-every-host)."""


def run_on_problems(field: str, value: object, kind_name: str) -> list[InvalidInput]:
    """``run_on``: one of :data:`RUN_ON` (another kind refuses it from the fields table)."""
    if value is None or not workload_fields.takes(kind_name, "run_on") or value in RUN_ON:
        return []
    return [errors.invalid_value(field, value, "is not where an entrypoint can run",
                                 f"{DRIVER} (default: once, on the Ray head: a Ray driver) or {EVERY_HOST} (once on "
                                 "every TPU host: a plain JAX program)")]


def unmeasured_phases(on_every_host: bool) -> dict[str, str]:
    """The timeline phases a ``kind: job`` run leaves to the team's code (``raytpu.core.common.timeline``): a team's
    driver places and trains as it likes; on every host the kit places the hosts, and the program compiles and steps
    in processes of its own."""
    inside = "not measured: the team's own Ray driver runs this part; the kit's code does not see it"
    program = "not measured: the team's program runs on every host as a process of its own; the kit does not see " \
              "its compile or steps"
    if on_every_host:
        return {"compiled": program, "first_step": program}
    return {phase: inside for phase in ("ray_joined", "reserved", "trainer_started", "compiled", "first_step")}


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


@dataclass(frozen=True)
class LoopParameters:
    """What a ``train_loop`` function's parameters say about how it is called, read from its source (:mod:`ast`, by
    ``validate``) or from the function itself (:mod:`inspect`, by the train program): one rule for both.

    ``required`` counts as Ray Train counts: positional parameters without a default, ``*args`` as one.
    Source: Ray 2.60 ``ray.train._internal.utils.count_required_parameters``."""

    required: int
    positional: bool
    """It takes a positional argument at all (a positional parameter, with or without a default, or ``*args``)."""
    required_keywords: tuple[str, ...]
    shown: str
    """The parameters as written, e.g. ``config, seed=0``."""

    @classmethod
    def of_source(cls, args: ast.arguments) -> LoopParameters:
        """From a ``def``'s parameters as :mod:`ast` reads them (never imported)."""
        positional = [*args.posonlyargs, *args.args]
        return cls(required=len(positional) - len(args.defaults) + (args.vararg is not None),
                   positional=bool(positional) or args.vararg is not None,
                   required_keywords=tuple(a.arg for a, d in zip(args.kwonlyargs, args.kw_defaults, strict=True)
                                           if d is None),
                   shown=ast.unparse(args))

    @classmethod
    def of_function(cls, function: Callable[..., Any]) -> LoopParameters | None:
        """From the function itself (:func:`inspect.signature`, as Ray Train reads it); None when Python cannot tell
        (some builtins)."""
        try:
            signature = inspect.signature(function)
        except (TypeError, ValueError):
            return None
        parameters = list(signature.parameters.values())
        kinds = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
        star = inspect.Parameter.VAR_POSITIONAL
        return cls(required=len([p for p in parameters if (p.kind in kinds and p.default is inspect.Parameter.empty)
                                 or p.kind == star]),
                   positional=any(p.kind in (*kinds, star) for p in parameters),
                   required_keywords=tuple(p.name for p in parameters if p.kind == inspect.Parameter.KEYWORD_ONLY
                                           and p.default is inspect.Parameter.empty),
                   shown=str(signature.replace(return_annotation=inspect.Signature.empty))[1:-1])


def passes_config(parameters: LoopParameters | None, configured: bool) -> bool:
    """Whether the kit calls the team's function with its ``train_config`` (``{}`` when unset, as Ray Train passes
    it) or with no argument: with it when a parameter is required, or when ``train_config`` is set and the function
    takes a positional argument (``def f(config=None)``); with none when nothing is required and nothing is set, as
    Ray Train calls such a function. A function whose parameters cannot be read gets the config.
    Source: Ray 2.60 ``ray.train.v2._internal.util.construct_train_func`` (one required parameter: the config; none:
    called with no argument)."""
    if parameters is None:
        return True
    return parameters.required >= 1 or (configured and parameters.positional)


def train_loop_arguments(function: Callable[..., Any], config: Mapping[str, Any] | None, configured: bool
                         ) -> tuple[Any, ...]:
    """The arguments the kit calls the team's ``train_loop`` with: ``(config,)`` or ``()`` (:func:`passes_config`)."""
    return (config,) if passes_config(LoopParameters.of_function(function), configured) else ()


def loop_call_problems(prefix: str, train_loop: str, parameters: LoopParameters, train_config: object,
                       where: str = "") -> list[InvalidInput]:
    """Whether the kit can call the function of ``train_loop`` (its ``parameters``) with what the workload gives it:
    at most one required argument and no required keyword (Ray Train passes ``train_loop_config`` or nothing); a
    ``train_config`` only to a function that takes an argument. ``prefix`` is the workload's config path (``""`` on
    the pod), ``where`` the module's file, when known."""
    function = split_train_loop(train_loop)[1]
    valid = f"def {function}(config): ...{f' at the top level of {where}' if where else ''}"
    if parameters.required > 1 or parameters.required_keywords:
        # Source: Ray 2.60 ray.train.v2._internal.util.construct_train_func (0 or 1 required arguments; a required
        # keyword-only parameter is never passed)
        what = (f"needs keyword argument(s) {', '.join(parameters.required_keywords)}, which nothing passes"
                if parameters.required <= 1 else "needs more than one argument")
        return [errors.invalid_value(errors.join_path(prefix, "train_loop"), train_loop,
                                     f"{function} takes ({parameters.shown}): it {what} (Ray Train passes "
                                     "train_loop_config or nothing)", f"{valid} (or {function}() without "
                                     "train_config)")]
    if train_config is not None and not parameters.positional:
        # Source: Ray 2.60 ray.train.v2._internal.util.construct_train_func (no required parameter: called bare)
        return [errors.invalid_value(errors.join_path(prefix, "train_config"), train_config,
                                     f"is set, but {train_loop} takes no argument ({function}({parameters.shown})), "
                                     "so there is nothing to pass it to",
                                     f"a parameter on the function ({valid}) or no train_config")]
    return []


_KEYWORDS = frozenset(("False", "None", "True", "and", "as", "assert", "async", "await", "break", "class",
                       "continue", "def", "del", "elif", "else", "except", "finally", "for", "from", "global", "if",
                       "import", "in", "is", "lambda", "nonlocal", "not", "or", "pass", "raise", "return", "try",
                       "while", "with", "yield"))


def train_config_problems(field: str, value: object) -> list[InvalidInput]:
    """A mapping of string keys JSON carries as it is (no NaN, dates or binary), within the size limit."""
    valid = "a mapping of hyperparameters (strings, numbers, booleans, null, lists and mappings of them), e.g. " \
            "{steps: 20000, lr: 3.0e-4}"
    if not isinstance(value, Mapping):
        return [errors.invalid_value(field, value, f"is a {_yaml_type(value)}, not a mapping", valid)]
    bad = _unjsonable(value, field)
    if bad is not None:
        where, item, is_key = bad
        shown = _as_yaml(item)
        if is_key:  # YAML typed the key (2024-01-01 a date, 3 an integer): JSON's keys are strings
            return [InvalidInput(where, f"the key {shown} is {_a(_yaml_type(item))}, which JSON cannot carry as a "
                                 "key", f"a string key: quote it, '{shown}'")]
        quote = f" (quoted, '{shown}' is the string)" if isinstance(item, datetime.date) else ""
        return [InvalidInput(where, f"{shown} is {_a(_yaml_type(item))}, which JSON cannot carry as written",
                             valid + quote)]
    size = len(json.dumps(value, separators=(",", ":")))
    if size > MAX_TRAIN_CONFIG_BYTES:
        return [errors.invalid_value(field, (value), f"is {size:,} bytes as JSON",
                                     f"at most {MAX_TRAIN_CONFIG_BYTES:,} bytes (data belongs in `dataset` or "
                                     "`code`, not in hyperparameters)")]
    return []


def _unjsonable(value: object, path: str) -> tuple[str, object, bool] | None:
    """The first value or key under ``value`` that JSON would not carry unchanged: its config path (a key as YAML
    wrote it, :func:`raytpu.core.common.errors.join_key`), itself, and whether it is a mapping's key."""
    if value is None or isinstance(value, bool | int | str):
        return None
    if isinstance(value, float):
        return None if math.isfinite(value) else (path, value, False)
    if isinstance(value, Mapping):
        for key, item in value.items():
            if not isinstance(key, str):
                return errors.join_key(path, key), key, True
            found = _unjsonable(item, errors.join_key(path, key))
            if found:
                return found
        return None
    if isinstance(value, list | tuple):
        for i, item in enumerate(value):
            if found := _unjsonable(item, f"{path}[{i}]"):
                return found
        return None
    return path, value, False


def _as_yaml(value: object) -> str:
    """A value as YAML writes it (``.nan``, ``2024-01-01``, ``3``), not as Python's repr; ``!!<type>`` for the rest."""
    if isinstance(value, float) and not math.isfinite(value):
        return ".nan" if math.isnan(value) else ("-.inf" if value < 0 else ".inf")
    if isinstance(value, bool | int | float | datetime.date) or value is None:
        return errors.yaml_flow(value)
    return f"!!{_yaml_type(value)}"


def _a(noun: str) -> str:
    """``noun`` with its indefinite article (``an integer``, ``a timestamp``)."""
    return f"{'an' if noun[:1] in 'aeiou' else 'a'} {noun}"


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
    if words and words[0] == "env":  # `env NAME=value ... python x.py`
        words = words[1:]
    while words and ASSIGNMENT.match(words[0]):  # bash's `NAME=value python x.py`: the command comes after
        words = words[1:]
    if not words:
        return None
    first = words[0]
    if not PYTHON_COMMAND.match(first.rsplit("/", 1)[-1]):
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


def raytpu_env(plan: SlicePlan, *, slices: int, storage: str, run: str) -> dict[str, str]:
    """The ``RAYTPU_*`` variables a team's driver and workers read: the slice's shape and the run's checkpoints."""
    return {f"{ENV_PREFIX}{key}": str(value) for key, value in {
        "GENERATION": plan.generation, "TOPOLOGY": plan.topology, "HOSTS": plan.hosts,
        "CHIPS_PER_HOST": plan.chips_per_host, "SLICES": slices, "ACCELERATOR_TYPE": plan.ray_accelerator_type,
        "POD_TYPE": plan.ray_pod_type, "STORAGE": storage, "RUN": run}.items()}


def as_json(value: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """``train_config`` as plain JSON types (YAML's tuples as lists)."""
    return None if value is None else json.loads(json.dumps(value))
