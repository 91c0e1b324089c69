"""Data-parallel training of a small MLP on synthetic data with Ray Train v2's JaxTrainer, one worker per host.

Runs unchanged as a GKE RayJob entrypoint and on the local emulated slice::

    RAYTPU_WORKLOAD='<WorkloadSpec JSON>' python -m raytpu.workloads.train --storage-path PATH [--name RUN]

The slice comes from the workload spec (``RAYTPU_WORKLOAD``; the job never re-plans it). The ScalingConfig
comes from its SlicePlan (``use_tpu=True``, ``topology``, ``accelerator_type``,
``num_workers = hosts``, ``TPU = chips per host``), so Ray reserves one whole slice. Every worker is a
JAX process (``jax.distributed`` is initialised by Ray Train; on an emulated slice the hosts set
``JAX_PLATFORMS=cpu`` and ``JAX_NUM_CPU_DEVICES``); the global batch is sharded over every device of
the slice and gradients are all-reduced by ``jit``.

Fault tolerance: rank 0 writes a checkpoint (params, optimizer state, step, loss history) every
``--checkpoint-every`` steps under ``--storage-path`` (a local directory, or ``gs://bucket/...`` on GKE);
``FailureConfig(max_failures=--max-failures)`` restarts the worker group from the latest checkpoint
(on a replacement host or another intact slice). When no slice is free, each attempt to start the
worker group gives up after ``--start-timeout-s`` and the run fails after ``--slice-retries`` such
attempts (``controller_failure_limit``) instead of waiting forever.

Prints one line ``RAYTPU_TRAIN_RESULT {json}`` (steps, first/final loss, loss history, step time,
throughput, restarts, checkpoint) and exits 1 when training failed.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import tempfile
import time
from typing import Any

from raytpu.plan import SlicePlan
from raytpu.spec import WorkloadSpec
from raytpu.workloads._entry import guarded

MARKER = "RAYTPU_TRAIN_RESULT"
STATE_FILE = "state.npz"
META_FILE = "meta.json"


def _model_dims(config: dict[str, Any]) -> tuple[int, int]:
    return int(config["features"]), int(config["hidden"])


def train_loop_per_worker(config: dict[str, Any]) -> None:
    """One JAX process per host: sharded synthetic batches, MLP regression, momentum SGD, checkpoints."""
    import jax
    import jax.numpy as jnp
    import numpy as np
    import ray.train
    from jax.sharding import Mesh, NamedSharding
    from jax.sharding import PartitionSpec as P

    ctx = ray.train.get_context()
    rank = ctx.get_world_rank()
    features, hidden = _model_dims(config)
    steps, batch = int(config["steps"]), int(config["batch_size"])
    every, lr, momentum = int(config["checkpoint_every"]), float(config["lr"]), 0.9

    devices = jax.devices()
    mesh = Mesh(np.array(devices), ("data",))
    data_sharding = NamedSharding(mesh, P("data"))
    replicated = NamedSharding(mesh, P())
    global_batch = max(batch, len(devices)) // len(devices) * len(devices)

    rng = np.random.default_rng(0)  # the "true" function every process agrees on
    true_w1 = rng.normal(size=(features, hidden)).astype(np.float32) / np.sqrt(features)
    true_w2 = rng.normal(size=(hidden, 1)).astype(np.float32) / np.sqrt(hidden)

    def batch_at(step: int) -> tuple[jax.Array, jax.Array]:
        def rows(index: Any) -> np.ndarray:
            start = index[0].start or 0 if index else 0
            stop = index[0].stop or global_batch if index else global_batch
            r = np.random.default_rng([step, start])
            return r.normal(size=(stop - start, features)).astype(np.float32)

        x = jax.make_array_from_callback((global_batch, features), data_sharding, rows)
        y = jax.jit(lambda v: jnp.tanh(v @ true_w1) @ true_w2, out_shardings=data_sharding)(x)
        return x, y

    def init_params() -> dict[str, np.ndarray]:
        r = np.random.default_rng(1)
        return {"w1": (r.normal(size=(features, hidden)) / np.sqrt(features)).astype(np.float32),
                "b1": np.zeros((hidden,), np.float32),
                "w2": (r.normal(size=(hidden, 1)) / np.sqrt(hidden)).astype(np.float32),
                "b2": np.zeros((1,), np.float32)}

    def loss_fn(params: dict[str, jax.Array], x: jax.Array, y: jax.Array) -> jax.Array:
        h = jnp.tanh(x @ params["w1"] + params["b1"])
        return jnp.mean((h @ params["w2"] + params["b2"] - y) ** 2)

    @jax.jit
    def update(params: Any, velocity: Any, x: jax.Array, y: jax.Array) -> tuple[Any, Any, jax.Array]:
        loss, grads = jax.value_and_grad(loss_fn)(params, x, y)
        velocity = jax.tree.map(lambda v, g: momentum * v + g, velocity, grads)
        params = jax.tree.map(lambda p, v: p - lr * v, params, velocity)
        return params, velocity, loss

    start_step, history, restarts = 0, [], 0
    host_params = init_params()
    host_velocity = {k: np.zeros_like(v) for k, v in host_params.items()}
    checkpoint = ray.train.get_checkpoint()
    if checkpoint is not None:
        with checkpoint.as_directory() as directory:
            saved = np.load(os.path.join(directory, STATE_FILE))
            host_params = {k: saved[f"p_{k}"] for k in host_params}
            host_velocity = {k: saved[f"v_{k}"] for k in host_params}
            with open(os.path.join(directory, META_FILE)) as f:
                meta = json.load(f)
        start_step, history, restarts = meta["step"], meta["history"], meta["restarts"] + 1
    params = jax.device_put(host_params, replicated)
    velocity = jax.device_put(host_velocity, replicated)

    step_times: list[float] = []
    window_losses: list[float] = []
    for step in range(start_step, steps):
        x, y = batch_at(step)
        t = time.perf_counter()
        params, velocity, loss = update(params, velocity, x, y)
        loss_value = float(np.asarray(loss.addressable_data(0)))
        step_times.append(time.perf_counter() - t)
        window_losses.append(loss_value)
        if config.get("step_sleep_s"):
            time.sleep(float(config["step_sleep_s"]))
        done = step + 1
        if done % every and done != steps:
            continue
        timed = step_times[1:] or step_times  # the first step of a process includes compilation
        step_time = float(np.mean(timed))
        history.append({"step": done, "loss": float(np.mean(window_losses))})
        window_losses = []
        metrics = {"step": done, "loss": loss_value, "step_time_s": step_time,
                   "samples_per_s": global_batch / step_time if step_time else 0.0,
                   "restarts": restarts, "resumed_from": start_step, "history": history,
                   "global_batch": global_batch, "devices": len(devices), "workers": ctx.get_world_size()}
        with tempfile.TemporaryDirectory() as tmp:
            ckpt = None
            if rank == 0:
                host = jax.device_get((params, velocity))
                arrays: dict[str, Any] = {f"p_{k}": np.asarray(v) for k, v in host[0].items()}
                arrays.update({f"v_{k}": np.asarray(v) for k, v in host[1].items()})
                np.savez(os.path.join(tmp, STATE_FILE), **arrays)
                with open(os.path.join(tmp, META_FILE), "w") as f:
                    json.dump({"step": done, "history": history, "restarts": restarts}, f)
                ckpt = ray.train.Checkpoint.from_directory(tmp)
            ray.train.report(metrics, checkpoint=ckpt)


def scaling_config(plan: SlicePlan) -> Any:
    """JaxTrainer's ScalingConfig for one whole slice of ``plan``: one worker per host, all its chips."""
    from ray.train.v2.api.config import ScalingConfig

    return ScalingConfig(use_tpu=True, topology=plan.topology, accelerator_type=plan.ray_accelerator_type,
                         num_workers=plan.hosts, resources_per_worker={"TPU": plan.chips_per_host, "CPU": 1})


def build_trainer(plan: SlicePlan, args: argparse.Namespace) -> Any:
    """The JaxTrainer (not yet fitted) for ``plan`` and the workload's flags."""
    from ray.train.v2.api.config import CheckpointConfig, FailureConfig, RunConfig
    from ray.train.v2.jax import JaxTrainer

    config = {"steps": args.steps, "batch_size": args.batch_size, "checkpoint_every": args.checkpoint_every,
              "lr": args.lr, "features": args.features, "hidden": args.hidden, "step_sleep_s": args.step_sleep_s}
    run = RunConfig(
        name=args.name, storage_path=args.storage_path,
        failure_config=FailureConfig(max_failures=args.max_failures, controller_failure_limit=args.slice_retries),
        checkpoint_config=CheckpointConfig(num_to_keep=2))
    return JaxTrainer(train_loop_per_worker, train_loop_config=config, scaling_config=scaling_config(plan),
                      run_config=run)


def build_parser() -> argparse.ArgumentParser:
    """The workload's per-run flags (its slice comes from ``RAYTPU_WORKLOAD``)."""
    parser = argparse.ArgumentParser(prog="python -m raytpu.workloads.train", description=__doc__.split("\n")[0])
    parser.add_argument("--storage-path", required=True, help="checkpoint root: a local dir or gs://bucket/path")
    parser.add_argument("--name", default="raytpu-train", help="run name (a directory under the storage path)")
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--batch-size", type=int, default=256, help="global batch (rounded to the device count)")
    parser.add_argument("--checkpoint-every", type=int, default=10)
    parser.add_argument("--lr", type=float, default=0.05)
    parser.add_argument("--features", type=int, default=32)
    parser.add_argument("--hidden", type=int, default=128)
    parser.add_argument("--max-failures", type=int, default=1, help="worker-group restarts from checkpoint")
    parser.add_argument("--slice-retries", type=int, default=2,
                        help="attempts to get a slice before failing (controller_failure_limit)")
    parser.add_argument("--start-timeout-s", type=float, default=60.0,
                        help="bound on each attempt to place the workers on a slice")
    parser.add_argument("--step-sleep-s", type=float, default=0.0, help="pause per step (tests: a longer run)")
    parser.add_argument("--address", default=None, help="Ray address (default: RAY_ADDRESS, else auto)")
    return parser


def run(args: argparse.Namespace) -> dict[str, Any]:
    """Fits the trainer; returns the summary (also printed as ``RAYTPU_TRAIN_RESULT {json}``)."""
    import ray

    plan = WorkloadSpec.from_env().plan
    if not args.storage_path.startswith(("gs://", "s3://")):
        args.storage_path = os.path.abspath(args.storage_path)
    env = {"RAY_TRAIN_WORKER_GROUP_START_TIMEOUT_S": str(args.start_timeout_s),
           "RAY_TRAIN_HEALTH_CHECK_INTERVAL_S": os.environ.get("RAY_TRAIN_HEALTH_CHECK_INTERVAL_S", "0.5")}
    if not ray.is_initialized():
        ray.init(address=args.address or os.environ.get("RAY_ADDRESS") or "auto", log_to_driver=False,
                 logging_level=logging.ERROR, runtime_env={"env_vars": env})
    t0 = time.monotonic()
    summary: dict[str, Any] = {"ok": False, "slice": f"{plan.generation} {plan.topology}",
                               "workers": plan.hosts, "steps": args.steps}
    try:
        result = build_trainer(plan, args).fit()
    except Exception as exc:  # TrainingFailedError and friends: reported, exit 1
        summary.update(error=f"{type(exc).__name__}: {str(exc).strip().splitlines()[0][:500]}")
        result = None
    summary["duration_s"] = round(time.monotonic() - t0, 2)
    if result is not None:
        metrics = dict(result.metrics or {})
        history = metrics.get("history") or []
        summary.update(
            ok=result.error is None and metrics.get("step") == args.steps,
            steps_done=metrics.get("step"), first_loss=history[0]["loss"] if history else None,
            final_loss=metrics.get("loss"), history=history, step_time_s=metrics.get("step_time_s"),
            samples_per_s=metrics.get("samples_per_s"), restarts=metrics.get("restarts"),
            resumed_from=metrics.get("resumed_from"), devices=metrics.get("devices"),
            global_batch=metrics.get("global_batch"),
            checkpoint=result.checkpoint.path if result.checkpoint else None)
        if result.error is not None:
            summary["error"] = f"{type(result.error).__name__}: {str(result.error).splitlines()[0][:500]}"
    print(f"{MARKER} {json.dumps(summary, sort_keys=True)}", flush=True)
    return summary


def parse_result(text: str) -> dict[str, Any] | None:
    """The last ``RAYTPU_TRAIN_RESULT`` summary in ``text``, or None."""
    found = None
    for line in text.splitlines():
        if line.startswith(MARKER + " "):
            try:
                found = json.loads(line[len(MARKER) + 1:])
            except json.JSONDecodeError:
                continue
    return found


def main(argv: list[str] | None = None) -> int:
    """Entry point: 0 when training finished every step, 1 otherwise, 2 for an impossible slice."""
    args = build_parser().parse_args(argv)
    return guarded(lambda: 0 if run(args)["ok"] else 1)

if __name__ == "__main__":
    sys.exit(main())
