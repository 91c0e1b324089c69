"""Ray Serve LLM (vLLM) on whole TPU slices: one LLMConfig builder for RayService and local slice
(docs/FACTS.md#ray-serve-serving). Standard library only. Source: Ray 2.60 Serve LLM ``TPUAccelerator``."""

from __future__ import annotations

import contextlib
import io
import json
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from raytpu.core.common.errors import InvalidInput
from raytpu.core.common.names import GCS_MOUNT_PATH
from raytpu.core.specs.runtime import xla_cache
from raytpu.core.specs.serving import chat_template
from raytpu.core.specs.serving.vllm_rules import (
    DEFAULT_MAX_MODEL_LEN,
    DEFAULT_MODEL,
    VLLM_VERSION,
    jax_devices,
    parallel_sizes,
)

if TYPE_CHECKING:
    from raytpu.core.specs.spec import WorkloadSpec

BUILDER = "ray.serve.llm:build_openai_app"
APP_NAME = "llm"
SERVE_PORT = 8000
"""Serve's HTTP proxy port: KubeRay's ``<name>-serve-svc`` targets it (KubeRay ``DefaultServingPort``)."""


def engine_cli_args(kwargs: Mapping[str, Any]) -> list[str]:
    """``engine_kwargs`` as the command line of ``vllm serve`` (``--max-model-len 512 --enforce-eager``)."""
    argv: list[str] = []
    for key, value in kwargs.items():
        flag = "--" + key.replace("_", "-")
        if value is None:
            continue
        if value is True:
            argv.append(flag)
        elif value is False:
            argv.append("--no-" + key.replace("_", "-"))
        elif isinstance(value, Mapping):
            argv += [flag, json.dumps(value)]
        elif isinstance(value, list | tuple):
            argv += [flag, *(str(v) for v in value)]
        else:
            argv += [flag, str(value)]
    return argv


def parse_with_vllm(kwargs: Mapping[str, Any], field: str = "engine_kwargs") -> dict[str, Any]:
    """Names and values of ``kwargs`` through vLLM's own CLI parser (needs vLLM); InvalidInput with its message."""
    from vllm.engine.arg_utils import AsyncEngineArgs
    from vllm.entrypoints.launchers.cli_args import FrontendArgs
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    parser = FrontendArgs.add_cli_args(AsyncEngineArgs.add_cli_args(FlexibleArgumentParser(prog="vllm")))
    parser.exit_on_error = False
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err):
            parsed = parser.parse_args(engine_cli_args(kwargs))
    except (SystemExit, Exception) as exc:  # argparse reports through SystemExit(2) or ArgumentError
        text = (err.getvalue().strip().splitlines() or [str(exc)])[-1]
        raise InvalidInput(field, f"rejected by vLLM {VLLM_VERSION}'s argument parser: {text}",
                           "values vLLM's `vllm serve --help` accepts") from exc
    return vars(parsed)


def model_source_in_pod(source: str, mounted_bucket: str | None, mount_path: str = GCS_MOUNT_PATH) -> str:
    """Where a pod reads ``source``: the mounted bucket in place (GCS FUSE), another bucket as ``gs://`` (download)."""
    bucket, _, path = source.removeprefix("gs://").partition("/")
    if source.startswith("gs://") and mounted_bucket is not None and bucket == mounted_bucket:
        return f"{mount_path.rstrip('/')}/{path.strip('/')}"
    return source


# -------------------------------------------------------------------------------------------- the config


def llm_config(work: WorkloadSpec, *, mounted_bucket: str | None = None) -> dict[str, Any]:
    """Ray Serve LLM's ``LLMConfig`` (a plain dict) of serving workload ``work``: one whole slice per replica."""
    plan = work.plan
    model = work.model or DEFAULT_MODEL
    extra = dict(work.engine_kwargs or {})
    tp, _ = parallel_sizes(extra, jax_devices(plan))
    engine: dict[str, Any] = {"tensor_parallel_size": tp, "max_model_len": work.max_model_len or DEFAULT_MAX_MODEL_LEN}
    env = xla_cache.engine_env(xla_cache.cache_dir(work.model_source or model, plan,
                                                  work.vllm_version or VLLM_VERSION))
    if not plan.single_host:
        engine["distributed_executor_backend"] = "ray"
        env["TPU_MULTIHOST_BACKEND"] = "ray"
    return {
        "model_loading_config": {"model_id": model,
                                 "model_source": model_source_in_pod(work.model_source or model, mounted_bucket)},
        "accelerator_type": plan.ray_accelerator_type,
        "accelerator_config": {"kind": "tpu", "topology": plan.topology},
        "engine_kwargs": engine | chat_template.engine_kwargs(work.chat_template_kwargs) | extra,
        "deployment_config": {"autoscaling_config": {"min_replicas": work.slices_spanned,
                                                     "max_replicas": work.slices_spanned}},
        "runtime_env": {"env_vars": env},
    }


LOCAL_MAX_MODEL_LEN = 1024

CPU_TWIN: dict[str, Any] = {
    "accelerator_type": None,
    "accelerator_config": {"kind": "cpu"},
    "engine_kwargs": {"tensor_parallel_size": 1, "pipeline_parallel_size": 1, "enforce_eager": True,
                      "max_model_len": LOCAL_MAX_MODEL_LEN, "distributed_executor_backend": None},
    "env_vars": {"VLLM_CPU_KVCACHE_SPACE": "1", "VLLM_CPU_OMP_THREADS_BIND": "nobind", "OMP_NUM_THREADS": "1",
                 "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "VLLM_NO_USAGE_STATS": "1"},
}
"""Everything the local CPU twin changes in :func:`llm_config`'s TPU config (why each:
docs/FACTS.md#ray-serve-serving)."""


def cpu_twin(config: Mapping[str, Any], model: str, model_path: str) -> dict[str, Any]:
    """The TPU ``config`` (:func:`llm_config`) with :data:`CPU_TWIN` applied, serving ``model`` from ``model_path``."""
    twin = json.loads(json.dumps(config))
    twin["model_loading_config"] = {"model_id": model, "model_source": model_path}
    for key in ("accelerator_type", "accelerator_config"):
        if CPU_TWIN[key] is None:
            twin.pop(key, None)
        else:
            twin[key] = CPU_TWIN[key]
    engine = twin["engine_kwargs"]
    for key, value in CPU_TWIN["engine_kwargs"].items():
        if value is None:
            engine.pop(key, None)
        else:
            engine[key] = value
    twin["runtime_env"] = {"env_vars": dict(CPU_TWIN["env_vars"])}
    return twin


SERVE_HOT_PATH_ENV: dict[str, str] = {
    "RAY_SERVE_RUN_USER_CODE_IN_SEPARATE_THREAD": "0",
    "RAY_SERVE_RUN_ROUTER_IN_SEPARATE_LOOP": "0",
    "RAY_SERVE_REQUEST_PATH_LOG_BUFFER_SIZE": "1000",
    "RAY_SERVE_LOG_TO_STDERR": "0",
}
"""Environment of every serving Ray process: the kit's part of ``RAY_SERVE_THROUGHPUT_OPTIMIZED``
(docs/FACTS.md#ray-serve-serving).
Source: Ray 2.60 ``ray/serve/_private/constants.py`` ``RAY_SERVE_THROUGHPUT_OPTIMIZED``."""


INGRESS = "raytpu.workloads.openai_ingress:OpenAIErrorIngress"
"""Ray's OpenAI ingress with OpenAI's error shape for an unknown model (:mod:`raytpu.workloads.openai_ingress`)."""

DIRECT_BUILDER = "raytpu.workloads.openai_ingress:build_direct_app"
"""The app where :func:`streams_direct`: Ray's ``LLMServer`` as ingress, serving vLLM's OpenAI app via HAProxy."""

DIRECT_STREAMING_ENV = {"RAY_SERVE_ENABLE_HA_PROXY": "1", "RAY_SERVE_EXPERIMENTAL_PIP_HAPROXY": "1"}
"""Environment where :func:`streams_direct`: Serve's HAProxy (docs/FACTS.md#ray-serve-serving).
Source: https://docs.ray.io/en/latest/serve/advanced-guides/haproxy.html"""

API_KEY_FILE_ENV = "RAYTPU_SERVE_API_KEY_FILE"
"""Names the API key's file to the kit's ``LLMServer`` (set in the LLM config's ``runtime_env``)."""


def streams_direct(work: WorkloadSpec, *, local: bool) -> bool:
    """Whether the app is :data:`DIRECT_BUILDER`'s: locally and on single-host slices
    (docs/FACTS.md#ray-serve-serving)."""
    return local or work.plan.single_host


PROXY_LOCATION = "EveryNode"
"""Where Serve runs its proxies (default, stated). Source: Ray 2.60 ``ray.serve.config.ProxyLocation``
(docs/FACTS.md#ray-serve-serving)."""


def ingress_deployment_config(work: WorkloadSpec) -> dict[str, Any]:
    """The ingress's options on GKE: one replica per TPU host, so each passes KubeRay's probe
    (docs/FACTS.md#ray-serve-serving).
    Source: KubeRay v1.7.0 ``initLivenessAndReadinessProbe`` (docs/FACTS.md#vllm-serve-llm-tpu)."""
    return {"num_replicas": work.plan.hosts * work.slices_spanned, "max_replicas_per_node": 1}


def serve_config(work: WorkloadSpec, *, mounted_bucket: str | None = None, app_name: str = APP_NAME,
                 cpu_model: tuple[str, str] | None = None, py_modules: tuple[str, ...] = (),
                 api_key_file: str | None = None) -> dict[str, Any]:
    """serveConfigV2: one OpenAI app of :func:`llm_config`; ``cpu_model``: the local twin; ``api_key_file``: a key."""
    config = llm_config(work, mounted_bucket=mounted_bucket)
    if cpu_model is not None:
        config = cpu_twin(config, *cpu_model)
    builder = BUILDER
    if streams_direct(work, local=cpu_model is not None):
        builder = DIRECT_BUILDER
        if api_key_file:
            config["runtime_env"]["env_vars"][API_KEY_FILE_ENV] = api_key_file
        args: dict[str, Any] = {"llm_configs": [config]}
    else:
        ingress: dict[str, Any] = {"ingress_cls": INGRESS}
        if api_key_file:
            ingress["ingress_extra_kwargs"] = {"api_key_file": api_key_file}
        args = {"llm_configs": [config], "ingress_cls_config": ingress,
                "ingress_deployment_config": ingress_deployment_config(work)}
    app: dict[str, Any] = {"name": app_name, "route_prefix": "/", "import_path": builder, "args": args}
    if py_modules:
        app["runtime_env"] = {"py_modules": list(py_modules)}
    return {"proxy_location": PROXY_LOCATION, "applications": [app]}
