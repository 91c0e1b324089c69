"""Every name one layer writes and another reads: labels, object names, URIs, the Ray auth mode.

Builders, constructs, ``validate`` and readers all take them from here, so a rule is written once
(docs/FACTS.md#spec-common). Standard library only (it ships to the pods).
"""

from __future__ import annotations

import functools
import hashlib
import time

from raytpu import __version__

# --------------------------------------------------------------------------------------------- labels

MANAGED_BY = {"app.kubernetes.io/managed-by": "raytpu"}
"""The Kubernetes label of every object the kit makes."""
SLICE_LABEL = "raytpu.dev/slice"
"""Label of every object the builders make, and of the nodes of a slice's pools: the config slice it runs on."""
WORKLOAD_LABEL = "raytpu.dev/workload"
"""Label of every object the builders make: its workload kind (smoke, train, serve)."""
CLUSTER_LABEL = "raytpu.dev/ray-cluster"
"""Label of every pod of one KubeRay object (:func:`cluster_label`), which its NetworkPolicy selects."""
_KIND_PREFIX = {"RayJob": "job", "RayService": "service", "RayCluster": "cluster"}
NODE_POOL_LABEL = "cloud.google.com/gke-nodepool"
"""The label GKE puts on every node: its node pool's name.
Source: https://cloud.google.com/kubernetes-engine/docs/how-to/node-pools ("Deploy Pods to specific node pools")."""
PLACEMENT_POLICY_LABEL = "cloud.google.com/placement-policy-name"
"""The node label of an Autopilot workload policy (:func:`workload_policy_name`)."""
COMPUTE_CLASS_LABEL = "cloud.google.com/compute-class"
"""The node label of an Autopilot ComputeClass (:func:`compute_class_name`)."""


def cluster_label(kind: str, name: str) -> str:
    """The :data:`CLUSTER_LABEL` value and NetworkPolicy name of ``kind``/``name``, at most 63 characters."""
    return f"{_KIND_PREFIX[kind]}-{name}"


def object_of_cluster_label(value: str) -> str:
    """The object name a :data:`CLUSTER_LABEL` value names ("" for any other value)."""
    prefix, _, name = value.partition("-")
    return name if prefix in _KIND_PREFIX.values() and name else ""


# --------------------------------------------------------------------------------------------- objects

AUTH_MODE = "token"
"""Ray's token authentication on every cluster: without it anyone who reaches the dashboard runs code
(docs/FACTS.md#spec-common).
Source: KubeRay 1.6+ ``authOptions``, ``IsAuthEnabled`` (docs/FACTS.md#networking-ray-pods)."""


def workload_policy_name(cluster_name: str, slice_name: str) -> str:
    """An Autopilot tpu7x slice's HIGH_THROUGHPUT workload policy: regional, so it holds the cluster name, hashed."""
    digest = hashlib.sha256(cluster_name.encode()).hexdigest()[:6]
    return f"{slice_name}-wp-{digest}"


def compute_class_name(slice_name: str) -> str:
    """The Autopilot ComputeClass the kit creates for slice ``slice_name`` (``raytpu-<slice>``)."""
    return f"raytpu-{slice_name}"


def serve_service(name: str) -> str:
    """The Service of RayService ``name``'s OpenAI endpoint (``<name>-serve-svc``).
    Source: KubeRay v1.7.0 ``ray-operator/controllers/ray/utils/util.go``."""
    return f"{name}-serve-svc"


# --------------------------------------------------------------------------------------------- bucket paths

GCS_MOUNT_PATH = "/mnt/gcs"
"""Where every Ray pod sees the kit's bucket through GCS FUSE."""


@functools.cache
def core_zip_digest() -> str:
    """The first 16 hex digits of the SHA-256 of this kit's core zip (:func:`raytpu.core.core_zip.core_zip_bytes`: the
    same bytes on every machine from the same sources)."""
    from raytpu.core.core_zip import core_zip_bytes

    return hashlib.sha256(core_zip_bytes()).hexdigest()[:16]


def core_zip_object(version: str = __version__, digest: str | None = None) -> str:
    """The object name of the kit's core zip in the bucket, named by its content: ``raytpu/raytpu-<version>-<sha256
    16>.zip``. A job imports exactly the code it was built against: a zip another writer put under a version's name
    is not the one jobs name (issue 49 item 5; docs/FACTS.md#storage-bucket-writers)."""
    return f"raytpu/raytpu-{version}-{digest or core_zip_digest()}.zip"


def core_zip_uri(bucket: str, version: str = __version__) -> str:
    """Where the kit's core zip is uploaded: ``gs://<bucket>/`` + :func:`core_zip_object`."""
    return f"gs://{bucket}/{core_zip_object(version)}"


def py_modules_uri(version: str = __version__, mount_path: str = GCS_MOUNT_PATH) -> str:
    """How jobs reach that zip: ``file:///mnt/gcs/`` + :func:`core_zip_object`, so the image needs no GCS client."""
    return f"file://{mount_path}/{core_zip_object(version)}"


def code_zip_object(bundle_name: str) -> str:
    """The object name of a team's code zip in the bucket: ``code/<workload>-<sha256>.zip``, named by its content."""
    return f"code/{bundle_name}"


def code_zip_uri(bucket: str, bundle_name: str) -> str:
    """Where ``raytpu submit`` uploads a team's code zip: ``gs://<bucket>/code/<workload>-<sha256>.zip``."""
    return f"gs://{bucket}/{code_zip_object(bundle_name)}"


def working_dir_uri(bundle_name: str, mount_path: str = GCS_MOUNT_PATH) -> str:
    """How a job reaches that zip as its ``working_dir``: through the GCS FUSE mount, as :func:`py_modules_uri`."""
    return f"file://{mount_path}/{code_zip_object(bundle_name)}"


def checkpoints_folder(team: str | None = None) -> str:
    """The folder of the kit's bucket runs keep checkpoints in: ``checkpoints``, a team's ``checkpoints/<team>`` (the
    only one its identity writes)."""
    return "checkpoints" if team is None else f"checkpoints/{team}"


def run_storage(run_name: str, mount_path: str = GCS_MOUNT_PATH, team: str | None = None) -> str:
    """A run's checkpoint folder as its pods see it: ``<mount>/checkpoints[/<team>]/<run>``."""
    return f"{mount_path}/{checkpoints_folder(team)}/{run_name}"


def checkpoint_uri(bucket: str, name: str, team: str | None = None) -> str:
    """Where run ``name``'s checkpoints land in the bucket (written through the GCS FUSE mount)."""
    return f"gs://{bucket}/{checkpoints_folder(team)}/{name}"


# --------------------------------------------------------------------------------------------- jobs and runs

RUN_ID_LENGTH = 6
"""A run suffix's length (:func:`run_id`): ``validate`` counts derived names with it, so ``--run-id`` is capped."""


def run_id(now: float | None = None) -> str:
    """A short, time-ordered RayJob suffix: base-36 seconds since the epoch (``RUN_ID_LENGTH`` until 2059)."""
    return run_id_of(int(time.time() if now is None else now))


def run_id_of(value: int) -> str:
    """``value`` in base 36 (lowercase): the id :func:`run_id` gives that second."""
    digits = "0123456789abcdefghijklmnopqrstuvwxyz"
    out = ""
    while value:
        value, rem = divmod(value, 36)
        out = digits[rem] + out
    return out or "0"


def next_run_id(run_id: str) -> str:
    """The id one second after ``run_id`` (a default id whose name is taken: two submissions in one second). The
    next submission that second moves on again, so every submission gets its own name, still time-ordered and
    :data:`RUN_ID_LENGTH` long."""
    return run_id_of(int(run_id, 36) + 1)


MAX_RUN_ID_TRIES = 20
"""How many later ids a submit without ``--run-id`` tries before it gives up (twenty submissions in one second)."""


DCN_SMOKE_SUFFIX = "dcn"
"""``smoke-<slice>-dcn``: the multi-slice smoke job of a slice."""


def run_name(base: str, run_id: str) -> str:
    """A RayJob's name: its base name and the run's suffix (``<base>-<run id>``); ``base`` alone without one."""
    return f"{base}-{run_id}" if run_id else base


def smoke_workload(slice_name: str) -> str:
    """The smoke workload's name on a slice (``smoke-<slice>``): the RAYTPU_WORKLOAD name its jobs run."""
    return f"smoke-{slice_name}"


def smoke_job(slice_name: str, copy: int) -> str:
    """The base name of the single-slice smoke job on copy ``copy`` of a slice (``smoke-<slice>-<i>``)."""
    return f"{smoke_workload(slice_name)}-{copy}"


def dcn_smoke_job(slice_name: str) -> str:
    """The base name of a slice's multi-slice smoke job (``smoke-<slice>-dcn``)."""
    return f"{smoke_workload(slice_name)}-{DCN_SMOKE_SUFFIX}"


def longest_smoke_job(slice_name: str, count: int, multislice: bool) -> str:
    """The longest smoke job base name for ``count`` copies: the last copy's, or the DCN job's."""
    return max([smoke_job(slice_name, count - 1)] + ([dcn_smoke_job(slice_name)] if multislice else []), key=len)


def service_account_id(cluster: str, role: str) -> str:
    """A Google service account id the cluster stack creates (``raytpu-<cluster>-<role>``), 6-30 characters."""
    return f"raytpu-{cluster[:18].rstrip('-')}-{role}"
