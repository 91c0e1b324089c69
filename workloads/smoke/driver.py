"""What the driver does for each slice: check its hosts' labels, reserve it whole, run the host check on every host
(:func:`raytpu.workloads.smoke.measure.host_check`, in one actor per host: :mod:`.host_process`) within a time
limit, and judge the results into a verdict."""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from typing import Any

from raytpu.core.common.report import Check, HostRow, PerfRow, Verdict
from raytpu.core.common.timeline import Stamp, stamp, stamp_line
from raytpu.core.specs.runtime import compile_cache
from raytpu.core.tpu.plan import (
    RAY_ACCELERATOR_LABEL,
    RAY_POD_TYPE_LABEL,
    RAY_SLICE_LABEL,
    RAY_TOPOLOGY_LABEL,
    RAY_WORKER_LABEL,
    SlicePlan,
)
from raytpu.workloads.smoke.faults import Faults
from raytpu.workloads.smoke.host_process import start_hosts, stop_hosts
from raytpu.workloads.smoke.judge import judge
from raytpu.workloads.smoke.measure import host_check
from raytpu.workloads.smoke.options import SmokeOptions
from raytpu.workloads.smoke.verdict import cause_of, informational, new_check, slice_verdict
from raytpu.workloads.support.slices import RESERVE_TIMEOUT_S, Reservation, SliceInventory, reserve_slice

CHECK_BASE_S = 180.0
"""The check's time limit for a slice of a few hosts: import jax, libtpu start-up, a handful of compiles and the
measurements. No download: the job image carries ``jax[tpu]`` and libtpu (``raytpu/images/job``), so no run installs
them. Kept at the fixed limit this check had when it also installed them (a margin, not re-measured on TPU)."""
CHECK_PER_HOST_S = 2.0
"""What each more host adds to the limit: every host must import, start libtpu and join ``jax.distributed`` before
anything runs, so the slowest of N hosts sets the pace; 2 s per host is an estimate, not a measurement."""


def check_limit_s(hosts: int, active_deadline_s: float | None = None,
                  reserve_timeout_s: float = RESERVE_TIMEOUT_S) -> float:
    """The default ``--check-timeout-s``: ``180 + 2 x hosts`` seconds, capped so that its two waits (hosts joining,
    then the host checks) and the reservation fit in the RayJob's ``activeDeadlineSeconds`` with a minute spare."""
    limit = CHECK_BASE_S + CHECK_PER_HOST_S * hosts
    if active_deadline_s:
        limit = min(limit, max((active_deadline_s - reserve_timeout_s) / 2 - 60, CHECK_BASE_S))
    return limit


def _limit(options: SmokeOptions, plan: SlicePlan) -> float:
    """The bound on the host checks: ``--check-timeout-s``, else :func:`check_limit_s` of the plan's hosts."""
    return float(options.check_timeout_s or check_limit_s(plan.hosts))


def check_slice(plan: SlicePlan, inv: SliceInventory, options: SmokeOptions,
                faults: Faults | None = None, compile_budget_s: float | None = None) -> Verdict:
    """Checks one slice; returns its verdict (:class:`raytpu.core.common.report.Verdict`). Never raises: a failure at
    any stage is a failed check naming its cause. With ``compile_budget_s``, a host compiling for longer fails the
    slice."""
    faults = faults or Faults()
    t0 = time.monotonic()
    checks: list[Check] = []
    hosts: dict[int, HostRow] = {}
    perf: list[PerfRow] = []
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
    checks.append(new_check("hosts_present", inv.complete,
                            f"{len(inv.nodes)}/{plan.hosts} hosts" + (f"; missing worker id(s) {missing}"
                                                                      if missing else ""),
                            len(inv.nodes), plan.hosts))
    label_problems = sum(len(h["problems"]) for w, h in hosts.items() if w in inv.nodes)
    checks.append(new_check("labels", label_problems == 0,
                            "ray.io/tpu-topology, tpu-pod-type, accelerator-type and TPU resources match the plan"
                            if not label_problems else f"{label_problems} label/resource mismatch(es); see hosts"))

    stamps: list[Stamp] = []

    def verdict() -> Verdict:
        made = slice_verdict(plan, inv.name, len(inv.nodes), checks, hosts, t0, perf, faults.describe())
        if stamps:
            made["stamps"] = stamps
        return made

    if not inv.complete:
        checks.append(new_check("reservation", False, f"not attempted: slice {inv.name} is incomplete "
                                f"(missing worker id(s) {missing}); a reservation would wait forever"))
        return verdict()
    stage = "reservation"
    try:
        try:
            reservation = reserve_slice(plan, inv.name, timeout_s=options.reserve_timeout_s)
        except Exception as exc:  # a timeout, Ray refusing the shape (ValueError), ...: the cause is the verdict
            checks.append(new_check("reservation", False, str(exc) if isinstance(exc, TimeoutError) else
                                    f"could not reserve slice {inv.name}: {cause_of(exc)}", None,
                                    options.reserve_timeout_s))
            return verdict()
        checks.append(new_check("reservation", True, f"whole slice reserved in {reservation.latency_s:.2f}s",
                                reservation.latency_s, options.reserve_timeout_s))
        _stamp(stamps, "reserved", f"slice {inv.name}: {plan.hosts} bundle(s) of {plan.chips_per_host} TPU placed "
                                   f"in {reservation.latency_s:.2f}s")
        stage = "host_checks"
        try:
            results = _run_hosts(plan, reservation, options, faults, checks, hosts,
                                 lambda worker: _stamp(stamps, "first_step", f"first host check result (host "
                                                                             f"{worker} of slice {inv.name})"))
        finally:
            reservation.release()
        stage = "judge"
        if results is not None:
            perf.extend(judge(plan, options, results, checks, hosts))
            compiled = compile_check(results, compile_budget_s)
            if compiled is not None:
                check, wall = compiled
                checks.append(check)
                _stamp(stamps, "compiled", check["detail"], wall)
    except Exception as exc:  # a bug or an unforeseen failure still ends in a verdict naming it
        checks.append(new_check(stage, False, f"the check failed: {cause_of(exc)}"))
    return verdict()


def compile_check(results: dict[int, dict[str, Any]], budget_s: float | None) -> tuple[Check, float | None] | None:
    """The ``compile`` check (the slowest host's XLA compile seconds, every host's cache hits and misses) and when
    that host's last compile ended; informational without a budget. None when no host reported its compile."""
    reported = [r["compile"] for r in results.values() if r.get("compile")]
    if not reported:
        return None
    slowest = max(reported, key=lambda c: c["s"])
    hits, misses = sum(c["hits"] for c in reported), sum(c["misses"] for c in reported)
    detail = compile_cache.describe(slowest["s"], hits, misses, "in the host checks (slowest host)")
    if budget_s is None:
        return informational(new_check("compile", True, detail, slowest["s"])), slowest.get("wall")
    over = compile_cache.over_budget(slowest["s"], budget_s)
    detail += f"; over compile_budget_s {budget_s:g}s" if over else f"; within compile_budget_s {budget_s:g}s"
    return new_check("compile", not over, detail, slowest["s"], budget_s), slowest.get("wall")


def _stamp(stamps: list[Stamp], phase: str, detail: str, wall: float | None = None) -> None:
    """Stamps ``phase`` now (or at ``wall``): kept for the verdict (``stamps``) and printed at once
    (:mod:`raytpu.core.common.timeline`), so a run that dies before its verdict still shows how far it got."""
    made = stamp(phase, detail, wall=wall)
    stamps.append(made)
    print(stamp_line(made), flush=True)


def _run_hosts(plan: SlicePlan, reservation: Reservation, options: SmokeOptions, faults: Faults,
               checks: list[Check], hosts: dict[int, HostRow],
               first_result: Callable[[int], None] = lambda worker: None) -> dict[int, dict[str, Any]] | None:
    """Runs the host check on every bundle; the results by worker id, or None after naming the host(s) that
    raised or gave nothing within the limit (the others are stopped: they would wait for the missing peer).
    ``first_result`` is called with the worker id of the first host whose check returned."""
    import ray

    limit = _limit(options, plan)
    pg = reservation.placement_group
    # the job's compilation cache reaches the host checks (Ray starts their worker processes, not this driver)
    runtime_env = {"env_vars": compile_cache.forwarded(os.environ)}
    actors = start_hosts([(pg, worker) for worker in range(plan.hosts)], plan.chips_per_host, runtime_env)
    pending: dict[Any, int] = {}
    results: dict[int, dict[str, Any]] = {}
    failed: dict[int, str] = {}
    try:
        # bundle i sits on the host labelled ray.io/tpu-worker-id=i (bundle_selectors): JAX process i is TPU worker i
        coordinator = ray.get(actors[0].address.remote(), timeout=limit)
        for worker, actor in enumerate(actors):
            ref = actor.run.remote(host_check, f"{coordinator[0]}:{coordinator[1]}", plan.hosts, worker, int(limit),
                                   options.bandwidth_mib, faults.for_host(worker), plan.topology)
            pending[ref] = worker
        deadline = time.monotonic() + limit
        while pending and not failed and time.monotonic() < deadline:
            done, _ = ray.wait(list(pending), num_returns=1, timeout=max(deadline - time.monotonic(), 0.1))
            for ref in done:
                worker = pending.pop(ref)
                try:
                    results[worker] = ray.get(ref)
                    if len(results) == 1:
                        first_result(worker)
                except Exception as exc:
                    failed[worker] = cause_of(exc)
    finally:
        stop_hosts(actors, graceful=len(results) == len(actors))
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
    checks.append(new_check("host_checks", False, "; ".join(parts), None, limit))
    return None
