"""A training run's settings the kit used to decide silently (issue 49): checkpoints kept (``keep_checkpoints``,
said in ``validate``), relaxed collectives for the kit's own trainer only, and the report sink that never fails a
run."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import pytest
import yaml

from raytpu.cli import main
from raytpu.core.specs.runtime import checkpoints

pytestmark = pytest.mark.unit

EXAMPLE = Path(__file__).resolve().parent.parent / "raytpu.example.yaml"


def _validate(capsys: pytest.CaptureFixture[str], tmp_path: Path, keep: object) -> str:
    data: dict[str, Any] = yaml.safe_load(EXAMPLE.read_text())
    if keep is not None:
        next(w for w in data["workloads"] if w["kind"] == "train")["keep_checkpoints"] = keep
    path = tmp_path / "raytpu.yaml"
    path.write_text(yaml.safe_dump(data))
    assert main(["validate", str(path)]) == 0
    return capsys.readouterr().out


@pytest.mark.parametrize(("keep", "said"), [
    (None, "keeps the newest 2 checkpoints (default; keep_checkpoints sets it)"),
    (5, "keeps the newest 5 checkpoints (keep_checkpoints)"),
    ("all", "keeps every checkpoint (keep_checkpoints: all)")])
def test_validate_says_how_many_checkpoints_a_training_run_keeps(capsys: pytest.CaptureFixture[str],
                                                                 tmp_path: Path, keep: object, said: str) -> None:
    """Source: Ray 2.60 ray.train.v2.api.config.CheckpointConfig (num_to_keep=None keeps all)."""
    [line] = [x for x in _validate(capsys, tmp_path, keep).splitlines() if x.startswith("  train: train on")]
    assert line.endswith(said)


def test_keep_checkpoints_becomes_rays_num_to_keep() -> None:
    """Source: Ray 2.60 ray.train.v2.api.config.CheckpointConfig (num_to_keep: None keeps every checkpoint)."""
    from ray.train.v2.api.config import CheckpointConfig

    assert [checkpoints.kept(v) for v in (None, 3, "all")] == [2, 3, None]
    assert CheckpointConfig().num_to_keep is None  # Ray's own default: all, which the kit does not take silently
    with pytest.raises(ValueError):
        CheckpointConfig(num_to_keep=0)  # why 0 is refused at validate


def _args(**over: Any) -> argparse.Namespace:
    from raytpu.workloads.train import build_parser

    return build_parser().parse_args(["--storage-path", "/tmp/x", *[a for k, v in over.items()
                                                                     for a in (f"--{k.replace('_', '-')}", str(v))]])


def test_only_the_kits_trainer_relaxes_collectives_on_preemption() -> None:
    """A team's loop may write a checkpoint shard per rank; with the report gate narrowed to the survivors, a
    checkpoint without the preempted slice's shards would be registered as the latest.
    Source: Ray 2.60 TrainController._relax_collectives_during_preemption (ReportCallbackHandler.set_required_ranks
    to the surviving ranks)."""
    from raytpu.workloads.support import team_train
    from raytpu.workloads.support.preemption import failure_config

    assert failure_config(_args()).relax_collectives_on_preemption is True
    source = Path(team_train.__file__).read_text()
    assert "failure_config(args, relax_collectives=False)" in source  # what build_trainer passes
    assert failure_config(_args(), relax_collectives=False).relax_collectives_on_preemption is False


def test_the_keep_checkpoints_flag_defaults_to_the_workloads_field() -> None:
    assert _args().keep_checkpoints is None  # train.run reads the workload's keep_checkpoints then
    assert _args(keep_checkpoints=4).keep_checkpoints == 4


class _Gone:
    """A sink whose every call fails, as a dead actor's handle may."""

    def __getattr__(self, name: str) -> Any:
        raise RuntimeError("actor died")


def test_a_lost_report_sink_never_fails_the_run(capsys: pytest.CaptureFixture[str]) -> None:
    """Issue 49: rank 0 waited on the sink at every attempt's start and the driver on its summary; a lost sink
    failed the run with ActorDiedError. Calls to it are guarded, the summary goes out without its reports."""
    from raytpu.workloads.support import team_train

    assert team_train.tell(_Gone(), "started", 0.0, False) is None
    reports, lost = team_train.gathered(_Gone())
    assert reports == team_train.NO_REPORTS and lost is not None and "actor died" in lost
    assert "report sink unreachable" in capsys.readouterr().err
