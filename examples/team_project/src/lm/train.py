"""``train_loop(config)``: Ray Train's ``train_loop_per_worker`` (one JAX process per TPU host), public API only:
resume from ``get_checkpoint()`` at the very batch it would have taken next; rank 0's checkpoint reported every
``checkpoint_every`` steps, at the last and at a preemption notice, after which no step runs (it would be lost).

``ray.train.get_preemption_info()`` is a collective, so every rank calls it after every step. Source: Ray 2.60
``ray.train.v2._internal.execution.train_fn_utils.DistributedTrainFnUtils.get_preemption_info``.
"""

from __future__ import annotations

import tempfile
import time
from typing import Any

import jax
import numpy as np

from lm import checkpoint, model, optim, step
from lm.config import Config, as_dict, resolve
from lm.data import Batches

NO_DEADLINE_WAIT_S = 120.0
"""How long to wait to be stopped when the notice has no deadline (Ray 2.60 ``DEFAULT_PREEMPTION_DEADLINE_S``)."""
STOP_MARGIN_S = 60.0
"""How long past the deadline to wait for Ray Train to stop the workers before failing instead."""


def train_loop(config: dict[str, Any]) -> None:
    """``config`` must stay a required parameter: Ray passes ``train_loop_config`` only to a function with one
    (Ray 2.60 ``ray.train.v2._internal.util.construct_train_func``), a default would silently train on defaults."""
    import ray.train

    c = resolve(config)
    rank = ray.train.get_context().get_world_rank()
    mesh = step.make_mesh(c)
    shapes = jax.eval_shape(lambda: model.init_params(c, jax.random.key(c.seed)))
    p_sharding = step.param_shardings(shapes, mesh)
    o_sharding = step.opt_shardings(p_sharding, mesh, shapes)

    start, position = 0, 0
    resumed = ray.train.get_checkpoint()
    if resumed is not None:
        with resumed.as_directory() as directory:
            host_params, host_opt, state = checkpoint.load(directory, shapes, jax.eval_shape(optim.init, shapes))
        params, opt_state = step.place(host_params, p_sharding), step.place(host_opt, o_sharding)
        start, position = int(state["step"]), int(state["data_position"])
    else:
        params, opt_state, _, _ = step.init_state(c, mesh)
    if start >= c.steps:
        return

    batches = Batches(c, step.batch_sharding(mesh), position, _dataset_shard())
    train_step = step.make_train_step(c, mesh, p_sharding, o_sharding)
    tokens_per_step = c.batch_size * c.seq_len
    window_start = time.perf_counter()
    window_steps = 0
    for done in range(start + 1, c.steps + 1):
        params, opt_state, loss = train_step(params, opt_state, batches.next())
        window_steps += 1
        notice = ray.train.get_preemption_info()  # a collective: every rank, after every step
        if notice is None and done % c.checkpoint_every and done != c.steps:
            continue
        loss_value = float(np.asarray(loss.addressable_data(0)))
        elapsed = time.perf_counter() - window_start
        metrics = {"step": done, "loss": loss_value, "data_position": batches.position,
                   "tokens_per_s": window_steps * tokens_per_step / elapsed, "resumed_from": start,
                   "at_notice": notice is not None, "devices": len(jax.devices())}
        _report(metrics, params, opt_state, rank, c)
        if notice is not None and done != c.steps:
            _wait_to_be_stopped(notice.deadline_ms, done)
        window_start, window_steps = time.perf_counter(), 0


def _dataset_shard() -> Any:
    """The trainer's "train" dataset shard, or None (Ray 2.60's docstring says None, its implementation raises
    KeyError: ``ray.train.v2._internal.execution.context.TrainContext.get_dataset_shard``)."""
    import ray.train

    try:
        return ray.train.get_dataset_shard("train")
    except KeyError:
        return None


def _report(metrics: dict[str, Any], params: Any, opt_state: Any, rank: int, c: Config) -> None:
    """Every rank gathers (a collective) and reports; rank 0 alone writes and attaches the checkpoint."""
    import ray.train
    from jax.experimental import multihost_utils

    host_params, host_opt = multihost_utils.process_allgather((params, opt_state), tiled=True)
    with tempfile.TemporaryDirectory() as directory:
        attached = None
        if rank == 0:
            state = {"step": metrics["step"], "data_position": metrics["data_position"],
                     "at_notice": metrics["at_notice"], "resumed_from": metrics["resumed_from"], "config": as_dict(c)}
            checkpoint.save(directory, host_params, host_opt, state)
            attached = ray.train.Checkpoint.from_directory(directory)
        ray.train.report(metrics, checkpoint=attached)


def _wait_to_be_stopped(deadline_ms: int | None, step_done: int) -> None:
    """After the checkpoint at a notice: no more steps until Ray Train stops this worker; failing (a restart from the
    same checkpoint) only when nobody has, well past the deadline."""
    deadline = deadline_ms / 1000 if deadline_ms else time.time() + NO_DEADLINE_WAIT_S
    give_up = deadline + STOP_MARGIN_S
    while time.time() < give_up:
        time.sleep(0.5)
    raise RuntimeError(f"checkpointed at the preemption notice after step {step_done} but was not stopped by "
                       f"{time.strftime('%H:%M:%S', time.localtime(give_up))}")
