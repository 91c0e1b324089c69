"""The HBM a model needs on a slice, to serve or to train, each assumption beside its term.

Serve: weights + KV cache (2 x layers x KV heads x head_dim x context x batch x bytes; a sliding layer at most its
window), replicated where TP exceeds the KV heads. Train: weights, gradients and optimizer state at their dtypes plus
activations per Korthikanti et al. (arXiv:2205.05198); logits not counted. Headroom keeps 10% of HBM free by default
(``--headroom``). Source: docs/FACTS.md#sizing-memory."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from raytpu.core.tpu.models import ModelShape

GIB = 1024**3

DTYPE_BYTES: dict[str, float] = {"fp32": 4, "bf16": 2, "fp8": 1, "int8": 1, "int4": 0.5}
"""Bytes per element of each ``--dtype`` / ``--kv-dtype`` / ``--optimizer-dtype``."""

OPTIMIZER_STATES: dict[str, int] = {"adamw": 2, "adam": 2, "lion": 1, "sgd": 1, "adafactor": 0}
"""Per-parameter state tensors: Adam(W) two moments, Lion one, SGD with momentum one, Adafactor none of parameter size.
Source: optax ``scale_by_adam``, ``scale_by_lion``, ``trace``, ``scale_by_factored_rms``
(docs/FACTS.md#sizing-memory)."""

REMAT = ("full", "offload", "off")
"""``full``: each layer's input kept, the layer recomputed backward; ``offload``: those inputs in host memory too;
``off``: every layer's activations kept."""

DEFAULT_HEADROOM = 0.10

DEFAULT_DTYPE = {"serve": "bf16", "train": "fp32"}
"""Weights' dtype by mode: serving loads the checkpoint's bf16; training keeps fp32 master weights and gradients (16
bytes a parameter with AdamW; ``--dtype bf16``: 12). Source: AI-Hypercomputer/maxtext ``MaxText/configs/base.yml``
(docs/FACTS.md#sizing-memory)."""


@dataclass(frozen=True)
class Need:
    """HBM needed, by term (bytes), and the assumptions behind them."""

    mode: str
    terms: dict[str, float]
    assumptions: list[str] = field(default_factory=list)

    @property
    def total(self) -> float:
        """Every term together."""
        return sum(self.terms.values())

    def to_json(self) -> dict[str, Any]:
        """Terms in GiB, the total and the assumptions."""
        return {"mode": self.mode, "gib": {k: round(v / GIB, 3) for k, v in self.terms.items()},
                "total_gib": round(self.total / GIB, 3), "assumptions": self.assumptions}


def kv_replication(shape: ModelShape | None, tensor_parallel: int) -> float:
    """Copies of the KV cache a TP of ``tensor_parallel`` holds: ranks x max(1, heads // TP) over the cache's heads
    (MLA's latent is one head); 1 while TP <= heads. Source: vLLM ``ModelConfig.get_num_kv_heads``."""
    if shape is None or tensor_parallel <= shape.cache_heads:
        return 1.0
    return tensor_parallel * max(1, shape.cache_heads // tensor_parallel) / shape.cache_heads


def serve_need(params: int, shape: ModelShape | None, *, dtype: str, kv_dtype: str, context: int, batch: int,
               tensor_parallel: int = 1) -> Need:
    """What serving needs: weights + KV cache (replicated where TP exceeds the KV heads)."""
    terms = {"weights": params * DTYPE_BYTES[dtype]}
    notes = [f"weights: {params:,} parameters x {DTYPE_BYTES[dtype]:g} bytes ({dtype})"]
    if shape is None:
        notes.append("KV cache not counted: --params gives no layers, KV heads or head_dim (give --model or "
                     "--model-config)")
    else:
        kv = shape.kv_token_layers(context) * shape.kv_elements_per_token_layer() * batch * DTYPE_BYTES[kv_dtype]
        copies = kv_replication(shape, tensor_parallel)
        terms["kv_cache"] = kv * copies
        span = (f"({shape.layers - shape.sliding_layers} layers x {context} context + {shape.sliding_layers} "
                f"sliding-window layers x {min(context, shape.sliding_window)})" if shape.sliding_layers else
                f"{shape.layers} layers x {context} context")
        per_token = (f"({shape.mla.kv_lora_rank} kv_lora_rank + {shape.mla.qk_rope_head_dim} qk_rope_head_dim: "
                     "one MLA latent per token and layer)" if shape.mla else
                     f"2 x {shape.kv_heads} KV heads x {shape.head_dim} head_dim")
        notes.append(f"KV cache: {span} x {per_token} x {batch} sequences x {DTYPE_BYTES[kv_dtype]:g} bytes "
                     f"({kv_dtype})"
                     + (f", x {copies:g} (TP {tensor_parallel} > {shape.cache_heads} KV heads: vLLM replicates them)"
                        if copies > 1 else ""))
        if shape.is_moe:
            notes.append(f"mixture of experts: all {shape.experts} experts' weights are resident, "
                         f"{shape.experts_per_token} run per token")
    return Need("serve", terms, notes)


def activation_bytes(shape: ModelShape, tokens: int, remat: str) -> float:
    """16-bit activations of one step over ``tokens`` (batch x context) tokens, all devices together."""
    per_layer_kept = 34 * tokens * shape.hidden
    if remat == "off":
        return shape.layers * per_layer_kept
    if remat == "full":
        return shape.layers * 2 * tokens * shape.hidden + per_layer_kept
    return per_layer_kept  # offload: layer inputs on the host, one layer's activations in HBM


def train_need(params: int, shape: ModelShape | None, *, dtype: str, optimizer: str, optimizer_dtype: str,
               context: int, batch: int, remat: str, grad_dtype: str | None = None) -> Need:
    """What training needs: weights + gradients + optimizer state + activations."""
    grad_dtype = grad_dtype or dtype
    states = OPTIMIZER_STATES[optimizer]
    terms = {"weights": params * DTYPE_BYTES[dtype], "gradients": params * DTYPE_BYTES[grad_dtype],
             "optimizer": params * states * DTYPE_BYTES[optimizer_dtype]}
    per_param = DTYPE_BYTES[dtype] + DTYPE_BYTES[grad_dtype] + states * DTYPE_BYTES[optimizer_dtype]
    notes = [f"weights: {params:,} parameters x {DTYPE_BYTES[dtype]:g} bytes ({dtype}); gradients x "
             f"{DTYPE_BYTES[grad_dtype]:g} bytes ({grad_dtype})"
             + (" (fp32 master weights and gradients: the --mode train default, as MaxText's base.yml "
                "weight_dtype/grad_dtype float32 and the kit's workloads/train.py)"
                if (dtype, grad_dtype) == (DEFAULT_DTYPE["train"],) * 2 else ""),
             f"optimizer {optimizer}: {states} state tensor(s) per parameter x {DTYPE_BYTES[optimizer_dtype]:g} "
             f"bytes ({optimizer_dtype}); {per_param:g} bytes per parameter in all before activations"]
    if shape is None:
        notes.append("activations not counted: --params gives no hidden size or layers (give --model or "
                     "--model-config)")
    else:
        tokens = context * batch
        terms["activations"] = activation_bytes(shape, tokens, remat)
        how = {"off": f"34 x tokens x hidden per layer, {shape.layers} layers (no remat, flash attention)",
               "full": "2 x tokens x hidden per layer (full remat: layer inputs kept) + 34 x tokens x hidden for "
                       "the layer being recomputed",
               "offload": "34 x tokens x hidden for one layer (layer inputs offloaded to host memory)"}[remat]
        notes.append(f"activations (Korthikanti et al. 2022, 16-bit): {how}; tokens = {batch} sequences x {context} "
                     "context; logits not counted")
        if shape.is_moe:
            notes.append(f"mixture of experts: all {shape.experts} experts' weights, gradients and optimizer state "
                         "are held; activations are counted as for a dense layer")
    return Need("train", terms, notes)
