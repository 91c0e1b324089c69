"""AdamW with linear warmup and cosine decay, a few lines instead of optax (the kit's image carries jax and numpy
only). Its state is a pytree (``m``, ``v`` like the params, ``count``), saved with them in a checkpoint."""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp

from lm.config import Config

B1, B2, EPS = 0.9, 0.95, 1e-8


def init(params: Any) -> dict[str, Any]:
    zeros = jax.tree.map(jnp.zeros_like, params)
    return {"m": zeros, "v": jax.tree.map(jnp.zeros_like, params), "count": jnp.zeros((), jnp.int32)}


def learning_rate(c: Config, count: jax.Array) -> jax.Array:
    step = count.astype(jnp.float32) + 1
    warm = jnp.minimum(1.0, step / max(c.warmup, 1))
    progress = jnp.clip((step - c.warmup) / max(c.steps - c.warmup, 1), 0.0, 1.0)
    return c.lr * warm * (0.1 + 0.45 * (1 + jnp.cos(jnp.pi * progress)))


def update(c: Config, params: Any, grads: Any, state: dict[str, Any]) -> tuple[Any, dict[str, Any]]:
    """One AdamW step; no weight decay on the norms' scales."""
    count = state["count"] + 1
    m = jax.tree.map(lambda m, g: B1 * m + (1 - B1) * g, state["m"], grads)
    v = jax.tree.map(lambda v, g: B2 * v + (1 - B2) * g * g, state["v"], grads)
    lr = learning_rate(c, state["count"])
    m_hat_scale = 1 / (1 - B1 ** count.astype(jnp.float32))
    v_hat_scale = 1 / (1 - B2 ** count.astype(jnp.float32))

    def step(path: Any, p: jax.Array, m: jax.Array, v: jax.Array) -> jax.Array:
        decay = 0.0 if _is_norm(path) else c.weight_decay * p
        return p - lr * (m * m_hat_scale / (jnp.sqrt(v * v_hat_scale) + EPS) + decay)

    return jax.tree_util.tree_map_with_path(step, params, m, v), {"m": m, "v": v, "count": count}


def _is_norm(path: Any) -> bool:
    return str(getattr(path[-1], "key", "")).startswith("ln")
