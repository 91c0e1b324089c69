"""Ray drains inside the grace the kit's spot and flex-start pods get (issue 30 item 1), on real Ray 2.60 nodes.

The pod side (grace, drain variable, preStop) is in ``tests/test_preemption_pods.py``; this runs the preStop program
against a real ``ray start --block`` worker node that holds an actor.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from raytpu.core.manifests import preemption
from raytpu.local.slice.launch import free_port

pytestmark = [pytest.mark.slice, pytest.mark.timeout(600)]


BUSY = """\
import ray, sys, time
ray.init(address=sys.argv[1])
@ray.remote(num_cpus=1)
class Busy:
    def ping(self):
        return 1
busy = Busy.remote()
ray.get(busy.ping.remote())
print("ready", flush=True)
time.sleep(600)
"""


START_ATTEMPTS = 3
"""Starts of a node before the test gives up: a port handed out free may be taken before Ray binds it."""
SETTLE_S = 3.0
"""How long a node must stay up after it says it started: a port taken under it ends ``ray start`` just after."""


def _up(proc: subprocess.Popen[Any], log: Path, deadline_s: float = 300) -> bool:
    """Whether ``ray start --block`` said it started and is still running :data:`SETTLE_S` later (False: it exited,
    e.g. a port race)."""
    end = time.monotonic() + deadline_s
    while "Ray runtime started" not in log.read_text(errors="replace"):
        if proc.poll() is not None:
            return False
        assert time.monotonic() < end, log.read_text(errors="replace")[-3000:]
        time.sleep(0.5)
    settled = time.monotonic() + SETTLE_S
    while time.monotonic() < settled:
        if proc.poll() is not None:
            return False
        time.sleep(0.2)
    return True


class Nodes:
    """A Ray 2.60 head (no CPUs) and one worker node, each ``ray start --block`` as KubeRay starts them, in a short
    temp dir of their own (Ray's socket paths must stay under 108 bytes) with ports of their own."""

    def __init__(self, worker_env: dict[str, str]) -> None:
        self.tmp = Path(tempfile.mkdtemp(prefix="rtp", dir="/tmp"))
        # Ray's token auth as KubeRay sets it on every Ray container (RAY_AUTH_MODE, RAY_AUTH_TOKEN), which a
        # preStop exec inherits: the GCS drain must pass it
        self.env = {**os.environ, "RAY_USAGE_STATS_ENABLED": "0", "RAY_AUTH_MODE": "token",
                    "RAY_AUTH_TOKEN": secrets.token_hex(32)}
        self.env.pop("RAY_ADDRESS", None)
        self.started: list[subprocess.Popen[Any]] = []
        ray = str(Path(sys.executable).parent / "ray")
        common = ["--disable-usage-stats", "--node-ip-address", "127.0.0.1", "--dashboard-agent-listen-port", "0",
                  "--include-log-monitor", "false", "--object-store-memory", str(80 * 1024**2), "--log-style",
                  "record", "--block"]

        self.gcs = 0

        def head() -> list[str]:
            self.gcs = free_port()
            return [ray, "start", "--head", "--port", str(self.gcs), "--temp-dir", str(self.tmp / "h"), "--num-cpus",
                    "0", "--include-dashboard", "false", "--ray-client-server-port", str(free_port()), *common]

        self._start(head, "head.log", {})
        self.worker = self._start(lambda: [ray, "start", "--address", f"127.0.0.1:{self.gcs}", "--temp-dir",
                                           str(self.tmp / "w"), "--num-cpus", "1", *common], "worker.log", worker_env)

    def _start(self, argv: Callable[[], list[str]], log: str, extra: dict[str, str]) -> subprocess.Popen[Any]:
        """Starts a node (``argv()``: fresh ports each time) until it stays up, at most :data:`START_ATTEMPTS`."""
        for _ in range(START_ATTEMPTS):
            with open(self.tmp / log, "wb") as out:
                proc = subprocess.Popen(argv(), env={**self.env, **extra}, stdout=out, stderr=subprocess.STDOUT,
                                        stdin=subprocess.DEVNULL, start_new_session=True)
            self.started.append(proc)
            if _up(proc, self.tmp / log):
                return proc
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)  # what the failed start left
            proc.wait()
        raise AssertionError(f"{log}: no start stayed up in {START_ATTEMPTS}: " + self.log(log)[-3000:])

    def keep_busy(self) -> None:
        """An actor on the worker node (the head has no CPUs), held by a driver that stays connected."""
        driver = subprocess.Popen([sys.executable, "-c", BUSY, f"127.0.0.1:{self.gcs}"], env=self.env,
                                  stdout=subprocess.PIPE, text=True, start_new_session=True)
        self.started.append(driver)
        assert driver.stdout is not None and driver.stdout.readline().strip() == "ready"

    def proc_root(self, *pids: int) -> Path:
        """A proc root holding only ``pids``' cmdlines: the preStop programs then touch no other Ray here."""
        root = self.tmp / "proc"
        for pid in pids:
            (root / str(pid)).mkdir(parents=True)
            (root / str(pid) / "cmdline").write_bytes(Path(f"/proc/{pid}/cmdline").read_bytes())
        return root

    def worker_raylet(self) -> int:
        """The PID of the worker node's raylet (its ``--temp_dir`` is the worker's)."""
        for entry in Path("/proc").iterdir():
            try:
                argv = (entry / "cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            if argv and Path(argv[0].decode()).name == "raylet" and f"--temp_dir={self.tmp / 'w'}".encode() in argv:
                return int(entry.name)
        raise AssertionError("the worker node has no raylet")

    def log(self, name: str) -> str:
        return (self.tmp / name).read_text(errors="replace")

    def stop(self) -> None:
        for proc in reversed(self.started):  # each leads its own process group: its daemons go with it
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        shutil.rmtree(self.tmp, ignore_errors=True)


def test_a_busy_ray_node_drains_and_stops_inside_the_grace_when_the_prestop_signals_it() -> None:
    """Ray 2.60 (the jobs' image): a worker node started with the pods' ``RAY_GRACEFUL_SHUTDOWN_DRAIN_TIMEOUT_S``
    holding an actor; the preStop program signals it; it drains for the full 10 s (an actor keeps it busy:
    ``Node._drain_node_before_shutdown`` waits to the deadline), stops its processes and exits before the 15 s grace
    would SIGKILL it. Source: Ray 2.60 ``ray._private.node``."""
    nodes = Nodes({preemption.DRAIN_ENV: str(preemption.DRAIN_S)})
    try:
        nodes.keep_busy()
        signalled = time.monotonic()
        subprocess.run([sys.executable, "-c", preemption.PRESTOP_SIGNAL, str(nodes.proc_root(nodes.worker.pid))],
                       check=True, timeout=60)
        nodes.worker.wait(timeout=120)
        took = time.monotonic() - signalled
        assert f"Draining for up to {float(preemption.DRAIN_S)} seconds" in nodes.log("worker.log")
        assert preemption.DRAIN_S <= took < preemption.POD_GRACE_S, took
    finally:
        nodes.stop()


def test_the_drain_prestop_drains_the_node_through_the_gcs_and_waits_for_its_raylet() -> None:
    """The preStop of a Ray that stops at once on SIGTERM (the serving image's 2.56; here 2.60 with its own drain
    off, as those pods set it): it finds the container's raylet, asks the GCS to drain its node
    (``DRAIN_NODE_REASON_PREEMPTION``, ``ray drain-node``'s call) and returns when the drained, idle raylet exits,
    well before the 10 s deadline; the kubelet's SIGTERM then stops ``ray start`` inside the grace."""
    nodes = Nodes({preemption.DRAIN_ENV: "0"})
    try:
        raylet = nodes.worker_raylet()
        began = time.monotonic()
        ran = subprocess.run([sys.executable, "-c", preemption.PRESTOP_DRAIN, str(nodes.proc_root(raylet))],
                             check=True, timeout=60, capture_output=True, text=True, env=nodes.env)
        took = time.monotonic() - began
        assert "drain accepted" in ran.stdout, (ran.stdout, ran.stderr)
        assert not Path(f"/proc/{raylet}").exists() or b"Z" in Path(f"/proc/{raylet}/stat").read_bytes().split()[2]
        assert took < preemption.DRAIN_S, took
        signalled = time.monotonic()
        nodes.worker.send_signal(signal.SIGTERM)
        nodes.worker.wait(timeout=60)
        assert time.monotonic() - signalled < preemption.TEARDOWN_S
    finally:
        nodes.stop()
