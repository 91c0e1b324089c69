"""Token batches, the same at a given position whatever the restart: a synthetic stream computed from (seed, step,
row), or the job's Ray Data shard ("train", a ``tokens`` column of seq_len + 1 ids) where the trainer has one.

The position is the number of batches taken so far; a checkpoint saves it and a resume starts there.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import jax
import numpy as np

from lm.config import Config


def synthetic_rows(c: Config, step: int, start: int, stop: int) -> np.ndarray:
    """Rows ``start:stop`` of batch ``step``: arithmetic sequences mod vocab (a random start and stride per row),
    so a model can learn them and the loss falls within a few steps."""
    out = np.empty((stop - start, c.seq_len + 1), np.int32)
    for i, row in enumerate(range(start, stop)):
        rng = np.random.default_rng([c.seed, step, row])
        first, stride = rng.integers(c.vocab), rng.integers(1, 8)
        out[i] = (first + stride * np.arange(c.seq_len + 1)) % c.vocab
    return out


class Batches:
    """Global batches from ``position`` on, each a jax.Array sharded as ``sharding`` (every process builds only its
    own rows)."""

    def __init__(self, c: Config, sharding: Any, position: int = 0, shard: Any = None) -> None:
        self.c, self.sharding, self.position = c, sharding, position
        self.shape = (c.batch_size, c.seq_len + 1)
        self._rows = _shard_rows(shard, c, position) if shard is not None else None

    def next(self) -> jax.Array:
        if self._rows is None:
            step = self.position

            def rows(index: Any) -> np.ndarray:
                start, stop, _ = index[0].indices(self.shape[0])
                return synthetic_rows(self.c, step, start, stop)

            batch = jax.make_array_from_callback(self.shape, self.sharding, rows)
        else:
            batch = jax.make_array_from_process_local_data(self.sharding, next(self._rows), self.shape)
        self.position += 1
        return batch


def _shard_rows(shard: Any, c: Config, position: int) -> Iterator[np.ndarray]:
    """This process's part of each global batch from the Ray Data shard, the first ``position`` batches skipped."""
    local = c.batch_size // jax.process_count()
    batches = shard.iter_batches(batch_size=local, batch_format="numpy", drop_last=True)
    for taken, batch in enumerate(batches):
        if taken >= position:
            yield np.asarray(np.stack(batch["tokens"]), np.int32)
