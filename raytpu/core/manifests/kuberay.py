"""KubeRay manifests (RayCluster, RayJob, RayService) as plain dicts from specs: pure builders, numbers from the slice's
SlicePlan, pods locked down (docs/FACTS.md#kuberay-builders). Source: KubeRay v1.7.0 ``labelPod``
(``common/pod.go``)."""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from raytpu.core.common import errors, names
from raytpu.core.common.errors import InvalidInput
from raytpu.core.manifests import engine_pods, pod_security, preemption, ray_ports, serving, smoke_runs, team_serving
from raytpu.core.manifests import network_policy as netpol
from raytpu.core.manifests.kube_resources import resource
from raytpu.core.specs.cluster.security import NAMESPACE_SOURCE, SecuritySpec
from raytpu.core.specs.runtime import compile_cache, run_env, user_code
from raytpu.core.specs.serving import node_disk
from raytpu.core.specs.slices import multislice
from raytpu.core.specs.spec import MULTI_HOST_NAME_LIMIT, ClusterSpec, SliceSpec, WorkloadSpec
from raytpu.core.tpu.catalog import RAY_VERSION, generation
from raytpu.core.tpu.plan import TPU_RESOURCE, SlicePlan

API_VERSION = "ray.io/v1"

GCSFUSE_ANNOTATION = "gke-gcsfuse/volumes"
GCSFUSE_DRIVER = "gcsfuse.csi.storage.gke.io"
GCS_VOLUME = "gcs-bucket"
WORKER_GROUP = "tpu"
"""groupName of the TPU worker group."""
TPU_ENV = {"JAX_PLATFORMS": "tpu,cpu", "ENABLE_PJRT_COMPATIBILITY": "true"}
"""``tpu,cpu``: a bare ``tpu`` crashes with "Unknown backend cpu" (kubernetes-engine-samples;
docs/FACTS.md#kuberay-builders)."""

NEWEST_FIELDS: dict[str, tuple[tuple[str, ...], str]] = {
    "RayCluster": (("spec.authOptions",), "1.5.1"),
    "RayJob": (("spec.preRunningDeadlineSeconds",), "1.6.0"),
    "RayService": (("spec.rayClusterConfig.authOptions",), "1.5.1"),
}
"""Per kind, (the kit's fields that arrived last, the KubeRay release that brought them): a CRD without them is older.
Source: ray-project/kuberay CRDs by tag, kuberay#4179 (v1.5.1), kuberay#4525 (v1.6.0)
(docs/FACTS.md#kuberay-release-floor)."""
MIN_KUBERAY_VERSION = max((v for _, v in NEWEST_FIELDS.values()), key=lambda v: tuple(map(int, v.split("."))))
"""The oldest KubeRay every object the kit emits works with: the newest release of :data:`NEWEST_FIELDS`."""


def kuberay_remedy(version: str, kind: str) -> str:
    """What fixes a cluster whose KubeRay is older than ``version`` (GKE publishes no add-on-to-KubeRay table)."""
    return (f"KubeRay {version} or newer: a GKE version whose Ray Operator add-on ships it (GKE does not document "
            f"which KubeRay each version ships; after an upgrade `kubectl get crd {resource(kind).display} -o yaml` "
            "shows the fields it serves)")

MAX_NAME_LENGTH = {"RayCluster": 53, "RayJob": 47, "RayService": 47}
"""KubeRay's name limits (it appends suffixes to derive cluster and pod names); names are DNS-1035 labels."""
_DNS_1035 = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")


@dataclass(frozen=True, kw_only=True)
class Pods:
    """What every Ray pod of a cluster shares: image, Ray, account, bucket, head size, env, labels
    (docs/FACTS.md#kuberay-builders)."""

    image: str
    ray_version: str = RAY_VERSION
    service_account: str | None = None
    bucket: str | None = None
    head_cpu: str = "2"
    head_memory: str = "8Gi"
    env: Mapping[str, str] = field(default_factory=dict)
    labels: Mapping[str, str] = field(default_factory=dict)
    cluster: str | None = None
    security: SecuritySpec = SecuritySpec()


# --------------------------------------------------------------------------------------------- pods


def _env(values: Mapping[str, str]) -> list[dict[str, Any]]:
    return [{"name": k, "value": str(v)} for k, v in values.items()]


def tpu_placement(item: SliceSpec, autopilot: bool,
                  cluster: str | None = None) -> tuple[dict[str, str], list[dict[str, Any]]]:
    """(nodeSelector, tolerations) of slice ``item``'s TPU pods, on Standard with its own ``SLICE_LABEL``
    (docs/FACTS.md#kuberay-builders).
    Source: ai-on-gke kuberay-tpu-webhook ``injectAffinity`` (docs/FACTS.md#kuberay-webhook and
    docs/FACTS.md#kuberay-tpu-pods)."""
    selector = dict(item.plan.node_selector)
    tolerations: list[dict[str, Any]] = [{"key": TPU_RESOURCE, "operator": "Exists", "effect": "NoSchedule"}]
    if autopilot and item.plan.placement == "workload-policy":
        if cluster is None:
            raise errors.missing("cluster", f"for the workload policy of Autopilot slice {item.name}",
                                 "Pods(cluster=<the GKE cluster's name>)")
        selector[names.PLACEMENT_POLICY_LABEL] = names.workload_policy_name(cluster, item.name)
    if not autopilot:
        selector[names.SLICE_LABEL] = item.name
    if autopilot and item.provisioning.priority is not None:
        selector[names.COMPUTE_CLASS_LABEL] = names.compute_class_name(item.name)
    else:
        flag, tolerate = item.provisioning.pod_placement()
        selector.update(flag)
        tolerations += tolerate
    return selector, tolerations


def gcsfuse_mount_options(security: SecuritySpec) -> str:
    """GCS FUSE options: files owned by the pods' user, so Ray writes checkpoints (gcs-fuse-csi-driver;
    docs/FACTS.md#kuberay-tpu-pods)."""
    return f"implicit-dirs,uid={security.run_as_user},gid={security.run_as_group}"


def _volumes(pods: Pods) -> tuple[list[dict[str, Any]], list[dict[str, Any]], dict[str, str]]:
    """(volumes, volumeMounts, pod annotations) for the GCS FUSE bucket, or empty when no bucket."""
    if pods.bucket is None:
        return [], [], {}
    volume = {
        "name": GCS_VOLUME,
        "csi": {
            "driver": GCSFUSE_DRIVER,
            "volumeAttributes": {"bucketName": pods.bucket, "mountOptions": gcsfuse_mount_options(pods.security)},
        },
    }
    return [volume], [{"name": GCS_VOLUME, "mountPath": names.GCS_MOUNT_PATH}], {GCSFUSE_ANNOTATION: "true"}


def _pod_template(pods: Pods, container: dict[str, Any], *, node_selector: Mapping[str, str] | None = None,
                  tolerations: Sequence[Mapping[str, Any]] = ()) -> dict[str, Any]:
    volumes, mounts, annotations = _volumes(pods)
    if mounts:
        container["volumeMounts"] = mounts
    spec: dict[str, Any] = {"containers": [container]}
    if volumes:
        spec["volumes"] = volumes
    pod_security.harden(spec, pods.security)
    if pods.service_account is not None:
        spec["serviceAccountName"] = pods.service_account
    if node_selector:
        spec["nodeSelector"] = dict(node_selector)
    if tolerations:
        spec["tolerations"] = [dict(t) for t in tolerations]
    metadata: dict[str, Any] = {}
    if pods.labels:
        metadata["labels"] = dict(pods.labels)
    if annotations:
        metadata["annotations"] = annotations
    template: dict[str, Any] = {"spec": spec}
    if metadata:
        template["metadata"] = metadata
    return template


def autopilot_ray_files(gib: float = node_disk.SCRATCH_GIB) -> dict[str, str]:
    """On Autopilot, each Ray container's ephemeral-storage request, which Autopilot also makes its limit (an eviction
    line): Ray's files in /tmp (session logs, runtime-env zips, spilled objects), ``workloads[].ray_disk_gib`` or the
    kit's allowance, never Autopilot's 1 GiB default (docs/FACTS.md#autopilot-ephemeral-limit).
    Source: https://cloud.google.com/kubernetes-engine/docs/concepts/autopilot-resource-requests"""
    return {"ephemeral-storage": f"{math.ceil(gib)}Gi"}


def head_group(pods: Pods, serves: bool = False, autopilot: bool = False,
               ray_files_gib: float = node_disk.SCRATCH_GIB) -> dict[str, Any]:
    """The Ray head: CPU only, ``num-cpus: 0`` (no work lands on it), ClusterIP service, dashboard on 8265. On
    Autopilot its ephemeral storage stays within the general-purpose class's per-Pod maximum, sidecar included
    (:func:`raytpu.core.specs.serving.node_disk.head_ray_files_gib`)."""
    head_gib = node_disk.head_ray_files_gib(ray_files_gib, pods.bucket is not None)
    files = autopilot_ray_files(head_gib) if autopilot else {}
    requests = {"cpu": pods.head_cpu, "memory": pods.head_memory, **files}
    container = {
        "name": "ray-head",
        "image": pods.image,
        "ports": [p.container_port() for p in ray_ports.head_ports(serves)],
        "resources": {"requests": requests, "limits": {"cpu": pods.head_cpu, "memory": pods.head_memory}},
    }
    if pods.env:
        container["env"] = _env(pods.env)
    return {
        "serviceType": "ClusterIP",
        "rayStartParams": {"num-cpus": "0", "dashboard-host": "0.0.0.0"},
        "template": _pod_template(pods, container),
    }


HOST_SHARE = 0.9
"""The Ray worker's share of its host's allocatable CPU and memory; the rest: DaemonSets, the GCS FUSE sidecar."""


def host_resources(plan: SlicePlan, autopilot: bool,
                   ray_files_gib: float = node_disk.SCRATCH_GIB) -> dict[str, dict[str, str]]:
    """A TPU worker's resources: all the host's chips, on Standard :data:`HOST_SHARE` as requests, on Autopilot
    :func:`autopilot_ray_files` of ephemeral storage (docs/FACTS.md#kuberay-builders).
    Source: https://cloud.google.com/kubernetes-engine/docs/how-to/tpus-autopilot"""
    tpus = str(plan.chips_per_host)
    resources = {"requests": {TPU_RESOURCE: tpus}, "limits": {TPU_RESOURCE: tpus}}
    if autopilot:  # an engine's larger request replaces it (engine_pods)
        resources["requests"] |= autopilot_ray_files(ray_files_gib)
    else:
        machine = generation(plan.generation).machine_type(plan.machine_type)
        memory = f"{int(machine.allocatable_memory_mib * HOST_SHARE)}Mi"
        resources["requests"] |= {"cpu": f"{int(machine.allocatable_cpu_m * HOST_SHARE)}m", "memory": memory}
        resources["limits"]["memory"] = memory
    return resources


def worker_group(work: WorkloadSpec, pods: Pods, *, autopilot: bool, env: Mapping[str, str] | None = None,
                 group_name: str = WORKER_GROUP, serves: bool = False) -> dict[str, Any]:
    """The TPU worker group: one pod per host, ``numOfHosts`` per replica, one replica per slice
    (docs/FACTS.md#kuberay-builders).
    Source: Ray 2.60 ``ray.train.v2.jax.config._JAX_MULTISLICE_OVERRIDE_KEYS``."""
    plan = work.plan
    selector, tolerations = tpu_placement(work.slice, autopilot, pods.cluster)
    container: dict[str, Any] = {
        "name": "ray-worker",
        "image": pods.image,
        "env": _env({**TPU_ENV, **multislice.slice_env(work.slices_per_run), **pods.env, **(env or {})}),
        "resources": host_resources(plan, autopilot, work.ray_files_gib),
        "ports": [p.container_port() for p in ray_ports.worker_ports(serves, not plan.single_host)],
    }
    template = _pod_template(pods, container, node_selector=selector, tolerations=tolerations)
    if preemption.reclaimable(work.slice.modes, work.slice.max_run_duration_s):
        preemption.reclaimable_pod_fields(template["spec"], pods.ray_version, work.slice.notice_s)
    return {
        "groupName": group_name,
        "replicas": work.slices_spanned,
        "minReplicas": work.slices_spanned,
        "maxReplicas": work.slices_spanned,
        "numOfHosts": plan.hosts,
        "rayStartParams": {},
        "template": template,
    }


def ray_cluster_spec(work: WorkloadSpec, pods: Pods, *, autopilot: bool,
                     worker_env: Mapping[str, str] | None = None, serves: bool = False) -> dict[str, Any]:
    """A RayCluster ``spec``: head + the TPU worker group (embedded as is in RayJob and RayService)."""
    return {
        "rayVersion": pods.ray_version,
        "authOptions": {"mode": names.AUTH_MODE},
        "headGroupSpec": head_group(pods, serves, autopilot, work.ray_files_gib),
        "workerGroupSpecs": [worker_group(work, pods, autopilot=autopilot, env=worker_env, serves=serves)],
    }


def _own(pods: Pods, kind: str, name: str) -> Pods:
    """``pods`` labelled as the pods of KubeRay object ``kind``/``name`` (what its NetworkPolicy selects)."""
    return replace(pods, labels={**pods.labels, names.CLUSTER_LABEL: names.cluster_label(kind, name)})


def object_name_problems(kind: str, name: str, work: WorkloadSpec | None = None) -> list[InvalidInput]:
    """What is wrong with ``name`` for a KubeRay ``kind``: KubeRay's DNS-1035 rule, then the TPU webhook's limit."""
    limit = MAX_NAME_LENGTH[kind]
    if len(name) > limit or not _DNS_1035.match(name):
        return [errors.invalid_value(f"{kind} name", name, "is not a valid KubeRay name",
                                     f"a DNS-1035 label of at most {limit} characters: lowercase letters, digits, "
                                     "'-'; starts with a letter")]
    if work is not None and not work.plan.single_host and len(name) > MULTI_HOST_NAME_LIMIT:
        return [errors.invalid_value(f"{kind} name", name, f"is longer than {MULTI_HOST_NAME_LIMIT} characters "
                                     "with a multi-host TPU worker group (GKE's TPU webhook would truncate it)",
                                     f"at most {MULTI_HOST_NAME_LIMIT} characters (a shorter --run-id)")]
    return []


def _metadata(kind: str, name: str, namespace: str, labels: Mapping[str, str] | None,
              work: WorkloadSpec | None = None) -> dict[str, Any]:
    errors.raise_found(object_name_problems(kind, name, work))
    return {"name": name, "namespace": namespace, "labels": {**names.MANAGED_BY, **(labels or {})}}


def ray_cluster(name: str, work: WorkloadSpec, pods: Pods, *, autopilot: bool = False,
                namespace: str = "default", labels: Mapping[str, str] | None = None) -> dict[str, Any]:
    """A standalone RayCluster for ``work``'s slice."""
    return {"apiVersion": API_VERSION, "kind": "RayCluster",
            "metadata": _metadata("RayCluster", name, namespace, labels),
            "spec": ray_cluster_spec(work, _own(pods, "RayCluster", name), autopilot=autopilot)}


def runtime_env(py_modules: Sequence[str] = (), env_vars: Mapping[str, str] | None = None,
                working_dir: str | None = None) -> dict[str, Any]:
    """A Ray runtime env: ``py_modules``, a team's ``working_dir``, env vars; no ``pip`` (the image has it all)."""
    out: dict[str, Any] = {}
    if py_modules:
        out["py_modules"] = list(py_modules)
    if working_dir:
        out["working_dir"] = working_dir
    if env_vars:
        out["env_vars"] = dict(env_vars)
    return out


EVERY_HOST_PROGRAM = "raytpu.workloads.every_host"
"""The kit's driver of a ``run_on: every_host`` job: it runs the team's entrypoint on every TPU host."""


def entrypoint(work: WorkloadSpec, *args: str) -> str:
    """``python -m raytpu.workloads.<program> ARGS`` (a job's command), a ``kind: job``'s own ``entrypoint`` (its Ray
    driver, on the head), or, with ``run_on: every_host``, the kit's driver that runs it on every TPU host."""
    if work.kind.runs_entrypoint:
        assert work.entrypoint is not None and not args
        return f"python -m {EVERY_HOST_PROGRAM}" if work.on_every_host else work.entrypoint
    return " ".join(["python", "-m", work.kind.module, *args])


def ray_job(name: str, work: WorkloadSpec, pods: Pods, *, autopilot: bool = False, args: Sequence[str] = (),
            namespace: str = "default", runtime: Mapping[str, Any] | None = None,
            labels: Mapping[str, str] | None = None, worker_env: Mapping[str, str] | None = None) -> dict[str, Any]:
    """A RayJob with its own cluster on ``work``'s slice; ``worker_env`` goes to the TPU worker containers only."""
    limits = work.kind.limits
    assert limits is not None, f"kind {work.kind.name} is not a RayJob"
    pods = _own(pods, "RayJob", name)
    env = {**dict((runtime or {}).get("env_vars") or {}), **_compile_cache_env(work, pods), **work.workload_env()}
    run_s = work.run_deadline_s  # a run with no deadline waits for capacity as long as its kind may run
    waits_s = preemption.pre_running_deadline_s(limits.pre_running_deadline_s, run_s or limits.active_deadline_s,
                                                work.slice.modes, work.kind.checks)
    spec: dict[str, Any] = {
        "entrypoint": entrypoint(work, *args),
        "submissionMode": limits.submission_mode,
        "shutdownAfterJobFinishes": limits.shutdown_after_finish,
        "ttlSecondsAfterFinished": limits.ttl_s,
        # both clocks start when KubeRay first sees the RayJob, before any pod: the wait for capacity is added so
        # the job keeps its whole run time. Source: KubeRay v1.7.0 initRayJobStatusIfNeed (Status.StartTime)
        "activeDeadlineSeconds": None if run_s is None else waits_s + run_s,
        "preRunningDeadlineSeconds": waits_s,
        # each retry is a new RayCluster whose attempt restarts both clocks (docs/FACTS.md#kuberay-retries): no room to
        # add here.
        # Source: KubeRay v1.7.0 initRayJobStatusIfNeed (Status.StartTime), reached again from Retrying via New
        "backoffLimit": work.backoff_limit,
        "runtimeEnvYAML": json.dumps({**dict(runtime or {}), "env_vars": env}, sort_keys=True),  # JSON is YAML
        "rayClusterSpec": ray_cluster_spec(work, pods, autopilot=autopilot, worker_env=worker_env),
    }
    if run_s is None:  # optional in the CRD: no deadline. Source: KubeRay v1.7.0 RayJobSpec.ActiveDeadlineSeconds
        del spec["activeDeadlineSeconds"]
    if limits.submission_mode == "K8sJobMode":
        spec["submitterPodTemplate"] = submitter_template(pods)
    return {"apiVersion": API_VERSION, "kind": "RayJob", "metadata": _metadata("RayJob", name, namespace, labels, work),
            "spec": spec}


def _compile_cache_env(work: WorkloadSpec, pods: Pods) -> dict[str, str]:
    """JAX's compile cache in the bucket's mount per image and slice shape (JAX jobs only; none without a bucket)."""
    if pods.bucket is None or work.kind.takes_model:
        return {}
    folder = work.compile_cache if work.team is None else compile_cache.team_folder(work.team, work.compile_cache)
    return compile_cache.job_env(folder, mount=names.GCS_MOUNT_PATH, image=pods.image,
                                 generation=work.plan.generation, topology=work.plan.topology,
                                 slices=work.slices_per_run, team=work.runs_team_code)


SUBMITTER_RESOURCES = {"requests": {"cpu": "500m", "memory": "200Mi"}, "limits": {"cpu": "1", "memory": "1Gi"}}
"""KubeRay's own default submitter resources. Source: KubeRay ``GetDefaultSubmitterContainer``."""


def submitter_template(pods: Pods) -> dict[str, Any]:
    """The submitter pod: KubeRay's default, hardened. Source: KubeRay v1.7.0 ``configureSubmitterContainer``."""
    container = {"name": "ray-job-submitter", "image": pods.image, "resources": SUBMITTER_RESOURCES}
    template = _pod_template(replace(pods, bucket=None), container)
    template["spec"]["restartPolicy"] = "Never"
    return template


UPGRADE_STRATEGIES = ("None", "NewCluster", "NewClusterWithIncrementalUpgrade")


def ray_service(name: str, work: WorkloadSpec, pods: Pods, *, autopilot: bool = False, namespace: str = "default",
                upgrade_strategy: str = "None", labels: Mapping[str, str] | None = None,
                py_modules: str | None = None, bucket_name: str | None = None,
                team_runtime: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """A RayService serving ``work`` with Ray Serve LLM, or its team's own ``serve_app`` in ``team_runtime`` (the
    runtime env team RayJobs get: :mod:`raytpu.core.manifests.team_serving`); ``upgradeStrategy`` None updates in
    place (docs/FACTS.md#kuberay-builders). Where HAProxy serves the LLM app, its Service leaves the head out: the
    CPU head would only forward to the TPU host (docs/FACTS.md#ray-serve-serving). Source:
    https://docs.ray.io/en/latest/cluster/kubernetes/user-guides/rayservice.html"""
    if upgrade_strategy not in UPGRADE_STRATEGIES:
        raise errors.invalid_choice("upgrade_strategy", upgrade_strategy, UPGRADE_STRATEGIES)
    mounted = (bucket_name or pods.bucket) if pods.bucket is not None else None
    llm = work.runs_vllm
    direct = serving.DIRECT_STREAMING_ENV if llm and serving.streams_direct(work, local=False) else {}
    hot_path = serving.SERVE_HOT_PATH_ENV if llm else {}  # a team's sync code keeps Serve's own thread defaults
    pods = replace(_own(pods, "RayService", name), env={**hot_path, **direct, **pods.env})
    worker_env = {} if work.plan.single_host or not llm else {"TPU_MULTIHOST_BACKEND": "ray"}
    cluster = ray_cluster_spec(work, pods, autopilot=autopilot, worker_env=worker_env, serves=True)
    if llm:
        engine_pods.add_engine_needs(cluster, work, mounted)
    key_secret = pods.security.serve_api_key_secret
    if key_secret is not None:
        for group in (cluster["headGroupSpec"], *cluster["workerGroupSpecs"]):
            engine_pods.add_api_key(group["template"]["spec"], key_secret)
    key_file = engine_pods.SERVE_API_KEY_FILE if key_secret is not None else None
    if llm:
        config = serving.serve_config(work, mounted_bucket=mounted, api_key_file=key_file,
                                      py_modules=(py_modules or names.py_modules_uri(),)
                                      if py_modules or pods.bucket else ())
    else:
        assert team_runtime is not None, "a serve_app runs in its team's runtime env (workload_manifest)"
        config = team_serving.serve_config(work, team_runtime, key_file)
    spec: dict[str, Any] = {
        "upgradeStrategy": {"type": upgrade_strategy},
        "serveConfigV2": json.dumps(config, sort_keys=True),  # JSON is YAML
        "rayClusterConfig": cluster,
    }
    if direct:
        spec["excludeHeadPodFromServeSvc"] = True
    service = serve_service(name, pods.security)
    if service is not None:
        spec["serveService"] = service
    return {"apiVersion": API_VERSION, "kind": "RayService",
            "metadata": _metadata("RayService", name, namespace, labels, work), "spec": spec}


INTERNAL_LB_ANNOTATION = {"networking.gke.io/load-balancer-type": "Internal"}
"""GKE's internal passthrough NLB (https://cloud.google.com/kubernetes-engine/docs/how-to/internal-load-balancing)."""


def serve_service(name: str, security: SecuritySpec) -> dict[str, Any] | None:
    """A load-balanced ``serveService``, or None. Source: KubeRay v1.7.0 ``BuildServeService``."""
    if security.serve_endpoint == "cluster-ip":
        return None
    internal = security.serve_endpoint == "internal-lb"
    metadata: dict[str, Any] = {"name": names.serve_service(name)}
    if internal:
        metadata["annotations"] = dict(INTERNAL_LB_ANNOTATION)
    port = ray_ports.SERVE
    spec: dict[str, Any] = {"type": "LoadBalancer", "ports": [
        {"name": port.name, "port": port.number, "targetPort": port.number, "protocol": "TCP"}]}
    cidrs = [s for s in security.serve_from if not s.startswith(NAMESPACE_SOURCE)]
    if cidrs:
        spec["loadBalancerSourceRanges"] = cidrs
    return {"metadata": metadata, "spec": spec}


# --------------------------------------------------------------------------------------------- workloads


ImageOf = Callable[[WorkloadSpec], tuple[str, str]]
"""What a workload's pods run: (image, its Ray), from :func:`raytpu.images.resolver`; a function keeps images out."""


def workload_manifest(spec: ClusterSpec, work: WorkloadSpec, *, images: ImageOf, service_account: str,
                      bucket: str, namespace: str = "default", py_modules: str | None = None,
                      name: str | None = None, args: Sequence[str] = (),
                      worker_env: Mapping[str, str] | None = None, code_zip: str | None = None) -> dict[str, Any]:
    """The KubeRay object of one workload: a RayJob or a RayService; tokens copied, never parsed
    (docs/FACTS.md#kuberay-builders)."""
    reference, ray_version = images(work)
    pods = Pods(image=reference, ray_version=ray_version, service_account=service_account,
                bucket=bucket, cluster=spec.cluster.name, security=spec.security)
    labels = {names.WORKLOAD_LABEL: work.kind.name, names.SLICE_LABEL: work.slice.name}
    name = name or work.name
    autopilot = spec.cluster.autopilot
    if work.kind.is_job:
        if work.kind.trains:
            args = [*args, *preemption.train_run_args(work.slice.modes, work.slice.max_run_duration_s,
                                                      multislice.reservation_waits(work.plan, work.slices_per_run))]
        assert (work.code is None) == (code_zip is None), "a code folder ships as its zip (raytpu.teamcode.bundle)"
        # the team's env goes on the containers only (add_team_env): the submitter's bash would expand `$` and
        # backquotes in runtimeEnvYAML, and Ray `$NAME` in its env_vars (docs/FACTS.md#spec-run-env)
        team_env = user_code.raytpu_env(work.plan, slices=work.slices_per_run,
                                     storage=names.run_storage(name, team=work.team),
                                     run=name) if work.runs_team_code else None
        runtime = runtime_env([py_modules or names.py_modules_uri()], team_env,
                              names.working_dir_uri(code_zip) if code_zip else None)
        job = ray_job(name, work, pods, autopilot=autopilot, args=args, namespace=namespace, labels=labels,
                      runtime=runtime, worker_env=worker_env)
        if work.kind.takes_model:
            engine_pods.add_engine_needs(job["spec"]["rayClusterSpec"], work, spec.bucket)
        add_team_env(job["spec"]["rayClusterSpec"], work)
        return job
    team = None
    if work.serve_app is not None:  # the team's code as its RayJobs get it, the checkpoints of every run beside it
        assert (work.code is None) == (code_zip is None), "a code folder ships as its zip (raytpu.teamcode.bundle)"
        team = runtime_env([py_modules or names.py_modules_uri()],
                           team_serving.team_env(work, name, names.GCS_MOUNT_PATH),
                           names.working_dir_uri(code_zip) if code_zip else None)
    service = ray_service(name, work, pods, autopilot=autopilot, namespace=namespace, labels=labels,
                          py_modules=py_modules, bucket_name=spec.bucket, team_runtime=team)
    add_team_env(service["spec"]["rayClusterConfig"], work)
    return service


def add_team_env(cluster: dict[str, Any], work: WorkloadSpec) -> None:
    """``env`` and ``secrets`` on the Ray container of the head (where the job's driver and Serve's controller run
    the team's code) and of every worker group (its Ray Train workers, tasks, replicas); not the submitter, which
    only runs ``ray job submit``. Only here, not in the runtime env: every Ray process inherits its container's
    environment, and no shell or Ray expansion touches a value on the way (``$`` doubled for the kubelet). Secrets as
    ``secretKeyRef``, read by the kubelet: no value in the object.
    Source: Kubernetes v1 OpenAPI io.k8s.api.core.v1.EnvVar / SecretKeySelector (tests/data, vendored)."""
    entries = run_env.plain_env_vars(work.env) + run_env.secret_env_vars(work.secrets)
    if not entries:
        return
    for group in (cluster["headGroupSpec"], *cluster["workerGroupSpecs"]):
        container = group["template"]["spec"]["containers"][0]
        container["env"] = [*container.get("env", []), *entries]


def ray_cluster_of(obj: Mapping[str, Any]) -> dict[str, Any]:
    """The RayCluster spec inside a RayCluster, RayJob (``rayClusterSpec``) or RayService (``rayClusterConfig``)."""
    spec = obj["spec"]
    return {"RayCluster": lambda: spec, "RayJob": lambda: spec["rayClusterSpec"],
            "RayService": lambda: spec["rayClusterConfig"]}[obj["kind"]]()


def pod_templates(obj: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Every pod template of a KubeRay object: head, worker groups, and a RayJob's submitter."""
    spec = obj["spec"]
    cluster = ray_cluster_of(obj)
    templates = [cluster["headGroupSpec"]["template"], *(g["template"] for g in cluster["workerGroupSpecs"])]
    return templates + ([spec["submitterPodTemplate"]] if "submitterPodTemplate" in spec else [])


def network_policy(obj: Mapping[str, Any], spec: ClusterSpec) -> dict[str, Any]:
    """The NetworkPolicy of ``obj``, its ports by name from the pod templates; apply it first, so no pod runs open."""
    by_name = {p.name: p for p in ray_ports.ALL}
    declared = {port["name"] for template in pod_templates(obj) for container in template["spec"]["containers"]
                for port in container.get("ports", [])}
    meta = obj["metadata"]
    labels = {k: v for k, v in meta.get("labels", {}).items() if k in (names.WORKLOAD_LABEL, names.SLICE_LABEL)}
    return netpol.network_policy(obj["kind"], meta["name"], meta["namespace"], [by_name[n] for n in sorted(declared)],
                                 spec.security, subnet_cidr=spec.network.subnet_cidr,
                                 control_plane_cidr=spec.network.master_cidr, labels=labels)


def owned_by(policy: Mapping[str, Any], owner: Mapping[str, Any]) -> dict[str, Any]:
    """``policy`` owned by the applied ``owner`` (with its uid), so the garbage collector deletes it with it; neither
    the controller nor blocking the owner's deletion (true needs delete permission on the owner, else 422).
    Source: https://kubernetes.io/docs/reference/kubernetes-api/common-definitions/object-meta/ (OwnerReference)"""
    meta = owner["metadata"]
    ref = {"apiVersion": owner["apiVersion"], "kind": owner["kind"], "name": meta["name"], "uid": meta["uid"],
           "blockOwnerDeletion": False, "controller": False}
    return {**policy, "metadata": {**policy["metadata"], "ownerReferences": [ref]}}


def with_network_policies(objs: Sequence[Mapping[str, Any]], spec: ClusterSpec) -> list[dict[str, Any]]:
    """Each KubeRay object preceded by its NetworkPolicy: the order to apply (and print) them in."""
    return [doc for obj in objs for doc in (network_policy(obj, spec), dict(obj))]


def smoke_jobs(spec: ClusterSpec, *, images: ImageOf, service_account: str, bucket: str,
               namespace: str = "default", py_modules: str | None = None, image: str | None = None,
               suffix: str = "") -> list[dict[str, Any]]:
    """The RayJobs of :func:`smoke_runs.smoke_workloads`; job ``i`` selects copy ``i``'s pool
    (docs/FACTS.md#kuberay-builders)."""
    jobs = []
    for run in smoke_runs.smoke_workloads(spec, image):
        job = workload_manifest(spec, run.work, images=images, service_account=service_account, bucket=bucket,
                                namespace=namespace, py_modules=py_modules, name=names.run_name(run.base, suffix))
        if not spec.cluster.autopilot:
            for group in ray_cluster_of(job)["workerGroupSpecs"]:
                group["template"]["spec"]["nodeSelector"][names.NODE_POOL_LABEL] = run.pool
        jobs.append(job)
    return jobs


def dcn_smoke_jobs(spec: ClusterSpec, *, images: ImageOf, service_account: str, bucket: str,
                   namespace: str = "default", py_modules: str | None = None, image: str | None = None,
                   suffix: str = "") -> list[dict[str, Any]]:
    """The RayJobs of :func:`smoke_runs.dcn_smoke_workloads`: ``MEGASCALE_NUM_SLICES=N``, ``--dcn-slices N``."""
    return [workload_manifest(spec, work, images=images, service_account=service_account, bucket=bucket,
                              namespace=namespace, py_modules=py_modules, name=names.run_name(base, suffix),
                              args=("--dcn-slices", str(work.slices_spanned)),
                              worker_env=multislice.slice_env(work.slices_spanned))
            for base, work in smoke_runs.dcn_smoke_workloads(spec, image)]
