"""What the pods of a cluster running a vLLM engine (a RayService, a ``batch`` RayJob) get beside KubeRay's own:
room on the node for the weights, vLLM's XLA compilation cache, the Hugging Face token and the serving API key as
read-only files."""

from __future__ import annotations

from typing import Any

from raytpu.core.common.names import GCS_MOUNT_PATH
from raytpu.core.specs.runtime import xla_cache
from raytpu.core.specs.serving import node_disk
from raytpu.core.specs.spec import SecretKeyRef, WorkloadSpec

XLA_CACHE_VOLUME = "xla-cache"
SERVE_API_KEY_VOLUME = "serve-api-key"
HF_TOKEN_VOLUME = "hf-token"
SERVE_API_KEY_FILE = "/etc/raytpu/serve-api-key/api-key"
"""Where a RayService's pods see ``security.serve_api_key_secret``'s ``api-key`` (the ingress replica may land on
any of them)."""


def add_api_key(pod_spec: dict[str, Any], secret: str) -> None:
    """Mounts Secret ``secret``'s ``api-key`` read-only at :data:`SERVE_API_KEY_FILE` (readable by the pods' group,
    ``fsGroup``; a file, not an env var, which every child process and crash dump would carry). The ingress reads
    it when its replica starts: a rotated key takes effect with the next replica (a Serve config change or restart).
    """
    directory, _, key = SERVE_API_KEY_FILE.rpartition("/")
    pod_spec.setdefault("volumes", []).append({"name": SERVE_API_KEY_VOLUME, "secret": {
        "secretName": secret, "items": [{"key": key, "path": key}], "defaultMode": 0o440}})
    pod_spec["containers"][0].setdefault("volumeMounts", []).append(
        {"name": SERVE_API_KEY_VOLUME, "mountPath": directory, "readOnly": True})


HF_TOKEN_FILE = "/etc/raytpu/hf-token/token"
"""Where every Ray container sees ``hf_token_secret``'s key; ``HF_TOKEN_PATH`` names it to huggingface_hub, which
reads the token there when no ``HF_TOKEN`` is set. Source: huggingface_hub 2.4.0 ``constants.HF_TOKEN_PATH``,
``utils._auth.get_token`` (docs/FACTS.md#kuberay-tpu-pods)."""


def _add_hf_token(pod_spec: dict[str, Any], secret: SecretKeyRef) -> None:
    """Mounts Secret key ``secret`` read-only at :data:`HF_TOKEN_FILE` in the pod's Ray container, named by
    ``HF_TOKEN_PATH``: the head (where Serve's controller builds the app) and every worker (where the engine downloads
    the weights) alike. A file, as the API key: no child process or crash dump carries it (checkov CKV_K8S_35)."""
    directory, _, name = HF_TOKEN_FILE.rpartition("/")
    pod_spec.setdefault("volumes", []).append({"name": HF_TOKEN_VOLUME, "secret": {
        "secretName": secret.name, "items": [{"key": secret.key, "path": name}], "defaultMode": 0o440}})
    container = pod_spec["containers"][0]
    container.setdefault("volumeMounts", []).append({"name": HF_TOKEN_VOLUME, "mountPath": directory, "readOnly": True})
    container.setdefault("env", []).append({"name": "HF_TOKEN_PATH", "value": HF_TOKEN_FILE})


def _add_local_xla_cache(pod_spec: dict[str, Any]) -> None:
    """A pod without the kit's bucket: an emptyDir (node-local, gone with the pod) where the cache folders lie."""
    pod_spec.setdefault("volumes", []).append({"name": XLA_CACHE_VOLUME, "emptyDir": {}})
    pod_spec["containers"][0].setdefault("volumeMounts", []).append(
        {"name": XLA_CACHE_VOLUME, "mountPath": f"{GCS_MOUNT_PATH}/{xla_cache.PREFIX}"})


def _request_disk(pod_spec: dict[str, Any], need: node_disk.EngineDisk) -> None:
    """An ``ephemeral-storage`` request of what the engine writes per host: the scheduler places the pod only where
    that much is allocatable, and Autopilot (whose default request is 1 GiB) provisions for it. No limit: an
    estimate must not evict the pod. Source: https://cloud.google.com/kubernetes-engine/docs/concepts/
    autopilot-resource-requests ("Default resource requests": ephemeral storage 1 GiB)."""
    resources = pod_spec["containers"][0].setdefault("resources", {})
    resources.setdefault("requests", {})["ephemeral-storage"] = need.request


def add_engine_needs(cluster: dict[str, Any], work: WorkloadSpec, bucket: str | None) -> None:
    """A cluster running a vLLM engine (a RayService, a ``batch`` RayJob): the TPU workers request room for what
    the engine writes per host (:mod:`raytpu.core.specs.serving.node_disk`, models of the built-in table) and, without
    the kit's ``bucket`` mounted, keep the XLA cache on an emptyDir (with it, :mod:`raytpu.core.specs.runtime.xla_cache`
    puts it in the bucket); the Hugging Face token on every pod."""
    worker = cluster["workerGroupSpecs"][0]["template"]["spec"]
    need = node_disk.engine_disk(work, bucket)
    if need is not None:
        _request_disk(worker, need)
    if bucket is None:
        _add_local_xla_cache(worker)
    if work.hf_token_secret is not None:
        for group in (cluster["headGroupSpec"], *cluster["workerGroupSpecs"]):
            _add_hf_token(group["template"]["spec"], work.hf_token_secret)
