"""The memory sampler's process scan (:func:`raytpu.local.slice.memory.tree_processes`): a cluster's processes found by
their tag, their children with them, nothing else; the same set again from its tag cache; PSS read only when it could
be a new peak."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from raytpu.local.slice.memory import PeakMemory, TagCache, memory_bytes, tree_processes
from raytpu.local.slice.state import ENV_CLUSTER

pytestmark = pytest.mark.unit

CHILD = "import subprocess, sys, time; subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(30)']); " \
        "print('up', flush=True); time.sleep(30)"


def _start(tag: str | None) -> subprocess.Popen[str]:
    env = {k: v for k, v in os.environ.items() if k != ENV_CLUSTER}
    if tag is not None:
        env[ENV_CLUSTER] = tag
    proc = subprocess.Popen([sys.executable, "-c", CHILD], env=env, stdout=subprocess.PIPE, text=True,
                            start_new_session=True)
    assert proc.stdout is not None and proc.stdout.readline().strip() == "up"
    return proc


def _children(pid: int) -> set[int]:
    return {int(p) for p in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()}


def test_the_scan_finds_a_clusters_processes_and_their_children_and_no_other(tmp_path: Path) -> None:
    prefix = f"/tmp/raytpu-test-scan-{os.getpid()}-"
    ours, other = _start(f"{prefix}a"), _start(None)
    try:
        tags = TagCache()
        leaf = min(_children(other.pid))  # a root without children of its own: the rest comes from the tag
        found = tree_processes(leaf, tag_prefix=prefix, tags=tags)
        assert found == {leaf, ours.pid, *_children(ours.pid)}
        assert tree_processes(leaf, tag_prefix=prefix, tags=tags) == found  # from the cache: the same set
        assert tree_processes(leaf, tag_prefix=f"{prefix}b") == {leaf}
        assert {other.pid, *_children(other.pid), ours.pid} <= tree_processes()  # this process's descendants
    finally:
        for proc in (ours, other):
            os.killpg(proc.pid, 9)
            proc.wait()


GROWER = ("import sys\nheld = []\nprint('up', flush=True)\nfor line in sys.stdin:\n"
          "    held.append(bytearray(int(line)))  # zero-filled: every page touched, resident\n"
          "    print('ok', flush=True)\n")


def test_the_sampler_reads_pss_only_when_it_could_be_a_new_peak_and_finds_the_same_peak() -> None:
    """A process that grows, holds, grows: PSS is read on growth (the RSS bound passes the peak), not while it holds
    (until ``recheck_s``), nor within ``pss_gap_s`` of the last read; the peak equals a full read's."""
    proc = subprocess.Popen([sys.executable, "-c", GROWER], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                            start_new_session=True)
    stdin, stdout = proc.stdin, proc.stdout
    assert stdin is not None and stdout is not None and stdout.readline().strip() == "up"

    def grow(mib: int) -> None:
        stdin.write(f"{mib * 2**20}\n")
        stdin.flush()
        assert stdout.readline().strip() == "ok"

    try:
        sampler = PeakMemory(root=proc.pid, recheck_s=3600.0, pss_gap_s=0.0)
        sampler.sample()
        assert sampler.pss_reads == 1  # the first sample always reads
        grow(64)
        sampler.sample()
        assert sampler.pss_reads == 2
        for _ in range(3):  # holding: the bound stays at the peak
            sampler.sample()
        assert sampler.pss_reads == 2
        grow(32)
        sampler.sample()
        assert sampler.pss_reads == 3
        assert sampler.peak_pss_bytes == pytest.approx(memory_bytes({proc.pid})[1], rel=0.01)
        assert sampler.peak_pss_bytes > 96 * 2**20
        again = PeakMemory(root=proc.pid, recheck_s=0.0)
        again.sample()
        again.sample()
        assert again.pss_reads == 2  # recheck_s 0: every sample reads (bench/memory_sampler.py's baseline)
        gapped = PeakMemory(root=proc.pid, recheck_s=3600.0, pss_gap_s=3600.0)
        gapped.sample()
        grow(16)
        gapped.sample()
        assert gapped.pss_reads == 1  # growth within pss_gap_s of the last read: not read yet
        gapped.pss_gap_s = 0.0
        gapped.sample()
        assert gapped.pss_reads == 2 and gapped.peak_pss_bytes > sampler.peak_pss_bytes  # once the gap has passed
    finally:
        os.killpg(proc.pid, 9)
        proc.wait()
