"""The one spec: frozen values every layer reads (constructs, stacks, KubeRay builders, CLI, workloads).

``raytpu.yaml`` is parsed once (:mod:`raytpu.config`, pydantic) and compiled into a :class:`ClusterSpec`;
its attribute paths are the config's paths (``spec.cluster.labels`` is ``cluster.labels``). Each config field is
declared here once, with its default: the config's structure is derived from these dataclasses (a field written
other than as its type, such as a workload's ``slice`` name, is listed in :data:`raytpu.config.WRITTEN_AS`).
Every rule lives here, once: each spec checks its own fields when it is built and raises every problem at once,
each named by its field (``labels['Team']``); :class:`ClusterSpec` checks what spans its parts (``slices[1].zone``
inside ``region``). The config compiler places each problem under the path it built the spec at, so ``raytpu
validate`` reports ``cluster.labels['Team']``. Consumers trust a spec: a spec that exists is valid.

Standard library and the kit's core only: no pydantic, no CDK, no Ray.
"""

from __future__ import annotations

import ipaddress
import json
import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import partial
from typing import Any

from raytpu import errors, kinds, multislice, names, vllm_rules
from raytpu.catalog import RAY_VERSION, generation
from raytpu.errors import InvalidInput, InvalidInputs, Problems
from raytpu.kinds import WorkloadKind
from raytpu.plan import SlicePlan, plan_slice
from raytpu.provisioning import MODES as PROVISIONING_MODES
from raytpu.provisioning import Provisioning
from raytpu.provisioning import mode as provisioning_mode
from raytpu.security import SecuritySpec, secret_name_problems
from raytpu.sizing.models import by_hf_id

CLUSTER_MODES = ("standard", "autopilot")
CONTROL_PLANE_ACCESS = ("dns", "ip")
RELEASE_CHANNELS = ("RAPID", "REGULAR", "STABLE", "EXTENDED")

PROJECT_ID = re.compile(r"^[a-z][a-z0-9-]{4,28}[a-z0-9]$")
CLUSTER_NAME = re.compile(r"^[a-z](?:[a-z0-9-]{0,38}[a-z0-9])?$")
DNS_LABEL = re.compile(r"^[a-z](?:[a-z0-9-]{0,28}[a-z0-9])?$")
DNS_LABEL_LENGTH = 30
"""The longest slice or workload name (:data:`DNS_LABEL`)."""
REGION = re.compile(r"^[a-z]+-[a-z]+[0-9]+$")
ZONE = re.compile(r"^([a-z]+-[a-z]+[0-9]+)-[a-z]$")
BUCKET = re.compile(r"^[a-z0-9][a-z0-9._-]{1,61}[a-z0-9]$")
MACHINE_TYPE = re.compile(r"^[a-z][a-z0-9]*(?:-[a-z0-9]+)+$")
# Source: https://cloud.google.com/compute/docs/machine-resource (SERIES-TYPE-VCPUS, custom-VCPUS-MEMORY[-ext])
LABEL_KEY = re.compile(r"^[a-z][a-z0-9_-]{0,62}$")
LABEL_VALUE = re.compile(r"^[a-z0-9_-]{0,63}$")
DISK_SIZE_GIB = (10, 65536)
DEFAULT_DISK_SIZE_GIB = 100
"""Boot disk of every node the kit makes, unless a slice sets ``disk_size_gib``."""
NODE_COUNT = (0, 1000)

MULTI_HOST_NAME_LIMIT = 35
"""Longest RayJob/RayService name with a multi-host TPU worker group. The GKE TPU webhook sets each pod's
subdomain to ``CheckName(<RayCluster name>-headless)``, which keeps the LAST 50 characters, while KubeRay names
the headless Service ``<RayCluster name>-headless`` uncut; KubeRay's RayCluster name is the RayJob/RayService
name plus a 6-character suffix (``-xxxxx``), so a name over 35 characters yields ``TPU_WORKER_HOSTNAMES`` that
resolve nowhere (ai-on-gke kuberay-tpu-webhook ``CheckName``; ray-operator utils ``GenerateRayClusterName``)."""

SERVING_FIELDS = ("model", "model_source", "max_model_len", "engine_kwargs", "hf_token_secret")
"""WorkloadSpec fields only a serving kind takes."""

WORKLOAD_ENV = "RAYTPU_WORKLOAD"
"""Environment variable that carries a workload's spec (JSON) into its Ray job: workloads never re-plan."""


def derived_name_problems(field: str, value: str, derived: str, what: str, run: bool = True) -> list[InvalidInput]:
    """``value`` is too long when the name the kit derives from it (``derived``, plus a run suffix when ``run``)
    passes :data:`MULTI_HOST_NAME_LIMIT` on a multi-host slice; ``what`` names the derived object."""
    longest = names.run_name(derived, "x" * names.RUN_ID_LENGTH) if run else derived
    if len(longest) <= MULTI_HOST_NAME_LIMIT:
        return []
    return [errors.invalid_value(
        field, value, f"is too long for a multi-host slice: {what} ({longest}) would exceed {MULTI_HOST_NAME_LIMIT} "
        "characters, and GKE's TPU webhook truncates longer names so the hosts cannot find each other",
        f"at most {MULTI_HOST_NAME_LIMIT - len(longest) + len(value)} characters")]


# ---------------------------------------------------------------------------------------------- field rules
# Each returns the problems of one value, named by ``field``; specs and construct props call the same ones.


def dns_label_problems(field: str, value: object) -> list[InvalidInput]:
    """A slice or workload name: a DNS label of at most 30 characters (it prefixes pool and object names)."""
    if isinstance(value, str) and DNS_LABEL.match(value):
        return []
    return [errors.invalid_value(field, value, "is not DNS-safe", "1-30 characters: lowercase letters, digits, "
                                 "hyphens; starts with a letter, ends with a letter or digit")]


def project_problems(field: str, value: object) -> list[InvalidInput]:
    """A GCP project id (https://cloud.google.com/resource-manager/docs/creating-managing-projects#before_you_begin)."""
    if isinstance(value, str) and PROJECT_ID.match(value):
        return []
    return [errors.invalid_value(field, value, "is not a GCP project id", "6-30 characters: lowercase letters, "
                                 "digits, hyphens; starts with a letter; does not end with a hyphen")]


def region_problems(field: str, value: object) -> list[InvalidInput]:
    """A GCP region such as ``us-east5``."""
    if isinstance(value, str) and REGION.match(value):
        return []
    return [errors.invalid_value(field, value, "is not a GCP region", "a region such as us-east5")]


def cluster_name_problems(field: str, value: object) -> list[InvalidInput]:
    """A GKE cluster name: at most 40 characters (``gcloud container clusters create`` refuses longer)."""
    if isinstance(value, str) and CLUSTER_NAME.match(value):
        return []
    return [errors.invalid_value(field, value, "is not a GKE cluster name", "1-40 characters: lowercase letters, "
                                 "digits, hyphens; starts with a letter, ends with a letter or digit")]


def bucket_problems(field: str, value: object) -> list[InvalidInput]:
    """A GCS bucket name (https://cloud.google.com/storage/docs/buckets#naming)."""
    if isinstance(value, str) and BUCKET.match(value):
        return []
    return [errors.invalid_value(field, value, "is not a bucket name",
                                 "3-63 characters: lowercase letters, digits, '-', '_', '.'; starts and ends with "
                                 "a letter or digit")]


def label_problems(field: str, labels: Mapping[str, str]) -> list[InvalidInput]:
    """GCP resource labels (https://cloud.google.com/resource-manager/docs/labels-overview#requirements)."""
    found = []
    for key, value in labels.items():
        if not isinstance(key, str) or not LABEL_KEY.match(key):
            found.append(errors.invalid_value(f"{field}[{key!r}]", key, "is not a valid label key",
                                              "lowercase letters, digits, '_' and '-', starting with a letter; "
                                              "at most 63 characters"))
        elif not isinstance(value, str) or not LABEL_VALUE.match(value):
            found.append(errors.invalid_value(f"{field}[{key!r}]", value, "is not a valid label value",
                                              "up to 63 lowercase letters, digits, '_' and '-'"))
    return found


def cidr_problems(field: str, value: object) -> list[InvalidInput]:
    """An IPv4 range such as ``10.10.0.0/20``."""
    try:
        ipaddress.IPv4Network(value)
    except (ValueError, TypeError):
        return [errors.invalid_value(field, value, "is not a CIDR range", "an IPv4 range such as 10.10.0.0/20")]
    return []


def range_problems(field: str, value: object, low: int, high: int, unit: str = "") -> list[InvalidInput]:
    """A whole number within ``[low, high]``."""
    if isinstance(value, int) and not isinstance(value, bool) and low <= value <= high:
        return []
    return [errors.invalid_value(field, value, "is out of range", f"{low} to {high}{unit}")]


def choice_problems(field: str, value: object, choices: tuple[str, ...]) -> list[InvalidInput]:
    """One of a fixed set."""
    return [] if value in choices else [errors.invalid_choice(field, value, choices)]


def _raise(found: list[InvalidInput]) -> None:
    if found:
        raise InvalidInputs(found)


# ---------------------------------------------------------------------------------------------- cluster parts


WEEKDAYS = ("MO", "TU", "WE", "TH", "FR", "SA", "SU")
HH_MM = re.compile(r"^([01][0-9]|2[0-3]):([0-5][0-9])$")


@dataclass(frozen=True, kw_only=True)
class MaintenanceWindowSpec:
    """When GKE may auto-upgrade nodes (config section ``cluster.maintenance_window``), in UTC.

    A node upgrade recreates a multi-host slice, and nodes on a release channel always auto-upgrade (GKE:
    "Node auto-upgrade defaults to true and cannot be disabled", ReleaseChannel API reference), so the kit
    confines upgrades to a weekly window. GKE requires "at least 48 hours of maintenance availability in a
    32-day rolling window", counting only windows of at least four hours
    (https://cloud.google.com/kubernetes-engine/docs/maintenance-window); any 32 days hold each weekday at least
    four times, so ``len(days) * 4 * hours >= 48``.

    Attributes:
        days: Weekdays (``MO`` ... ``SU``); default ``SA``, ``SU``.
        start_utc: Start, ``HH:MM`` UTC; default ``02:00``.
        hours: Length, 4 to 24 hours; default 6.
    """

    days: tuple[str, ...] = ("SA", "SU")
    start_utc: str = "02:00"
    hours: int = 6

    def __post_init__(self) -> None:
        found = [errors.invalid_choice(f"days[{i}]", day, WEEKDAYS) for i, day in enumerate(self.days)
                 if day not in WEEKDAYS]
        if not self.days or len(set(self.days)) != len(self.days):
            found.append(errors.invalid_value("days", list(self.days), "is empty or repeats a day",
                                              "distinct weekdays: " + ", ".join(WEEKDAYS)))
        if not isinstance(self.start_utc, str) or not HH_MM.match(self.start_utc):
            found.append(errors.invalid_value("start_utc", self.start_utc, "is not a time of day", "HH:MM, UTC"))
        found += range_problems("hours", self.hours, 4, 24, " (GKE counts only windows of 4 hours or more)")
        if not found and len(self.days) * 4 * self.hours < 48:
            found.append(errors.invalid_value(
                "hours", self.hours, f"x {len(self.days)} day(s) a week allows {len(self.days) * 4 * self.hours} "
                "hours in some 32-day span; GKE requires at least 48",
                f"at least {-(-48 // (4 * len(self.days)))} hours, or more days"))
        _raise(found)

    @property
    def recurrence(self) -> str:
        """The RFC 5545 rule GKE takes (``FREQ=WEEKLY;BYDAY=SA,SU``)."""
        return "FREQ=WEEKLY;BYDAY=" + ",".join(self.days)


@dataclass(frozen=True, kw_only=True)
class HeadPoolSpec:
    """The CPU node pool Ray heads run on (Standard clusters).

    Attributes:
        machine_type: CPU machine type; default ``n2-standard-8`` (a Ray head with dashboard and GCS).
        min_nodes: Autoscaling minimum per zone; default 1.
        max_nodes: Autoscaling maximum per zone; default 3.
    """

    machine_type: str = "n2-standard-8"
    min_nodes: int = 1
    max_nodes: int = 3

    def __post_init__(self) -> None:
        found = range_problems("min_nodes", self.min_nodes, *NODE_COUNT)
        if not MACHINE_TYPE.match(self.machine_type) or len(self.machine_type) > 63:
            found.append(errors.invalid_value("machine_type", self.machine_type, "is not a Compute Engine machine type",
                                              "SERIES-TYPE-VCPUS in lowercase, e.g. n2-standard-8, e2-standard-4, "
                                              "c3-highcpu-8, or custom-VCPUS-MEMORY_MB"))
        found += range_problems("max_nodes", self.max_nodes, 1, NODE_COUNT[1])
        if not found and self.min_nodes > self.max_nodes:
            found.append(errors.invalid_value("min_nodes", self.min_nodes, f"is above max_nodes ({self.max_nodes})",
                                              f"0 to {self.max_nodes}"))
        _raise(found)


@dataclass(frozen=True, kw_only=True)
class AuthorizedNetwork:
    """A CIDR allowed to reach the control plane's IP endpoint."""

    name: str
    cidr: str

    def __post_init__(self) -> None:
        _raise(cidr_problems("cidr", self.cidr))


@dataclass(frozen=True, kw_only=True)
class GkeSpec:
    """The GKE cluster (config section ``cluster``).

    Attributes:
        name: Cluster name, 1-40 characters.
        mode: ``standard`` (node pools; default) or ``autopilot``.
        release_channel: ``RAPID`` (default: TPU generations arrive there first), ``REGULAR``, ``STABLE``,
            ``EXTENDED``.
        deletion_protection: Terraform refuses to destroy the cluster while true; default true.
        control_plane: How ``cdktf deploy`` and ``raytpu`` reach the API: ``dns`` (default), GKE's DNS-based
            endpoint, reachable from anywhere but answering only callers whose Google identity IAM allows (no
            address opened); or ``ip``, the IP endpoint, only from ``master_authorized_networks``.
        master_authorized_networks: CIDRs allowed to reach the control plane's IP endpoint; default none.
        head_pool: The Ray head pool; Standard default ``HeadPoolSpec()``; Autopilot has none (it is an error).
        labels: GCP resource labels of everything the kit creates; default none.
        maintenance_window: When GKE may upgrade nodes (and so recreate slices); default weekends.
    """

    name: str
    mode: str = "standard"
    release_channel: str = "RAPID"
    deletion_protection: bool = True
    control_plane: str = "dns"
    master_authorized_networks: tuple[AuthorizedNetwork, ...] = ()
    head_pool: HeadPoolSpec | None = None
    labels: Mapping[str, str] = field(default_factory=dict)
    maintenance_window: MaintenanceWindowSpec = field(default_factory=MaintenanceWindowSpec)

    def __post_init__(self) -> None:
        found = cluster_name_problems("name", self.name)
        found += choice_problems("mode", self.mode, CLUSTER_MODES)
        found += choice_problems("release_channel", self.release_channel, RELEASE_CHANNELS)
        found += choice_problems("control_plane", self.control_plane, CONTROL_PLANE_ACCESS)
        if self.control_plane == "ip" and not self.master_authorized_networks:
            # A private-nodes cluster with no authorized network and public CIDR access off accepts no one on its
            # public endpoint, not even VMs in its VPC (their traffic leaves through Cloud NAT).
            found.append(errors.invalid_value(
                "control_plane", "ip", "with no master_authorized_networks leaves the API reachable from nowhere "
                "cdktf deploy or raytpu could run", "control_plane: dns (the default), or master_authorized_networks "
                "listing the CIDRs you deploy from"))
        found += label_problems("labels", self.labels)
        if self.mode == "autopilot" and self.head_pool is not None:
            found.append(errors.forbidden("head_pool", "set", "with mode: autopilot (Autopilot has no node pools)",
                                          "remove head_pool, or use mode: standard"))
        if self.mode == "standard" and self.head_pool is None:
            object.__setattr__(self, "head_pool", HeadPoolSpec())
        _raise(found)

    @property
    def autopilot(self) -> bool:
        """Autopilot (TPUs per pod through ComputeClasses) rather than Standard (node pools)."""
        return self.mode == "autopilot"


@dataclass(frozen=True, kw_only=True)
class NetworkSpec:
    """VPC ranges (config section ``network``); the defaults fit one cluster per VPC."""

    subnet_cidr: str = "10.10.0.0/20"
    pods_cidr: str = "10.16.0.0/14"
    services_cidr: str = "10.20.0.0/20"
    master_cidr: str = "172.16.0.32/28"

    def __post_init__(self) -> None:
        found: list[InvalidInput] = []
        nets = {}
        for name in ("subnet_cidr", "pods_cidr", "services_cidr", "master_cidr"):
            bad = cidr_problems(name, getattr(self, name))
            found += bad
            if not bad:
                nets[name] = ipaddress.IPv4Network(getattr(self, name))
        names = list(nets)  # declaration order: a clash is reported on the later field
        for i, a in enumerate(names):
            for b in names[i + 1:]:
                if nets[a].overlaps(nets[b]):
                    found.append(errors.invalid_value(b, str(nets[b]), f"overlaps {a} ({nets[a]})",
                                                      "four disjoint private ranges"))
        if "master_cidr" in nets and nets["master_cidr"].prefixlen != 28:
            found.append(errors.invalid_value("master_cidr", self.master_cidr, "is not a /28",
                                              "a private /28 such as 172.16.0.32/28"))
        _raise(found)


NOTIFICATION_CHANNEL = re.compile(rf"^projects/{PROJECT_ID.pattern[1:-1]}/notificationChannels/[0-9]+$")


@dataclass(frozen=True, kw_only=True)
class AlertingSpec:
    """Nightly-smoke alerting (config section ``alerting``; opt-in): a log-based metric counts the smoke jobs'
    unhealthy verdicts and a Cloud Monitoring alert policy notifies ``notification_channels`` with the slice and
    its cause.

    Attributes:
        notification_channels: Cloud Monitoring channels (``projects/P/notificationChannels/N``), at least one.
    """

    notification_channels: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        found = [errors.invalid_value(f"notification_channels[{i}]", c, "is not a notification channel name",
                                      "projects/PROJECT/notificationChannels/NUMBER (`gcloud beta monitoring "
                                      "channels list`)")
                 for i, c in enumerate(self.notification_channels)
                 if not isinstance(c, str) or not NOTIFICATION_CHANNEL.match(c)]
        if not self.notification_channels:
            found.append(errors.missing("notification_channels", "to alert anyone",
                                        "one or more projects/PROJECT/notificationChannels/NUMBER"))
        _raise(found)


@dataclass(frozen=True, kw_only=True)
class StorageSpec:
    """Buckets (config section ``storage``).

    Attributes:
        bucket: Checkpoints, compile caches, the kit's core zip; default ``<project>-<cluster>-ray``.
        state_bucket: Terraform state (GCS backend); default none (local state).
    """

    bucket: str | None = None
    state_bucket: str | None = None

    def __post_init__(self) -> None:
        found = []
        for name in ("bucket", "state_bucket"):
            if getattr(self, name) is not None:
                found += bucket_problems(name, getattr(self, name))
        _raise(found)


# ---------------------------------------------------------------------------------------------- slices


@dataclass(frozen=True, kw_only=True)
class SliceSpec:
    """One kind of TPU slice: its shape (a SlicePlan), where it lives and how its capacity is obtained.

    Build one with :meth:`create` (from generation/topology names) or directly from a plan.

    Attributes:
        name: DNS-safe name; node pools are ``<name>-<i>``, the Autopilot ComputeClass ``raytpu-<name>``.
        plan: The slice's SlicePlan.
        zone: The one zone of its hosts.
        count: How many such slices (one node pool each on Standard); default 1.
        provisioning: How capacity is obtained; default on-demand.
        reservation: The specific reservation (with ``reservation`` provisioning only).
        fallback: Autopilot only: modes to try, in order, after ``provisioning`` (ComputeClass priorities).
        max_run_duration_s: Flex-start only: nodes are reclaimed after this long; default GKE's 7 days.
        disk_size_gib: Boot disk per host (Standard only); default 100 there.
    """

    name: str
    plan: SlicePlan
    zone: str
    count: int = 1
    provisioning: Provisioning = PROVISIONING_MODES["on-demand"]
    reservation: str | None = None
    fallback: tuple[Provisioning, ...] = ()
    max_run_duration_s: int | None = None
    disk_size_gib: int | None = None

    def __post_init__(self) -> None:
        found = dns_label_problems("name", self.name)
        if not isinstance(self.zone, str) or not ZONE.match(self.zone):
            found.append(errors.invalid_value("zone", self.zone, "is not a GCP zone", "a zone such as us-east5-b"))
        found += range_problems("count", self.count, 1, 1000)
        found += self.provisioning.problems(self.reservation, self.max_run_duration_s)
        found += self._fallback_problems()
        if self.disk_size_gib is not None:
            found += range_problems("disk_size_gib", self.disk_size_gib, *DISK_SIZE_GIB, " GiB")
        smoke = names.smoke_workload(self.name)
        if not found and self.provisioning.runs_ray and len(smoke) > DNS_LABEL_LENGTH:
            found.append(errors.invalid_value(
                "name", self.name, f"is too long for a slice that runs Ray: its smoke workload ({smoke}) would "
                f"exceed {DNS_LABEL_LENGTH} characters", f"at most {DNS_LABEL_LENGTH - len(smoke) + len(self.name)} "
                "characters"))
        if not found and not self.plan.single_host:
            found += derived_name_problems("name", self.name, names.longest_smoke_job(self.name, self.count, False),
                                           "its smoke jobs")
        _raise(found)

    def _fallback_problems(self) -> list[InvalidInput]:
        if not self.fallback:
            return []
        shown = [m.name for m in self.fallback]
        if self.provisioning.priority is None:
            return [errors.forbidden("fallback", shown, f"with provisioning: {self.provisioning.name} (it has no "
                                     "ComputeClass priority to fall back from)", "remove fallback")]
        offered = _fallback_offered()
        for i, fallback_mode in enumerate(self.fallback):
            if fallback_mode.name not in offered:
                return [errors.invalid_choice(f"fallback[{i}]", fallback_mode.name, offered)]
        order = [self.provisioning.name, *shown]
        if len(set(order)) != len(order):
            return [errors.invalid_value("fallback", shown, f"repeats a mode (provisioning is "
                                         f"{self.provisioning.name})", "distinct modes that differ from provisioning")]
        return []

    @classmethod
    def create(cls, *, name: str, generation: str, topology: str, zone: str, machine_type: str | None = None,
               provisioning: str = "on-demand", fallback: tuple[str, ...] = (), **rest: Any) -> SliceSpec:
        """Plans the shape and builds the spec; raises every problem at once (plan and fields)."""
        problems = Problems()
        plan = problems.build("", lambda: plan_slice(generation, topology, machine_type))
        mode = problems.build("", lambda: _mode(provisioning, "provisioning"))
        modes = [problems.build("", partial(_fallback_mode, m, f"fallback[{i}]")) for i, m in enumerate(fallback)]
        if mode is None:  # the mode's own rules cannot be judged; the other fields still are
            rest = {k: v for k, v in rest.items() if k not in ("reservation", "max_run_duration_s")}
        spec = problems.build("", lambda: cls(
            name=name, plan=plan or _STAND_IN_PLAN, zone=zone, provisioning=mode or PROVISIONING_MODES["on-demand"],
            fallback=tuple(m for m in modes if m is not None) if mode else (), **rest))
        problems.raise_any()
        assert spec is not None
        return spec

    @property
    def region(self) -> str:
        """The zone's region."""
        return self.zone.rsplit("-", 1)[0]

    @property
    def disk_gib(self) -> int:
        """Boot disk per host: ``disk_size_gib``, else ``DEFAULT_DISK_SIZE_GIB``."""
        return self.disk_size_gib or DEFAULT_DISK_SIZE_GIB

    @property
    def pool_names(self) -> list[str]:
        """Node pool (and emulated slice) names of the copies: ``<name>-0``, ``<name>-1``, ..."""
        return [f"{self.name}-{i}" for i in range(self.count)]

    def to_json(self) -> dict[str, Any]:
        """The JSON form (stack outputs, the pod's workload spec)."""
        return {"name": self.name, "plan": self.plan.to_json(), "zone": self.zone, "count": self.count,
                "provisioning": self.provisioning.name, "reservation": self.reservation,
                "fallback": [m.name for m in self.fallback], "max_run_duration_s": self.max_run_duration_s,
                "disk_size_gib": self.disk_size_gib}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> SliceSpec:
        """Inverse of :meth:`to_json`."""
        fields = dict(data)
        return cls(**{**fields, "plan": SlicePlan.from_json(fields["plan"]),
                      "provisioning": _mode(fields["provisioning"], "provisioning"),
                      "fallback": tuple(_mode(m, "fallback") for m in fields.get("fallback", ()))})


def _mode(name: str, field: str) -> Provisioning:
    return provisioning_mode(name, field)


def _fallback_offered() -> list[str]:
    """Modes a slice may fall back to: ComputeClass priorities that need no reservation of their own."""
    return [m.name for m in PROVISIONING_MODES.values() if m.priority is not None and not m.needs_reservation]


def _fallback_mode(name: str, field: str) -> Provisioning:
    if name not in PROVISIONING_MODES:  # an unknown name: list what a fallback may be, not every mode
        raise errors.invalid_choice(field, name, _fallback_offered())
    return PROVISIONING_MODES[name]


_STAND_IN_PLAN = plan_slice("v6e", "2x2")
"""Checks a slice's other fields while its shape is impossible, so every problem is reported together."""


# ---------------------------------------------------------------------------------------------- workloads


_REF_LABEL = r"[a-zA-Z0-9](?:[a-zA-Z0-9-]*[a-zA-Z0-9])?"
_REF_DOMAIN = rf"(?:{_REF_LABEL}(?:\.{_REF_LABEL})*(?::[0-9]+)?/)?"
_REF_COMPONENT = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
_IMAGE_REFERENCE = re.compile(rf"^{_REF_DOMAIN}{_REF_COMPONENT}(?:/{_REF_COMPONENT})*"
                              r"(?::(?P<tag>[\w][\w.-]{0,127})(?P<digest>@sha256:[0-9a-f]{64})?|@sha256:[0-9a-f]{64})$")
"""An image reference with a tag, a digest or both: distribution/reference ``regexp.go``'s ``referencePat``
(``domainAndPort`` less IPv6 hosts, ``pathComponent``, ``tag``; digests: sha256 only), which containerd parses
with, here with the tag or digest required."""


def image_problem(image: str) -> tuple[str, str] | None:
    """What is wrong with an image reference, and what is valid (None: it pins what every pod pulls): a tag or a
    digest, and no ``latest`` tag without a digest (it floats: pods of one slice could run different images)."""
    found = _IMAGE_REFERENCE.match(image)
    if found and (found["tag"] != "latest" or found["digest"]):
        return None
    return ("is not an image reference with a tag or digest (without one, every pod pulls whatever 'latest' is then)"
            if not found else "has the floating tag 'latest' (every pod pulls whatever 'latest' is then)",
            "REGISTRY/NAME:TAG (not latest) or REGISTRY/NAME@sha256:<64 hex> (both allowed), e.g. "
            "us-docker.pkg.dev/my-project/ray/jax:1.0; or leave it out for the kit's image")


SECRET_KEY = re.compile(r"^[-._a-zA-Z0-9]{1,253}$")
"""A key of a Secret: k8s.io/apimachinery ``validation.IsConfigMapKey`` (``[-._a-zA-Z0-9]+``, at most 253, not
``.`` or ``..``), which Secret keys obey."""


@dataclass(frozen=True, kw_only=True)
class SecretKeyRef:
    """One key of a Kubernetes Secret in the workloads' namespace, read by pods as an env var
    (``valueFrom.secretKeyRef``).

    Attributes:
        name: The Secret's name (a DNS-1123 subdomain).
        key: The key within it (letters, digits, ``-``, ``_``, ``.``).
    """

    name: str
    key: str

    def __post_init__(self) -> None:
        found = secret_name_problems("name", self.name)
        if not isinstance(self.key, str) or not SECRET_KEY.match(self.key) or self.key in (".", ".."):
            found.append(errors.invalid_value("key", self.key, "is not a Secret key",
                                              "1-253 letters, digits, '-', '_' or '.' (not '.' or '..')"))
        _raise(found)


def gated_model_problems(source: str, secret: SecretKeyRef | None, field: str = "hf_token_secret"
                         ) -> list[InvalidInput]:
    """A model of the built-in table whose Hugging Face repository is gated (``gated``), downloaded without a token:
    Hugging Face refuses the download, so the engine never loads and the RayService never becomes ready, after its
    slices were provisioned. Refused, not warned: the outcome is certain, and the fix (a Secret, or the weights on
    GCS) is cheap. A path in the image or any ``gs://`` source downloads nothing from Hugging Face."""
    if secret is not None or source.startswith(("gs://", "/")):
        return []
    shape = by_hf_id(source)
    if shape is None or not shape.gated:
        return []
    return [errors.missing(
        field, f"for {source}: its Hugging Face repository is gated (each account must accept the model's license), "
        "so without a token the download is refused and the RayService never becomes ready",
        "hf_token_secret: {name: SECRET, key: KEY}, a Secret in the namespace holding a Hugging Face token whose "
        "account was granted access (kubectl create secret generic hf-secret --from-literal=hf_api_token=hf_...); or "
        "model_source: gs://BUCKET/PATH with the weights copied there")]


@dataclass(frozen=True, kw_only=True)
class WorkloadSpec:
    """A Ray workload on one kind of slice.

    Attributes:
        name: DNS-safe name (the KubeRay object's name; RayJobs add a run suffix).
        kind: What runs (:mod:`raytpu.kinds`).
        slice: The slice it runs on.
        image: Container image of its Ray pods, with a tag or digest (the team's own, carrying what the kind's
            program imports and the kit's Ray); default the kit's image of its kind, by digest
            (:func:`raytpu.images.pod_image`).
        slices: How many slices of ``slice`` it spans: for a kind that spans slices (``train``), how many slices
            ONE run reserves together over DCN (multi-slice, :mod:`raytpu.multislice`), default 1, the other
            copies of ``slice`` kept as spares a restart can move to; for other kinds, how many independent copies
            it uses, default all of them (``slice.count``).
        model: Serving only: the served model name (``/v1/models``), also its source unless ``model_source``
            is set; default ``vllm_rules.DEFAULT_MODEL``.
        model_source: Serving only: Hugging Face id or ``gs://BUCKET/PATH`` (read through the pods' GCS FUSE
            mount when it is the kit's bucket); default ``model``.
        max_model_len: Serving only: context length (prompt + completion); default 4096.
        engine_kwargs: Serving only: more vLLM engine args, checked by name against those of the vLLM its pods run
            (:attr:`vllm_version`; :func:`raytpu.vllm_rules.engine_kwargs_problems`).
        hf_token_secret: Serving only: the Secret key holding a Hugging Face token, given to every Ray container as
            ``HF_TOKEN``; required for a gated model of the built-in table downloaded from Hugging Face
            (:func:`gated_model_problems`); default none.
    """

    name: str
    kind: WorkloadKind
    slice: SliceSpec
    image: str | None = None
    slices: int | None = None
    model: str | None = None
    model_source: str | None = None
    max_model_len: int | None = None
    engine_kwargs: Mapping[str, Any] | None = field(default=None, hash=False)
    hf_token_secret: SecretKeyRef | None = None

    def __post_init__(self) -> None:
        found = dns_label_problems("name", self.name)
        if self.image is not None and (wrong := image_problem(self.image)):
            found.append(errors.invalid_value("image", self.image, *wrong))
        if not self.slice.provisioning.runs_ray:
            found.append(errors.invalid_value(
                # Source: GoogleCloudPlatform/cluster-autoscaler (7d25050) pkg/provisioningrequests/scaleup/
                # orchestrator.go: a multi-PodSet ProvisioningRequest provisions only if all its pods fit one node group
                "slice", self.slice.name, f"uses provisioning: {self.slice.provisioning.name}, whose "
                "ProvisioningRequest provisions only when every pod of every PodSet fits one node group, and a Ray "
                "cluster's head (a CPU pod on the head pool) never fits the slice's queued TPU pool",
                "a slice whose provisioning runs a Ray cluster: " +
                ", ".join(m.name for m in PROVISIONING_MODES.values() if m.runs_ray)))
        if not found and not self.plan.single_host:
            found += derived_name_problems("name", self.name, self.name, f"its {self.kind.object_kind}",
                                           run=self.kind.is_job)
            if self.multislice:  # `raytpu smoke` then runs the slice's multi-slice smoke job too
                found += derived_name_problems("slice", self.slice.name, names.dcn_smoke_job(self.slice.name),
                                               "its multi-slice smoke job")
        if not self.plan.ray_reservable:
            nearest = generation(self.plan.generation).nearest_ray_topologies(self.plan.topology)
            found.append(errors.invalid_value(
                "slice", self.slice.name, f"is {self.plan.generation} {self.plan.topology}, which GKE provisions but "
                f"Ray {RAY_VERSION} cannot reserve as one slice (slice_placement_group raises ValueError outside "
                "its VALID_TPU_TOPOLOGY)", f"a slice of a shape Ray {RAY_VERSION} reserves, nearest: "
                f"{', '.join(nearest)}; or keep this slice without workloads"))
        for name in SERVING_FIELDS:
            if getattr(self, name) is not None and not self.kind.takes_model:
                found.append(errors.forbidden(name, getattr(self, name), f"for kind {self.kind.name}",
                                              "only with kinds " + ", ".join(k.name for k in kinds.KINDS.values()
                                                                             if k.takes_model)))
        if self.kind.takes_model:
            found += vllm_rules.slice_problems(self.plan)
            found += vllm_rules.model_source_problems(self.model_source)
            if self.max_model_len is not None:
                found += range_problems("max_model_len", self.max_model_len, vllm_rules.MIN_MAX_MODEL_LEN, 10**7,
                                        " tokens")
            found += vllm_rules.engine_kwargs_problems(self.engine_kwargs, self.plan, model=self.model,
                                                    model_source=self.model_source,
                                                    vllm_version=self.vllm_version or vllm_rules.VLLM_VERSION)
            found += gated_model_problems(self.model_source or self.model or vllm_rules.DEFAULT_MODEL,
                                          self.hf_token_secret)
        if self.slices is not None:
            bad = range_problems("slices", self.slices, 1, self.slice.count)
            found += bad
            if not bad and self.kind.spans_slices:
                found += multislice.problems(self.plan, self.slices)
        _raise(found)

    @property
    def plan(self) -> SlicePlan:
        """The slice's plan."""
        return self.slice.plan

    @property
    def vllm_version(self) -> str | None:
        """The vLLM a serving workload's pods run: the kit's image's, as its ``versions.toml`` records it; with an
        image of the team's own, the one Ray 2.60's ``ray[llm]`` pins (such an image carries the kit's Ray:
        :func:`raytpu.images.pod_image`). None for other kinds."""
        if not self.kind.takes_model:
            return None
        return vllm_rules.VLLM_VERSION if self.image is not None else vllm_rules.IMAGE_VLLM_VERSION

    @property
    def slices_spanned(self) -> int:
        """How many copies of :attr:`slice` it spans: ``slices``, else all of them (``slice.count``)."""
        return self.slice.count if self.slices is None else self.slices

    @property
    def slices_per_run(self) -> int:
        """How many slices one run reserves together (all or none): ``slices`` for a kind that spans slices
        (multi-slice training), else 1."""
        return (self.slices or 1) if self.kind.spans_slices else 1

    @property
    def multislice(self) -> bool:
        """One run spans several slices joined over DCN."""
        return self.slices_per_run > 1

    def to_json(self) -> dict[str, Any]:
        """The JSON form a Ray job receives in ``RAYTPU_WORKLOAD``."""
        serving = {name: getattr(self, name) for name in SERVING_FIELDS}
        if self.hf_token_secret is not None:
            serving["hf_token_secret"] = {"name": self.hf_token_secret.name, "key": self.hf_token_secret.key}
        return {"name": self.name, "kind": self.kind.name, "slice": self.slice.to_json(), "image": self.image,
                "slices": self.slices, **serving}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> WorkloadSpec:
        """Inverse of :meth:`to_json`."""
        fields = dict(data)
        if fields.get("hf_token_secret") is not None:
            fields["hf_token_secret"] = SecretKeyRef(**fields["hf_token_secret"])
        return cls(**{**fields, "kind": kinds.kind(fields["kind"]), "slice": SliceSpec.from_json(fields["slice"])})

    def env(self) -> dict[str, str]:
        """``{RAYTPU_WORKLOAD: <json>}``: how the spec travels into the job's environment."""
        return {WORKLOAD_ENV: json.dumps(self.to_json(), sort_keys=True, separators=(",", ":"))}

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> WorkloadSpec:
        """The spec a job was given (``RAYTPU_WORKLOAD``); InvalidInput when it is missing or unreadable."""
        text = (os.environ if environ is None else environ).get(WORKLOAD_ENV)
        if not text:
            raise errors.missing(WORKLOAD_ENV, "in the environment (the job's workload spec)",
                                 "run through `raytpu submit`/`raytpu local`, or set it to WorkloadSpec.to_json()")
        try:
            return cls.from_json(json.loads(text))
        except (ValueError, KeyError, TypeError) as exc:
            if isinstance(exc, InvalidInput | InvalidInputs):
                raise
            raise errors.invalid_value(WORKLOAD_ENV, text[:80], f"is not a workload spec ({exc})",
                                       "the JSON of WorkloadSpec.to_json()") from exc


# ---------------------------------------------------------------------------------------------- the cluster


@dataclass(frozen=True, kw_only=True)
class ClusterSpec:
    """One GKE cluster and everything on it: the whole of ``raytpu.yaml``, valid.

    Attributes:
        project: GCP project id.
        region: GCP region of the cluster, network and bucket.
        cluster: The GKE cluster.
        network: VPC ranges; default ``NetworkSpec()``.
        storage: Buckets; default ``StorageSpec()``.
        slices: TPU slice kinds (at least one).
        workloads: Ray workloads on them; default none.
        namespace: Namespace of Ray objects and of the Kubernetes service account; default ``ray``.
        ksa_name: Kubernetes service account Ray pods run as (Workload Identity); default ``ray``.
        alerting: Nightly-smoke alerting; default none (off).
        security: What Ray pods may do and who may reach them; default locked down (:class:`SecuritySpec`).
    """

    project: str
    region: str
    cluster: GkeSpec
    network: NetworkSpec = NetworkSpec()
    storage: StorageSpec = StorageSpec()
    slices: tuple[SliceSpec, ...]
    workloads: tuple[WorkloadSpec, ...] = ()
    namespace: str = "ray"
    ksa_name: str = "ray"
    alerting: AlertingSpec | None = None
    security: SecuritySpec = SecuritySpec()

    def __post_init__(self) -> None:
        _raise(cluster_problems(project=self.project, region=self.region, cluster=self.cluster,
                                storage=self.storage, slices=self.slices, workloads=self.workloads))

    @property
    def bucket(self) -> str:
        """The checkpoint bucket's name: ``storage.bucket``, else ``<project>-<cluster>-ray``."""
        return self.storage.bucket or f"{self.project}-{self.cluster.name}-ray"

    @property
    def plans(self) -> dict[str, SlicePlan]:
        """Slice name -> SlicePlan."""
        return {s.name: s.plan for s in self.slices}

    def slice_named(self, name: str, field: str = "slice") -> SliceSpec:
        """The slice called ``name``; InvalidInput listing the names otherwise."""
        for item in self.slices:
            if item.name == name:
                return item
        raise errors.invalid_choice(field, name, [s.name for s in self.slices])

    def workload(self, name: str, field: str = "WORKLOAD") -> WorkloadSpec:
        """The workload called ``name``; InvalidInput listing the names otherwise."""
        for work in self.workloads:
            if work.name == name:
                return work
        raise errors.invalid_choice(field, name, [w.name for w in self.workloads] or
                                    ["(none: add workloads to the config)"])

    def with_slice(self, item: SliceSpec) -> ClusterSpec:
        """This spec plus one slice (checked like every other: unique name, zone in the region, mode rules)."""
        return replace(self, slices=(*self.slices, item))

    def with_workload(self, work: WorkloadSpec) -> ClusterSpec:
        """This spec plus one workload on one of its slices."""
        return replace(self, workloads=(*self.workloads, work))


def cluster_problems(*, project: object, region: object, cluster: GkeSpec | None, storage: StorageSpec | None,
                     slices: Sequence[SliceSpec | None], workloads: Sequence[WorkloadSpec | None]
                     ) -> list[InvalidInput]:
    """The rules of :class:`ClusterSpec`: its own fields and what spans its parts, named by config path.

    A part given as None failed its own rules: the rules that need it are skipped and the others still run
    (``raytpu validate`` reports every problem at once), with list indices kept as in the config.
    """
    found = project_problems("project", project)
    project_ok = not found
    region_bad = region_problems("region", region)
    region_ok = not region_bad
    found += region_bad
    if project_ok and cluster is not None and storage is not None and storage.bucket is None:
        found += [p.at("storage") for p in bucket_problems("bucket", f"{project}-{cluster.name}-ray")]
    if not slices:
        found.append(errors.missing("slices", "(at least one slice)", "a list of slices as in raytpu.example.yaml"))
    for i, item in enumerate(slices):
        if item is None:
            continue
        earlier = [s.name for s in slices[:i] if s is not None]
        found += [p.at(f"slices[{i}]") for p in _slice_problems(item, earlier, region if region_ok else None,
                                                                 cluster)]
    for i, work in enumerate(workloads):
        if work is None:
            continue
        if work.name in [w.name for w in workloads[:i] if w is not None]:
            found.append(errors.invalid_value(f"workloads[{i}].name", work.name, "is used by an earlier workload",
                                              "a unique name per workload"))
        if work.slice not in slices:
            found.append(errors.invalid_choice(f"workloads[{i}].slice", work.slice.name,
                                               list(dict.fromkeys(s.name for s in slices if s is not None))))
    return found


def _slice_problems(item: SliceSpec, earlier: list[str], region: object, cluster: GkeSpec | None
                    ) -> list[InvalidInput]:
    """One slice's rules within its cluster (``region`` None: the region is invalid, zones are not judged)."""
    found = []
    if item.name in earlier:
        found.append(errors.invalid_value("name", item.name, "is used by an earlier slice", "a unique name per slice"))
    if region is not None and item.region != region:
        found.append(errors.invalid_value("zone", item.zone, f"is not a zone of region {region!r}",
                                          f"{region}-a, {region}-b, ... (`raytpu catalog --json` lists "
                                          f"zones seen offering {item.plan.generation})"))
    if cluster is not None and cluster.autopilot and item.disk_size_gib is not None:
        found.append(errors.forbidden("disk_size_gib", item.disk_size_gib,
                                      "with cluster.mode: autopilot (node pool setting)",
                                      "remove it, or use mode: standard"))
    if cluster is not None and not cluster.autopilot and item.fallback:
        found.append(errors.forbidden("fallback", [m.name for m in item.fallback],
                                      "with cluster.mode: standard (a node pool has one provisioning mode)",
                                      "remove fallback, or use mode: autopilot (ComputeClass priorities)"))
    if cluster is not None and cluster.autopilot and item.provisioning.priority is None:
        # Autopilot slices are ComputeClass priorities (spot, flexStart, reservations: GKE's custom compute class
        # docs); queued provisioning is a node-pool flag (--flex-start --enable-queued-provisioning: GKE's
        # provisioningrequest docs) and Autopilot has no node pools, so such a slice would get nothing at all.
        found.append(errors.forbidden(
            "provisioning", item.provisioning.name,
            "with cluster.mode: autopilot (it is a node-pool setting and Autopilot has no node pools; no "
            "ComputeClass priority offers it, so the slice would get no capacity)",
            ", ".join(m.name for m in PROVISIONING_MODES.values() if m.priority is not None) +
            "; or cluster.mode: standard"))
    return found
