"""The smoke program's command line: flags into :class:`~raytpu.workloads.smoke.options.SmokeOptions`, every slice
of the workload spec checked, one verdict line each, and the exit code (``python -m raytpu.workloads.smoke``)."""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import fields, replace
from typing import get_args

from raytpu.core.common.errors import invalid_value
from raytpu.core.common.report import Verdict, all_healthy, format_verdict_line, log_entry
from raytpu.core.common.timeline import stamp, stamp_line
from raytpu.core.specs.spec import WorkloadSpec
from raytpu.core.tpu.plan import RAY_SLICE_LABEL, RAY_WORKER_LABEL
from raytpu.workloads import smoke as program
from raytpu.workloads.smoke import dcn
from raytpu.workloads.smoke.driver import check_limit_s, check_slice
from raytpu.workloads.smoke.faults import Faults
from raytpu.workloads.smoke.options import MIN_HBM_RATIO, MIN_PEER_RATIO, PerfThresholds, SmokeOptions
from raytpu.workloads.smoke.verdict import cause_of, failed_verdict
from raytpu.workloads.support._entry import Parser, connect_quiet_driver, end_quiet_driver, guarded
from raytpu.workloads.support.slices import RESERVE_TIMEOUT_S, SliceInventory, wait_for_hosts


def build_parser() -> argparse.ArgumentParser:
    """The workload's per-run flags (its slice comes from ``RAYTPU_WORKLOAD``)."""
    parser = Parser(prog="python -m raytpu.workloads.smoke",
                                     description=(program.__doc__ or "").split("\n")[0])
    parser.add_argument("--slice-name", default=None, help="check only this slice")
    parser.add_argument("--reserve-timeout-s", type=float, default=RESERVE_TIMEOUT_S)
    parser.add_argument("--check-timeout-s", type=float, default=None,
                        help="bound on waiting for late hosts and on the host checks (default: 180 s + 2 s per host, "
                             "capped to fit the RayJob's deadline)")
    parser.add_argument("--bandwidth-mib", type=int, default=None,
                        help="all-reduce size per device (default: 256 on TPU, 1 on CPU devices)")
    parser.add_argument("--perf-thresholds", choices=get_args(PerfThresholds), default="auto",
                        help="auto: enforce the catalog floors on real TPU only, informational when emulated")
    parser.add_argument("--min-matmul-ratio", type=float, default=None,
                        help="per-device matmul floor over the catalog peak (default: the generation's)")
    parser.add_argument("--min-hbm-bw-ratio", type=float, default=None,
                        help="per-device copy bandwidth floor over the catalog's HBM GB/s (default: the generation's)")
    parser.add_argument("--min-busbw-ratio", type=float, default=None,
                        help="all-reduce bus bandwidth floor (whole slice and each mesh axis) over the figure the "
                             "slice's topology should reach, raytpu.core.tpu.catalog.expected_busbw (default: the "
                             "generation's, 0.5)")
    parser.add_argument("--min-peer-ratio", type=float, default=MIN_PEER_RATIO,
                        help=f"every device against its slice's median, on any hardware (default {MIN_PEER_RATIO})")
    parser.add_argument("--min-hbm-ratio", type=float, default=MIN_HBM_RATIO)
    parser.add_argument("--address", default=None, help="Ray address (default: RAY_ADDRESS, else auto)")
    parser.add_argument("--dcn-slices", type=int, default=None,
                        help="slices one multi-slice run spans: above 1, also all-reduce across that many slices "
                             "over DCN (raytpu.workloads.smoke.dcn)")
    return parser


def options_from(args: argparse.Namespace) -> SmokeOptions:
    """The typed options of parsed flags (:func:`build_parser`: one flag per field)."""
    return SmokeOptions(**{f.name: getattr(args, f.name) for f in fields(SmokeOptions)})


def parse_options(argv: list[str] | None = None) -> SmokeOptions:
    """The options of a command line (``sys.argv[1:]`` when None)."""
    return options_from(build_parser().parse_args(argv))


def run(options: SmokeOptions) -> list[Verdict]:
    """Checks the slices; returns their verdicts (also printed, one line each). Past reading its spec, every
    failure becomes a verdict naming the cause."""
    work = WorkloadSpec.from_env()
    plan = work.plan
    faults = Faults.from_env()
    span = 1 if options.dcn_slices is None else options.dcn_slices
    if span > 1 and options.slice_name:
        raise invalid_value("--dcn-slices", span, f"spans several slices while --slice-name {options.slice_name} "
                            "checks one", "--dcn-slices without --slice-name, or --slice-name alone")
    if not 1 <= span <= work.slices_spanned:
        raise invalid_value("--dcn-slices", span, "is not a number of slices of this check",
                            f"1..{work.slices_spanned} (the slices of {plan.ray_pod_type} it checks)")
    cut_off = dcn.unreachable_from_env(span) if span > 1 else None
    limits = work.kind.limits
    limit_s = options.check_timeout_s
    if limit_s is None:
        limit_s = check_limit_s(plan.hosts, limits.active_deadline_s if limits else None, options.reserve_timeout_s)
        options = replace(options, check_timeout_s=limit_s)
    verdicts: list[Verdict] = []
    connected_here = False
    try:
        connected_here = connect_quiet_driver(options.address)
        slices = wait_for_hosts(plan, work.slices_spanned, options.slice_name, limit_s)
        joined = [inv for inv in slices.values() if inv.complete]
        if joined and len(joined) == len(slices):
            made = stamp("ray_joined", "; ".join(
                f"slice {inv.name}: {len(inv.nodes)}/{plan.hosts} Ray node(s) with {RAY_SLICE_LABEL}={inv.name}, "
                f"{RAY_WORKER_LABEL} 0..{plan.hosts - 1}" for inv in joined))
            print(stamp_line(made), flush=True)
        for inv in slices.values():
            verdicts.append(check_slice(plan, inv, options, faults, work.compile_budget_s))
        for i in range(len(verdicts), 1 if options.slice_name else work.slices_spanned):
            inv = SliceInventory(f"<missing {plan.ray_pod_type} slice {i + 1} of {work.slices_spanned}>",
                                 hosts_expected=plan.hosts)
            verdicts.append(check_slice(plan, inv, options, faults, work.compile_budget_s))
        if span > 1:
            dcn.attach(verdicts, dcn.check_dcn(plan, list(slices.values()), options, span, limit_s, cut_off=cut_off),
                       cut_off)
    except Exception as exc:  # e.g. no Ray cluster to reach: still a verdict, naming the cause
        name = options.slice_name or f"<{plan.ray_pod_type} slices>"
        verdicts.append(failed_verdict(plan, name, "smoke", f"the check failed: {cause_of(exc)}"))
    for v in verdicts:
        print(format_verdict_line(v), flush=True)
        print(json.dumps(log_entry(v), sort_keys=True), flush=True)  # Cloud Logging's structured line
    end_quiet_driver(connected_here)
    return verdicts


def main(argv: list[str] | None = None) -> int:
    """Entry point: 0 when every slice is healthy, 1 otherwise, 2 for an impossible slice."""
    options = parse_options(argv)

    def body() -> int:
        verdicts = run(options)
        healthy = all_healthy(verdicts)
        summary = ", ".join(f"{v['slice']}: {'healthy' if v['healthy'] else 'UNHEALTHY'}" for v in verdicts)
        print(f"smoke: {summary}", file=sys.stderr)
        return 0 if healthy else 1

    return guarded(body)
