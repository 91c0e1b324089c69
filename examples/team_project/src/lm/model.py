"""The decoder: learned positions, pre-RMSNorm blocks (fused QKV attention, GELU MLP) scanned over layers.

Parameters are fp32 (the master copy the optimizer updates); :func:`loss` casts them to bf16 for the forward and
backward pass, so every matmul runs in bf16 and gradients come back in fp32.
"""

from __future__ import annotations

import math
from functools import partial
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from lm.config import Config

Params = dict[str, Any]


def init_params(c: Config, key: jax.Array) -> Params:
    """fp32 parameters; the layers are stacked on a leading axis (one scanned block, one compile)."""
    d, f, n = c.d_model, c.ff, c.n_layers
    keys = jax.random.split(key, 6)

    def normal(k: jax.Array, shape: tuple[int, ...], fan_in: int) -> jax.Array:
        return jax.random.normal(k, shape, jnp.float32) / math.sqrt(fan_in)

    return {
        "embed": normal(keys[0], (c.vocab, d), 1) * 0.02,
        "pos": normal(keys[1], (c.seq_len, d), 1) * 0.02,
        "layers": {
            "ln1": jnp.ones((n, d), jnp.float32),
            "wqkv": normal(keys[2], (n, d, 3 * d), d),
            "wo": normal(keys[3], (n, d, d), d) / math.sqrt(2 * n),
            "ln2": jnp.ones((n, d), jnp.float32),
            "w_up": normal(keys[4], (n, d, f), d),
            "w_down": normal(keys[5], (n, f, d), f) / math.sqrt(2 * n),
        },
        "ln_f": jnp.ones((d,), jnp.float32),
        "unembed": normal(jax.random.fold_in(key, 7), (d, c.vocab), d),
    }


def param_count(params: Params) -> int:
    return sum(int(np.prod(x.shape)) for x in jax.tree.leaves(params))


def matmul_params(c: Config) -> int:
    """Parameters that take part in a matmul per token (all but the embedding and position lookups)."""
    return c.n_layers * (4 * c.d_model**2 + 2 * c.d_model * c.ff) + c.d_model * c.vocab


def model_flops_per_step(c: Config, batch: int) -> float:
    """6 x matmul params x tokens (forward 2, backward 4) + attention's 12 x layers x d_model x seq^2 x batch
    (QK^T and AV, counted without the causal half, as PaLM's MFU does)."""
    tokens = batch * c.seq_len
    return 6.0 * matmul_params(c) * tokens + 12.0 * c.n_layers * c.d_model * c.seq_len**2 * batch


def attention_kind(c: Config) -> str:
    """``auto``: Pallas flash attention on TPU, plain einsum elsewhere (the Pallas TPU kernels need a TPU)."""
    if c.attention != "auto":
        return c.attention
    return "flash" if jax.default_backend() == "tpu" else "einsum"


def _rms_norm(x: jax.Array, scale: jax.Array) -> jax.Array:
    x32 = x.astype(jnp.float32)
    normed = x32 * jax.lax.rsqrt(jnp.mean(x32 * x32, axis=-1, keepdims=True) + 1e-6)
    return (normed * scale.astype(jnp.float32)).astype(x.dtype)


def _einsum_attention(q: jax.Array, k: jax.Array, v: jax.Array) -> jax.Array:
    """q, k, v: [batch, heads, seq, head_dim]; causal; softmax in fp32."""
    seq = q.shape[2]
    scores = jnp.einsum("bhqd,bhkd->bhqk", q, k).astype(jnp.float32) / math.sqrt(q.shape[-1])
    causal = jnp.tril(jnp.ones((seq, seq), bool))
    scores = jnp.where(causal, scores, -1e30)
    weights = jax.nn.softmax(scores, axis=-1).astype(v.dtype)
    return jnp.einsum("bhqk,bhkd->bhqd", weights, v)


def _flash_attention(q: jax.Array, k: jax.Array, v: jax.Array) -> jax.Array:
    from jax.experimental.pallas.ops.tpu.flash_attention import BlockSizes, flash_attention

    seq = q.shape[2]
    block = min(512, seq)
    sizes = BlockSizes(block_q=block, block_k_major=block, block_k=block, block_b=1,
                       block_q_major_dkv=block, block_k_major_dkv=block, block_k_dkv=block, block_q_dkv=block,
                       block_k_major_dq=block, block_k_dq=block, block_q_dq=block)
    return flash_attention(q, k, v, causal=True, sm_scale=1.0 / math.sqrt(q.shape[-1]), block_sizes=sizes)


def _splash_attention(q: jax.Array, k: jax.Array, v: jax.Array) -> jax.Array:
    from jax.experimental.pallas.ops.tpu.splash_attention import splash_attention_kernel as splash
    from jax.experimental.pallas.ops.tpu.splash_attention import splash_attention_mask as masks

    heads, seq = q.shape[1], q.shape[2]
    mask = masks.MultiHeadMask([masks.CausalMask((seq, seq)) for _ in range(heads)])
    kernel = splash.make_splash_mha_single_device(mask)
    return jax.vmap(kernel)(q / math.sqrt(q.shape[-1]), k, v)


ATTENTION_FNS = {"einsum": _einsum_attention, "flash": _flash_attention, "splash": _splash_attention}


def _block(x: jax.Array, layer: Params, c: Config, attend: Any) -> jax.Array:
    b, s, d = x.shape
    h = _rms_norm(x, layer["ln1"])
    qkv = (h @ layer["wqkv"]).reshape(b, s, 3, c.n_heads, c.head_dim)
    q, k, v = (qkv[:, :, i].transpose(0, 2, 1, 3) for i in range(3))  # [b, heads, s, head_dim]
    attn = attend(q, k, v).transpose(0, 2, 1, 3).reshape(b, s, d)
    x = x + attn @ layer["wo"]
    h = _rms_norm(x, layer["ln2"])
    return x + jax.nn.gelu(h @ layer["w_up"]) @ layer["w_down"]


REMAT_POLICIES = {"full": None, "dots": jax.checkpoint_policies.dots_with_no_batch_dims_saveable}


def logits(params: Params, tokens: jax.Array, c: Config) -> jax.Array:
    """[batch, seq] token ids to [batch, seq, vocab] fp32 logits; compute in ``params``' dtype."""
    dtype = params["embed"].dtype
    x = (params["embed"][tokens] + params["pos"][: tokens.shape[1]]).astype(dtype)
    block: Any = partial(_block, c=c, attend=ATTENTION_FNS[attention_kind(c)])
    if c.remat != "none":
        block = jax.checkpoint(block, policy=REMAT_POLICIES[c.remat])

    def body(carry: jax.Array, layer: Params) -> tuple[jax.Array, None]:
        return block(carry, layer), None

    x, _ = jax.lax.scan(body, x, params["layers"])
    x = _rms_norm(x, params["ln_f"])
    return (x @ params["unembed"]).astype(jnp.float32)


def loss(params: Params, batch: jax.Array, c: Config) -> jax.Array:
    """Mean next-token cross-entropy of ``batch`` ([batch, seq + 1] ids), the forward in bf16."""
    low = jax.tree.map(lambda p: p.astype(jnp.bfloat16), params)
    out = logits(low, batch[:, :-1], c)
    targets = batch[:, 1:]
    picked = jnp.take_along_axis(out, targets[..., None], axis=-1)[..., 0]
    return jnp.mean(jax.nn.logsumexp(out, axis=-1) - picked)
