"""``run_on: every_host``: a team's entrypoint run once on every TPU host of the run, all at once, as xpk's
``--command`` and SkyPilot's ``run:`` do, built on Ray: this driver (on the head) reserves the run's whole slices, pins
one actor per host (:mod:`raytpu.workloads.support.host_process`), starts the entrypoint on each with its rank and JAX's
coordinator, streams every host's lines prefixed ``[host N]``, ends every host when one fails and exits with the
first failing host's code (docs/FACTS.md#run-on-every-host)."""

from __future__ import annotations

import argparse
import os
import signal
import sys
import time
from dataclasses import dataclass
from typing import Any

from raytpu.core.common import errors
from raytpu.core.common.table import text_table
from raytpu.core.common.timeline import stamp, stamp_line
from raytpu.core.specs.spec import WorkloadSpec
from raytpu.workloads.support._entry import Parser, guarded

PROGRAM = "every_host"
RESERVE_TIMEOUT_S = 600.0
"""How long the driver waits for the run's whole slices (on GKE KubeRay starts it once the pods are ready)."""
STOP_GRACE_S = 10.0
"""How long a host's program has between SIGTERM and SIGKILL when the run ends early (another host failed, cancel)."""
RAY_SET_ENV = ("OMP_NUM_THREADS",)
"""What Ray sets in an actor from its ``num_cpus`` (1 here) and a host's program must not inherit, unless the
workload's ``env`` sets it. Source: Ray 2.60 ``ray._private.utils.set_omp_num_threads_if_unset``."""
POLL_S = 0.25
POLL_TIMEOUT_S = 60.0
"""A host actor not answering a poll for this long is treated as lost."""


@dataclass
class Host:
    """One host of the run: its actor, where it is, and what it did."""

    actor: Any
    slice_index: int
    slice_name: str
    worker: int
    rank: int = -1
    ip: str = ""
    node_id: str = ""
    port: int = 0
    code: int | None = None
    ran_s: float | None = None
    lines: int = 0
    lost: str | None = None


def say(line: str) -> None:
    print(f"{PROGRAM}: {line}", file=sys.stderr, flush=True)


def exit_code(code: int) -> int:
    """A shell's exit status for a process's return code (killed by signal N: 128 + N)."""
    return 128 - code if code < 0 else code


def host_env(host: Host, count: int, coordinator: str) -> dict[str, str]:
    """What every host's program gets beyond its node's environment and the job's: its rank, the run's process count
    and slice, JAX's coordinator, and on an emulated host the JAX shim first on ``PYTHONPATH`` (the notice file's
    path is the host's own: :meth:`raytpu.workloads.support.host_process.HostProcess.start`)."""
    from raytpu.workloads.support.host_process import EMULATION_FOLDER

    env = {"RAYTPU_HOST_RANK": str(host.rank), "RAYTPU_HOST_COUNT": str(count),
           "RAYTPU_SLICE_INDEX": str(host.slice_index), "RAYTPU_SLICE_NAME": host.slice_name,
           "JAX_COORDINATOR_ADDRESS": coordinator, "PYTHONUNBUFFERED": os.environ.get("PYTHONUNBUFFERED", "1")}
    if os.environ.get("RAYTPU_EMULATED") == "1":
        env["PYTHONPATH"] = os.pathsep.join(p for p in (EMULATION_FOLDER, os.environ.get("PYTHONPATH")) if p)
    return env


def reserve(work: WorkloadSpec, timeout_s: float) -> list[Any]:
    """The run's whole slices, each held (one bundle per host, bundle i on worker i); released on failure."""
    from raytpu.workloads.support.slices import reserve_slice

    held: list[Any] = []
    try:
        for index in range(work.slices_per_run):
            say(f"reserving slice {index + 1} of {work.slices_per_run}: {work.plan.generation} {work.plan.topology}, "
                f"{work.plan.hosts} host(s) x {work.plan.chips_per_host} chips")
            held.append(reserve_slice(work.plan, timeout_s=timeout_s, progress=say))
    except BaseException:
        for reservation in held:
            reservation.release()
        raise
    return held


def place(work: WorkloadSpec, held: list[Any]) -> list[Host]:
    """One actor per host, pinned to its bundle, holding the host's chips; where each landed and its JAX rank."""
    import ray
    from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

    from raytpu.workloads.support.host_process import HostProcess

    plan = work.plan
    remote = ray.remote(HostProcess)
    hosts = [Host(remote.options(num_cpus=1, resources={"TPU": plan.chips_per_host}, max_restarts=0,
                                 scheduling_strategy=PlacementGroupSchedulingStrategy(
                                     placement_group=reservation.placement_group,
                                     placement_group_bundle_index=worker)).remote(),
                  slice_index=index, slice_name=reservation.slice_name, worker=worker)
             for index, reservation in enumerate(held) for worker in range(plan.hosts)]
    found = ray.get([h.actor.identity.remote(h.slice_index, plan.hosts) for h in hosts], timeout=RESERVE_TIMEOUT_S)
    for host, where in zip(hosts, found, strict=True):
        host.rank, host.ip, host.node_id, host.port = where["rank"], where["ip"], where["node_id"], where["port"]
    ranks = sorted(h.rank for h in hosts)
    if ranks != list(range(len(hosts))):  # JAX would wait for a process that never comes
        raise errors.RuntimeFailure(f"{PROGRAM}: the hosts' JAX process ids are {ranks}, not 0..{len(hosts) - 1} "
                                    "(TPU_WORKER_ID / MEGASCALE_SLICE_ID of the pods disagree with the slices held)",
                                    "the slices' pods as GKE's TPU webhook labels them; `raytpu doctor --stack`")
    return sorted(hosts, key=lambda h: h.rank)


def follow(hosts: list[Host]) -> Host | None:
    """Streams every host's lines until all have ended or one fails (then stops the others); the first failing
    host, or None when all exited 0."""
    import ray

    live, failed = list(hosts), None
    while live:
        refs = [h.actor.poll.remote() for h in live]
        for host, ref in zip(list(live), refs, strict=True):
            try:
                seen = ray.get(ref, timeout=POLL_TIMEOUT_S)
            except Exception as exc:  # the actor's node died (preempted, OOM-killed): the host is lost
                host.lost = f"{type(exc).__name__}: {str(exc).strip().splitlines()[0][:200] if str(exc) else ''}"
                host.code = 1
                live.remove(host)
                failed = failed or host
                say(f"host {host.rank} ({host.slice_name} worker {host.worker}) lost: {host.lost}")
                continue
            show(host, seen)
            if seen["code"] is not None:
                host.code, host.ran_s = seen["code"], seen["ran_s"]
                live.remove(host)
                if seen["code"] != 0 and failed is None:
                    failed = host
        if failed is not None and live:
            say(f"host {failed.rank} exited with code {exit_code(failed.code or 1)}; stopping the other "
                f"{len(live)} host(s)")
            stop(live)
            for host in live:
                with_output(host)
            live = []
        if live:
            time.sleep(POLL_S)
    return failed


def show(host: Host, seen: dict[str, Any]) -> None:
    """A host's new lines on stdout, each prefixed with its rank."""
    if seen["dropped"]:
        print(f"[host {host.rank}] ... {seen['dropped']} line(s) dropped (more than the driver could read)",
              flush=True)
    for line in seen["lines"]:
        print(f"[host {host.rank}] {line}")
    host.lines += len(seen["lines"])
    sys.stdout.flush()


def with_output(host: Host) -> None:
    """A stopped host's last lines and exit code."""
    import ray

    try:
        seen = ray.get(host.actor.poll.remote(), timeout=POLL_TIMEOUT_S)
    except Exception:  # lost meanwhile: nothing more to show
        return
    show(host, seen)
    host.code, host.ran_s = seen["code"], seen["ran_s"]


def stop(hosts: list[Host], grace_s: float = STOP_GRACE_S) -> None:
    """SIGTERM to every host's program at once, SIGKILL after ``grace_s``; bounded, never raising."""
    import ray

    refs = []
    for host in hosts:
        try:
            refs.append(host.actor.stop.remote(grace_s))
        except Exception:  # a dead actor's handle: nothing to stop there
            continue
    if refs:
        ray.wait(refs, num_returns=len(refs), timeout=grace_s + 15)


def watch_notices(hosts: list[Host], told: set[str]) -> None:
    """A host of the run draining for a preemption (GKE's SIGTERM to its pod): every host's program gets the notice
    (the file ``RAYTPU_PREEMPTION_NOTICE`` names, then SIGTERM), once, as the kit's trainer sees a drain.
    Source: Ray 2.60 ``ray._private.state.GlobalState.get_draining_nodes`` (docs/FACTS.md#preemption-workloads)."""
    from ray._private.state import state

    try:
        draining = state.get_draining_nodes()
    except Exception:  # the GCS busy: looked at again on the next poll
        return
    ours = {h.node_id: h for h in hosts}
    for node_id, deadline_ms in draining.items():
        if node_id in ours and node_id not in told:
            told.add(node_id)
            host = ours[node_id]
            notice = {"node_id": node_id, "host": host.rank, "slice": host.slice_name, "worker": host.worker,
                      "deadline_ms": deadline_ms, "seen_wall": round(time.time(), 3)}
            say(f"preemption notice: host {host.rank} ({host.slice_name} worker {host.worker}) is draining; every "
                "host's program gets SIGTERM")
            for each in hosts:
                try:
                    each.actor.notice.remote(notice)
                except Exception:  # a lost host's actor: the others still hear it
                    continue


def summary_table(hosts: list[Host]) -> str:
    """Every host: where it ran, how it ended, how long it ran, how many lines it wrote."""
    rows = [[str(h.rank), h.slice_name, str(h.worker), h.ip,
             "lost" if h.lost else "-" if h.code is None else str(exit_code(h.code)),
             "-" if h.ran_s is None else f"{h.ran_s:.1f}s", str(h.lines)] for h in hosts]
    return "\n".join(text_table([["host", "slice", "worker", "ip", "exit", "ran", "lines"], *rows]))


def run(args: argparse.Namespace, work: WorkloadSpec) -> int:
    """Reserves, places, starts, follows, stops: the exit code of the run (0, or the first failing host's)."""
    import ray

    from raytpu.workloads.support._entry import connect_quiet_driver, end_quiet_driver
    from raytpu.workloads.support.slice_training import stamp_joined

    if not work.on_every_host or work.entrypoint is None:
        raise errors.invalid_value("RAYTPU_WORKLOAD", work.name, "is not a job with run_on: every_host",
                                   "a kind: job workload with run_on: every_host")
    connected = connect_quiet_driver(args.address)
    held: list[Any] = []
    hosts: list[Host] = []
    signal.signal(signal.SIGTERM, _stopped)  # Ray's stop_job, a deadline, Ctrl-C on `submit --local`
    try:
        stamp_joined(work.plan)
        held = reserve(work, args.reserve_timeout_s)
        hosts = place(work, held)
        print(stamp_line(stamp("reserved", f"{len(held)} whole {work.plan.ray_pod_type} slice(s) held and one "
                                           f"actor placed on each of their {len(hosts)} host(s)")), flush=True)
        ip = hosts[0].ip
        coordinator = f"[{ip}]:{hosts[0].port}" if ":" in ip else f"{ip}:{hosts[0].port}"
        say(f"starting `{work.entrypoint}` on {len(hosts)} host(s); JAX coordinator {coordinator}")
        drop = tuple(name for name in RAY_SET_ENV if name not in (work.env or {}))
        ray.get([h.actor.start.remote(work.entrypoint, host_env(h, len(hosts), coordinator), drop)
                 for h in hosts], timeout=POLL_TIMEOUT_S)
        print(stamp_line(stamp("trainer_started", f"the entrypoint started on every host ({len(hosts)} processes)")),
              flush=True)
        told: set[str] = set()
        failed = follow_with_notices(hosts, told)
    except KeyboardInterrupt:
        say("stopped: ending every host's program")
        stop(hosts, grace_s=2.0)
        raise
    finally:
        for reservation in held:
            reservation.release()
    print(summary_table(hosts), file=sys.stderr, flush=True)
    end_quiet_driver(connected)
    if failed is None:
        say(f"every host exited 0 ({len(hosts)} host(s))")
        return 0
    code = exit_code(failed.code or 1) or 1
    failure = errors.RuntimeFailure(f"{PROGRAM}: host {failed.rank} ({failed.slice_name} worker {failed.worker}) "
                                    + (f"was lost ({failed.lost})" if failed.lost else f"exited with code {code}")
                                    + "; the other hosts were stopped",
                                    "the host's lines above ([host N]); `raytpu runs logs RUN` keeps them")
    failure.exit_code = code  # the first failing host's, as xpk and SkyPilot exit
    raise failure


def follow_with_notices(hosts: list[Host], told: set[str]) -> Host | None:
    """:func:`follow`, looking for preemption notices between polls."""
    import threading

    done = threading.Event()

    def look() -> None:
        while not done.wait(1.0):
            watch_notices(hosts, told)

    watcher = threading.Thread(target=look, daemon=True)
    watcher.start()
    try:
        return follow(hosts)
    finally:
        done.set()
        watcher.join(timeout=5)


def _stopped(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt(f"stopped by signal {signum}")


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(prog=f"python -m raytpu.workloads.{PROGRAM}",
                                     description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--reserve-timeout-s", type=float, default=RESERVE_TIMEOUT_S,
                        help="how long to wait for the run's whole slices")
    parser.add_argument("--address", default=None, help="Ray address (default: RAY_ADDRESS, else auto)")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return guarded(lambda: run(args, WorkloadSpec.from_env()))


if __name__ == "__main__":
    sys.exit(main())
