"""The pieces of a smoke verdict (:class:`raytpu.core.common.report.Verdict`, whose keys are the CLI contract): checks,
gating, and the verdict of a slice."""

from __future__ import annotations

import time

from raytpu.core.common.report import Check, HostRow, PerfRow, Verdict
from raytpu.core.tpu.plan import SlicePlan


def new_check(name: str, ok: bool, detail: str, value: float | None = None,
              expected: float | None = None) -> Check:
    """One check; ``ok`` False fails the slice."""
    return {"name": name, "ok": bool(ok), "detail": detail, "value": value, "expected": expected}


def informational(check: Check) -> Check:
    """Marks ``check`` reported only: it passes whatever it found."""
    check["informational"] = True
    check["ok"] = True
    return check


def gate(check: Check, enforce: bool, where: str) -> Check:
    """``check`` as it is where thresholds apply (``enforce``), else informational, its detail saying whether it
    was met on ``where`` (``cpu devices, emulated slice``)."""
    if enforce:
        return check
    met = "met" if check["ok"] else "not met"
    check["detail"] = f"informational ({where}; thresholds apply on TPU; {met} here): {check['detail']}"
    return informational(check)


def rounded(value: float | None) -> float | None:
    """``value`` to 4 significant digits (what the verdict carries)."""
    return None if value is None else float(f"{value:.4g}")


def cause_of(exc: BaseException) -> str:
    """``Type: first line`` of an exception; a Ray task error is named by the error its task raised, a dead actor
    (a host's check process) also by its worker's exit detail. Source: Ray 2.60 ``ray.exceptions.ActorDiedError``
    (the context's ``error_message`` on a later line)."""
    cause = getattr(exc, "cause", None)
    exc = cause if isinstance(cause, BaseException) else exc
    lines = str(exc).strip().splitlines()
    detail = next((line.strip()[:300] for line in lines[1:] if "exit detail" in line.lower()), "")
    named = f"{type(exc).__name__}: {lines[0][:300] if lines else ''}".rstrip(": ")
    return f"{named} ({detail})" if detail else named


def slice_verdict(plan: SlicePlan, name: str, hosts_found: int, checks: list[Check], hosts: dict[int, HostRow],
                  started: float, perf: list[PerfRow] | None = None, injected: list[str] | None = None) -> Verdict:
    """The verdict of slice ``name``: healthy when every gating check passed and no host has a problem (each
    host's ``ok`` is set from its problems here); ``started`` is the check's ``time.monotonic()`` start."""
    for host in hosts.values():
        host["ok"] = not host["problems"]
    gating = [c for c in checks if not c.get("informational")]
    verdict: Verdict = {
        "slice": name, "healthy": all(c["ok"] for c in gating) and all(h["ok"] for h in hosts.values()),
        "generation": plan.generation, "topology": plan.topology, "pod_type": plan.ray_pod_type,
        "hosts_expected": plan.hosts, "hosts_found": hosts_found,
        "duration_s": round(time.monotonic() - started, 3), "checks": checks,
        "hosts": [hosts[w] for w in sorted(hosts)], "perf": perf or []}
    if injected:
        verdict["injected"] = injected
    return verdict


def failed_verdict(plan: SlicePlan, name: str, check: str, detail: str) -> Verdict:
    """The verdict of a check that could not go on: one failed ``check`` naming the cause."""
    return slice_verdict(plan, name, 0, [new_check(check, False, detail)], {}, time.monotonic())
