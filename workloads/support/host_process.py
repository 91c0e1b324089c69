"""One TPU host's share of a ``run_on: every_host`` job: the team's entrypoint as a child process of a Ray actor
pinned to the host, its output kept for the driver (:mod:`raytpu.workloads.every_host`) to collect, and stopped with
its whole process group. Standard library only, and never JAX: the team's process owns the host's TPU (libtpu opens
a host's chips from one process)."""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import signal
import socket
import subprocess
import tempfile
import threading
import time
from collections import deque
from typing import Any

from raytpu.workloads.support.job_worker_env import SERVING_ONLY_ENV

MAX_LINE_CHARS = 8000
"""A longer line is cut (a progress bar without newlines, a dumped array): the driver's log stays readable."""
MAX_KEPT_LINES = 20000
"""Lines kept between two polls; past it the oldest go, counted (the driver says how many)."""
EMULATION_FOLDER = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "jax_emulation")
"""Put first on an emulated host's ``PYTHONPATH``: its ``sitecustomize`` lets ``jax.distributed.initialize()`` find
the emulated slice as JAX finds a GKE TPU slice (:mod:`raytpu.workloads.jax_emulation.sitecustomize`)."""
NOTICE_FILE = "RAYTPU_PREEMPTION_NOTICE"
"""Names the file (JSON) a host's program finds the preemption notice in, written just before its SIGTERM."""
NOTICE_KILL_S = 30.0
"""SIGKILL this long after a notice that names no deadline (GKE's default spot notice window)."""
_PR_SET_PDEATHSIG = 1


_PRCTL = ctypes.CDLL(None, use_errno=True).prctl
"""Looked up here, not in the forked child: a ``dlopen`` after fork in a multi-threaded Ray worker can deadlock."""


def _die_with_parent() -> None:
    """In the child before exec: SIGKILL when the actor's process dies (a driver killed before it could stop us).
    Source: Linux prctl(2) PR_SET_PDEATHSIG."""
    with contextlib.suppress(Exception):
        _PRCTL(_PR_SET_PDEATHSIG, signal.SIGKILL)


def free_port() -> int:
    """A TCP port free on this host now (JAX's coordinator binds it on the host of process 0)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("", 0))
        return int(probe.getsockname()[1])


def jax_process_id(env: dict[str, str], slice_index: int, hosts: int) -> int:
    """The process id JAX derives on a GKE TPU host: worker id within the slice plus slice id times hosts, the slice id
    from the webhook's ``MEGASCALE_SLICE_ID`` where a multi-slice pod has it, else this run's slice order.
    Source: JAX 0.10.2 ``jax._src.clusters.cloud_tpu_cluster.BaseTpuCluster.get_process_id``."""
    worker = int(env.get("TPU_WORKER_ID") or 0)
    given = env.get("MEGASCALE_SLICE_ID")
    return worker + (int(given) if given not in (None, "") else slice_index) * hosts


class HostProcess:
    """The actor's state: one child process, its merged stdout/stderr as lines, its exit code."""

    def __init__(self) -> None:
        self.proc: subprocess.Popen[bytes] | None = None
        self.lines: deque[str] = deque()
        self.dropped = 0
        self.lock = threading.Lock()
        self.reader: threading.Thread | None = None
        self.started_wall: float | None = None
        self.ended_wall: float | None = None
        self.notice_file: str | None = None
        self.kill_at: float | None = None

    def identity(self, slice_index: int, hosts: int) -> dict[str, Any]:
        """Where this actor runs: the node's IP and id, its slice's worker id, its JAX process id, and a free port."""
        import ray

        env = dict(os.environ)
        return {"ip": ray.util.get_node_ip_address(), "node_id": ray.get_runtime_context().get_node_id(),
                "worker": int(env.get("TPU_WORKER_ID") or 0), "slice_name": env.get("TPU_NAME", ""),
                "rank": jax_process_id(env, slice_index, hosts), "port": free_port()}

    def start(self, command: str, env: dict[str, str], drop: tuple[str, ...] = ()) -> int:
        """Starts ``command`` (run by bash, as KubeRay runs an entrypoint) in this actor's working folder (the code
        folder) with this process's environment less ``drop`` plus ``env``; returns its pid."""
        from raytpu.workloads import local_secrets

        local_secrets.load()  # the emulated slice's secrets (GKE: the kubelet's secretKeyRef env)
        child = dict(os.environ)
        for name in child.get(SERVING_ONLY_ENV, "").split(","):  # Serve's switches of an emulated node: not a job's
            child.pop(name, None)
        for name in drop:
            child.pop(name, None)
        child.update(env)
        self.notice_file = os.path.join(tempfile.mkdtemp(prefix="raytpu-notice-"), "notice.json")
        child[NOTICE_FILE] = self.notice_file  # written at a preemption notice, just before SIGTERM
        self.started_wall = time.time()
        self.proc = subprocess.Popen(["bash", "-c", command], env=child, stdin=subprocess.DEVNULL,
                                     stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True,
                                     preexec_fn=_die_with_parent)
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()
        return self.proc.pid

    def _read(self) -> None:
        assert self.proc is not None and self.proc.stdout is not None
        for raw in self.proc.stdout:
            line = raw.decode("utf-8", "replace").rstrip("\r\n")
            if len(line) > MAX_LINE_CHARS:
                line = line[:MAX_LINE_CHARS] + f" [... {len(line) - MAX_LINE_CHARS:,} more characters]"
            with self.lock:
                self.lines.append(line)
                if len(self.lines) > MAX_KEPT_LINES:
                    self.lines.popleft()
                    self.dropped += 1

    def poll(self) -> dict[str, Any]:
        """The lines since the last poll, how many were dropped, and the exit code once the process has ended and its
        output is read (None while it runs)."""
        if self.kill_at is not None and time.time() >= self.kill_at and self.proc is not None:
            self._signal(signal.SIGKILL)
        code = None if self.proc is None else self.proc.poll()
        if code is not None:
            if self.ended_wall is None:
                self.ended_wall = time.time()
            if self.reader is not None:
                self.reader.join(timeout=5)
        with self.lock:
            lines, dropped = list(self.lines), self.dropped
            self.lines.clear()
            self.dropped = 0
        ran = None if self.started_wall is None else (self.ended_wall or time.time()) - self.started_wall
        return {"lines": lines, "dropped": dropped, "code": code, "ran_s": ran}

    def notice(self, notice: dict[str, Any]) -> None:
        """A preemption notice for the run: written where ``RAYTPU_PREEMPTION_NOTICE`` points, then SIGTERM to the
        program, and SIGKILL at the notice's deadline (:meth:`poll`). A program that joined JAX's distributed runtime
        keeps running on SIGTERM (XLA's preemption notifier takes the signal: it reads
        ``multihost_utils.reached_preemption_sync_point``), so the deadline bounds it."""
        if self.notice_file:
            with contextlib.suppress(OSError), open(self.notice_file, "w", encoding="utf-8") as out:
                json.dump(notice, out)
        self._signal(signal.SIGTERM)
        deadline_ms = notice.get("deadline_ms") or 0
        self.kill_at = deadline_ms / 1000 if deadline_ms else time.time() + NOTICE_KILL_S

    def stop(self, grace_s: float) -> int | None:
        """SIGTERM to the program's process group, SIGKILL after ``grace_s``; its exit code (None: never started)."""
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            self._signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=grace_s)
            except subprocess.TimeoutExpired:
                self._signal(signal.SIGKILL)
                self.proc.wait(timeout=10)
        self._signal(signal.SIGKILL)  # whatever the program left running in its group
        return self.proc.returncode

    def _signal(self, signum: int) -> None:
        assert self.proc is not None
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.proc.pid, signum)
