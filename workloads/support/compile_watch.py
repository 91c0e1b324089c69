"""What one JAX process compiled, from JAX's own monitoring events: XLA compile seconds, persistent-cache hits and
misses. A hit is counted, not assumed; a miss is a compile the cache did not serve (compiles - hits), since JAX
records its own miss events on process 0 only (kept as ``written``). Source: JAX 0.10.2 ``jax._src.compiler
._cache_write``; the events: docs/FACTS.md#compile-cache-jax.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

COMPILE_EVENT = "/jax/core/compile/backend_compile_duration"
HIT_EVENT = "/jax/compilation_cache/cache_hits"
MISS_EVENT = "/jax/compilation_cache/cache_misses"


class CompileWatch:
    """Counts this process's compiles while entered (``with CompileWatch() as watch``)."""

    def __init__(self, on_compile: Callable[[CompileWatch], object] | None = None) -> None:
        self.on_compile = on_compile  # told after each compile (a team's loop: the driver's actor hears of it)
        self.compile_s = 0.0
        self.compiles = 0
        self.hits = 0
        self.written = 0
        self.last_wall: float | None = None  # when the latest compile (or cache load) ended

    def _on_duration(self, event: str, duration_secs: float, **_: str | int) -> None:
        if event == COMPILE_EVENT:
            self.compile_s += duration_secs
            self.compiles += 1
            self.last_wall = time.time()
            if self.on_compile is not None:
                self.on_compile(self)

    def _on_event(self, event: str, **_: str | int) -> None:
        if event == HIT_EVENT:
            self.hits += 1
        elif event == MISS_EVENT:
            self.written += 1

    def __enter__(self) -> CompileWatch:
        import jax.monitoring

        from raytpu.workloads.support import cache_files

        cache_files.install()  # an interrupted cache write is never a permanent miss (issue 49)
        jax.monitoring.register_event_duration_secs_listener(self._on_duration)
        jax.monitoring.register_event_listener(self._on_event)
        return self

    def __exit__(self, *_: object) -> None:
        import jax.monitoring

        jax.monitoring.unregister_event_duration_listener(self._on_duration)
        jax.monitoring.unregister_event_listener(self._on_event)

    @property
    def misses(self) -> int:
        """Compiles the persistent cache did not serve."""
        return max(self.compiles - self.hits, 0)

    def summary(self) -> dict[str, Any]:
        """``{s, compiles, hits, misses, written, cache_dir, wall}``: JSON for metrics and reports."""
        import jax

        return {"s": round(self.compile_s, 3), "compiles": self.compiles, "hits": self.hits, "misses": self.misses,
                "written": self.written,
                "cache_dir": getattr(jax.config, "jax_compilation_cache_dir", None), "wall": self.last_wall}
