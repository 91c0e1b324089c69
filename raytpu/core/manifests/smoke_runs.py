"""The smoke jobs a config yields (``raytpu smoke``): one per slice copy, one multi-slice job per slice a multi-slice
workload spans, each a WorkloadSpec of the smoke kind; :mod:`raytpu.core.manifests.kuberay` builds their RayJobs."""

from __future__ import annotations

from typing import NamedTuple

from raytpu.core.common import names
from raytpu.core.specs import multislice
from raytpu.core.specs.kinds import kind as workload_kind
from raytpu.core.specs.spec import ClusterSpec, SliceSpec, WorkloadSpec


def slice_image(spec: ClusterSpec, item: SliceSpec) -> str | None:
    """The image a smoke job on ``item`` runs when it is not the smoke kind's default: the one its checking workload
    (:attr:`raytpu.core.specs.kinds.WorkloadKind.checks`) or any workload on it names (a team's own image carries JAX).
    None: the kit's image of the smoke kind."""
    on_slice = [w for w in spec.workloads if w.slice == item and w.image is not None]
    smoke = [w.image for w in on_slice if w.kind.checks]
    return (smoke or [w.image for w in on_slice] or [None])[0]


class SmokeRun(NamedTuple):
    """One single-slice smoke job: its base name, its workload, and the node pool of the copy it checks."""

    base: str
    work: WorkloadSpec
    pool: str


def smoke_workloads(spec: ClusterSpec, image: str | None = None) -> list[SmokeRun]:
    """One single-slice smoke job per slice copy that runs Ray, named ``smoke-<slice>-<i>``.

    Slices whose provisioning cannot run a Ray cluster (queued) are left out; the caller reports them.
    """
    smoke = workload_kind("smoke")
    return [SmokeRun(names.smoke_job(item.name, i),
                     WorkloadSpec(name=names.smoke_workload(item.name), kind=smoke, slice=item, slices=1,
                                  image=image or slice_image(spec, item)), item.pool_names[i])
            for item in spec.slices if item.provisioning.runs_ray for i in range(item.count)]


def dcn_span(spec: ClusterSpec, item: SliceSpec) -> int:
    """How many copies of ``item`` one run of the config's multi-slice workloads spans
    (:func:`raytpu.core.specs.multislice.widest` of the workloads on it); 1 when none spans several."""
    return multislice.widest(w for w in spec.workloads if w.slice == item)[0]


def dcn_smoke_workloads(spec: ClusterSpec, image: str | None = None) -> list[tuple[str, WorkloadSpec]]:
    """(job base name, spec) of one multi-slice smoke job per slice a multi-slice workload spans.

    The job spans N copies (``slices: N``: a worker group of ``replicas: N``), as the workload's RayJob does, and
    its program adds the cross-slice all-reduce (``--dcn-slices N``, :mod:`raytpu.workloads.smoke.dcn`) to the
    per-slice checks. Named ``smoke-<slice>-dcn``.
    """
    smoke = workload_kind("smoke")
    return [(names.dcn_smoke_job(item.name),
             WorkloadSpec(name=names.smoke_workload(item.name), kind=smoke, slice=item, slices=span,
                          image=image or slice_image(spec, item)))
            for item in spec.slices if item.provisioning.runs_ray and (span := dcn_span(spec, item)) > 1]
