"""KubeRay manifests (``ray.io/v1`` RayCluster, RayJob, RayService) as plain dicts, from SlicePlans.

Pure builders: standard library plus the kit's core (``raytpu.plan``, ``raytpu.config``); no cdktn, ray
or jax import (an import-boundary test checks it). The workloads stack applies what
:func:`workload_manifests` returns; ``raytpu submit``/``raytpu smoke`` pipe the same dicts to
``kubectl apply``. Every number of a TPU worker group comes from the SlicePlan:

- ``numOfHosts`` = ``plan.hosts`` (the TPU webhook rejects ``numOfHosts != max(chips / chips per host, 1)``);
- ``replicas`` = ``minReplicas`` = ``maxReplicas`` = number of slices;
- ``google.com/tpu`` requests == limits == ``plan.chips_per_host``;
- nodeSelector = ``plan.node_selector`` (accelerator + topology), plus the provisioning mode's selector
  (spot, flex-start, queued; Autopilot: the slice's ComputeClass) and matching tolerations.

Pod labels: KubeRay itself labels every Ray pod ``app.kubernetes.io/name: kuberay`` (``labelPod`` in
``ray-operator/controllers/ray/common/pod.go``; template labels may override it), which is the label the
GKE Ray TPU webhook selects on. So the templates here deliberately never set ``app.kubernetes.io/name``.

Services stay inside the cluster: the head service is ``ClusterIP`` and no Ingress is requested; reach
the dashboard or Serve with ``kubectl port-forward``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from raytpu import __version__, errors
from raytpu.config import MODES, PROVISIONING_MODES, RAY_IMAGE, Config, Slice, Workload
from raytpu.plan import TPU_RESOURCE, SlicePlan

API_VERSION = "ray.io/v1"
RAY_VERSION = "2.60.0"
"""The Ray version the kit's images and workloads are built for (``spec.rayVersion``)."""

SPOT_LABEL = "cloud.google.com/gke-spot"
FLEX_START_LABEL = "cloud.google.com/gke-flex-start"
QUEUED_LABEL = "cloud.google.com/gke-queued"
COMPUTE_CLASS_LABEL = "cloud.google.com/compute-class"
RESERVATION_NAME_LABEL = "cloud.google.com/reservation-name"
RESERVATION_AFFINITY_LABEL = "cloud.google.com/reservation-affinity"
GCSFUSE_ANNOTATION = "gke-gcsfuse/volumes"
GCSFUSE_DRIVER = "gcsfuse.csi.storage.gke.io"
GCS_VOLUME = "gcs-bucket"
GCS_MOUNT_PATH = "/mnt/gcs"
"""Where every Ray pod sees the bucket through GCS FUSE."""
MXLA_PORT = 8081
"""Multi-host TPU slices talk over this container port (named ``mxla`` as in GKE's samples)."""
SLICE_LABEL = "raytpu.dev/slice"
"""Label of every object the builders make: the config slice it runs on."""
WORKLOAD_LABEL = "raytpu.dev/workload"
"""Label of every object the builders make: its workload kind (smoke, train, serve)."""
WORKER_GROUP = "tpu"
"""groupName of the TPU worker group."""
TPU_ENV = {"JAX_PLATFORMS": "tpu,cpu", "ENABLE_PJRT_COMPATIBILITY": "true"}
"""``tpu,cpu``, not a bare ``tpu``, which crashes some images (FACTS §4)."""
DEFAULT_SERVE_MODEL = "Qwen/Qwen3-0.6B"
"""Small, ungated, and its 16 attention / 8 KV heads divide every tensor-parallel size up to 16 chips."""

SUBMISSION_MODES = ("K8sJobMode", "HTTPMode", "InteractiveMode", "SidecarMode")
MAX_NAME_LENGTH = {"RayCluster": 53, "RayJob": 47, "RayService": 47}
"""KubeRay's name limits (it appends suffixes to derive cluster and pod names); names are DNS-1035 labels."""
_DNS_1035 = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")


# --------------------------------------------------------------------------------------------- options


@dataclass(frozen=True, kw_only=True)
class Target:
    """Where a Ray cluster's TPU workers land.

    Attributes:
        plan: The slice shape; every TPU number comes from it.
        slices: How many such slices the worker group spans (``replicas``). Default 1.
        provisioning: ``on-demand`` | ``spot`` | ``reservation`` | ``flex-start`` | ``queued``; adds the
            mode's node selector and toleration. Default ``on-demand`` (nothing added).
        mode: ``standard`` | ``autopilot``. Default ``standard``.
        compute_class: Autopilot ComputeClass to select (``cloud.google.com/compute-class``); when set,
            the class carries the spot/reservation/flex-start choice, so no selector of those is added.
            Default None (no compute-class selector).
        reservation: Specific reservation name, selected on Autopilot without a compute class. Default None.
    """

    plan: SlicePlan
    slices: int = 1
    provisioning: str = "on-demand"
    mode: str = "standard"
    compute_class: str | None = None
    reservation: str | None = None

    def __post_init__(self) -> None:
        if self.provisioning not in PROVISIONING_MODES:
            raise errors.invalid_choice("provisioning", self.provisioning, PROVISIONING_MODES)
        if self.mode not in MODES:
            raise errors.invalid_choice("cluster.mode", self.mode, MODES)
        if self.slices < 1:
            raise errors.invalid_value("slices", self.slices, "is below 1", "a whole number >= 1")

    @classmethod
    def from_slice(cls, config: Config, item: Slice, *, slices: int | None = None,
                   compute_class: str | None = None) -> Target:
        """The target of config slice ``item`` (``slices`` defaults to its ``count``).

        On Autopilot ``compute_class`` defaults to :func:`compute_class_name` of the slice (the workloads
        stack creates one per slice, except for queued slices, which get none).
        """
        autopilot = config.cluster.mode == "autopilot" and item.provisioning != "queued"
        return cls(
            plan=item.plan(),
            slices=item.count if slices is None else slices,
            provisioning=item.provisioning,
            mode=config.cluster.mode,
            compute_class=(compute_class or compute_class_name(item.name)) if autopilot else None,
            reservation=item.reservation,
        )


@dataclass(frozen=True, kw_only=True)
class Pods:
    """What every Ray pod of a cluster shares.

    Attributes:
        image: Container image of head and workers. Default: the config's ``RAY_IMAGE``.
        service_account: Kubernetes service account (Workload Identity). Default None (namespace default).
        bucket: GCS bucket mounted through GCS FUSE at ``GCS_MOUNT_PATH``. Default None (no volume).
        head_cpu: Head pod CPU request and limit. Default ``"2"``.
        head_memory: Head pod memory request and limit. Default ``"8Gi"``.
        env: Extra environment for every Ray container. Default none.
        labels: Extra pod labels. Default none.
    """

    image: str = RAY_IMAGE
    service_account: str | None = None
    bucket: str | None = None
    head_cpu: str = "2"
    head_memory: str = "8Gi"
    env: Mapping[str, str] = field(default_factory=dict)
    labels: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True, kw_only=True)
class JobLimits:
    """Bounds on an unattended RayJob (every wait is bounded).

    Attributes:
        active_deadline_s: Whole-job deadline (``activeDeadlineSeconds``). Default 3600.
        pre_running_deadline_s: Fail a job still not running after this long, e.g. waiting for TPU
            capacity (``preRunningDeadlineSeconds``). Default 1800.
        ttl_s: Seconds the finished RayJob's cluster lingers (``ttlSecondsAfterFinished``). Default 300.
        backoff_limit: Retries of the whole job (``backoffLimit``). Default 0.
        submission_mode: ``K8sJobMode`` (a submitter Job whose logs carry the driver's output) or
            ``HTTPMode``/``InteractiveMode``/``SidecarMode``. Default ``K8sJobMode``.
        shutdown_after_finish: Delete the Ray cluster when the job ends. Default True.
    """

    active_deadline_s: int = 3600
    pre_running_deadline_s: int = 1800
    ttl_s: int = 300
    backoff_limit: int = 0
    submission_mode: str = "K8sJobMode"
    shutdown_after_finish: bool = True

    def __post_init__(self) -> None:
        if self.submission_mode not in SUBMISSION_MODES:
            raise errors.invalid_choice("submission_mode", self.submission_mode, SUBMISSION_MODES)
        for name in ("active_deadline_s", "pre_running_deadline_s"):
            if getattr(self, name) < 1:
                raise errors.invalid_value(name, getattr(self, name), "is below 1", "seconds >= 1")
        for name in ("ttl_s", "backoff_limit"):
            if getattr(self, name) < 0:
                raise errors.invalid_value(name, getattr(self, name), "is negative", "a whole number >= 0")


SMOKE_LIMITS = JobLimits(active_deadline_s=1800, pre_running_deadline_s=1200, ttl_s=300)
TRAIN_LIMITS = JobLimits(active_deadline_s=24 * 3600, pre_running_deadline_s=3600, ttl_s=600)


# --------------------------------------------------------------------------------------------- names


def compute_class_name(slice_name: str) -> str:
    """The Autopilot ComputeClass the kit creates for slice ``slice_name`` (``raytpu-<slice>``)."""
    return f"raytpu-{slice_name}"


def core_zip_object(version: str = __version__) -> str:
    """The object name of the kit's core zip in the bucket: ``raytpu/raytpu-<version>.zip`` (the cluster
    stack uploads it there; :func:`core_zip_uri` and :func:`py_modules_uri` both name it)."""
    return f"raytpu/raytpu-{version}.zip"


def core_zip_uri(bucket: str, version: str = __version__) -> str:
    """Where the kit's core zip is uploaded: ``gs://<bucket>/raytpu/raytpu-<version>.zip``."""
    return f"gs://{bucket}/{core_zip_object(version)}"


def py_modules_uri(version: str = __version__, mount_path: str = GCS_MOUNT_PATH) -> str:
    """How jobs reach that zip: ``file:///mnt/gcs/raytpu/raytpu-<version>.zip``, through the GCS FUSE mount.

    Ray reads ``file://`` py_modules natively, so the image needs no GCS client library (a ``gs://``
    URI would need ``smart_open`` and ``google-cloud-storage`` on every node).
    """
    return f"file://{mount_path}/{core_zip_object(version)}"


def checkpoint_uri(bucket: str, name: str) -> str:
    """A training run's storage path: ``gs://<bucket>/checkpoints/<name>``."""
    return f"gs://{bucket}/checkpoints/{name}"


# --------------------------------------------------------------------------------------------- pods


def _env(values: Mapping[str, str]) -> list[dict[str, Any]]:
    return [{"name": k, "value": str(v)} for k, v in values.items()]


def _selector_and_tolerations(target: Target) -> tuple[dict[str, str], list[dict[str, Any]]]:
    selector = dict(target.plan.node_selector)
    tolerations: list[dict[str, Any]] = [{"key": TPU_RESOURCE, "operator": "Exists", "effect": "NoSchedule"}]

    def flag(label: str) -> None:
        selector[label] = "true"
        tolerations.append({"key": label, "operator": "Equal", "value": "true", "effect": "NoSchedule"})

    if target.compute_class:
        selector[COMPUTE_CLASS_LABEL] = target.compute_class
    elif target.provisioning == "spot":
        flag(SPOT_LABEL)
    elif target.provisioning == "reservation" and target.mode == "autopilot" and target.reservation:
        selector[RESERVATION_NAME_LABEL] = target.reservation
        selector[RESERVATION_AFFINITY_LABEL] = "specific"
    if target.provisioning == "flex-start" and not target.compute_class:
        flag(FLEX_START_LABEL)
    elif target.provisioning == "queued":
        flag(QUEUED_LABEL)
    return selector, tolerations


def _volumes(pods: Pods) -> tuple[list[dict[str, Any]], list[dict[str, Any]], dict[str, str]]:
    """(volumes, volumeMounts, pod annotations) for the GCS FUSE bucket, or empty when no bucket."""
    if pods.bucket is None:
        return [], [], {}
    volume = {
        "name": GCS_VOLUME,
        "csi": {
            "driver": GCSFUSE_DRIVER,
            "volumeAttributes": {"bucketName": pods.bucket, "mountOptions": "implicit-dirs"},
        },
    }
    return [volume], [{"name": GCS_VOLUME, "mountPath": GCS_MOUNT_PATH}], {GCSFUSE_ANNOTATION: "true"}


def _pod_template(pods: Pods, container: dict[str, Any], *, node_selector: Mapping[str, str] | None = None,
                  tolerations: Sequence[Mapping[str, Any]] = ()) -> dict[str, Any]:
    volumes, mounts, annotations = _volumes(pods)
    if mounts:
        container["volumeMounts"] = mounts
    spec: dict[str, Any] = {"containers": [container]}
    if pods.service_account is not None:
        spec["serviceAccountName"] = pods.service_account
    if node_selector:
        spec["nodeSelector"] = dict(node_selector)
    if tolerations:
        spec["tolerations"] = [dict(t) for t in tolerations]
    if volumes:
        spec["volumes"] = volumes
    metadata: dict[str, Any] = {}
    if pods.labels:
        metadata["labels"] = dict(pods.labels)
    if annotations:
        metadata["annotations"] = annotations
    template: dict[str, Any] = {"spec": spec}
    if metadata:
        template["metadata"] = metadata
    return template


def head_group(pods: Pods) -> dict[str, Any]:
    """The Ray head: CPU only, ``num-cpus: 0`` (no work lands on it), ClusterIP service, dashboard on 8265."""
    container = {
        "name": "ray-head",
        "image": pods.image,
        "ports": [
            {"containerPort": 6379, "name": "gcs"},
            {"containerPort": 8265, "name": "dashboard"},
            {"containerPort": 10001, "name": "client"},
            {"containerPort": 8000, "name": "serve"},
        ],
        "resources": {
            "requests": {"cpu": pods.head_cpu, "memory": pods.head_memory},
            "limits": {"cpu": pods.head_cpu, "memory": pods.head_memory},
        },
    }
    if pods.env:
        container["env"] = _env(pods.env)
    return {
        "serviceType": "ClusterIP",
        "rayStartParams": {"num-cpus": "0", "dashboard-host": "0.0.0.0"},
        "template": _pod_template(pods, container),
    }


def worker_group(target: Target, pods: Pods, *, env: Mapping[str, str] | None = None,
                 group_name: str = WORKER_GROUP) -> dict[str, Any]:
    """The TPU worker group: one pod per host, ``numOfHosts`` hosts per replica, one replica per slice."""
    plan = target.plan
    selector, tolerations = _selector_and_tolerations(target)
    tpus = str(plan.tpu_per_host)
    container: dict[str, Any] = {
        "name": "ray-worker",
        "image": pods.image,
        "env": _env({**TPU_ENV, **pods.env, **(env or {})}),
        "resources": {"requests": {TPU_RESOURCE: tpus}, "limits": {TPU_RESOURCE: tpus}},
    }
    if not plan.single_host:
        container["ports"] = [{"containerPort": MXLA_PORT, "name": "mxla"}]
    return {
        "groupName": group_name,
        "replicas": target.slices,
        "minReplicas": target.slices,
        "maxReplicas": target.slices,
        "numOfHosts": plan.hosts,
        "rayStartParams": {},
        "template": _pod_template(pods, container, node_selector=selector, tolerations=tolerations),
    }


def ray_cluster_spec(target: Target, pods: Pods, *, worker_env: Mapping[str, str] | None = None) -> dict[str, Any]:
    """A RayCluster ``spec``: head + the TPU worker group (embedded as is in RayJob and RayService)."""
    return {
        "rayVersion": RAY_VERSION,
        "headGroupSpec": head_group(pods),
        "workerGroupSpecs": [worker_group(target, pods, env=worker_env)],
    }


def check_name(kind: str, name: str) -> str:
    """Returns ``name`` if KubeRay accepts it for ``kind``, else raises InvalidInput saying why."""
    limit = MAX_NAME_LENGTH[kind]
    if len(name) > limit or not _DNS_1035.match(name):
        raise errors.invalid_value(f"{kind} name", name, "is not a valid KubeRay name",
                                   f"a DNS-1035 label of at most {limit} characters: lowercase letters, digits, "
                                   "'-'; starts with a letter")
    return name


def _metadata(kind: str, name: str, namespace: str, labels: Mapping[str, str] | None) -> dict[str, Any]:
    check_name(kind, name)
    meta: dict[str, Any] = {"name": name, "namespace": namespace,
                            "labels": {"app.kubernetes.io/managed-by": "raytpu", **(labels or {})}}
    return meta


def ray_cluster(name: str, target: Target, pods: Pods, *, namespace: str = "default",
                labels: Mapping[str, str] | None = None) -> dict[str, Any]:
    """A standalone RayCluster on ``target``.

    A queued-provisioning target is allowed here, but GKE only creates queued nodes for a
    ProvisioningRequest, which supports one PodSet; see :func:`ray_job`.
    """
    return {"apiVersion": API_VERSION, "kind": "RayCluster",
            "metadata": _metadata("RayCluster", name, namespace, labels), "spec": ray_cluster_spec(target, pods)}


def _reject_queued(target: Target, kind: str) -> None:
    if target.provisioning == "queued":
        raise errors.forbidden(
            "provisioning", "queued", f"for a {kind} (queued provisioning's ProvisioningRequest supports a single "
            "PodSet, and a Ray cluster has a head and a TPU worker group)",
            "on-demand, spot, reservation or flex-start for slices that run Ray workloads")


def runtime_env(py_modules: Sequence[str] = (), env_vars: Mapping[str, str] | None = None) -> dict[str, Any]:
    """A Ray runtime env: ``py_modules`` URIs (the kit's core zip) and env vars."""
    out: dict[str, Any] = {}
    if py_modules:
        out["py_modules"] = list(py_modules)
    if env_vars:
        out["env_vars"] = dict(env_vars)
    return out


def ray_job(name: str, target: Target, pods: Pods, *, entrypoint: str, namespace: str = "default",
            limits: JobLimits = JobLimits(), runtime: Mapping[str, Any] | None = None,
            labels: Mapping[str, str] | None = None) -> dict[str, Any]:
    """A RayJob that creates its own cluster on ``target``, runs ``entrypoint`` and cleans up.

    Raises:
        InvalidInput: ``target`` uses queued provisioning (a RayJob with workers is rejected there).
    """
    _reject_queued(target, "RayJob")
    spec: dict[str, Any] = {
        "entrypoint": entrypoint,
        "submissionMode": limits.submission_mode,
        "shutdownAfterJobFinishes": limits.shutdown_after_finish,
        "ttlSecondsAfterFinished": limits.ttl_s,
        "activeDeadlineSeconds": limits.active_deadline_s,
        "preRunningDeadlineSeconds": limits.pre_running_deadline_s,
        "backoffLimit": limits.backoff_limit,
        "rayClusterSpec": ray_cluster_spec(target, pods),
    }
    if runtime:
        spec["runtimeEnvYAML"] = json.dumps(dict(runtime), sort_keys=True)  # JSON is YAML
    return {"apiVersion": API_VERSION, "kind": "RayJob", "metadata": _metadata("RayJob", name, namespace, labels),
            "spec": spec}


def serve_config(plan: SlicePlan, *, model: str = DEFAULT_SERVE_MODEL, replicas: int = 1,
                 app_name: str = "llm", max_model_len: int = 4096) -> dict[str, Any]:
    """Ray Serve LLM (``ray.serve.llm:build_openai_app``) serving ``model`` on whole slices of ``plan``.

    Each replica reserves one whole slice (``accelerator_config`` carries the topology, FACTS §5) and
    shards the model over all its chips (``tensor_parallel_size`` = chips).
    """
    engine_env = {"VLLM_XLA_CACHE_PATH": "/tmp/vllm-xla-cache"}
    if not plan.single_host:
        engine_env["TPU_MULTIHOST_BACKEND"] = "ray"
    llm_config = {
        "model_loading_config": {"model_id": model, "model_source": model},
        "accelerator_type": plan.ray_accelerator_type,
        "accelerator_config": {"kind": "tpu", "topology": plan.topology},
        "engine_kwargs": {"tensor_parallel_size": plan.chips, "max_model_len": max_model_len},
        "deployment_config": {"autoscaling_config": {"min_replicas": replicas, "max_replicas": replicas}},
        "runtime_env": {"env_vars": engine_env},
    }
    return {"applications": [{
        "name": app_name,
        "route_prefix": "/",
        "import_path": "ray.serve.llm:build_openai_app",
        "args": {"llm_configs": [llm_config]},
    }]}


def ray_service(name: str, target: Target, pods: Pods, *, serve: Mapping[str, Any], namespace: str = "default",
                upgrade_strategy: str = "None", labels: Mapping[str, str] | None = None) -> dict[str, Any]:
    """A RayService running ``serve`` (a serveConfigV2 dict) on ``target``.

    ``upgrade_strategy`` defaults to ``None``: KubeRay's default upgrade builds a second cluster,
    i.e. twice the TPUs (FACTS §4). Serve stays behind KubeRay's ClusterIP ``<name>-serve-svc``.

    Raises:
        InvalidInput: ``target`` uses queued provisioning, or ``upgrade_strategy`` is unknown.
    """
    _reject_queued(target, "RayService")
    strategies = ("None", "NewCluster", "NewClusterWithIncrementalUpgrade")
    if upgrade_strategy not in strategies:
        raise errors.invalid_choice("upgrade_strategy", upgrade_strategy, strategies)
    worker_env = {} if target.plan.single_host else {"TPU_MULTIHOST_BACKEND": "ray"}
    return {
        "apiVersion": API_VERSION,
        "kind": "RayService",
        "metadata": _metadata("RayService", name, namespace, labels),
        "spec": {
            "upgradeStrategy": {"type": upgrade_strategy},
            "serveConfigV2": json.dumps(dict(serve), sort_keys=True),  # JSON is YAML
            "rayClusterConfig": ray_cluster_spec(target, pods, worker_env=worker_env),
        },
    }


# --------------------------------------------------------------------------------------------- workloads


def smoke_entrypoint(plan: SlicePlan, slices: int = 1) -> str:
    """``python -m raytpu.workloads.smoke`` for ``plan`` (machine type always stated: v6e 2x4 is ambiguous)."""
    args = f"--generation {plan.generation} --topology {plan.topology} --machine-type {plan.machine_type}"
    if slices != 1:
        args += f" --slices {slices}"
    return f"python -m raytpu.workloads.smoke {args}"


def train_entrypoint(plan: SlicePlan, storage_path: str) -> str:
    """``python -m raytpu.workloads.train`` for ``plan``, checkpointing under ``storage_path``."""
    return (f"python -m raytpu.workloads.train --generation {plan.generation} --topology {plan.topology} "
            f"--machine-type {plan.machine_type} --storage-path {storage_path}")


def workload_manifest(config: Config, workload: Workload, *, service_account: str, bucket: str,
                      namespace: str = "default", py_modules: str | None = None,
                      compute_class: str | None = None, slices: int | None = None,
                      name: str | None = None) -> dict[str, Any]:
    """The KubeRay object of one ``config.workloads`` entry.

    ``smoke`` and ``train`` become RayJobs (entrypoints :func:`smoke_entrypoint`, :func:`train_entrypoint`)
    that receive the kit's core through ``runtimeEnvYAML.py_modules`` (``py_modules``, default
    :func:`py_modules_uri`: the zip :func:`core_zip_uri` names, read through the bucket's FUSE mount);
    ``serve`` becomes a RayService (:func:`serve_config`).
    ``service_account`` and ``bucket`` may be Terraform tokens: they are copied, never parsed.

    Raises:
        InvalidInput: the workload's slice is unknown or uses queued provisioning.
    """
    item = config.slice(workload.slice)
    target = Target.from_slice(config, item, slices=slices, compute_class=compute_class)
    pods = Pods(image=workload.image, service_account=service_account, bucket=bucket)
    labels = {WORKLOAD_LABEL: workload.kind, SLICE_LABEL: item.name}
    name = name or workload.name
    runtime = runtime_env([py_modules or py_modules_uri()])
    if workload.kind == "smoke":
        return ray_job(name, target, pods, entrypoint=smoke_entrypoint(target.plan, target.slices),
                       namespace=namespace, limits=SMOKE_LIMITS, runtime=runtime, labels=labels)
    if workload.kind == "train":
        return ray_job(name, target, pods, entrypoint=train_entrypoint(target.plan, checkpoint_uri(bucket, name)),
                       namespace=namespace, limits=TRAIN_LIMITS, runtime=runtime, labels=labels)
    serve = serve_config(target.plan, model=workload.model or DEFAULT_SERVE_MODEL, replicas=target.slices)
    return ray_service(name, target, pods, serve=serve,
                       namespace=namespace, labels=labels)


def workload_manifests(config: Config, *, service_account: str, bucket: str, namespace: str = "default",
                       py_modules: str | None = None,
                       compute_classes: Mapping[str, str] | None = None) -> list[dict[str, Any]]:
    """One KubeRay manifest per ``config.workloads`` entry, in order (what the workloads stack applies).

    Args:
        config: A validated config.
        service_account: Kubernetes service account of the Ray pods (may be a Terraform token).
        bucket: Bucket mounted through GCS FUSE, holding checkpoints and the core zip (may be a token).
        namespace: Namespace of every object. Default ``default``.
        py_modules: URI of the kit's core zip. Default :func:`py_modules_uri` (``file://`` through the
            bucket's FUSE mount of the zip at :func:`core_zip_uri`, which the cluster stack uploads).
        compute_classes: Autopilot only: slice name -> ComputeClass name. Default
            :func:`compute_class_name` of each slice.

    Raises:
        InvalidInput: a workload names an unknown slice, or a slice with queued provisioning.
    """
    classes = compute_classes or {}
    return [
        workload_manifest(config, work, service_account=service_account, bucket=bucket, namespace=namespace,
                          py_modules=py_modules, compute_class=classes.get(work.slice))
        for work in config.workloads
    ]


def _slice_image(config: Config, slice_name: str) -> str:
    on_slice = [w for w in config.workloads if w.slice == slice_name]
    smoke = [w for w in on_slice if w.kind == "smoke"]
    return (smoke or on_slice)[0].image if on_slice else RAY_IMAGE


def smoke_jobs(config: Config, *, service_account: str, bucket: str, namespace: str = "default",
               py_modules: str | None = None, image: str | None = None,
               compute_classes: Mapping[str, str] | None = None,
               suffix: str = "") -> list[dict[str, Any]]:
    """``raytpu smoke``: one single-slice smoke RayJob per slice copy (``count`` jobs per config slice).

    Jobs are named ``smoke-<slice>-<i>[-<suffix>]``; each reserves one whole slice, so copies of a slice
    land on different node pools. Slices with queued provisioning are skipped (a RayJob with workers is
    rejected there); the caller reports them. ``image`` defaults to the image of the config's smoke
    workload on that slice, else of any workload on it, else ``RAY_IMAGE``.
    """
    classes = compute_classes or {}
    jobs = []
    for item in config.slices:
        if item.provisioning == "queued":
            continue
        work = Workload(name=f"smoke-{item.name}", kind="smoke", slice=item.name,
                        image=image or _slice_image(config, item.name))
        for i in range(item.count):
            name = f"smoke-{item.name}-{i}" + (f"-{suffix}" if suffix else "")
            jobs.append(workload_manifest(config, work, service_account=service_account, bucket=bucket,
                                          namespace=namespace, py_modules=py_modules,
                                          compute_class=classes.get(item.name), slices=1, name=name))
    return jobs
