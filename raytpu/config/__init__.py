"""``raytpu.yaml``: its structure checked by pydantic, then compiled once into a ``ClusterSpec``.

Every field is declared once, on its spec dataclass (:mod:`raytpu.core.specs.spec`); the YAML structure is derived
from them (:func:`structure_of`: types and unknown keys) and every value rule lives in the specs, which
:func:`compile_config` runs, placing each problem under its config path (``slices[1].reservation``): whatever
``raytpu validate`` accepts, every layer accepts. :mod:`raytpu.config.reading` reads any file a user hands the kit."""

from __future__ import annotations

import collections.abc
import contextlib
import dataclasses
import functools
import operator
import os
import sys
import types
import typing
from collections.abc import Callable, Mapping
from functools import partial
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, StrictBool, StrictFloat, StrictInt, StrictStr, ValidationError, create_model

from raytpu.config import overrides as override
from raytpu.config import reading
from raytpu.core.common import errors
from raytpu.core.common.errors import InvalidInput, InvalidInputs, Problems, join_path
from raytpu.core.specs import kinds
from raytpu.core.specs.cluster.cluster_parts import AlertingSpec, GkeSpec, NetworkSpec, StorageSpec
from raytpu.core.specs.cluster.security import SecuritySpec
from raytpu.core.specs.cluster.teams import TeamSpec
from raytpu.core.specs.runtime import run_env
from raytpu.core.specs.spec import ClusterSpec, SliceSpec, WorkloadSpec, cluster_problems
from raytpu.core.tpu.catalog import GENERATIONS

DEFAULT_CONFIG = "raytpu.yaml"
CONFIG_ENV = "RAYTPU_CONFIG"


def default_path(environ: Mapping[str, str] | None = None) -> str:
    """The config read when none is named: ``$RAYTPU_CONFIG``, else ``raytpu.yaml`` (cdktf.json's app and every command
    agree). No fallback to the example: deploying its project by accident is worse than an error."""
    return (os.environ if environ is None else environ).get(CONFIG_ENV) or DEFAULT_CONFIG


EXAMPLE_CONFIG = "raytpu.example.yaml"
"""The complete example: what the local commands (``local``, ``demo``) read on a fresh clone."""


def choose(given: str | None, *, local: bool = False, environ: Mapping[str, str] | None = None,
           announce: bool = True) -> str:
    """The config a command reads: the one named on the command line; else :func:`default_path` when it exists or
    the command touches GCP (then it is the missing file the error names); else (``local``, ``demo``)
    ``raytpu.example.yaml``, so ``make run`` works on a fresh clone. ``announce``: stderr says ``raytpu: config PATH
    (why)`` for a config not named on the command line, unless it is a GCP command's plain ``raytpu.yaml``."""
    if given:
        return given
    env = os.environ if environ is None else environ
    path = default_path(env)
    why = f"${CONFIG_ENV}" if env.get(CONFIG_ENV) else "the default"
    if local and not Path(path).exists() and not env.get(CONFIG_ENV):
        path, why = EXAMPLE_CONFIG, f"no {DEFAULT_CONFIG} here: the example; `cp {EXAMPLE_CONFIG} {DEFAULT_CONFIG}` " \
                                    "to make your own"
    if announce and (local or env.get(CONFIG_ENV)) and Path(path).exists():
        print(f"raytpu: config {path} ({why})", file=sys.stderr)
    return path


# ---------------------------------------------------------------------------------------------- structure

WRITTEN_AS: dict[tuple[type, str], dict[str, Any]] = {
    # A slice's plan is written as plan_slice's inputs, its modes by name: SliceSpec.create plans and looks them up.
    (SliceSpec, "plan"): {"generation": str, "topology": str, "machine_type": str | None},
    (SliceSpec, "provisioning"): {"provisioning": str},
    (SliceSpec, "fallback"): {"fallback": tuple[str, ...]},
    # A workload's kind and slice are written by name: compile_config looks them up.
    (WorkloadSpec, "kind"): {"kind": str},
    (WorkloadSpec, "slice"): {"slice": str},
    # Not configurable.
    (ClusterSpec, "namespace"): {},
}
"""The one place a spec field is written in YAML other than as its spec type: (spec, field) -> the YAML keys and types
standing for it."""

_SPEC_OF: dict[type[BaseModel], type] = {}
_MODEL_NAMES = {ClusterSpec: "Config", GkeSpec: "ClusterModel"}
"""Pydantic names a structure's class in a wrong-type message (``instance of clustermodel``): the names messages
have always shown; any other structure is ``<spec name without Spec>Model``."""


@functools.cache
def structure_of(spec: type) -> type[BaseModel]:
    """The YAML structure of spec dataclass ``spec``: one key per field (or its :data:`WRITTEN_AS` keys), unknown keys
    refused, a field without a default required, one with a default optional or null (left unset), nested specs nested.
    Not ``TypeAdapter(spec)``: it would run the spec's ``__post_init__`` rules and cannot build the types written by
    name."""
    hints = typing.get_type_hints(spec)
    keys: dict[str, Any] = {}
    for field in dataclasses.fields(spec):
        required = field.default is dataclasses.MISSING and field.default_factory is dataclasses.MISSING
        for key, hint in WRITTEN_AS.get((spec, field.name), {field.name: hints[field.name]}).items():
            written = _written(hint)
            keys[key] = (written, ...) if required and not _admits_none(hint) else (written | None, None)
    name = _MODEL_NAMES.get(spec, spec.__name__.removesuffix("Spec") + "Model")
    model = create_model(name, __config__=ConfigDict(extra="forbid", frozen=True),
                         __doc__=f"The YAML structure of :class:`{spec.__module__}.{spec.__name__}`.", **keys)
    _SPEC_OF[model] = spec
    return model


_STRICT: dict[Any, Any] = {int: StrictInt, bool: StrictBool, str: StrictStr, float: StrictFloat}
"""Scalars are taken as YAML typed them: ``count: '2'``, ``2.0`` or ``true`` is a mistake to report (pydantic's lax mode
would read 2, 2 and 1). A float field takes a whole number too, never a string or a boolean."""


def _written(hint: Any) -> Any:
    """A spec type as written in YAML: spec dataclasses become their structures, scalars strict (:data:`_STRICT`),
    inside unions, tuples and mappings too."""
    if hint in _STRICT:
        return _STRICT[hint]
    if isinstance(hint, type) and dataclasses.is_dataclass(hint):
        return structure_of(hint)
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (typing.Union, types.UnionType):
        return functools.reduce(operator.or_, (_written(a) for a in args))
    if origin is tuple:
        return tuple[tuple(a if a is Ellipsis else _written(a) for a in args)]  # type: ignore[misc]
    if origin in (dict, collections.abc.Mapping):
        return origin[_written(args[0]), _written(args[1])]
    return hint


def _admits_none(hint: Any) -> bool:
    return type(None) in typing.get_args(hint)


Config: Any = structure_of(ClusterSpec)
"""The whole of ``raytpu.yaml``, as written (structure only; :func:`compile_config` makes it a spec)."""


# ---------------------------------------------------------------------------------------------- parse, compile

LIMITS = {"slices": 100, "workloads": 100, "teams": 50}
"""The most entries of each list a config may hold (docs/DESIGN.md, "Limits"), checked before the structure."""



def load(path: str | Path | None = None, *, workload: str | None = None,
         overrides: collections.abc.Sequence[str] = ()) -> ClusterSpec:
    """Reads and compiles a config file (default :func:`default_path`); raises InvalidInputs listing every
    problem with its config path. A workload's ``code`` is relative to the file's folder. ``overrides``
    (``--set KEY=VALUE``) change ``workload``'s fields before compiling (:mod:`raytpu.config.overrides`).
    Public API: ``from raytpu import load``."""
    path = Path(path or default_path())
    text = reading.read_text(path, "config", f"a readable UTF-8 config (start from raytpu.example.yaml; "
                             f"{CONFIG_ENV} names the default)")
    return parse(text, str(path), base=path.parent, workload=workload, overrides=overrides)


def parse(text: str, source: str = DEFAULT_CONFIG, base: Path | None = None, *, workload: str | None = None,
          overrides: collections.abc.Sequence[str] = ()) -> ClusterSpec:
    """Validates and compiles config text; InvalidInputs lists every problem with its field path. Code folders are made
    absolute against ``base`` (default: the working folder), never read (:mod:`raytpu.teamcode.prepared` reads them)."""
    data = reading.load_yaml(text, source, field_at)
    if not isinstance(data, dict):
        shown = "empty" if data is None else f"a {type(data).__name__}, not a mapping"
        raise InvalidInput("config", f"{source} is {shown}", f"a mapping with keys {_keys(Config)}")
    for key, limit in LIMITS.items():
        if isinstance(data.get(key), list) and len(data[key]) > limit:
            raise InvalidInput(key, f"{len(data[key]):,} {key} in {source} are over the limit",
                               f"at most {limit} {key} in one config (split the fleet into several configs)")
    if overrides and workload is not None:
        try:
            return _parse_data(override.apply(data, workload, overrides, list(structure_of(WorkloadSpec).model_fields)),
                               base)
        except (InvalidInput, InvalidInputs) as exc:
            index = next((i for i, w in enumerate(data.get("workloads") or ())
                          if isinstance(w, dict) and w.get("name") == workload), None)
            raise InvalidInputs([override.renamed(p, f"workloads[{index}]", overrides)
                                 for p in errors.problems_of(exc)]) from exc
    return _parse_data(data, base)


def _parse_data(data: dict[str, Any], base: Path | None) -> ClusterSpec:
    """The loaded YAML checked and compiled (:func:`parse`'s second half)."""
    try:
        config = Config.model_validate(data)
    except ValidationError as exc:
        raise InvalidInputs(structure_problems(exc.errors())) from exc
    return compile_config(_code_folders(config, base or Path.cwd()))


def _code_folders(config: Any, base: Path) -> Any:
    """``config`` with every workload's ``code`` made absolute against ``base`` (those of a kind that takes code,
    spelled as a local path: the spec reports the others). No folder is read here: a workload's code is read once,
    by the command that needs it (:mod:`raytpu.teamcode.prepared`)."""
    workloads = list(config.workloads or ())
    for i, work in enumerate(workloads):
        code, kind = work.code, kinds.KINDS.get(work.kind)
        if not isinstance(code, str) or not code.strip() or "://" in code or kind is None or not kind.code_entry:
            continue
        workloads[i] = work.model_copy(update={"code": str(Path(os.path.abspath(base / os.path.expanduser(code))))})
    return config.model_copy(update={"workloads": tuple(workloads)}) if workloads else config


def compile_config(config: Any) -> ClusterSpec:
    """Compiles a parsed :data:`Config` into a ClusterSpec, every problem under its config path: the parts (cluster,
    network, storage, slices, workloads) first, all problems together; then the rules spanning parts (zones, unique
    names, Autopilot limits)."""
    problems = Problems()
    gke = _build(problems, "cluster", GkeSpec, config.cluster)
    network = _build(problems, "network", NetworkSpec, config.network)
    storage = _build(problems, "storage", StorageSpec, config.storage)
    security = _build(problems, "security", SecuritySpec, config.security)
    alerting = None if config.alerting is None else _build(problems, "alerting", AlertingSpec, config.alerting)
    slices = [_build(problems, f"slices[{i}]", SliceSpec, s, SliceSpec.create) for i, s in enumerate(config.slices)]
    teams = [_build(problems, f"teams[{i}]", TeamSpec, t) for i, t in enumerate(config.teams or ())]
    built = {s.name: s for s in slices if s is not None}
    names = list(dict.fromkeys(s.name for s in config.slices))
    workloads: list[WorkloadSpec | None] = []  # one entry per config workload (None: it failed)
    for i, work in enumerate(config.workloads or ()):
        workloads.append(None)
        if work.slice not in names:
            problems.add(errors.invalid_choice("slice", work.slice, names or ["(none: the config has no slices)"]),
                         f"workloads[{i}]")
        elif work.slice in built:  # a slice that failed to compile has its own problems reported
            workloads[i] = _build(problems, f"workloads[{i}]", WorkloadSpec, work,
                                  partial(_workload, built[work.slice]))
    if problems or gke is None or network is None or storage is None or security is None:
        # The cluster-wide rules still judge the parts that compiled: every problem is reported at once.
        for problem in cluster_problems(project=config.project, region=config.region, cluster=gke, storage=storage,
                                        slices=slices, workloads=workloads,
                                        teams=teams):
            problems.add(problem)
        problems.raise_any()
        raise AssertionError("unreachable: a part failed without a problem")
    spec = problems.build("", partial(
        ClusterSpec, project=config.project, region=config.region, cluster=gke, network=network, storage=storage,
        slices=tuple(s for s in slices if s is not None), workloads=tuple(w for w in workloads if w is not None),
        alerting=alerting, security=security, teams=tuple(t for t in teams if t is not None)))
    problems.raise_any()
    assert spec is not None
    return spec


_BROKEN = object()
"""A nested part that failed its rules and has no default to judge its parent with."""


def _build(problems: Problems, path: str, spec: type, written: BaseModel | None,
           make: Callable[..., Any] | None = None) -> Any:
    """The spec ``spec`` (built by ``make``) from its section as written (None: absent), only the keys given; nested
    sections first, under their paths. None when it has problems, recorded under ``path``. A nested section that
    failed is left out of its parent, so a problem the parent then finds at that very field (``hf_token_secret`` is
    required for a gated model) is the same problem said again: only the section's own are kept."""
    given, broken = {}, set()
    for key in type(written).model_fields if written is not None else ():
        value = getattr(written, key)
        if value is not None:
            part = _part(problems, join_path(path, key), value)
            if part is not _BROKEN:
                given[key] = part
            else:
                broken.add(join_path(path, key))
    if not broken:
        return problems.build(path, partial(make or spec, **given))
    own = Problems()
    built = own.build(path, partial(make or spec, **given))
    problems.items += [p for p in own.items if p.field not in broken]
    return built


def _part(problems: Problems, path: str, value: Any) -> Any:
    """One written value as its spec value: a nested section is built (a broken one is reported and its parent is
    judged with the section's default, or without it, :data:`_BROKEN`); a list keeps the items that built."""
    if isinstance(value, tuple):
        items = (_part(problems, f"{path}[{i}]", v) for i, v in enumerate(value))
        return tuple(v for v in items if v is not _BROKEN)
    if isinstance(value, BaseModel):
        spec = _SPEC_OF[type(value)]
        built = _build(problems, path, spec, value)
        return _BROKEN if built is None and (built := _default(spec)) is None else built
    if isinstance(value, Mapping) and any(isinstance(v, BaseModel) for v in value.values()):  # secrets' {name, key}
        parts = {k: _part(problems, join_path(path, str(k)), v) for k, v in value.items()}
        return {k: v for k, v in parts.items() if v is not _BROKEN}
    return value


def _default(spec: type) -> Any:
    """The spec built from its defaults alone; None when it has required fields."""
    try:
        return spec()
    except (TypeError, InvalidInput, InvalidInputs):
        return None


def _workload(on: SliceSpec, **given: Any) -> WorkloadSpec:
    """A workload as written: its kind and slice (``on``) looked up by name."""
    return WorkloadSpec(**{**given, "kind": kinds.kind(given["kind"]), "slice": on})


# ---------------------------------------------------------------------------------------------- structure errors


def structure_problems(found: collections.abc.Sequence[Any]) -> list[InvalidInput]:
    """pydantic's errors as InvalidInputs, one line per problem, each naming the config's own field: pydantic reports
    a value no member of a union field takes (``keep_checkpoints: true`` of ``int | str``) once per member, under
    the member's tag (``keep_checkpoints.int``, ``keep_checkpoints.str``); those become one line naming the field
    (:func:`_union_problem`), or, where one member's own fields were wrong, that member's problems alone."""
    lines: list[InvalidInput | tuple[Any, ...]] = []
    unions: dict[tuple[Any, ...], list[Any]] = {}
    for error in found:
        loc, union = _untagged(tuple(error["loc"]))
        if union is None:
            lines.append(_from_pydantic({**error, "loc": loc}))
            continue
        if union not in unions:
            unions[union] = []
            lines.append(union)
        unions[union].append({**error, "loc": loc})
    out: list[InvalidInput] = []
    for line in lines:
        for problem in [line] if isinstance(line, InvalidInput) else _union_problem(line, unions[line]):
            if str(problem) not in {str(p) for p in out}:
                out.append(problem)
    return out


def _untagged(loc: tuple[Any, ...]) -> tuple[tuple[Any, ...], tuple[Any, ...] | None]:
    """``loc`` without the member tag pydantic puts after a union-typed field, and the location of that field (None:
    the location crosses no union). Walks the structure's annotations as far as they go."""
    node: Any = Config
    out: list[Any] = []
    union: tuple[Any, ...] | None = None
    parts = list(loc)
    while parts:
        part = parts.pop(0)
        out.append(part)
        if node is None:
            continue
        node = _unwrap(node)
        if isinstance(part, str) and isinstance(node, type) and issubclass(node, BaseModel) \
                and part in node.model_fields:
            node = node.model_fields[part].annotation
        elif isinstance(part, int) and typing.get_origin(node) is tuple:
            node = _unwrap(node, index=True)
        elif typing.get_origin(node) in (dict, collections.abc.Mapping) and part != "[key]":
            node = typing.get_args(node)[-1]
        else:
            node = None
            continue
        members = [a for a in typing.get_args(node) if a is not type(None)] \
            if typing.get_origin(node) in (typing.Union, types.UnionType) else []
        if len(members) > 1 and parts:  # pydantic names the member next: drop it; below it, no annotation to walk
            parts.pop(0)
            union = union or tuple(out)
            node = None
    return tuple(out), union


def _union_problem(field_loc: tuple[Any, ...], found: list[Any]) -> list[InvalidInput]:
    """The problems of one union-typed field: a member's own nested problems where a member went deeper (the value
    had its shape), else one line: the value is none of the members."""
    deeper = [e for e in found if len(e["loc"]) > len(field_loc)]
    if deeper:
        return [_from_pydantic(e) for e in deeper]
    expected = list(dict.fromkeys(_expected(e["type"]) for e in found))
    valid = " or ".join(expected) if _UNKNOWN not in expected else _UNKNOWN
    if doc := _doc_of(field_loc):
        valid = f"{valid}: {doc}"
    return [InvalidInput(_path(field_loc), f"{errors.excerpt(found[0].get('input'))}: is not "
                         f"{' or '.join(e for e in expected if e != _UNKNOWN) or 'a value it takes'}", valid)]


def _doc_of(loc: tuple[Any, ...]) -> str:
    """What a ``workloads[i]`` field is for (its row's doc, to the first ``;``), else nothing; for a ``secrets`` entry,
    its two forms."""
    from raytpu.core.specs import workload_fields

    if len(loc) == 4 and loc[0] == "workloads" and loc[2] == "secrets":
        return run_env.SECRET_FORMS
    if len(loc) == 3 and loc[0] == "workloads" and loc[2] in workload_fields.FIELDS:
        return workload_fields.FIELDS[loc[2]].doc.split(";")[0]
    return ""


def _from_pydantic(error: Any) -> InvalidInput:
    """One pydantic error as an InvalidInput with a dotted/indexed field path and the valid values."""
    loc = tuple(error["loc"])
    field = _path(loc)
    kind = error["type"]
    value = error.get("input")
    if loc[-1:] == ("[key]",):  # a mapping's key; pydantic's loc holds its repr (datetime.date(2024, 1, 1))
        field = errors.join_key(_path(loc[:-2]), value)
        quote = f" (quote it: '{errors.yaml_flow(value)}')" if kind == "string_type" else ""
        return InvalidInput(field, f"the key {errors.yaml_flow(value)} {_problem(kind, error['msg'])}",
                            f"{_expected(kind)} as the key{quote}")
    if kind == "string_type" and len(loc) == 4 and loc[0] == "workloads" and loc[2] == "env":  # N: 8
        return InvalidInput(field, f"{errors.excerpt(value)}: is not a string",
                            run_env.string_value_hint(str(loc[3]), value))
    if kind == "extra_forbidden":
        return InvalidInput(field, "is not a known key", f"keys of {_path(loc[:-1]) or 'the top level'}: "
                            f"{_keys(_model_at(loc[:-1]))}")
    if kind == "missing":
        return errors.missing(field, "here", f"keys of {_path(loc[:-1]) or 'the top level'}: "
                              f"{_keys(_model_at(loc[:-1]))}")
    if loc and loc[-1] == "generation":
        return errors.invalid_choice(field, value, GENERATIONS)
    valid = _expected(kind)
    if kind == "model_type":  # a mapping of the kit's (hf_token_secret): say its keys
        with contextlib.suppress(Exception):
            valid = f"a mapping with the keys {_keys(_model_at(loc))}"
    return InvalidInput(field, f"{errors.excerpt(value)}: {_problem(kind, error['msg'])}", valid)


_YAML_PROBLEMS = {"model_type": "is not a mapping", "dict_type": "is not a mapping", "tuple_type": "is not a list",
                  "list_type": "is not a list", "string_type": "is not a string", "bool_type": "is not true or false",
                  "bool_parsing": "is not true or false"}
"""Pydantic's wording where it names Python (``a valid tuple``, ``an instance of clustermodel``), in YAML's terms:
the user wrote YAML (issue 48)."""


def _problem(kind: str, message: str) -> str:
    """What is wrong, in YAML's terms where pydantic's message names Python types or the kit's model classes."""
    return _YAML_PROBLEMS.get(kind) or message.lower()


_UNKNOWN = "see raytpu.example.yaml"


def _expected(kind: str) -> str:
    return {
        "int_parsing": "a whole number", "int_type": "a whole number", "int_from_float": "a whole number",
        "string_type": "a string", "bool_type": "true or false", "bool_parsing": "true or false",
        "float_type": "a number",
        "model_type": "a mapping", "dict_type": "a mapping", "tuple_type": "a list", "list_type": "a list",
        "greater_than_equal": "a larger number", "less_than_equal": "a smaller number",
    }.get(kind, _UNKNOWN)


def field_at(loc: tuple[Any, ...]) -> str:
    """The config field a YAML location lies in: its path as far as the structure has fields (``workloads[2].model``
    for anything under a workload's ``model``; ``cluster.labels['team']`` for a key of a mapping field)."""
    node: Any = Config
    out = ""
    for part in loc:
        node = _unwrap(node)
        origin = typing.get_origin(node)
        if isinstance(part, int) and origin is tuple:
            node, out = _unwrap(node, index=True), f"{out}[{part}]"
        elif isinstance(part, str) and isinstance(node, type) and issubclass(node, BaseModel) \
                and part in node.model_fields:
            node, out = node.model_fields[part].annotation, join_path(out, part)
        elif isinstance(part, str) and origin in (dict, Mapping, collections.abc.Mapping):
            node, out = typing.get_args(node)[-1], f"{out}[{part[:40]!r}]"
        else:
            break
    return out or (_path(loc[:1]) if loc else "config")


def _path(loc: tuple[Any, ...]) -> str:
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def _model_at(loc: tuple[Any, ...]) -> Any:
    """The model class (or annotation) a location points into, walking field annotations."""
    node: Any = Config
    for part in loc:
        if isinstance(part, int):
            node = _unwrap(node, index=True)
        elif typing.get_origin(node := _unwrap(node)) in (dict, collections.abc.Mapping):  # an entry of a mapping
            node = typing.get_args(node)[-1]
        else:
            node = node.model_fields[part].annotation
    models = [a for a in typing.get_args(node) if isinstance(a, type) and issubclass(a, BaseModel)]
    return models[0] if len(models) == 1 else _unwrap(node)  # a union's mapping member (secrets' {name, key})


def _unwrap(node: Any, index: bool = False) -> Any:
    """``X | None`` -> ``X``; with ``index``, the item type of a list (``tuple[X, ...]`` -> ``X``)."""
    if typing.get_origin(node) in (typing.Union, types.UnionType):
        node = next(a for a in typing.get_args(node) if a is not type(None))
    args = [a for a in typing.get_args(node) if a is not Ellipsis]
    return args[0] if index and args else node


def _keys(model: Any) -> str:
    fields = getattr(model, "model_fields", {})
    return ", ".join(fields) if fields else "(none)"
