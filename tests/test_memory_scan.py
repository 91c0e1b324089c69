"""The memory sampler's process scan (:func:`raytpu.local.memory.tree_processes`): a cluster's processes found by
their tag, their children with them, nothing else; the same set again from its tag cache."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from raytpu.local.memory import TagCache, tree_processes
from raytpu.local.state import ENV_CLUSTER

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
