"""The processes of a local cluster: finding them, telling whether a node runs, stopping and killing them.

Every node leads its own process group (its daemons stay in it); every process carries ``RAYTPU_LOCAL_CLUSTER``
(:data:`raytpu.local.slice.state.ENV_CLUSTER`). A group is signalled only while a member names the cluster's temp dir, a
leftover only when it carries the tag or names that dir: nothing the kit did not start. psutil at import."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
from collections.abc import Iterable, Iterator
from pathlib import Path

import psutil

from raytpu.core.common.errors import RuntimeFailure
from raytpu.local.slice.state import ENV_CLUSTER, STATE_FILE, TMP_PREFIX, LocalCluster, NodeProc, run_dir

_STARTERS: dict[int, subprocess.Popen[bytes]] = {}
"""``ray start`` processes of this Python process, by PID (to collect their exit codes)."""


def track(proc: subprocess.Popen[bytes]) -> None:
    """Remembers a ``ray start`` this process launched, so its exit code can be read and it can be reaped."""
    _STARTERS[proc.pid] = proc


def live() -> Iterator[psutil.Process]:
    """Every live (non-zombie) process but this one, with its environment-free attributes cached."""
    me = os.getpid()
    for proc in psutil.process_iter(["pid", "status"]):
        if proc.info["pid"] != me and proc.info["status"] != psutil.STATUS_ZOMBIE:
            yield proc


def alive(pid: int) -> bool:
    """The process exists and is not a zombie."""
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def exit_code(pid: int) -> int | None:
    """A ``ray start``'s exit code: None while it runs; 0 for one this process did not launch once it is gone."""
    proc = _STARTERS.get(pid)
    return proc.poll() if proc is not None else (None if alive(pid) else 0)


def group(pgid: int) -> list[psutil.Process]:
    """Live (non-zombie) members of process group ``pgid``: a node's daemons outlive its ``ray start`` leader
    (reparented), and psutil has no process-group query."""
    members = []
    for proc in live():
        with contextlib.suppress(OSError):
            if os.getpgid(proc.pid) == pgid:
                members.append(proc)
    return members


def cmdline(proc: psutil.Process) -> str:
    try:
        return " ".join(proc.cmdline())
    except psutil.Error:
        return ""


def environ(proc: psutil.Process) -> dict[str, str]:
    try:
        return proc.environ()
    except psutil.Error:
        return {}


def cluster_group(pgid: int, temp_dir: str) -> list[psutil.Process]:
    """Members of ``pgid`` while a member names ``temp_dir`` (a recycled group id is never signalled)."""
    members = group(pgid)
    return members if any(temp_dir in cmdline(p) for p in members) else []


def node_alive(cluster: LocalCluster, node: NodeProc) -> bool:
    """The node's process group still runs (its raylet and friends), and it was not killed on purpose."""
    return not node.killed and bool(cluster_group(node.pid, cluster.temp_dir))


def reap(pid: int) -> None:
    """Collects a finished ``ray start`` of this process, so it leaves no zombie."""
    proc = _STARTERS.get(pid)
    if proc is not None:
        proc.poll()
        return
    with contextlib.suppress(ChildProcessError):
        os.waitpid(pid, os.WNOHANG)


def sigkill(procs: Iterable[psutil.Process]) -> None:
    """SIGKILL each of ``procs`` that still exists (psutil refuses a PID reused since it was found)."""
    for proc in procs:
        with contextlib.suppress(psutil.Error):
            proc.kill()


def signal_group(pgid: int, sig: int) -> None:
    """Signals a whole process group (psutil signals one process at a time; ``killpg`` also reaches a member
    forked since the group was listed)."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)


def _tagged(prefix: str) -> Iterator[tuple[psutil.Process, str]]:
    """Live processes whose ``RAYTPU_LOCAL_CLUSTER`` tag starts with ``prefix``, with that tag."""
    for proc in live():
        tag = environ(proc).get(ENV_CLUSTER, "")
        if tag.startswith(prefix):
            yield proc, tag


def tagged_processes(prefix: str = TMP_PREFIX) -> dict[int, str]:
    """Live processes carrying ``RAYTPU_LOCAL_CLUSTER=<prefix>...`` (any local cluster's): pid -> temp dir."""
    return {proc.pid: tag for proc, tag in _tagged(prefix)}


def processes_under(temp_dir: str) -> list[psutil.Process]:
    """Processes of this cluster: tagged with its temp dir, or naming it on their command line."""
    found = [proc for proc, tag in _tagged(temp_dir) if tag == temp_dir]
    tagged = {proc.pid for proc in found}
    return found + [proc for proc in live() if proc.pid not in tagged and temp_dir in cmdline(proc)]


def host_processes(cluster: LocalCluster, node: NodeProc) -> list[psutil.Process]:
    """Processes of one emulated host: tagged with the cluster and carrying the host's TPU_NAME/TPU_WORKER_ID."""
    want = {"TPU_NAME": node.slice_name, "TPU_WORKER_ID": str(node.worker_id)}
    return [proc for proc in processes_under(cluster.temp_dir)
            if all(environ(proc).get(k) == v for k, v in want.items())]


def kill_host(cluster: LocalCluster, slice_name: str, worker_id: int) -> NodeProc:
    """SIGKILLs one host's whole process group (a host failure) and records it as killed."""
    for node in cluster.hosts(slice_name):
        if node.worker_id == worker_id:
            workers = host_processes(cluster, node)  # Ray workers run in their own sessions
            if cluster_group(node.pid, cluster.temp_dir):
                signal_group(node.pid, signal.SIGKILL)
            sigkill(workers)
            reap(node.pid)
            node.killed = True
            cluster.save()
            return node
    raise RuntimeFailure(f"local: no live host {slice_name} worker {worker_id}")


def stop(directory: str | Path | None = None, grace_s: float = 1.0) -> int:
    """Stops the cluster recorded in the run directory and removes its state; returns processes signalled. SIGTERM to
    its live groups, SIGKILL after ``grace_s``, then SIGKILL to leftovers naming its temp dir. Safe when nothing
    runs."""
    where = run_dir(directory)
    cluster = LocalCluster.load(where)
    if cluster is None:
        return 0
    groups = {n.pid: members for n in cluster.nodes if (members := cluster_group(n.pid, cluster.temp_dir))}
    for pgid in reversed(groups):  # hosts first, head last
        signal_group(pgid, signal.SIGTERM)
    psutil.wait_procs([proc for members in groups.values() for proc in members], timeout=grace_s)
    for pgid in groups:
        if group(pgid):
            signal_group(pgid, signal.SIGKILL)
    stragglers = processes_under(cluster.temp_dir) if cluster.temp_dir.startswith(TMP_PREFIX) else []
    sigkill(stragglers)
    for node in cluster.nodes:
        reap(node.pid)
    shutil.rmtree(cluster.temp_dir, ignore_errors=True)
    from raytpu.workloads import local_secrets

    local_secrets.remove_kept(str(where))  # a served app's secrets, read until now
    (where / STATE_FILE).unlink(missing_ok=True)
    return len(groups) + len(stragglers)
