"""``raytpu.yaml``: the one description of a platform (project, cluster, slices, workloads).

Pydantic checks the structure (types, unknown keys, enums); :func:`semantic_problems` then checks
what spans fields (topology vs generation, zone vs region, provisioning rules, Autopilot limits),
so that ``raytpu validate`` reports every problem at once, each with its field path.
"""

from __future__ import annotations

import ipaddress
import os
import re
import types
import typing
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from raytpu import errors
from raytpu.catalog import GENERATIONS
from raytpu.errors import InvalidInput, InvalidInputs
from raytpu.plan import SlicePlan, plan_slice

DEFAULT_CONFIG = "raytpu.yaml"
CONFIG_ENV = "RAYTPU_CONFIG"


def default_path(environ: Mapping[str, str] | None = None) -> str:
    """The config read when none is named: ``$RAYTPU_CONFIG``, else ``raytpu.yaml``.

    ``cdktf synth``/``deploy`` (cdktf.json's app) and every CLI command agree on it. There is no silent
    fallback to the example: deploying the example's project by accident is worse than an error.
    """
    return (os.environ if environ is None else environ).get(CONFIG_ENV) or DEFAULT_CONFIG

Mode = Literal["standard", "autopilot"]
ReleaseChannel = Literal["RAPID", "REGULAR", "STABLE", "EXTENDED"]
Provisioning = Literal["on-demand", "spot", "reservation", "flex-start", "queued"]
Fallback = Literal["on-demand", "spot", "flex-start"]
PROVISIONING_MODES: tuple[str, ...] = typing.get_args(Provisioning)
MODES: tuple[str, ...] = typing.get_args(Mode)
RELEASE_CHANNELS: tuple[str, ...] = typing.get_args(ReleaseChannel)
WorkloadKind = Literal["smoke", "train", "serve"]

PROJECT_ID = re.compile(r"^[a-z][a-z0-9-]{4,28}[a-z0-9]$")
CLUSTER_NAME = re.compile(r"^[a-z](?:[a-z0-9-]{0,38}[a-z0-9])?$")
DNS_LABEL = re.compile(r"^[a-z](?:[a-z0-9-]{0,28}[a-z0-9])?$")
REGION = re.compile(r"^[a-z]+-[a-z]+[0-9]+$")
BUCKET = re.compile(r"^[a-z0-9][a-z0-9._-]{1,61}[a-z0-9]$")

RAY_IMAGE = "rayproject/ray:2.60.0-py311"
"""Default image of Ray pods; TPU jobs override it with one that has jax[tpu]."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class AuthorizedNetwork(_Strict):
    """A CIDR allowed to reach the cluster's control plane."""

    name: str
    cidr: str


class HeadPool(_Strict):
    """The CPU node pool Ray head pods run on (Standard clusters only)."""

    machine_type: str = "n2-standard-8"
    min_nodes: int = Field(default=1, ge=0)
    max_nodes: int = Field(default=3, ge=1)


class Cluster(_Strict):
    """The GKE cluster. ``head_pool`` defaults to one n2-standard-8 node scaling to 3 (Standard)."""

    name: str
    mode: Mode = "standard"
    release_channel: ReleaseChannel = "RAPID"
    deletion_protection: bool = True
    master_authorized_networks: tuple[AuthorizedNetwork, ...] = ()
    head_pool: HeadPool | None = None
    labels: dict[str, str] = Field(default_factory=dict)


class Network(_Strict):
    """VPC ranges; defaults fit one cluster per VPC."""

    subnet_cidr: str = "10.10.0.0/20"
    pods_cidr: str = "10.16.0.0/14"
    services_cidr: str = "10.20.0.0/20"
    master_cidr: str = "172.16.0.32/28"


class Storage(_Strict):
    """Buckets: ``bucket`` for checkpoints and compile caches (default ``<project>-<cluster>-ray``);
    ``state_bucket``, when set, holds Terraform state (GCS backend); unset means local state."""

    bucket: str | None = None
    state_bucket: str | None = None


class Slice(_Strict):
    """One kind of TPU slice; ``count`` slices of it (one node pool each on Standard).

    ``machine_type`` defaults to the VM that carries the whole topology if one exists, else the
    4-chip VM. ``disk_size_gib`` (Standard only) defaults to 100. ``max_run_duration_s`` applies
    to flex-start only (default: GKE's 7 days). ``fallback`` (Autopilot only; default none) lists the
    capacity to try, in order, when ``provisioning`` has none: ``provisioning: reservation`` with
    ``fallback: [spot]`` asks the slice's ComputeClass for the reservation first, then Spot.
    """

    name: str
    generation: str
    topology: str
    zone: str
    count: int = 1
    provisioning: Provisioning = "on-demand"
    reservation: str | None = None
    machine_type: str | None = None
    disk_size_gib: int | None = None
    max_run_duration_s: int | None = None
    fallback: tuple[Fallback, ...] = ()

    def plan(self) -> SlicePlan:
        """This slice's SlicePlan (raises InvalidInput on an impossible shape)."""
        return plan_slice(self.generation, self.topology, self.machine_type)


class Workload(_Strict):
    """A KubeRay object the workloads stack applies: ``kind`` runs on slice ``slice``.

    ``model`` (serve only) is the Hugging Face model id Ray Serve LLM serves, sharded over all chips of
    the slice; unset means ``raytpu.kuberay.DEFAULT_SERVE_MODEL``.
    """

    name: str
    kind: WorkloadKind
    slice: str
    image: str = RAY_IMAGE
    model: str | None = None


class Config(_Strict):
    """The whole of ``raytpu.yaml``."""

    project: str
    region: str
    cluster: Cluster
    network: Network = Network()
    storage: Storage = Storage()
    slices: tuple[Slice, ...]
    workloads: tuple[Workload, ...] = ()

    @property
    def bucket(self) -> str:
        """The checkpoint bucket's name, defaulted from project and cluster."""
        return self.storage.bucket or f"{self.project}-{self.cluster.name}-ray"

    def plans(self) -> dict[str, SlicePlan]:
        """Slice name -> SlicePlan, for a config that passed :func:`load`."""
        return {s.name: s.plan() for s in self.slices}

    def slice(self, name: str) -> Slice:
        """The slice called ``name``; InvalidInput listing the names otherwise."""
        for item in self.slices:
            if item.name == name:
                return item
        raise errors.invalid_choice("slice", name, (s.name for s in self.slices))


def load(path: str | Path | None = None) -> Config:
    """Reads and fully validates a config file (default :func:`default_path`); raises InvalidInputs
    listing every problem."""
    path = Path(path or default_path())
    try:
        text = path.read_text()
    except OSError as exc:
        raise InvalidInput("config", f"cannot read {str(path)!r} ({exc.strerror})",
                           f"a readable config path (start from raytpu.example.yaml; {CONFIG_ENV} names "
                           f"the default)") from None
    return parse(text, str(path))


def parse(text: str, source: str = DEFAULT_CONFIG) -> Config:
    """Validates config text; raises InvalidInputs listing every problem with its field path."""
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
    problems = semantic_problems(config)
    if problems:
        raise InvalidInputs(problems)
    return config


def semantic_problems(config: Config) -> list[InvalidInput]:
    """Every cross-field rule the schema cannot express, as a list of field-named problems."""
    problems: list[InvalidInput] = []
    add = problems.append
    if not PROJECT_ID.match(config.project):
        add(errors.invalid_value("project", config.project, "is not a GCP project id",
                                 "6-30 characters: lowercase letters, digits, hyphens; starts with a "
                                 "letter; does not end with a hyphen"))
    if not REGION.match(config.region):
        add(errors.invalid_value("region", config.region, "is not a GCP region", "a region such as us-east5"))
    problems.extend(_cluster_problems(config))
    problems.extend(_network_problems(config.network))
    buckets = {"storage.bucket": config.storage.bucket, "storage.state_bucket": config.storage.state_bucket}
    for field, name in buckets.items():
        if name is not None and not BUCKET.match(name):
            add(errors.invalid_value(field, name, "is not a bucket name",
                                     "3-63 characters: lowercase letters, digits, '-', '_', '.'"))
    if not config.slices:
        add(errors.missing("slices", "(at least one slice)", "a list of slices as in raytpu.example.yaml"))
    seen: set[str] = set()
    for i, item in enumerate(config.slices):
        problems.extend(_slice_problems(config, item, f"slices[{i}]", seen))
    names = [s.name for s in config.slices]
    for i, work in enumerate(config.workloads):
        if not DNS_LABEL.match(work.name):
            add(_dns_problem(f"workloads[{i}].name", work.name))
        if work.slice not in names:
            add(errors.invalid_choice(f"workloads[{i}].slice", work.slice, names))
        elif config.slice(work.slice).provisioning == "queued":
            add(errors.invalid_value(
                f"workloads[{i}].slice", work.slice,
                "uses provisioning: queued, whose ProvisioningRequest takes a single PodSet (KubeRay's head + "
                "workers are rejected)", "a slice with provisioning on-demand, spot, reservation or flex-start"))
    return problems


def _cluster_problems(config: Config) -> list[InvalidInput]:
    cluster = config.cluster
    problems = []
    if not CLUSTER_NAME.match(cluster.name):
        problems.append(errors.invalid_value(
            "cluster.name", cluster.name, "is not a GKE cluster name",
            "1-40 characters: lowercase letters, digits, hyphens; starts with a letter, ends with a letter or digit"))
    if cluster.mode == "autopilot" and cluster.head_pool is not None:
        problems.append(errors.forbidden("cluster.head_pool", "set",
                                         "with mode: autopilot (Autopilot has no node pools)",
                                         "remove head_pool, or use mode: standard"))
    for i, net in enumerate(cluster.master_authorized_networks):
        problems.extend(_cidr_problem(f"cluster.master_authorized_networks[{i}].cidr", net.cidr))
    return problems


def _network_problems(network: Network) -> list[InvalidInput]:
    problems: list[InvalidInput] = []
    nets = {}
    for field in ("subnet_cidr", "pods_cidr", "services_cidr", "master_cidr"):
        value = getattr(network, field)
        found = _cidr_problem(f"network.{field}", value)
        problems.extend(found)
        if not found:
            nets[field] = ipaddress.ip_network(value)
    names = list(nets)  # declaration order: a clash is reported on the later field
    for a, b in [(a, b) for i, a in enumerate(names) for b in names[i + 1:]]:
        if nets[a].overlaps(nets[b]):
            problems.append(errors.invalid_value(f"network.{b}", str(nets[b]), f"overlaps network.{a} ({nets[a]})",
                                                 "four disjoint private ranges"))
    if "master_cidr" in nets and nets["master_cidr"].prefixlen != 28:
        problems.append(errors.invalid_value("network.master_cidr", network.master_cidr, "is not a /28",
                                             "a private /28 such as 172.16.0.32/28"))
    return problems


def _cidr_problem(field: str, value: str) -> list[InvalidInput]:
    try:
        ipaddress.ip_network(value)
    except ValueError:
        return [errors.invalid_value(field, value, "is not a CIDR range", "an IPv4 range such as 10.10.0.0/20")]
    return []


def _dns_problem(field: str, value: str) -> InvalidInput:
    return errors.invalid_value(field, value, "is not DNS-safe",
                                "1-30 characters: lowercase letters, digits, hyphens; starts with a letter, "
                                "ends with a letter or digit")


def _slice_problems(config: Config, item: Slice, path: str, seen: set[str]) -> list[InvalidInput]:
    problems: list[InvalidInput] = []
    add = problems.append
    if not DNS_LABEL.match(item.name):
        add(_dns_problem(f"{path}.name", item.name))
    elif item.name in seen:
        add(errors.invalid_value(f"{path}.name", item.name, "is used by an earlier slice", "a unique name per slice"))
    seen.add(item.name)
    try:
        plan_slice(item.generation, item.topology, item.machine_type, f"{path}.")
    except InvalidInput as exc:
        add(exc)
    if not item.zone.startswith(config.region + "-") or not re.fullmatch(r"[a-z]", item.zone[len(config.region) + 1:]):
        add(errors.invalid_value(f"{path}.zone", item.zone, f"is not a zone of region {config.region!r}",
                                 f"{config.region}-a, {config.region}-b, ... (`raytpu catalog --json` lists "
                                 f"zones seen offering {item.generation})"))
    if item.count < 1:
        add(errors.invalid_value(f"{path}.count", item.count, "is below 1", "a whole number >= 1"))
    problems.extend(_provisioning_problems(config, item, path))
    problems.extend(_fallback_problems(config, item, path))
    if config.cluster.mode == "autopilot" and item.disk_size_gib is not None:
        add(errors.forbidden(f"{path}.disk_size_gib", item.disk_size_gib,
                             "with cluster.mode: autopilot (node pool setting)", "remove it, or use mode: standard"))
    if item.disk_size_gib is not None and not 10 <= item.disk_size_gib <= 65536:
        add(errors.invalid_value(f"{path}.disk_size_gib", item.disk_size_gib, "is out of range", "10 to 65536"))
    return problems


def _fallback_problems(config: Config, item: Slice, path: str) -> list[InvalidInput]:
    if not item.fallback:
        return []
    field = f"{path}.fallback"
    shown = list(item.fallback)
    if config.cluster.mode != "autopilot":
        return [errors.forbidden(field, shown, "with cluster.mode: standard (a node pool has one provisioning mode)",
                                 "remove fallback, or use mode: autopilot (ComputeClass priorities)")]
    if item.provisioning == "queued":
        return [errors.forbidden(field, shown, "with provisioning: queued (ProvisioningRequests take no fallback)",
                                 "remove fallback")]
    order = [item.provisioning, *item.fallback]
    if len(set(order)) != len(order):
        return [errors.invalid_value(field, shown, f"repeats a mode (provisioning is {item.provisioning})",
                                     "distinct modes that differ from provisioning")]
    return []


def _provisioning_problems(config: Config, item: Slice, path: str) -> list[InvalidInput]:
    problems = []
    mode = item.provisioning
    if mode == "reservation" and not item.reservation:
        problems.append(errors.missing(f"{path}.reservation", "with provisioning: reservation",
                                       "the name of a specific reservation in the project"))
    if mode != "reservation" and item.reservation:
        why = {"spot": "spot VMs never consume reservations",
               "flex-start": "flex-start capacity is exclusive with reservations",
               "queued": "queued provisioning (DWS) is exclusive with reservations",
               }.get(mode, "a reservation is only consumed with provisioning: reservation")
        problems.append(errors.forbidden(f"{path}.reservation", item.reservation,
                                         f"with provisioning: {mode} ({why})",
                                         "remove reservation, or set provisioning: reservation"))
    if item.max_run_duration_s is not None:
        if mode != "flex-start":
            problems.append(errors.forbidden(f"{path}.max_run_duration_s", item.max_run_duration_s,
                                             f"with provisioning: {mode}", "only with provisioning: flex-start"))
        elif not 600 <= item.max_run_duration_s <= 7 * 24 * 3600:
            problems.append(errors.invalid_value(f"{path}.max_run_duration_s", item.max_run_duration_s,
                                                 "is out of range", "600 to 604800 seconds"))
    return problems


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
    if kind == "literal_error":
        return errors.invalid_choice(field, value, _literal_values(loc))
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


def _literal_values(loc: tuple[Any, ...]) -> tuple[Any, ...]:
    return typing.get_args(_unwrap(_model_at(loc)))


def _keys(model: Any) -> str:
    fields = getattr(model, "model_fields", {})
    return ", ".join(fields) if fields else "(none)"
