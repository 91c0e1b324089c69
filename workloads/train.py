"""Data-parallel training with Ray Train v2's JaxTrainer, one worker per host of one whole slice (N for multi-slice).

The model is a small MLP, or the workload's ``train_loop`` (:mod:`raytpu.workloads.support.team_train`). The slice comes
from the workload spec (``RAYTPU_WORKLOAD``), never re-planned; where Ray 2.60 cannot see a whole slice the driver
reserves one itself (:func:`scaling_config`). ``--name`` resumes an existing run; rank 0 checkpoints, restarts resume
from it, and waits for a slice are bounded (:func:`attempt_wait`). Prints ``RAYTPU_TRAIN_RESULT {json}``; exits 1
when training failed or ran no step. Details: docs/FACTS.md#ray-train-workloads.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import secrets
import statistics
import sys
import tempfile
import time
from typing import Any

from raytpu.core.common import errors
from raytpu.core.common.timeline import Stamp, compile_started, stamp, stamp_line
from raytpu.core.common.train_result import MARKER as MARKER  # kept importable here; readers use the core's
from raytpu.core.common.train_result import parse_result as parse_result
from raytpu.core.common.train_result import result_line
from raytpu.core.specs.runtime import checkpoints, compile_cache, data
from raytpu.core.specs.slices import multislice
from raytpu.core.specs.spec import WorkloadSpec
from raytpu.core.tpu.plan import RAY_SLICE_LABEL, SlicePlan
from raytpu.workloads.support import train_data
from raytpu.workloads.support._entry import Parser, connect_quiet_driver, end_quiet_driver, guarded
from raytpu.workloads.support.compile_watch import CompileWatch
from raytpu.workloads.support.preemption import (
    PREEMPTION_POLL_ENV,
    PREEMPTION_POLL_S,
    add_preemption_arguments,
    failure_config,
    preemption_notice,
    record_progress,
    wait_for_reclaim,
)
from raytpu.workloads.support.slice_training import (
    PIN_NOTICE,
    compile_verdict,
    ray_assumed_hosts,
    reserve_for_pinning,
    scaling_config,
    stamp_joined,
    start_autoscaling_coordinator,
)

STATE_FILE = "state.npz"
META_FILE = "meta.json"
WAIT_S = 60.0
"""``--start-timeout-s``'s default share per wait: Ray 2.60's ``DEFAULT_WORKER_GROUP_START_TIMEOUT_S``."""



def default_run_name() -> str:
    """A run name no earlier launch used: ``raytpu-train-<UTC time>-<random>`` (32 random bits: two launches in one
    second collided once in 65,536 with 16)."""
    return f"raytpu-train-{time.strftime('%Y%m%d-%H%M%S', time.gmtime())}-{secrets.token_hex(4)}"


def _model_dims(config: dict[str, Any]) -> tuple[int, int]:
    return int(config["features"]), int(config["hidden"])


def train_loop_per_worker(config: dict[str, Any]) -> None:
    """One JAX process per host: sharded synthetic batches, MLP regression, momentum SGD, checkpoints.

    Counts XLA compilations and persistent-cache hits through ``jax.monitoring`` (:class:`CompileWatch`): the data
    and update functions are compiled once, before the first step, so ``compiles_during_steps`` is 0.
    """
    config = {**config, "placed_wall": time.time()}  # the workers run once JaxTrainer holds its slice
    with CompileWatch() as watch:
        _train(config, watch)


def _train(config: dict[str, Any], watch: CompileWatch) -> None:
    import jax
    import jax.numpy as jnp
    import numpy as np
    import ray
    import ray.train
    from jax.sharding import Mesh, NamedSharding
    from jax.sharding import PartitionSpec as P

    ctx = ray.train.get_context()
    rank = ctx.get_world_rank()
    launch = str(config["launch"])
    features, hidden = _model_dims(config)
    steps, batch = int(config["steps"]), int(config["batch_size"])
    every, lr, momentum = int(config["checkpoint_every"]), float(config["lr"]), 0.9

    devices = jax.devices()
    slices = int(config.get("slices", 1))
    names, slice_ids = _placement()
    ray_slices = {name: names.count(name) for name in sorted(set(names))}
    megascale = _megascale_view(slices, names, slice_ids) if slices > 1 else None
    mesh = Mesh(_device_grid(devices, megascale["slice_ids"] if megascale else None, slices), MESH_AXES)
    data_sharding = NamedSharding(mesh, P(MESH_AXES))
    replicated = NamedSharding(mesh, P())
    global_batch = max(batch, len(devices)) // len(devices) * len(devices)

    rng = np.random.default_rng(0)  # the "true" function every process agrees on
    true_w1 = rng.normal(size=(features, hidden)).astype(np.float32) / np.sqrt(features)
    true_w2 = rng.normal(size=(hidden, 1)).astype(np.float32) / np.sqrt(hidden)

    def inputs_at(step: int) -> jax.Array:
        def rows(index: Any) -> np.ndarray:
            start = index[0].start or 0 if index else 0
            stop = index[0].stop or global_batch if index else global_batch
            r = np.random.default_rng([step, start])
            return r.normal(size=(stop - start, features)).astype(np.float32)

        return jax.make_array_from_callback((global_batch, features), data_sharding, rows)

    def init_params() -> dict[str, np.ndarray]:
        r = np.random.default_rng(1)
        return {"w1": (r.normal(size=(features, hidden)) / np.sqrt(features)).astype(np.float32),
                "b1": np.zeros((hidden,), np.float32),
                "w2": (r.normal(size=(hidden, 1)) / np.sqrt(hidden)).astype(np.float32),
                "b2": np.zeros((1,), np.float32)}

    def loss_fn(params: dict[str, jax.Array], x: jax.Array, y: jax.Array, weight: jax.Array) -> jax.Array:
        h = jnp.tanh(x @ params["w1"] + params["b1"])  # a padded row has weight 0: no part in the loss
        return jnp.sum(weight * ((h @ params["w2"] + params["b2"] - y) ** 2)[:, 0]) / jnp.maximum(jnp.sum(weight), 1.0)

    # one jitted function each, defined once: a jax.jit of a fresh lambda per step misses the cache every step
    targets = jax.jit(lambda v: jnp.tanh(v @ true_w1) @ true_w2, out_shardings=data_sharding)

    def update(params: Any, velocity: Any, x: jax.Array, y: jax.Array,
               weight: jax.Array) -> tuple[Any, Any, jax.Array, jax.Array]:
        loss, grads = jax.value_and_grad(loss_fn)(params, x, y, weight)
        velocity = jax.tree.map(lambda v, g: momentum * v + g, velocity, grads)
        params = jax.tree.map(lambda p, v: p - lr * v, params, velocity)
        return params, velocity, loss, jnp.sum(weight)  # the rows this step trained on

    start_step, history, restarts = 0, [], 0
    host_params = init_params()
    host_velocity = {k: np.zeros_like(v) for k, v in host_params.items()}
    checkpoint = ray.train.get_checkpoint()
    meta: dict[str, Any] = {}
    if checkpoint is not None:
        with checkpoint.as_directory() as directory:
            saved = np.load(os.path.join(directory, STATE_FILE))
            host_params = {k: saved[f"p_{k}"] for k in host_params}
            host_velocity = {k: saved[f"v_{k}"] for k in host_params}
            with open(os.path.join(directory, META_FILE)) as f:
                meta = json.load(f)
        start_step, history = meta["step"], meta["history"]
    notices: list[dict[str, Any]] = list(meta.get("notices", []))  # every preemption notice of the run so far
    compile_attempts: list[dict[str, Any]] = list(meta.get("compile_attempts", []))  # each start's compile
    same_launch = meta.get("launch") == launch  # else a fresh run, or an earlier launch's state (resumed)
    restarts = meta["restarts"] + 1 if same_launch else 0
    launch_start = meta["launch_start"] if same_launch else start_step
    if start_step >= steps:
        return  # nothing to run: the driver reports it (no metrics of this launch)

    feed = train_data.Feed(features, global_batch, data_sharding, meta.get("data_position")) \
        if config.get("dataset") else None
    every_row = jax.make_array_from_callback(  # the synthetic data's weights: every row counts
        (global_batch,), data_sharding, lambda index: np.ones((global_batch,), np.float32)[index])
    params = jax.device_put(host_params, replicated)
    velocity = jax.device_put(host_velocity, replicated)
    x_spec = jax.ShapeDtypeStruct((global_batch, features), jnp.float32, sharding=data_sharding)
    t = time.perf_counter()
    make_targets = targets.lower(x_spec).compile()
    step_fn = jax.jit(update, out_shardings=replicated).lower(
        params, velocity, x_spec, jax.ShapeDtypeStruct((global_batch, 1), jnp.float32, sharding=data_sharding),
        jax.ShapeDtypeStruct((global_batch,), jnp.float32, sharding=data_sharding)
    ).compile()  # a compiled executable never recompiles: a changed input shape or sharding raises instead
    compile_time = time.perf_counter() - t
    mine = watch.summary()  # this process's compile, before the gather's own
    processes = _compile_by_process(mine, float(config["placed_wall"]))
    compiled_before_steps = watch.compiles
    # the training function's own output: Ray Train 2.60 keeps it in this worker's log (`raytpu runs logs --rank N`)
    print(f"train: rank {rank}: {len(devices)} devices, compiled in {compile_time:.2f}s, steps {start_step}-{steps}",
          flush=True)
    slice_name = ray.get_runtime_context().get_node_labels().get(RAY_SLICE_LABEL)

    step_times: list[float] = []
    window_losses: list[float] = []
    first_step_wall: float | None = None
    trained_rows = 0
    for step in range(start_step, steps):
        x, y, weight = feed.next() if feed else (inputs_at(step), None, every_row)
        y = make_targets(x) if y is None else y
        t = time.perf_counter()
        params, velocity, loss, rows = step_fn(params, velocity, x, y, weight)
        loss_value = float(np.asarray(loss.addressable_data(0)))
        trained_rows += int(np.asarray(rows.addressable_data(0)))
        step_times.append(time.perf_counter() - t)
        window_losses.append(loss_value)
        if first_step_wall is None:  # this attempt's compile: what a restart or a resume pays again
            first_step_wall = time.time()
            compile_attempts.append({**mine, "processes": processes, "restarts": restarts, "launch": launch})
        if config.get("step_sleep_s"):
            time.sleep(float(config["step_sleep_s"]))
        done = step + 1
        record_progress(config, rank, done, restarts)
        notice = preemption_notice(done)  # a collective: every rank asks after every step
        if notice is not None:
            notices.append({**notice, "launch": launch, "restarts": restarts})
        if notice is None and done % every and done != steps:
            continue
        step_time = statistics.median(step_times)
        history.append({"step": done, "loss": float(np.mean(window_losses))})
        window_losses = []
        metrics = {"step": done, "loss": loss_value, "step_time_s": step_time, "compile_time_s": compile_time,
                   "samples_per_s": global_batch / step_time if step_time else 0.0,
                   "compiles": watch.compiles, "compiles_during_steps": watch.compiles - compiled_before_steps,
                   "compile_attempts": compile_attempts,
                   "restarts": restarts, "resumed_from": start_step, "history": history,
                   "launch": launch, "start_step": launch_start, "steps_run": done - launch_start,
                   "global_batch": global_batch, "devices": len(devices), "workers": ctx.get_world_size(),
                   "slice_name": slice_name, "ray_slices": ray_slices, "mesh": dict(mesh.shape),
                   "megascale": megascale,
                   "placed_wall": config["placed_wall"], "first_step_wall": first_step_wall,
                   "first_step": start_step + 1, "at_notice": notice is not None, "notices": notices,
                   "resumed_at_notice": bool(meta.get("at_notice")) and start_step == meta.get("step"),
                   "data": {**feed.summary(), "trained_rows": trained_rows} if feed else None}
        with tempfile.TemporaryDirectory() as tmp:
            ckpt = None
            if rank == 0:
                host = jax.device_get((params, velocity))
                arrays: dict[str, Any] = {f"p_{k}": np.asarray(v) for k, v in host[0].items()}
                arrays.update({f"v_{k}": np.asarray(v) for k, v in host[1].items()})
                np.savez(os.path.join(tmp, STATE_FILE), **arrays)
                with open(os.path.join(tmp, META_FILE), "w") as f:
                    json.dump({"step": done, "history": history, "restarts": restarts, "launch": launch,
                               "launch_start": launch_start, "at_notice": notice is not None,
                               "notices": notices, "data_position": feed.position() if feed else None,
                               "compile_attempts": compile_attempts}, f)
                ckpt = ray.train.Checkpoint.from_directory(tmp)
            ray.train.report(metrics, checkpoint=ckpt)
        if notice is not None and done != steps:
            wait_for_reclaim(notice, float(config.get("preemption_grace_s", 0.0)))


MESH_AXES = ("slice", "data")
"""The training mesh: ``slice`` crosses the DCN (one entry per slice), ``data`` stays within a slice's ICI."""


def _compile_by_process(mine: dict[str, Any], since_wall: float) -> list[dict[str, Any]]:
    """Every process's compile so far (seconds, cache hits, misses, when it ended), by JAX process index, in one gather
    (a collective: every process calls it once per attempt): the first step waits for the last of them, and a host the
    cache did not serve shows (JAX writes the cache from process 0 only)."""
    import jax
    import numpy as np
    from jax.experimental import multihost_utils

    ended = (mine["wall"] or since_wall) - since_wall  # float32 holds seconds since placement, not an epoch time
    row = np.array([mine["s"], mine["hits"], mine["misses"], ended], np.float32)
    table = np.asarray(multihost_utils.process_allgather(row)).reshape(jax.process_count(), len(row))
    return [{"process": i, "s": round(float(s), 3), "hits": int(hits), "misses": int(misses),
             "wall": round(since_wall + float(w), 3)} for i, (s, hits, misses, w) in enumerate(table)]


def _megascale_view(slices: int, names: list[str], ids: list[int]) -> dict[str, Any]:
    """Every process's ``MEGASCALE_*`` as Ray set it (:func:`_placement`): the slice id of each process (by JAX
    process index), and whether processes on one Ray slice share one slice id and processes on different slices
    do not."""
    pairs = set(zip(ids, names, strict=True))
    return {"num_slices": int(os.environ.get("MEGASCALE_NUM_SLICES", "0")), "slice_ids": ids,
            "coordinator": os.environ.get("MEGASCALE_COORDINATOR_ADDRESS"), "port": os.environ.get("MEGASCALE_PORT"),
            "ids_match_ray_slices": len(pairs) == len(set(ids)) == len(set(names)) == slices}


SLICE_NAME_BYTES = 128
"""Room for one slice name in :func:`_placement`'s gather (a longer name is cut to that many bytes)."""


def _placement() -> tuple[list[str], list[int]]:
    """Every process's Ray slice (``ray.io/tpu-slice-name``) and ``MEGASCALE_SLICE_ID`` (-1: unset), by JAX process
    index, in one gather (a collective: every process calls it once per attempt): where this attempt runs, as
    measured, not planned."""
    import jax
    import numpy as np
    import ray
    from jax.experimental import multihost_utils

    own = str(ray.get_runtime_context().get_node_labels().get(RAY_SLICE_LABEL) or "").encode()[:SLICE_NAME_BYTES]
    mine = np.concatenate([[int(os.environ.get("MEGASCALE_SLICE_ID", "-1"))],
                           np.frombuffer(own.ljust(SLICE_NAME_BYTES, b"\0"), np.uint8)]).astype(np.int32)
    table = np.asarray(multihost_utils.process_allgather(mine)).reshape(jax.process_count(), 1 + SLICE_NAME_BYTES)
    names = [bytes(row.astype(np.uint8)).rstrip(b"\0").decode(errors="replace") for row in table[:, 1:]]
    return names, [int(v) for v in table[:, 0]]


def _device_grid(devices: list[Any], slice_ids: list[int] | None, slices: int) -> Any:
    """Devices as a ``(slices, devices per slice)`` grid: row ``s`` holds the devices of the processes whose
    ``MEGASCALE_SLICE_ID`` is ``s`` (on TPU, libtpu gives each device that slice as ``slice_index``, which
    ``create_hybrid_device_mesh`` reads)."""
    import numpy as np

    if slices == 1:
        return np.array(devices).reshape(1, len(devices))
    if devices[0].platform == "tpu":  # CPU devices carry a slice_index too, 0 on every process
        from jax.experimental import mesh_utils

        per_slice = len(devices) // slices
        return mesh_utils.create_hybrid_device_mesh((1, per_slice), (slices, 1), devices)
    assert slice_ids is not None
    rows: list[list[Any]] = [[] for _ in range(slices)]
    for device in sorted(devices, key=lambda d: (d.process_index, d.id)):
        rows[slice_ids[device.process_index]].append(device)
    return np.array(rows)


def build_trainer(plan: SlicePlan, args: argparse.Namespace, launch: str, slice_name: str | None = None,
                  slices: int = 1, datasets: dict[str, Any] | None = None) -> Any:
    """The JaxTrainer (not yet fitted) for ``plan`` and the workload's flags; ``launch`` tags this launch's
    metrics, ``slice_name`` pins the workers (:func:`scaling_config`), ``slices`` > 1 spans that many slices."""
    from ray.train.v2.api.config import CheckpointConfig, RunConfig
    from ray.train.v2.jax import JaxTrainer

    config = {"steps": args.steps, "batch_size": args.batch_size, "checkpoint_every": args.checkpoint_every,
              "lr": args.lr, "features": args.features, "hidden": args.hidden, "step_sleep_s": args.step_sleep_s,
              "launch": launch, "slices": slices, "preemption_grace_s": args.preemption_grace_s,
              "progress_file": args.progress_file, "dataset": datasets is not None}
    run = RunConfig(
        name=args.name, storage_path=args.storage_path, failure_config=failure_config(args),
        checkpoint_config=CheckpointConfig(num_to_keep=args.keep_checkpoints))
    return JaxTrainer(train_loop_per_worker, train_loop_config=config, datasets=datasets,
                      dataset_config=train_data.data_config() if datasets else None,
                      scaling_config=scaling_config(plan, slice_name, slices), run_config=run)


def attempt_wait(plan: SlicePlan, slices: int, attempt_s: float | None) -> dict[str, Any]:
    """Ray's per-wait timeout that keeps one attempt's whole wait within ``attempt_s`` (``--start-timeout-s``; None:
    :data:`WAIT_S` per wait): Ray 2.60 gives each of its :func:`raytpu.core.specs.slices.multislice.reservation_waits`
    the full timeout, so N multi-host slices would otherwise wait up to N + 1 times it. InvalidInput for a bound that is
    not a positive number."""
    waits = multislice.reservation_waits(plan, slices)
    attempt_s = WAIT_S * waits if attempt_s is None else attempt_s
    if not math.isfinite(attempt_s) or attempt_s <= 0:
        raise errors.invalid_value("--start-timeout-s", attempt_s, "is not a positive number of seconds",
                                   "seconds > 0: the bound on one attempt's whole wait for its slices")
    return {"attempt_s": attempt_s, "waits": waits, "per_wait_s": round(attempt_s / waits, 3)}


def build_parser() -> argparse.ArgumentParser:
    """The workload's per-run flags (its slice comes from ``RAYTPU_WORKLOAD``)."""
    parser = Parser(prog="python -m raytpu.workloads.train", description=__doc__.split("\n")[0])
    parser.add_argument("--storage-path", required=True,
                        help="checkpoint root: a directory every Ray node shares (GKE: the bucket's GCS FUSE mount)")
    parser.add_argument("--name", default=None,
                        help="run name, a directory under the storage path (default: a new one per launch); "
                             "an existing run's name resumes it")
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--batch-size", type=int, default=256, help="global batch (rounded to the device count)")
    parser.add_argument("--checkpoint-every", type=int, default=10)
    parser.add_argument("--lr", type=float, default=0.05)
    parser.add_argument("--features", type=int, default=32)
    parser.add_argument("--hidden", type=int, default=128)
    parser.add_argument("--max-failures", type=int, default=1, help="worker-group restarts from checkpoint")
    parser.add_argument("--slice-retries", type=int, default=2,
                        help="attempts to get a slice before failing (controller_failure_limit)")
    parser.add_argument("--start-timeout-s", type=float, default=None,
                        help="bound on one attempt's whole wait to place the workers (every slice head Ray "
                             "reserves in turn, then the placement group): each of its waits gets an equal share "
                             f"(default: {WAIT_S:g}s per wait, Ray's own)")
    parser.add_argument("--step-sleep-s", type=float, default=0.0, help="pause per step (tests: a longer run)")
    parser.add_argument("--keep-checkpoints", type=int, default=None,
                        help="checkpoints kept (the newest; default: the workload's keep_checkpoints, else 2)")
    add_preemption_arguments(parser)
    parser.add_argument("--address", default=None, help="Ray address (default: RAY_ADDRESS, else auto)")
    return parser


def run(args: argparse.Namespace) -> dict[str, Any]:
    """Fits the trainer; returns the summary (also printed as ``RAYTPU_TRAIN_RESULT {json}``)."""
    work = WorkloadSpec.from_env()
    plan, slices = work.plan, work.slices_per_run
    if args.keep_checkpoints is None:  # the workload's keep_checkpoints (None: Ray keeps all)
        args.keep_checkpoints = checkpoints.kept(work.keep_checkpoints)
    if not args.storage_path.startswith(("gs://", "s3://")):
        args.storage_path = os.path.abspath(args.storage_path)
    args.name = args.name or default_run_name()
    launch = secrets.token_hex(6)
    start_wait = attempt_wait(plan, slices, args.start_timeout_s)  # bad input: exit 2, before Ray is reached
    args.start_timeout_s = start_wait["attempt_s"]
    env = {"RAY_TRAIN_WORKER_GROUP_START_TIMEOUT_S": str(start_wait["per_wait_s"]),
           "RAY_TRAIN_HEALTH_CHECK_INTERVAL_S": os.environ.get("RAY_TRAIN_HEALTH_CHECK_INTERVAL_S", "0.5"),
           PREEMPTION_POLL_ENV: os.environ.get(PREEMPTION_POLL_ENV, str(PREEMPTION_POLL_S)),
           **compile_cache.forwarded(os.environ)}  # the job's cache reaches the workers this driver starts
    if work.dataset is not None:  # before Ray is reached
        errors.raise_found(data.local_input_problems("dataset", work.dataset))
    if work.train_loop is not None:  # the team's function, in the JaxTrainer the kit builds for the slice
        from raytpu.workloads.support import team_train

        return team_train.run(args, work, env)
    connected_here = connect_quiet_driver(args.address, runtime_env={"env_vars": env})
    datasets = train_data.datasets(work.dataset, args.features)  # a bad dataset is exit 2, before any slice
    t0 = time.monotonic()
    summary: dict[str, Any] = {"ok": False, "slice": f"{plan.generation} {plan.topology}", "slices": slices,
                               "workers": plan.hosts * slices,
                               "steps": args.steps, "name": args.name, "storage_path": args.storage_path,
                               "steps_run": 0, "start_wait": start_wait}
    held = None
    try:
        stamp_joined(plan)
        start_autoscaling_coordinator()
        print(f"train: each attempt to place the workers waits at most {args.start_timeout_s:g}s in all "
              f"({start_wait['waits']} wait(s) of {start_wait['per_wait_s']:g}s: the slice heads Ray reserves in turn, "
              "then the placement group)", file=sys.stderr, flush=True)
        assumed = ray_assumed_hosts(plan)
        if assumed != plan.hosts:  # one slice only: validation refuses such a shape across slices
            print(f"train: {PIN_NOTICE} of {plan.hosts} hosts x {plan.chips_per_host} chips "
                  f"({plan.ray_pod_type}) to pin the workers to (Ray takes {plan.topology} for {assumed} host(s))",
                  file=sys.stderr, flush=True)
            held = reserve_for_pinning(plan, args.start_timeout_s * max(args.slice_retries, 1))
            summary["pinned_slice"] = held.slice_name
        if slices > 1:
            print(f"train: reserving {slices} whole {plan.ray_pod_type} slices together ({plan.hosts} hosts each, "
                  f"{plan.hosts * slices} workers); the run waits until {slices} are free, placing none before",
                  file=sys.stderr, flush=True)
        result = build_trainer(plan, args, launch, held.slice_name if held else None, slices, datasets).fit()
    except Exception as exc:  # TrainingFailedError, no slice, and friends: reported, exit 1
        summary.update(error=f"{type(exc).__name__}: {str(exc).strip().splitlines()[0][:500]}")
        result = None
    finally:
        if held is not None:
            held.release()
    summary["duration_s"] = round(time.monotonic() - t0, 2)
    if result is not None:
        summary.update(_outcome(result, args, launch))
    summary.update(compile_verdict(summary.get("compile"), work.compile_budget_s))
    print(result_line(summary), flush=True)
    end_quiet_driver(connected_here)
    return summary


def _outcome(result: Any, args: argparse.Namespace, launch: str) -> dict[str, Any]:
    """The summary fields of a fitted Result. Its metrics are this launch's only when they carry ``launch``: a
    launch that ran no step gets back the restored run's last metrics from Ray Train."""
    metrics = dict(result.metrics or {})
    ours = metrics.get("launch") == launch
    done = metrics.get("step")
    out: dict[str, Any] = {"steps_done": done, "checkpoint": result.checkpoint.path if result.checkpoint else None}
    if result.error is not None:
        out["error"] = f"{type(result.error).__name__}: {str(result.error).splitlines()[0][:500]}"
    if not ours:
        out.update(start_step=done or 0, already_complete=done is not None and done >= args.steps)
        if out["already_complete"] and result.error is None:
            out["error"] = (f"run {args.name!r} had already run {done} steps ({args.storage_path}/{args.name}); "
                            "this launch trained nothing: a new --name starts a new run, a larger --steps "
                            "continues this one")
        out.setdefault("error", "this launch reported no step")
        return out
    history = metrics.get("history") or []
    out.update(
        ok=result.error is None and done == args.steps and metrics["steps_run"] > 0, already_complete=False,
        steps_run=metrics["steps_run"], start_step=metrics["start_step"],
        first_loss=history[0]["loss"] if history else None, final_loss=metrics.get("loss"), history=history,
        compile_time_s=metrics.get("compile_time_s"), step_time_s=metrics.get("step_time_s"),
        samples_per_s=metrics.get("samples_per_s"), compiles=metrics.get("compiles"),
        compiles_during_steps=metrics.get("compiles_during_steps"), restarts=metrics.get("restarts"),
        resumed_from=metrics.get("resumed_from"), devices=metrics.get("devices"),
        global_batch=metrics.get("global_batch"), slice_name=metrics.get("slice_name"),
        ray_slices=metrics.get("ray_slices"), mesh=metrics.get("mesh"),
        megascale=metrics.get("megascale"), notices=metrics.get("notices") or [],
        resumed_at_notice=bool(metrics.get("resumed_at_notice")), train_data=metrics.get("data"),
        compile_attempts=metrics.get("compile_attempts") or [])
    if out["compile_attempts"]:
        out["compile"] = out["compile_attempts"][-1]  # the attempt that finished
    out["stamps"] = train_stamps(metrics)
    return out


def train_stamps(metrics: dict[str, Any]) -> list[Stamp]:
    """The run's timeline stamps (:mod:`raytpu.core.common.timeline`) from the reported metrics: ``reserved`` when the
    workers started (JaxTrainer places them only once its slice reservation holds) and ``first_step`` when the first
    step of this launch had run; printed as stamp lines too."""
    slice_name = metrics.get("slice_name") or "?"
    made = []
    if metrics.get("placed_wall"):
        made.append(stamp("reserved", f"JaxTrainer's {metrics.get('workers', '?')} worker(s) placed on slice "
                                      f"{slice_name}", wall=float(metrics["placed_wall"])))
    attempts = metrics.get("compile_attempts") or []
    if attempts and attempts[-1].get("wall"):
        last = compile_cache.last_to_finish(attempts[-1])
        placed = metrics.get("placed_wall")
        imports = f"; the loop's imports and set-up {last['wall'] - last['s'] - placed:.1f}s of it" if placed else ""
        made.append(compile_started(float(last["wall"]), float(last["s"]),
                                    "JaxTrainer's controller, placement group and worker actors, then the training "
                                    f"function up to its first compile{imports}"))
        made.append(stamp("compiled", compile_cache.describe_processes(attempts[-1]), wall=float(last["wall"])))
    if metrics.get("first_step_wall"):
        made.append(stamp("first_step", f"training step {metrics.get('first_step', '?')} done (compilation before "
                                        "it)", wall=float(metrics["first_step_wall"])))
    for item in made:
        print(stamp_line(item), flush=True)
    return made


def main(argv: list[str] | None = None) -> int:
    """Entry point: 0 when this launch trained to ``--steps``, 1 otherwise, 2 for an impossible slice."""
    args = build_parser().parse_args(argv)
    return guarded(lambda: 0 if run(args)["ok"] else 1)

if __name__ == "__main__":
    sys.exit(main())
