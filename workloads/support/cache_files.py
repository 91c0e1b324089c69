"""JAX's persistent compilation cache, written so that an interrupted write is never a permanent miss (issue 49).

JAX 0.10.2's file cache writes an entry in place (``LRUCache.put``: ``write_bytes`` to ``<key>-cache``) and never
replaces one that exists, so an entry cut short (a preempted host; GCS FUSE keeps what the file held at close) is read
at every later start, fails to load, and the program compiles again, each start. Here an entry is written to a
temporary name and renamed (a reader sees a complete file or none, on a local disk and through GCS FUSE, where the
object appears only once written whole), an entry that does not load is dropped so the next compile writes it again,
and of several processes that compile the same program only the first to claim the entry writes it.

Hooked where JAX builds its cache: ``jax._src.compilation_cache._initialize_cache`` calls the module's
``get_file_cache(path)`` at that moment. Source: JAX 0.10.2 ``jax._src.compilation_cache`` (``get_file_cache``,
``get_executable_and_time``: ``decompress_executable`` then ``extract_executable_and_time``), ``jax._src.lru_cache``
(``LRUCache.get``/``put``, ``_CACHE_SUFFIX``), ``jax._src.compiler._cache_write`` (only JAX process 0 writes).
"""

from __future__ import annotations

import contextlib
import os
import time
import uuid
from pathlib import Path
from typing import Any

SUFFIX = "-cache"
"""JAX's file name of an entry, ``<key>-cache`` (``jax._src.lru_cache._CACHE_SUFFIX``)."""
CLAIM_SUFFIX = "-claim"
CLAIM_S = 600.0
"""A claim older than this is a writer that died: another process may write the entry."""


class SafeFileCache:
    """JAX's ``CacheInterface`` over a folder: whole-file writes by rename, entries that fail to load dropped."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self._path = self.path = Path(path)
        self.path.mkdir(parents=True, exist_ok=True)
        self.dropped = 0
        self.written = 0

    def _entry(self, key: str) -> Path:
        if not key:
            raise ValueError("key cannot be empty")
        return self.path / f"{key}{SUFFIX}"

    def get(self, key: str) -> bytes | None:
        """The entry's bytes when it loads (decompresses and splits as JAX reads it); a broken one is dropped."""
        entry = self._entry(key)
        try:
            value = entry.read_bytes()
        except FileNotFoundError:
            return None
        if loads(value):
            return value
        with contextlib.suppress(OSError):  # another process may have dropped it first
            entry.unlink()
        self.dropped += 1
        return None

    def put(self, key: str, value: bytes) -> None:
        """Writes the entry once: skipped when it exists or another live process holds its claim; else written to a
        temporary name and renamed into place."""
        entry = self._entry(key)
        if entry.exists() or not self._claim(key):
            return
        temporary = self.path / f".{key}{SUFFIX}.{uuid.uuid4().hex}.tmp"
        try:
            temporary.write_bytes(value)
            os.replace(temporary, entry)
            self.written += 1
        finally:
            with contextlib.suppress(OSError):
                temporary.unlink()
            with contextlib.suppress(OSError):
                (self.path / f"{key}{CLAIM_SUFFIX}").unlink()

    def _claim(self, key: str) -> bool:
        """This process writes the entry: it created the claim file, or the claim it found is stale."""
        claim = self.path / f"{key}{CLAIM_SUFFIX}"
        try:
            os.close(os.open(claim, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644))
            return True
        except FileExistsError:
            with contextlib.suppress(OSError):
                if time.time() - claim.stat().st_mtime > CLAIM_S:
                    claim.touch()
                    return True
            return False

    def clear(self) -> None:
        """Nothing kept in memory."""


def loads(value: bytes) -> bool:
    """The entry decompresses and holds an executable and its compile time, as JAX reads it."""
    from jax._src import compilation_cache

    try:
        executable, _ = compilation_cache.extract_executable_and_time(compilation_cache.decompress_executable(value))
    except Exception:  # a truncated frame (zstd or zlib), a short header: the entry cannot load
        return False
    return bool(executable)


def install() -> None:
    """Makes JAX's file cache this process's :class:`SafeFileCache` (a local or mounted folder, no size limit: the
    kit sets none); a cache already built is replaced. Idempotent."""
    from jax._src import compilation_cache, lru_cache

    original: Any = compilation_cache.get_file_cache
    if getattr(original, "raytpu_safe", False):
        return

    def safe(cache: Any) -> Any:
        if type(cache) is lru_cache.LRUCache and not cache.eviction_enabled and "://" not in str(cache._path):
            return SafeFileCache(cache._path)
        return cache

    def get_file_cache(path: str) -> Any:
        made = original(path)
        return None if made is None else (safe(made[0]), made[1])

    get_file_cache.raytpu_safe = True  # type: ignore[attr-defined]
    compilation_cache.get_file_cache = get_file_cache
    if compilation_cache._cache is not None:
        compilation_cache._cache = safe(compilation_cache._cache)
