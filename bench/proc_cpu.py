"""CPU seconds per process while a command runs: the profile of ``docs/serving-profile.md``.

    python bench/proc_cpu.py --out samples.jsonl -- <command...>   # samples every --interval s while it runs
    python bench/proc_cpu.py --report samples.jsonl --since T0 --until T1   # CPU s per role in [T0, T1]

Reads ``/proc/<pid>/stat`` (utime + stime) of every process under the command and names each by its role (Ray sets
process titles: ``ray::ServeReplica:llm:...``, ``ray::ServeController``, ``raylet``, ``gcs_server``...).
Standard library only; Linux only.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from collections import defaultdict
from pathlib import Path

TICK = os.sysconf("SC_CLK_TCK")
ROLES = (  # first match on the command line wins
    ("ServeReplica:llm:OpenAiIngress", "Serve ingress replica (OpenAiIngress)"),
    ("ServeReplica:llm:OpenAIErrorIngress", "Serve ingress replica (OpenAiIngress)"),
    ("ServeReplica:llm:LLMRouter", "Serve ingress request router (LLMRouter)"),
    ("ServeReplica:llm:", "Serve LLM server replica (LLMServer, vLLM AsyncLLM)"),
    ("ServeController", "Serve controller"),
    ("ProxyActor", "Serve HTTP proxy"),
    ("EngineCore", "vLLM engine core"),
    ("VLLM::Worker", "vLLM worker (mp executor)"),
    ("vllm.entrypoints.openai.api_server", "vLLM OpenAI server (API process)"),
    ("gcs_server", "GCS"),
    ("raylet", "raylet"),
    ("DashboardAgent", "dashboard agent (per node)"),
    ("dashboard/agent.py", "dashboard agent (per node)"),
    ("dashboard/dashboard.py", "dashboard (head)"),
    ("ray.dashboard", "dashboard (head)"),
    ("RuntimeEnvAgent", "runtime env agent (per node)"),
    ("runtime_env/agent", "runtime env agent (per node)"),
    ("ray.util.client.server", "Ray client server (head)"),
    ("autoscaler/_private/monitor.py", "autoscaler monitor (head)"),
    ("ray::IDLE", "idle Ray workers"),
    ("default_worker.py", "idle Ray workers"),
    ("bench/serve.py", "bench client (openai)"),
    ("raytpu.workloads.serve", "serve deploy driver"),
    ("ray start", "ray start --block"),
)


def role(cmd: str) -> str | None:
    return next((name for key, name in ROLES if key in cmd), None)


def snapshot() -> dict[int, tuple[str, float, int, int]]:
    """pid -> (command line, CPU seconds, parent pid, session id) of this user's processes."""
    out: dict[int, tuple[str, float, int, int]] = {}
    uid = os.getuid()
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            if d.stat().st_uid != uid:
                continue
            stat = (d / "stat").read_text()
            fields = stat[stat.rindex(")") + 2:].split()
            cpu = (int(fields[11]) + int(fields[12])) / TICK
            cmd = (d / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
            comm = stat[stat.index("(") + 1:stat.rindex(")")]
            out[int(d.name)] = (cmd or comm, cpu, int(fields[1]), int(fields[3]))
        except (OSError, ValueError):
            continue
    return out


def _tree(procs: dict[int, tuple[str, float, int, int]], root: int, sessions: set[int]
          ) -> dict[int, tuple[str, float, int, int]]:
    """The processes under ``root``, and those in a session one of them led (``ray start`` starts each node as a
    session leader and exits, leaving its daemons to init). Other processes on a shared machine are not the bench's."""
    children: dict[int, list[int]] = defaultdict(list)
    for pid, (_, _, ppid, _) in procs.items():
        children[ppid].append(pid)
    todo, keep = [root], {}
    while todo:
        pid = todo.pop()
        if pid in procs:
            keep[pid] = procs[pid]
            if procs[pid][3] == pid:
                sessions.add(pid)
        todo += children.get(pid, [])
    return keep | {pid: p for pid, p in procs.items() if p[3] in sessions}


def sample(path: str, argv: list[str], interval: float, everyone: bool = False) -> int:
    proc = subprocess.Popen(argv)
    sessions: set[int] = set()
    with open(path, "w") as f:
        while proc.poll() is None:
            procs = snapshot()
            f.write(json.dumps({"t": time.time(), "p": procs if everyone else _tree(procs, proc.pid, sessions)}) + "\n")
            f.flush()
            time.sleep(interval)
    return proc.returncode


def report(path: str, since: float, until: float) -> dict[str, float]:
    rows = [json.loads(line) for line in Path(path).read_text().splitlines() if line.strip()]
    first = next(r for r in rows if r["t"] >= since)
    last = [r for r in rows if r["t"] <= until][-1]
    by: dict[str, float] = defaultdict(float)
    for pid, (cmd, cpu, *_) in last["p"].items():
        name = role(cmd)
        if name is None:
            continue
        before = first["p"].get(pid)
        by[name] += cpu - (before[1] if before else 0.0)  # a Ray worker's title changes with its task
    by["(wall s)"] = last["t"] - first["t"]
    return dict(sorted(by.items(), key=lambda kv: -kv[1]))


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--out")
    p.add_argument("--interval", type=float, default=1.0)
    p.add_argument("--all", action="store_true", help="every process of this user, not only the command's")
    p.add_argument("--report")
    p.add_argument("--since", type=float, default=0.0)
    p.add_argument("--until", type=float, default=float("inf"))
    p.add_argument("argv", nargs="*")
    a = p.parse_args()
    if a.report:
        for name, cpu in report(a.report, a.since, a.until).items():
            print(f"{cpu:8.1f}  {name}")
        return 0
    return sample(a.out, a.argv, a.interval, a.all)


if __name__ == "__main__":
    sys.exit(main())
