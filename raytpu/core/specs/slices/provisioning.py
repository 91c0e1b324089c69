"""Provisioning modes: how a TPU slice's capacity is obtained, one entry of :data:`MODES` each
(docs/FACTS.md#gke-node-pools-mode-fields). Standard library only. Source:
https://cloud.google.com/kubernetes-engine/docs/concepts/tpus (docs/FACTS.md#gke-node-pools-provisioning-modes)."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from raytpu.core.common import errors
from raytpu.core.common.errors import InvalidInput
from raytpu.core.tpu.catalog import FLEX_START_MIN_GKE_VERSION, OFFERED

TPU_TAINT = "google.com/tpu"
"""GKE taints every TPU node ``google.com/tpu=present:NoSchedule``; every TPU pod tolerates it."""
SPOT_LABEL = "cloud.google.com/gke-spot"
FLEX_START_LABEL = "cloud.google.com/gke-flex-start"
QUEUED_LABEL = "cloud.google.com/gke-queued"
RESERVATION = re.compile(r"^(?:projects/(?P<project>[a-z][a-z0-9-]{4,28}[a-z0-9])/reservations/)?"
                         r"(?P<name>[a-z](?:[-a-z0-9]{0,61}[a-z0-9])?)$")
"""A reservation's name (RFC 1035, 1-63), or ``projects/OWNER/reservations/NAME`` for one shared from another project.
Source: https://cloud.google.com/compute/docs/reference/rest/v1/reservations (``name``); ReservationAffinity.values."""
RESERVATION_KEY = "compute.googleapis.com/reservation-name"
MAX_RUN_DURATION_S = (600, 7 * 24 * 3600)
"""Flex-start ``max_run_duration`` bounds: 10 minutes to GKE's 7-day maximum."""
VM_MAX_RUN_S = 120 * 24 * 3600
"""The longest run duration of a VM that is not flex-start (the kit keeps a 10-minute floor).
Source: https://cloud.google.com/compute/docs/instances/limit-vm-runtime (Limitations)."""


def reservation_parts(reservation: str) -> tuple[str | None, str]:
    """(owning project or None for the cluster's own, name) of a valid :data:`RESERVATION`."""
    found = RESERVATION.match(reservation)
    assert found, reservation
    return found["project"], found["name"]


@dataclass(frozen=True)
class PoolFields:
    """What a mode sets on a Standard node pool; no mode consumes a reservation it does not name
    (docs/FACTS.md#gke-node-pools-mode-fields).
    Source: https://cloud.google.com/kubernetes-engine/docs/how-to/consuming-reservations
    (docs/FACTS.md#gke-node-pools-provisioning-modes)."""

    spot: bool = False
    flex_start: bool = False
    queued: bool = False
    reservation: bool = False
    scale_from_zero: bool = False
    auto_repair: bool = True


@dataclass(frozen=True)
class Provisioning:
    """One provisioning mode (its fields: docs/FACTS.md#gke-node-pools-mode-fields)."""

    name: str
    pool: PoolFields
    pod_flag: str | None = None
    needs_reservation: bool = False
    runs_ray: bool = True
    priority: Mapping[str, Any] | None = field(default_factory=dict)
    why_no_reservation: str = "a reservation is only consumed with provisioning: reservation"
    min_gke_version: str | None = None
    max_run_s: int = VM_MAX_RUN_S

    def problems(self, reservation: str | None, max_run_duration_s: int | None) -> list[InvalidInput]:
        """This mode's rules over a slice's fields, with field names relative to the slice."""
        found = []
        if self.needs_reservation and not reservation:
            found.append(errors.missing("reservation", f"with provisioning: {self.name}",
                                        "the name of a specific reservation in the project"))
        if reservation and not RESERVATION.match(reservation):
            found.append(errors.invalid_value("reservation", reservation, "is not a reservation name",
                                              "NAME (1-63 lowercase letters, digits, hyphens; starts with a letter, "
                                              "does not end with a hyphen), or projects/OWNER/reservations/NAME for a "
                                              "shared one; reservation blocks are not supported"))
        elif not self.needs_reservation and reservation:
            found.append(errors.forbidden("reservation", reservation,
                                          f"with provisioning: {self.name} ({self.why_no_reservation})",
                                          "remove reservation, or set provisioning: reservation"))
        return found + run_duration_problems(max_run_duration_s, (self,))

    def pod_placement(self) -> tuple[dict[str, str], list[dict[str, Any]]]:
        """(nodeSelector entries, tolerations) a pod needs on a Standard pool of this mode."""
        if self.pod_flag is None:
            return {}, []
        return ({self.pod_flag: "true"},
                [{"key": self.pod_flag, "operator": "Equal", "value": "true", "effect": "NoSchedule"}])

    def compute_class_priority(self, tpu: Mapping[str, Any], reservation: str | None, project: str, zone: str,
                               max_run_duration_s: int | None = None) -> dict[str, Any]:
        """This mode's ``spec.priorities`` entry for TPU shape ``tpu`` in ``zone``, held to that zone.
        Source: compute-class-api ``Priority.Location.Zones``, ``Priority.MaxRunDurationSeconds``
        (docs/FACTS.md#gke-node-pools-provisioning-modes, docs/FACTS.md#gke-node-pools-mode-fields)."""
        if self.priority is None:
            raise errors.forbidden("provisioning", self.name, "in an Autopilot ComputeClass",
                                   ", ".join(m.name for m in MODES.values() if m.priority is not None))
        entry: dict[str, Any] = {"tpu": dict(tpu), **self.priority, "location": {"zones": [zone]}}
        if self.needs_reservation:
            owner, name = reservation_parts(str(reservation))
            entry["reservations"] = {"affinity": "Specific", "specific": [{"name": name, "project": owner or project}]}
        if max_run_duration_s is not None:
            entry["maxRunDurationSeconds"] = max_run_duration_s
        return entry


def run_duration_problems(max_run_duration_s: int | None, modes: tuple[Provisioning, ...]) -> list[InvalidInput]:
    """A slice's ``max_run_duration_s`` against the tightest bound of every mode it may run on (any mode takes one).
    Source: docs/FACTS.md#gke-node-pools-run-duration."""
    if max_run_duration_s is None:
        return []
    tightest = min(modes, key=lambda m: m.max_run_s)
    if MAX_RUN_DURATION_S[0] <= max_run_duration_s <= tightest.max_run_s:
        return []
    return [errors.invalid_value("max_run_duration_s", max_run_duration_s, "is out of range",
                                 f"{MAX_RUN_DURATION_S[0]} to {tightest.max_run_s} seconds (provisioning: "
                                 f"{tightest.name})")]


MODES: dict[str, Provisioning] = {p.name: p for p in (
    Provisioning("on-demand", PoolFields()),
    Provisioning("spot", PoolFields(spot=True), pod_flag=SPOT_LABEL, priority={"spot": True},
                 why_no_reservation="spot VMs never consume reservations"),
    Provisioning("reservation", PoolFields(reservation=True), needs_reservation=True),
    Provisioning("flex-start", PoolFields(flex_start=True, scale_from_zero=True, auto_repair=False),
                 pod_flag=FLEX_START_LABEL, priority={"flexStart": {"enabled": True}},
                 why_no_reservation="flex-start capacity is exclusive with reservations",
                 min_gke_version=FLEX_START_MIN_GKE_VERSION, max_run_s=MAX_RUN_DURATION_S[1]),
    # GKE requires flex-start together with queued provisioning on the pool
    # (docs/FACTS.md#gke-node-pools-queued-provisioning).
    Provisioning("queued", PoolFields(flex_start=True, queued=True, scale_from_zero=True, auto_repair=False),
                 pod_flag=QUEUED_LABEL, runs_ray=False, priority=None,
                 why_no_reservation="queued provisioning (DWS) is exclusive with reservations",
                 max_run_s=MAX_RUN_DURATION_S[1]),
)}
"""Every mode, by name, in the order ``raytpu.yaml`` documents them."""

NAMES: tuple[str, ...] = tuple(MODES)


def generation_problems(modes: tuple[Provisioning, ...], generation: str) -> list[InvalidInput]:
    """Flex-start on a generation GKE says it does not support (pods would wait forever); merely unlisted: warned.
    Source: https://cloud.google.com/kubernetes-engine/docs/concepts/dws ("TPU v3 and v4 are not supported")."""
    if OFFERED.flex_start.get(generation) != ():
        return []
    supported = ", ".join(g for g, zones in OFFERED.flex_start.items() if zones)
    return [errors.invalid_value("provisioning" if i == 0 else f"fallback[{i - 1}]", m.name,
                                 f"is not offered for {generation}: GKE's flex-start page says it does not support "
                                 f"{generation} ({OFFERED.flex_start_source}, read {OFFERED.read_on})",
                                 f"on-demand, spot or reservation for {generation}; flex-start for {supported}")
            for i, m in enumerate(modes) if m.name == "flex-start"]


def mode(name: str, field: str = "provisioning") -> Provisioning:
    """The mode called ``name``; InvalidInput listing the modes otherwise."""
    try:
        return MODES[name]
    except KeyError as exc:
        raise errors.invalid_choice(field, name, NAMES) from exc
