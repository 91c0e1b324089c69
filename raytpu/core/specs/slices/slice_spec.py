"""A kind of TPU slice in ``raytpu.yaml`` (``slices[]``): its shape, zone, copies and provisioning, valid once built.

Stdlib and the core only. Details: docs/FACTS.md#spec-build.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from functools import partial
from typing import Any

from raytpu.core.common import errors, names
from raytpu.core.common.errors import InvalidInput, Problems
from raytpu.core.specs.field_rules import (
    DEFAULT_DISK_SIZE_GIB,
    DISK_SIZE_GIB,
    DNS_LABEL_LENGTH,
    ZONE,
    dns_label_problems,
    raise_all,
    range_problems,
)
from raytpu.core.specs.slices import notice
from raytpu.core.specs.slices.provisioning import MODES as PROVISIONING_MODES
from raytpu.core.specs.slices.provisioning import Provisioning, run_duration_problems
from raytpu.core.specs.slices.provisioning import generation_problems as provisioning_generation_problems
from raytpu.core.specs.slices.provisioning import mode as provisioning_mode
from raytpu.core.tpu.plan import SlicePlan, plan_slice

MULTI_HOST_NAME_LIMIT = 35
"""Longest RayJob/RayService name with a multi-host TPU worker group (longer: hosts cannot resolve each other).
Source: ai-on-gke kuberay-tpu-webhook ``CheckName`` (docs/FACTS.md#kuberay-webhook)."""


def derived_name_problems(field: str, value: str, derived: str, what: str, run: bool = True) -> list[InvalidInput]:
    """``value`` is too long when ``derived`` (plus a run suffix) passes :data:`MULTI_HOST_NAME_LIMIT`."""
    longest = names.run_name(derived, "x" * names.RUN_ID_LENGTH) if run else derived
    if len(longest) <= MULTI_HOST_NAME_LIMIT:
        return []
    return [errors.invalid_value(
        field, value, f"is too long for a multi-host slice: {what} ({longest}) would exceed {MULTI_HOST_NAME_LIMIT} "
        "characters, and GKE's TPU webhook truncates longer names so the hosts cannot find each other",
        f"at most {MULTI_HOST_NAME_LIMIT - len(longest) + len(value)} characters")]


@dataclass(frozen=True, kw_only=True)
class SliceSpec:
    """One kind of TPU slice: its shape, zone, copies and how capacity is obtained (:meth:`create` from names).

    Field meanings and bounds (the config's reference): docs/FACTS.md#spec-fields.
    Public API: ``from raytpu import SliceSpec``.
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
    preemption_notice_s: int | None = None
    transparent_hugepages: bool = True

    def __post_init__(self) -> None:
        found = dns_label_problems("name", self.name)
        if not isinstance(self.zone, str) or not ZONE.match(self.zone):
            found.append(errors.invalid_value("zone", self.zone, "is not a GCP zone", "a zone such as us-east5-b"))
        found += range_problems("count", self.count, 1, 1000)
        found += self.provisioning.problems(self.reservation, self.max_run_duration_s)
        fallback_found = self._fallback_problems()
        found += fallback_found
        if self.fallback and not fallback_found and all(p.field != "max_run_duration_s" for p in found):
            found += run_duration_problems(self.max_run_duration_s, self.modes)  # the fallbacks' bounds too
        found += provisioning_generation_problems(self.modes, self.plan.generation)
        if self.disk_size_gib is not None:
            found += range_problems("disk_size_gib", self.disk_size_gib, *DISK_SIZE_GIB, " GiB")
        found += notice.notice_problems(self.preemption_notice_s, self.modes)
        if not isinstance(self.transparent_hugepages, bool):
            found.append(errors.invalid_value("transparent_hugepages", self.transparent_hugepages, "is not a boolean",
                                              "true or false"))
        smoke = names.smoke_workload(self.name)
        if not found and self.provisioning.runs_ray and len(smoke) > DNS_LABEL_LENGTH:
            found.append(errors.invalid_value(
                "name", self.name, f"is too long for a slice that runs Ray: its smoke workload ({smoke}) would "
                f"exceed {DNS_LABEL_LENGTH} characters", f"at most {DNS_LABEL_LENGTH - len(smoke) + len(self.name)} "
                "characters"))
        if not found and not self.plan.single_host:
            found += derived_name_problems("name", self.name, names.longest_smoke_job(self.name, self.count, False),
                                           "its smoke jobs")
        raise_all(found)

    @property
    def modes(self) -> tuple[Provisioning, ...]:
        """Every mode the slice may be provisioned by: ``provisioning``, then its fallbacks in order."""
        return (self.provisioning, *self.fallback)

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
        """Plans the shape and builds the spec; raises every problem at once."""
        problems = Problems()
        plan = problems.build("", lambda: plan_slice(generation, topology, machine_type))
        mode = problems.build("", lambda: _mode(provisioning, "provisioning"))
        modes = [problems.build("", partial(_fallback_mode, m, f"fallback[{i}]")) for i, m in enumerate(fallback)]
        if mode is None:  # the mode's own rules cannot be judged; the other fields still are
            rest = {k: v for k, v in rest.items() if k not in ("reservation", "max_run_duration_s",
                                                               "preemption_notice_s")}
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
    def notice_s(self) -> int:
        """The shutdown window after a preemption notice: ``preemption_notice_s``, else GKE's 30 s."""
        return self.preemption_notice_s or notice.NOTICE_S

    @property
    def pool_names(self) -> list[str]:
        """Node pool (and emulated slice) names of the copies: ``<name>-0``, ``<name>-1``, ..."""
        return [f"{self.name}-{i}" for i in range(self.count)]

    def to_json(self) -> dict[str, Any]:
        """The JSON form (stack outputs, the pod's workload spec)."""
        return {"name": self.name, "plan": self.plan.to_json(), "zone": self.zone, "count": self.count,
                "provisioning": self.provisioning.name, "reservation": self.reservation,
                "fallback": [m.name for m in self.fallback], "max_run_duration_s": self.max_run_duration_s,
                "disk_size_gib": self.disk_size_gib, "preemption_notice_s": self.preemption_notice_s,
                "transparent_hugepages": self.transparent_hugepages}

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
    """ComputeClass priorities that need no reservation of their own."""
    return [m.name for m in PROVISIONING_MODES.values() if m.priority is not None and not m.needs_reservation]


def _fallback_mode(name: str, field: str) -> Provisioning:
    if name not in PROVISIONING_MODES:  # an unknown name: list what a fallback may be, not every mode
        raise errors.invalid_choice(field, name, _fallback_offered())
    return PROVISIONING_MODES[name]


_STAND_IN_PLAN = plan_slice("v6e", "2x2")
"""Checks a slice's other fields while its shape is impossible, so every problem is reported together."""
