"""Judging a slice: the hosts' measurements against the plan and the catalog's floors, as checks, host problems and
``perf`` rows of the verdict. Pure: unit tests feed it made-up results.
"""

from __future__ import annotations

import os
import statistics
from typing import Any

from raytpu.core.common.report import Check, HostRow, PerfRow
from raytpu.core.tpu.catalog import expected_busbw, generation
from raytpu.core.tpu.ici import ICI_AXIS_NAMES, ici_for_dims
from raytpu.core.tpu.plan import SlicePlan
from raytpu.workloads.smoke.measure import ENV_EMULATED
from raytpu.workloads.smoke.options import SmokeOptions
from raytpu.workloads.smoke.verdict import gate, informational, new_check, rounded


def judge(plan: SlicePlan, options: SmokeOptions, results: dict[int, dict[str, Any]],
          checks: list[Check], hosts: dict[int, HostRow]) -> list[PerfRow]:
    """Adds the device, identity and performance checks for the hosts' ``results`` (by worker id) to ``checks``
    and ``hosts``; returns the verdict's ``perf`` rows. Pure: unit tests feed it made-up results."""
    gen = generation(plan.generation)
    floors = gen.smoke
    assert floors is not None, f"catalog generation {gen.name} has no smoke floors"
    ordered = [results[w] for w in sorted(results)]
    platform = ordered[0]["platform"]
    emulated = any(r["env"].get(ENV_EMULATED) == "1" for r in ordered) or os.environ.get(ENV_EMULATED) == "1"
    mode = options.perf_thresholds
    enforce = mode == "on" or (mode == "auto" and platform == "tpu" and not emulated)
    where = f"{platform} devices" + (", emulated slice" if emulated else "")

    for worker, result in results.items():
        hosts[worker]["devices"] = result["devices"]
        if result["devices"] < plan.chips_per_host or result["devices"] % plan.chips_per_host:
            hosts[worker]["problems"].append(f"{result['devices']} devices, expected {plan.chips_per_host} per host")
    per_host = [r["devices"] for r in ordered]
    checks.append(new_check("devices_per_host", all(d >= plan.chips_per_host for d in per_host),
                            f"{per_host} on {where}", min(per_host), plan.chips_per_host))
    total = ordered[0]["devices_total"]
    checks.append(new_check("devices_total", total == sum(per_host) and total >= plan.chips,
                            f"jax.device_count() = {total}", total, plan.chips))
    expected_sum = total * (total + 1) / 2
    sums = [r["psum"] for r in ordered]
    checks.append(new_check("psum", all(abs(s - expected_sum) < 1e-3 for s in sums),
                            f"cross-host all-reduce of 1..{total} seen by {len(sums)} host(s)", sums[0], expected_sum))
    _identity_checks(plan, results, checks, hosts, platform, emulated)

    per_chip = max(min(per_host) // plan.chips_per_host, 1)  # JAX devices per chip: 2 on tpu7x, else 1
    peer = options.min_peer_ratio
    perf: list[PerfRow] = []
    for metric, unit, key, reference, floor in (
            ("matmul_tflops", "TFLOP/s", "matmul_tflops", gen.peak_bf16_tflops_per_chip / per_chip,
             options.min_matmul_ratio or floors.matmul_of_peak),
            ("hbm_bandwidth", "GB/s", "hbm_gbps", gen.hbm_gbps_per_chip / per_chip,
             options.min_hbm_bw_ratio or floors.hbm_of_spec)):
        values = {(w, i): v for w, r in results.items() for i, v in enumerate(r[key])}
        perf += _device_checks(metric, unit, values, reference, floor, peer, enforce, where, checks, hosts)

    perf += _interconnect_checks(plan, options, ordered, per_chip, enforce, where, checks)
    hbm = [b for r in ordered for b in r["hbm_bytes"] if b]
    hbm_ratio = min(hbm) * per_chip / 2**30 / plan.hbm_gib_per_chip if hbm else None
    detail = (f"{min(hbm) * per_chip / 2**30:.1f} GiB per chip (least of {len(hbm)} devices) vs catalog "
              f"{plan.hbm_gib_per_chip:g}" if hbm
              else f"the device reports no memory limit (catalog {plan.hbm_gib_per_chip:g} GiB)")
    checks.append(gate(new_check("hbm_ratio", hbm_ratio is not None and hbm_ratio >= options.min_hbm_ratio, detail,
                                 rounded(hbm_ratio), options.min_hbm_ratio), enforce, where))
    return perf


def _identity_checks(plan: SlicePlan, results: dict[int, dict[str, Any]], checks: list[Check],
                     hosts: dict[int, HostRow], platform: str, emulated: bool) -> None:
    """What the hardware and GKE say independently of the ``TPU_*`` env Ray's labels come from: the device kind
    libtpu reports, and the webhook's pod hostnames as DNS serves them."""
    gen = generation(plan.generation)
    kinds = {w: r.get("device_kind", "?") for w, r in results.items()}
    if platform == "tpu":
        for worker, found in kinds.items():
            if found not in gen.jax_device_kinds:
                hosts[worker]["problems"].append(f"JAX reports {found!r} devices, not {plan.generation}")
        checks.append(new_check("device_kind", all(k in gen.jax_device_kinds for k in kinds.values()),
                                f"JAX reports {sorted(set(kinds.values()))}; {plan.generation} is "
                                f"{list(gen.jax_device_kinds)}"))
    else:
        checks.append(informational(new_check("device_kind", True, f"informational ({platform} devices): JAX reports "
                                              f"{sorted(set(kinds.values()))}; on TPU it must be one of "
                                              f"{list(gen.jax_device_kinds)}")))
    if plan.single_host:
        return
    if emulated:
        checks.append(informational(new_check("worker_hostnames", True, "informational (emulated slice): "
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
    checks.append(new_check("worker_hostnames", not found,
                            "every pod's hostname is its TPU_WORKER_HOSTNAMES entry and its neighbour's entry "
                            "resolves to the neighbour's node" if not found
                            else f"{found} hostname/DNS mismatch(es); see hosts"))


def _device_checks(metric: str, unit: str, values: dict[tuple[int, int], float], reference: float, floor: float,
                   peer: float, enforce: bool, where: str, checks: list[Check],
                   hosts: dict[int, HostRow]) -> list[PerfRow]:
    """Gates every device on ``metric``: against ``floor`` x the catalog's per-device ``reference`` (where
    ``enforce``) and against ``peer`` x the slice's median (everywhere). Adds ``<metric>_ratio`` and
    ``<metric>_peer_ratio`` (both name the slowest device), a problem on each bad device's host, and returns one
    ``perf`` row per device."""
    median = statistics.median(values.values())
    rows: list[PerfRow] = []
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
        rows.append({"metric": metric, "worker_id": worker, "device": index, "value": rounded(value), "unit": unit,
                     "reference": rounded(reference), "ratio": rounded(ratio), "min_ratio": floor, "gates": enforce,
                     "peer_ratio": rounded(peer_ratio), "min_peer_ratio": peer, "ok": not problems})
    (w, i), slowest = min(values.items(), key=lambda kv: kv[1])
    ratio = slowest / reference
    checks.append(gate(new_check(f"{metric}_ratio", ratio >= floor,
                                 f"slowest of {len(values)} devices: host {w} device {i}, {slowest:.4g} {unit} vs the "
                                 f"catalog's {reference:.4g} per device", rounded(ratio), floor), enforce, where))
    checks.append(new_check(f"{metric}_peer_ratio", not below,
                            (f"{'; '.join(below)} the slice median {median:.4g} {unit}" if below else
                             f"slowest: host {w} device {i} at {slowest / median if median else 1:.2f}x the slice "
                             f"median {median:.4g} {unit}"), rounded(slowest / median if median else 1.0), peer))
    return rows


def _interconnect_checks(plan: SlicePlan, options: SmokeOptions, ordered: list[dict[str, Any]], per_chip: int,
                         enforce: bool, where: str, checks: list[Check]) -> list[PerfRow]:
    """The all-reduce bus bandwidth per chip, of the whole slice and over each mesh axis alone, against what the
    slice's topology should reach (:func:`raytpu.core.tpu.catalog.expected_busbw`: links' one-way rate, axes,
    wraparound), at ``busbw_of_expected`` (about half) of it; and the small message latency (reported only). A weak axis
    is named by its own check (``axis y: 12 GB/s of 90 expected``). Returns their ``perf`` rows."""
    floors = generation(plan.generation).smoke
    assert floors is not None
    sizes = ordered[0].get("sizes") or {}
    floor = options.min_busbw_ratio or floors.busbw_of_expected
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
        checks.append(gate(new_check("allreduce_axes", False, f"the per-axis all-reduces failed: {'; '.join(errors)}"),
                           enforce, where))
    elif axes is None:
        checks.append(informational(new_check("allreduce_axes", True, "informational: the devices do not form the "
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
    checks.append(informational(new_check("allreduce_latency_us", True,
                                          f"informational: 4-byte all-reduce over {ordered[0]['devices_total']} "
                                          f"devices, {sizes.get('latency_iters')} in one loop, slowest host",
                                          rounded(max(latency)) if latency else None)))
    rows.append({"metric": "allreduce_latency", "worker_id": None, "device": None,
                 "value": rounded(max(latency)) if latency else None, "unit": "us", "reference": None, "ratio": None,
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


def _busbw_check(checks: list[Check], name: str, metric: str, value: float | None,
                 reference: float | None, floor: float, enforce: bool, where: str, detail: str,
                 no_value: str) -> PerfRow:
    """One bus bandwidth check (``value`` GB/s per chip against ``floor`` x ``reference``) and its ``perf`` row;
    informational without a value or a reference, or where thresholds do not apply (``enforce`` False)."""
    if value is None:
        check = informational(new_check(name, True, f"informational: {no_value}"))
    elif reference is None:
        check = informational(new_check(name, True, f"informational: {value:.4g} GB/s per chip; the catalog has no "
                                        "ICI link rate for this generation", rounded(value)))
    else:
        text = detail.format(value=f"{value:.4g} GB/s", reference=f"{reference:.4g} GB/s",
                             ratio=f"{value / reference:.3g}")
        check = gate(new_check(name, value >= floor * reference, f"{text} (min {floor:g})", rounded(value),
                               rounded(floor * reference)), enforce, where)
    checks.append(check)
    gated = bool(value is not None and reference and enforce)
    return {"metric": metric, "worker_id": None, "device": None, "value": rounded(value), "unit": "GB/s",
            "reference": rounded(reference), "ratio": rounded(value / reference) if value is not None and reference
            else None, "min_ratio": floor if reference else None, "gates": gated, "peer_ratio": None,
            "min_peer_ratio": None, "ok": check["ok"] or not gated}
