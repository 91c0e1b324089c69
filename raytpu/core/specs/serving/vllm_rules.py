"""What vLLM and Ray Serve LLM accept of a serving workload, checked offline: the rules the spec runs.

The slice, the model source and the engine kwargs, from facts recorded here by symbol and version, so ``raytpu
validate`` needs neither vLLM nor Ray; the serve tier checks the records (docs/FACTS.md#vllm-rules). Stdlib and specs
only.
"""

from __future__ import annotations

import difflib
import functools
import operator
from collections.abc import Mapping
from typing import Any, NamedTuple

from raytpu.core.common import errors
from raytpu.core.common.errors import InvalidInput
from raytpu.core.tpu.catalog import RAY_VERSION, chips_in, generation
from raytpu.core.tpu.models import ModelShape, by_hf_id
from raytpu.core.tpu.plan import SlicePlan

VLLM_VERSION = "0.29.0"
"""The vLLM that Ray 2.60's ``ray[llm]`` extra pins (``vllm[audio]==0.29.0`` in its METADATA)."""
DEFAULT_MODEL = "Qwen/Qwen3-0.6B"
"""Small and ungated; its 16 heads cap TP at 16 JAX devices unless pipeline stages split a larger slice."""


JAX_DEVICES_PER_CHIP: dict[str, int] = {"tpu7x": 2}
"""JAX devices per chip where it is not 1 (Ironwood's two TensorCores; not ``tensorcores_per_chip``).
Source: jax 0.10.2 ``jax._src.mesh_utils._get_physical_tpu_mesh`` (docs/FACTS.md#vllm-devices-per-chip,
docs/FACTS.md#vllm-serve-llm-tpu and docs/FACTS.md#vllm-rules)."""
DEFAULT_MAX_MODEL_LEN = 4096
MIN_MAX_MODEL_LEN = 16
KIT_ENGINE_ARGS = {"model": "the workload's model_source", "served_model_name": "the workload's model",
                   "max_model_len": "the workload's max_model_len"}
"""Engine args set from the workload's own fields (Ray Serve LLM rejects them); the value names that field."""

VLLM_ENGINE_ARGS: tuple[str, ...] = (
    "_api_process_count", "_api_process_rank", "additional_config", "aggregate_engine_logging", "all2all_backend",
    "allow_deprecated_quantization", "allowed_local_media_path", "allowed_media_domains", "async_scheduling",
    "attention_backend", "attention_config", "block_size", "code_revision", "collect_detailed_traces",
    "compilation_config", "config_format", "convert", "cp_kv_cache_interleave_size",
    "cpu_distributed_timeout_seconds", "cpu_offload_gb", "cpu_offload_params", "cudagraph_capture_sizes",
    "cudagraph_metrics", "data_parallel_address", "data_parallel_backend", "data_parallel_external_lb",
    "data_parallel_hybrid_lb", "data_parallel_multi_port_external_lb", "data_parallel_rank",
    "data_parallel_rpc_port", "data_parallel_size", "data_parallel_size_local", "data_parallel_start_rank",
    "dbo_decode_token_threshold", "dbo_prefill_token_threshold", "dcp_comm_backend", "dcp_kv_cache_interleave_size",
    "dcp_q_replicate", "decode_context_parallel_size", "default_mm_loras", "device_ids", "diffusion_config",
    "disable_cascade_attn", "disable_chunked_mm_input", "disable_custom_all_reduce",
    "disable_hybrid_kv_cache_manager", "disable_log_stats", "disable_nccl_for_dp_synchronization",
    "disable_sliding_window", "distributed_executor_backend", "distributed_timeout_seconds", "download_dir",
    "dtype", "ec_manager_config", "ec_transfer_config", "enable_batch_sharded_sampling",
    "enable_bf16x3_router_gemm", "enable_chunked_prefill", "enable_cumem_allocator", "enable_dbo",
    "enable_elastic_ep", "enable_ep_weight_filter", "enable_eplb", "enable_expert_parallel",
    "enable_fault_tolerance", "enable_flashinfer_autotune", "enable_layerwise_nvtx_tracing", "enable_log_requests",
    "enable_logging_iteration_details", "enable_lora", "enable_mamba_cache_stochastic_rounding",
    "enable_mfu_metrics", "enable_mixed_moe_lora_format", "enable_mm_embeds", "enable_mm_processor_stats",
    "enable_moe_shared_loras", "enable_prefix_caching", "enable_prompt_embeds", "enable_return_routed_experts",
    "enable_sleep_mode", "enable_tower_connector_lora", "enable_trace_replay", "enforce_eager", "eplb_config",
    "expert_placement_strategy", "fail_on_environ_validation", "fault_tolerance_config", "fully_sharded_loras",
    "gdn_prefill_backend", "generation_config", "gpu_memory_utilization", "hf_config_path", "hf_overrides",
    "hf_token", "ignore_patterns", "interleave_mm_strings", "io_processor_plugin", "ir_op_priority",
    "jit_monitor_mode", "jit_monitor_verbose", "kda_prefill_backend", "kernel_config", "kv_cache_dtype",
    "kv_cache_dtype_skip_layers", "kv_cache_memory_bytes", "kv_cache_metrics", "kv_cache_metrics_sample",
    "kv_events_config", "kv_offloading_backend", "kv_offloading_size", "kv_sharing_fast_prefill",
    "kv_transfer_config", "language_model_only", "limit_mm_per_prompt", "linear_backend", "load_format",
    "logits_processors", "logprobs_mode", "long_prefill_token_threshold", "lora_dtype", "lora_target_modules",
    "mamba_backend", "mamba_block_size", "mamba_cache_dtype", "mamba_cache_mode", "mamba_cache_philox_rounds",
    "mamba_config", "mamba_ssm_cache_dtype", "mamba_ssu_algorithm", "master_addr", "master_port", "max_cpu_loras",
    "max_cudagraph_capture_size", "max_logprobs", "max_lora_rank", "max_loras", "max_model_len",
    "max_num_batched_tokens", "max_num_queued_reqs", "max_num_queued_tokens", "max_num_scheduled_tokens",
    "max_num_seqs", "max_parallel_loading_workers", "media_io_kwargs", "mm_device_do_normalize",
    "mm_encoder_attn_backend", "mm_encoder_attn_dtype", "mm_encoder_fp8_scale_path",
    "mm_encoder_fp8_scale_save_margin", "mm_encoder_fp8_scale_save_path", "mm_encoder_only", "mm_encoder_tp_mode",
    "mm_hasher_algorithm", "mm_ipc_gpu_memory_gb", "mm_processor_cache_gb", "mm_processor_cache_type",
    "mm_processor_device", "mm_processor_kwargs", "mm_shm_cache_max_object_size_mb", "mm_tensor_ipc", "model",
    "model_class_overrides", "model_impl", "model_loader_extra_config", "model_weights", "moe_backend", "nnodes",
    "node_rank", "num_gpu_blocks_override", "numa_bind", "numa_bind_cpus", "numa_bind_nodes", "offload_backend",
    "offload_group_size", "offload_num_in_group", "offload_params", "offload_prefetch_step", "optimization_level",
    "otlp_traces_endpoint", "override_generation_config", "per_request_spec_decode_metrics", "performance_mode",
    "pipeline_parallel_size", "pooler_config", "prefill_context_parallel_size", "prefill_schedule_interval",
    "prefix_cache_retention_interval", "prefix_caching_hash_algo", "prefix_match_unit", "profiler_config",
    "pt_load_map_location", "quantization", "quantization_config", "ray_workers_use_nsight", "reasoning_config",
    "reasoning_parser", "reasoning_parser_plugin", "renderer_num_workers", "replayssm_buffer_len",
    "return_sampling_mask", "revision", "runner", "safetensors_load_strategy", "safetensors_prefetch_block_size",
    "safetensors_prefetch_num_threads", "scheduler_cls", "scheduler_reserve_full_isl", "scheduling_policy", "seed",
    "served_model_name", "show_hidden_metrics_for_version", "shutdown_timeout", "skip_mm_profiling",
    "skip_tokenizer_init", "spec_method", "spec_model", "spec_tokens", "specialize_active_lora",
    "speculative_config", "stream_interval", "structured_outputs_config", "tensor_parallel_size", "tokenizer",
    "tokenizer_mode", "tokenizer_revision", "tokens_only", "trust_remote_code", "ubatch_size", "use_fp64_gumbel",
    "use_replayssm", "use_tqdm_on_load", "video_pruning_method", "video_pruning_rate", "watermark",
    "weight_transfer_config", "worker_cls", "worker_extension_cls",
)
"""Field names of vLLM 0.29.0's ``AsyncEngineArgs`` (the keys Ray Serve LLM passes to the engine), recorded for
``raytpu validate``; the serve tier compares them with vLLM's dataclass and CLI parser."""

VLLM_FRONTEND_ARGS: tuple[str, ...] = (
    "allow_credentials", "allowed_headers", "allowed_methods", "allowed_origins", "api_key", "chat_template",
    "chat_template_content_format", "cohere_format", "cohere_is_reasoning_model", "data_parallel_supervisor_port",
    "default_chat_template_kwargs", "disable_access_log_for_endpoints", "disable_fastapi_docs",
    "disable_uvicorn_access_log", "dp_supervisor_probe_failure_threshold", "dp_supervisor_probe_interval_s",
    "dp_supervisor_probe_timeout_s", "enable_auto_tool_choice", "enable_flash_late_interaction",
    "enable_force_include_usage", "enable_log_deltas", "enable_log_outputs", "enable_offline_docs",
    "enable_per_request_metrics", "enable_prompt_tokens_details", "enable_request_id_headers",
    "enable_server_load_tracking", "enable_ssl_refresh", "enable_tokenizer_info_endpoint",
    "exclude_tools_when_tool_choice_none", "fingerprint_mode", "fingerprint_value", "h11_max_header_count",
    "h11_max_incomplete_event_size", "host", "log_config_file", "log_error_stack", "lora_modules", "max_log_len",
    "middleware", "port", "response_role", "return_tokens_as_token_ids", "root_path", "sse_keep_alive_interval",
    "ssl_ca_certs", "ssl_cert_reqs", "ssl_certfile", "ssl_ciphers", "ssl_keyfile", "tokens_only",
    "tool_call_parser", "tool_parser_plugin", "tool_server", "trust_request_chat_template", "uds",
    "uvicorn_log_level",
)
"""Field names of vLLM 0.29.0's ``FrontendArgs``: Ray Serve LLM accepts these in ``engine_kwargs`` too."""

IMAGE_VLLM_NOT_YET: tuple[str, ...] = (
    "cohere_format", "cohere_is_reasoning_model", "dcp_q_replicate", "ec_manager_config",
    "enable_batch_sharded_sampling", "enable_bf16x3_router_gemm", "enable_fault_tolerance", "enable_moe_shared_loras",
    "enable_per_request_metrics", "enable_trace_replay", "fault_tolerance_config", "jit_monitor_mode",
    "kda_prefill_backend", "mamba_ssu_algorithm", "max_num_queued_reqs", "max_num_queued_tokens",
    "max_num_scheduled_tokens", "mm_device_do_normalize", "mm_hasher_algorithm", "mm_ipc_gpu_memory_gb",
    "mm_processor_device", "model_class_overrides", "per_request_spec_decode_metrics",
    "prefix_cache_retention_interval", "prefix_match_unit", "replayssm_buffer_len", "return_sampling_mask",
    "sse_keep_alive_interval", "use_replayssm", "video_pruning_method",
)
"""Names of vLLM 0.29.0 the serving image's vLLM (between 0.24 and 0.25) lacks; :data:`IMAGE_VLLM_ONLY`: the reverse.
Source: vLLM v0.24.0 ``EngineArgs``/``FrontendArgs`` fields, the nearest tag (docs/FACTS.md#vllm-engine-args)."""
IMAGE_VLLM_ONLY: tuple[str, ...] = (
    "calculate_kv_scales", "max_long_partial_prefills", "max_num_partial_prefills", "override_attention_dtype",
)

IMAGE_VLLM_VERSION = "9969466a597810db6e06b4942dd6cc2086885ee2"
"""The vLLM of the kit's serving image, as its ``versions.toml`` records it (the core zip carries no image files)."""

IMAGE_RAY_VERSION = "2.56.0"
"""The Ray of the kit's serving image (``versions.toml``): what ``serve`` and ``batch`` pods run on GKE."""


ENGINE_ARG_NAMES: dict[str, frozenset[str]] = {
    VLLM_VERSION: frozenset(VLLM_ENGINE_ARGS) | frozenset(VLLM_FRONTEND_ARGS),
    # the serving image's vLLM: v0.24.0's names
    IMAGE_VLLM_VERSION: (frozenset(VLLM_ENGINE_ARGS) | frozenset(VLLM_FRONTEND_ARGS)
                         | frozenset(IMAGE_VLLM_ONLY)) - frozenset(IMAGE_VLLM_NOT_YET),
}
"""The engine_kwargs names each vLLM the kit runs accepts: 0.29.0 where Ray 2.60 runs, the image's commit on GKE."""


_LIMITS = (("ge", ">=", operator.ge), ("gt", ">", operator.gt), ("le", "<=", operator.le), ("lt", "<", operator.lt))


class Bound(NamedTuple):
    """A numeric engine arg's type and limits as vLLM's config dataclass field declares them (pydantic ``Field``'s
    ``ge``/``gt``/``le``/``lt``): a value past them fails the engine's start, minutes into a deploy. ``optional``:
    ``EngineArgs`` takes None (vLLM fills the value in); ``needs``: the engine arg without which vLLM builds no such
    config."""

    number: type
    ge: float | None = None
    gt: float | None = None
    le: float | None = None
    lt: float | None = None
    optional: bool = False
    needs: str | None = None

    def problem(self, value: Any) -> str | None:
        """Why ``value`` breaks the bound (None: it does not). A boolean is 0 or 1 (pydantic's lax mode); a string is
        refused: vLLM compares some args raw before pydantic reads them (``"1"`` as ``pipeline_parallel_size`` is a
        TypeError at the engine's start)."""
        if value is None and self.optional:
            return None
        if isinstance(value, str):
            return "is a string, not a number"
        if not isinstance(value, (int, float)):
            return "is not a number"
        if self.number is int and isinstance(value, float) and not value.is_integer():
            return "is not a whole number"
        broken = [f"{sign} {limit:g}" for name, sign, holds in _LIMITS
                  if (limit := getattr(self, name)) is not None and not holds(value, limit)]
        return f"is not {' and '.join(broken)}" if broken else None

    def valid(self) -> str:
        limits = [f"{sign} {limit:g}" for name, sign, _ in _LIMITS if (limit := getattr(self, name)) is not None]
        kind = "an integer" if self.number is int else "a number"
        return f"{kind} {' and '.join(limits)}" + (", or null" if self.optional else "")


ENGINE_ARG_BOUNDS_0_29: dict[str, Bound] = {
    "_api_process_count": Bound(int, gt=0), "_api_process_rank": Bound(int, ge=-1),
    "block_size": Bound(int, gt=0, optional=True), "cpu_offload_gb": Bound(float, ge=0),
    "data_parallel_rank": Bound(int, ge=0, optional=True),
    "data_parallel_rpc_port": Bound(int, ge=1, le=65535, optional=True), "data_parallel_size": Bound(int, ge=1),
    "data_parallel_size_local": Bound(int, ge=0, optional=True), "dbo_decode_token_threshold": Bound(int, ge=0),
    "dbo_prefill_token_threshold": Bound(int, ge=0), "decode_context_parallel_size": Bound(int, ge=1),
    "gpu_memory_utilization": Bound(float, gt=0, le=1), "kv_cache_metrics_sample": Bound(float, gt=0, le=1),
    "long_prefill_token_threshold": Bound(int, ge=0), "mamba_block_size": Bound(int, gt=0, optional=True),
    "max_logprobs": Bound(int, ge=-1), "max_loras": Bound(int, ge=1, needs="enable_lora"),
    "max_num_batched_tokens": Bound(int, ge=1, optional=True),
    "max_num_queued_reqs": Bound(int, ge=0, optional=True), "max_num_queued_tokens": Bound(int, ge=0, optional=True),
    "max_num_scheduled_tokens": Bound(int, ge=0, optional=True), "max_num_seqs": Bound(int, ge=1, optional=True),
    "max_parallel_loading_workers": Bound(int, ge=1, optional=True),
    "nnodes": Bound(int, ge=1), "node_rank": Bound(int, ge=0), "offload_group_size": Bound(int, ge=0),
    "offload_num_in_group": Bound(int, ge=1), "offload_prefetch_step": Bound(int, ge=0),
    "pipeline_parallel_size": Bound(int, ge=1), "prefill_context_parallel_size": Bound(int, ge=1),
    "prefill_schedule_interval": Bound(int, ge=1), "prefix_cache_retention_interval": Bound(int, ge=0, optional=True),
    "prefix_match_unit": Bound(int, gt=0, optional=True), "replayssm_buffer_len": Bound(int, gt=0),
    "safetensors_prefetch_block_size": Bound(int, ge=1), "safetensors_prefetch_num_threads": Bound(int, ge=1),
    "shutdown_timeout": Bound(int, ge=0), "stream_interval": Bound(int, ge=1), "tensor_parallel_size": Bound(int, ge=1),
    "ubatch_size": Bound(int, ge=0), "watermark": Bound(float, ge=0, lt=1),
}
"""vLLM 0.29.0's bounded engine args (the kit's own, ``max_model_len``, and :data:`MULTIMODAL_ENGINE_ARGS` aside).
Source: vllm 0.29.0 ``vllm/config/*.py`` pydantic fields, e.g. ``SchedulerConfig.stream_interval`` (the serve tier
reads them back; docs/FACTS.md#vllm-engine-arg-bounds)."""

MULTIMODAL_ENGINE_ARGS = ("mm_encoder_fp8_scale_save_margin", "mm_ipc_gpu_memory_gb", "mm_processor_cache_gb",
                          "mm_shm_cache_max_object_size_mb", "video_pruning_rate")
"""Bounded on ``MultiModalConfig``, which vLLM builds only for a multimodal model (``ModelConfig.__post_init__``):
not checked, as the kit cannot tell offline whether a model is one."""

IMAGE_VLLM_UNBOUNDED = ("data_parallel_rpc_port", "long_prefill_token_threshold", "max_logprobs")
"""Engine args the image's vLLM has without 0.29.0's bound. Source: vLLM v0.24.0 sdist ``vllm/config/*.py``."""

ENGINE_ARG_BOUNDS: dict[str, dict[str, Bound]] = {
    VLLM_VERSION: ENGINE_ARG_BOUNDS_0_29,
    IMAGE_VLLM_VERSION: {name: bound for name, bound in ENGINE_ARG_BOUNDS_0_29.items()
                         if name in ENGINE_ARG_NAMES[IMAGE_VLLM_VERSION] and name not in IMAGE_VLLM_UNBOUNDED}
    | {"max_long_partial_prefills": Bound(int, ge=1), "max_num_partial_prefills": Bound(int, ge=1)},
}
"""The bounds each vLLM the kit runs puts on engine args, by version as :data:`ENGINE_ARG_NAMES`."""


def vllm_label(version: str) -> str:
    """``0.29.0``, or a commit by its short form (``commit 9969466``)."""
    return f"commit {version[:7]}" if len(version) == 40 else version




# ------------------------------------------------------------------------------------------- engine kwargs


def jax_devices(plan: SlicePlan) -> int:
    """The JAX devices of a slice a replica's engine shards over (chips x :data:`JAX_DEVICES_PER_CHIP`).
    Source: tpu-inference ``TPUWorker.init_device`` at the serving image's pin (docs/FACTS.md#vllm-serve-llm-tpu,
    docs/FACTS.md#vllm-rules)."""
    return plan.chips * JAX_DEVICES_PER_CHIP.get(plan.generation, 1)


def parallel_sizes(kwargs: Mapping[str, Any] | None, devices: int) -> tuple[Any, Any]:
    """(tensor_parallel_size, pipeline_parallel_size) of a replica: the workload's, else TP = devices / PP."""
    kwargs = kwargs or {}
    pp = kwargs.get("pipeline_parallel_size", 1)
    return kwargs.get("tensor_parallel_size", devices // pp if isinstance(pp, int) and pp >= 1 else devices), pp


@functools.cache
def public_arg_names(vllm_version: str) -> list[str]:
    """The engine argument names a user may set in ``vllm_version``, sorted (the close matches offered)."""
    return sorted(n for n in ENGINE_ARG_NAMES[vllm_version] if not n.startswith("_"))


def engine_kwargs_problems(kwargs: Any, plan: SlicePlan, field: str = "engine_kwargs", model: str | None = None,
                           model_source: str | None = None, shape: ModelShape | None = None,
                           vllm_version: str = VLLM_VERSION, holder: str = "the slice a replica reserves"
                           ) -> list[InvalidInput]:
    """What is wrong with a workload's extra vLLM engine args, one problem per bad key or value.

    Names of the vLLM the pods run; TP x PP uses every JAX device, one host per pipeline stage; TP divides a known
    model's heads (``shape`` when the caller knows it). ``holder``: what holds the devices, in the kind's words.
    Source: tpu-inference ``TPUWorker.init_device``, ``_initialize_ray_cluster`` (docs/FACTS.md#vllm-serve-llm-tpu,
    docs/FACTS.md#vllm-rules).
    """
    if kwargs is not None and not isinstance(kwargs, Mapping):
        return [errors.invalid_value(field, kwargs, "is not a mapping", "a mapping of vLLM engine argument names "
                                     "to values")]
    kwargs = kwargs or {}
    known = ENGINE_ARG_NAMES[vllm_version]
    label = vllm_label(vllm_version)
    found = []
    for key in kwargs:
        where = f"{field}.{key}"
        if key in KIT_ENGINE_ARGS:
            found.append(InvalidInput(where, "is set by the kit", KIT_ENGINE_ARGS[key] + " instead"))
        elif key not in known:
            close = [f"{n} (set {KIT_ENGINE_ARGS[n]})" if n in KIT_ENGINE_ARGS else n
                     for n in difflib.get_close_matches(str(key), public_arg_names(vllm_version), n=3, cutoff=0.6)]
            other = sorted(vllm_label(v) for v, names in ENGINE_ARG_NAMES.items() if v != vllm_version and key in names)
            known_to = f" (vLLM {', '.join(other)} has it)" if other else ""
            found.append(InvalidInput(where, f"{key!r} is not an engine argument of vLLM {label}, the vLLM the "
                                      f"workload's pods run{known_to}",
                                      ", ".join(close) if close else f"a field of vLLM {label}'s "
                                      "AsyncEngineArgs or FrontendArgs (e.g. max_num_seqs, max_num_batched_tokens)"))
        elif ((bound := ENGINE_ARG_BOUNDS[vllm_version].get(key)) and (bound.needs is None or kwargs.get(bound.needs))
              and (problem := bound.problem(kwargs[key]))):
            found.append(errors.invalid_value(where, kwargs[key], f"{problem}: vLLM {label} refuses it at the "
                                              "engine's start", bound.valid()))
    if found:
        return found
    devices = jax_devices(plan)
    tp, pp = parallel_sizes(kwargs, devices)
    if not all(isinstance(v, int) and not isinstance(v, bool) and v >= 1 for v in (tp, pp)) or tp * pp != devices:
        per_chip = JAX_DEVICES_PER_CHIP.get(plan.generation, 1)
        found.append(errors.invalid_value(
            f"{field}.tensor_parallel_size", tp, f"x pipeline_parallel_size {pp} does not use the {plan.chips} chips "
            f"({devices} JAX devices) of {holder}", f"tensor_parallel_size x "
            f"pipeline_parallel_size = {devices} (vLLM on TPU shards over JAX devices: {per_chip} per "
            f"{plan.generation} chip)"))
    elif plan.hosts > 1 and pp not in (1, plan.hosts):
        found.append(errors.invalid_value(
            f"{field}.pipeline_parallel_size", pp, f"splits a slice of {plan.hosts} hosts into stages that span "
            "hosts (vLLM on TPU runs a pipeline stage on one host's JAX devices)",
            f"1, or {plan.hosts} (one stage per host, tensor_parallel_size {devices // plan.hosts})"))
    else:
        # the field to change: the TP the workload set, else the weights (the TP is then the slice's devices)
        weights = sized_model(model, model_source)
        where = (f"{field}.tensor_parallel_size" if "tensor_parallel_size" in kwargs else
                 "model_source" if weights == model_source else "model")
        found += head_problems(tp, plan, weights, where, shape)
        found += stage_problems(pp, weights, f"{field}.pipeline_parallel_size", shape)
    backend = kwargs.get("distributed_executor_backend", "ray")
    if plan.hosts > 1 and backend != "ray":
        found.append(errors.invalid_value(f"{field}.distributed_executor_backend", backend,
                                          "is not the executor Ray Serve LLM runs a multi-host TPU engine with", "ray"))
    return found


def sized_model(model: str | None, model_source: str | None) -> str:
    """The model whose shape rules a workload: ``model_source``, but ``model``'s for a ``gs://`` copy of its weights."""
    if model and model_source and model_source.startswith("gs://"):
        return model
    return model_source or model or DEFAULT_MODEL


def head_problems(tp: int, plan: SlicePlan, source: str, field: str,
                  shape: ModelShape | None = None) -> list[InvalidInput]:
    """A TP that does not divide a known model's attention heads, with layouts that do; ``raytpu plan`` uses it too.
    Source: vLLM 0.29.0 ``ModelConfig.verify_with_parallel_config`` (docs/FACTS.md#vllm-serve-llm-tpu,
    docs/FACTS.md#vllm-rules)."""
    shape = shape or by_hf_id(source)
    if shape is None or shape.heads % tp == 0:
        return []
    heads, per_chip, devices = shape.heads, JAX_DEVICES_PER_CHIP.get(plan.generation, 1), jax_devices(plan)
    per_host = devices // plan.hosts
    valid = []
    if plan.hosts > 1 and heads % per_host == 0 and plan.hosts <= shape.layers:
        valid.append(f"pipeline_parallel_size {plan.hosts} (one stage per host, tensor_parallel_size {per_host})")
    gen = generation(plan.generation)
    fits = [t for t in gen.topologies if t in gen.ray_topologies and heads % (chips_in(t) * per_chip) == 0]
    valid.append(f"a {gen.name} slice of at most {heads} JAX devices ({', '.join(fits)})")
    valid.append("another model (model / model_source; vLLM checks its heads when the engine starts)")
    refused = f"(vLLM {VLLM_VERSION} refuses it when the engine starts: verify_with_parallel_config)"
    if field.endswith("tensor_parallel_size"):
        return [errors.invalid_value(field, tp, f"does not divide the {heads} attention heads of {source} {refused}",
                                     ", or ".join(valid))]
    return [errors.invalid_value(
        field, source, f"has {heads} attention heads, which tensor_parallel_size {tp} (the {devices} JAX devices of "
        f"this slice) does not divide {refused}", ", or ".join(valid))]


def stage_problems(pp: int, source: str, field: str, shape: ModelShape | None = None) -> list[InvalidInput]:
    """More pipeline stages than a known model has layers: a stage beyond the layers would run none.
    Source: vLLM 0.29.0 ``vllm.distributed.utils.get_pp_indices``."""
    shape = shape or by_hf_id(source)
    if shape is None or pp <= shape.layers:
        return []
    return [errors.invalid_value(field, pp, f"is more pipeline stages than the {shape.layers} layers of {source}",
                                 f"at most {shape.layers} stages (a smaller slice of fewer hosts)")]


# ------------------------------------------------------------------------------------------ the slice

RAY_8_CHIP_HOST_GENERATIONS = ("v5e", "v6e")
"""Ray 2.60 ``ray._private.accelerators.tpu.TPU_8_CHIPS_PER_HOST_TYPES = ("v5litepod", "v6e")``."""
RAY_SINGLE_HOST_TOPOLOGIES = ("1x1", "2x2", "2x4")
"""Ray 2.60 ``ray._private.accelerators.tpu.TPU_SINGLE_HOST_TOPOLOGIES``."""


def ray_serve_chips_per_host(plan: SlicePlan) -> int:
    """The chips per host Ray Serve LLM 2.60 assumes for the slice (it passes no ``chips_per_vm``).
    Source: Ray 2.60 ``ray._private.accelerators.tpu.get_chips_per_host`` (docs/FACTS.md#vllm-rules)."""
    if plan.generation in RAY_8_CHIP_HOST_GENERATIONS and plan.topology in RAY_SINGLE_HOST_TOPOLOGIES:
        return plan.chips
    return 4


def slice_problems(plan: SlicePlan, field: str = "slice") -> list[InvalidInput]:
    """A slice Ray Serve LLM would reserve with hosts of another size never gets a replica placed."""
    assumed = ray_serve_chips_per_host(plan)
    if assumed == plan.chips_per_host:
        return []
    single = [m.name for m in generation(plan.generation).machine_types if m.chips == plan.chips]
    return [errors.invalid_value(
        field, f"{plan.generation} {plan.topology} on {plan.hosts} x {plan.machine_type}",
        f"cannot be served: Ray Serve LLM {RAY_VERSION} reserves a {plan.generation} {plan.topology} slice as "
        f"hosts of {assumed} chips (it passes no chips_per_vm to slice_placement_group), so no replica would "
        f"ever be placed on hosts of {plan.chips_per_host}",
        f"machine_type {single[0]} (one host of {plan.chips} chips)" if single else "another slice")]


# ------------------------------------------------------------------------------------------ model source


def model_source_problems(source: str | None, field: str = "model_source") -> list[InvalidInput]:
    """A model source is a Hugging Face id (``org/name``), an absolute path in the image, or ``gs://B/PATH``."""
    if source is None:
        return []
    if source.startswith("gs://"):
        bucket, _, path = source[len("gs://"):].partition("/")
        if not bucket or not path.strip("/"):
            return [errors.invalid_value(field, source, "names no object path in the bucket",
                                         "gs://BUCKET/PATH/TO/MODEL_DIR")]
        return []
    if "://" in source:
        return [errors.invalid_value(field, source, "uses a scheme the kit does not read",
                                     "gs://BUCKET/PATH, a Hugging Face id (org/name) or an absolute path")]
    if not source.strip() or source != source.strip():
        return [errors.invalid_value(field, source, "is blank or padded", "a Hugging Face id or a path")]
    return []

