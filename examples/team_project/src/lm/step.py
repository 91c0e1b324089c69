"""The mesh over every device of the slice and the one jitted training step (forward, backward, optax's AdamW).

Axes ``("data", "fsdp")``: the batch is split over both; with ``fsdp`` > 1 each parameter (and its optimizer
moments) is also split over ``fsdp`` along its first evenly divisible dimension, and XLA gathers it for use.
"""

from __future__ import annotations

from typing import Any

import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

from lm import model, optim
from lm.config import Config

AXES = ("data", "fsdp")


def make_mesh(c: Config, devices: list[Any] | None = None) -> Mesh:
    devices = list(devices if devices is not None else jax.devices())
    if len(devices) % c.fsdp or c.batch_size % len(devices):
        raise ValueError(f"train_config: fsdp {c.fsdp} and batch_size {c.batch_size} must divide the slice's "
                         f"{len(devices)} devices / be divisible by them")
    return Mesh(np.array(devices).reshape(len(devices) // c.fsdp, c.fsdp), AXES)


def batch_sharding(mesh: Mesh) -> NamedSharding:
    return NamedSharding(mesh, P(AXES, None))


def param_shardings(tree: Any, mesh: Mesh) -> Any:
    """A NamedSharding per leaf: the first dimension ``fsdp`` divides (skipping the stacked-layers axis)."""
    size = mesh.shape["fsdp"]

    def spec(path: Any, leaf: Any) -> NamedSharding:
        shape = getattr(leaf, "shape", ())
        first = 1 if jax.tree_util.keystr(path).startswith("['layers']") else 0
        axes: list[str | None] = [None] * len(shape)
        for i in range(first, len(shape)):
            if size > 1 and shape[i] % size == 0:
                axes[i] = "fsdp"
                break
        return NamedSharding(mesh, P(*axes))

    return jax.tree_util.tree_map_with_path(spec, tree)


def make_train_step(c: Config, mesh: Mesh, params_sharding: Any, opt_sharding: Any) -> Any:
    """``step(params, opt_state, batch) -> (params, opt_state, loss)``, jitted; params and state are donated (their
    buffers are reused for the new ones: one copy of the model in memory, not two)."""

    def train_step(params: Any, opt_state: Any, batch: jax.Array) -> tuple[Any, Any, jax.Array]:
        loss, grads = jax.value_and_grad(model.loss)(params, batch, c)
        params, opt_state = optim.update(c, params, grads, opt_state)
        return params, opt_state, loss

    return jax.jit(train_step, donate_argnums=(0, 1),
                   in_shardings=(params_sharding, opt_sharding, batch_sharding(mesh)),
                   out_shardings=(params_sharding, opt_sharding, NamedSharding(mesh, P())))


def init_state(c: Config, mesh: Mesh) -> tuple[Any, Any, Any, Any]:
    """Fresh params and optimizer state, created sharded on the devices (never whole on one host), and their
    shardings."""
    shapes = jax.eval_shape(lambda: model.init_params(c, jax.random.key(c.seed)))
    p_sharding = param_shardings(shapes, mesh)
    params = jax.jit(lambda: model.init_params(c, jax.random.key(c.seed)), out_shardings=p_sharding)()
    o_sharding = opt_shardings(p_sharding, mesh, shapes)
    opt_state = jax.jit(optim.init, out_shardings=o_sharding)(params)
    return params, opt_state, p_sharding, o_sharding


def opt_shardings(p_sharding: Any, mesh: Mesh, shapes: Any) -> Any:
    """Each optimizer moment sharded as its parameter; the step counts replicated."""
    return optim.shardings(p_sharding, NamedSharding(mesh, P()), shapes)


def place(host_tree: Any, shardings: Any) -> Any:
    """Numpy leaves onto the devices as ``shardings`` (every process holds the whole host copy)."""
    return jax.tree.map(lambda x, s: jax.make_array_from_callback(np.shape(x), s, lambda i: np.asarray(x)[i]),
                        host_tree, shardings)
