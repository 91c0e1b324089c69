"""ImageRegistry: the Artifact Registry repository the kit's images are built into, the service account Cloud Build
runs those builds as, and who may pull from it and push to it."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from raytpu.core.common import errors
from raytpu.core.specs.field_rules import label_problems, region_problems
from raytpu.modules.parts import _props
from raytpu.modules.parts.cdk import (
    Construct,
    artifact_registry_repository,
    artifact_registry_repository_iam_member,
    service_account,
    storage_bucket_iam_member,
)
from raytpu.modules.workload_identity import account_id_problems

PULL_ROLE = "roles/artifactregistry.reader"
PUSH_ROLE = "roles/artifactregistry.writer"
"""Pull, and push images to an existing repository
(https://cloud.google.com/artifact-registry/docs/access-control#roles)."""
BUILDER_BUCKET_ROLE = "roles/storage.objectUser"
"""The builder reads its build context from the bucket and writes (and, streaming, rewrites) its log there
(``logsBucket``): objectViewer + objectCreator could not replace the growing log object."""


@dataclass(frozen=True, kw_only=True)
class ImageRegistryProps:
    """Props of :class:`ImageRegistry`: project, region (the cluster's), repository id (lowercase letters, digits and
    hyphens, starting with a letter, at most 63), the Cloud Build account's id, ``pullers`` (emails; tokens are fine),
    the build bucket, labels and ``overrides`` of ``google_artifact_registry_repository`` (``kms_key_name``)."""

    project: str
    location: str
    repository_id: str
    builder_account_id: str
    pullers: tuple[str, ...]
    bucket: str
    labels: Mapping[str, str] = field(default_factory=dict)
    overrides: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        # repository ids: lowercase letters, digits, hyphens, a letter first, at most 63
        # (https://cloud.google.com/artifact-registry/docs/repositories/create-repos)
        errors.raise_found([*_props.resource_name_problems("repository_id", self.repository_id),
                            *account_id_problems("builder_account_id", self.builder_account_id),
                            *region_problems("location", self.location),
                            *label_problems("labels", self.labels),
                            *_props.override_problems("overrides", self.overrides)])


class ImageRegistry(Construct):
    """A Docker-format repository with immutable tags, a builder service account that may push to it and use the bucket,
    and pull access for ``pullers``. Source: googleapis ``DockerRepositoryConfig.immutable_tags``
    (docs/FACTS.md#terraform-modules).

    Resource ids: ``repository``, ``builder``, ``builder-push``, ``builder-bucket``, ``pull-<i>``."""

    def __init__(self, scope: Construct, id: str, props: ImageRegistryProps) -> None:
        super().__init__(scope, id)
        self.props = props
        ar = artifact_registry_repository
        self.repository = ar.ArtifactRegistryRepository(
            self, "repository", project=props.project, location=props.location, repository_id=props.repository_id,
            format="DOCKER", description="raytpu: the kit's Ray/JAX/vLLM images, built by `raytpu images build`",
            docker_config=ar.ArtifactRegistryRepositoryDockerConfig(immutable_tags=True),
            labels=_props.with_default_labels(props.labels))
        _props.apply_overrides(self.repository, props.overrides)
        self.builder = service_account.ServiceAccount(
            self, "builder", project=props.project, account_id=props.builder_account_id,
            display_name="raytpu image builds (Cloud Build)")
        member = f"serviceAccount:{self.builder.email}"
        iam = artifact_registry_repository_iam_member.ArtifactRegistryRepositoryIamMember
        self.push = iam(self, "builder-push", project=props.project, location=props.location,
                        repository=self.repository.name, role=PUSH_ROLE, member=member)
        self.builder_bucket = storage_bucket_iam_member.StorageBucketIamMember(
            self, "builder-bucket", bucket=props.bucket, role=BUILDER_BUCKET_ROLE, member=member)
        self.pulls = [iam(self, f"pull-{i}", project=props.project, location=props.location,
                          repository=self.repository.name, role=PULL_ROLE, member=f"serviceAccount:{email}")
                      for i, email in enumerate(props.pullers)]

    @property
    def path(self) -> str:
        """``REGION-docker.pkg.dev/PROJECT/REPO`` (a token): images are ``<path>/<image>``."""
        return self.repository.registry_uri

    @property
    def builder_email(self) -> str:
        """The builder service account's email (a token)."""
        return self.builder.email
