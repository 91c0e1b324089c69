"""Ray drains inside the grace the kit's spot and flex-start pods get (issue 30 item 1), on real Ray 2.60 nodes.

The pod side (grace, drain variable, preStop) is in ``tests/test_preemption_pods.py``; this runs the preStop program
against a real ``ray start --block`` worker node that holds an actor.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import pytest

from raytpu.core import preemption

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


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _wait_started(log: Path, deadline_s: float = 300) -> None:
    end = time.monotonic() + deadline_s
    while "Ray runtime started" not in log.read_text(errors="replace"):
        assert time.monotonic() < end, log.read_text(errors="replace")[-3000:]
        time.sleep(0.5)


def test_a_busy_ray_node_drains_and_stops_inside_the_grace_when_the_prestop_signals_it() -> None:
    """End to end on real Ray 2.60 nodes: a worker node started as the pods start it (``ray start --block`` with the
    pods' ``RAY_GRACEFUL_SHUTDOWN_DRAIN_TIMEOUT_S``) holding an actor; the preStop program signals it; it drains for
    the full 10 s (an actor keeps it busy: ``Node._drain_node_before_shutdown`` waits to the deadline), stops its
    processes and exits before the 15 s grace would SIGKILL it. Source: Ray 2.60 ``ray._private.node``."""
    ray = str(Path(sys.executable).parent / "ray")
    tmp = Path(tempfile.mkdtemp(prefix="rtp", dir="/tmp"))  # short: Ray's socket paths must stay under 108 bytes
    gcs = _free_port()
    common = ["--disable-usage-stats", "--node-ip-address", "127.0.0.1", "--dashboard-agent-listen-port", "0",
              "--include-log-monitor", "false", "--object-store-memory", str(80 * 1024**2), "--log-style", "record",
              "--block"]
    env = {**os.environ, "RAY_USAGE_STATS_ENABLED": "0"}
    env.pop("RAY_ADDRESS", None)
    started: list[subprocess.Popen[Any]] = []

    def start(argv: list[str], log: str, extra: dict[str, str]) -> subprocess.Popen[Any]:
        with open(tmp / log, "wb") as out:
            proc = subprocess.Popen(argv, env={**env, **extra}, stdout=out, stderr=subprocess.STDOUT,
                                    stdin=subprocess.DEVNULL, start_new_session=True)
        started.append(proc)
        return proc

    try:
        start([ray, "start", "--head", "--port", str(gcs), "--temp-dir", str(tmp / "h"), "--num-cpus", "0",
               "--include-dashboard", "false", "--ray-client-server-port", str(_free_port()), *common], "head.log", {})
        _wait_started(tmp / "head.log")
        worker = start([ray, "start", "--address", f"127.0.0.1:{gcs}", "--temp-dir", str(tmp / "w"), "--num-cpus",
                        "1", *common], "worker.log", {preemption.DRAIN_ENV: str(preemption.DRAIN_S)})
        _wait_started(tmp / "worker.log")
        driver = subprocess.Popen([sys.executable, "-c", BUSY, f"127.0.0.1:{gcs}"], env=env, stdout=subprocess.PIPE,
                                  text=True, start_new_session=True)
        started.append(driver)
        assert driver.stdout is not None and driver.stdout.readline().strip() == "ready"
        root = tmp / "proc" / str(worker.pid)
        root.mkdir(parents=True)
        (root / "cmdline").write_bytes(Path(f"/proc/{worker.pid}/cmdline").read_bytes())
        signalled = time.monotonic()
        subprocess.run([sys.executable, "-c", preemption.PRESTOP, str(tmp / "proc")], check=True, timeout=60)
        worker.wait(timeout=120)
        took = time.monotonic() - signalled
        log = (tmp / "worker.log").read_text(errors="replace")
        assert f"Draining for up to {float(preemption.DRAIN_S)} seconds" in log, log[-3000:]
        assert preemption.DRAIN_S <= took < preemption.POD_GRACE_S, took
    finally:
        for proc in reversed(started):  # each leads its own process group: its daemons go with it
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        shutil.rmtree(tmp, ignore_errors=True)
