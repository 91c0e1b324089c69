"""What a config's slices and workloads become on the emulated slice: the slice, the DCN span a smoke check covers, and
the workload specs moved onto the local slice. Standard library at import; the config is read only given a path."""

from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

from raytpu.core.common import errors
from raytpu.core.specs.runtime.data import DATA_FIELDS
from raytpu.core.specs.slices import multislice
from raytpu.core.specs.spec import ClusterSpec, WorkloadSpec
from raytpu.core.tpu.plan import SlicePlan
from raytpu.local.slice.state import LocalCluster

if TYPE_CHECKING:
    from raytpu.teamcode.prepared import TeamCode


def config_slice_plan(spec: ClusterSpec, slice_name: str | None = None) -> SlicePlan:
    """The plan of ``slice_name``, else of the train workload's slice, else of the first slice."""
    if slice_name is None:
        trains = [w.slice for w in spec.workloads if w.kind.trains]
        return (trains[0] if trains else spec.slices[0]).plan
    return spec.slice_named(slice_name, "--slice").plan


def dcn_slices_of(spec: ClusterSpec | None, plan: SlicePlan, available: int) -> tuple[int | None, str | None]:
    """The ``--dcn-slices`` a smoke check passes by itself on ``available`` local slices of ``plan``, with the line that
    says so: N when a train workload of ``spec`` spans N > 1 slices and the cluster has N, else None and why; (None,
    None) without such a workload."""
    span, name = multislice.widest(w for w in (spec.workloads if spec is not None else ()) if w.plan == plan)
    if name is None:
        return None, None
    if available >= span:
        return span, (f"train workload {name} spans {span} slices over DCN: the smoke check also all-reduces across "
                      f"{span} of the local cluster's {available} slices (--dcn-slices {span})")
    return None, (f"DCN check skipped: train workload {name} spans {span} slices and the local cluster has "
                  f"{available} (`raytpu local up --slices {span}` for it)")


def optional_config(path: str | None) -> ClusterSpec | None:
    """``path``, else the local commands' default config (:func:`raytpu.config.choose`) when present, else None."""
    from raytpu.config import choose, load

    path = choose(path, local=True)
    return load(path) if Path(path).exists() else None


def job_workload(cluster: LocalCluster, work: WorkloadSpec) -> WorkloadSpec:
    """The spec a job workload runs with on ``cluster`` (``submit --local``): every field of ``work`` (copied whole,
    so none is dropped; issue 49) on the emulated slices; a local data path made absolute (the job runs from a
    folder of Ray's choosing)."""
    local: dict[str, Any] = {f: local_path(getattr(work, f)) for f in (*DATA_FIELDS, "dataset")
                             if getattr(work, f) is not None}
    return replace(work, slice=cluster.slice_spec, slices=work.slices if work.multislice else None, **local)


def local_path(path: str) -> str:
    """``path`` made absolute against the current folder when local (``gs://`` unchanged)."""
    return path if path.startswith("gs://") else os.path.abspath(path)


def serving_workload(cluster: LocalCluster, config: str | None = None, name: str | None = None) -> WorkloadSpec:
    """The serving WorkloadSpec to deploy on ``cluster``: the config's (``name``, else its first serving
    workload) moved onto the local slice (:func:`serving_on_slice`), else the defaults."""
    chosen = config_serving_workload(config, name)
    return cluster.workload("serve") if chosen is None else serving_on_slice(cluster, chosen.work)


class ChosenWorkload(NamedTuple):
    """A workload of a config and the config it was read from (its field path and its code are read from it)."""

    spec: ClusterSpec
    work: WorkloadSpec

    def team_code(self) -> TeamCode | None:
        """A ``serve_app``'s code read once, before any cluster is looked at; None for the kit's LLM app."""
        if self.work.serve_app is None:
            return None
        from raytpu.images import team

        return team.prepare(self.spec, self.work)


def config_serving_workload(config: str | None = None, name: str | None = None) -> ChosenWorkload | None:
    """The config's serving workload ``name`` (else its first), judged before any cluster is looked at: InvalidInput
    naming ``workload`` for a name the config lacks or a workload that serves nothing (a job kind's: ``submit
    --local`` runs it). None when there is none to take and no name was given: the kit's default serve workload."""
    from raytpu.config import choose, load

    path = choose(config, local=True)
    if config is None and not Path(path).exists():
        if name is not None:
            raise errors.missing("config", "with --workload", "--config naming a raytpu.yaml")
        return None
    spec = load(path)
    workloads = spec.workloads
    serving = [w for w in workloads if w.kind.serves]
    chosen = [w for w in serving if name in (None, w.name)]
    if chosen or name is None:
        return ChosenWorkload(spec, chosen[0]) if chosen else None
    listed = errors.listing(w.name for w in serving) if serving else "(the config has no serving workload)"
    job = next((w for w in workloads if w.name == name and w.kind.is_job), None)
    if job is not None:
        raise errors.invalid_value("workload", name, f"is a {job.kind.name} workload (a RayJob): `local serve` "
                                   "deploys a serving workload (a RayService)",
                                   f"a serving workload: {listed}; `raytpu submit {name} --local` runs this one")
    raise errors.invalid_choice("workload", name, [w.name for w in serving] or ["(no serving workload)"])


def serving_on_slice(cluster: LocalCluster, work: WorkloadSpec) -> WorkloadSpec:
    """Serving workload ``work`` on ``cluster``'s emulated slice, which must be the slice it runs on."""
    if work.plan != cluster.slice_plan:
        running = cluster.slice_plan
        raise errors.invalid_value("workload", work.name, f"runs on a {work.plan.generation} {work.plan.topology} "
                                   f"slice; the local cluster emulates {running.generation} {running.topology}",
                                   f"`raytpu local down` then `raytpu local up --slice {work.slice.name}`")
    # every field of the config's workload (none dropped; issue 49), on the local slice, as the kit's image runs it
    # (the kit's default serve workload is built only when asked for: it holds the LLM's slice rules, a team's app not)
    return replace(work, slice=cluster.slice_spec, slices=None, image=None)
