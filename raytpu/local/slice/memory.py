"""How much memory a local cluster really holds: its processes' PSS, sampled in the background (``raytpu demo``,
the serve tier)."""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections import defaultdict
from pathlib import Path

import psutil

from raytpu.local.slice.state import ENV_CLUSTER


def tree_processes(root: int | None = None, tag_prefix: str | None = None,
                   tags: TagCache | None = None) -> set[int]:
    """``root`` (default: this process), its descendants and, with ``tag_prefix``, every process of a local
    cluster whose temp dir starts with it (node daemons are reparented away from us) and their descendants. One pass
    over the process table (``tags`` remembers each process's tag across calls: a sampler's)."""
    tags = tags if tags is not None else TagCache()
    roots = [os.getpid() if root is None else root]
    children: dict[int, list[int]] = defaultdict(list)
    for proc in psutil.process_iter(["ppid", "status", "create_time"]):
        info = proc.info
        if info["ppid"] is not None:
            children[info["ppid"]].append(proc.pid)
        if tag_prefix and info["status"] != psutil.STATUS_ZOMBIE and proc.pid != os.getpid() \
                and tags.tag(proc, info["create_time"]).startswith(tag_prefix):
            roots.append(proc.pid)
    seen: set[int] = set()
    while roots:
        pid = roots.pop()
        if pid not in seen:
            seen.add(pid)
            roots.extend(children.get(pid, ()))
    return seen


class TagCache:
    """Each process's ``RAYTPU_LOCAL_CLUSTER`` tag (:func:`raytpu.local.slice.procs.tagged_processes`), read from its
    environment once per process (pid and start time): a sampler every 0.5 s read every process's environment on
    the machine each time, 12% of a core through ``raytpu demo`` (bench/memory_sample.py)."""

    def __init__(self) -> None:
        self._tags: dict[tuple[int, float], str] = {}

    def tag(self, proc: psutil.Process, started: float | None) -> str:
        key = (proc.pid, started or 0.0)
        if key not in self._tags:
            try:
                self._tags[key] = proc.environ().get(ENV_CLUSTER, "")
            except psutil.Error:
                return ""  # gone, or not ours to read: asked again next time
        return self._tags[key]


def memory_bytes(pids: set[int]) -> tuple[int, int]:
    """(sum of RSS, sum of PSS) of ``pids``: RSS counts a page shared by n processes n times, PSS 1/n each, so the PSS
    sum is what the group really holds. PSS costs the kernel a walk of each process's page tables."""
    rss = pss = 0
    for pid in pids:
        with contextlib.suppress(psutil.Error):
            info = psutil.Process(pid).memory_full_info()
            rss += info.rss
            pss += getattr(info, "pss", info.rss)
    return rss, pss


_PAGE = os.sysconf("SC_PAGE_SIZE")


def resident_bytes(pids: set[int]) -> dict[int, int]:
    """Each live process's RSS from ``/proc/<pid>/statm``: a counter the kernel keeps, no page-table walk.
    Source: https://www.kernel.org/doc/html/latest/filesystems/proc.html (``statm``: resident)."""
    out = {}
    for pid in pids:
        with contextlib.suppress(OSError, ValueError, IndexError):
            out[pid] = int(Path(f"/proc/{pid}/statm").read_text().split()[1]) * _PAGE
    return out


class PeakMemory:
    """Samples a process tree's memory (``root``, default this process; and a local cluster's) in a background thread:
    ``peak_pss_bytes`` (what the group holds) and ``peak_rss_bytes`` (an upper bound) are the maxima seen.

    RSS is read every ``interval_s`` (cheap); PSS only when it could be a new peak: since the last PSS read the group's
    PSS has grown by at most what its processes' RSS grew (a page mapped adds at most one page to either), so while
    that bound stays under the peak the read is skipped, and at least every ``recheck_s`` (a copy-on-write copy or a
    sharer outside the group leaving adds PSS without RSS). Reading PSS every 0.5 s took 12% of a core through
    ``raytpu demo`` (bench/memory_sample.py). While the group grows the bound passes the peak at nearly every sample,
    so PSS is read at most every ``pss_gap_s``: a peak held for less than that can be missed (bench/memory_sampler.py
    measures what it costs and misses)."""

    def __init__(self, tag_prefix: str | None = None, interval_s: float = 0.5, root: int | None = None,
                 recheck_s: float = 5.0, pss_gap_s: float = 2.0) -> None:
        self.root = root
        self.tag_prefix = tag_prefix
        self.interval_s = interval_s
        self.recheck_s = recheck_s
        self.pss_gap_s = pss_gap_s
        self.peak_rss_bytes = 0
        self.peak_pss_bytes = 0
        self.pss_reads = 0
        self._stop = threading.Event()
        self._tags = TagCache()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._read_pss: float | None = None  # monotonic time of the last PSS read
        self._read_at: tuple[int, dict[int, int]] = (0, {})  # that read's PSS sum, each process's RSS then

    def sample(self) -> None:
        """One sample: every process's RSS, and the group's PSS when it could exceed the peak."""
        pids = tree_processes(self.root, tag_prefix=self.tag_prefix, tags=self._tags)
        resident = resident_bytes(pids)
        self.peak_rss_bytes = max(self.peak_rss_bytes, sum(resident.values()))
        pss_then, rss_then = self._read_at
        bound = pss_then + sum(max(rss - rss_then.get(pid, 0), 0) for pid, rss in resident.items())
        now = time.monotonic()
        since = None if self._read_pss is None else now - self._read_pss
        if since is None or since >= self.recheck_s or (bound > self.peak_pss_bytes and since >= self.pss_gap_s):
            rss, pss = memory_bytes(set(resident))
            self.pss_reads += 1
            self._read_pss, self._read_at = now, (pss, resident)
            self.peak_rss_bytes = max(self.peak_rss_bytes, rss)
            self.peak_pss_bytes = max(self.peak_pss_bytes, pss)

    def _run(self) -> None:
        while not self._stop.is_set():
            self.sample()
            self._stop.wait(self.interval_s)

    def __enter__(self) -> PeakMemory:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
