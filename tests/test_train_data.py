"""Training data from Ray Data on the emulated slice: a train workload's ``dataset`` (Parquet) reaches JaxTrainer
through ``datasets=``, each of the slice's two hosts reads its own shard with ``iter_jax_batches``, and the report
says how many rows each host consumed and that none was seen twice in the epoch."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from raytpu import local
from raytpu.workloads import train, train_data

pytestmark = pytest.mark.slice

ROWS = 512
FEATURES = 32
BATCH = 64
"""Global batch: 8 steps make one epoch of the 512 rows over the slice's 8 devices (2 hosts x 4)."""


def test_each_host_consumes_its_own_shard_once_per_epoch(two_slices: local.LocalCluster, tmp_path: Path) -> None:
    dataset = tmp_path / "train.parquet"
    train_data.write_dataset(str(dataset), ROWS, FEATURES)
    work = dataclasses.replace(two_slices.workload("train"), dataset=str(dataset))
    steps = ROWS // BATCH
    done = local.run_workload(two_slices, "train", "--storage-path", str(tmp_path / "ckpt"), "--steps", str(steps),
                              "--checkpoint-every", str(steps), "--batch-size", str(BATCH), "--features",
                              str(FEATURES), timeout_s=400, work=work)
    summary = train.parse_result(done.stdout)
    assert done.returncode == 0 and summary is not None and summary["ok"], (done.stdout[-2000:], done.stderr[-3000:])
    ledger = summary["train_data"]
    hosts = two_slices.slice_plan.hosts
    assert [h["host"] for h in ledger["hosts"]] == list(range(hosts))
    assert all(h["rows"] == ROWS // hosts for h in ledger["hosts"])  # equal shards (streaming_split equal=True)
    assert ledger["total_rows"] == ledger["unique_rows"] == ROWS  # every row once in the epoch
    assert summary["final_loss"] < summary["first_loss"]


def test_a_dataset_without_the_columns_is_refused_naming_it(two_slices: local.LocalCluster, tmp_path: Path) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    dataset = tmp_path / "bad.parquet"
    pq.write_table(pa.table({"id": [1, 2], "y": [0.0, 1.0]}), str(dataset))
    work = dataclasses.replace(two_slices.workload("train"), dataset=str(dataset))
    done = local.run_workload(two_slices, "train", "--storage-path", str(tmp_path / "ckpt"), "--steps", "2",
                              timeout_s=200, work=work)
    assert done.returncode == 2, done.stderr[-2000:]
    assert "error: dataset: " in done.stderr and "lacks the column(s) f0" in done.stderr
    assert "Traceback" not in done.stderr
