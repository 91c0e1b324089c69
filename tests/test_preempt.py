"""The preemption drill (issue 30): ``raytpu local preempt`` refuses what it cannot do (exit 2, naming the flag), and on
the emulated slice a host preempted with notice costs at most one step (the run resumes from the checkpoint written at
the notice) while a host crash resumes from the last periodic checkpoint.

The slice tests run the drill for real: a training run on a one-slice v6e 2x4 (two emulated hosts), one host drained
for a preemption as its ``ray start --block`` does on SIGTERM, killed at the notice's end and replaced."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from raytpu.cli import main
from raytpu.core.common import timeline
from raytpu.core.common.errors import InvalidInput
from raytpu.core.tpu.catalog import generation
from raytpu.core.tpu.plan import plan_slice
from raytpu.local.slice import preempt, procs, state, status_table
from raytpu.workloads.support import preemption


def run_cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str]:
    try:
        code = main(list(argv))
    except SystemExit as exc:
        code = int(exc.code or 0)
    return code, capsys.readouterr().err


@pytest.mark.unit
@pytest.mark.parametrize(("argv", "flag"), [
    (["--notice-s", "-1"], "--notice-s"),
    (["--notice-s", "nan"], "--notice-s"),
    (["--notice-s", "soon"], "--notice-s"),
    (["--host", "-2"], "--host"),
    ([], "--dir"),  # no slice running there
])
def test_preempt_refuses_bad_flags_and_a_missing_slice(capsys: pytest.CaptureFixture[str], tmp_path: Path,
                                                       argv: list[str], flag: str) -> None:
    code, err = run_cli(capsys, "local", "--dir", str(tmp_path / "none"), "preempt", *argv)
    assert code == 2, err
    assert f"error: {flag}:" in err and "valid:" in err and "Traceback" not in err


@pytest.mark.unit
def test_a_host_out_of_the_slice_is_refused_naming_host(tmp_path: Path) -> None:
    plan = plan_slice("v6e", "2x4", generation("v6e").multi_host_machine_type.name)
    cluster = state.LocalCluster(run_dir=str(tmp_path), temp_dir="/tmp/raytpu-none", address="127.0.0.1:1",
                                 plan=plan.to_json(), slices=["s0"])
    with pytest.raises(InvalidInput) as bad:
        preempt.target(cluster, plan.hosts)
    assert bad.value.field == "--host" and "0 to 1" in bad.value.valid
    with pytest.raises(InvalidInput) as gone:
        preempt.target(cluster, 0)  # in range, but not running
    assert gone.value.field == "--host"
    with pytest.raises(InvalidInput) as other:
        preempt.target(cluster, 0, "s9")
    assert other.value.field == "--slice"
    with pytest.raises(InvalidInput):
        preempt.check_notice(-0.5)


@pytest.mark.unit
def test_progress_lines_survive_a_torn_last_line(tmp_path: Path) -> None:
    path = tmp_path / "p.jsonl"
    for step in (1, 2):
        preemption.record_progress({"progress_file": str(path), "launch": "x"}, 0, step, 0)
    preemption.record_progress({"progress_file": str(path)}, 1, 3, 0)  # rank 1 writes nothing
    path.write_text(path.read_text() + '{"step": 3, "wa')
    assert [p["step"] for p in preemption.read_progress(path)] == [1, 2]
    assert preemption.read_progress(tmp_path / "absent") == []


@pytest.mark.unit
def test_the_section_measures_steps_lost_from_the_progress_lines(tmp_path: Path) -> None:
    """Steps lost are the last step finished before the kill minus the step the run resumed from (its first step after
    the kill, less one); with a notice the run resumed at the notice's checkpoint, and the phases are all measured."""
    from raytpu.local.demos.drill import section

    plan = plan_slice("v6e", "2x4", generation("v6e").multi_host_machine_type.name)
    cluster = state.LocalCluster(run_dir=str(tmp_path), temp_dir="/tmp/raytpu-none", address="127.0.0.1:1",
                                 plan=plan.to_json(), slices=["s0"])
    record = preempt.Preemption("s0", 1, 10.0, notice_wall=100.0, gone_wall=110.0, how="killed at the notice's end",
                                replaced_wall=115.0)
    seen = [{"step": s, "wall": 90.0 + s, "restarts": 0} for s in range(1, 19)]
    seen += [{"step": s, "wall": 100.0 + s, "restarts": 1} for s in range(19, 31)]  # 19 at 119: after the kill
    summary = {"ok": True, "restarts": 1, "devices": plan.chips, "slice_name": "s0", "resumed_at_notice": True,
               "ray_slices": {"s0": plan.hosts}, "notices": [{"step": 18, "seen_wall": 101.0}]}
    cut = section(record, summary, [p for p in seen if not (p["restarts"] == 0 and p["wall"] > 108.5)], 10, cluster)
    assert (cut["last_step_before_kill"], cut["resumed_from_step"], cut["steps_lost"]) == (18, 18, 0)
    assert cut["checkpoint_at_notice"] and cut["resumed_after_s"] == 19.0 and cut["resumed_on_whole_slice"]
    assert _phases(cut) == {p: timeline.MEASURED for p in timeline.PREEMPTION_PHASES}
    crash = preempt.Preemption("s0", 1, 0.0, gone_wall=110.0, how="crashed (no notice)", replaced_wall=115.0)
    seen = [{"step": s, "wall": 96.0 + s, "restarts": 0} for s in range(1, 15)]
    seen += [{"step": 15, "wall": 110.5, "restarts": 0}]  # in flight at the kill: recorded after it, and lost
    seen += [{"step": s, "wall": 110.0 + s, "restarts": 1} for s in range(11, 31)]
    cut = section(crash, summary | {"resumed_at_notice": False, "notices": []}, seen, 10, cluster)
    assert (cut["last_step_before_kill"], cut["resumed_from_step"], cut["steps_lost"]) == (15, 10, 5)
    assert not cut["checkpoint_at_notice"] and "periodic checkpoint (step 10" in cut["resumed_from"]
    assert _phases(cut)["notice"] == timeline.NOT_APPLICABLE


@pytest.mark.unit
def test_whole_slices_are_what_the_resumed_workers_report(tmp_path: Path) -> None:
    """A run of N slices resumed on whole slices only when its workers sat on N slices of the cluster, all hosts of
    each (the preempted host's slice among them), with every chip: planned counts alone do not make it whole."""
    from raytpu.local.demos.drill import whole_slices

    plan = plan_slice("v5p", "2x2x2")
    cluster = state.LocalCluster(run_dir=str(tmp_path), temp_dir="/tmp/raytpu-none", address="127.0.0.1:1",
                                 plan=plan.to_json(), slices=["s0", "s1"])
    whole = {"devices": 2 * plan.chips, "ray_slices": {"s0": plan.hosts, "s1": plan.hosts}}
    assert whole_slices(whole, cluster, 2, "s1")
    assert not whole_slices(whole, cluster, 1, "s1")  # more slices than the run asked for
    assert not whole_slices(whole | {"ray_slices": {"s0": plan.hosts + 1, "s1": plan.hosts - 1}}, cluster, 2, "s1")
    assert not whole_slices(whole | {"ray_slices": {"s0": plan.hosts, "s9": plan.hosts}}, cluster, 2, "s0")
    assert not whole_slices(whole | {"devices": plan.chips}, cluster, 2, "s1")
    assert not whole_slices({"devices": 2 * plan.chips}, cluster, 2, "s1")  # not measured: not whole
    assert whole_slices({"devices": plan.chips, "ray_slices": {"s1": plan.hosts}}, cluster, 1, "s1")
    assert not whole_slices({"devices": plan.chips, "ray_slices": {"s0": plan.hosts}}, cluster, 1, "s1")


@pytest.fixture(scope="module")
def one_slice(start_cluster: Callable[..., state.LocalCluster]) -> Iterator[state.LocalCluster]:
    """One emulated v6e 2x4 slice of two hosts: the run's slice is the one preempted."""
    cluster = start_cluster(plan_slice("v6e", "2x4", generation("v6e").multi_host_machine_type.name))
    yield cluster
    procs.stop(cluster.run_dir)


def _phases(cut: dict[str, Any]) -> dict[str, str]:
    return {row["phase"]: row["status"] for row in cut["timeline"]["phases"]}


@pytest.mark.slice
@pytest.mark.timeout(480)
def test_preempted_with_notice_loses_at_most_one_step(one_slice: state.LocalCluster, tmp_path: Path) -> None:
    """The notice (the host's node draining for a preemption) reaches the run; it checkpoints, stops stepping, and
    resumes from that checkpoint on the whole slice once the host is replaced."""
    from raytpu.local.demos.drill import drill

    done = drill(one_slice, 10.0, tmp_path / "ckpt", steps=30, every=10, at_step=14)
    train, cut = done["train"], done["preemption"]
    assert done["exit_code"] == 0 and train["ok"], (train, cut)
    assert cut["checkpoint_at_notice"] and cut["steps_lost"] <= 1, cut
    assert cut["resumed_from_step"] >= 14 and "at the notice" in cut["resumed_from"]
    assert cut["resumed_on_whole_slice"] and train["restarts"] >= 1 and cut["resumed_after_s"] > 0
    assert train["notices"] and train["notices"][-1]["preempted_ranks"] == [0, 1]  # a slice is one failure domain
    assert _phases(cut) == {p: timeline.MEASURED for p in timeline.PREEMPTION_PHASES}


@pytest.mark.slice
@pytest.mark.timeout(480)
def test_a_host_crash_resumes_from_the_last_periodic_checkpoint(one_slice: state.LocalCluster,
                                                                tmp_path: Path) -> None:
    """No notice: the run cannot checkpoint, and resumes from the periodic checkpoint before the crash (and says so),
    losing the steps since."""
    from raytpu.local.demos.drill import drill

    done = drill(one_slice, 0.0, tmp_path / "ckpt", steps=30, every=10, at_step=14)
    train, cut = done["train"], done["preemption"]
    assert done["exit_code"] == 0 and train["ok"], (train, cut)
    assert not cut["checkpoint_at_notice"] and cut["resumed_from_step"] == 10
    assert "periodic checkpoint (step 10" in cut["resumed_from"]
    assert cut["steps_lost"] == cut["last_step_before_kill"] - 10 >= 4 and cut["resumed_on_whole_slice"]
    assert _phases(cut)["notice"] == timeline.NOT_APPLICABLE and _phases(cut)["resumed"] == timeline.MEASURED


@pytest.mark.slice
@pytest.mark.timeout(300)
def test_the_command_refuses_a_host_past_the_slice_then_preempts_one(one_slice: state.LocalCluster) -> None:
    """``raytpu local preempt`` on a running slice: a host past its size exits 2 naming ``--host``; a crash of the
    last host is done, reported as JSON, and the host is replaced (the slice is whole again)."""
    cmd = [sys.executable, "-m", "raytpu", "local", "--dir", one_slice.run_dir, "preempt"]
    bad = subprocess.run([*cmd, "--host", "2"], capture_output=True, text=True, timeout=120)
    assert bad.returncode == 2 and "error: --host: 2 is out of range" in bad.stderr, bad.stderr
    done = subprocess.run([*cmd, "--notice-s", "0"], capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stderr
    record = json.loads(done.stdout)
    assert record["how"] == "crashed (no notice)" and record["worker_id"] == 1 and record["replaced_wall"]
    again = state.LocalCluster.load(one_slice.run_dir)
    assert again is not None
    live = {n.pid for n in again.hosts()}  # the killed host stays recorded, marked killed
    rows = [r for r in status_table.status(again) if r.pid in live]
    assert len(rows) == again.slice_plan.hosts and all(r.alive and r.labels_ok for r in rows), rows
