"""The measurements on a reserved slice: what each host's task runs (identity, JAX multi-process start, psum,
all-reduces over the slice and over each mesh axis, every local device's matmul and copy rates).

Imports only the standard library and the kit's core at module level; jax, numpy and ray are imported inside the
functions, which run on the slice's hosts.
"""

from __future__ import annotations

import math
import os
import socket
import time
from dataclasses import asdict, dataclass, replace
from typing import Any

from raytpu.core.tpu.ici import ICI_AXIS_NAMES
from raytpu.workloads.smoke.faults import ENV_INJECT_ERROR
from raytpu.workloads.smoke.verdict import cause_of

ENV_EMULATED = "RAYTPU_EMULATED"
"""``1`` on every host of an emulated slice (``raytpu local``): no DNS names to check, catalog floors informational."""


@dataclass(frozen=True)
class Sizes:
    """What the host check measures with; chosen by platform in the host task."""

    matmul_n: int
    matmul_iters: int
    copy_mib: int
    copy_iters: int
    allreduce_mib: int
    allreduce_iters: int
    latency_iters: int
    rounds: int


TPU_SIZES = Sizes(matmul_n=8192, matmul_iters=50, copy_mib=512, copy_iters=100, allreduce_mib=256,
                  allreduce_iters=20, latency_iters=200, rounds=3)
"""Real TPU: 8192^3 bf16 matmuls (MXU-bound, 50 in one call: 0.3 s on v5e), 512 MiB copies (past the size where
copies reach full bandwidth on tpu7x), 256 MiB per device all-reduced (far past the latency-bound sizes)."""
CPU_SIZES = Sizes(matmul_n=256, matmul_iters=40, copy_mib=8, copy_iters=160, allreduce_mib=1, allreduce_iters=3,
                  latency_iters=10, rounds=5)
"""Emulated slice (JAX CPU devices sharing the machine): small sizes, hosts measured in turn, each timing a few tens
of ms so a scheduler hiccup is a small part of it (with 40 copy iterations, a copy took about 6 ms, and on one core
shared by every emulated host one device's best of five fell below half the slice median: `taskset -c 0 make run`)."""


def coordinator_address() -> tuple[str, int]:
    """This host's IP and a free port: where JAX process 0 serves ``jax.distributed``."""
    import ray

    with socket.socket() as s:
        s.bind(("", 0))
        port = int(s.getsockname()[1])
    return ray.util.get_node_ip_address(), port


def _peer_address(process_id: int, num_processes: int) -> dict[str, Any] | None:
    """Resolves the next host's ``TPU_WORKER_HOSTNAMES`` entry from this host, as libtpu does to reach it.

    A pod resolves its own name from ``/etc/hosts``, so only another host's lookup shows the headless Service's
    record exists. None on a single host or an emulated slice (its names are not DNS names).
    """
    if num_processes < 2 or os.environ.get(ENV_EMULATED) == "1":
        return None
    names = [n for n in os.environ.get("TPU_WORKER_HOSTNAMES", "").split(",") if n]
    peer = (process_id + 1) % num_processes
    if len(names) != num_processes:
        return {"worker": peer, "name": "", "ip": None,
                "error": f"TPU_WORKER_HOSTNAMES has {len(names)} names, expected {num_processes}"}
    try:
        return {"worker": peer, "name": names[peer], "ip": socket.gethostbyname(names[peer]), "error": ""}
    except OSError as exc:
        return {"worker": peer, "name": names[peer], "ip": None, "error": str(exc)}


def _timed(fn: Any, args: tuple[Any, ...], stretch: float = 1.0) -> float:
    """Seconds one call of ``fn`` takes, up to its result on the device. ``stretch`` > 1 is fault injection: a sleep
    inside the timed region makes the device look ``stretch`` times slower."""
    import jax

    t = time.perf_counter()
    jax.block_until_ready(fn(*args))
    elapsed = time.perf_counter() - t
    if stretch > 1:
        time.sleep(elapsed * (stretch - 1))
        elapsed = time.perf_counter() - t
    return elapsed


def _allreduce(mesh: Any, local: list[Any], sizes: Sizes) -> tuple[Any, float | None, float | None]:
    """All-reduces over every device of the slice, timed inside one compiled loop (one dispatch, so the figure is
    the interconnect's, not Python's): bus bandwidth in GB/s per device of ``allreduce_mib`` per device
    (``2 (n-1)/n`` x bytes / time, NCCL's and accelerator-microbenchmarks' definition) and the latency in us of a
    4-byte all-reduce. Also returns a barrier (that small all-reduce) for aligning the hosts' measurements."""
    import jax
    import numpy as np
    from jax import lax
    from jax.sharding import NamedSharding
    from jax.sharding import PartitionSpec as P

    n = mesh.devices.size
    if n < 2:
        return (lambda: None), None, None

    def body(_: Any, x: Any) -> Any:
        y = lax.psum(x, "d")  # the axis index keeps the carry unreplicated: XLA cannot fold the next psum away
        return y.at[0, 0].add(lax.axis_index("d").astype(y.dtype))

    loop = jax.jit(jax.shard_map(lambda x, k: lax.fori_loop(0, k, body, x), mesh=mesh,
                                 in_specs=(P("d"), P()), out_specs=P("d")))

    def operand(columns: int) -> Any:
        parts = [jax.device_put(np.zeros((1, columns), np.float32), d) for d in local]
        return jax.make_array_from_single_device_arrays((n, columns), NamedSharding(mesh, P("d")), parts)

    columns = max(sizes.allreduce_mib * 2**20 // 4, 1)
    big, small = operand(columns), operand(1)
    jax.block_until_ready((loop(big, 1), loop(small, 1)))  # compile and warm up
    seconds = min(_timed(loop, (big, sizes.allreduce_iters)) for _ in range(2))
    busbw = 2 * (n - 1) / n * columns * 4 * sizes.allreduce_iters / seconds / 1e9
    latency_us = min(_timed(loop, (small, sizes.latency_iters)) for _ in range(2)) / sizes.latency_iters * 1e6
    return (lambda: jax.block_until_ready(loop(small, 1))), busbw, latency_us


def topology_mesh(devices: list[Any], topology: str) -> tuple[Any, tuple[str, ...]] | None:
    """The slice's devices as an array shaped like its physical mesh, axes ``(x, y[, z], core)``, and those names.

    On TPU built from each device's ``coords`` and ``core_on_chip`` (tpu7x: two per chip), so each axis is a physical
    ICI axis; CPU devices fill ``topology``'s shape in ``jax.devices()`` order. None when they do not fill it (the
    per-axis all-reduces are then skipped and said so)."""
    import numpy as np

    if devices and all(hasattr(d, "coords") for d in devices):
        coords = [tuple(int(c) for c in d.coords) for d in devices]
        cores = [int(getattr(d, "core_on_chip", 0)) for d in devices]
        dims = tuple(max(c[i] for c in coords) + 1 for i in range(len(coords[0])))
        if len(dims) > len(ICI_AXIS_NAMES):
            return None
        grid = np.empty((*dims, max(cores) + 1), dtype=object)
        for device, where, core in zip(devices, coords, cores, strict=True):
            grid[(*where, core)] = device
        if any(d is None for d in grid.flat):
            return None
        return grid, (*ICI_AXIS_NAMES[:len(dims)], "core")
    dims = tuple(int(d) for d in topology.split("x")) if topology else ()
    chips = math.prod(dims) if dims else 0
    if not chips or len(devices) % chips:
        return None
    return np.array(devices, dtype=object).reshape(*dims, len(devices) // chips), (*ICI_AXIS_NAMES[:len(dims)],
                                                                                  "core")


def axis_allreduces(devices: list[Any], local: list[Any], topology: str, sizes: Sizes,
                    stretch: dict[str, float] | None = None) -> list[dict[str, Any]] | None:
    """All-reduces over each mesh axis of the slice alone (every ICI axis of size 2 or more of
    :func:`topology_mesh`): a ``psum`` over that axis name, so every line (or ring) of chips along the axis reduces
    at once and only that axis's links carry data. Each is timed inside one compiled loop like :func:`_allreduce`;
    bus bandwidth in GB/s per device with ``n`` = the axis size. ``stretch``: fault injection, axis -> factor.
    Returns ``[{"axis", "size", "gbps"}]`` in axis order, or None when the devices do not form the mesh."""
    import jax
    import numpy as np
    from jax import lax
    from jax.sharding import Mesh, NamedSharding
    from jax.sharding import PartitionSpec as P

    shaped = topology_mesh(devices, topology)
    if shaped is None:
        return None
    grid, names = shaped
    mesh = Mesh(grid, names)
    spec = P(names)
    n = len(devices)
    columns = max(sizes.allreduce_mib * 2**20 // 4, 1)
    parts = [jax.device_put(np.zeros((1, columns), np.float32), d) for d in local]
    big = jax.make_array_from_single_device_arrays((n, columns), NamedSharding(mesh, spec), parts)
    measured = []
    for axis, size in zip(names[:-1], grid.shape[:-1], strict=True):
        if size < 2:
            continue

        def body(_: Any, x: Any, axis: str = axis) -> Any:
            y = lax.psum(x, axis)
            return y.at[0, 0].add(lax.axis_index(axis).astype(y.dtype))

        loop = jax.jit(jax.shard_map(lambda x, k, body=body: lax.fori_loop(0, k, body, x), mesh=mesh,
                                     in_specs=(spec, P()), out_specs=spec))
        jax.block_until_ready(loop(big, 1))  # compile and warm up
        factor = (stretch or {}).get(axis, 1.0)
        seconds = min(_timed(loop, (big, sizes.allreduce_iters), factor) for _ in range(2))
        measured.append({"axis": axis, "size": int(size),
                         "gbps": 2 * (size - 1) / size * columns * 4 * sizes.allreduce_iters / seconds / 1e9})
    return measured


def _per_device(local: list[Any], sizes: Sizes, barrier: Any, stretch: dict[int, float],
                turns: tuple[int, int] | None) -> tuple[list[float], list[float]]:
    """bf16 TFLOP/s and copy GB/s of every local device, each timed alone inside one compiled loop, best of rounds that
    start together on every host. Random normal data (a chip draws more power on it than on constants), scaled by
    1/sqrt(n) so chained products keep their size. ``turns`` (process id, processes): emulated hosts sharing the
    machine's cores measure one at a time; TPU hosts (``turns`` None) at once.

    Two programs over the host's devices, the device to time an argument (the others pass their input through): two
    compiles per host instead of two per device (docs/FACTS.md#compile-cache-jax)."""
    import jax
    import jax.numpy as jnp
    import numpy as np
    from jax import lax
    from jax.sharding import Mesh, NamedSharding
    from jax.sharding import PartitionSpec as P

    n = sizes.matmul_n
    rng = np.random.default_rng(0)
    a_host = rng.standard_normal((n, n), dtype=np.float32).astype(jnp.bfloat16)
    b_host = (rng.standard_normal((n, n), dtype=np.float32) / math.sqrt(n)).astype(jnp.bfloat16)
    copy_bytes = sizes.copy_mib * 2**20
    mesh = Mesh(np.array(local), ("local",))
    spec = P("local")

    def on_each(host: Any) -> Any:  # one copy per local device, stacked on a leading axis
        parts = [jax.device_put(host[None], d) for d in local]
        return jax.make_array_from_single_device_arrays((len(local), *host.shape), NamedSharding(mesh, spec), parts)

    def alone(loop: Any) -> Any:  # ``loop`` on local device ``j`` only
        def body(x: Any, *rest: Any) -> Any:
            *operands, k, j = rest
            return lax.cond(lax.axis_index("local") == j, lambda: loop(x, *operands, k), lambda: x)
        return body

    chain = jax.jit(jax.shard_map(alone(lambda a, b, k: lax.fori_loop(0, k, lambda _, x: x @ b, a)), mesh=mesh,
                                  in_specs=(spec, spec, P(), P()), out_specs=spec))
    stream_in_place = jax.jit(jax.shard_map(alone(lambda x, k: lax.fori_loop(0, k, lambda _, y: y + 1.0, x)),
                                            mesh=mesh, in_specs=(spec, P(), P()), out_specs=spec), donate_argnums=0)
    a, b, x = on_each(a_host), on_each(b_host), on_each(np.zeros(copy_bytes // 4, np.float32))

    def stream(k: int, j: int) -> Any:  # donated: the devices not timed write nothing
        nonlocal x
        x = stream_in_place(x, k, j)
        return x

    jax.block_until_ready((chain(a, b, 1, 0), stream(1, 0)))  # compile and warm up
    matmul = [math.inf] * len(local)
    copy = [math.inf] * len(local)
    me, hosts = turns or (0, 1)
    for round_ in range(sizes.rounds):
        for turn in range(hosts):
            barrier()
            if turn != me:
                continue
            # untimed: the turn's first timing would pay for waking up after the barrier
            jax.block_until_ready((chain(a, b, 1, 0), stream(1, 0)))
            for j in range(len(local)):  # a different device first each round: no device always meets the same noise
                i = (j + round_) % len(local)
                matmul[i] = min(matmul[i], _timed(chain, (a, b, sizes.matmul_iters, i), stretch.get(i, 1.0)))
                copy[i] = min(copy[i], _timed(stream, (sizes.copy_iters, i), stretch.get(i, 1.0)))
    return ([2 * n**3 * sizes.matmul_iters / t / 1e12 for t in matmul],
            [2 * copy_bytes * sizes.copy_iters / t / 1e9 for t in copy])


def device_checks(devices: list[Any], local: list[Any], sizes: Sizes, topology: str = "",
                  faults: dict[str, Any] | None = None, turns: tuple[int, int] | None = None) -> dict[str, Any]:
    """What one host measures of its ``local`` devices among the slice's ``devices``: platform and memory, the psum
    with a known answer, all-reduce bandwidth (whole slice and per mesh axis of ``topology``) and latency, every
    local device's matmul and copy rates. The smoke job's hosts and ``bench/chip.py`` both run it."""
    import jax
    import jax.numpy as jnp
    import numpy as np
    from jax.sharding import Mesh, NamedSharding
    from jax.sharding import PartitionSpec as P

    faults = faults or {}
    info: dict[str, Any] = {
        "platform": local[0].platform, "devices": len(local), "devices_total": len(devices),
        "device_kind": local[0].device_kind, "sizes": asdict(sizes),
        "hbm_bytes": [(d.memory_stats() or {}).get("bytes_limit") for d in local]}
    mesh = Mesh(np.array(devices), ("d",))
    index = {d: i for i, d in enumerate(devices)}
    # psum with a known answer: device i contributes i + 1.
    parts = [jax.device_put(np.array([index[d] + 1.0], dtype=np.float32), d) for d in local]
    arr = jax.make_array_from_single_device_arrays((len(devices),), NamedSharding(mesh, P("d")), parts)
    total = jax.jit(jnp.sum, out_shardings=NamedSharding(mesh, P()))(arr)
    info["psum"] = float(np.asarray(total.addressable_data(0)))
    barrier, info["allreduce_gbps"], info["latency_us"] = _allreduce(mesh, local, sizes)
    try:  # a failure here is judged (it gates on TPU), not a lost host
        info["axes"] = axis_allreduces(devices, local, topology, sizes, faults.get("slow_axis"))
    except Exception as exc:
        info["axes"], info["axes_error"] = None, cause_of(exc)
    slow = {int(k): float(v) for k, v in faults.get("slow", {}).items()}
    info["matmul_tflops"], info["hbm_gbps"] = _per_device(local, sizes, barrier, slow, turns)
    return info


def host_check(coordinator: str, num_processes: int, process_id: int, init_timeout_s: int,
               bandwidth_mib: int | None, faults: dict[str, Any], topology: str = "") -> dict[str, Any]:
    """Runs on one host (inside the slice's bundle ``process_id``): identity, JAX multi-process init, devices, psum,
    all-reduce bandwidth (whole slice and per mesh axis) and latency, and every local device's matmul and copy rates.
    First, before JAX is imported, the pod's ``MEGASCALE_*`` (set for a multi-slice job's DCN check) go
    (:func:`raytpu.core.specs.slices.multislice.single_slice`): libtpu would otherwise wait for the other slices."""
    from raytpu.core.specs.slices.multislice import single_slice

    cleared = single_slice(os.environ)
    import ray

    if faults.get("error"):
        raise RuntimeError(f"fault injected by {ENV_INJECT_ERROR}={process_id}: host {process_id}'s check raises")
    info: dict[str, Any] = {
        "process_id": process_id,
        "node_id": ray.get_runtime_context().get_node_id(),
        "ip": ray.util.get_node_ip_address(),
        "hostname": socket.gethostname(),
        "peer": _peer_address(process_id, num_processes),
        "env": {k: os.environ.get(k, "") for k in
                ("TPU_NAME", "TPU_WORKER_ID", "TPU_WORKER_HOSTNAMES", "TPU_ACCELERATOR_TYPE", "TPU_TOPOLOGY",
                 ENV_EMULATED, "JAX_PLATFORMS")},
        "megascale_cleared": cleared,
    }
    import jax

    from raytpu.workloads.support.compile_watch import CompileWatch

    jax.distributed.initialize(coordinator, num_processes, process_id, initialization_timeout=init_timeout_s)
    try:
        local = jax.local_devices()
        sizes = TPU_SIZES if local[0].platform == "tpu" else CPU_SIZES
        if bandwidth_mib:
            sizes = replace(sizes, allreduce_mib=bandwidth_mib)
        with CompileWatch() as watch:  # every check's executables: compiled, or loaded from the persistent cache
            info.update(device_checks(jax.devices(), local, sizes, topology, faults,
                                      None if local[0].platform == "tpu" else (process_id, num_processes)))
        info["compile"] = watch.summary()
    finally:
        jax.distributed.shutdown()
    return info
