"""``workloads[].retries`` (issue 40: a ``kind: job`` had no restart budget): a team's driver run again as a whole new
RayJob attempt after a failure, KubeRay's ``backoffLimit``. Source: KubeRay v1.7.0
``checkBackoffLimitAndUpdateStatusIfNeeded`` (docs/FACTS.md#kuberay-retries)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from crd import operator_errors, schema_errors

from raytpu import cli
from raytpu.cluster import gke, runs
from raytpu.core.common import errors
from raytpu.core.manifests import kuberay
from raytpu.core.specs import kinds
from raytpu.core.specs.kinds import MAX_RETRIES, JobLimits
from raytpu.core.specs.spec import SliceSpec, WorkloadSpec

pytestmark = pytest.mark.unit

IMAGE = "us-docker.pkg.dev/p/r/ray-tpu:2.60.0"
CONFIG = (Path(__file__).parent.parent / "raytpu.example.yaml").read_text()


def _work(retries: object, provisioning: str = "on-demand", run_time_s: object = None) -> WorkloadSpec:
    item = SliceSpec.create(name="train", generation="v6e", topology="4x4", zone="us-east5-b",
                            provisioning=provisioning)
    return WorkloadSpec(name="w", kind=kinds.kind("job"), slice=item, entrypoint="python x.py", image=IMAGE,
                        retries=retries, run_time_s=run_time_s)  # type: ignore[arg-type]


def _job(retries: object, provisioning: str = "on-demand", run_time_s: object = None) -> dict[str, Any]:
    return kuberay.ray_job("w-r1", _work(retries, provisioning, run_time_s), kuberay.Pods(image=IMAGE))


# ------------------------------------------------------------------------------------------------ config


WORKLOADS = {
    "job": "  - name: again\n    kind: job\n    slice: train\n    entrypoint: python x.py\n",
    "train": "  - name: again\n    kind: train\n    slice: train\n",
    "smoke": "  - name: again\n    kind: smoke\n    slice: train\n",
    "batch": "  - name: again\n    kind: batch\n    slice: serve\n    input: gs://b/in.jsonl\n    output: gs://b/out\n",
    "serve": "  - name: again\n    kind: serve\n    slice: serve\n",
}


def _config(tmp_path: Path, kind: str, value: str) -> Path:
    path = tmp_path / "raytpu.yaml"
    path.write_text(CONFIG.rstrip("\n") + "\n" + WORKLOADS[kind] + f"    retries: {value}\n")
    (tmp_path / "x.py").write_text("print('hi')\n")
    return path


@pytest.mark.parametrize(("kind", "value", "says"), [
    ("job", "-1", "a whole number from 0 to 10 (default 0: no retry)"),
    ("job", "three", "a whole number"),
    ("job", "true", "a whole number"),
    ("job", "1.5", "a whole number"),
    ("job", "'2'", "a whole number"),
    ("job", str(MAX_RETRIES + 1), "is not a whole number in range"),
    ("job", "9" * 300, "retries"),
    ("job", "[1]", "a whole number"),
    ("train", "1", "for kind train (Ray Train restarts it inside the run"),
    ("smoke", "1", "for kind smoke (a retried check would hide a failing slice)"),
    ("batch", "1", "for kind batch (a retry runs the whole dataset again)"),
    ("serve", "0", "for kind serve (a RayService has no backoffLimit)"),
    ("train", "0", "only with kind job"),
])
def test_a_bad_retries_is_refused_naming_the_field(tmp_path: Path, capsys: pytest.CaptureFixture[str], kind: str,
                                                   value: str, says: str) -> None:
    before = _config(tmp_path, kind, value).read_text()
    assert cli.main(["validate", str(tmp_path / "raytpu.yaml")]) == 2
    err = capsys.readouterr().err
    assert "workloads[3].retries" in err and says in err, err
    assert "Traceback" not in err and len(err) < 3000, err
    assert (tmp_path / "raytpu.yaml").read_text() == before


@pytest.mark.parametrize("value", ["0", "3", str(MAX_RETRIES)])
def test_a_good_retries_validates(tmp_path: Path, value: str) -> None:
    assert cli.main(["validate", str(_config(tmp_path, "job", value))]) == 0


def test_interactive_mode_takes_no_backoff_limit() -> None:
    """Source: KubeRay v1.7.0 ``ValidateRayJobSpec`` ("BackoffLimit is incompatible with InteractiveMode")."""
    with pytest.raises(errors.InvalidInput, match="backoff_limit: 1 is not allowed with submission_mode "
                                                   "InteractiveMode"):
        JobLimits(backoff_limit=1, submission_mode="InteractiveMode")
    assert JobLimits(backoff_limit=1).backoff_limit == 1


# ------------------------------------------------------------------------------------------------ the RayJob


@pytest.mark.parametrize(("retries", "limit"), [(None, 0), (0, 0), (1, 1), (MAX_RETRIES, MAX_RETRIES)])
def test_retries_is_the_rayjobs_backoff_limit_valid_against_kuberays_crd(retries: int | None, limit: int) -> None:
    job = _job(retries)
    assert job["spec"]["backoffLimit"] == limit
    assert not schema_errors(job), schema_errors(job)
    assert not operator_errors(job), operator_errors(job)
    assert job["spec"]["submissionMode"] == "K8sJobMode"  # KubeRay refuses retries in InteractiveMode


@pytest.mark.parametrize(("provisioning", "run_time_s", "active", "waits"), [
    ("on-demand", None, 3600 + 24 * 3600, 3600),
    ("on-demand", 600, 3600 + 600, 3600),
    ("spot", 7200, 2 * 7200, 7200),
])
def test_each_attempt_keeps_the_whole_deadline(provisioning: str, run_time_s: int | None, active: int,
                                               waits: int) -> None:
    """KubeRay v1.7.0 restarts both clocks per attempt (``initRayJobStatusIfNeed`` sets ``Status.StartTime`` again
    after ``Retrying`` -> ``New``), so the per-attempt deadline is the same with retries as without; the whole run may
    take ``(retries + 1) x activeDeadlineSeconds``."""
    for retries in (None, 3):
        spec = _job(retries, provisioning, run_time_s)["spec"]
        assert (spec["activeDeadlineSeconds"], spec["preRunningDeadlineSeconds"]) == (active, waits)


def test_retries_travels_to_the_job_in_its_workload_json() -> None:
    work = _work(2)
    assert WorkloadSpec.from_json(work.to_json()) == work and work.to_json()["retries"] == 2


# ------------------------------------------------------------------------------------------------ following


def _status(deployment: str, job: str, failed: int = 0, reason: str = "") -> dict[str, Any]:
    return {"spec": {"backoffLimit": 2}, "status": {"jobDeploymentStatus": deployment, "jobStatus": job,
                                                    "failed": failed, "reason": reason}}


RETRIED = [  # as KubeRay v1.7.0 writes them: a failed first attempt, its Retrying, a second that succeeds
    _status("Initializing", "NEW"), _status("Running", "RUNNING"),
    _status("Running", "FAILED"),  # the submitter has not finished yet
    _status("Retrying", "FAILED", failed=1),  # Failed and Retrying are set in one reconcile: Failed is never written
    _status("New", "NEW", failed=1), _status("Initializing", "NEW", failed=1), _status("Running", "RUNNING", failed=1),
    _status("Complete", "SUCCEEDED", failed=1),
]


class Watched:
    """A client whose watch of a RayJob yields the given states in turn."""

    def __init__(self, states: list[dict[str, Any]]) -> None:
        self.states = states

    def watch(self, kind: str, name: str, timeout_s: float) -> Iterator[dict[str, Any]]:
        yield from self.states


def test_following_waits_through_a_retry_and_shows_each_attempt() -> None:
    said: list[str] = []
    state = gke.follow_jobs(Watched(RETRIED), ["w-r1"], timeout_s=5, progress=said.append)  # type: ignore[arg-type]
    assert state["w-r1"].succeeded and state["w-r1"].done
    shown = [line.split(": ", 1)[1] for line in said]
    assert shown == ["Initializing/NEW attempt 1 of 3", "Running/RUNNING attempt 1 of 3",
                     "Running/FAILED attempt 1 of 3", "Retrying/FAILED attempt 2 of 3", "New/NEW attempt 2 of 3",
                     "Initializing/NEW attempt 2 of 3", "Running/RUNNING attempt 2 of 3",
                     "Complete/SUCCEEDED attempt 2 of 3"]


@pytest.mark.parametrize(("obj", "done", "shown"), [
    (_status("Running", "FAILED", failed=2), True, "Running/FAILED attempt 3 of 3"),  # the last attempt failed
    (_status("Retrying", "FAILED", failed=2), False, "Retrying/FAILED attempt 3 of 3"),
    (_status("Failed", "FAILED", failed=3), True, "Failed/FAILED attempt 3 of 3"),
    (_status("Failed", "RUNNING", failed=1, reason="DeadlineExceeded"), True,  # never retried
     "Failed/RUNNING attempt 1 of 3 (DeadlineExceeded)"),
    ({"spec": {}, "status": {"jobDeploymentStatus": "Running", "jobStatus": "FAILED"}}, True, "Running/FAILED"),
])
def test_a_rayjobs_state_counts_its_attempts(obj: dict[str, Any], done: bool, shown: str) -> None:
    state = gke.job_state("w-r1", obj)
    assert (state.done, state.describe()) == (done, shown)
    assert runs.to_run("RayJob", {"metadata": {"name": "w-r1"}, **obj}, 0.0).state == state.status


class Submitters:
    """A client whose submitter Job has one pod per attempt: ``pods`` in turn, each log read whole."""

    def __init__(self, logs: dict[str, list[str]]) -> None:
        self.logs_of, self.order, self.reads = logs, list(logs), 0

    def job_pod(self, job_name: str) -> str:
        self.reads += 1
        return self.order[min(self.reads // 3, len(self.order) - 1)]  # the next attempt's pod a few looks later

    def logs(self, pod: str, follow: bool) -> Iterator[str]:
        yield from self.logs_of[pod]


def test_submit_wait_streams_every_attempts_driver_log_once() -> None:
    client = Submitters({"w-r1-a": ["attempt 1", "lost a host"], "w-r1-b": ["attempt 2", "done"]})
    lines: list[str] = []
    streamer = gke.LogStreamer(client, "w-r1", sink=lines.append, poll_s=0.01)  # type: ignore[arg-type]
    streamer.start()
    while client.reads < 8:
        time.sleep(0.01)
    streamer.stop()
    assert lines == ["attempt 1", "lost a host", "attempt 2", "done"]


# ------------------------------------------------------------------------------------------------ --local


@pytest.mark.parametrize(("results", "code", "ids"), [
    (["FAILED", "FAILED", "SUCCEEDED"], 0, ["again-r1", "again-r1-retry1", "again-r1-retry2"]),
    (["FAILED", "FAILED", "FAILED"], 1, ["again-r1", "again-r1-retry1", "again-r1-retry2"]),
    (["STOPPED"], 1, ["again-r1"]),  # KubeRay marks a STOPPED job Complete: no retry
])
def test_submit_local_retries_a_failed_driver_naming_each_attempt(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], results: list[str],
        code: int, ids: list[str]) -> None:
    from raytpu.config import parse
    from raytpu.local.running import jobs as local_jobs
    from raytpu.local.slice import state as local_state

    config = _config(tmp_path, "job", "2")
    local_state.LocalCluster(str(tmp_path), "/tmp/none", "127.0.0.1:1",
                             parse(config.read_text()).slice_named("train").plan.to_json(), ["s0"]).save()
    given: list[tuple[str, str]] = []

    def submit_job(_cluster: object, _kind: str, *_extra: str, **options: Any) -> str:
        given.append((options["submission_id"], options["runtime"]["env_vars"]["RAYTPU_RUN"]))
        return results[len(given) - 1]

    monkeypatch.setattr(local_jobs, "submit_job", submit_job)
    monkeypatch.chdir(tmp_path)
    assert cli.main(["submit", "again", "--local", "--config", str(config), "--dir", str(tmp_path),
                     "--run-id", "r1"]) == code
    assert given == [(i, "again-r1") for i in ids]  # every attempt is the same run: its storage, its RAYTPU_RUN
    err = capsys.readouterr().err
    assert "Ray job again-r1: FAILED (attempt 1 of 3); retrying as again-r1-retry1" in err or results == ["STOPPED"]
    if code:
        assert ("after 3 attempts" in err) is (len(ids) == 3) and "Traceback" not in err, err
