"""Smoke check of TPU slices: reserve each whole slice, then prove its hosts, devices and interconnect work.

Runs unchanged as a GKE RayJob entrypoint and on the local emulated slice::

    RAYTPU_WORKLOAD='<WorkloadSpec JSON>' python -m raytpu.workloads.smoke [--slice-name NAME]

The slice's shape and how many slices to expect come from the workload spec (``RAYTPU_WORKLOAD``, set by
the RayJob's runtime env or ``raytpu local``); the job never re-plans its slice from flags.
For every slice of the plan's pod type it finds (at least the spec's slice count), it prints one line
``RAYTPU_SMOKE_VERDICT {json}`` (format: :mod:`raytpu.report`) and exits 1 when any slice is unhealthy. Every
failure inside the check (a refused reservation, a host whose check raises or hangs, a bug) ends in such a line,
its check naming the cause, never in a traceback with no verdict.

Checks, per host and per slice:

- ``hosts_present``: every worker id 0..hosts-1 is alive (a missing host names its worker id); a host that joins
  late is waited for until the check's time limit, not failed at the first look;
- ``labels``: each host's ``ray.io/tpu-topology``, ``ray.io/tpu-pod-type`` and ``ray.io/accelerator-type`` (Ray
  derives them from the ``TPU_TOPOLOGY``/``TPU_ACCELERATOR_TYPE`` GKE sets, ray/_private/accelerators/tpu.py:
  898, 974) and its ``TPU`` resource match the plan. Slice name and worker id are not compared with the ``TPU_*``
  env: Ray's labels are copies of that env (tpu.py:926, 940), so agreeing proves nothing;
- ``reservation``: the whole slice is reserved with ``ray.util.tpu.slice_placement_group`` within
  ``--reserve-timeout-s`` (checked complete first, then pinned to the slice by its ``ray.io/tpu-slice-name``
  label, and bundle i to the host labelled ``ray.io/tpu-worker-id=i``, so JAX process i is TPU worker i);
- ``host_checks``: each host's check returned in time (a host that raised or hung is named; the others stop);
- ``devices_per_host`` / ``devices_total``: ``jax.local_devices()`` on each host, ``jax.device_count()``;
- ``psum``: a cross-host all-reduce (multi-process JAX) of known answer ``n(n+1)/2``;
- ``device_kind``: the hardware libtpu reports (``jax.Device.device_kind``) is the plan's generation;
- ``worker_hostnames`` (multi-host, GKE): each pod's hostname is its ``TPU_WORKER_HOSTNAMES`` entry and its
  neighbour's entry resolves to the neighbour's Ray node IP: the names the KubeRay TPU webhook gives the pods
  (ai-on-gke/kuberay-tpu-webhook main.go:273-287, 848-853) and the headless Service behind them, which libtpu
  dials;
- ``matmul_tflops_ratio`` / ``matmul_tflops_peer_ratio``: bf16 TFLOP/s of every device (a chain of matmuls of
  random data in one compiled loop), the slowest against the catalog's per-device peak and against the slice's
  median; ``hbm_bandwidth_ratio`` / ``hbm_bandwidth_peer_ratio``: the same for a large streaming copy against the
  catalog's HBM GB/s; ``hbm_ratio``: memory of every device against the catalog's HBM;
- ``allreduce_bandwidth_gbps``: bus bandwidth per chip of an all-reduce of hundreds of MiB per device (timed
  inside one compiled loop) against the bus bandwidth the slice's topology should reach
  (:func:`raytpu.catalog.expected_busbw`: the links' one-way rate, the mesh axes and their wraparound);
  ``allreduce_axis_<x|y|z>_gbps``: the same all-reduce
  over each mesh axis alone (the devices in a mesh shaped by their physical coordinates, a ``psum`` over one axis
  name), each against that axis's expected figure, so a weak axis is named; ``allreduce_latency_us``: a 4-byte
  all-reduce.

Every device's figures are also in the verdict's ``perf`` rows (:mod:`raytpu.report` renders them), each with its
threshold and whether it gates here. Thresholds (``--perf-thresholds``): ``auto`` (default) applies the catalog
floors (:class:`raytpu.catalog.SmokeFloors`) only on real TPU outside an emulated slice (``RAYTPU_EMULATED=1``,
which ``raytpu local`` sets on every host); on an emulated slice (JAX CPU devices) they are reported and marked
informational. The peer ratios gate everywhere: a device at less than ``--min-peer-ratio`` of its slice's median
is a fault on any hardware. Every wait is bounded: ``--reserve-timeout-s``, ``--check-timeout-s`` (default
:func:`check_limit_s`, which grows with the slice's hosts).

Fault injection (tests and drills; named in the verdict's ``injected`` key when used), read by the driver:
``RAYTPU_SMOKE_INJECT_SLOW_DEVICE=<worker>:<device>:<factor>`` stretches that device's timed loops by ``factor``
(a sleep inside the timed region); ``RAYTPU_SMOKE_INJECT_HOST_ERROR=<worker>`` makes that host's check raise;
``RAYTPU_SMOKE_INJECT_SLOW_AXIS=<axis>:<factor>`` stretches every host's timed all-reduce over mesh axis ``axis``.

Imports only ray, numpy and the kit's core at module level; jax is imported inside the host task.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import math
import os
import socket
import statistics
import sys
import time
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from raytpu.catalog import ICI_AXIS_NAMES, expected_busbw, generation, ici_for_dims
from raytpu.errors import invalid_value
from raytpu.plan import (
    RAY_ACCELERATOR_LABEL,
    RAY_POD_TYPE_LABEL,
    RAY_SLICE_LABEL,
    RAY_TOPOLOGY_LABEL,
    RAY_WORKER_LABEL,
    SlicePlan,
)
from raytpu.report import all_healthy, format_verdict_line, log_entry
from raytpu.spec import WorkloadSpec
from raytpu.workloads._entry import guarded

ENV_EMULATED = "RAYTPU_EMULATED"
ENV_INJECT_SLOW = "RAYTPU_SMOKE_INJECT_SLOW_DEVICE"
"""Fault injection: ``<worker>:<device>:<factor>``, that host's local device looks ``factor`` times slower."""
ENV_INJECT_ERROR = "RAYTPU_SMOKE_INJECT_HOST_ERROR"
"""Fault injection: ``<worker>``, that host's check raises before JAX starts."""
ENV_INJECT_SLOW_AXIS = "RAYTPU_SMOKE_INJECT_SLOW_AXIS"
"""Fault injection: ``<axis>:<factor>`` (axis x, y or z), the all-reduce over that mesh axis looks ``factor`` times
slower on every host."""

MIN_HBM_RATIO = 0.85
"""On real TPU: device-reported memory per chip over catalog HBM (allocator limits sit below the total)."""
MIN_PEER_RATIO = 0.5
"""Every device must reach half its slice's median matmul and copy rate. On TPU the devices of a slice are
identical, so one at half its peers' rate is broken; on an emulated slice the hosts share the CPU, so they are
measured one at a time and each device keeps its best of five rounds."""
RESERVE_TIMEOUT_S = 60.0
CHECK_BASE_S = 180.0
"""The check's time limit for a slice of a few hosts: runtime-env install of ``jax[tpu]`` on a fresh node, import
jax, libtpu start-up, a handful of compiles and the measurements (the limit this check had as a fixed value)."""
CHECK_PER_HOST_S = 2.0
"""What each more host adds to the limit: every host must import, start libtpu and join ``jax.distributed`` before
anything runs, so the slowest of N hosts sets the pace; 2 s per host is an estimate, not a measurement."""


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
CPU_SIZES = Sizes(matmul_n=256, matmul_iters=40, copy_mib=8, copy_iters=40, allreduce_mib=1, allreduce_iters=3,
                  latency_iters=10, rounds=5)
"""Emulated slice (JAX CPU devices sharing the machine): small sizes, each timing about 10 ms (a scheduler hiccup
is a small part of it), hosts measured in turn."""


def check_limit_s(hosts: int, active_deadline_s: float | None = None,
                  reserve_timeout_s: float = RESERVE_TIMEOUT_S) -> float:
    """The default ``--check-timeout-s``: ``180 + 2 x hosts`` seconds, capped so that its two waits (hosts joining,
    then the host checks) and the reservation fit in the RayJob's ``activeDeadlineSeconds`` with a minute spare."""
    limit = CHECK_BASE_S + CHECK_PER_HOST_S * hosts
    if active_deadline_s:
        limit = min(limit, max((active_deadline_s - reserve_timeout_s) / 2 - 60, CHECK_BASE_S))
    return limit


@dataclass(frozen=True)
class Faults:
    """Fault injection for tests and drills, from ``RAYTPU_SMOKE_INJECT_*`` (never set by the kit itself).

    Attributes:
        slow: (worker id, local device index, factor): that device's timed loops take ``factor`` times longer.
        error_worker: The worker id whose host check raises.
        slow_axis: (mesh axis name, factor): every host's timed all-reduce over that axis takes ``factor`` times
            longer.
    """

    slow: tuple[int, int, float] | None = None
    error_worker: int | None = None
    slow_axis: tuple[str, float] | None = None

    @classmethod
    def from_env(cls, env: dict[str, str] | None = None) -> Faults:
        """Parses the variables; a malformed value is invalid input (exit 2)."""
        env = dict(os.environ) if env is None else env
        slow = env.get(ENV_INJECT_SLOW, "")
        error = env.get(ENV_INJECT_ERROR, "")
        axis = env.get(ENV_INJECT_SLOW_AXIS, "")
        slow_axis = None
        if axis:
            name, _, factor = axis.partition(":")
            try:
                slow_axis = (name, float(factor))
            except ValueError:
                slow_axis = None
            if name not in ICI_AXIS_NAMES or slow_axis is None or slow_axis[1] < 1:
                raise invalid_value(ENV_INJECT_SLOW_AXIS, axis, "is not <axis>:<factor> with axis x, y or z",
                                    "e.g. y:4")
        try:
            parts = slow.split(":") if slow else []
            parsed = (int(parts[0]), int(parts[1]), float(parts[2])) if slow else None
            if parsed is not None and (len(parts) != 3 or parsed[2] < 1):
                raise ValueError(slow)
        except (ValueError, IndexError):
            raise invalid_value(ENV_INJECT_SLOW, slow, "is not <worker>:<device>:<factor>", "e.g. 1:2:10") from None
        if error and not error.isdigit():
            raise invalid_value(ENV_INJECT_ERROR, error, "is not a worker id", "e.g. 1")
        return cls(parsed, int(error) if error else None, slow_axis)

    def for_host(self, worker: int) -> dict[str, Any]:
        """What host ``worker``'s task gets: ``{"error": bool, "slow": {device: factor}}``, plus
        ``"slow_axis": {axis: factor}`` (every host) when an axis is slowed."""
        slow = {self.slow[1]: self.slow[2]} if self.slow and self.slow[0] == worker else {}
        given: dict[str, Any] = {"error": self.error_worker == worker, "slow": slow}
        if self.slow_axis:
            given["slow_axis"] = {self.slow_axis[0]: self.slow_axis[1]}
        return given

    def describe(self) -> list[str]:
        """One line per injected fault (the verdict's ``injected`` key)."""
        lines = []
        if self.slow:
            lines.append(f"{ENV_INJECT_SLOW}: host {self.slow[0]} device {self.slow[1]} slowed x{self.slow[2]:g}")
        if self.error_worker is not None:
            lines.append(f"{ENV_INJECT_ERROR}: host {self.error_worker}'s check raises")
        if self.slow_axis:
            lines.append(f"{ENV_INJECT_SLOW_AXIS}: the all-reduce over axis {self.slow_axis[0]} slowed "
                         f"x{self.slow_axis[1]:g}")
        return lines


# ---------------------------------------------------------------------------------------------- inventory


@dataclass
class SliceInventory:
    """What the GCS knows about one slice of the plan's pod type.

    Attributes:
        name: The slice name (``ray.io/tpu-slice-name``; the node id for an unnamed single host).
        nodes: worker id -> node dict (``ray.nodes()`` entry) for every alive host.
        hosts_expected: Hosts the plan says the slice has.
    """

    name: str
    nodes: dict[int, dict[str, Any]] = field(default_factory=dict)
    hosts_expected: int = 1

    @property
    def missing(self) -> list[int]:
        """Worker ids with no alive host."""
        return [w for w in range(self.hosts_expected) if w not in self.nodes]

    @property
    def complete(self) -> bool:
        """Every host alive."""
        return not self.missing

    def describe(self) -> str:
        """``name (complete)`` or ``name (missing worker 2)``."""
        if self.complete:
            return f"{self.name} (complete)"
        ids = ", ".join(str(w) for w in self.missing)
        return f"{self.name} (missing worker{'s' if len(self.missing) > 1 else ''} {ids})"


def inventory(plan: SlicePlan, nodes: list[dict[str, Any]] | None = None) -> dict[str, SliceInventory]:
    """Slices of ``plan``'s pod type among alive nodes, by name (sorted)."""
    import ray
    from ray.util.tpu import get_tpu_nodes_for_slice, get_tpu_slice_name_from_node

    nodes = ray.nodes() if nodes is None else nodes
    ours = [n for n in nodes if (n.get("Labels") or {}).get(RAY_POD_TYPE_LABEL) == plan.ray_pod_type]
    found: dict[str, SliceInventory] = {}
    for name in sorted({get_tpu_slice_name_from_node(n) or str(n.get("NodeID")) for n in ours}):
        members = get_tpu_nodes_for_slice(name, ours) or [n for n in ours if str(n.get("NodeID")) == name and
                                                          n.get("Alive")]
        if members:
            found[name] = SliceInventory(name=name, hosts_expected=plan.hosts, nodes={
                int((n.get("Labels") or {}).get(RAY_WORKER_LABEL, "0")): n for n in members})
    return found


def wait_for_hosts(plan: SlicePlan, expected: int, slice_name: str | None, limit_s: float,
                   poll_s: float = 2.0) -> dict[str, SliceInventory]:
    """The slices to check, once every host of ``expected`` slices (or of ``slice_name``) is alive or ``limit_s``
    has passed: a host that joins late (a pod restarting, a raylet registering after the job started) is waited
    for, not failed at the first look."""
    deadline = time.monotonic() + limit_s
    said = 0.0
    while True:
        found = inventory(plan)
        if slice_name:
            found = {slice_name: found.get(slice_name, SliceInventory(slice_name, hosts_expected=plan.hosts))}
        waiting = [inv.describe() for inv in found.values() if not inv.complete]
        short = max((1 if slice_name else expected) - len(found), 0)
        left = deadline - time.monotonic()
        if (not waiting and not short) or left <= 0:
            return found
        if time.monotonic() - said >= 10:
            what = "; ".join(waiting + ([f"{short} more {plan.ray_pod_type} slice(s)"] if short else []))
            print(f"smoke: waiting up to {left:.0f}s for {what}", file=sys.stderr, flush=True)
            said = time.monotonic()
        time.sleep(min(poll_s, max(left, 0.0)))


# ---------------------------------------------------------------------------------------------- reservation


@dataclass
class Reservation:
    """A whole slice held for this driver: the slice placement group (one bundle per host, in worker order).

    Attributes:
        slice_name: The reserved slice.
        handle: The ``ray.util.tpu.SlicePlacementGroup``.
        head_pg: A placement group holding the slice's head resource (so Ray's own unpinned
            reservations, e.g. JaxTrainer's, skip this slice while it is held), or None.
        latency_s: Seconds from the call until every bundle was placed.
    """

    slice_name: str
    handle: Any
    head_pg: Any
    latency_s: float

    @property
    def placement_group(self) -> Any:
        """The slice's placement group."""
        return self.handle.placement_group

    def release(self) -> None:
        """Removes the placement groups (idempotent)."""
        from ray.util.placement_group import remove_placement_group

        with contextlib.suppress(Exception):  # release is best effort, after a failure too
            if self.handle is not None:
                self.handle.shutdown()
        if self.head_pg is not None:
            with contextlib.suppress(Exception):
                remove_placement_group(self.head_pg)
            self.head_pg = None


def _idle(inv: SliceInventory) -> bool:
    """Every host of the slice has all its TPU free (a missing TPU key means 0 free).

    Ray has no public per-node free-resources API: its own public ``ray.util.tpu.get_num_ready_tpu_slices``
    reads the same ``ray._private.state.available_resources_per_node`` (ray/util/tpu.py, Ray 2.60) but counts a
    node whose free ``TPU`` key is missing as idle, and Ray drops the key when 0 is free: a busy slice reads as
    ready there. So this reads the state itself and treats a missing key as 0.
    """
    from ray._private.state import available_resources_per_node

    free = available_resources_per_node()
    return all(free.get(str(n.get("NodeID")), {}).get("TPU", 0) >= (n.get("Resources") or {}).get("TPU", 0)
               for n in inv.nodes.values())


def _claim_head(plan: SlicePlan, slice_name: str, timeout_s: float) -> Any:
    """Holds the slice's ``TPU-<pod>-head`` resource on worker 0 of exactly ``slice_name``."""
    import ray
    from ray.util.placement_group import placement_group, remove_placement_group

    pg = placement_group([{plan.head_resource: 1}],
                         bundle_label_selector=[{RAY_WORKER_LABEL: "0", RAY_SLICE_LABEL: slice_name}])
    ready, _ = ray.wait([pg.ready()], timeout=max(timeout_s, 0.1))
    if not ready:
        remove_placement_group(pg)
        return None
    return pg


def bundle_selectors(plan: SlicePlan, slice_name: str) -> list[dict[str, str]]:
    """One label selector per bundle: the slice, and bundle i on the host labelled ``ray.io/tpu-worker-id=i``.

    ``SlicePlacementGroup`` only pins bundles to the slice (it merges a caller's per-bundle selectors with the
    slice-name label, ray/util/tpu.py:710-724), and its SPREAD strategy may put bundle 0 on any host; pinning the
    worker id makes bundle index, JAX process id and ``TPU_WORKER_ID`` the same number.
    """
    return [{RAY_SLICE_LABEL: slice_name, RAY_WORKER_LABEL: str(i)} for i in range(plan.hosts)]


def reserve_slice(plan: SlicePlan, slice_name: str | None = None, timeout_s: float = RESERVE_TIMEOUT_S,
                  poll_s: float = 0.5) -> Reservation:
    """Reserves one whole slice of ``plan`` (all hosts, all chips) or raises TimeoutError naming the slice.

    Completeness is checked first and the reservation is pinned to the chosen slice by its
    ``ray.io/tpu-slice-name`` label (and each bundle to its worker id, :func:`bundle_selectors`), so a
    reservation never takes worker 0 of an incomplete slice and hangs. With ``slice_name`` None, any complete,
    idle slice; busy or incomplete slices are waited for until ``timeout_s``.

    Raises:
        TimeoutError: No slice (or not ``slice_name``) could be reserved in time; the message names the
            slice(s) and what was wrong with each (missing worker ids, busy).
        ValueError: Ray refuses the shape (``SlicePlacementGroup`` outside ``VALID_TPU_TOPOLOGY``); nothing is
            left held.
    """
    import ray
    from ray.util.tpu import slice_placement_group

    t0 = time.monotonic()
    deadline = t0 + timeout_s
    last: dict[str, SliceInventory] = {}
    tried: set[str] = set()
    while True:
        last = inventory(plan)
        candidates = [inv for name, inv in last.items()
                      if inv.complete and (slice_name is None or name == slice_name)]
        if slice_name is None:
            candidates = [inv for inv in candidates if _idle(inv)]
        for inv in candidates:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                break
            head_pg = _claim_head(plan, inv.name, min(remaining, 2.0 if slice_name is None else remaining))
            if head_pg is None:
                tried.add(inv.name)
                continue
            reservation = Reservation(inv.name, None, head_pg, 0.0)
            try:
                reservation.handle = slice_placement_group(
                    topology=plan.topology, accelerator_version=plan.ray_accelerator_type,
                    chips_per_vm=plan.chips_per_host,
                    resources_per_bundle={"CPU": 1, "TPU": plan.chips_per_host},
                    bundle_label_selector=bundle_selectors(plan, inv.name),
                    head_reservation_timeout_s=max(deadline - time.monotonic(), 0.1))
            except BaseException:
                reservation.release()
                raise
            ready, _ = ray.wait([reservation.placement_group.ready()],
                                timeout=max(deadline - time.monotonic(), 0.1))
            if ready:
                reservation.latency_s = round(time.monotonic() - t0, 3)
                return reservation
            reservation.release()
            tried.add(inv.name)
        if time.monotonic() >= deadline:
            break
        time.sleep(poll_s)
    raise TimeoutError(_timeout_message(plan, slice_name, timeout_s, last, tried))


def _timeout_message(plan: SlicePlan, slice_name: str | None, timeout_s: float,
                     seen: dict[str, SliceInventory], tried: set[str]) -> str:
    what = f"slice {slice_name!r}" if slice_name else f"a free {plan.ray_pod_type} slice"
    states = []
    for name, inv in seen.items():
        if slice_name and name != slice_name:
            continue
        states.append(inv.describe() if not inv.complete else f"{name} (busy)" if name in tried or
                      slice_name is None else f"{name} (not placed)")
    if slice_name and slice_name not in seen:
        states.append(f"{slice_name} (no alive host)")
    found = "; ".join(states) or f"no {plan.ray_pod_type} hosts at all"
    return (f"could not reserve {what} ({plan.generation} {plan.topology}, {plan.hosts} hosts x "
            f"{plan.chips_per_host} chips) within {timeout_s:g}s; nothing was placed. Slices: {found}")


# ---------------------------------------------------------------------------------------------- host task


def _coordinator() -> tuple[str, int]:
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

    On TPU each device has ``coords`` (its chip's x, y, z in the slice) and ``core_on_chip`` (tpu7x: two devices
    per chip), so the array is built from them and each mesh axis is a physical ICI axis. Devices without
    coordinates (JAX CPU devices on an emulated slice) are laid out in ``jax.devices()`` order in the shape of
    ``topology``. None when they do not fill that shape (the per-axis all-reduces are then skipped and said so).
    """
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
    """bf16 TFLOP/s and copy GB/s of every local device, each timed alone inside one compiled loop.

    Random normal data (a chip draws more power on it than on constants); the right operand scaled by 1/sqrt(n)
    so the chained products keep their size. Rounds start together on every host (``barrier``); each device keeps
    its best round. ``turns`` (process id, processes): the hosts measure one at a time, for an emulated slice whose
    hosts share the machine's cores (TPU hosts share nothing and measure at once, ``turns`` None).
    """
    import jax
    import jax.numpy as jnp
    import numpy as np
    from jax import lax

    n = sizes.matmul_n
    rng = np.random.default_rng(0)
    a_host = rng.standard_normal((n, n), dtype=np.float32).astype(jnp.bfloat16)
    b_host = (rng.standard_normal((n, n), dtype=np.float32) / math.sqrt(n)).astype(jnp.bfloat16)
    copy_bytes = sizes.copy_mib * 2**20
    chain = jax.jit(lambda a, b, k: lax.fori_loop(0, k, lambda _, x: x @ b, a))
    stream = jax.jit(lambda x, k: lax.fori_loop(0, k, lambda _, y: y + 1.0, x))
    work = []
    for d in local:
        a, b = jax.device_put(a_host, d), jax.device_put(b_host, d)
        x = jax.device_put(np.zeros(copy_bytes // 4, np.float32), d)
        jax.block_until_ready((chain(a, b, 1), stream(x, 1)))  # compile and warm up on this device
        work.append((a, b, x))
    matmul = [math.inf] * len(work)
    copy = [math.inf] * len(work)
    me, hosts = turns or (0, 1)
    for round_ in range(sizes.rounds):
        for turn in range(hosts):
            barrier()
            if turn != me:
                continue
            a, b, x = work[0]  # untimed: the turn's first timing would pay for waking up after the barrier
            jax.block_until_ready((chain(a, b, 1), stream(x, 1)))
            for j in range(len(work)):  # a different device first each round: no device always meets the same noise
                i = (j + round_) % len(work)
                a, b, x = work[i]
                matmul[i] = min(matmul[i], _timed(chain, (a, b, sizes.matmul_iters), stretch.get(i, 1.0)))
                copy[i] = min(copy[i], _timed(stream, (x, sizes.copy_iters), stretch.get(i, 1.0)))
    return ([2 * n**3 * sizes.matmul_iters / t / 1e12 for t in matmul],
            [2 * copy_bytes * sizes.copy_iters / t / 1e9 for t in copy])


def _host_check(coordinator: str, num_processes: int, process_id: int, init_timeout_s: int,
                bandwidth_mib: int | None, faults: dict[str, Any], topology: str = "") -> dict[str, Any]:
    """Runs on one host (inside the slice's bundle ``process_id``): identity, JAX multi-process init, devices,
    psum, all-reduce bandwidth (whole slice and per mesh axis of ``topology``) and latency, and every local
    device's matmul and copy rates."""
    import numpy as np
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
    }
    import jax
    import jax.numpy as jnp
    from jax.sharding import Mesh, NamedSharding
    from jax.sharding import PartitionSpec as P

    jax.distributed.initialize(coordinator, num_processes, process_id, initialization_timeout=init_timeout_s)
    try:
        devices = jax.devices()
        local = jax.local_devices()
        sizes = TPU_SIZES if local[0].platform == "tpu" else CPU_SIZES
        if bandwidth_mib:
            sizes = replace(sizes, allreduce_mib=bandwidth_mib)
        info.update(platform=local[0].platform, devices=len(local), devices_total=len(devices),
                    device_kind=local[0].device_kind, sizes=asdict(sizes),
                    hbm_bytes=[(d.memory_stats() or {}).get("bytes_limit") for d in local])
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
            info["axes"], info["axes_error"] = None, _cause(exc)
        slow = {int(k): float(v) for k, v in faults.get("slow", {}).items()}
        turns = None if local[0].platform == "tpu" else (process_id, num_processes)
        info["matmul_tflops"], info["hbm_gbps"] = _per_device(local, sizes, barrier, slow, turns)
    finally:
        jax.distributed.shutdown()
    return info


# ---------------------------------------------------------------------------------------------- verdict


def _check(name: str, ok: bool, detail: str, value: float | None = None,
           expected: float | None = None) -> dict[str, Any]:
    return {"name": name, "ok": bool(ok), "detail": detail, "value": value, "expected": expected}


def _cause(exc: BaseException) -> str:
    """``Type: first line`` of an exception; a Ray task error is named by the error its task raised."""
    cause = getattr(exc, "cause", None)
    exc = cause if isinstance(cause, BaseException) else exc
    lines = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {lines[0][:300] if lines else ''}".rstrip(": ")


def _verdict(plan: SlicePlan, name: str, hosts_found: int, checks: list[dict[str, Any]],
             hosts: dict[int, dict[str, Any]], started: float, perf: list[dict[str, Any]] | None = None,
             injected: list[str] | None = None) -> dict[str, Any]:
    for host in hosts.values():
        host["ok"] = not host["problems"]
    gating = [c for c in checks if not c.get("informational")]
    verdict = {"slice": name, "healthy": all(c["ok"] for c in gating) and all(h["ok"] for h in hosts.values()),
               "generation": plan.generation, "topology": plan.topology, "pod_type": plan.ray_pod_type,
               "hosts_expected": plan.hosts, "hosts_found": hosts_found,
               "duration_s": round(time.monotonic() - started, 3), "checks": checks,
               "hosts": [hosts[w] for w in sorted(hosts)], "perf": perf or []}
    if injected:
        verdict["injected"] = injected
    return verdict


def failed_verdict(plan: SlicePlan, name: str, check: str, detail: str) -> dict[str, Any]:
    """The verdict of a check that could not go on: one failed ``check`` naming the cause."""
    return _verdict(plan, name, 0, [_check(check, False, detail)], {}, time.monotonic())


def _limit(args: argparse.Namespace, plan: SlicePlan) -> float:
    return float(args.check_timeout_s or check_limit_s(plan.hosts))


def check_slice(plan: SlicePlan, inv: SliceInventory, args: argparse.Namespace,
                faults: Faults | None = None) -> dict[str, Any]:
    """Checks one slice; returns its verdict (see :mod:`raytpu.report`). Never raises: a failure at any stage is a
    failed check naming its cause."""
    faults = faults or Faults()
    t0 = time.monotonic()
    checks: list[dict[str, Any]] = []
    hosts: dict[int, dict[str, Any]] = {}
    perf: list[dict[str, Any]] = []
    wanted = {k: v for k, v in plan.ray_labels(inv.name, 0).items()
              if k in (RAY_ACCELERATOR_LABEL, RAY_TOPOLOGY_LABEL, RAY_POD_TYPE_LABEL)}
    for worker, node in sorted(inv.nodes.items()):
        labels = node.get("Labels") or {}
        problems = [f"label {k}={labels.get(k)!r}, expected {v!r}" for k, v in wanted.items() if labels.get(k) != v]
        tpu = (node.get("Resources") or {}).get("TPU", 0)
        if tpu != plan.chips_per_host:
            problems.append(f"TPU resource {tpu:g}, expected {plan.chips_per_host}")
        hosts[worker] = {"worker_id": worker, "node_id": str(node.get("NodeID", "")),
                         "ip": str(node.get("NodeManagerAddress", "")), "devices": 0, "ok": not problems,
                         "problems": problems}
    for worker in inv.missing:
        hosts[worker] = {"worker_id": worker, "node_id": "", "ip": "", "devices": 0, "ok": False,
                         "problems": [f"host missing: no alive Ray node with {RAY_SLICE_LABEL}={inv.name} "
                                      f"{RAY_WORKER_LABEL}={worker}"]}
    missing = ", ".join(str(w) for w in inv.missing)
    checks.append(_check("hosts_present", inv.complete,
                         f"{len(inv.nodes)}/{plan.hosts} hosts" + (f"; missing worker id(s) {missing}"
                                                                   if missing else ""),
                         len(inv.nodes), plan.hosts))
    label_problems = sum(len(h["problems"]) for w, h in hosts.items() if w in inv.nodes)
    checks.append(_check("labels", label_problems == 0,
                         "ray.io/tpu-topology, tpu-pod-type, accelerator-type and TPU resources match the plan"
                         if not label_problems else f"{label_problems} label/resource mismatch(es); see hosts"))

    def verdict() -> dict[str, Any]:
        return _verdict(plan, inv.name, len(inv.nodes), checks, hosts, t0, perf, faults.describe())

    if not inv.complete:
        checks.append(_check("reservation", False, f"not attempted: slice {inv.name} is incomplete "
                             f"(missing worker id(s) {missing}); a reservation would wait forever"))
        return verdict()
    stage = "reservation"
    try:
        try:
            reservation = reserve_slice(plan, inv.name, timeout_s=args.reserve_timeout_s)
        except Exception as exc:  # a timeout, Ray refusing the shape (ValueError), ...: the cause is the verdict
            checks.append(_check("reservation", False, str(exc) if isinstance(exc, TimeoutError) else
                                 f"could not reserve slice {inv.name}: {_cause(exc)}", None, args.reserve_timeout_s))
            return verdict()
        checks.append(_check("reservation", True, f"whole slice reserved in {reservation.latency_s:.2f}s",
                             reservation.latency_s, args.reserve_timeout_s))
        stage = "host_checks"
        try:
            results = _run_hosts(plan, reservation, args, faults, checks, hosts)
        finally:
            reservation.release()
        stage = "judge"
        if results is not None:
            perf.extend(judge(plan, args, results, checks, hosts))
    except Exception as exc:  # a bug or an unforeseen failure still ends in a verdict naming it
        checks.append(_check(stage, False, f"the check failed: {_cause(exc)}"))
    return verdict()


def _run_hosts(plan: SlicePlan, reservation: Reservation, args: argparse.Namespace, faults: Faults,
               checks: list[dict[str, Any]], hosts: dict[int, dict[str, Any]]) -> dict[int, dict[str, Any]] | None:
    """Runs the host check on every bundle; the results by worker id, or None after naming the host(s) that
    raised or gave nothing within the limit (the others are stopped: they would wait for the missing peer)."""
    import ray
    from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

    limit = _limit(args, plan)
    pg = reservation.placement_group
    strategy = PlacementGroupSchedulingStrategy(placement_group=pg, placement_group_bundle_index=0)
    coordinator = ray.get(ray.remote(num_cpus=0)(_coordinator).options(scheduling_strategy=strategy).remote(),
                          timeout=limit)
    task = ray.remote(num_cpus=1, max_calls=1, max_retries=0)(_host_check)
    pending: dict[Any, int] = {}
    for worker in range(plan.hosts):
        # bundle i sits on the host labelled ray.io/tpu-worker-id=i (bundle_selectors): JAX process i is TPU worker i
        strategy = PlacementGroupSchedulingStrategy(placement_group=pg, placement_group_bundle_index=worker)
        ref = task.options(scheduling_strategy=strategy, resources={"TPU": plan.chips_per_host}).remote(
            f"{coordinator[0]}:{coordinator[1]}", plan.hosts, worker, int(limit), args.bandwidth_mib,
            faults.for_host(worker), plan.topology)
        pending[ref] = worker
    results: dict[int, dict[str, Any]] = {}
    failed: dict[int, str] = {}
    deadline = time.monotonic() + limit
    while pending and not failed and time.monotonic() < deadline:
        done, _ = ray.wait(list(pending), num_returns=1, timeout=max(deadline - time.monotonic(), 0.1))
        for ref in done:
            worker = pending.pop(ref)
            try:
                results[worker] = ray.get(ref)
            except Exception as exc:
                failed[worker] = _cause(exc)
    for ref in pending:
        ray.cancel(ref, force=True)
    if not failed and not pending:
        return results
    late = sorted(pending.values())
    for worker, cause in failed.items():
        hosts[worker]["problems"].append(f"host check raised {cause}")
    parts = [f"host {w}: {c}" for w, c in sorted(failed.items())]
    if failed and late:
        parts.append(f"stopped host(s) {', '.join(map(str, late))} (they would wait for host "
                     f"{min(failed)} until the limit)")
    elif late:
        for worker in late:
            hosts[worker]["problems"].append(f"host check gave no result within {limit:g}s")
        parts.append(f"host(s) {', '.join(map(str, late))} gave no result within {limit:g}s")
    checks.append(_check("host_checks", False, "; ".join(parts), None, limit))
    return None


def judge(plan: SlicePlan, args: argparse.Namespace, results: dict[int, dict[str, Any]],
          checks: list[dict[str, Any]], hosts: dict[int, dict[str, Any]]) -> list[dict[str, Any]]:
    """Adds the device, identity and performance checks for the hosts' ``results`` (by worker id) to ``checks``
    and ``hosts``; returns the verdict's ``perf`` rows. Pure: unit tests feed it made-up results."""
    gen = generation(plan.generation)
    floors = gen.smoke
    assert floors is not None, f"catalog generation {gen.name} has no smoke floors"
    ordered = [results[w] for w in sorted(results)]
    platform = ordered[0]["platform"]
    emulated = any(r["env"].get(ENV_EMULATED) == "1" for r in ordered) or os.environ.get(ENV_EMULATED) == "1"
    mode = args.perf_thresholds
    enforce = mode == "on" or (mode == "auto" and platform == "tpu" and not emulated)
    where = f"{platform} devices" + (", emulated slice" if emulated else "")

    for worker, result in results.items():
        hosts[worker]["devices"] = result["devices"]
        if result["devices"] < plan.chips_per_host or result["devices"] % plan.chips_per_host:
            hosts[worker]["problems"].append(f"{result['devices']} devices, expected {plan.chips_per_host} per host")
    per_host = [r["devices"] for r in ordered]
    checks.append(_check("devices_per_host", all(d >= plan.chips_per_host for d in per_host),
                         f"{per_host} on {where}", min(per_host), plan.chips_per_host))
    total = ordered[0]["devices_total"]
    checks.append(_check("devices_total", total == sum(per_host) and total >= plan.chips,
                         f"jax.device_count() = {total}", total, plan.chips))
    expected_sum = total * (total + 1) / 2
    sums = [r["psum"] for r in ordered]
    checks.append(_check("psum", all(abs(s - expected_sum) < 1e-3 for s in sums),
                         f"cross-host all-reduce of 1..{total} seen by {len(sums)} host(s)", sums[0], expected_sum))
    _identity_checks(plan, results, checks, hosts, platform, emulated)

    per_chip = max(min(per_host) // plan.chips_per_host, 1)  # JAX devices per chip: 2 on tpu7x, else 1
    peer = args.min_peer_ratio
    perf: list[dict[str, Any]] = []
    for metric, unit, key, reference, floor in (
            ("matmul_tflops", "TFLOP/s", "matmul_tflops", gen.peak_bf16_tflops_per_chip / per_chip,
             args.min_matmul_ratio or floors.matmul_of_peak),
            ("hbm_bandwidth", "GB/s", "hbm_gbps", gen.hbm_gbps_per_chip / per_chip,
             args.min_hbm_bw_ratio or floors.hbm_of_spec)):
        values = {(w, i): v for w, r in results.items() for i, v in enumerate(r[key])}
        perf += _device_checks(metric, unit, values, reference, floor, peer, enforce, where, checks, hosts)

    perf += _interconnect_checks(plan, args, ordered, per_chip, enforce, where, checks)
    hbm = [b for r in ordered for b in r["hbm_bytes"] if b]
    hbm_ratio = min(hbm) * per_chip / 2**30 / plan.hbm_gib_per_chip if hbm else None
    detail = (f"{min(hbm) * per_chip / 2**30:.1f} GiB per chip (least of {len(hbm)} devices) vs catalog "
              f"{plan.hbm_gib_per_chip:g}" if hbm
              else f"the device reports no memory limit (catalog {plan.hbm_gib_per_chip:g} GiB)")
    checks.append(_gate(_check("hbm_ratio", hbm_ratio is not None and hbm_ratio >= args.min_hbm_ratio, detail,
                               _round(hbm_ratio), args.min_hbm_ratio), enforce, where))
    return perf


def _identity_checks(plan: SlicePlan, results: dict[int, dict[str, Any]], checks: list[dict[str, Any]],
                     hosts: dict[int, dict[str, Any]], platform: str, emulated: bool) -> None:
    """What the hardware and GKE say independently of the ``TPU_*`` env Ray's labels come from: the device kind
    libtpu reports, and the webhook's pod hostnames as DNS serves them."""
    gen = generation(plan.generation)
    kinds = {w: r.get("device_kind", "?") for w, r in results.items()}
    if platform == "tpu":
        for worker, found in kinds.items():
            if found not in gen.jax_device_kinds:
                hosts[worker]["problems"].append(f"JAX reports {found!r} devices, not {plan.generation}")
        checks.append(_check("device_kind", all(k in gen.jax_device_kinds for k in kinds.values()),
                             f"JAX reports {sorted(set(kinds.values()))}; {plan.generation} is "
                             f"{list(gen.jax_device_kinds)}"))
    else:
        checks.append(_informational(_check("device_kind", True, f"informational ({platform} devices): JAX reports "
                                            f"{sorted(set(kinds.values()))}; on TPU it must be one of "
                                            f"{list(gen.jax_device_kinds)}")))
    if plan.single_host:
        return
    if emulated:
        checks.append(_informational(_check("worker_hostnames", True, "informational (emulated slice): "
                                            "TPU_WORKER_HOSTNAMES are not DNS names here; on GKE each pod's "
                                            "hostname and its neighbour's DNS record are checked")))
        return
    found = 0
    for worker, result in sorted(results.items()):
        names = [n for n in result["env"].get("TPU_WORKER_HOSTNAMES", "").split(",") if n]
        own = names[worker].split(".")[0] if worker < len(names) else None
        if own != result.get("hostname"):
            found += 1
            hosts[worker]["problems"].append(f"pod hostname {result.get('hostname')!r} is not its "
                                             f"TPU_WORKER_HOSTNAMES entry {own!r} (worker {worker})")
        peer = result.get("peer")
        if peer and peer["worker"] in hosts and peer["ip"] != hosts[peer["worker"]]["ip"]:
            found += 1
            hosts[peer["worker"]]["problems"].append(
                f"its name {peer['name']!r} resolves to {peer['ip'] or 'nothing'} from host {worker}"
                f"{' (' + peer['error'] + ')' if peer['error'] else ''}, not to its Ray node IP "
                f"{hosts[peer['worker']]['ip']}")
    checks.append(_check("worker_hostnames", not found,
                         "every pod's hostname is its TPU_WORKER_HOSTNAMES entry and its neighbour's entry "
                         "resolves to the neighbour's node" if not found
                         else f"{found} hostname/DNS mismatch(es); see hosts"))


def _device_checks(metric: str, unit: str, values: dict[tuple[int, int], float], reference: float, floor: float,
                   peer: float, enforce: bool, where: str, checks: list[dict[str, Any]],
                   hosts: dict[int, dict[str, Any]]) -> list[dict[str, Any]]:
    """Gates every device on ``metric``: against ``floor`` x the catalog's per-device ``reference`` (where
    ``enforce``) and against ``peer`` x the slice's median (everywhere). Adds ``<metric>_ratio`` and
    ``<metric>_peer_ratio`` (both name the slowest device), a problem on each bad device's host, and returns one
    ``perf`` row per device."""
    median = statistics.median(values.values())
    rows = []
    below = []
    for (worker, index), value in sorted(values.items()):
        ratio, peer_ratio = value / reference, (value / median if median > 0 else 1.0)
        problems = []
        if peer_ratio < peer:
            below.append(f"host {worker} device {index} at {peer_ratio:.2f}x")
            problems.append(f"device {index}: {metric} {value:.4g} {unit}, {peer_ratio:.2f}x the slice median "
                            f"{median:.4g} (min {peer:g})")
        if enforce and ratio < floor:
            problems.append(f"device {index}: {metric} {value:.4g} {unit}, {ratio:.2f} of the catalog's "
                            f"{reference:.4g} (min {floor:g})")
        hosts[worker]["problems"] += problems
        rows.append({"metric": metric, "worker_id": worker, "device": index, "value": _round(value), "unit": unit,
                     "reference": _round(reference), "ratio": _round(ratio), "min_ratio": floor, "gates": enforce,
                     "peer_ratio": _round(peer_ratio), "min_peer_ratio": peer, "ok": not problems})
    (w, i), slowest = min(values.items(), key=lambda kv: kv[1])
    ratio = slowest / reference
    checks.append(_gate(_check(f"{metric}_ratio", ratio >= floor,
                               f"slowest of {len(values)} devices: host {w} device {i}, {slowest:.4g} {unit} vs the "
                               f"catalog's {reference:.4g} per device", _round(ratio), floor), enforce, where))
    checks.append(_check(f"{metric}_peer_ratio", not below,
                         (f"{'; '.join(below)} the slice median {median:.4g} {unit}" if below else
                          f"slowest: host {w} device {i} at {slowest / median if median else 1:.2f}x the slice "
                          f"median {median:.4g} {unit}"), _round(slowest / median if median else 1.0), peer))
    return rows


def _interconnect_checks(plan: SlicePlan, args: argparse.Namespace, ordered: list[dict[str, Any]], per_chip: int,
                         enforce: bool, where: str, checks: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The all-reduce bus bandwidth per chip, of the whole slice and over each mesh axis alone, against what the
    slice's topology should reach (:func:`raytpu.catalog.expected_busbw`: links' one-way rate, axes, wraparound), at
    ``busbw_of_expected`` (about half) of it; and the small message latency (reported only). A weak axis is named
    by its own check (``axis y: 12 GB/s of 90 expected``). Returns their ``perf`` rows."""
    floors = generation(plan.generation).smoke
    assert floors is not None
    sizes = ordered[0].get("sizes") or {}
    floor = args.min_busbw_ratio or floors.busbw_of_expected
    expected = expected_busbw(plan.generation, plan.topology)
    how = (f"{sizes.get('allreduce_mib')} MiB per device x {sizes.get('allreduce_iters')} in one compiled loop, "
           "slowest host")
    measured = [r["allreduce_gbps"] for r in ordered if r.get("allreduce_gbps") is not None]
    busbw = min(measured) * per_chip if measured else None
    reference = expected.busbw_gbps if expected is not None and expected.busbw_gbps > 0 else None
    rows = [_busbw_check(checks, "allreduce_bandwidth_gbps", "allreduce_busbw", busbw, reference, floor, enforce,
                         where, f"bus bandwidth per chip {{value}} ({how}) = {{ratio}} of the expected "
                         f"{{reference}} for {plan.generation} {plan.topology}: "
                         f"{expected.describe() if expected else ''}", "one device, no all-reduce")]
    axes = _axis_results(ordered)
    errors = sorted({f"host {r['process_id']}: {r['axes_error']}" for r in ordered if r.get("axes_error")})
    if errors:
        checks.append(_gate(_check("allreduce_axes", False, f"the per-axis all-reduces failed: {'; '.join(errors)}"),
                            enforce, where))
    elif axes is None:
        checks.append(_informational(_check("allreduce_axes", True, "informational: the devices do not form the "
                                            f"{plan.topology} mesh here, no per-axis all-reduce")))
    gen = generation(plan.generation)
    shape = ici_for_dims(gen.ici_link_gbps or 0.0, gen.mesh_dims, tuple(a["size"] for a in axes or []),
                         tuple(a["axis"] for a in axes or []))
    for found in axes or []:
        name = found["axis"]
        axis = shape.axis(name)
        assert axis is not None
        value = found["gbps"] * per_chip
        rows.append(_busbw_check(checks, f"allreduce_axis_{name}_gbps", f"allreduce_busbw_{name}", value,
                                 axis.busbw_gbps if gen.ici_link_gbps else None, floor, enforce, where,
                                 f"axis {name}: {{value}} of {{reference}} expected, all-reduce over this axis "
                                 f"alone ({axis.describe(shape.link_gbps)}; {how})", ""))
    latency = [r["latency_us"] for r in ordered if r.get("latency_us") is not None]
    checks.append(_informational(_check("allreduce_latency_us", True,
                                        f"informational: 4-byte all-reduce over {ordered[0]['devices_total']} devices, "
                                        f"{sizes.get('latency_iters')} in one loop, slowest host",
                                        _round(max(latency)) if latency else None)))
    rows.append({"metric": "allreduce_latency", "worker_id": None, "device": None,
                 "value": _round(max(latency)) if latency else None, "unit": "us", "reference": None, "ratio": None,
                 "min_ratio": None, "gates": False, "peer_ratio": None, "min_peer_ratio": None, "ok": True})
    return rows


def _axis_results(ordered: list[dict[str, Any]]) -> list[dict[str, Any]] | None:
    """Each mesh axis's all-reduce, the slowest host's figure per axis (GB/s per device); None when a host could
    not shape the mesh."""
    found = [r.get("axes") for r in ordered]
    if any(f is None for f in found):
        return None
    slowest: dict[str, dict[str, Any]] = {}
    for per_host in found:
        for axis in per_host or []:
            if axis["axis"] not in slowest or axis["gbps"] < slowest[axis["axis"]]["gbps"]:
                slowest[axis["axis"]] = dict(axis)
    return [slowest[n] for n in ICI_AXIS_NAMES if n in slowest]


def _busbw_check(checks: list[dict[str, Any]], name: str, metric: str, value: float | None,
                 reference: float | None, floor: float, enforce: bool, where: str, detail: str,
                 no_value: str) -> dict[str, Any]:
    """One bus bandwidth check (``value`` GB/s per chip against ``floor`` x ``reference``) and its ``perf`` row;
    informational without a value or a reference, or where thresholds do not apply (``enforce`` False)."""
    if value is None:
        check = _informational(_check(name, True, f"informational: {no_value}"))
    elif reference is None:
        check = _informational(_check(name, True, f"informational: {value:.4g} GB/s per chip; the catalog has no "
                                      "ICI link rate for this generation", _round(value)))
    else:
        text = detail.format(value=f"{value:.4g} GB/s", reference=f"{reference:.4g} GB/s",
                             ratio=f"{value / reference:.3g}")
        check = _gate(_check(name, value >= floor * reference, f"{text} (min {floor:g})", _round(value),
                             _round(floor * reference)), enforce, where)
    checks.append(check)
    gated = bool(value is not None and reference and enforce)
    return {"metric": metric, "worker_id": None, "device": None, "value": _round(value), "unit": "GB/s",
            "reference": _round(reference), "ratio": _round(value / reference) if value is not None and reference
            else None, "min_ratio": floor if reference else None, "gates": gated, "peer_ratio": None,
            "min_peer_ratio": None, "ok": check["ok"] or not gated}


def _round(value: float | None) -> float | None:
    return None if value is None else float(f"{value:.4g}")


def _informational(check: dict[str, Any]) -> dict[str, Any]:
    check["informational"] = True
    check["ok"] = True
    return check


def _gate(check: dict[str, Any], enforce: bool, where: str) -> dict[str, Any]:
    if enforce:
        return check
    met = "met" if check["ok"] else "not met"
    check["detail"] = f"informational ({where}; thresholds apply on TPU; {met} here): {check['detail']}"
    return _informational(check)


# ---------------------------------------------------------------------------------------------- main


def build_parser() -> argparse.ArgumentParser:
    """The workload's per-run flags (its slice comes from ``RAYTPU_WORKLOAD``)."""
    parser = argparse.ArgumentParser(prog="python -m raytpu.workloads.smoke", description=__doc__.split("\n")[0])
    parser.add_argument("--slice-name", default=None, help="check only this slice")
    parser.add_argument("--reserve-timeout-s", type=float, default=RESERVE_TIMEOUT_S)
    parser.add_argument("--check-timeout-s", type=float, default=None,
                        help="bound on waiting for late hosts and on the host checks (default: 180 s + 2 s per host, "
                             "capped to fit the RayJob's deadline)")
    parser.add_argument("--bandwidth-mib", type=int, default=None,
                        help="all-reduce size per device (default: 256 on TPU, 1 on CPU devices)")
    parser.add_argument("--perf-thresholds", choices=("auto", "on", "off"), default="auto",
                        help="auto: enforce the catalog floors on real TPU only, informational when emulated")
    parser.add_argument("--min-matmul-ratio", type=float, default=None,
                        help="per-device matmul floor over the catalog peak (default: the generation's)")
    parser.add_argument("--min-hbm-bw-ratio", type=float, default=None,
                        help="per-device copy bandwidth floor over the catalog's HBM GB/s (default: the generation's)")
    parser.add_argument("--min-busbw-ratio", type=float, default=None,
                        help="all-reduce bus bandwidth floor (whole slice and each mesh axis) over the figure the "
                             "slice's topology should reach, raytpu.catalog.expected_busbw (default: the "
                             "generation's, 0.5)")
    parser.add_argument("--min-peer-ratio", type=float, default=MIN_PEER_RATIO,
                        help=f"every device against its slice's median, on any hardware (default {MIN_PEER_RATIO})")
    parser.add_argument("--min-hbm-ratio", type=float, default=MIN_HBM_RATIO)
    parser.add_argument("--address", default=None, help="Ray address (default: RAY_ADDRESS, else auto)")
    return parser


def run(args: argparse.Namespace) -> list[dict[str, Any]]:
    """Checks the slices; returns their verdicts (also printed, one line each). Past reading its spec, every
    failure becomes a verdict naming the cause."""
    import ray

    work = WorkloadSpec.from_env()
    plan = work.plan
    faults = Faults.from_env()
    limits = work.kind.limits
    if args.check_timeout_s is None:
        args.check_timeout_s = check_limit_s(plan.hosts, limits.active_deadline_s if limits else None,
                                             args.reserve_timeout_s)
    verdicts: list[dict[str, Any]] = []
    try:
        if not ray.is_initialized():
            ray.init(address=args.address or os.environ.get("RAY_ADDRESS") or "auto", log_to_driver=False,
                     logging_level=logging.ERROR)
        slices = wait_for_hosts(plan, work.slices_spanned, args.slice_name, args.check_timeout_s)
        for inv in slices.values():
            verdicts.append(check_slice(plan, inv, args, faults))
        for i in range(len(verdicts), 1 if args.slice_name else work.slices_spanned):
            inv = SliceInventory(f"<missing {plan.ray_pod_type} slice {i + 1} of {work.slices_spanned}>",
                                 hosts_expected=plan.hosts)
            verdicts.append(check_slice(plan, inv, args, faults))
    except Exception as exc:  # e.g. no Ray cluster to reach: still a verdict, naming the cause
        name = args.slice_name or f"<{plan.ray_pod_type} slices>"
        verdicts.append(failed_verdict(plan, name, "smoke", f"the check failed: {_cause(exc)}"))
    for v in verdicts:
        print(format_verdict_line(v), flush=True)
        print(json.dumps(log_entry(v), sort_keys=True), flush=True)  # Cloud Logging's structured line
    return verdicts


def main(argv: list[str] | None = None) -> int:
    """Entry point: 0 when every slice is healthy, 1 otherwise, 2 for an impossible slice."""
    args = build_parser().parse_args(argv)

    def body() -> int:
        verdicts = run(args)
        healthy = all_healthy(verdicts)
        summary = ", ".join(f"{v['slice']}: {'healthy' if v['healthy'] else 'UNHEALTHY'}" for v in verdicts)
        print(f"smoke: {summary}", file=sys.stderr)
        return 0 if healthy else 1

    return guarded(body)

if __name__ == "__main__":
    sys.exit(main())


__all__ = ["Faults", "Reservation", "SliceInventory", "axis_allreduces", "bundle_selectors", "check_limit_s",
           "check_slice", "inventory", "judge", "main", "reserve_slice", "run", "topology_mesh", "wait_for_hosts"]
