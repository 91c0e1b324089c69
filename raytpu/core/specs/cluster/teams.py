"""Teams sharing the slices (config section ``teams``): each a namespace, an identity and a Kueue queue with a quota
in chips; a workload's ``team`` and ``priority``. Without ``teams`` the kit runs as before (one namespace, no queue).
Standard library and the kit's core only; the Kueue objects are :mod:`raytpu.core.manifests.kueue`'s."""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from raytpu.core.common import errors
from raytpu.core.common.errors import InvalidInput
from raytpu.core.specs import workload_fields
from raytpu.core.specs.field_rules import dns_label_problems, raise_all

if TYPE_CHECKING:
    from raytpu.core.specs.slices.slice_spec import SliceSpec
    from raytpu.core.specs.workload_spec import WorkloadSpec

NAMESPACE_PREFIX = "raytpu-"
"""A team's namespace is ``raytpu-<team>`` (at most 37 characters: a DNS label, under Kubernetes' 63)."""
PRIORITIES = {"low": 100, "normal": 1000, "high": 10000}
"""``workloads[].priority`` -> its Kueue WorkloadPriorityClass's value: high may preempt low within the cohort."""
DEFAULT_PRIORITY = "normal"
TEAM_FOLDERS = ("checkpoints", "outputs", "compile-cache")
"""Each a folder per team in the kit's bucket (``checkpoints/<team>/``): what a team's identity may write."""


@dataclass(frozen=True, kw_only=True)
class TeamSpec:
    """One entry of ``teams``: ``name`` (a DNS label), ``quota`` (slice name -> chips it may hold at once, Kueue's
    nominal quota) and ``can_borrow`` (use the cohort's unused chips, given back when their owner needs them)."""

    name: str
    quota: Mapping[str, int] = field(default_factory=dict, hash=False)
    can_borrow: bool = False

    def __post_init__(self) -> None:
        found = dns_label_problems("name", self.name)
        for slice_name, chips in self.quota.items():
            if not isinstance(chips, int) or isinstance(chips, bool) or chips < 0:
                found.append(errors.invalid_value(f"quota.{slice_name}", chips, "is not a number of chips",
                                                  "a whole number of chips, 0 or more (a multiple of the slice's "
                                                  "chips per host)"))
        raise_all(found)

    @property
    def namespace(self) -> str:
        """The team's namespace: its runs, Secrets, KSA and LocalQueue."""
        return f"{NAMESPACE_PREFIX}{self.name}"

    @property
    def write_folders(self) -> tuple[str, ...]:
        """The folders of the kit's bucket its runs write: their checkpoints, batch outputs and JAX compile cache."""
        return tuple(f"{folder}/{self.name}" for folder in TEAM_FOLDERS)

    @property
    def read_folders(self) -> tuple[str, ...]:
        """The folders it reads beside its own: the kit's core zip and its own code zips."""
        return ("raytpu", f"code/{self.name}")

    @property
    def queue(self) -> str:
        """Its LocalQueue's name (in :attr:`namespace`) and ClusterQueue's (``raytpu-<team>``)."""
        return f"{NAMESPACE_PREFIX}{self.name}"


def service_account_id(cluster: str, team: str) -> str:
    """The team's Google service account id: its name readable, a digest of cluster and team keeping it unique
    within the project, 30 characters at most. Source: IAM CreateServiceAccount accountId ``[a-z]([-a-z0-9]*[a-z0-9])``,
    6-30 characters."""
    digest = hashlib.sha256(f"{cluster}/{team}".encode()).hexdigest()[:5]
    return f"raytpu-{team[:17].rstrip('-')}-{digest}"


def chips_of(work: WorkloadSpec) -> int:
    """The TPU chips one run of ``work`` holds: every host of every slice copy its RayJob asks for (Kueue charges a
    worker group ``replicas x numOfHosts`` pods). Source: Kueue v0.19.2 pkg/controller/jobs/raycluster
    ``effectiveWorkerCount``."""
    return work.plan.chips * work.slices_spanned


def teams_problems(given: Sequence[TeamSpec | None], slices: Sequence[SliceSpec | None],
                   workloads: Sequence[WorkloadSpec | None], bucket: str | None = None) -> list[InvalidInput]:
    """The rules spanning teams, slices and workloads, each named by config path: unique names, quotas on slices
    that exist in whole hosts, every team workload naming a known team, and a quota that can admit each run (judged
    once every team compiled: a broken team is reported once, under its own fields)."""
    found: list[InvalidInput] = []
    teams = [t for t in given if t is not None]
    by_slice = {s.name: s for s in slices if s is not None}
    names = [t.name if t is not None else None for t in given]
    for i, team in enumerate(given):
        if team is None:
            continue
        if team.name in names[:i]:
            found.append(errors.invalid_value(f"teams[{i}].name", team.name, "is used by an earlier team",
                                              "a unique name per team"))
        for slice_name, chips in team.quota.items():
            item = by_slice.get(slice_name)
            if item is None:
                found.append(errors.invalid_choice(f"teams[{i}].quota", slice_name, list(by_slice) or
                                                   ["(none: the config has no slices)"], " as a slice name"))
            elif chips % item.plan.chips_per_host:
                found.append(errors.invalid_value(
                    f"teams[{i}].quota.{slice_name}", chips, f"is not a whole number of {slice_name}'s hosts "
                    f"({item.plan.chips_per_host} chips each: Kueue admits whole pods)",
                    f"a multiple of {item.plan.chips_per_host}, e.g. {item.plan.chips}"))
    if found or None in given:  # a quota to fix first: what it admits is judged once it is right
        return found
    for i, work in enumerate(workloads):
        if work is not None:
            found += [p.at(f"workloads[{i}]") for p in _workload_problems(work, teams, bucket)]
    return found


def _workload_problems(work: WorkloadSpec, teams: Sequence[TeamSpec], bucket: str | None) -> list[InvalidInput]:
    if not workload_fields.takes(work.kind.name, "team"):
        return []  # the fields table refuses team and priority on the platform's kinds
    if work.priority is not None and work.priority not in PRIORITIES:
        return [errors.invalid_choice("priority", work.priority, PRIORITIES)]
    if not teams:
        given = "team" if work.team is not None else "priority" if work.priority is not None else None
        return [] if given is None else [errors.forbidden(given, getattr(work, given), "without a teams section "
                                                          "(runs are queued by team)",
                                                          "add teams, or leave it out")]
    named = {t.name: t for t in teams}
    if work.team is None:
        return [errors.missing("team", f"for kind {work.kind.name} once teams is set (every run is queued as a "
                               "team's)", f"one of {', '.join(named)}")]
    if work.team not in named:
        return [errors.invalid_choice("team", work.team, list(named))]
    team = named[work.team]
    return _folder_problems(work, team, bucket) + _quota_problems(work, team, teams)


def _folder_problems(work: WorkloadSpec, team: TeamSpec, bucket: str | None) -> list[InvalidInput]:
    """A team run writes only its team's folders of the kit's bucket: its compile cache is the team's, a batch
    ``output`` there lies under ``outputs/<team>/``."""
    found = []
    if work.compile_cache not in (None, "off"):
        found.append(errors.forbidden("compile_cache", work.compile_cache, f"for a run of team {team.name} (its "
                                      f"cache is compile-cache/{team.name}/, the only one its identity writes)",
                                      "leave it out, or off"))
    output = work.output
    inside = f"gs://{bucket}/outputs/{team.name}/"
    if bucket is not None and isinstance(output, str) and output.startswith(f"gs://{bucket}/") and \
            not output.startswith(inside):
        found.append(errors.invalid_value("output", output, f"is in the kit's bucket outside {inside}, which team "
                                          f"{team.name}'s identity cannot write", f"{inside}{work.name}"))
    return found


def _quota_problems(work: WorkloadSpec, team: TeamSpec, teams: Sequence[TeamSpec]) -> list[InvalidInput]:
    """A run its team's quota (with the cohort's, if it borrows) could never admit."""
    need = chips_of(work)
    own = team.quota.get(work.slice.name, 0)
    cohort = sum(t.quota.get(work.slice.name, 0) for t in teams)
    room = cohort if team.can_borrow else own
    if need <= room:
        return []
    index = [t.name for t in teams].index(team.name)
    where = (f"the cohort's {cohort} chips of {work.slice.name} (its own {own}, borrowing the rest)"
             if team.can_borrow else f"its quota teams[{index}].quota.{work.slice.name} of {own} chips")
    return [errors.invalid_value(
        "team", work.team, f"could never run it: one run holds {need} chips of slice {work.slice.name} "
        f"({work.plan.topology} x {work.slices_spanned}), over {where}; Kueue would keep it queued forever",
        f"teams[{index}].quota.{work.slice.name}: {need} or more" +
        ("" if team.can_borrow else ", or can_borrow: true with room in the cohort"))]

