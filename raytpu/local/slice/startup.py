"""Bringing a local cluster up within one deadline: the head, then the hosts a few at a time, each failed start told by
its cause (:mod:`raytpu.local.slice.diagnose`) and started again when a restart can fix it."""

from __future__ import annotations

import os
import secrets
import time
from collections.abc import Callable
from pathlib import Path

from raytpu.core.common.errors import RuntimeFailure, invalid_value
from raytpu.core.common.interrupt import interrupts_held, raise_missed
from raytpu.core.tpu.plan import SlicePlan
from raytpu.local.slice import diagnose, launch, procs
from raytpu.local.slice.connection import wait_for_nodes
from raytpu.local.slice.emulation import slice_names
from raytpu.local.slice.state import (
    LocalCluster,
    NodeProc,
    Progress,
    auth_token_file,
    full_disk,
    run_dir,
    temp_prefix,
    unwritable,
)

START_RETRIES = 2
"""How many times a node whose start failed for a cause a restart can fix is started again."""
HEAD = ("", -1)
"""The head's key among the nodes :func:`_start_nodes` starts; a host's is ``(slice name, worker id)``."""


def start_slots() -> int:
    """How many hosts start at once at first: one per core this process may run on (an agent needs about 3 CPU-s within
    Ray's 15 s port-file wait); :func:`_start_nodes` drops to one at a time once a host is slow. Source:
    docs/FACTS.md#local-start-limits (``bench/local_start.py --slots 1 2 4``)."""
    return max(1, len(os.sched_getaffinity(0)))


SLOW_START_S = diagnose.AGENT_PORT_WAIT_S * 2 / 3
"""A host that took longer than this to start came close to Ray's 15 s agent wait: the rest start one at a time."""


def start_timeout_s(nodes: int) -> float:
    """The default bound on starting ``nodes`` nodes: each alone, then again after a failure (Ray's limits: 15 s for the
    agents, 30 s to register)."""
    return 60.0 + 2 * diagnose.REGISTER_WAIT_S * nodes


def _key(node: NodeProc) -> tuple[str, int]:
    return node.slice_name, node.worker_id


def _what(key: tuple[str, int]) -> str:
    return "head" if key == HEAD else f"{key[0]} worker {key[1]}"


def _phase(node: NodeProc) -> str:
    """Where a node still starting is, from its files: what a deadline message names."""
    if not diagnose.raylet_logs(node.temp):
        return "`ray start` still starting its processes"
    return "its raylet waits for its agents or for the GCS"


def _discard(cluster: LocalCluster, node: NodeProc) -> None:
    """Kills a failed start's leftovers (a raylet, agents) and forgets it; its logs stay."""
    procs.sigkill(procs.cluster_group(node.pid, cluster.temp_dir))
    procs.reap(node.pid)
    cluster.nodes.remove(node)
    cluster.save()


def _launch(cluster: LocalCluster, key: tuple[str, int]) -> NodeProc:
    if key == HEAD:
        return launch.start_head(cluster)
    return launch.start_host(cluster, cluster.slice_plan, *key)


def _start_nodes(cluster: LocalCluster, keys: list[tuple[str, int]], slots: int, deadline: float,
                 progress: Progress, t0: float) -> None:
    """Starts the nodes ``keys`` at most ``slots`` at a time; returns once each has registered. Port races are retried
    on new ports, a slow agent or registration alone (``slots`` 1); anything else, or a node out of retries, raises at
    once with its cause (:func:`raytpu.local.slice.diagnose.diagnose`), remedy and log."""
    queue = list(keys)
    running: list[NodeProc] = []
    launched: dict[int, float] = {}
    tries = dict.fromkeys(keys, 0)
    head = next((n for n in cluster.nodes if n.role == "head"), None)
    while queue or running:
        while queue and len(running) < slots:
            running.append(_launch(cluster, queue.pop(0)))
            launched[running[-1].pid] = time.monotonic()
        for node in list(running):
            code = procs.exit_code(node.pid)
            if code == 0:
                running.remove(node)
                took = time.monotonic() - launched[node.pid]
                progress(f"  {_what(_key(node))} up ({time.monotonic() - t0:.1f}s)")
                if slots > 1 and took > SLOW_START_S:
                    slots = 1
                    progress(f"  a host took {took:.0f}s to start (Ray aborts one whose agents need more than "
                             f"{diagnose.AGENT_PORT_WAIT_S}s): starting the rest one at a time")
                continue
            failure = (diagnose.agent_abort(node.temp) if code is None
                       else diagnose.diagnose(Path(node.log).read_text(errors="replace"), node.temp))
            if failure is None:
                continue
            running.remove(node)
            _discard(cluster, node)
            key = _key(node)
            tries[key] += 1
            if not failure.retry or tries[key] > START_RETRIES:
                raise RuntimeFailure(f"local.{failure.message(_what(key))} (log {node.log}; raylet log under "
                                     f"{node.temp})")
            progress(f"  {failure.message(_what(key))}")
            if key == HEAD and failure.retry == "new ports":
                cluster.address = f"127.0.0.1:{launch.free_port()}"
                cluster.dashboard = f"http://127.0.0.1:{launch.free_port()}"
            if failure.retry == "alone":
                slots = 1
            queue.insert(0, key)
        if head is not None and running and not procs.node_alive(cluster, head):
            raise RuntimeFailure(f"local: {diagnose.Cause.GCS.value}: the head stopped while hosts were starting "
                                 f"(log {head.log}); `raytpu local down`, then `raytpu local up`")
        if (queue or running) and time.monotonic() > deadline:
            late = [f"{_what(_key(n))} ({_phase(n)}, log {n.log})" for n in running]
            late += [f"{_what(key)} (not started)" for key in queue]
            raise RuntimeFailure(f"local: not up within {deadline - t0:.0f}s: " + "; ".join(late),
                                 "a larger --timeout-s, or fewer emulated hosts")
        if queue or running:
            time.sleep(0.2)


def refuse_running(where: Path) -> LocalCluster | None:
    """The cluster recorded in ``where`` when none of its nodes runs (leftovers :func:`start` clears); InvalidInput
    naming ``--dir`` (exit 2) when one does: no command stops a cluster it did not start."""
    existing = LocalCluster.load(where)
    if existing is not None and any(procs.node_alive(existing, n) for n in existing.nodes):
        raise invalid_value("--dir", str(where), f"already running a cluster (address {existing.address}, started by "
                            f"`{existing.started_by or 'raytpu local up'}`)",
                            f"another run directory, or `raytpu local down --dir {where}` first")
    return existing


def start(plan: SlicePlan, num_slices: int = 1, directory: str | Path | None = None,
          progress: Progress | None = None, timeout_s: float | None = None,
          prefix: str = "raytpu-local", slots: int | None = None, owner: str = "",
          log_monitor: bool = True) -> LocalCluster:
    """Starts a head plus ``num_slices`` emulated slices of ``plan``; stops everything on failure. ``directory``
    defaults to :func:`raytpu.local.slice.state.run_dir`, ``timeout_s`` (whole start) to :func:`start_timeout_s`,
    ``slots`` (hosts at once) to :func:`start_slots`; ``progress`` gets a line per milestone; slices are named
    ``<prefix>-<pod type>-<i>``; ``owner`` is recorded as :attr:`LocalCluster.started_by`; ``log_monitor`` False starts
    no Ray log monitor (for drivers that all connect with ``log_to_driver=False``). InvalidInput: ``num_slices``
    < 1, or a cluster already runs there; RuntimeFailure: a node failed to start."""
    if num_slices < 1:
        raise invalid_value("slices", num_slices, "must be at least 1", "1, 2, ...")
    say = progress or (lambda _line: None)
    where = run_dir(directory)
    existing = refuse_running(where)
    temp_dir = f"{temp_prefix()}{secrets.token_hex(3)}"  # a bad prefix is refused before anything is made
    if existing is not None:
        procs.stop(where)
    try:
        where.mkdir(parents=True, exist_ok=True)
        cluster = LocalCluster(run_dir=str(where), temp_dir=temp_dir, address=f"127.0.0.1:{launch.free_port()}",
                               plan=plan.to_json(), slices=slice_names(plan, num_slices, prefix),
                               dashboard=f"http://127.0.0.1:{launch.free_port()}",
                               auth_token_path=str(auth_token_file(where)), started_by=owner,
                               log_monitor=log_monitor)
        cluster.save()
    except OSError as exc:  # a full or read-only file system: one line, nothing half-written (issue 48)
        if not full_disk(exc):
            raise
        raise unwritable(where, exc) from exc
    hosts = [(name, w) for name in cluster.slices for w in range(plan.hosts)]
    slots = slots or start_slots()
    t0 = time.monotonic()
    deadline = t0 + (timeout_s or start_timeout_s(1 + len(hosts)))
    try:
        say(f"starting Ray head at {cluster.address} (run dir {where})")
        _start_nodes(cluster, [HEAD], 1, deadline, say, t0)
        say(f"starting {num_slices} emulated {plan.generation} {plan.topology} slice(s): "
            f"{plan.hosts} host(s) x {plan.chips_per_host} chips ({plan.machine_type}) each, {slots} at a time")
        _start_nodes(cluster, hosts, slots, deadline, say, t0)
        wait_for_nodes(cluster, 1 + len(hosts), max(deadline - time.monotonic(), 5.0))
        raise_missed()  # a Ctrl-C Python dropped (inside Ray's connection, a finalizer) stops the start here
        cluster.started_s = round(time.monotonic() - t0, 2)
        cluster.save()
        say(f"cluster ready in {cluster.started_s:.1f}s: {len(hosts)} host node(s), address {cluster.address}")
        return cluster
    except OSError as exc:  # a node's log or the state file on a full file system
        _stop_started(where)
        if not full_disk(exc):
            raise
        raise unwritable(where, exc) from exc
    except BaseException:
        _stop_started(where)
        raise


def _stop_started(where: Path) -> None:
    """Stops every process a failed or interrupted start launched and clears its state, whole: a second Ctrl-C (or
    SIGTERM) meanwhile waits until it is done (cut short, it left a head running and a state file whose `local status`
    failed; issue 68)."""
    with interrupts_held():
        procs.stop(where)


def add_host(cluster: LocalCluster, slice_name: str, worker_id: int, timeout_s: float | None = None) -> NodeProc:
    """Starts (or restarts: a replacement) one host of ``slice_name``; returns once it is up."""
    t0 = time.monotonic()
    _start_nodes(cluster, [(slice_name, worker_id)], 1, t0 + (timeout_s or start_timeout_s(1)), lambda _l: None, t0)
    return next(n for n in cluster.hosts(slice_name) if n.worker_id == worker_id)


def announce_started(cluster: LocalCluster, plan: SlicePlan, say: Callable[[str], None]) -> None:
    """Says :func:`started_lines` on ``say`` (the command's stdout); a Ctrl-C before they are out stops what the start
    launched too, whole (``local up`` must not return leaving it; issue 68)."""
    try:
        say("\n".join(started_lines(cluster, plan)))
    except KeyboardInterrupt:
        _stop_started(Path(cluster.run_dir))
        raise


def started_lines(cluster: LocalCluster, plan: SlicePlan) -> list[str]:
    """What ``raytpu local up`` prints once the slices are up: the variables Ray's own CLI needs (``export`` them),
    the slices and what to run next."""
    return [*(f"{name}={value}" for name, value in cluster.ray_cli_env().items()),
            f"slices: {', '.join(cluster.slices)} ({plan.generation} {plan.topology}, {plan.hosts} host(s) "
            f"x {plan.chips_per_host} chips)",
            "next: raytpu local status | raytpu local smoke | raytpu local down"]
