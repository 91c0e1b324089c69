"""Where ``raytpu demo``'s CPU goes: CPU seconds per process role over one run, short-lived processes included.

    .venv/bin/python bench/demo_cpu.py [--interval 0.2] [--workers] [-- demo flags...]

Samples ``/proc/<pid>/stat`` (utime + stime) of every process that appears while the demo runs (each process's last
reading before it exits; a process living less than ``--interval`` is missed) and names each by its Ray process title
or command line; also the machine's busy CPU seconds (``/proc/stat``) over the run, which bounds what the table
missed. ``--workers`` lists each Ray worker process: when it appeared, on which node, its CPU and the titles it had
(``ray::IDLE`` only: started and never used). Linux only; standard library only. The demo runs in its own run
directory (``.raytpu/bench-cpu``).
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import time
from collections import defaultdict

TICK = os.sysconf("SC_CLK_TCK")
ROLES = (  # first match on a process's titles and command lines wins
    ("RayTrainWorker", "Ray Train worker (the training function)"),
    ("HostProcess", "smoke host check"),
    ("TrainController", "Ray Train controller"),
    ("SynchronizationActor", "Ray Train synchronization actor"),
    ("DatasetManager", "Ray Train dataset manager"),
    ("PlacementGroupCleaner", "Ray Train placement-group cleaner"),
    ("AutoscalingCoordinator", "Ray Train autoscaling coordinator"),
    ("_get_tpu_slice_name", "Ray Train slice-name task"),
    ("PreemptionWatcher", "Ray Train preemption watcher"),
    ("ray::IDLE", "Ray worker started, never used (ray::IDLE)"),
    ("raylet/raylet", "raylet (per node)"),  # its command line names default_worker.py too
    ("default_worker.py", "Ray worker (other)"),
    ("raytpu.workloads.smoke", "smoke driver"),
    ("raytpu.workloads.train", "train driver"),
    ("raytpu synth", "synth (Python)"),
    ("DashboardAgent", "dashboard agent (per node)"),
    ("RuntimeEnvAgent", "runtime env agent (per node)"),
    ("ray-dashboard-", "dashboard modules (head)"),
    ("multiprocessing.forkserver", "dashboard modules (head)"),
    ("dashboard/dashboard.py", "dashboard (head)"),
    ("log_monitor.py", "log monitor (per node)"),
    ("autoscaler/_private/monitor.py", "autoscaler monitor (head)"),
    ("ray.util.client.server", "Ray client server (head)"),
    ("gcs_server", "GCS (head)"),
    ("bin/ray start", "ray start (the CLI, per node)"),
    ("from ray.scripts.scripts import main", "ray start (the CLI, per node)"),  # raytpu.local.slice.launch.RAY_CLI
    ("raytpu demo", "raytpu demo (its own process: steps, memory sampler)"),
)


def role(names: list[str]) -> str:
    joined = " | ".join(names)
    if re.search(r"(^|/)node ", joined):
        return "synth (jsii's node)"
    return next((name for key, name in ROLES if key in joined), "other")


def snapshot() -> dict[int, tuple[str, float]]:
    """pid -> (title or command line, CPU seconds) of every process readable now."""
    out = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                stat = f.read()
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                cmd = f.read().replace(b"\0", b" ").decode(errors="replace").strip()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2:].split()
        comm = stat[stat.index("(") + 1:stat.rindex(")")]
        out[int(entry)] = (cmd or comm, (int(fields[11]) + int(fields[12])) / TICK)
    return out


def busy_s() -> float:
    with open("/proc/stat") as f:
        user, nice, system, _idle, _iowait, irq, softirq, steal = (int(x) for x in f.readline().split()[1:9])
    return (user + nice + system + irq + softirq + steal) / TICK


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--interval", type=float, default=0.2)
    parser.add_argument("--workers", action="store_true", help="list each Ray worker process")
    parser.add_argument("demo", nargs="*", help="extra `raytpu demo` flags (after --)")
    args = parser.parse_args(argv)
    before = set(snapshot())
    raytpu = os.path.join(os.path.dirname(sys.executable), "raytpu")
    busy0, t0 = busy_s(), time.monotonic()
    demo = subprocess.Popen([raytpu, "demo", "--dir", ".raytpu/bench-cpu", "--report", "reports/bench-cpu.json",
                             *args.demo], stdout=subprocess.DEVNULL)
    seen: dict[int, tuple[float, float, list[str]]] = {}  # pid -> (first seen s, CPU s, names)
    while demo.poll() is None:
        now = time.monotonic() - t0
        for pid, (name, cpu) in snapshot().items():
            if pid in before:
                continue
            first, _, names = seen.get(pid, (now, 0.0, []))
            seen[pid] = (first, cpu, names if name in names else [*names, name])
        time.sleep(args.interval)
    wall, busy = time.monotonic() - t0, busy_s() - busy0
    by: dict[str, list[float]] = defaultdict(lambda: [0, 0.0])
    for _, cpu, names in seen.values():
        row = by[role(names)]
        row[0] += 1
        row[1] += cpu
    tracked = sum(cpu for _, cpu in by.values())
    print(f"demo exit {demo.returncode}: wall {wall:.1f}s; machine busy {busy:.1f} CPU-s ({busy / wall:.2f} of "
          f"{os.cpu_count()} cores); {tracked:.1f} CPU-s in the table; load average "
          f"{[round(x, 1) for x in os.getloadavg()]}")
    print(f"{'CPU-s':>6}  {'procs':>5}  role")
    for name, (count, cpu) in sorted(by.items(), key=lambda kv: -kv[1][1]):
        print(f"{cpu:6.1f}  {count:5d}  {name}")
    if args.workers:
        print(f"\n{'at s':>5}  {'CPU-s':>5}  node  titles")
        for first, cpu, names in sorted(seen.values()):
            joined = " | ".join(names)
            if role(names) != "raylet (per node)" and ("default_worker.py" in joined or (
                    "ray::" in joined and "Agent" not in joined and "RuntimeEnv" not in joined)):
                node = re.search(r"raylet-name=\S*?/(\d+)-[0-9a-f]{4}/", joined)
                titles = [n[:48] for n in names if n.startswith("ray::")]
                print(f"{first:5.1f}  {cpu:5.2f}  {node.group(1) if node else '?':>4}  {', '.join(titles)}")
    return demo.returncode


if __name__ == "__main__":
    sys.exit(main())
