"""Identities: the Google service account Ray pods act as (Workload Identity), the Kubernetes service
account bound to it, and a least-privilege service account for nodes."""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from raytpu.core.common import errors, names
from raytpu.core.common.errors import InvalidInput
from raytpu.core.specs.cluster.cluster_parts import DATA_ACCESS_ROLES, DataBucket
from raytpu.core.specs.field_rules import choice_problems, dns_subdomain_problems
from raytpu.modules.parts import _props
from raytpu.modules.parts.cdk import (
    Construct,
    ITerraformDependable,
    TerraformResourceLifecycle,
    kubernetes_namespace,
    kubernetes_service_account,
    project_iam_member,
    service_account,
    service_account_iam_member,
    storage_bucket_iam_member,
)

ACCOUNT_ID = re.compile(r"^[a-z](?:[a-z0-9-]{4,28})[a-z0-9]$")
BUCKET_ROLES = ("roles/storage.objectUser", "roles/storage.objectViewer", "roles/storage.objectCreator",
                "roles/storage.objectAdmin")
NODE_ROLES = (
    "roles/logging.logWriter",
    "roles/monitoring.metricWriter",
    "roles/monitoring.viewer",
    "roles/stackdriver.resourceMetadata.writer",
    "roles/autoscaling.metricsWriter",
    "roles/artifactregistry.reader",
)
"""What GKE nodes need (GKE hardening guide's minimal node service account) plus pulling images."""
GSA_ANNOTATION = "iam.gke.io/gcp-service-account"
LEGACY_KSA_NAME = "ray"
"""The KSA every kit cluster's pods ran as before the per-cluster name (``ClusterSpec.ksa_name``)."""
BUCKET_METADATA_ROLE = "roles/storage.legacyBucketReader"
"""Granted beside ``bucket_role`` because Ray Train's checkpoint storage (pyarrow's GcsFileSystem) calls
``storage.buckets.get``, which ``roles/storage.objectUser`` lacks; this role adds it (with object listing), nothing
that writes. Source: apache/arrow ``gcsfs.cc`` ``GetBucketMetadata`` (docs/FACTS.md#storage-buckets-get and
docs/FACTS.md#terraform-constructs)."""


def account_id_problems(field_name: str, value: str) -> list[InvalidInput]:
    if ACCOUNT_ID.match(value):
        return []
    return [errors.invalid_value(field_name, value, "is not a service account id",
                                 "6-30 characters: lowercase letters, digits, hyphens; starts with a letter")]


def ksa_name_problems(field_name: str, value: str) -> list[InvalidInput]:
    """A Kubernetes ServiceAccount's name (or a token). Source: k8s.io/apimachinery pkg/api/validation
    ``ValidateServiceAccountName`` (a DNS-1123 subdomain)."""
    return [] if _props.is_token(value) else dns_subdomain_problems(field_name, value,
                                                                    "a Kubernetes ServiceAccount name")


@dataclass(frozen=True, kw_only=True)
class WorkloadIdentityProps:
    """Props of :class:`WorkloadIdentity`: the Google account (``<account_id>@<project>.iam.gserviceaccount.com``), the
    KSA it serves (``namespace/ksa_name``), its bucket and role (default object user: no bucket administration), other
    ``data_buckets`` each granted on that bucket only, display name, and ``overrides`` of ``google_service_account``."""

    project: str
    account_id: str
    namespace: str
    ksa_name: str
    bucket: str
    bucket_role: str = "roles/storage.objectUser"
    data_buckets: tuple[DataBucket, ...] = ()
    display_name: str = "raytpu Ray workloads"
    overrides: Mapping[str, Any] = field(default_factory=dict)
    write_folders: tuple[str, ...] | None = None
    """Folders of ``bucket`` the pods write (:func:`raytpu.core.specs.cluster.grants.pod_write_folders`):
    ``bucket_role`` is then granted on those folders' objects only (IAM Conditions), and ``roles/storage.objectViewer``
    on the whole bucket; None grants ``bucket_role`` on the whole bucket (docs/FACTS.md#storage-pod-write-folders)."""
    write_excluded: tuple[str, ...] = ()
    """Folders inside ``write_folders`` these pods may not write (the teams' own, for the kit's pods)."""
    read_folders: tuple[str, ...] | None = None
    """With ``write_folders``, the other folders the pods read (a team's: the core zip, its code zips): the
    ``roles/storage.objectViewer`` grant is then on those folders' objects only, not the whole bucket, so one team
    reads no other team's objects (docs/FACTS.md#kueue-team-identity). None keeps the whole-bucket read."""
    legacy_ksa: str | None = None
    """``cluster.legacy_ksa`` (:data:`raytpu.core.specs.cluster.cluster_parts.LEGACY_KSA`): ``keep`` also binds
    ``namespace/ray`` at the binding's earlier address, ``drop`` leaves it out; either moves ``ksa_name``'s binding
    to ``workload-identity-user-cluster``, so neither step replaces a binding in place."""

    def __post_init__(self) -> None:
        errors.raise_found([
            *(choice_problems("legacy_ksa", self.legacy_ksa, ("keep", "drop")) if self.legacy_ksa is not None else []),
            *account_id_problems("account_id", self.account_id),
            *_props.resource_name_problems("namespace", self.namespace),
            *ksa_name_problems("ksa_name", self.ksa_name),
            *choice_problems("bucket_role", self.bucket_role, BUCKET_ROLES),
            *(p for f in self.write_folders or () for p in folder_problems("write_folders", f)),
            *(p for f in self.read_folders or () for p in folder_problems("read_folders", f)),
            *(p for f in self.write_excluded for p in folder_problems("write_excluded", f)),
            *([errors.forbidden("read_folders", "set", "without write_folders (the pods would write the whole "
                                "bucket)", "write_folders too, or leave read_folders out")]
              if self.read_folders is not None and self.write_folders is None else []),
            *_props.override_problems("overrides", self.overrides)])

    @property
    def member(self) -> str:
        """The Workload Identity principal of the KSA."""
        return self.member_of(self.ksa_name)

    def member_of(self, ksa_name: str) -> str:
        """The Workload Identity principal of KSA ``ksa_name`` in the namespace."""
        return f"serviceAccount:{self.project}.svc.id.goog[{self.namespace}/{ksa_name}]"


def folder_problems(field_name: str, value: object) -> list[InvalidInput]:
    """A folder of the bucket: not empty, no slash at its ends, no ``"``, ``\\``, ``..``, CR or LF (it is quoted into
    a condition's CEL string)."""
    if isinstance(value, str) and value and value == value.strip("/") and not set(value) & set('"\\\r\n') \
            and ".." not in value.split("/"):
        return []
    return [errors.invalid_value(field_name, value, "is not a folder of the bucket",
                                 "a path like checkpoints or teams/ml/jax-cache, without slashes at its ends")]


def object_name(bucket: str, name: str) -> str:
    """An object's ``resource.name`` in an IAM condition. Source: https://cloud.google.com/iam/docs/
    conditions-resource-attributes (Cloud Storage objects: ``projects/_/buckets/BUCKET/objects/OBJECT``)."""
    return f"projects/_/buckets/{bucket}/objects/{name}"


def write_condition(bucket: str, folder: str, excluded: Sequence[str] = ()) -> str:
    """The CEL expression that holds for the objects under ``folder/``, and for the folder markers of ``folder`` and
    each folder above it (GCS FUSE with implicit-dirs and pyarrow's GcsFileSystem create ``a/``, ``a/b/`` when they make
    a folder's parents), but for none under an ``excluded`` folder inside it (a team's, in the kit's own folders).
    Source: https://cloud.google.com/storage/docs/access-control/iam#conditions."""
    parts = folder.split("/")
    markers = [object_name(bucket, "/".join(parts[:i]) + "/") for i in range(1, len(parts))]
    terms = [f'resource.name.startsWith("{object_name(bucket, folder + "/")}")',
             *(f'resource.name == "{m}"' for m in markers)]
    inside = [e for e in excluded if e.startswith(folder + "/")]
    if not inside:
        return " || ".join(terms)
    return f"({' || '.join(terms)})" + "".join(
        f' && !resource.name.startsWith("{object_name(bucket, e + "/")}")' for e in inside)


def lookup_condition(bucket: str, folders: Sequence[str]) -> str:
    """The CEL expression that holds for the names GCS FUSE looks up on the way to ``folders`` without a trailing
    slash (``a``, ``a/b`` for ``a/b``): it asks for the file and the folder of a name at once, and a 403 on either is an
    error, not "no such file". Source: GoogleCloudPlatform/gcsfuse internal/fs/inode/dir.go ``LookUpChild``."""
    names = dict.fromkeys("/".join(f.split("/")[:i]) for f in folders for i in range(1, len(f.split("/")) + 1))
    return " || ".join(f'resource.name == "{object_name(bucket, name)}"' for name in names)


def write_id(folder: str, verb: str = "write") -> str:
    """The id of the write (or ``read``) grant on ``folder``: readable, and a short hash keeps two folders that read
    alike apart."""
    readable = re.sub(r"[^a-z0-9]+", "-", folder.lower()).strip("-")[:40]
    return f"bucket-{verb}-{readable}-{hashlib.sha256(folder.encode()).hexdigest()[:6]}"


class WorkloadIdentity(Construct):
    """A Google service account that the KSA ``namespace/ksa_name`` may impersonate, with access to its buckets and
    nothing else. Create it with :meth:`GkeCluster.add_workload_identity`: the binding waits for the identity pool.

    Resource ids: ``gsa``, ``workload-identity-user`` (with ``legacy_ksa``: ``workload-identity-user-cluster``, and
    ``workload-identity-user`` binding ``namespace/ray`` while ``keep``), ``bucket-access`` (objects: ``bucket_role``;
    with ``write_folders`` ``roles/storage.objectViewer``, and ``bucket-write-<folder>-<hash>`` per folder; with
    ``read_folders`` ``bucket-read-<folder>-<hash>`` per folder instead of ``bucket-access``),
    ``bucket-metadata``
    (:data:`BUCKET_METADATA_ROLE`), ``data-<bucket>-<role>`` per data bucket and role (dots as ``-``)."""

    def __init__(self, scope: Construct, id: str, props: WorkloadIdentityProps, *,
                 after: Sequence[ITerraformDependable] = ()) -> None:
        super().__init__(scope, id)
        self.props = props
        self.gsa = service_account.ServiceAccount(
            self, "gsa", account_id=props.account_id, project=props.project, display_name=props.display_name)
        # An upgrade from the shared `ray` KSA moves no principal between addresses: a replaced iam_member removes its
        # member while another address adds it, in no set order (docs/FACTS.md#networking-legacy-ksa).
        self.binding = service_account_iam_member.ServiceAccountIamMember(
            self, "workload-identity-user" if props.legacy_ksa is None else "workload-identity-user-cluster",
            service_account_id=self.gsa.name,
            role="roles/iam.workloadIdentityUser",
            member=props.member,
            depends_on=list(after) or None,
        )
        member = service_account_iam_member.ServiceAccountIamMember
        self.legacy_binding = None if props.legacy_ksa != "keep" else member(
            self, "workload-identity-user",
            service_account_id=self.gsa.name,
            role="roles/iam.workloadIdentityUser",
            member=props.member_of(LEGACY_KSA_NAME),
            depends_on=list(after) or None,
        )
        iam = storage_bucket_iam_member
        self.bucket_writes = [iam.StorageBucketIamMember(
            self, write_id(folder), bucket=props.bucket, role=props.bucket_role,
            member=f"serviceAccount:{self.gsa.email}",
            condition=iam.StorageBucketIamMemberCondition(
                title=f"raytpu pods write {folder}/"[:100],
                expression=write_condition(props.bucket, folder, props.write_excluded)),
        ) for folder in props.write_folders or ()]
        # read_folders: read those folders only (their objects and the markers above them), no whole-bucket grant
        self.bucket_reads = [iam.StorageBucketIamMember(
            self, write_id(folder, "read"), bucket=props.bucket, role="roles/storage.objectViewer",
            member=f"serviceAccount:{self.gsa.email}",
            condition=iam.StorageBucketIamMemberCondition(
                title=f"raytpu pods read {folder}/"[:100], expression=write_condition(props.bucket, folder)),
        ) for folder in props.read_folders or ()]
        if props.read_folders is not None:  # and the names GCS FUSE looks up on the way there (none is written)
            self.bucket_reads.append(iam.StorageBucketIamMember(
                self, "bucket-read-lookups", bucket=props.bucket, role="roles/storage.objectViewer",
                member=f"serviceAccount:{self.gsa.email}",
                condition=iam.StorageBucketIamMemberCondition(
                    title="raytpu pods look up their folders' names", expression=lookup_condition(
                        props.bucket, (*props.read_folders, *(props.write_folders or ()))))))
        # Scoped: read everything, write the folders above. The address keeps its name: an unscoped stack's
        # objectUser grant there is replaced (role is ForceNew) by this one, created first and after the writes, so a
        # running pod keeps reading and writing its folders throughout (docs/FACTS.md#storage-pod-write-folders).
        self.bucket_access = None if props.read_folders is not None else iam.StorageBucketIamMember(
            self, "bucket-access", bucket=props.bucket,
            role=props.bucket_role if props.write_folders is None else "roles/storage.objectViewer",
            member=f"serviceAccount:{self.gsa.email}",
            depends_on=list(self.bucket_writes) or None,
            lifecycle=TerraformResourceLifecycle(create_before_destroy=True) if props.write_folders is not None
            else None,
        )
        self.bucket_metadata = storage_bucket_iam_member.StorageBucketIamMember(
            self, "bucket-metadata", bucket=props.bucket, role=BUCKET_METADATA_ROLE,
            member=f"serviceAccount:{self.gsa.email}",
        )
        self.data_access = [
            storage_bucket_iam_member.StorageBucketIamMember(
                self, f"data-{data.name.replace('.', '-')}-{role.rsplit('.', 1)[1]}", bucket=data.name, role=role,
                member=f"serviceAccount:{self.gsa.email}")
            for data in props.data_buckets for role in DATA_ACCESS_ROLES[data.access]]
        _props.apply_overrides(self.gsa, props.overrides)

    @property
    def email(self) -> str:
        """The Google service account's email (a token)."""
        return self.gsa.email


@dataclass(frozen=True, kw_only=True)
class NodeServiceAccountProps:
    """Props of :class:`NodeServiceAccount`: project, account id, project roles (default :data:`NODE_ROLES`: logs,
    metrics, image pulls) and display name."""

    project: str
    account_id: str
    roles: tuple[str, ...] = NODE_ROLES
    display_name: str = "raytpu GKE nodes"

    def __post_init__(self) -> None:
        errors.raise_found([
            *account_id_problems("account_id", self.account_id),
            *(errors.invalid_value("roles", role, "is not a least-privilege predefined role",
                                   "roles/... other than owner and editor")
              for role in self.roles if not role.startswith("roles/") or role in ("roles/owner", "roles/editor"))])


class NodeServiceAccount(Construct):
    """A least-privilege service account for GKE nodes (instead of the Compute Engine default one).

    Resource ids: ``sa``, ``role-<role without roles/ and dots>``."""

    def __init__(self, scope: Construct, id: str, props: NodeServiceAccountProps) -> None:
        super().__init__(scope, id)
        self.props = props
        self.sa = service_account.ServiceAccount(
            self, "sa", account_id=props.account_id, project=props.project, display_name=props.display_name)
        for role in props.roles:
            project_iam_member.ProjectIamMember(
                self, "role-" + role.removeprefix("roles/").replace(".", "-"),
                project=props.project, role=role, member=f"serviceAccount:{self.sa.email}")

    @property
    def email(self) -> str:
        """The service account's email (a token)."""
        return self.sa.email


@dataclass(frozen=True, kw_only=True)
class KubernetesServiceAccountProps:
    """Props of :class:`KubernetesServiceAccount`: name, namespace, the Google service account it acts as (annotation
    ``iam.gke.io/gcp-service-account``), and whether pods get an API token (not by default: Ray pods do not call it)."""

    name: str
    gsa_email: str
    namespace: str = "default"
    automount_token: bool = False

    def __post_init__(self) -> None:
        errors.raise_found([*ksa_name_problems("name", self.name),
                            *_props.resource_name_problems("namespace", self.namespace)])


class KubernetesServiceAccount(Construct):
    """The Kubernetes half of Workload Identity. Resource id: ``ksa`` (``kubernetes_service_account_v1``)."""

    def __init__(self, scope: Construct, id: str, props: KubernetesServiceAccountProps) -> None:
        super().__init__(scope, id)
        self.props = props
        ksa = kubernetes_service_account
        self.ksa = ksa.ServiceAccountV1(
            self, "ksa",
            metadata=ksa.ServiceAccountV1Metadata(
                name=props.name, namespace=props.namespace,
                annotations={GSA_ANNOTATION: props.gsa_email},
                labels=dict(names.MANAGED_BY),
            ),
            automount_service_account_token=props.automount_token,
        )

    @property
    def name(self) -> str:
        """The KSA's name (a token, so users of it depend on it)."""
        return self.ksa.metadata.name


@dataclass(frozen=True, kw_only=True)
class KubernetesNamespaceProps:
    """Props of :class:`KubernetesNamespace`: its name and labels (``app.kubernetes.io/managed-by: raytpu`` added)."""

    name: str
    labels: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        found = _props.resource_name_problems("name", self.name)
        if self.name in ("default", "kube-system", "kube-public"):
            found.append(errors.forbidden("name", self.name, "(a namespace Kubernetes creates itself)",
                                          "a namespace of your own, such as ray"))
        errors.raise_found(found)


class KubernetesNamespace(Construct):
    """A namespace for Ray objects. Resource id: ``namespace`` (``kubernetes_namespace_v1``)."""

    def __init__(self, scope: Construct, id: str, props: KubernetesNamespaceProps) -> None:
        super().__init__(scope, id)
        self.props = props
        self.namespace = kubernetes_namespace.NamespaceV1(
            self, "namespace",
            metadata=[kubernetes_namespace.NamespaceV1Metadata(
                name=props.name, labels={**names.MANAGED_BY, **props.labels})],
        )

    @property
    def name(self) -> str:
        """The namespace's name (a token, so objects in it wait for it)."""
        return self.namespace.metadata.get(0).name
