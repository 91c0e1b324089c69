"""The one spec: frozen values every layer reads, compiled once from ``raytpu.yaml`` (attribute paths are config paths).

Each field is declared once, with its default; each spec raises all its problems when built, named by field, and
:class:`ClusterSpec` checks what spans its parts. A spec that exists is valid. Stdlib and the core only.
Details: docs/FACTS.md#spec-build.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

from raytpu.core.common import errors
from raytpu.core.common.errors import InvalidInput
from raytpu.core.specs.cluster import grants
from raytpu.core.specs.cluster.cluster_parts import AlertingSpec, GkeSpec, NetworkSpec, StorageSpec
from raytpu.core.specs.cluster.security import SecuritySpec
from raytpu.core.specs.cluster.teams import TeamSpec, teams_problems
from raytpu.core.specs.field_rules import (
    bucket_problems,
    project_problems,
    raise_all,
    region_problems,
)
from raytpu.core.specs.runtime import compile_cache
from raytpu.core.specs.serving import node_disk
from raytpu.core.specs.slices.provisioning import MODES as PROVISIONING_MODES
from raytpu.core.specs.slices.slice_spec import MULTI_HOST_NAME_LIMIT, SliceSpec, derived_name_problems
from raytpu.core.specs.workload_spec import (
    SERVING_FIELDS,
    WORKLOAD_ENV,
    SecretKeyRef,
    WorkloadSpec,
    gated_model_problems,
    image_problem,
)
from raytpu.core.tpu.plan import SlicePlan

__all__ = ["MULTI_HOST_NAME_LIMIT", "SERVING_FIELDS", "WORKLOAD_ENV", "ClusterSpec", "SecretKeyRef", "SliceSpec",
           "WorkloadSpec", "cluster_problems", "derived_name_problems", "gated_model_problems", "image_problem"]
"""The spec's parts live one per module (slices, workloads, the cluster's parts); this module holds the whole
(:class:`ClusterSpec`) and names every part, so ``from raytpu.core.specs.spec import WorkloadSpec`` keeps working."""


@dataclass(frozen=True, kw_only=True)
class ClusterSpec:
    """One GKE cluster and everything on it: the whole of ``raytpu.yaml``, valid (fields: docs/FACTS.md#spec-fields)."""

    project: str
    region: str
    cluster: GkeSpec
    network: NetworkSpec = NetworkSpec()
    storage: StorageSpec = StorageSpec()
    slices: tuple[SliceSpec, ...]
    workloads: tuple[WorkloadSpec, ...] = ()
    namespace: str = "ray"
    alerting: AlertingSpec | None = None
    security: SecuritySpec = SecuritySpec()
    teams: tuple[TeamSpec, ...] = ()

    @property
    def ksa_name(self) -> str:
        """The pods' Kubernetes service account, ``<cluster>-ray``: one name per cluster, since every cluster of a
        project shares its Workload Identity pool and a namespace/KSA pair names one principal in all of them.
        Source: https://cloud.google.com/kubernetes-engine/fleet-management/docs/best-practices-workload-identity."""
        return f"{self.cluster.name}-ray"

    def __post_init__(self) -> None:
        raise_all(cluster_problems(project=self.project, region=self.region, cluster=self.cluster,
                                storage=self.storage, slices=self.slices, workloads=self.workloads, teams=self.teams))

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

    def team_of(self, work: WorkloadSpec) -> TeamSpec | None:
        """The team ``work`` runs as (its namespace, identity and queue); None without ``teams``."""
        return next((t for t in self.teams if t.name == work.team), None)

    def with_slice(self, item: SliceSpec) -> ClusterSpec:
        """This spec plus one slice (checked like every other: unique name, zone in the region, mode rules)."""
        return replace(self, slices=(*self.slices, item))

    def with_workload(self, work: WorkloadSpec) -> ClusterSpec:
        """This spec plus one workload on one of its slices."""
        return replace(self, workloads=(*self.workloads, work))


def cluster_problems(*, project: object, region: object, cluster: GkeSpec | None, storage: StorageSpec | None,
                     slices: Sequence[SliceSpec | None], workloads: Sequence[WorkloadSpec | None],
                     teams: Sequence[TeamSpec | None] = ()) -> list[InvalidInput]:
    """The rules of :class:`ClusterSpec`, named by config path; a part given as None (it failed its own rules)
    skips the rules that need it, so every other problem is still reported."""
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
    for i, work in enumerate(workloads):
        if cluster is not None and not cluster.autopilot and work is not None and work.ray_disk_gib is not None:
            found.append(errors.forbidden(  # Standard sets no ephemeral-storage limit: nothing to raise
                f"workloads[{i}].ray_disk_gib", work.ray_disk_gib, "with cluster.mode: standard (no per-pod "
                "limit there; Ray's files share the boot disk's allocatable storage)", "leave it out and size the "
                "node with slices[].disk_size_gib, or use cluster.mode: autopilot"))
    if storage is not None:
        found += grants.read_only_write_problems(workloads, storage.data_buckets)
        if storage.bucket is None and project_ok and cluster is not None:
            found += _kit_bucket_problems(f"{project}-{cluster.name}-ray", storage)
    kit_bucket = storage.bucket if storage is not None and storage.bucket else (
        f"{project}-{cluster.name}-ray" if project_ok and cluster is not None else None)
    if kit_bucket is not None:
        found += _cache_clash_problems(kit_bucket, workloads)
        found += grants.kit_folder_write_problems(kit_bucket, workloads)
    if cluster is not None and not cluster.autopilot and None not in workloads:
        bucket = storage.bucket if storage is not None and storage.bucket else (
            f"{project}-{cluster.name}-ray" if project_ok else None)
        known = tuple(w for w in workloads if w is not None)
        for i, item in enumerate(slices):
            if item is not None:
                found += [p.at(f"slices[{i}]") for p in node_disk.disk_problems(item, known, bucket)]
    found += teams_problems(teams, slices, workloads, kit_bucket)
    return found


def _kit_bucket_problems(bucket: str, storage: StorageSpec) -> list[InvalidInput]:
    """A data bucket that is the kit's own (its default name): the grant would turn it read-only for the pods."""
    return [errors.invalid_value(f"storage.data_buckets[{i}].name", data.name, "is the kit's own bucket "
                                 "(<project>-<cluster>-ray), which the pods already read and write", "another bucket")
            for i, data in enumerate(storage.data_buckets) if data.name == bucket]


def _cache_clash_problems(bucket: str, workloads: Sequence[WorkloadSpec | None]) -> list[InvalidInput]:
    """A compile cache folder that is, holds or sits inside a folder of the kit's bucket a workload writes or reads
    (a batch ``output``, a ``dataset``, a ``model_source``): the cache's lifecycle rule would delete it."""
    used = {}
    for j, work in enumerate(workloads):
        for name in ("output", "dataset", "model_source"):
            value = getattr(work, name, None) if work is not None else None
            if isinstance(value, str) and value.startswith(f"gs://{bucket}/"):
                used[value.removeprefix(f"gs://{bucket}/")] = f"workloads[{j}].{name}"
    found = []
    for i, work in enumerate(workloads):
        folder = compile_cache.folder_in_bucket(work.compile_cache) if work is not None else None
        clash = next(((p, f) for p, f in used.items() if folder is not None and compile_cache.overlap(folder, p)),
                     None)
        if clash is not None and work is not None and work.compile_cache is None:  # the default: name theirs
            found.append(errors.invalid_value(clash[1], f"gs://{bucket}/{clash[0]}", f"is in the folder "
                                              f"{folder}/ workloads[{i}] caches compiled programs in, whose objects "
                                              "the bucket deletes 30 days after they are written",
                                              f"a path outside gs://{bucket}/{folder}/, or another bucket"))
        elif clash is not None:
            found.append(errors.invalid_value(f"workloads[{i}].compile_cache", folder, f"is, holds or sits inside "
                                              f"{clash[1]} (gs://{bucket}/{clash[0]}), and the bucket deletes a "
                                              "cache's objects 30 days after they are written",
                                              "a folder of its own, e.g. compile-cache; or off"))
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
