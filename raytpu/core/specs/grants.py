"""Which buckets the Ray pods' service account may use, and the ``gs://`` paths of a config that no grant covers.

The identity module grants the kit's bucket (read-write) and each ``storage.data_buckets`` entry, and nothing else, so
a path in any other bucket fails with PERMISSION_DENIED only after the slice is up; ``raytpu validate`` names each
such path first (a warning: a bucket may be granted by hand). Standard library and the kit's core only.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from raytpu.core.common import errors, names

if TYPE_CHECKING:
    from raytpu.core.specs.spec import ClusterSpec

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
