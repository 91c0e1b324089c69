"""The smoke jobs a config yields (``raytpu smoke``): one per slice copy, one per multi-slice span, as WorkloadSpecs."""

from __future__ import annotations

from dataclasses import replace
from typing import NamedTuple

from raytpu.core.common import names
from raytpu.core.specs.kinds import kind as workload_kind
from raytpu.core.specs.slices import multislice
from raytpu.core.specs.spec import ClusterSpec, SliceSpec, WorkloadSpec


def slice_image(spec: ClusterSpec, item: SliceSpec) -> str | None:
    """The image a smoke job on ``item`` runs: its checking (or any) workload's, else None (the smoke kind's)."""
    on_slice = [w for w in spec.workloads if w.slice == item and w.image is not None]
    smoke = [w.image for w in on_slice if w.kind.checks]
    return (smoke or [w.image for w in on_slice] or [None])[0]


class SmokeRun(NamedTuple):
    """One single-slice smoke job: its base name, its workload, and the node pool of the copy it checks."""

    base: str
    work: WorkloadSpec
    pool: str


def smoke_workloads(spec: ClusterSpec, image: str | None = None) -> list[SmokeRun]:
    """One smoke job per slice copy that runs Ray (``smoke-<slice>-<i>``); queued slices are left to the caller."""
    return [SmokeRun(names.smoke_job(item.name, i), smoke_workload(spec, item, 1, image), item.pool_names[i])
            for item in spec.slices if item.provisioning.runs_ray for i in range(item.count)]


def smoke_workload(spec: ClusterSpec, item: SliceSpec, slices: int, image: str | None) -> WorkloadSpec:
    """The smoke spec of ``item``: the config's smoke workload on it copied whole (its ``compile_cache``,
    ``compile_budget_s``, ``ray_disk_gib``...: none dropped, issue 49), else the defaults; named for the slice."""
    own = [w for w in spec.workloads if w.slice == item and w.kind.name == "smoke"]
    base = own[0] if own else WorkloadSpec(name=names.smoke_workload(item.name), kind=workload_kind("smoke"),
                                           slice=item)
    return replace(base, name=names.smoke_workload(item.name), slices=slices,
                   image=image or slice_image(spec, item))


def dcn_span(spec: ClusterSpec, item: SliceSpec) -> int:
    """How many copies of ``item`` the config's widest multi-slice workload on it spans; 1 when none does."""
    return multislice.widest(w for w in spec.workloads if w.slice == item)[0]


def dcn_smoke_workloads(spec: ClusterSpec, image: str | None = None) -> list[tuple[str, WorkloadSpec]]:
    """(job base name, spec) of one multi-slice smoke job (``smoke-<slice>-dcn``) per slice a multi-slice workload
    spans: ``replicas: N`` and the cross-slice all-reduce (``--dcn-slices N``)."""
    return [(names.dcn_smoke_job(item.name), smoke_workload(spec, item, span, image))
            for item in spec.slices if item.provisioning.runs_ray and (span := dcn_span(spec, item)) > 1]
