"""Benchmark of one memory sample's process scan (``raytpu demo``'s :class:`raytpu.local.slice.memory.PeakMemory`, every
0.5 s): the per-root walk that read every process's environment each time beside the one-pass scan with its tag cache,
alternating, in one run, on whatever runs on this machine now (start a local cluster first for a realistic table).

    .venv/bin/python bench/memory_sample.py [--repeats 20] [--prefix /tmp/raytpu-]

Prints CPU ms per scan (p50 of each; ``time.process_time``), the ratio new/old and whether both found the same
processes.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import sys
import time

import psutil

from raytpu.local.slice.memory import TagCache, tree_processes
from raytpu.local.slice.procs import tagged_processes


def per_root_walk(tag_prefix: str) -> set[int]:
    """The scan before: every process's environment read, then one process-table walk per tagged root."""
    roots = [os.getpid(), *tagged_processes(tag_prefix)]
    seen: set[int] = set()
    for pid in roots:
        with contextlib.suppress(psutil.Error):
            seen.add(pid)
            seen.update(child.pid for child in psutil.Process(pid).children(recursive=True))
    return seen


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--prefix", default="/tmp/raytpu-", help="the tag prefix (every local cluster's)")
    args = parser.parse_args(argv)
    tags = TagCache()
    old: list[float] = []
    new: list[float] = []
    same = 0
    for i in range(args.repeats):
        got: dict[str, set[int]] = {}
        for name in (("old", "new") if i % 2 == 0 else ("new", "old")):
            began = time.process_time()
            got[name] = (per_root_walk(args.prefix) if name == "old"
                         else tree_processes(tag_prefix=args.prefix, tags=tags))
            (old if name == "old" else new).append((time.process_time() - began) * 1000)
        same += got["old"] == got["new"]
    p50_old, p50_new = statistics.median(old), statistics.median(new)
    print(f"{len(psutil.pids())} processes on the machine, {len(got['new'])} in the sampled tree; load average "
          f"{[round(x, 1) for x in os.getloadavg()]}")
    print(f"  per-root walk  p50 {p50_old:.1f} ms CPU per scan")
    print(f"  one pass       p50 {p50_new:.1f} ms CPU per scan")
    print(f"  new/old {p50_new / p50_old:.2f}; same processes found in {same}/{args.repeats} scans")
    return 0


if __name__ == "__main__":
    sys.exit(main())
