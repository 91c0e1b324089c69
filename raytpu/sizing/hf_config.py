"""A Hugging Face ``config.json`` read as transformers reads it: omitted keys take the ``model_type``'s defaults
(:data:`MODEL_TYPE_DEFAULTS`), and an architecture ``raytpu plan`` does not model is refused by name, not miscounted.
Another type must state every key (an unstated ``tie_word_embeddings`` counts untied: an overestimate). Source:
docs/FACTS.md#sizing-hf-config. Standard library only."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from raytpu.core.common import errors
from raytpu.core.tpu.models import MAX_DIM, MAX_LAYERS, MAX_POSITIONS, MAX_VOCAB, Mla, ModelShape

_GEMMA3_TEXT: dict[str, Any] = {
    "vocab_size": 262_208, "hidden_size": 2304, "intermediate_size": 9216, "num_hidden_layers": 26,
    "num_attention_heads": 8, "num_key_value_heads": 4, "head_dim": 256, "max_position_embeddings": 131_072,
    "tie_word_embeddings": True, "sliding_window": 4096, "sliding_window_pattern": 6}

MODEL_TYPE_DEFAULTS: dict[str, dict[str, Any]] = {
    # Source: transformers 4.57.1 Gemma3TextConfig.__init__ (sliding_window_pattern: its `_sliding_window_pattern`)
    "gemma3_text": _GEMMA3_TEXT,
    # Source: transformers 4.57.1 DeepseekV3Config.__init__
    "deepseek_v3": {
        "vocab_size": 129_280, "hidden_size": 7168, "intermediate_size": 18_432, "moe_intermediate_size": 2048,
        "num_hidden_layers": 61, "num_attention_heads": 128, "num_key_value_heads": 128, "n_shared_experts": 1,
        "n_routed_experts": 256, "kv_lora_rank": 512, "q_lora_rank": 1536, "qk_rope_head_dim": 64, "v_head_dim": 128,
        "qk_nope_head_dim": 128, "num_experts_per_tok": 8, "first_k_dense_replace": 3,
        "max_position_embeddings": 4096, "tie_word_embeddings": False},
    # Source: transformers 4.57.1 LlamaConfig, MixtralConfig, Qwen3Config, Qwen3MoeConfig, Qwen2MoeConfig
    # (tie_word_embeddings=False; PretrainedConfig's own default is True)
    **{t: {"tie_word_embeddings": False} for t in ("llama", "mixtral", "qwen3", "qwen3_moe", "qwen2_moe")},
}
"""Per ``model_type``, the defaults of its transformers config class that published configs rely on."""

TEXT_MODEL_TYPES = {"gemma3": "gemma3_text"}
"""A multimodal ``model_type`` and the type transformers builds its ``text_config`` as (``Gemma3Config``)."""

UNMODELED: dict[str, tuple[object, str]] = {
    "num_kv_shared_layers": (0, "layers that reuse another layer's KV cache (Gemma 3n)"),
    "global_head_dim": (None, "full-attention layers with their own head_dim and KV heads (Gemma 4)"),
    "layers_block_type": (None, "Mamba layers among the attention layers (Jamba)"),
    "hybrid_override_pattern": (None, "Mamba layers among the attention layers (Nemotron-H)"),
    "full_attention_interval": (None, "linear-attention layers among the attention layers (Qwen3-Next)"),
    "index_topk": (None, "DeepSeek sparse attention's indexer and its cache (DeepSeek-V3.2)"),
    "moe_layer_freq": (1, "experts on only every Nth layer"),
    "decoder_sparse_step": (1, "experts on only every Nth layer"),
    "mlp_only_layers": ([], "dense layers placed among the expert layers"),
    "is_encoder_decoder": (False, "an encoder-decoder model"),
}
"""Keys whose value, other than the one given (or absent, null), means an architecture the kit does not model: refused
by name."""

ENCODER_MODEL_TYPES = frozenset({"bert", "roberta", "xlm-roberta", "distilbert", "albert", "electra", "deberta",
                                 "deberta-v2", "mpnet", "modernbert", "camembert", "ernie", "nomic_bert"})
"""Encoder-only ``model_type`` s (transformers' config classes of these names): no KV cache, no generation."""
ENCODER_HEADS = ("ForMaskedLM", "ForSequenceClassification", "ForTokenClassification", "ForQuestionAnswering",
                 "ForMultipleChoice", "ForNextSentencePrediction", "ForPreTraining")
"""Suffixes of transformers' encoder head classes (``BertForMaskedLM``); a decoder ends in ``ForCausalLM``."""

MODELED = ("decoder-only transformers: multi-head, grouped-query or latent (MLA) attention, sliding-window layers, "
           "dense or mixture-of-experts MLPs with shared experts and leading dense layers")


def _int_field(config: Mapping[str, Any], key: str, field: str, high: int, required: bool = True,
               low: int = 1) -> int | None:
    value = config.get(key)
    if value is None:
        if required:
            raise errors.missing(f"{field}.{key}", "in a Hugging Face config.json (and no default for its "
                                 "model_type)", f"an integer {low}..{high}")
        return None
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise errors.invalid_value(f"{field}.{key}", value, "is not a whole number in range",
                                   f"an integer {low}..{high}")
    return value


def _text_config(config: Mapping[str, Any]) -> dict[str, Any]:
    """The language model's keys over its type's defaults: a multimodal config's ``text_config`` over the rest."""
    model_type = config.get("model_type")
    text = config.get("text_config")
    if isinstance(text, Mapping):
        model_type = text.get("model_type") or TEXT_MODEL_TYPES.get(str(model_type), model_type)
        config = {**config, **text}
    return {**MODEL_TYPE_DEFAULTS.get(str(model_type), {}), **config}


def _refuse_unmodeled(config: Mapping[str, Any], field: str) -> None:
    for key, (fine, what) in UNMODELED.items():
        value = config.get(key)
        if value is not None and value != fine and not (fine == [] and not value):
            raise errors.invalid_value(f"{field}.{key}", value, f"means {what}, which `raytpu plan` does not model",
                                       f"a config of what it models ({MODELED}); or --params N for a rough answer")


def _refuse_encoders(config: Mapping[str, Any], field: str) -> None:
    """An encoder (BERT and kin) named by its ``model_type`` or by ``architectures`` that are all encoder heads."""
    valid = f"a config of what `raytpu plan` models ({MODELED}); or --params N for a rough answer"
    if str(config.get("model_type")) in ENCODER_MODEL_TYPES:
        raise errors.invalid_value(f"{field}.model_type", config["model_type"], "is an encoder-only model, which "
                                   "`raytpu plan` does not size (no KV cache, no generation)", valid)
    names = config.get("architectures")
    if isinstance(names, list) and names and all(isinstance(n, str) and n.endswith(ENCODER_HEADS) for n in names):
        raise errors.invalid_value(f"{field}.architectures", names, "are encoder heads, which `raytpu plan` does not "
                                   "size", valid)


def from_hf_config(config: Any, name: str, field: str = "--model-config") -> ModelShape:
    """The shape in a parsed Hugging Face ``config.json``; every problem names its key's path in the file
    (``--model-config.text_config.num_attention_heads``)."""
    if not isinstance(config, Mapping):
        raise errors.invalid_value(field, type(config).__name__, "is not a JSON object", "a Hugging Face config.json")
    text = config.get("text_config")
    if text is not None and not isinstance(text, Mapping):
        raise errors.invalid_value(f"{field}.text_config", text, "is not a JSON object",
                                   "the language model's config (an object), or no text_config")
    try:
        _refuse_encoders(config, field)
        return _shape(config, name, field)
    except errors.InvalidInput as exc:
        key = exc.field.removeprefix(f"{field}.")
        if text is None or key == exc.field or (key not in text and key in config):
            raise
        raise errors.InvalidInput(f"{field}.text_config.{key}", exc.problem, exc.valid) from exc


def _shape(config: Mapping[str, Any], name: str, field: str) -> ModelShape:
    """The shape in a parsed ``config.json`` (a multimodal config's ``text_config``): layers, widths, heads, KV heads
    (default: the heads), ``head_dim`` (default: hidden / heads), vocabulary, context, tied embeddings, the experts,
    MLA's ranks and which layers slide; every problem names the key. Keys: docs/FACTS.md#sizing-hf-config."""
    config = _text_config(config)
    _refuse_unmodeled(config, field)
    layers = _int_field(config, "num_hidden_layers", field, MAX_LAYERS)
    hidden = _int_field(config, "hidden_size", field, MAX_DIM)
    heads = _int_field(config, "num_attention_heads", field, MAX_DIM)
    kv_heads = _int_field(config, "num_key_value_heads", field, MAX_DIM, required=False) or heads
    assert layers and hidden and heads and kv_heads
    mla = _mla(config, field)
    head_dim = (mla.qk_nope_head_dim + mla.qk_rope_head_dim if mla else
                _int_field(config, "head_dim", field, MAX_DIM, required=False))
    if head_dim is None:
        if hidden % heads:
            raise errors.invalid_value(f"{field}.hidden_size", hidden, f"is not divisible by num_attention_heads "
                                       f"{heads}, and there is no head_dim", "a head_dim key, or heads dividing "
                                       "hidden_size")
        head_dim = hidden // heads
    if heads % kv_heads:
        raise errors.invalid_value(f"{field}.num_key_value_heads", kv_heads, f"does not divide num_attention_heads "
                                   f"{heads}", "a divisor of num_attention_heads")
    experts = next((n for k in ("num_local_experts", "num_experts", "n_routed_experts")
                    if (n := _int_field(config, k, field, MAX_LAYERS, required=False))), 1)
    per_token = _int_field(config, "num_experts_per_tok", field, MAX_LAYERS, required=False) or 1
    if per_token > experts:
        raise errors.invalid_value(f"{field}.num_experts_per_tok", per_token, f"is more than the {experts} experts",
                                   f"1..{experts}")
    dense_intermediate = _int_field(config, "intermediate_size", field, MAX_DIM, required=experts == 1)
    intermediate = (_int_field(config, "moe_intermediate_size", field, MAX_DIM, required=False)
                    if experts > 1 else None) or dense_intermediate
    vocab = _int_field(config, "vocab_size", field, MAX_VOCAB)
    positions = _int_field(config, "max_position_embeddings", field, MAX_POSITIONS)
    tied = config.get("tie_word_embeddings", False)
    if not isinstance(tied, bool):
        raise errors.invalid_value(f"{field}.tie_word_embeddings", tied, "is not a boolean", "true or false")
    assert intermediate and vocab and positions
    dense, shared = _expert_layers(config, field, layers, experts, intermediate) if experts > 1 else (0, 0)
    if dense and not dense_intermediate:
        raise errors.missing(f"{field}.intermediate_size", f"for the {dense} dense layers (first_k_dense_replace)",
                             f"an integer 1..{MAX_DIM}")
    sliding, window = _sliding(config, layers, field)
    return ModelShape(name, layers, hidden, heads, kv_heads, head_dim, intermediate, vocab, positions,
                      tied_embeddings=tied, experts=experts, experts_per_token=per_token, sliding_layers=sliding,
                      sliding_window=window, dense_layers=dense, dense_intermediate=(dense_intermediate or 0) if dense
                      else 0, shared_intermediate=shared, mla=mla, source=name)


def _mla(config: Mapping[str, Any], field: str) -> Mla | None:
    """MLA's ranks where the config has ``kv_lora_rank`` (DeepSeek-V2/V3); ``q_lora_rank`` null: no query
    down-projection (DeepSeek-V2-Lite)."""
    if config.get("kv_lora_rank") is None:
        return None
    ranks = {k: _int_field(config, k, field, MAX_DIM) for k in ("kv_lora_rank", "qk_nope_head_dim",
                                                                 "qk_rope_head_dim", "v_head_dim")}
    q_lora = _int_field(config, "q_lora_rank", field, MAX_DIM, required=False) or 0
    return Mla(q_lora_rank=q_lora, **{k: v or 0 for k, v in ranks.items()})


def _expert_layers(config: Mapping[str, Any], field: str, layers: int, experts: int,
                   intermediate: int) -> tuple[int, int]:
    """(leading dense layers, shared experts' width) of a mixture of experts (DeepSeek's ``first_k_dense_replace`` and
    ``n_shared_experts``, Qwen2-MoE's ``shared_expert_intermediate_size``). Source: transformers ``DeepseekV3MoE``."""
    dense = _int_field(config, "first_k_dense_replace", field, layers, required=False, low=0) or 0
    shared_count = _int_field(config, "n_shared_experts", field, experts, required=False, low=0) or 0
    shared = shared_count * intermediate or (
        _int_field(config, "shared_expert_intermediate_size", field, MAX_DIM, required=False, low=0) or 0)
    return dense, shared


def _sliding(config: Mapping[str, Any], layers: int, field: str) -> tuple[int, int]:
    """(sliding-window layers, window) where ``layer_types`` or ``sliding_window_pattern`` says which slide; a bare
    ``sliding_window`` is not trusted: every layer at full context, an overestimate. Source:
    docs/FACTS.md#sizing-hf-config."""
    window = _int_field(config, "sliding_window", field, MAX_POSITIONS, required=False)
    if window is None or config.get("use_sliding_window") is False:
        return 0, 0
    types = config.get("layer_types")
    if types is not None:
        if not isinstance(types, list) or len(types) != layers or not all(isinstance(t, str) for t in types):
            raise errors.invalid_value(f"{field}.layer_types", types, f"is not a list of {layers} layer types",
                                       "one string per layer (sliding_attention, full_attention)")
        return sum(t == "sliding_attention" for t in types), window
    pattern = config.get("sliding_window_pattern", config.get("_sliding_window_pattern"))
    if pattern is None:
        return 0, 0
    if isinstance(pattern, bool) or not isinstance(pattern, int) or pattern < 1:
        raise errors.invalid_value(f"{field}.sliding_window_pattern", pattern, "is not a positive whole number",
                                   "N: every Nth layer attends to the whole context")
    return layers - layers // pattern, window


def load_hf_config(path: str, field: str = "--model-config") -> ModelShape:
    """Reads a ``config.json`` file; a missing, unreadable or malformed file is InvalidInput naming it."""
    data = errors.read_json_file(path, field, "a Hugging Face config.json")
    return from_hf_config(data, path, field)
