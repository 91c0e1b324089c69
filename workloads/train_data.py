"""Training data from Ray Data: the ``dataset`` a train workload names, sharded over the slice's hosts, as JAX batches.

The driver reads the dataset (``gs://`` or local; Parquet or JSON lines: :func:`raytpu.core.data.data_format`) and
hands it to JaxTrainer as ``datasets={"train": ...}``; Ray Train splits it into one shard per worker (one worker per
host), equal in rows (Source: Ray 2.60 ``ray.train._internal.data_config.DataConfig.configure``:
``streaming_split(world_size, equal=True)``). Each host reads its own shard (``ray.train.get_dataset_shard``) and
loads batches straight onto its devices with ``DataIterator.iter_jax_batches`` (Ray 2.60 ``ray/data/iterator.py``:
rows per host, every host's batch joined into one global ``jax.Array``). :class:`Feed` keeps the ids each host
consumed in the first epoch; :meth:`Feed.summary` gathers them (a collective) into the report: the rows each host
consumed, and how many were unique.

Rows: ``id`` (a whole number, unique per row), ``y`` (the target) and ``f0`` ... ``f{features-1}`` (the features).
A short last batch is padded (id -1, zeros), and the ledger does not count padding.
"""

from __future__ import annotations

from typing import Any

from raytpu.core import data, errors

ID, LABEL = "id", "y"
DATASET = "train"
"""The dataset's name in ``JaxTrainer(datasets=...)`` and ``ray.train.get_dataset_shard``."""


def feature_columns(features: int) -> list[str]:
    """``f0`` ... ``f{features-1}``."""
    return [f"f{i}" for i in range(features)]


def open_dataset(path: str) -> Any:
    """The Ray Dataset at ``path``, read by its format (:func:`raytpu.core.data.data_format`), columns as they are."""
    import ray.data

    return ray.data.read_json(path, lines=True) if data.data_format(path) == "jsonl" else ray.data.read_parquet(path)


def read(path: str, features: int) -> Any:
    """The Ray Dataset at ``path``, its columns checked (InvalidInput naming ``dataset`` otherwise)."""
    ds = open_dataset(path)
    need = [ID, LABEL, *feature_columns(features)]
    have = set(ds.schema().names)
    absent = [c for c in need if c not in have]
    if absent:
        raise errors.invalid_value("dataset", path, f"lacks the column(s) {', '.join(absent[:5])}"
                                   + (f" and {len(absent) - 5} more" if len(absent) > 5 else ""),
                                   f"rows with {ID}, {LABEL} and f0..f{features - 1} (--features {features})")
    return ds


def datasets(path: str | None, features: int) -> dict[str, Any] | None:
    """``JaxTrainer``'s ``datasets`` for a workload's ``dataset`` (None without one)."""
    return None if path is None else {DATASET: read(path, features)}


def write_dataset(path: str, rows: int, features: int, seed: int = 0) -> None:
    """A Parquet dataset of ``rows`` rows (``id``, ``y``, ``f0``...) drawn from a fixed MLP, for demos and tests."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    rng = np.random.default_rng(seed)
    x = rng.normal(size=(rows, features)).astype(np.float32)
    w1 = rng.normal(size=(features, 16)).astype(np.float32) / np.sqrt(features)
    y = (np.tanh(x @ w1) @ rng.normal(size=(16,)).astype(np.float32) / 4).astype(np.float32)
    columns = {ID: np.arange(rows, dtype=np.int64), LABEL: y, **{f"f{i}": x[:, i] for i in range(features)}}
    pq.write_table(pa.table(columns), path)


class Feed:
    """This host's shard as global ``(x, y)`` batches on ``sharding``, epoch after epoch; the first epoch's ids kept."""

    def __init__(self, features: int, global_batch: int, sharding: Any) -> None:
        import jax
        import ray.train

        self.features, self.sharding = features, sharding
        self.per_host = global_batch // jax.process_count()
        self.shard = ray.train.get_dataset_shard(DATASET)
        self.epoch, self.batches = 0, 0
        self.seen: list[Any] = []
        self._it = self._epoch()

    def _epoch(self) -> Any:
        import jax.numpy as jnp
        import numpy as np
        from ray.data.collate_fn import NumpyBatchCollateFn

        names = feature_columns(self.features)

        class Stack(NumpyBatchCollateFn):
            def __call__(self, batch: dict[str, Any]) -> Any:
                return {ID: batch[ID].astype(np.int32), LABEL: batch[LABEL].astype(np.float32).reshape(-1, 1),
                        "x": np.stack([batch[n] for n in names], axis=1).astype(np.float32)}

        return iter(self.shard.iter_jax_batches(
            batch_size=self.per_host, collate_fn=Stack(), drop_last=False, synchronize_batches=True,
            paddings={ID: -1, LABEL: 0.0, "x": 0.0}, dtypes={ID: jnp.int32, LABEL: jnp.float32, "x": jnp.float32}))

    def next(self) -> tuple[Any, Any]:
        """The next global batch ``(x, y)``; a new epoch starts when the shard is done."""
        import jax
        import numpy as np

        try:
            batch = next(self._it)
        except StopIteration:
            self.epoch += 1
            self._it = self._epoch()
            batch = next(self._it)
        if self.epoch == 0:
            ids = np.concatenate([np.asarray(s.data).reshape(-1) for s in batch[ID].addressable_shards])
            self.seen.append(ids[ids >= 0])
        self.batches += 1
        return jax.device_put(batch["x"], self.sharding), jax.device_put(batch[LABEL], self.sharding)

    def summary(self) -> dict[str, Any]:
        """The first epoch's ledger, gathered from every host (every host must call it, at the same step)."""
        import jax
        import numpy as np
        from jax.experimental import multihost_utils

        local = np.concatenate(self.seen) if self.seen else np.zeros(0, np.int32)
        hosts = jax.process_count()
        counts = np.asarray(multihost_utils.process_allgather(np.array([local.size], np.int32))).reshape(hosts)
        padded = np.full(int(counts.max()), -1, np.int32)
        padded[:local.size] = local
        every = np.asarray(multihost_utils.process_allgather(padded)).reshape(hosts, -1)
        ids = np.concatenate([every[h, :counts[h]] for h in range(hosts)])
        return {"total_rows": int(ids.size), "unique_rows": int(np.unique(ids).size),
                "hosts": [{"host": h, "rows": int(counts[h])} for h in range(hosts)],
                "epochs_started": self.epoch + 1, "batches": self.batches}
