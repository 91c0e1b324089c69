"""Bucket: a private GCS bucket for checkpoints, compile caches and Ray logs; BucketObject: a local file
uploaded into it (the kit's core zip)."""

from __future__ import annotations

import base64
import hashlib
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from raytpu.core.common import errors
from raytpu.core.specs.field_rules import bucket_problems, label_problems, range_problems
from raytpu.modules.parts import _props
from raytpu.modules.parts.cdk import AssetType, Construct, TerraformAsset, storage_bucket, storage_bucket_object


@dataclass(frozen=True, kw_only=True)
class BucketProps:
    """Props of :class:`Bucket`: a globally unique name, project, location (the slices' region, so checkpoints stay near
    the TPUs), versioning and retention (on by default: a bad checkpoint write can be undone), ``force_destroy``,
    labels (``managed-by: raytpu`` always added) and ``overrides`` of ``google_storage_bucket``.
    Public API: ``from raytpu import BucketProps``."""

    name: str
    project: str
    location: str
    versioning: bool = True
    noncurrent_version_retention_days: int = 30
    cache_prefixes: tuple[str, ...] = ()
    """Folders of compile caches: their objects are deleted ``cache_retention_days`` after they were written (JAX's
    cache never evicts: its guide asks for an age rule). Source: jax-v0.10.2 docs/persistent_compilation_cache.md."""
    cache_retention_days: int = 30
    checkpoint_prefixes: tuple[str, ...] = ()
    """Folders of checkpoints: a version replaced or deleted there (Ray Train deletes the checkpoints past a run's
    ``keep_checkpoints``) is deleted ``checkpoint_noncurrent_days`` after, not ``noncurrent_version_retention_days``:
    a deleted checkpoint stays billed while its noncurrent version lasts.
    Source: https://cloud.google.com/storage/docs/lifecycle#dayssincenoncurrenttime"""
    checkpoint_noncurrent_days: int = 1
    soft_delete_retention_s: int = 7 * 24 * 3600
    force_destroy: bool = False
    labels: Mapping[str, str] = field(default_factory=dict)
    overrides: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        found = [] if _props.is_token(self.name) else bucket_problems("name", self.name)
        found += range_problems("noncurrent_version_retention_days", self.noncurrent_version_retention_days, 1,
                                3650, " days")
        found += range_problems("cache_retention_days", self.cache_retention_days, 1, 3650, " days")
        found += range_problems("checkpoint_noncurrent_days", self.checkpoint_noncurrent_days, 1, 3650, " days")
        if self.soft_delete_retention_s != 0:
            found += range_problems("soft_delete_retention_s", self.soft_delete_retention_s, 7 * 24 * 3600,
                                    90 * 24 * 3600, " seconds (or 0 to disable)")
        found += label_problems("labels", self.labels)
        found += _props.override_problems("overrides", self.overrides)
        errors.raise_found(found)


OBJECT_NAME_RULE = "1-1024 bytes of UTF-8, no carriage return or line feed, not '.' or '..'"


@dataclass(frozen=True, kw_only=True)
class BucketObjectProps:
    """Props of :class:`BucketObject`: the object's name (e.g. ``raytpu/raytpu-0.1.0.zip``), the local file (read when
    the construct is created, so it must exist), its ``Content-Type``, the bucket (set by :meth:`Bucket.add_object`),
    ``keep_replaced`` (an object replaced by a new name or content stays in the bucket for what still reads it) and
    ``overrides`` of ``google_storage_bucket_object``."""

    name: str
    source: str
    content_type: str | None = None
    bucket: str | None = None
    keep_replaced: bool = False
    overrides: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        found = []
        name = self.name
        if not _props.is_token(name) and not (
            isinstance(name, str) and 1 <= len(name.encode()) <= 1024 and name not in (".", "..")
            and "\r" not in name and "\n" not in name
        ):
            found.append(errors.invalid_value("name", name, "is not a GCS object name", OBJECT_NAME_RULE))
        if not isinstance(self.source, str) or not Path(self.source).is_file():
            found.append(errors.invalid_value("source", self.source, "is not a file",
                                              "the path of an existing local file"))
        found += _props.override_problems("overrides", self.overrides)
        errors.raise_found(found)


class BucketObject(Construct):
    """A local file uploaded as an object, through a Terraform asset in the synth output so the stack directory is
    self-contained; a changed file re-uploads, an unchanged one leaves the plan empty (docs/FACTS.md#terraform-modules).

    Resource ids: ``asset`` (the TerraformAsset), ``object``."""

    def __init__(self, scope: Construct, id: str, props: BucketObjectProps) -> None:
        super().__init__(scope, id)
        if props.bucket is None:
            raise errors.missing("bucket", "to create a BucketObject directly",
                                 "set it, or create the object with Bucket.add_object")
        self.props = props
        source = Path(props.source).resolve()
        data = source.read_bytes()
        self.md5_hash = base64.b64encode(hashlib.md5(data, usedforsecurity=False).digest()).decode()
        """Base64 MD5 of the file, as GCS reports an object's ``md5Hash``."""
        self.asset = TerraformAsset(self, "asset", path=str(source), type=AssetType.FILE,
                                    asset_hash=hashlib.sha256(data).hexdigest()[:32])
        self.object = storage_bucket_object.StorageBucketObject(
            self, "object",
            bucket=props.bucket,
            name=props.name,
            source=self.asset.path,
            source_md5_hash=self.md5_hash,
            content_type=props.content_type,
            # Source: google provider 8.7.0 storage_bucket_object deletion_policy ("ABANDON": removed from state,
            # not deleted); a new name is a replacement (ForceNew), and running pods still import the old object
            deletion_policy="ABANDON" if props.keep_replaced else None,
        )
        _props.apply_overrides(self.object, props.overrides)

    @property
    def name(self) -> str:
        """The object's name (a token)."""
        return self.object.name


def _lifecycle_rules(props: BucketProps) -> list[Any]:
    """Old versions deleted after their retention, those under the checkpoint folders after
    ``checkpoint_noncurrent_days``; compile caches' objects after ``cache_retention_days``. Cloud Storage deletes a
    version any rule matches, so the shorter rule wins under its prefixes and the others keep their 30 days.
    Source: https://cloud.google.com/storage/docs/lifecycle#dayssincenoncurrenttime (``daysSinceNoncurrentTime``,
    ``matchesPrefix``); google provider 8.7.0 ``storage_bucket`` ``lifecycle_rule.condition``."""
    sb = storage_bucket
    rules = [sb.StorageBucketLifecycleRule(
        action=sb.StorageBucketLifecycleRuleAction(type="Delete"),
        condition=sb.StorageBucketLifecycleRuleCondition(
            days_since_noncurrent_time=props.noncurrent_version_retention_days, with_state="ARCHIVED"),
    )] if props.versioning else []
    if props.versioning and props.checkpoint_prefixes:
        rules.append(sb.StorageBucketLifecycleRule(
            action=sb.StorageBucketLifecycleRuleAction(type="Delete"),
            condition=sb.StorageBucketLifecycleRuleCondition(
                days_since_noncurrent_time=props.checkpoint_noncurrent_days,
                matches_prefix=sorted(props.checkpoint_prefixes), with_state="ARCHIVED")))
    if props.cache_prefixes:
        rules.append(sb.StorageBucketLifecycleRule(
            action=sb.StorageBucketLifecycleRuleAction(type="Delete"),
            condition=sb.StorageBucketLifecycleRuleCondition(
                age=props.cache_retention_days, matches_prefix=sorted(props.cache_prefixes), with_state="LIVE")))
    return rules


class Bucket(Construct):
    """A bucket with uniform bucket-level access, public access prevention enforced and versioning.

    Resource id: ``bucket``. Children: :meth:`add_object`. Public API: ``from raytpu import Bucket``."""

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
            lifecycle_rule=_lifecycle_rules(props) or None,
            force_destroy=props.force_destroy,
            labels=_props.with_default_labels(props.labels),
        )
        _props.apply_overrides(self.bucket, props.overrides)

    @property
    def name(self) -> str:
        """The bucket's name (a token)."""
        return self.bucket.name

    def add_object(self, id: str, props: BucketObjectProps) -> BucketObject:
        """Uploads a local file into this bucket and returns it (``bucket`` of ``props`` is set to this one)."""
        return BucketObject(self, id, replace(props, bucket=self.bucket.name))
