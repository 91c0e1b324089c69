"""Training data from Ray Data on the emulated slice: a train workload's ``dataset`` (Parquet) reaches JaxTrainer
through ``datasets=``, each of the slice's two hosts reads its own shard
(:class:`raytpu.workloads.support.train_data.Feed`), and the report says how many rows each host consumed, that none was
seen twice in the epoch, that the step trained on exactly the dataset's rows (its padding has weight 0), and that a
resumed run continues the epoch where its checkpoint left it."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from raytpu.local.running import jobs
from raytpu.local.slice import state
from raytpu.workloads import train
from raytpu.workloads.support import train_data

pytestmark = pytest.mark.slice

ROWS = 500
FEATURES = 32
BATCH = 64
"""Global batch over the slice's 8 devices (2 hosts x 4): each host's 250 rows are 7 batches of 32 and one of 26 (6
padding rows), so 8 steps make one epoch."""
STEPS = 8


def ids(ranges: list[list[int]]) -> list[int]:
    """The ids a ledger's ``id_ranges`` name."""
    return [i for first, stop in ranges for i in range(first, stop)]


def test_each_host_consumes_its_own_shard_once_per_epoch(two_slices: state.LocalCluster, tmp_path: Path) -> None:
    dataset = tmp_path / "train.parquet"
    train_data.write_dataset(str(dataset), ROWS, FEATURES)
    work = dataclasses.replace(two_slices.workload("train"), dataset=str(dataset))
    steps = STEPS
    done = jobs.run_workload(two_slices, "train", "--storage-path", str(tmp_path / "ckpt"), "--steps", str(steps),
                             "--checkpoint-every", str(steps), "--batch-size", str(BATCH), "--features",
                             str(FEATURES), timeout_s=400, work=work)
    summary = train.parse_result(done.stdout)
    assert done.returncode == 0 and summary is not None and summary["ok"], (done.stdout[-2000:], done.stderr[-3000:])
    ledger = summary["train_data"]
    hosts = two_slices.slice_plan.hosts
    assert [h["host"] for h in ledger["hosts"]] == list(range(hosts))
    assert all(h["rows"] == ROWS // hosts for h in ledger["hosts"])  # equal shards (streaming_split equal=True)
    assert ledger["total_rows"] == ledger["unique_rows"] == ledger["trained_rows"] == ROWS  # each row once, no padding
    assert summary["final_loss"] < summary["first_loss"]


def test_a_resumed_run_continues_the_epoch_at_its_checkpointed_rows(two_slices: state.LocalCluster,
                                                                    tmp_path: Path) -> None:
    """3 steps, checkpointed; the same run resumed to 8 steps trains the other rows of the epoch, each once."""
    dataset = tmp_path / "train.parquet"
    train_data.write_dataset(str(dataset), ROWS, FEATURES)
    work = dataclasses.replace(two_slices.workload("train"), dataset=str(dataset))
    ledgers = []
    for steps in (3, STEPS):
        done = jobs.run_workload(two_slices, "train", "--storage-path", str(tmp_path / "ckpt"), "--name", "resumed",
                                 "--steps", str(steps), "--checkpoint-every", "3", "--batch-size", str(BATCH),
                                 "--features", str(FEATURES), timeout_s=400, work=work)
        summary = train.parse_result(done.stdout)
        assert done.returncode == 0 and summary is not None and summary["ok"], (done.stdout[-2000:],
                                                                                done.stderr[-3000:])
        ledgers.append(summary["train_data"])
    first, second = ledgers
    per_host = BATCH // two_slices.slice_plan.hosts
    assert first["start"] == {"epoch": 0, "rows": 0} and second["start"] == {"epoch": 0, "rows": 3 * per_host}
    assert first["trained_rows"] == 3 * BATCH and second["trained_rows"] == ROWS - 3 * BATCH
    assert sorted(ids(first["id_ranges"]) + ids(second["id_ranges"])) == list(range(ROWS))


def test_a_dataset_without_the_columns_is_refused_naming_it(two_slices: state.LocalCluster, tmp_path: Path) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    dataset = tmp_path / "bad.parquet"
    pq.write_table(pa.table({"id": [1, 2], "y": [0.0, 1.0]}), str(dataset))
    work = dataclasses.replace(two_slices.workload("train"), dataset=str(dataset))
    done = jobs.run_workload(two_slices, "train", "--storage-path", str(tmp_path / "ckpt"), "--steps", "2",
                             timeout_s=200, work=work)
    assert done.returncode == 2, done.stderr[-2000:]
    assert "error: dataset: " in done.stderr and "lacks the column(s) f0" in done.stderr
    assert "Traceback" not in done.stderr
