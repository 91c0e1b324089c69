"""A model's shape, as far as memory and tensor parallelism go: the one table of built-in models.
Each entry is the model's own ``config.json`` (URL beside it; gated ones: docs/FACTS.md#sizing-models); parameters are
counted from the shape and tested against the published size."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

from raytpu.core.common import errors
from raytpu.core.common.errors import InvalidInput

MAX_LAYERS = 10_000
MAX_DIM = 1_000_000
MAX_VOCAB = 10_000_000
MAX_POSITIONS = 100_000_000


@dataclass(frozen=True)
class Mla:
    """Multi-head latent attention's ranks, as DeepSeek-V2/V3 name them (``q_lora_rank`` 0: the config's null)."""

    q_lora_rank: int
    kv_lora_rank: int
    qk_nope_head_dim: int
    qk_rope_head_dim: int
    v_head_dim: int


@dataclass(frozen=True)
class ModelShape:
    """The fields of a decoder-only transformer's ``config.json`` that decide its memory.
    Each field is named after the ``config.json`` key it reads (the mapping: docs/FACTS.md#sizing-model-fields).
    ``experts``: all resident, ``experts_per_token`` run; ``sliding_layers`` cache only ``sliding_window`` tokens;
    ``mla``: one latent per token and layer; ``gated``: downloading needs a token of an account that accepted the
    license; ``thinks``: its chat template makes it reason in a ``<think>`` block before answering unless the
    template gets ``enable_thinking: false`` (Qwen3's hybrid thinking, on by default)."""

    name: str
    layers: int
    hidden: int
    heads: int
    kv_heads: int
    head_dim: int
    intermediate: int
    vocab: int
    max_positions: int
    tied_embeddings: bool = False
    experts: int = 1
    experts_per_token: int = 1
    sliding_layers: int = 0
    sliding_window: int = 0
    dense_layers: int = 0
    dense_intermediate: int = 0
    shared_intermediate: int = 0
    mla: Mla | None = None
    hf_id: str | None = None
    source: str = ""
    gated: bool = False
    thinks: bool = False

    def kv_token_layers(self, context: int) -> int:
        """Tokens x layers the KV cache holds for one ``context``-token sequence (sliding layers: their window)."""
        window = min(context, self.sliding_window) if self.sliding_layers else context
        return (self.layers - self.sliding_layers) * context + self.sliding_layers * window

    def kv_elements_per_token_layer(self) -> int:
        """KV elements per token and layer: key and value per KV head, or MLA's latent
        (docs/FACTS.md#sizing-model-fields)."""
        if self.mla:
            return self.mla.kv_lora_rank + self.mla.qk_rope_head_dim
        return 2 * self.kv_heads * self.head_dim

    @property
    def cache_heads(self) -> int:
        """KV heads vLLM shards the cache over: MLA's latent is one (vLLM ``ModelConfig.get_num_kv_heads``)."""
        return 1 if self.mla else self.kv_heads

    def attention_params(self) -> int:
        """One layer's attention projections: q, k, v, o; MLA's down- and up-projections and their norms."""
        if self.mla is None:
            return self.hidden * self.heads * self.head_dim * 2 + self.hidden * self.kv_heads * self.head_dim * 2
        m = self.mla
        qk = m.qk_nope_head_dim + m.qk_rope_head_dim
        q = (self.hidden * m.q_lora_rank + m.q_lora_rank + m.q_lora_rank * self.heads * qk if m.q_lora_rank
             else self.hidden * self.heads * qk)
        kv = (self.hidden * (m.kv_lora_rank + m.qk_rope_head_dim) + m.kv_lora_rank
              + m.kv_lora_rank * self.heads * (m.qk_nope_head_dim + m.v_head_dim))
        return q + kv + self.heads * m.v_head_dim * self.hidden

    def params(self) -> int:
        """Parameters of a Llama-style decoder: attention, gated MLPs (experts, shared expert, router), norms,
        embeddings; biases, q/k norms and multi-token-prediction layers are left out
        (docs/FACTS.md#sizing-model-fields)."""
        if self.experts > 1:
            expert_mlp = 3 * self.hidden * (self.intermediate * self.experts + self.shared_intermediate)
            expert_mlp += self.hidden * self.experts  # the router
        else:
            expert_mlp = 3 * self.hidden * self.intermediate
        dense_mlp = 3 * self.hidden * self.dense_intermediate
        per_layer = self.attention_params() + 2 * self.hidden
        mlps = self.dense_layers * dense_mlp + (self.layers - self.dense_layers) * expert_mlp
        embeddings = self.vocab * self.hidden * (1 if self.tied_embeddings else 2)
        return self.layers * per_layer + mlps + embeddings + self.hidden

    @property
    def is_moe(self) -> bool:
        """A mixture of experts: all experts' weights are held, a few run per token."""
        return self.experts > 1

    def to_json(self) -> dict[str, Any]:
        """The shape and its parameter count, for ``raytpu plan --json``."""
        return {"name": self.name, "hf_id": self.hf_id, "source": self.source, "params": self.params(),
                "num_hidden_layers": self.layers, "hidden_size": self.hidden, "num_attention_heads": self.heads,
                "num_key_value_heads": self.kv_heads, "head_dim": self.head_dim,
                "intermediate_size": self.intermediate, "vocab_size": self.vocab,
                "max_position_embeddings": self.max_positions, "tie_word_embeddings": self.tied_embeddings,
                "experts": self.experts, "experts_per_token": self.experts_per_token,
                "sliding_layers": self.sliding_layers, "sliding_window": self.sliding_window,
                "dense_layers": self.dense_layers, "shared_intermediate": self.shared_intermediate,
                "mla": None if self.mla is None else asdict(self.mla),
                "kv_elements_per_token_layer": self.kv_elements_per_token_layer()}


def _hf(repo: str) -> str:
    return f"https://huggingface.co/{repo}/blob/main/config.json"


def _llama(name: str, repo: str, layers: int, hidden: int, heads: int, intermediate: int) -> ModelShape:
    # Llama 3.1/3.3: 8 KV heads, head_dim 128, vocab 128256, max_position_embeddings 131072, untied embeddings.
    # Gated: every meta-llama card asks to agree to share contact information. Source: docs/FACTS.md#sizing-models.
    return ModelShape(name, layers, hidden, heads, 8, hidden // heads, intermediate, 128256, 131072,
                      hf_id=repo, source=_hf(repo), gated=True)


MODELS: dict[str, ModelShape] = {m.name: m for m in (
    # Source: its config.json (a public copy: docs/FACTS.md#sizing-models)
    _llama("llama-3.1-8b", "meta-llama/Llama-3.1-8B-Instruct", 32, 4096, 32, 14336),
    # Source: its config.json (a public copy: docs/FACTS.md#sizing-models)
    _llama("llama-3.1-70b", "meta-llama/Llama-3.1-70B-Instruct", 80, 8192, 64, 28672),
    # Source: its config.json (public copies: docs/FACTS.md#sizing-models)
    _llama("llama-3.1-405b", "meta-llama/Llama-3.1-405B-Instruct", 126, 16384, 128, 53248),
    # 3.1 70B's architecture (its model card: the same config fields)
    _llama("llama-3.3-70b", "meta-llama/Llama-3.3-70B-Instruct", 80, 8192, 64, 28672),
    # Source: its config.json and model card (docs/FACTS.md#sizing-models); thinks: its card's "Switching Between
    # Thinking and Non-Thinking Mode" (enable_thinking=True by default; docs/FACTS.md#vllm-chat-template)
    ModelShape("qwen3-0.6b", 28, 1024, 16, 8, 128, 3072, 151936, 40960, tied_embeddings=True,
               hf_id="Qwen/Qwen3-0.6B", source=_hf("Qwen/Qwen3-0.6B"), thinks=True),
    # Source: its config.json (a vendored copy: docs/FACTS.md#sizing-models); thinks: as Qwen3-0.6B (its card)
    ModelShape("qwen3-8b", 36, 4096, 32, 8, 128, 12288, 151936, 40960,
               hf_id="Qwen/Qwen3-8B", source=_hf("Qwen/Qwen3-8B"), thinks=True),
    # Source: its config.json (a public copy: docs/FACTS.md#sizing-models)
    ModelShape("qwen3-8b-base", 36, 4096, 32, 8, 128, 12288, 151936, 32768,
               hf_id="Qwen/Qwen3-8B-Base", source=_hf("Qwen/Qwen3-8B-Base")),
    # Gated (Gemma 3's card front matter); the text_config of its config.json, sliding on 40 of 48 layers;
    # the vision tower (about 0.4B parameters) is not counted. Source: docs/FACTS.md#sizing-models
    ModelShape("gemma-3-12b", 48, 3840, 16, 8, 256, 15360, 262208, 131072, tied_embeddings=True,
               sliding_layers=40, sliding_window=1024, hf_id="google/gemma-3-12b-it",
               source=_hf("google/gemma-3-12b-it"), gated=True),
    # Not gated (its card: apache-2.0, no extra_gated_* keys). Source: its config.json (docs/FACTS.md#sizing-models)
    ModelShape("mixtral-8x7b", 32, 4096, 32, 8, 128, 14336, 32000, 32768, experts=8, experts_per_token=2,
               hf_id="mistralai/Mixtral-8x7B-Instruct-v0.1", source=_hf("mistralai/Mixtral-8x7B-Instruct-v0.1")),
)}
"""The built-in models, by ``--model`` name."""


def model(name: str, field: str = "--model") -> ModelShape:
    """A built-in model by its name or its Hugging Face id; raises InvalidInput listing them."""
    found = MODELS.get(name.lower()) or next((m for m in MODELS.values() if m.hf_id == name), None)
    if found is None:
        raise errors.invalid_choice(field, name, MODELS, " (a built-in model; or give --model-config FILE or "
                                    "--params N)")
    return found


def by_hf_id(source: str) -> ModelShape | None:
    """The built-in model whose Hugging Face id (or name) is ``source``, if any: what ``validate`` can check."""
    return next((m for m in MODELS.values() if source in (m.hf_id, m.name)), None)


# ------------------------------------------------------------------------------------------- --params


MAX_PARAMS = 1e14
"""100 trillion parameters: above any public model by far; a larger figure is a typo."""


def rough_params(text: str, field: str = "--params") -> int:
    """``8e9`` or ``70000000000`` -> an int; raises InvalidInput for what is not a positive, sane count."""
    try:
        value = float(text)
    except ValueError as exc:
        raise errors.invalid_value(field, text, "is not a number", "a parameter count like 8e9") from exc
    if not math.isfinite(value) or value < 1e6 or value > MAX_PARAMS:
        raise errors.invalid_value(field, text, "is out of range", f"1e6 .. {MAX_PARAMS:g} parameters (e.g. 8e9)")
    return int(value)


def check_context(context: int, shape: ModelShape | None, field: str = "--context") -> None:
    """A context no longer than the model takes (``max_position_embeddings``), and at least one token."""
    high = shape.max_positions if shape else MAX_POSITIONS
    if context < 1 or context > high:
        why = (f"is beyond {shape.name}'s max_position_embeddings ({shape.max_positions})" if shape and context > 1
               else "is out of range")
        raise InvalidInput(field, f"{context!r} {why}", f"1..{high} tokens")
