"""Training data from Ray Data: the ``dataset`` a train workload names, sharded over the slice's hosts, as JAX batches.

Ray Train splits the dataset into equal shards, one per host; :class:`Feed` lays each host's numpy batches out on the
trainer's own sharding (not ``iter_jax_batches``, whose 1D mesh would reshard every step). A short last batch is
padded with weight 0; a resumed run skips to the checkpointed position. Source: Ray 2.60
``ray.train._internal.data_config.DataConfig.configure``; docs/FACTS.md#ray-data-training-feed.
Rows: ``id`` (a whole number, unique per row), ``y`` (the target) and ``f0`` ... ``f{features-1}`` (the features).
"""

from __future__ import annotations

from typing import Any

from raytpu.core.common import errors
from raytpu.core.specs.runtime import data

ID, LABEL = "id", "y"
DATASET = "train"
"""The dataset's name in ``JaxTrainer(datasets=...)`` and ``ray.train.get_dataset_shard``."""


def feature_columns(features: int) -> list[str]:
    """``f0`` ... ``f{features-1}``."""
    return [f"f{i}" for i in range(features)]


def open_dataset(path: str) -> Any:
    """The Ray Dataset at ``path``, read by its format (:func:`raytpu.core.specs.runtime.data.data_format`), columns as
    they are."""
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
    """This host's shard as global ``(x, y, weight)`` batches laid out on the trainer's ``sharding``, epoch after
    epoch, from a checkpointed position; the ids of the epoch it started in kept for :meth:`summary`."""

    def __init__(self, features: int, global_batch: int, sharding: Any, start: dict[str, int] | None = None,
                 shard: Any = None) -> None:
        import jax
        import ray.train

        self.names, self.sharding = feature_columns(features), sharding
        self.per_host, self.global_batch = global_batch // jax.process_count(), global_batch
        self.shard = shard if shard is not None else ray.train.get_dataset_shard(DATASET)  # a DataIterator
        self.start = {"epoch": 0, "rows": 0, **(start or {})}
        self.epoch, self.rows = self.start["epoch"], self.start["rows"]
        self.batches = 0
        self.seen: list[Any] = []
        self._it = self._epoch(skip=self.rows)

    def position(self) -> dict[str, int]:
        """Where the next batch starts: the epoch, and the rows each host has consumed in it (checkpointed)."""
        return {"epoch": self.epoch, "rows": self.rows}

    def _epoch(self, skip: int = 0) -> Any:
        """This host's rows of one epoch as numpy batches of at most ``per_host`` rows, the first ``skip`` dropped."""
        for batch in self.shard.iter_batches(batch_size=self.per_host, batch_format="numpy", drop_last=False):
            if skip >= len(batch[ID]):
                skip -= len(batch[ID])
                continue
            yield {name: column[skip:] for name, column in batch.items()}
            skip = 0

    def _local(self) -> dict[str, Any] | None:
        return next(self._it, None)  # None: this host's epoch is over

    def next(self) -> tuple[Any, Any, Any]:
        """The next global batch ``(x, y, weight)``: a short batch is padded with weight 0, so the loss skips those
        rows; a new epoch starts when every host's shard is done."""
        batch = self._local()
        if not any(_hosts_rows(batch)):
            self.epoch, self.rows, self._it = self.epoch + 1, 0, self._epoch()
            batch = self._local()
            if not any(_hosts_rows(batch)):
                raise ValueError(f"dataset: epoch {self.epoch} has no rows on any host")
        return self._place(batch)

    def _place(self, batch: dict[str, Any] | None) -> tuple[Any, Any, Any]:
        import numpy as np

        rows = 0 if batch is None else len(batch[ID])
        x = np.zeros((self.per_host, len(self.names)), np.float32)
        y = np.zeros((self.per_host, 1), np.float32)
        weight = np.zeros((self.per_host,), np.float32)
        if batch is not None:
            x[:rows] = np.stack([batch[n] for n in self.names], axis=1)
            y[:rows, 0] = batch[LABEL]
            weight[:rows] = 1.0
            if self.epoch == self.start["epoch"]:
                self.seen.append(np.asarray(batch[ID], np.int64))
        self.rows += rows
        self.batches += 1
        return self._global(x), self._global(y), self._global(weight)

    def _global(self, local: Any) -> Any:
        import jax

        return jax.make_array_from_process_local_data(self.sharding, local,
                                                      (self.global_batch, *local.shape[1:]))

    def summary(self) -> dict[str, Any]:
        """The ledger of the epoch this launch started in, gathered from every host (every host calls it, at the same
        step): rows per host, unique rows, the ids as ``[first, last + 1)`` ranges, and where the launch started."""
        import jax
        import numpy as np
        from jax.experimental import multihost_utils

        local = np.concatenate(self.seen) if self.seen else np.zeros(0, np.int64)
        hosts = jax.process_count()
        counts = np.asarray(multihost_utils.process_allgather(np.array([local.size], np.int32))).reshape(hosts)
        padded = np.full(int(counts.max()), -1, np.int64)
        padded[:local.size] = local
        every = np.asarray(multihost_utils.process_allgather(padded)).reshape(hosts, -1)
        ids = np.concatenate([every[h, :counts[h]] for h in range(hosts)])
        return {"total_rows": int(ids.size), "unique_rows": int(np.unique(ids).size),
                "hosts": [{"host": h, "rows": int(counts[h])} for h in range(hosts)], "id_ranges": id_ranges(ids),
                "start": dict(self.start), "epochs_started": self.epoch - self.start["epoch"] + 1,
                "batches": self.batches}


MAX_RANGES = 64
"""Ranges :func:`id_ranges` lists before it stops (``...`` last): the report stays small on a shuffled dataset."""


def id_ranges(ids: Any) -> list[Any]:
    """Sorted unique ``ids`` as ``[first, last + 1)`` pairs, at most :data:`MAX_RANGES` (then ``"..."``)."""
    import numpy as np

    unique = np.unique(np.asarray(ids, np.int64))
    if not unique.size:
        return []
    breaks = np.flatnonzero(np.diff(unique) != 1) + 1
    starts, stops = unique[np.r_[0, breaks]], unique[np.r_[breaks - 1, unique.size - 1]] + 1
    pairs: list[Any] = [[int(a), int(b)] for a, b in zip(starts[:MAX_RANGES], stops[:MAX_RANGES], strict=True)]
    return pairs + (["..."] if starts.size > MAX_RANGES else [])


def _hosts_rows(batch: dict[str, Any] | None) -> list[int]:
    """Every host's rows in this step's ``batch`` (a collective: every host calls it once per step), so that all hosts
    agree when an epoch ends even if one shard ran out first."""
    import jax
    import numpy as np
    from jax.experimental import multihost_utils

    rows = 0 if batch is None else len(batch[ID])
    if jax.process_count() == 1:
        return [rows]
    return [int(v) for v in np.asarray(multihost_utils.process_allgather(np.array([rows], np.int32))).reshape(-1)]


def data_config() -> Any:
    """JaxTrainer's ``dataset_config``: Ray Data keeps block order (``preserve_order``), so each host's shard holds the
    same rows in the same order on every launch and a resumed run can skip to its checkpointed position.
    Source: Ray 2.60 ``OutputSplitter.start`` (drops locality hints when ``preserve_order`` is set) and
    ``_select_next_output_index`` (the split with the fewest rows gets the next block)."""
    from ray.train import DataConfig

    options = DataConfig.default_ingest_options()
    options.preserve_order = True
    return DataConfig(execution_options=options)
