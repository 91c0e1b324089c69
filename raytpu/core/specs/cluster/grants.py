"""Which buckets the Ray pods' service account may use, and the ``gs://`` paths of a config that no grant covers.

The identity module grants the kit's bucket (read-write) and each ``storage.data_buckets`` entry, and nothing else, so
a path in any other bucket fails with PERMISSION_DENIED only after the slice is up; ``raytpu validate`` names each
such path first (a warning: a bucket may be granted by hand). A written path in a bucket listed ``access: read`` is an
error: the job would run to its end, then fail writing. Standard library and the kit's core only.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Protocol

from raytpu.core.common import errors, names
from raytpu.core.specs.cluster.cluster_parts import DataBucket


class Named(Protocol):
    """A part with a name (a cluster, a workload)."""

    @property
    def name(self) -> str: ...


class Storage(Protocol):
    """The storage field the grant rules read."""

    @property
    def data_buckets(self) -> Sequence[DataBucket]: ...


class ClusterSpec(Protocol):
    """The config fields the grant rules read (:class:`raytpu.core.specs.spec.ClusterSpec` has them)."""

    @property
    def project(self) -> str: ...
    @property
    def bucket(self) -> str: ...
    @property
    def cluster(self) -> Named: ...
    @property
    def storage(self) -> Storage: ...
    @property
    def workloads(self) -> Sequence[Named]: ...

READ_PATHS = ("model_source", "input", "dataset")
"""Workload fields the pods read from (a ``gs://`` model source, batch input, training dataset)."""
WRITE_PATHS = ("output",)
"""Workload fields the pods write to (a batch output)."""


def covered_buckets(spec: ClusterSpec) -> dict[str, bool]:
    """Bucket name -> whether the pods may write there: the kit's bucket, then ``storage.data_buckets``."""
    return {spec.bucket: True, **{data.name: data.writes for data in spec.storage.data_buckets}}


def bucket_of(path: object) -> str | None:
    """The bucket of a ``gs://BUCKET/...`` path; None for anything else (a local path, a Hugging Face id)."""
    if not isinstance(path, str) or not path.startswith("gs://"):
        return None
    return path.removeprefix("gs://").partition("/")[0] or None


def uncovered_path(path: object, field: str, covered: Mapping[str, bool], *, write: bool = False,
                   account: str = "the Ray pods' service account") -> str | None:
    """The warning for ``path`` (config field ``field``) when no grant in ``covered`` (:func:`covered_buckets`) lets
    ``account`` read it, or write it with ``write``; None when one does or it is not a ``gs://`` path."""
    bucket = bucket_of(path)
    if bucket is None or covered.get(bucket) is True or (bucket in covered and not write):
        return None
    shown = errors.excerpt(path)
    if bucket in covered:
        return (f"{field}: {shown} is written, but storage.data_buckets grants gs://{bucket} read only, so {account} "
                "gets PERMISSION_DENIED writing there; set access: read-write on that entry")
    return (f"{field}: {shown} is in gs://{bucket}, which no grant covers ({account} may use only the kit's bucket "
            "and storage.data_buckets), so the pods get PERMISSION_DENIED after the slice is up; add "
            f"{{name: {bucket}, access: {'read-write' if write else 'read'}}} to storage.data_buckets")


def read_only_write_problems(workloads: Sequence[Named | None], data_buckets: Sequence[DataBucket]
                             ) -> list[errors.InvalidInput]:
    """Each written path (``output``) in a bucket that ``storage.data_buckets`` lists ``access: read``: an error, as a
    whole batch would run, then fail writing. Source: cloud.google.com/storage/docs/access-control/iam-roles
    (roles/storage.objectViewer has no storage.objects.create)."""
    listed = {data.name: j for j, data in enumerate(data_buckets)}
    found = []
    for i, work in enumerate(workloads):
        for name in WRITE_PATHS:
            bucket = bucket_of(getattr(work, name, None))
            j = listed.get(bucket) if bucket is not None else None
            if j is not None and not data_buckets[j].writes:
                found.append(errors.invalid_value(
                    f"workloads[{i}].{name}", getattr(work, name),
                    f"is written, but storage.data_buckets[{j}] ({bucket}) grants access: read only, so the job "
                    "would run to its end and fail with 403 writing there",
                    f"set access: read-write on storage.data_buckets[{j}], or write to another granted bucket"))
    return found


def path_warnings(spec: ClusterSpec) -> list[str]:
    """Every ``gs://`` path of the config's workloads that no grant covers, one warning each."""
    covered = covered_buckets(spec)
    account = f"{names.service_account_id(spec.cluster.name, 'ray')}@{spec.project}.iam.gserviceaccount.com"
    found = []
    for work in spec.workloads:
        for name in (*READ_PATHS, *WRITE_PATHS):
            line = uncovered_path(getattr(work, name), f"workloads.{work.name}.{name}", covered,
                                  write=name in WRITE_PATHS, account=account)
            if line:
                found.append(line)
    return found


POD_READ_ONLY_FOLDERS = {"raytpu": "the kit's core zip and image build contexts", "code": "the teams' code zips"}
"""Folders of the kit's bucket that only the submitting user's credentials write (``raytpu deploy``, ``raytpu submit``,
``raytpu images build``); the pods only read them (docs/FACTS.md#storage-pod-write-folders)."""
CHECKPOINTS_FOLDER = "checkpoints"
"""Where every run's checkpoints land (:func:`raytpu.core.common.names.run_storage`)."""


def folder_of(bucket: str, path: object) -> str | None:
    """The folder of ``gs://<bucket>/...`` that ``path`` names inside the kit's ``bucket`` (no slashes at its ends),
    ``""`` for the bucket's root; None for any other path."""
    if not isinstance(path, str) or bucket_of(path) != bucket:
        return None
    return path.removeprefix(f"gs://{bucket}").strip("/")


def pod_write_folders(bucket: str, workloads: Sequence[Named], cache_folders: Sequence[str]) -> tuple[str, ...]:
    """The folders of the kit's bucket the pods write: every run's checkpoints, the compile caches
    (``cache_folders``) and each workload's written paths (a batch ``output``) inside ``bucket``; a folder inside
    another listed one is left out. Sorted, without slashes at their ends."""
    found = {CHECKPOINTS_FOLDER, *(f.strip("/") for f in cache_folders)}
    for work in workloads:
        for name in WRITE_PATHS:
            folder = folder_of(bucket, getattr(work, name, None))
            if folder:
                found.add(folder)
    return tuple(sorted(f for f in found if not any(f.startswith(g + "/") for g in found if g != f)))


def _clashes(folder: str, other: str) -> bool:
    return folder == "" or folder == other or folder.startswith(other + "/") or other.startswith(folder + "/")


def kit_folder_write_problems(bucket: str, workloads: Sequence[Named | None]) -> list[errors.InvalidInput]:
    """A written path (``output``) at the kit bucket's root, or that is, holds or sits inside a folder the pods only
    read (:data:`POD_READ_ONLY_FOLDERS`): the pods may not write there (docs/FACTS.md#storage-pod-write-folders)."""
    found = []
    for i, work in enumerate(workloads):
        for name in WRITE_PATHS:
            value = getattr(work, name, None)
            folder = folder_of(bucket, value)
            hit = None if folder is None else next((f for f in POD_READ_ONLY_FOLDERS if _clashes(folder, f)), None)
            if hit is not None:
                where = "is the kit bucket's root" if folder == "" else f"is, holds or sits inside {hit}/"
                found.append(errors.invalid_value(
                    f"workloads[{i}].{name}", value,
                    f"{where}, which holds {POD_READ_ONLY_FOLDERS[hit]}: the pods may only read there",
                    f"a folder of its own, e.g. gs://{bucket}/outputs/{getattr(work, 'name', 'batch')}"))
    return found
