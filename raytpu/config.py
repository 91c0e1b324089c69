"""``raytpu.yaml``: parsed once with pydantic, compiled once into a :class:`~raytpu.spec.ClusterSpec`.

Pydantic checks the structure (types, unknown keys); every rule about values lives in :mod:`raytpu.spec`
(and the registries it uses), which :func:`compile_config` runs while placing each problem under the config
path it came from (``slices[1].reservation``, ``cluster.labels['Team']``). ``raytpu validate`` reports every
problem at once; whatever it accepts, every layer accepts.
"""

from __future__ import annotations

import os
import types
import typing
from collections.abc import Mapping
from functools import partial
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from raytpu import errors, kinds
from raytpu.catalog import GENERATIONS
from raytpu.errors import InvalidInput, InvalidInputs, Problems
from raytpu.security import SecuritySpec
from raytpu.spec import (
    AlertingSpec,
    AuthorizedNetwork,
    ClusterSpec,
    GkeSpec,
    HeadPoolSpec,
    MaintenanceWindowSpec,
    NetworkSpec,
    SliceSpec,
    StorageSpec,
    WorkloadSpec,
    cluster_problems,
)

DEFAULT_CONFIG = "raytpu.yaml"
CONFIG_ENV = "RAYTPU_CONFIG"


def default_path(environ: Mapping[str, str] | None = None) -> str:
    """The config read when none is named: ``$RAYTPU_CONFIG``, else ``raytpu.yaml``.

    ``cdktf synth``/``deploy`` (cdktf.json's app) and every CLI command agree on it. There is no silent
    fallback to the example: deploying the example's project by accident is worse than an error.
    """
    return (os.environ if environ is None else environ).get(CONFIG_ENV) or DEFAULT_CONFIG


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class AuthorizedNetworkModel(_Strict):
    """``cluster.master_authorized_networks[]``."""

    name: str
    cidr: str


class HeadPoolModel(_Strict):
    """``cluster.head_pool`` (defaults: :class:`raytpu.spec.HeadPoolSpec`)."""

    machine_type: str | None = None
    min_nodes: int | None = None
    max_nodes: int | None = None


class MaintenanceWindowModel(_Strict):
    """``cluster.maintenance_window`` (defaults: :class:`raytpu.spec.MaintenanceWindowSpec`)."""

    days: tuple[str, ...] | None = None
    start_utc: str | None = None
    hours: int | None = None


class ClusterModel(_Strict):
    """``cluster`` (defaults: :class:`raytpu.spec.GkeSpec`)."""

    name: str
    mode: str | None = None
    release_channel: str | None = None
    deletion_protection: bool | None = None
    control_plane: str | None = None
    master_authorized_networks: tuple[AuthorizedNetworkModel, ...] = ()
    head_pool: HeadPoolModel | None = None
    labels: dict[str, str] = Field(default_factory=dict)
    maintenance_window: MaintenanceWindowModel | None = None


class NetworkModel(_Strict):
    """``network`` (defaults: :class:`raytpu.spec.NetworkSpec`)."""

    subnet_cidr: str | None = None
    pods_cidr: str | None = None
    services_cidr: str | None = None
    master_cidr: str | None = None


class StorageModel(_Strict):
    """``storage`` (defaults: :class:`raytpu.spec.StorageSpec`)."""

    bucket: str | None = None
    state_bucket: str | None = None


class AlertingModel(_Strict):
    """``alerting`` (rules: :class:`raytpu.spec.AlertingSpec`)."""

    notification_channels: tuple[str, ...] = ()


class SecurityModel(_Strict):
    """``security`` (defaults and rules: :class:`raytpu.security.SecuritySpec`)."""

    serve_endpoint: str | None = None
    serve_from: tuple[str, ...] | None = None
    dashboard_from: tuple[str, ...] | None = None
    metrics_from: tuple[str, ...] | None = None
    operator_from: tuple[str, ...] | None = None
    serve_api_key_secret: str | None = None
    writable_root_filesystem: bool | None = None
    run_as_user: int | None = None
    run_as_group: int | None = None


class SliceModel(_Strict):
    """``slices[]`` (defaults and rules: :class:`raytpu.spec.SliceSpec`)."""

    name: str
    generation: str
    topology: str
    zone: str
    count: int | None = None
    provisioning: str | None = None
    reservation: str | None = None
    machine_type: str | None = None
    disk_size_gib: int | None = None
    max_run_duration_s: int | None = None
    fallback: tuple[str, ...] = ()


class WorkloadModel(_Strict):
    """``workloads[]`` (defaults and rules: :class:`raytpu.spec.WorkloadSpec`, :mod:`raytpu.kinds`)."""

    name: str
    kind: str
    slice: str
    image: str | None = None
    slices: int | None = None
    model: str | None = None
    model_source: str | None = None
    max_model_len: int | None = None
    engine_kwargs: dict[str, Any] | None = None


class Config(_Strict):
    """The whole of ``raytpu.yaml``, as written (structure only; :func:`compile_config` makes it a spec)."""

    project: str
    region: str
    cluster: ClusterModel
    network: NetworkModel = NetworkModel()
    storage: StorageModel = StorageModel()
    slices: tuple[SliceModel, ...]
    workloads: tuple[WorkloadModel, ...] = ()
    alerting: AlertingModel | None = None
    security: SecurityModel = SecurityModel()


def _given(model: BaseModel) -> dict[str, Any]:
    """The fields a model was given (unset ones take the spec's default: one default, one place)."""
    return {k: v for k, v in model.model_dump(exclude_none=True).items() if k in model.model_fields_set}


def load(path: str | Path | None = None) -> ClusterSpec:
    """Reads and compiles a config file (default :func:`default_path`); raises InvalidInputs listing every
    problem with its config path."""
    path = Path(path or default_path())
    try:
        text = path.read_text()
    except OSError as exc:
        raise InvalidInput("config", f"cannot read {str(path)!r} ({exc.strerror})",
                           f"a readable config path (start from raytpu.example.yaml; {CONFIG_ENV} names "
                           f"the default)") from None
    return parse(text, str(path))


def parse(text: str, source: str = DEFAULT_CONFIG) -> ClusterSpec:
    """Validates and compiles config text; raises InvalidInputs listing every problem with its field path."""
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(exc, "problem", None) or "unreadable YAML"
        raise InvalidInput("config", f"{source} is not valid YAML{where}: {problem}",
                           "a YAML mapping as in raytpu.example.yaml") from None
    if not isinstance(data, dict):
        shown = "empty" if data is None else f"a {type(data).__name__}, not a mapping"
        raise InvalidInput("config", f"{source} is {shown}", f"a mapping with keys {_keys(Config)}")
    try:
        config = Config.model_validate(data)
    except ValidationError as exc:
        raise InvalidInputs([_from_pydantic(e) for e in exc.errors()]) from None
    return compile_config(config)


def compile_config(config: Config) -> ClusterSpec:
    """Compiles a parsed config into a ClusterSpec: every rule runs once, every problem under its config path.

    The parts (cluster, network, storage, each slice, each workload) are checked first and all their problems
    reported together; the rules that span parts (zones in the region, unique names, Autopilot limits) run
    once every part is valid.
    """
    problems = Problems()
    cluster = config.cluster
    networks = [problems.build(f"cluster.master_authorized_networks[{i}]", partial(AuthorizedNetwork, **_given(n)))
                for i, n in enumerate(cluster.master_authorized_networks)]
    head_pool = None
    if cluster.head_pool is not None:  # a broken head pool is reported; the cluster is checked with the default
        head_pool = problems.build("cluster.head_pool", partial(HeadPoolSpec, **_given(cluster.head_pool)))
        head_pool = head_pool or HeadPoolSpec()
    window = MaintenanceWindowSpec()
    if cluster.maintenance_window is not None:  # a broken window is reported; the cluster is checked with the default
        window = problems.build("cluster.maintenance_window",
                                partial(MaintenanceWindowSpec, **_given(cluster.maintenance_window))) or window
    gke = problems.build("cluster", partial(GkeSpec, **{
        **_given(cluster), "master_authorized_networks": tuple(n for n in networks if n is not None),
        "head_pool": head_pool, "maintenance_window": window}))
    network = problems.build("network", partial(NetworkSpec, **_given(config.network)))
    storage = problems.build("storage", partial(StorageSpec, **_given(config.storage)))
    security = problems.build("security", partial(SecuritySpec, **_given(config.security)))
    alerting = None if config.alerting is None else problems.build(
        "alerting", partial(AlertingSpec, notification_channels=config.alerting.notification_channels))
    slices = [problems.build(f"slices[{i}]", partial(SliceSpec.create, **_given(s)))
              for i, s in enumerate(config.slices)]
    built = {s.name: s for s in slices if s is not None}
    names = list(dict.fromkeys(s.name for s in config.slices))
    workloads: list[WorkloadSpec | None] = []  # one entry per config workload (None: it failed)
    for i, work in enumerate(config.workloads):
        workloads.append(None)
        if work.slice not in names:
            problems.add(errors.invalid_choice("slice", work.slice, names or ["(none: the config has no slices)"]),
                         f"workloads[{i}]")
        elif work.slice in built:  # a slice that failed to compile has its own problems reported
            workloads[i] = problems.build(f"workloads[{i}]", partial(_workload, work, built[work.slice]))
    if problems or gke is None or network is None or storage is None or security is None:
        # The cluster-wide rules still judge the parts that compiled: every problem is reported at once.
        for problem in cluster_problems(project=config.project, region=config.region, cluster=gke, storage=storage,
                                        slices=slices, workloads=workloads):
            problems.add(problem)
        problems.raise_any()
        raise AssertionError("unreachable: a part failed without a problem")
    spec = problems.build("", partial(
        ClusterSpec, project=config.project, region=config.region, cluster=gke, network=network, storage=storage,
        slices=tuple(s for s in slices if s is not None), workloads=tuple(w for w in workloads if w is not None),
        alerting=alerting, security=security))
    problems.raise_any()
    assert spec is not None
    return spec


def _workload(work: WorkloadModel, item: SliceSpec) -> WorkloadSpec:
    fields = _given(work)
    return WorkloadSpec(**{**fields, "kind": kinds.kind(fields["kind"]), "slice": item})


def _from_pydantic(error: Any) -> InvalidInput:
    """One pydantic error as an InvalidInput with a dotted/indexed field path and the valid values."""
    loc = tuple(error["loc"])
    field = _path(loc)
    kind = error["type"]
    value = error.get("input")
    if kind == "extra_forbidden":
        return InvalidInput(field, "is not a known key", f"keys of {_path(loc[:-1]) or 'the top level'}: "
                            f"{_keys(_model_at(loc[:-1]))}")
    if kind == "missing":
        return errors.missing(field, "here", f"keys of {_path(loc[:-1]) or 'the top level'}: "
                              f"{_keys(_model_at(loc[:-1]))}")
    if loc and loc[-1] == "generation":
        return errors.invalid_choice(field, value, GENERATIONS)
    return InvalidInput(field, f"{value!r}: {error['msg'].lower()}", _expected(kind))


def _expected(kind: str) -> str:
    return {
        "int_parsing": "a whole number", "int_type": "a whole number", "int_from_float": "a whole number",
        "string_type": "a string", "bool_type": "true or false", "bool_parsing": "true or false",
        "model_type": "a mapping", "dict_type": "a mapping", "tuple_type": "a list", "list_type": "a list",
        "greater_than_equal": "a larger number", "less_than_equal": "a smaller number",
    }.get(kind, "see raytpu.example.yaml")


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
        else:
            node = _unwrap(node).model_fields[part].annotation
    return _unwrap(node)


def _unwrap(node: Any, index: bool = False) -> Any:
    args = [a for a in typing.get_args(node) if a is not type(None) and a is not Ellipsis]
    if index and args:
        return args[0]
    if typing.get_origin(node) in (typing.Union, types.UnionType) and args:
        return args[0]
    return node


def _keys(model: Any) -> str:
    fields = getattr(model, "model_fields", {})
    return ", ".join(fields) if fields else "(none)"
