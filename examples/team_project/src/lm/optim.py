"""AdamW with linear warmup and cosine decay, from optax (the project's own ``requirements.txt``: the kit's image
carries jax and numpy only). Its state is optax's pytree, saved with the params in a checkpoint."""

from __future__ import annotations

from typing import Any

import jax
import optax

from lm.config import Config

B1, B2, EPS = 0.9, 0.95, 1e-8
FLOOR = 0.1
"""The cosine ends at this fraction of ``lr``."""


def schedule(c: Config) -> optax.Schedule:
    """``lr / warmup`` rising linearly to ``lr`` over ``warmup`` steps, then a cosine down to ``FLOOR * lr`` at
    ``steps``."""
    return optax.warmup_cosine_decay_schedule(init_value=c.lr / max(c.warmup, 1), peak_value=c.lr,
                                              warmup_steps=c.warmup, decay_steps=max(c.steps, c.warmup + 1),
                                              end_value=FLOOR * c.lr)


def optimizer(c: Config) -> optax.GradientTransformation:
    """AdamW; no weight decay on the norms' scales."""
    return optax.adamw(schedule(c), b1=B1, b2=B2, eps=EPS, weight_decay=c.weight_decay, mask=_decayed)


def init(params: Any) -> Any:
    """Fresh optimizer state. Its structure depends on the params only, never on the config's values (the checkpoint
    and the shardings are shaped by it)."""
    return optimizer(Config()).init(params)


def update(c: Config, params: Any, grads: Any, state: Any) -> tuple[Any, Any]:
    """One AdamW step."""
    updates, state = optimizer(c).update(grads, state, params)
    return optax.apply_updates(params, updates), state


def shardings(params_sharding: Any, replicated: Any, shapes: Any) -> Any:
    """The optimizer state's shardings: each moment as its parameter, every other leaf (the step count)
    ``replicated``. ``shapes``: the params' shapes (``jax.eval_shape``)."""
    state = jax.eval_shape(init, shapes)
    return optax.tree_map_params(optimizer(Config()), lambda _, s: s, state, params_sharding,
                                 transform_non_params=lambda _: replicated)


def _decayed(params: Any) -> Any:
    return jax.tree_util.tree_map_with_path(lambda path, _: not _is_norm(path), params)


def _is_norm(path: Any) -> bool:
    return str(getattr(path[-1], "key", "")).startswith("ln")
