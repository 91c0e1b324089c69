"""How much memory a local cluster really holds: its processes' PSS, sampled in the background (``raytpu demo``,
the serve tier)."""

from __future__ import annotations

import contextlib
import os
import threading

import psutil

from raytpu.local.procs import tagged_processes


def tree_processes(root: int | None = None, tag_prefix: str | None = None) -> set[int]:
    """``root`` (default: this process), its descendants and, with ``tag_prefix``, every process of a local
    cluster whose temp dir starts with it (node daemons are reparented away from us) and their descendants."""
    roots = [os.getpid() if root is None else root, *(tagged_processes(tag_prefix) if tag_prefix else [])]
    seen: set[int] = set()
    for pid in roots:
        with contextlib.suppress(psutil.Error):
            seen.add(pid)
            seen.update(child.pid for child in psutil.Process(pid).children(recursive=True))
    return seen


def memory_bytes(pids: set[int]) -> tuple[int, int]:
    """(sum of RSS, sum of PSS) of ``pids``: RSS counts a page shared by n processes n times, PSS 1/n each, so the PSS
    sum is what the group really holds."""
    rss = pss = 0
    for pid in pids:
        with contextlib.suppress(psutil.Error):
            info = psutil.Process(pid).memory_full_info()
            rss += info.rss
            pss += getattr(info, "pss", info.rss)
    return rss, pss


class PeakMemory:
    """Samples a process tree's memory (``root``, default this process; and a local cluster's) in a background thread:
    ``peak_pss_bytes`` (what the group holds) and ``peak_rss_bytes`` (an upper bound) are the maxima seen."""

    def __init__(self, tag_prefix: str | None = None, interval_s: float = 0.5, root: int | None = None) -> None:
        self.root = root
        self.tag_prefix = tag_prefix
        self.interval_s = interval_s
        self.peak_rss_bytes = 0
        self.peak_pss_bytes = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            rss, pss = memory_bytes(tree_processes(self.root, tag_prefix=self.tag_prefix))
            self.peak_rss_bytes = max(self.peak_rss_bytes, rss)
            self.peak_pss_bytes = max(self.peak_pss_bytes, pss)
            self._stop.wait(self.interval_s)

    def __enter__(self) -> PeakMemory:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
