"""Benchmark of the emulated slice's start beside one bare ``ray start --head``, quiet and with one core kept busy.

    .venv/bin/python bench/local_start.py [--repeats 5] [--generation v6e --topology 4x4] [--slots 0 1 2 4] [--json]

Each repeat, in each condition (``quiet``, then ``busy``: another process spinning on one core, as on a user's
busy laptop), measures side by side: one bare single-node ``ray start --head`` (Ray's defaults, its own temp dir
and ports, torn down by PID), then :func:`raytpu.local.slice.startup.start` of head + every host of the slice for each
``--slots`` value (0: the kit's default, :func:`raytpu.local.slice.startup.start_slots`). Prints p50/p95 per condition
and the ratio of each emulated start's p50 to the bare node's p50 measured in the same run, plus how many nodes had to
be started again (a slow agent, a lost port race).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import resource
import secrets
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from raytpu.core.tpu.plan import SlicePlan, plan_slice
from raytpu.local.slice import procs, startup, state
from raytpu.local.slice.launch import free_port
from raytpu.local.slice.procs import signal_group

BUSY = [sys.executable, "-c", "while True: pass"]


def bare_start(cli: tuple[str, ...] = (), client_server: bool = True) -> tuple[float, float]:
    """(wall seconds, CPU seconds of the CLI process) for one bare ``ray start --head`` to return 0, run as ``cli``
    (default the ``ray`` script beside this interpreter); the node is killed by PID afterwards. ``client_server``:
    a free port for Ray's Client server (Ray's CLI would take a fixed 10001); False as the kit's launcher starts
    none (:data:`raytpu.local.slice.launch.RAY_CLI`)."""
    temp = f"{state.TMP_PREFIX}b{secrets.token_hex(3)}"
    env = os.environ | {state.ENV_CLUSTER: temp, "RAY_USAGE_STATS_ENABLED": "0"}
    args = [*(cli or (str(Path(sys.executable).parent / "ray"),)), "start", "--head", "--disable-usage-stats",
            "--temp-dir", temp, "--port", str(free_port()), "--dashboard-port", str(free_port()),
            "--dashboard-agent-listen-port", "0",
            *(("--ray-client-server-port", str(free_port())) if client_server else ())]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)  # the node's daemons are never our reaped children
    started = time.monotonic()
    done = subprocess.Popen(args, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    _, err = done.communicate(timeout=300)
    took = time.monotonic() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    # the node's daemons stay in the group its ray start led (killpg also reaches one forked after a listing), then
    # whatever carries the tag: an agent seen left behind after a SIGKILL by listing alone
    signal_group(done.pid, signal.SIGKILL)
    for pid in procs.tagged_processes(temp):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)
    subprocess.run(["rm", "-rf", temp], check=False)
    if done.returncode != 0:
        raise SystemExit(f"bare ray start failed:\n{err[-2000:]}")
    return took, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def emulated_start(plan: SlicePlan, slots: int) -> tuple[float, int]:
    """Seconds for head + every host to register, and how many nodes were started again on the way."""
    with tempfile.TemporaryDirectory(prefix="raytpu-bench-") as directory:
        lines: list[str] = []
        started = time.monotonic()
        try:
            startup.start(plan, 1, directory, progress=lines.append, slots=slots or None)
            return time.monotonic() - started, sum("starting it again" in line for line in lines)
        finally:
            procs.stop(directory)


def p95(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(0.95 * (len(ordered) - 1)))]


def run(plan: SlicePlan, repeats: int, slot_choices: list[int]) -> dict[str, Any]:
    """Every condition's figures: bare and emulated starts (p50, p95, each run), restarts and ratios."""
    results: dict[str, Any] = {}
    for condition in ("quiet", "busy"):
        spinner = subprocess.Popen(BUSY) if condition == "busy" else None
        try:
            bare: list[float] = []
            emulated: dict[int, list[float]] = {s: [] for s in slot_choices}
            restarts: dict[int, int] = dict.fromkeys(slot_choices, 0)
            for i in range(repeats):
                bare.append(bare_start()[0])
                for slots in slot_choices:
                    took, again = emulated_start(plan, slots)
                    emulated[slots].append(took)
                    restarts[slots] += again
                print(f"{condition} {i + 1}/{repeats}: bare {bare[-1]:.1f}s, "
                      + ", ".join(f"slots {s or 'default'} {v[-1]:.1f}s" for s, v in emulated.items()),
                      file=sys.stderr, flush=True)
        finally:
            if spinner is not None:
                spinner.kill()
                spinner.wait()
        bare_p50 = statistics.median(bare)
        results[condition] = {
            "bare": {"p50": bare_p50, "p95": p95(bare), "runs": bare},
            "emulated": {str(s or "default"): {"p50": statistics.median(v), "p95": p95(v), "runs": v,
                                               "restarted_nodes": restarts[s],
                                               "ratio_p50_to_bare": statistics.median(v) / bare_p50}
                         for s, v in emulated.items()}}
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--generation", default="v6e")
    parser.add_argument("--topology", default="4x4")
    parser.add_argument("--slots", type=int, nargs="+", default=[0],
                        help="hosts started at once; 0 is the kit's default (raytpu.local.slice.startup.start_slots)")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    os.environ.setdefault("RAY_AUTH_TOKEN", secrets.token_hex(32))  # token auth as on GKE; one token per process
    plan = plan_slice(args.generation, args.topology)
    results = run(plan, args.repeats, args.slots)
    if args.json:
        print(json.dumps({"plan": plan.to_json(), "cpus": len(os.sched_getaffinity(0)), "default_slots":
                          startup.start_slots(), "results": results}, indent=2))
        return 0
    print(f"emulated {plan.generation} {plan.topology} (head + {plan.hosts} hosts) vs one bare `ray start --head`, "
          f"{args.repeats} repeats, {len(os.sched_getaffinity(0))} CPUs, default slots {startup.start_slots()}")
    print(f"{'condition':<9} {'start':<22} {'p50':>7} {'p95':>7} {'vs bare':>8} {'restarts':>9}")
    for condition, figures in results.items():
        bare = figures["bare"]
        print(f"{condition:<9} {'bare ray start --head':<22} {bare['p50']:>6.1f}s {bare['p95']:>6.1f}s "
              f"{'1.00x':>8} {'-':>9}")
        for slots, em in figures["emulated"].items():
            print(f"{condition:<9} {'emulated, slots ' + slots:<22} {em['p50']:>6.1f}s {em['p95']:>6.1f}s "
                  f"{em['ratio_p50_to_bare']:>7.2f}x {em['restarted_nodes']:>9}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
