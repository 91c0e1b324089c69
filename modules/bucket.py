"""Bucket: a private GCS bucket for checkpoints, compile caches and Ray logs."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from raytpu import errors
from raytpu.modules import _props
from raytpu.modules.cdk import Construct, storage_bucket

BUCKET_NAME_RULE = "3-63 characters: lowercase letters, digits, '-', '_', '.'; starts and ends with a letter or digit"


@dataclass(frozen=True, kw_only=True)
class BucketProps:
    """Props of :class:`Bucket`.

    Attributes:
        name: Globally unique bucket name.
        project: GCP project id.
        location: Bucket location; pick the slices' region so checkpoints stay near TPUs.
        versioning: Keep noncurrent object versions; default true (a bad checkpoint write can be undone).
        noncurrent_version_retention_days: Delete noncurrent versions after this many days; default 30.
        soft_delete_retention_s: Soft-delete window for deleted objects; default 604800 (7 days).
        force_destroy: Let ``terraform destroy`` delete a non-empty bucket; default false.
        labels: Resource labels; ``managed-by: raytpu`` is always added.
        overrides: Escape hatch: raw fields of ``google_storage_bucket`` by path.
    """

    name: str
    project: str
    location: str
    versioning: bool = True
    noncurrent_version_retention_days: int = 30
    soft_delete_retention_s: int = 7 * 24 * 3600
    force_destroy: bool = False
    labels: Mapping[str, str] = field(default_factory=dict)
    overrides: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        name = self.name
        if not _props.is_token(name) and not (
            isinstance(name, str) and 3 <= len(name) <= 63 and name[0].isalnum() and name[-1].isalnum()
            and all(c.islower() or c.isdigit() or c in "-_." for c in name)
        ):
            raise errors.invalid_value("name", name, "is not a bucket name", BUCKET_NAME_RULE)
        _props.check_range("noncurrent_version_retention_days", self.noncurrent_version_retention_days, 1, 3650,
                           " days")
        if self.soft_delete_retention_s != 0:
            _props.check_range("soft_delete_retention_s", self.soft_delete_retention_s, 7 * 24 * 3600,
                               90 * 24 * 3600, " seconds (or 0 to disable)")
        _props.check_labels("labels", self.labels)
        _props.check_overrides("overrides", self.overrides)


class Bucket(Construct):
    """A bucket with uniform bucket-level access, public access prevention enforced and versioning.

    Resource id: ``bucket``.
    """

    def __init__(self, scope: Construct, id: str, props: BucketProps) -> None:
        super().__init__(scope, id)
        self.props = props
        sb = storage_bucket
        self.bucket = sb.StorageBucket(
            self, "bucket",
            name=props.name,
            project=props.project,
            location=props.location.upper(),
            uniform_bucket_level_access=True,
            public_access_prevention="enforced",
            versioning=sb.StorageBucketVersioning(enabled=props.versioning),
            soft_delete_policy=sb.StorageBucketSoftDeletePolicy(retention_duration_seconds=props.soft_delete_retention_s),
            lifecycle_rule=[sb.StorageBucketLifecycleRule(
                action=sb.StorageBucketLifecycleRuleAction(type="Delete"),
                condition=sb.StorageBucketLifecycleRuleCondition(
                    days_since_noncurrent_time=props.noncurrent_version_retention_days, with_state="ARCHIVED"),
            )] if props.versioning else None,
            force_destroy=props.force_destroy,
            labels=_props.with_default_labels(props.labels),
        )
        _props.apply_overrides(self.bucket, props.overrides)

    @property
    def name(self) -> str:
        """The bucket's name (a token)."""
        return self.bucket.name
