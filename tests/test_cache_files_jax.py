"""JAX's persistent compilation cache as the kit writes it (issue 49): an entry cut short is dropped at its next read
and written again once, whole. Real JAX on CPU, one process per start (JAX builds its cache once per process): the
heavy tier."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.heavy

START = """\
import json
from raytpu.workloads.support.compile_watch import CompileWatch
import jax, jax.numpy as jnp
x = jnp.arange(8.0)
with CompileWatch() as watch:
    jax.jit(lambda v: (v * 2 + 1).sum())(x).block_until_ready()
from jax._src import compilation_cache as cc
print(json.dumps({"hits": watch.hits, "compiles": watch.compiles, "dropped": cc._cache.dropped,
                  "written": cc._cache.written}))
"""


def _start(cache: Path) -> dict[str, Any]:
    """One JAX process's start: its compile of the step, with the cache the kit's env names
    (docs/FACTS.md#compile-cache-details)."""
    env = {**os.environ, "JAX_PLATFORMS": "cpu", "JAX_COMPILATION_CACHE_DIR": str(cache),
           "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS": "0", "JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES": "-1"}
    done = subprocess.run([sys.executable, "-c", START], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def test_a_truncated_entry_is_dropped_then_written_once_whole(tmp_path: Path) -> None:
    """Measured on a real v5e (issue 49): a truncated entry cost a recompile at every later start, since JAX never
    replaces an entry that exists. Source: JAX 0.10.2 jax._src.lru_cache.LRUCache.put (returns when the file
    exists), jax._src.compilation_cache.get_executable_and_time (decompress_executable of what get returned)."""
    cache = tmp_path / "cache"
    first = _start(cache)
    assert first["hits"] == 0 and first["written"] >= 1
    [step] = [p for p in cache.glob("jit__lambda*-cache")]
    whole = step.read_bytes()
    step.write_bytes(whole[: len(whole) // 2])  # a write cut short (GCS FUSE keeps what the file held at close)

    second = _start(cache)
    assert second["dropped"] == 1 and second["written"] == 1  # dropped at its read, written again once
    assert step.read_bytes() != whole[: len(whole) // 2] and len(step.read_bytes()) > len(whole) // 2
    third = _start(cache)
    assert third["hits"] == third["compiles"] and third["dropped"] == third["written"] == 0
    assert not [p for p in cache.iterdir() if p.name.endswith((".tmp", "-claim"))]  # nothing half-written left
