"""Smoke check of TPU slices: reserve each whole slice, then prove its hosts, devices and interconnect work.

Runs unchanged as a GKE RayJob entrypoint and on the local emulated slice::

    RAYTPU_WORKLOAD='<WorkloadSpec JSON>' python -m raytpu.workloads.smoke [--slice-name NAME]

The slice's shape and how many slices to expect come from the workload spec (``RAYTPU_WORKLOAD``, set by
the RayJob's runtime env or ``raytpu local``); the job never re-plans its slice from flags.
For every slice of the plan's pod type it finds (at least the spec's slice count), it prints one line
``RAYTPU_SMOKE_VERDICT {json}`` (format: :mod:`raytpu.report`) and exits 1 when any slice is unhealthy.

Checks, per host and per slice:

- ``hosts_present``: every worker id 0..hosts-1 is alive (a missing host names its worker id);
- ``labels``: each host's ``ray.io/*`` labels and ``TPU_*`` env agree with the plan and the slice;
- ``reservation``: the whole slice is reserved with ``ray.util.tpu.slice_placement_group`` within
  ``--reserve-timeout-s`` (checked complete first, then pinned to the slice by its
  ``ray.io/tpu-slice-name`` label: an unpinned reservation can take worker 0 of an incomplete slice);
- ``devices_per_host`` / ``devices_total``: ``jax.local_devices()`` on each host, ``jax.device_count()``;
- ``psum``: a cross-host all-reduce (multi-process JAX) of known answer ``n(n+1)/2``;
- ``allreduce_bandwidth_gbps``: bus bandwidth of an all-reduce (always informational: no catalog figure);
- ``matmul_tflops_ratio``: bf16 matmul TFLOP/s per chip over the catalog's peak;
- ``hbm_ratio``: memory per chip reported by the device over the catalog's HBM.

Performance thresholds (``--perf-thresholds``): ``auto`` (default) applies them only on real TPU devices
outside an emulated slice (``RAYTPU_EMULATED=1``, which ``raytpu local`` sets on every host); on an
emulated slice (JAX CPU devices) the ratios are reported, marked informational, and do not affect health.
Every wait is bounded: ``--reserve-timeout-s``, ``--check-timeout-s``.

Imports only ray, numpy and the kit's core at module level; jax is imported inside the host task.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import sys
import time
from dataclasses import dataclass, field
from typing import Any

from raytpu.plan import RAY_POD_TYPE_LABEL, RAY_SLICE_LABEL, RAY_WORKER_LABEL, SlicePlan
from raytpu.report import all_healthy, format_verdict_line, log_entry
from raytpu.spec import WorkloadSpec
from raytpu.workloads._entry import guarded

ENV_EMULATED = "RAYTPU_EMULATED"

MIN_MATMUL_RATIO = 0.4
"""On real TPU: bf16 matmul TFLOP/s per chip must reach this share of the catalog peak."""
MIN_HBM_RATIO = 0.85
"""On real TPU: device-reported memory per chip over catalog HBM (allocator limits sit below the total)."""


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


def reserve_slice(plan: SlicePlan, slice_name: str | None = None, timeout_s: float = 60.0,
                  poll_s: float = 0.5) -> Reservation:
    """Reserves one whole slice of ``plan`` (all hosts, all chips) or raises TimeoutError naming the slice.

    Completeness is checked first and the reservation is pinned to the chosen slice by its
    ``ray.io/tpu-slice-name`` label, so a reservation never takes worker 0 of an incomplete slice and hangs.
    With ``slice_name`` None, any complete, idle slice; busy or incomplete slices are waited for until
    ``timeout_s``.

    Raises:
        TimeoutError: No slice (or not ``slice_name``) could be reserved in time; the message names the
            slice(s) and what was wrong with each (missing worker ids, busy).
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
            handle = slice_placement_group(
                topology=plan.topology, accelerator_version=plan.ray_accelerator_type,
                chips_per_vm=plan.chips_per_host,
                resources_per_bundle={"CPU": 1, "TPU": plan.chips_per_host},
                bundle_label_selector=[{RAY_SLICE_LABEL: inv.name} for _ in range(plan.hosts)],
                head_reservation_timeout_s=max(deadline - time.monotonic(), 0.1))
            reservation = Reservation(inv.name, handle, head_pg, 0.0)
            ready, _ = ray.wait([handle.placement_group.ready()], timeout=max(deadline - time.monotonic(), 0.1))
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
    import socket

    import ray

    with socket.socket() as s:
        s.bind(("", 0))
        port = int(s.getsockname()[1])
    return ray.util.get_node_ip_address(), port


def _host_check(coordinator: str, num_processes: int, process_id: int, chips_per_host: int,
                init_timeout_s: int, bandwidth_mib: int) -> dict[str, Any]:
    """Runs on one host (inside the slice's bundle): JAX multi-process init, devices, psum, bandwidth, matmul."""
    import numpy as np
    import ray

    info: dict[str, Any] = {
        "process_id": process_id,
        "node_id": ray.get_runtime_context().get_node_id(),
        "ip": ray.util.get_node_ip_address(),
        "env": {k: os.environ.get(k, "") for k in
                ("TPU_NAME", "TPU_WORKER_ID", "TPU_ACCELERATOR_TYPE", "TPU_TOPOLOGY", ENV_EMULATED,
                 "JAX_PLATFORMS")},
    }
    import jax
    import jax.numpy as jnp
    from jax.sharding import Mesh, NamedSharding
    from jax.sharding import PartitionSpec as P

    jax.distributed.initialize(coordinator, num_processes, process_id, initialization_timeout=init_timeout_s)
    try:
        devices = jax.devices()
        local = jax.local_devices()
        info.update(platform=local[0].platform, devices=len(local), devices_total=len(devices))
        mesh = Mesh(np.array(devices), ("d",))
        sharded = NamedSharding(mesh, P("d"))
        replicated = NamedSharding(mesh, P())
        index = {d: i for i, d in enumerate(devices)}

        # psum with a known answer: device i contributes i + 1.
        parts = [jax.device_put(np.array([index[d] + 1.0], dtype=np.float32), d) for d in local]
        arr = jax.make_array_from_single_device_arrays((len(devices),), sharded, parts)
        total = jax.jit(jnp.sum, out_shardings=replicated)(arr)
        info["psum"] = float(np.asarray(total.addressable_data(0)))

        # All-reduce bus bandwidth: sum over the sharded axis of (n, m) float32.
        m = max(bandwidth_mib * 1024 * 1024 // 4, 1024)
        parts = [jax.device_put(np.ones((1, m), dtype=np.float32), d) for d in local]
        big = jax.make_array_from_single_device_arrays((len(devices), m), sharded, parts)
        reduce = jax.jit(lambda x: jnp.sum(x, axis=0), out_shardings=replicated)
        reduce(big).block_until_ready()
        reps = 3
        t = time.perf_counter()
        for _ in range(reps):
            out = reduce(big)
        out.block_until_ready()
        seconds = (time.perf_counter() - t) / reps
        n = len(devices)
        info["allreduce_gbps"] = 2 * (n - 1) / n * m * 4 / seconds / 1e9 if n > 1 else 0.0

        # bf16 matmul per local device.
        size = 8192 if info["platform"] == "tpu" else 256
        matmul = jax.jit(lambda a, b: a @ b)
        rates = []
        for d in local:
            a = jax.device_put(jnp.ones((size, size), dtype=jnp.bfloat16), d)
            matmul(a, a).block_until_ready()
            t = time.perf_counter()
            for _ in range(reps):
                c = matmul(a, a)
            c.block_until_ready()
            rates.append(2 * size**3 / ((time.perf_counter() - t) / reps) / 1e12)
        devices_per_chip = max(len(local) // max(chips_per_host, 1), 1)
        info["matmul_tflops_per_chip"] = float(np.mean(rates)) * devices_per_chip

        stats = local[0].memory_stats() or {}
        limit = stats.get("bytes_limit")
        info["hbm_gib_per_chip"] = limit * devices_per_chip / 2**30 if limit else None
    finally:
        jax.distributed.shutdown()
    return info


# ---------------------------------------------------------------------------------------------- verdict


def _check(name: str, ok: bool, detail: str, value: float | None = None,
           expected: float | None = None) -> dict[str, Any]:
    return {"name": name, "ok": bool(ok), "detail": detail, "value": value, "expected": expected}


def check_slice(plan: SlicePlan, inv: SliceInventory, args: argparse.Namespace) -> dict[str, Any]:
    """Checks one slice; returns its verdict (see :mod:`raytpu.report`)."""
    import ray
    from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

    t0 = time.monotonic()
    checks: list[dict[str, Any]] = []
    hosts: dict[int, dict[str, Any]] = {}
    for worker, node in sorted(inv.nodes.items()):
        labels = node.get("Labels") or {}
        problems = [f"label {k}={labels.get(k)!r}, expected {v!r}"
                    for k, v in plan.ray_labels(inv.name, worker).items() if labels.get(k) != v]
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
                         "ray.io/* labels and TPU resources match the plan" if not label_problems
                         else f"{label_problems} label/resource mismatch(es); see hosts"))

    def verdict(healthy_extra: bool = True) -> dict[str, Any]:
        gating = [c for c in checks if not c.get("informational")]
        return {"slice": inv.name, "healthy": healthy_extra and all(c["ok"] for c in gating)
                and all(h["ok"] for h in hosts.values()),
                "generation": plan.generation, "topology": plan.topology, "pod_type": plan.ray_pod_type,
                "hosts_expected": plan.hosts, "hosts_found": len(inv.nodes),
                "duration_s": round(time.monotonic() - t0, 3), "checks": checks,
                "hosts": [hosts[w] for w in sorted(hosts)]}

    if not inv.complete:
        checks.append(_check("reservation", False, f"not attempted: slice {inv.name} is incomplete "
                             f"(missing worker id(s) {missing}); a reservation would wait forever"))
        return verdict()

    try:
        reservation = reserve_slice(plan, inv.name, timeout_s=args.reserve_timeout_s)
    except TimeoutError as exc:
        checks.append(_check("reservation", False, str(exc), None, args.reserve_timeout_s))
        return verdict()
    checks.append(_check("reservation", True, f"whole slice reserved in {reservation.latency_s:.2f}s",
                         reservation.latency_s, args.reserve_timeout_s))
    try:
        pg = reservation.placement_group
        strategy = PlacementGroupSchedulingStrategy(placement_group=pg, placement_group_bundle_index=0)
        coordinator = ray.get(ray.remote(num_cpus=0)(_coordinator).options(scheduling_strategy=strategy).remote(),
                              timeout=args.check_timeout_s)
        task = ray.remote(num_cpus=1, max_calls=1, max_retries=0)(_host_check)
        refs = []
        for worker in range(plan.hosts):
            # bundle i is pinned to the slice; the host's rank is its TPU worker id, found on the node
            strategy = PlacementGroupSchedulingStrategy(placement_group=pg, placement_group_bundle_index=worker)
            refs.append(task.options(scheduling_strategy=strategy, resources={"TPU": plan.chips_per_host})
                        .remote(f"{coordinator[0]}:{coordinator[1]}", plan.hosts, worker, plan.chips_per_host,
                                int(args.check_timeout_s), args.bandwidth_mib))
        try:
            results = ray.get(refs, timeout=args.check_timeout_s)
        except Exception as exc:  # GetTimeoutError, task errors: both make the slice unhealthy
            for ref in refs:
                ray.cancel(ref, force=True)
            checks.append(_check("host_checks", False, f"{type(exc).__name__}: {str(exc).splitlines()[0][:300]}",
                                 None, args.check_timeout_s))
            return verdict()
    finally:
        reservation.release()
    return _verdict_from_results(plan, inv, args, checks, hosts, results, verdict)


def _verdict_from_results(plan: SlicePlan, inv: SliceInventory, args: argparse.Namespace,
                          checks: list[dict[str, Any]], hosts: dict[int, dict[str, Any]],
                          results: list[dict[str, Any]], verdict: Any) -> dict[str, Any]:
    by_node = {h["node_id"]: w for w, h in hosts.items()}
    for result in results:
        worker = by_node.get(result["node_id"])
        if worker is None:
            continue
        host = hosts[worker]
        host["devices"] = result["devices"]
        env = result["env"]
        if env.get("TPU_NAME") and env["TPU_NAME"] != inv.name:
            host["problems"].append(f"TPU_NAME={env['TPU_NAME']!r}, expected {inv.name!r}")
        if env.get("TPU_WORKER_ID") and env["TPU_WORKER_ID"] != str(worker):
            host["problems"].append(f"TPU_WORKER_ID={env['TPU_WORKER_ID']!r}, expected '{worker}'")
        if result["devices"] < plan.chips_per_host or result["devices"] % plan.chips_per_host:
            host["problems"].append(f"{result['devices']} devices, expected {plan.chips_per_host} per host")
        host["ok"] = not host["problems"]
    platform = results[0]["platform"] if results else "?"
    emulated = any(r["env"].get(ENV_EMULATED) == "1" for r in results) or os.environ.get(ENV_EMULATED) == "1"
    mode = args.perf_thresholds
    enforce = mode == "on" or (mode == "auto" and platform == "tpu" and not emulated)
    where = f"{platform} devices" + (", emulated slice" if emulated else "")

    per_host = [r["devices"] for r in results]
    checks.append(_check("devices_per_host", all(d >= plan.chips_per_host for d in per_host),
                         f"{per_host} on {where}", min(per_host) if per_host else 0, plan.chips_per_host))
    total = results[0]["devices_total"] if results else 0
    want_total = sum(per_host)
    checks.append(_check("devices_total", total == want_total and total >= plan.chips,
                         f"jax.device_count() = {total}", total, plan.chips))
    n = total
    expected_sum = n * (n + 1) / 2
    sums = [r["psum"] for r in results]
    checks.append(_check("psum", all(abs(s - expected_sum) < 1e-3 for s in sums),
                         f"cross-host all-reduce of 1..{n} seen by {len(sums)} host(s)", sums[0] if sums else None,
                         expected_sum))
    bandwidth = min(r["allreduce_gbps"] for r in results) if results else None
    checks.append(_informational(_check("allreduce_bandwidth_gbps", True,
                                        f"informational: {args.bandwidth_mib} MiB per device, slowest host",
                                        _round(bandwidth), None)))
    tflops = min(r["matmul_tflops_per_chip"] for r in results) if results else None
    ratio = tflops / plan.peak_bf16_tflops_per_chip if tflops is not None else None
    detail = (f"{tflops:.4g} bf16 TFLOP/s per chip vs catalog {plan.peak_bf16_tflops_per_chip:g}"
              if tflops is not None else "no result")
    checks.append(_gate(_check("matmul_tflops_ratio", ratio is not None and ratio >= args.min_matmul_ratio,
                               detail, _round(ratio), args.min_matmul_ratio), enforce, where))
    hbm = [r["hbm_gib_per_chip"] for r in results if r.get("hbm_gib_per_chip")]
    hbm_ratio = min(hbm) / plan.hbm_gib_per_chip if hbm else None
    detail = (f"{min(hbm):.1f} GiB per chip vs catalog {plan.hbm_gib_per_chip:g}" if hbm
              else f"the device reports no memory limit (catalog {plan.hbm_gib_per_chip:g} GiB)")
    checks.append(_gate(_check("hbm_ratio", hbm_ratio is not None and hbm_ratio >= args.min_hbm_ratio, detail,
                               _round(hbm_ratio), args.min_hbm_ratio), enforce, where))
    return dict(verdict())


def _round(value: float | None) -> float | None:
    return None if value is None else float(f"{value:.4g}")


def _informational(check: dict[str, Any]) -> dict[str, Any]:
    check["informational"] = True
    check["ok"] = True
    return check


def _gate(check: dict[str, Any], enforce: bool, where: str) -> dict[str, Any]:
    if enforce:
        return check
    check["detail"] = f"informational ({where}; thresholds apply on TPU): {check['detail']}"
    return _informational(check)


# ---------------------------------------------------------------------------------------------- main


def build_parser() -> argparse.ArgumentParser:
    """The workload's per-run flags (its slice comes from ``RAYTPU_WORKLOAD``)."""
    parser = argparse.ArgumentParser(prog="python -m raytpu.workloads.smoke", description=__doc__.split("\n")[0])
    parser.add_argument("--slice-name", default=None, help="check only this slice")
    parser.add_argument("--reserve-timeout-s", type=float, default=60.0)
    parser.add_argument("--check-timeout-s", type=float, default=180.0)
    parser.add_argument("--bandwidth-mib", type=int, default=4, help="all-reduce size per device")
    parser.add_argument("--perf-thresholds", choices=("auto", "on", "off"), default="auto",
                        help="auto: enforce matmul/HBM thresholds on real TPU only, informational when emulated")
    parser.add_argument("--min-matmul-ratio", type=float, default=MIN_MATMUL_RATIO)
    parser.add_argument("--min-hbm-ratio", type=float, default=MIN_HBM_RATIO)
    parser.add_argument("--address", default=None, help="Ray address (default: RAY_ADDRESS, else auto)")
    return parser


def run(args: argparse.Namespace) -> list[dict[str, Any]]:
    """Checks the slices; returns their verdicts (also printed, one line each)."""
    import ray

    work = WorkloadSpec.from_env()
    plan = work.plan
    expected = work.slice_count
    if not ray.is_initialized():
        ray.init(address=args.address or os.environ.get("RAY_ADDRESS") or "auto", log_to_driver=False,
                 logging_level=logging.ERROR)
    slices = inventory(plan)
    if args.slice_name:
        slices = {args.slice_name: slices.get(args.slice_name,
                                              SliceInventory(args.slice_name, hosts_expected=plan.hosts))}
    verdicts = [check_slice(plan, inv, args) for inv in slices.values()]
    for i in range(len(verdicts), expected):
        inv = SliceInventory(f"<missing {plan.ray_pod_type} slice {i + 1} of {expected}>",
                             hosts_expected=plan.hosts)
        verdicts.append(check_slice(plan, inv, args))
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


__all__ = ["Reservation", "SliceInventory", "check_slice", "inventory", "main", "reserve_slice", "run"]
