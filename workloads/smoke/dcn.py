"""The smoke check over DCN: one all-reduce across the slices a multi-slice run spans, reported apart from the ICI
rows, and the slice that cannot reach the others named (a TCP probe of the coordinator first, bounded).

Each host joins with the ``MEGASCALE_*`` env a multi-slice run gives it; bus bandwidth per host is judged against
its line rate, gated where the ICI rows gate. Source: Ray 2.60 ``ray.util.tpu.get_tpu_coordinator_env_vars``;
docs/FACTS.md#measurements-dcn.
"""

from __future__ import annotations

import os
import socket
import time
from dataclasses import dataclass
from typing import Any

from raytpu.core.common.errors import invalid_value
from raytpu.core.common.report import Check, DcnSection, PerfRow, Verdict
from raytpu.core.tpu.catalog import generation
from raytpu.core.tpu.plan import SlicePlan
from raytpu.workloads.smoke.measure import ENV_EMULATED
from raytpu.workloads.smoke.options import SmokeOptions
from raytpu.workloads.smoke.verdict import cause_of, gate, informational, new_check, rounded
from raytpu.workloads.support.slices import Reservation, SliceInventory, reserve_slice

DCN_GBPS_PER_HOST = 25.0
"""The fallback for a machine type with no published line rate (v4's), GB/s per host: "DCN bandwidth is typically
around 2.5e10 bytes / second per host" (How to Scale Your Model, "How to Think About TPUs",
https://jax-ml.github.io/scaling-book/tpus/, jax-ml/scaling-book ``tpus.md``; no per-generation figure there)."""
DCN_SOURCE = "https://jax-ml.github.io/scaling-book/tpus/ (DCN ~2.5e10 bytes/s per host)"
LINE_RATE_SOURCE = "https://cloud.google.com/compute/docs/accelerator-optimized-machines (maximum network bandwidth)"
REACH_S = 30.0
"""Bound on one host reaching the coordinator's address before joining (a host that cannot is named)."""
ENV_INJECT_UNREACHABLE = "RAYTPU_SMOKE_INJECT_DCN_UNREACHABLE"
"""Fault injection: ``<slice index>``, that slice's hosts dial a port nothing listens on instead of the coordinator
(refused, as a slice cut off from the others would be), so the DCN check must name it."""
DCN_MIB = {"tpu": 256, "cpu": 1}
"""All-reduce size per device: as the ICI rows (:data:`raytpu.workloads.smoke.measure.TPU_SIZES`, ``CPU_SIZES``)."""
DCN_ITERS = {"tpu": 10, "cpu": 3}


def unreachable_from_env(slices: int, env: dict[str, str] | None = None) -> int | None:
    """The slice index :data:`ENV_INJECT_UNREACHABLE` cuts off; a malformed value is invalid input (exit 2)."""
    value = (dict(os.environ) if env is None else env).get(ENV_INJECT_UNREACHABLE, "")
    if not value:
        return None
    if not value.isdigit() or int(value) >= slices:
        raise invalid_value(ENV_INJECT_UNREACHABLE, value, "is not a slice index of the DCN check",
                            f"0..{slices - 1}")
    return int(value)


def _closed_port() -> tuple[socket.socket, int]:
    """A port bound but not listening (connections to it are refused while the socket is held)."""
    s = socket.socket()
    s.bind(("", 0))
    return s, int(s.getsockname()[1])


def reach(address: str, within_s: float) -> float:
    """Seconds until a TCP connection to ``host:port`` opened (retried: the coordinator may not listen yet).

    Raises:
        ConnectionError: not reached within ``within_s``, naming the address and the last error.
    """
    host, port = address.rsplit(":", 1)
    start = time.monotonic()
    last: OSError | None = None
    while time.monotonic() - start < within_s:
        try:
            with socket.create_connection((host, int(port)), timeout=min(5.0, within_s)):
                return time.monotonic() - start
        except OSError as exc:
            last = exc
            time.sleep(0.5)
    raise ConnectionError(f"cannot reach the DCN coordinator {address} within {within_s:g}s: {last}")


def dcn_host_check(coordinator: str, num_processes: int, process_id: int, hosts_per_slice: int,
                   megascale: dict[str, str], init_timeout_s: int, reach_s: float, cut_off: bool) -> dict[str, Any]:
    """Runs on one host of one slice: reach the coordinator, join every host of every slice, all-reduce over the
    ``slice`` axis (known answer, then timed). ``cut_off``: fault injection, dial a closed port instead."""
    from raytpu.core.specs.slices.multislice import MEGASCALE_ENV

    # before jax starts (libtpu reads MEGASCALE_* at start on TPU), over what the pod has, as Ray 2.60 Train does:
    # Source: ray.train.v2.jax.config._setup_jax_distributed_environment (_JAX_MULTISLICE_OVERRIDE_KEYS), Ray 2.60
    os.environ.update(megascale)
    started_with = {k: os.environ[k] for k in MEGASCALE_ENV if k in os.environ}
    held = None
    target = coordinator
    if cut_off:
        held, port = _closed_port()
        target = f"127.0.0.1:{port}"
    try:
        if process_id != 0 or cut_off:
            reach(target, reach_s)
    finally:
        if held is not None:
            held.close()
    import jax
    import numpy as np
    from jax import lax
    from jax.sharding import Mesh, NamedSharding
    from jax.sharding import PartitionSpec as P

    jax.distributed.initialize(coordinator, num_processes, process_id, initialization_timeout=init_timeout_s)
    try:
        devices, local = jax.devices(), jax.local_devices()
        slices = num_processes // hosts_per_slice
        grid = slice_rows(devices, slices, hosts_per_slice)
        mesh = Mesh(np.array(grid, dtype=object), ("slice", "ici"))
        spec = P("slice", "ici")
        platform = local[0].platform
        columns = max(DCN_MIB.get(platform, 1) * 2**20 // 4, 1)
        iters = DCN_ITERS.get(platform, 3)
        position = {d: (s, i) for s, row in enumerate(grid) for i, d in enumerate(row)}

        def operand(cols: int, fill: Any) -> Any:
            parts = [jax.device_put(np.full((1, cols), fill(d), np.float32), d) for d in local]
            return jax.make_array_from_single_device_arrays((slices, len(grid[0]) * cols), NamedSharding(mesh, spec),
                                                            parts)

        def body(_: Any, x: Any) -> Any:
            y = lax.psum(x, "slice")
            return y.at[0, 0].add(lax.axis_index("slice").astype(y.dtype))

        loop = jax.jit(jax.shard_map(lambda x, k: lax.fori_loop(0, k, body, x), mesh=mesh, in_specs=(spec, P()),
                                     out_specs=spec))
        once = jax.jit(jax.shard_map(lambda x: lax.psum(x, "slice"), mesh=mesh, in_specs=spec, out_specs=spec))
        answer = once(operand(1, lambda d: position[d][0] + 1.0))  # slice s contributes s + 1
        total = float(np.asarray(answer.addressable_data(0))[0, 0])
        big = operand(columns, lambda d: 0.0)
        jax.block_until_ready(loop(big, 1))  # compile and warm up
        best = float("inf")
        for _ in range(2):
            t = time.perf_counter()
            jax.block_until_ready(loop(big, iters))
            best = min(best, time.perf_counter() - t)
        per_device = 2 * (slices - 1) / slices * columns * 4 * iters / best / 1e9
        return {"process_id": process_id, "slice_id": int(megascale.get("MEGASCALE_SLICE_ID", "-1")),
                "megascale": started_with, "platform": platform, "devices": len(local), "psum": total,
                "host_gbps": per_device * len(local), "mib_per_device": columns * 4 / 2**20, "iters": iters,
                "emulated": os.environ.get(ENV_EMULATED) == "1"}
    finally:
        jax.distributed.shutdown()


def slice_rows(devices: list[Any], slices: int, hosts_per_slice: int) -> list[list[Any]]:
    """The devices as one row per slice, each in (process, id) order. On TPU by each device's ``slice_index`` (libtpu
    sets it from ``MEGASCALE_SLICE_ID``), as training's hybrid mesh groups them
    (``jax.experimental.mesh_utils.create_hybrid_device_mesh``): the TPU runtime assigns process indices itself,
    so ``process_index // hosts_per_slice`` may mix two slices and the DCN figure would be an ICI one. Elsewhere (CPU
    devices carry ``slice_index`` 0) by process: :func:`_run` makes host ``i`` of slice ``s`` process
    ``s x hosts_per_slice + i``. Raises RuntimeError when the rows are not ``slices`` of one length."""
    tpu = bool(devices) and devices[0].platform == "tpu"
    rows: dict[int, list[Any]] = {}
    for device in sorted(devices, key=lambda d: (d.process_index, d.id)):
        index = device.slice_index if tpu else device.process_index // hosts_per_slice
        rows.setdefault(int(index), []).append(device)
    counts = {s: len(row) for s, row in sorted(rows.items())}
    if sorted(rows) != list(range(slices)) or len(set(counts.values())) != 1:
        by = "slice_index" if tpu else f"process index // {hosts_per_slice}"
        raise RuntimeError(f"devices by {by}: {counts} (slice: devices), not {slices} slices of equal size")
    return [rows[s] for s in range(slices)]


@dataclass
class DcnRun:
    """What the hosts of the DCN check gave: results by (slice index, worker id), failures by the same key (the
    cause), and the hosts that gave nothing within the limit."""

    results: dict[tuple[int, int], dict[str, Any]]
    failed: dict[tuple[int, int], str]
    late: list[tuple[int, int]]


def cut_off_slices(run: DcnRun, slices: int) -> dict[int, str]:
    """The slices that cannot reach the others, with the reason: a slice whose hosts failed; when every slice
    failed, slice 0, whose host 0 serves the coordinator the others could not reach. Hosts that only ran late
    (waiting for a failed one) are not blamed; with no failure, a slice whose hosts all ran late is named."""
    by_slice: dict[int, list[str]] = {}
    for (s, w), cause in sorted(run.failed.items()):
        by_slice.setdefault(s, []).append(f"host {w}: {cause}")
    if by_slice and len(by_slice) == slices:
        return {0: "no other slice reached the coordinator on its host 0 (" + "; ".join(
            f"slice {s} {'; '.join(c)}" for s, c in sorted(by_slice.items())) + ")"}
    if by_slice:
        return {s: "; ".join(c) for s, c in by_slice.items()}
    late: dict[int, list[int]] = {}
    for s, w in run.late:
        late.setdefault(s, []).append(w)
    done = {s for s, _ in run.results}
    return {s: f"host(s) {', '.join(map(str, ws))} gave no result within the limit" for s, ws in late.items()
            if s not in done}


def _run(plan: SlicePlan, reservations: list[Reservation], limit_s: float, reach_s: float,
         cut_off: int | None) -> DcnRun:
    """Runs :func:`dcn_host_check` on every host of every reserved slice (bundle i of slice s = JAX process
    ``s x hosts + i``), waiting at most ``limit_s``; once a host failed, the others get ``reach_s`` more to fail
    too (a cut-off coordinator fails them all), then are stopped."""
    import ray
    from ray.util.tpu import get_tpu_coordinator_env_vars

    from raytpu.core.specs.slices.multislice import MEGASCALE_PORT
    from raytpu.workloads.smoke.host_process import start_hosts, stop_hosts

    keys = [(s, w) for s in range(len(reservations)) for w in range(plan.hosts)]
    actors = start_hosts([(reservations[s].placement_group, w) for s, w in keys], plan.chips_per_host)
    total = len(keys)
    pending: dict[Any, tuple[int, int]] = {}
    run = DcnRun({}, {}, [])
    try:
        ip, port = ray.get(actors[0].address.remote(), timeout=limit_s)
        for (s, w), actor in zip(keys, actors, strict=True):
            megascale = get_tpu_coordinator_env_vars(ip, len(reservations), s, str(MEGASCALE_PORT))
            ref = actor.run.remote(dcn_host_check, f"{ip}:{port}", total, s * plan.hosts + w, plan.hosts, megascale,
                                   int(limit_s), reach_s, s == cut_off)
            pending[ref] = (s, w)
        deadline = time.monotonic() + limit_s
        while pending and time.monotonic() < deadline:
            done, _ = ray.wait(list(pending), num_returns=1, timeout=max(deadline - time.monotonic(), 0.1))
            for ref in done:
                key = pending.pop(ref)
                try:
                    run.results[key] = ray.get(ref)
                except Exception as exc:
                    if not run.failed:
                        deadline = min(deadline, time.monotonic() + reach_s + 5)
                    run.failed[key] = cause_of(exc)
    finally:
        stop_hosts(actors, graceful=len(run.results) == len(actors))
    run.late.extend(pending.values())
    return run


def check_dcn(plan: SlicePlan, found: list[SliceInventory], options: SmokeOptions, span: int, limit_s: float,
              reach_s: float = REACH_S, cut_off: int | None = None) -> dict[str, DcnSection]:
    """The DCN check across the first ``span`` slices ``found`` (a run reserves any ``span`` whole slices of the
    kind; each is as good as the next): each slice's ``dcn`` section of its verdict, by slice name. Never raises:
    a failure is a failed check. ``cut_off``: fault injection, the slice index whose hosts dial a closed port."""
    slices = found[:span]
    names = [inv.name for inv in slices]
    source = line_rate(plan)[1]
    reservations: list[Reservation] = []
    try:
        if len(slices) < span:
            return _all_failed(names, "dcn_reach", f"not attempted: {len(slices)} {plan.ray_pod_type} slice(s) "
                               f"found, a multi-slice run spans {span}", source)
        incomplete = [inv.describe() for inv in slices if not inv.complete]
        if incomplete:
            return _all_failed(names, "dcn_reach", f"not attempted: incomplete slice(s) {', '.join(incomplete)}",
                               source)
        for inv in slices:
            reservations.append(reserve_slice(plan, inv.name, timeout_s=options.reserve_timeout_s))
        run = _run(plan, reservations, limit_s, reach_s, cut_off)
    except Exception as exc:  # a refused reservation, a bug: still each slice's section, naming the cause
        return _all_failed(names, "dcn_reach", f"the DCN check failed: {cause_of(exc)}", source)
    finally:
        for reservation in reservations:
            reservation.release()
    return judge_dcn(plan, names, run, options)


def attach(verdicts: list[Verdict], sections: dict[str, DcnSection], cut_off: int | None = None) -> None:
    """Adds each slice's DCN section to its verdict (additive key ``dcn``); a failed gating DCN check makes the
    slice unhealthy. ``cut_off`` (fault injection) is named in the ``injected`` key of the run's slices."""
    for verdict in verdicts:
        section = sections.get(verdict["slice"])
        if section is None:
            continue
        verdict["dcn"] = section
        if any(not c["ok"] for c in section["checks"] if not c.get("informational")):
            verdict["healthy"] = False
        if cut_off is not None:
            verdict.setdefault("injected", []).append(
                f"{ENV_INJECT_UNREACHABLE}: slice {section['slices'][cut_off]} dials a closed port, not the "
                "DCN coordinator")


def _all_failed(names: list[str], check: str, detail: str, source: str = DCN_SOURCE) -> dict[str, DcnSection]:
    return {n: {"slices": names, "checks": [new_check(check, False, detail)], "perf": [], "source": source}
            for n in names}


def line_rate(plan: SlicePlan) -> tuple[float, str]:
    """A host's DCN line rate in GB/s (its machine type's ``network_gbps`` / 8) and where it comes from; the
    scaling book's :data:`DCN_GBPS_PER_HOST` for a machine type without a published figure."""
    machine = generation(plan.generation).machine_type(plan.machine_type)
    if machine.network_gbps:
        return machine.network_gbps / 8, f"{machine.name}: {machine.network_gbps:g} Gbps, {LINE_RATE_SOURCE}"
    return DCN_GBPS_PER_HOST, DCN_SOURCE


def judge_dcn(plan: SlicePlan, names: list[str], run: DcnRun, options: SmokeOptions) -> dict[str, DcnSection]:
    """Each slice's DCN section from the hosts' results: reachability (the cut-off slice named), the cross-slice
    ``psum`` of known answer, and per-host bus bandwidth against the host's line rate (:func:`line_rate`). Pure."""
    cut = cut_off_slices(run, len(names))
    sections: dict[str, DcnSection] = {}
    results = list(run.results.values())
    platform = results[0]["platform"] if results else "?"
    emulated = any(r["emulated"] for r in results) or os.environ.get(ENV_EMULATED) == "1"
    mode = options.perf_thresholds
    enforce = mode == "on" or (mode == "auto" and platform == "tpu" and not emulated)
    where = f"{platform} devices" + (", emulated slices" if emulated else "")
    floors = generation(plan.generation).smoke
    floor = options.min_busbw_ratio or (floors.dcn_of_line_rate if floors else 0.5)
    reference, source = line_rate(plan)
    group = ", ".join(names)
    expected_sum = len(names) * (len(names) + 1) / 2
    for s, name in enumerate(names):
        checks: list[Check] = []
        perf: list[PerfRow] = []
        if s in cut:
            checks.append(new_check("dcn_reach", False, f"slice {name} cannot reach the other slices of the "
                                    f"multi-slice run ({group}): {cut[s]}"))
        elif cut:
            named = ", ".join(names[c] for c in sorted(cut))
            checks.append(new_check("dcn_reach", True, f"not this slice: slice(s) {named} cut off from the run, "
                                    "so no cross-slice all-reduce was measured"))
            checks.append(informational(new_check("dcn_allreduce_busbw_gbps", True,
                                                  f"informational: not measured, slice(s) {named} cut off")))
        else:
            mine = {w: r for (t, w), r in run.results.items() if t == s}
            checks.append(new_check("dcn_reach", True, f"every host of {len(names)} slices joined one "
                                    "jax.distributed run with its MEGASCALE_* env"))
            sums = [r["psum"] for r in mine.values()]
            checks.append(new_check("dcn_psum", all(abs(v - expected_sum) < 1e-3 for v in sums),
                                    f"psum over the slice axis (slice i gives i + 1) seen by {len(sums)} host(s)",
                                    sums[0] if sums else None, expected_sum))
            for w, r in sorted(mine.items()):
                value = r["host_gbps"]
                ok = value >= floor * reference
                perf.append({"metric": "dcn_allreduce_busbw", "worker_id": w, "device": None,
                             "value": rounded(value), "unit": "GB/s", "reference": reference,
                             "ratio": rounded(value / reference), "min_ratio": floor, "gates": enforce,
                             "peer_ratio": None, "min_peer_ratio": None, "ok": ok or not enforce})
            slowest = min(mine.items(), key=lambda kv: kv[1]["host_gbps"]) if mine else None
            if slowest is not None:
                w, r = slowest
                value = r["host_gbps"]
                detail = (f"slowest host {w}: {value:.4g} GB/s bus bandwidth per host ({r['mib_per_device']:g} MiB "
                          f"per device x {r['iters']} over the slice axis, {len(names)} slices) = "
                          f"{value / reference:.3g} of the {reference:g} GB/s line rate per host ({source}) "
                          f"(min {floor:g})")
                checks.append(gate(new_check("dcn_allreduce_busbw_gbps", value >= floor * reference, detail,
                                             rounded(value), rounded(floor * reference)), enforce, where))
        sections[name] = {"slices": names, "checks": checks, "perf": perf, "source": source}
        seen = [r["megascale"] for (t, _), r in sorted(run.results.items()) if t == s]
        if seen:
            sections[name]["megascale"] = seen[0]
    return sections
