"""The cluster's parts: config sections ``cluster``, ``network``, ``alerting`` and ``storage``, composed by
``ClusterSpec``; each raises all its problems when built. Standard library and the kit's core only."""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Mapping
from dataclasses import dataclass, field

from raytpu.core.common import errors
from raytpu.core.common.errors import InvalidInput
from raytpu.core.specs.field_rules import (
    MACHINE_TYPE,
    NODE_COUNT,
    PROJECT_ID,
    bucket_problems,
    choice_problems,
    cidr_problems,
    cluster_name_problems,
    label_problems,
    raise_all,
    range_problems,
)

CLUSTER_MODES = ("standard", "autopilot")
LEGACY_KSA = ("keep", "drop")
"""``cluster.legacy_ksa``, for a cluster first deployed before the per-cluster KSA (``<cluster>-ray``), whose pods
ran as ``ray``: ``keep`` binds both principals and keeps the ``ray`` KSA at the addresses they had (the upgrade only
adds); ``drop``, once every workload runs as the new KSA, removes the old ones (the upgrade only deletes). Absent:
a cluster deployed with this kit. README "Upgrading from the shared ray KSA"; docs/FACTS.md#networking-legacy-ksa."""
CONTROL_PLANE_ACCESS = ("dns", "ip")
RELEASE_CHANNELS = ("RAPID", "REGULAR", "STABLE", "EXTENDED")
WEEKDAYS = ("MO", "TU", "WE", "TH", "FR", "SA", "SU")
HH_MM = re.compile(r"^([01][0-9]|2[0-3]):([0-5][0-9])$")


@dataclass(frozen=True, kw_only=True)
class MaintenanceWindowSpec:
    """When GKE may auto-upgrade nodes (``cluster.maintenance_window``), in UTC: an upgrade recreates a slice.

    GKE requires 48 hours in any 32 days, in windows of 4 hours or more, so ``len(days) * 4 * hours >= 48``.
    Source: https://cloud.google.com/kubernetes-engine/docs/maintenance-window (docs/FACTS.md#gke-cluster-fields; fields
    there).
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
        raise_all(found)

    @property
    def recurrence(self) -> str:
        """The RFC 5545 rule GKE takes (``FREQ=WEEKLY;BYDAY=SA,SU``)."""
        return "FREQ=WEEKLY;BYDAY=" + ",".join(self.days)


@dataclass(frozen=True, kw_only=True)
class HeadPoolSpec:
    """The CPU node pool Ray heads run on (Standard clusters; fields: docs/FACTS.md#gke-cluster-fields)."""

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
        raise_all(found)


@dataclass(frozen=True, kw_only=True)
class AuthorizedNetwork:
    """A CIDR allowed to reach the control plane's IP endpoint."""

    name: str
    cidr: str

    def __post_init__(self) -> None:
        raise_all(cidr_problems("cidr", self.cidr))


@dataclass(frozen=True, kw_only=True)
class GkeSpec:
    """The GKE cluster (config section ``cluster``; fields: docs/FACTS.md#gke-cluster-fields)."""

    name: str
    mode: str = "standard"
    release_channel: str = "RAPID"
    deletion_protection: bool = True
    control_plane: str = "dns"
    master_authorized_networks: tuple[AuthorizedNetwork, ...] = ()
    head_pool: HeadPoolSpec | None = None
    labels: Mapping[str, str] = field(default_factory=dict)
    maintenance_window: MaintenanceWindowSpec = field(default_factory=MaintenanceWindowSpec)
    legacy_ksa: str | None = None

    def __post_init__(self) -> None:
        found = cluster_name_problems("name", self.name)
        if self.legacy_ksa is not None:
            found += choice_problems("legacy_ksa", self.legacy_ksa, LEGACY_KSA)
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
        raise_all(found)

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
        raise_all(found)


NOTIFICATION_CHANNEL = re.compile(rf"^projects/{PROJECT_ID.pattern[1:-1]}/notificationChannels/[0-9]+$")


@dataclass(frozen=True, kw_only=True)
class AlertingSpec:
    """Nightly-smoke alerting (``alerting``, opt-in): a log-based metric and an alert policy on unhealthy verdicts."""

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
        raise_all(found)


DATA_ACCESS_ROLES: Mapping[str, tuple[str, ...]] = {
    "read": ("roles/storage.objectViewer",),
    "read-write": ("roles/storage.objectUser", "roles/storage.legacyBucketReader"),
}
"""What the Ray pods' account is granted on a team's bucket, by ``access`` (write adds ``storage.buckets.get``).
Source: apache/arrow ``gcsfs.cc`` ``CreateDirMarkerRecursive`` (docs/FACTS.md#terraform-constructs,
docs/FACTS.md#gke-cluster-fields)."""


@dataclass(frozen=True, kw_only=True)
class DataBucket:
    """A team's bucket the Ray pods may use (``storage.data_buckets[i]``), ``read`` or ``read-write``."""

    name: str
    access: str = "read"

    def __post_init__(self) -> None:
        raise_all([*bucket_problems("name", self.name),
                   *choice_problems("access", self.access, tuple(DATA_ACCESS_ROLES))])

    @property
    def writes(self) -> bool:
        """The pods may write objects there."""
        return self.access == "read-write"


@dataclass(frozen=True, kw_only=True)
class StorageSpec:
    """Buckets (config section ``storage``; fields: docs/FACTS.md#gke-cluster-fields)."""

    bucket: str | None = None
    state_bucket: str | None = None
    data_buckets: tuple[DataBucket, ...] = ()

    def __post_init__(self) -> None:
        found = []
        for name in ("bucket", "state_bucket"):
            if getattr(self, name) is not None:
                found += bucket_problems(name, getattr(self, name))
        seen: set[str] = set()  # as the identity module's resource ids spell them ('.' as '-')
        for i, data in enumerate(self.data_buckets):
            if data.name.replace(".", "-") in seen:
                found.append(errors.invalid_value(f"data_buckets[{i}].name", data.name, "is listed twice (or as a "
                                                  "name that differs only by '.' for '-')",
                                                  "each bucket once, with the access it needs"))
            elif data.name == self.state_bucket:
                found.append(errors.forbidden(f"data_buckets[{i}].name", data.name, "(it is storage.state_bucket: "
                                              "Terraform state holds secrets the Ray pods must not read)",
                                              "a bucket of data, weights or code"))
            elif data.name == self.bucket:
                found.append(errors.invalid_value(f"data_buckets[{i}].name", data.name, "is storage.bucket, which "
                                                  "the pods may already read and write", "another bucket"))
            seen.add(data.name.replace(".", "-"))
        raise_all(found)
