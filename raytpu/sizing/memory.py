"""The HBM a model needs on a slice, to serve or to train, with each assumption written beside its term.

Serve: weights at ``--dtype`` + the KV cache: 2 (K and V) x layers x KV heads x head_dim x context x batch x bytes
per KV element (a sliding-window layer holds at most its window: :meth:`ModelShape.kv_token_layers`); vLLM keeps
at least one KV head per tensor-parallel rank, so a TP above the KV heads replicates them (vLLM
``vllm/config/model.py`` ``ModelConfig.get_num_kv_heads``: ``max(1, total_num_kv_heads // tensor_parallel_size)``,
"so each GPU has at least one KV head"; the same rule in every release read).

Train: weights at ``--dtype`` and gradients at ``--grad-dtype`` (default: fp32 both, :data:`DEFAULT_DTYPE`), optimizer
state at ``--optimizer-dtype`` (optax's ``adamw`` keeps ``mu``
in ``mu_dtype``, default the parameters' dtype, and ``nu`` in the parameters' dtype: ``optax.scale_by_adam``), plus
activations from Korthikanti et al., "Reducing Activation Recomputation in Large Transformer Models"
(arXiv:2205.05198, section 4): a layer stores ``s*b*h*(34 + 5*a*s/h)`` bytes of 16-bit activations; flash attention
never materializes the ``a*s*s`` scores, leaving ``34*s*b*h``; full recomputation keeps only each layer's input,
``2*s*b*h``. The loss's logits (tokens x vocab) are not counted: frameworks chunk or shard them.

Headroom: the fraction of HBM kept free for what the estimate leaves out (XLA's scratch buffers and fragmentation,
the runtime, the program itself). The default keeps 10% free, the more cautious of vLLM's own shares of device
memory; ``--headroom`` changes it. Source: vLLM ``CacheConfig.gpu_memory_utilization`` (docs/FACTS.md section 16).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from raytpu.core.models import ModelShape

GIB = 1024**3

DTYPE_BYTES: dict[str, float] = {"fp32": 4, "bf16": 2, "fp8": 1, "int8": 1, "int4": 0.5}
"""Bytes per element of each ``--dtype`` / ``--kv-dtype`` / ``--optimizer-dtype``."""

OPTIMIZER_STATES: dict[str, int] = {"adamw": 2, "adam": 2, "lion": 1, "sgd": 1, "adafactor": 0}
"""Per-parameter state tensors: Adam(W) keeps two moments (optax ``scale_by_adam``: mu, nu), Lion one (optax
``scale_by_lion``: mu), SGD with momentum one (optax ``trace``), Adafactor none of parameter size (optax
``scale_by_factored_rms`` keeps a row and a column vector per matrix, under 0.1% of the parameters here, and no
momentum by default)."""

REMAT = ("full", "offload", "off")
"""``full``: only each layer's input is kept and the layer recomputed in the backward pass; ``offload``: those inputs
go to host memory too, leaving one layer's activations in HBM; ``off``: every layer's activations are kept."""

DEFAULT_HEADROOM = 0.10

DEFAULT_DTYPE = {"serve": "bf16", "train": "fp32"}
"""Weights' dtype by mode. Serving loads the checkpoint's bf16. Training keeps fp32 master weights and fp32 gradients,
with bf16 only in the matmuls, as the common trainers do by default: the kit's own ``workloads/train.py`` keeps its
parameters in float32, and MaxText's defaults are ``weight_dtype: float32`` and ``grad_dtype: float32`` (``dtype:
bfloat16`` is the activations'). Source: AI-Hypercomputer/maxtext ``MaxText/configs/base.yml``. With AdamW's two fp32
moments that is 16 bytes per parameter; ``--dtype bf16`` (a MaxText recipe's ``weight_dtype: bfloat16``) gives 12."""


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
    """How many copies of the KV cache a TP of ``tensor_parallel`` holds: ranks x max(1, heads // TP) over the
    cache's heads (vLLM ``get_num_kv_heads``; MLA's latent is one head, so every rank holds all of it); 1 while
    TP <= those heads."""
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
