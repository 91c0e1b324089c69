"""``raytpu runs`` on a deployed stack, at the Kubernetes API boundary (the loopback API server of tests/kube_server.py,
real google-auth ADC), and the parts of ``raytpu runs --local`` that need no cluster (tests/test_runs_local.py runs it
on a real emulated slice)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from image_refs import FIXTURE_IMAGES
from kube_server import KubeApiServer, ServiceAccountKey, TlsFiles, serving, use_adc

from raytpu import cli
from raytpu.cluster import gke
from raytpu.cluster import runs as stack_runs
from raytpu.config import parse
from raytpu.core.common import names
from raytpu.core.manifests import kuberay
from raytpu.local.running import runs as local_runs
from raytpu.local.slice.state import LocalCluster, NodeProc
from raytpu.runs.run_list import Run, age

pytestmark = pytest.mark.unit

CONFIG = """\
workloads:
  - {name: pretrain, kind: train, slice: train}
  - {name: serve, kind: serve, slice: serve}
slices: [{name: train, generation: v6e, topology: 4x4, zone: us-east5-b},
         {name: serve, generation: v6e, topology: 2x4, zone: us-east5-b}]
cluster: {name: ray-tpu}
storage: {bucket: my-bucket}
project: my-ml-project
region: us-east5
"""
STACK = "ray-tpu-cluster"
OUTPUTS = {"cluster_name": "ray-tpu", "location": "us-east5", "project": "my-ml-project", "namespace": "ray",
           "service_account": "ray-tpu-ray", "bucket": "my-bucket"}
RAY_CLUSTER = "pretrain-r1-raycluster-x7"


def manifest(workload: str, name: str) -> dict[str, Any]:
    """The object ``raytpu submit`` applies for ``workload`` as ``name``: the kit's own labels and runtime env."""
    spec = parse(CONFIG)
    return kuberay.workload_manifest(spec, spec.workload(workload), images=FIXTURE_IMAGES,
                                     service_account="ray-tpu-ray", bucket="my-bucket", namespace="ray", name=name)


@pytest.fixture
def api(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, tls: TlsFiles,
        sa_key: ServiceAccountKey) -> Iterator[KubeApiServer]:
    """outputs.json naming a loopback API server, and ADC whose token endpoint is that server; holding a running
    RayJob (its submitter pod and a worker pod), a ready RayService, a RayJob of a kind this version does not know,
    and a RayJob the kit did not make."""
    with serving(tls, sa_key) as server:
        (tmp_path / "outputs.json").write_text(json.dumps(
            {STACK: {**OUTPUTS, "endpoint": server.url, "ca_certificate": tls.ca_b64}}))
        use_adc(server, monkeypatch, tmp_path)
        # Polls a loopback server: a look every 50 ms, not every second (cancel) or 3 (a log stream that broke)
        monkeypatch.setattr(stack_runs, "POLL_S", 0.05)
        monkeypatch.setattr(gke, "LOG_POLL_S", 0.05)
        server.put({**manifest("pretrain", "pretrain-r1"), "status": {
            "jobDeploymentStatus": "Running", "jobStatus": "RUNNING", "rayClusterName": RAY_CLUSTER,
            "startTime": "2026-01-01T00:01:00Z"}})
        server.put({**manifest("serve", "serve"), "status": {
            "serviceStatus": "Running", "conditions": [{"type": "Ready", "status": "True"}]}})
        newer = manifest("pretrain", "nightly-r2")
        newer["metadata"]["labels"][names.WORKLOAD_LABEL] = "job"  # a kind added after this version
        newer["metadata"]["creationTimestamp"] = "2026-01-02T00:00:00Z"
        server.put(newer)
        foreign = manifest("pretrain", "theirs")
        foreign["metadata"]["labels"] = {"team": "a"}
        server.put(foreign)
        server.add_pod("pretrain-r1-submit", {"job-name": "pretrain-r1"}, ["driver: started", "RAYTPU_TRAIN_RESULT {}"])
        server.add_pod(f"{RAY_CLUSTER}-worker-0", {"ray.io/cluster": RAY_CLUSTER, "ray.io/node-type": "worker"}, [],
                       container="ray-worker")
        yield server


def main(*argv: str) -> int:
    return cli.main(list(argv))


def test_runs_lists_the_kits_rayjobs_and_rayservices_of_any_kind_as_json_and_as_a_table(
        api: KubeApiServer, capsys: pytest.CaptureFixture[str]) -> None:
    assert main("runs", "--stack", STACK, "--json") == 0
    found = {r["run"]: r for r in json.loads(capsys.readouterr().out)["runs"]}
    assert list(found) == ["pretrain-r1", "serve", "nightly-r2"]  # oldest first; not the RayJob the kit did not make
    assert found["pretrain-r1"] == {
        "run": "pretrain-r1", "object": "RayJob", "kind": "train", "workload": "pretrain", "slice": "train",
        "state": "Running/RUNNING", "age_s": found["pretrain-r1"]["age_s"], "started_at": "2026-01-01T00:01:00Z",
        "done": False}
    assert found["pretrain-r1"]["age_s"] == pytest.approx(time.time() - 1767225600, abs=60)
    assert (found["serve"]["object"], found["serve"]["kind"], found["serve"]["state"]) == ("RayService", "serve",
                                                                                          "Ready")
    assert (found["nightly-r2"]["kind"], found["nightly-r2"]["state"]) == ("job", "New/-")
    assert api.of("GET", "/rayjobs")[0].query["labelSelector"] == "app.kubernetes.io/managed-by=raytpu"

    assert main("runs", "--stack", STACK) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split() == ["RUN", "OBJECT", "KIND", "WORKLOAD", "SLICE", "STATE", "AGE"]
    assert lines[2].split()[:6] == ["pretrain-r1", "RayJob", "train", "pretrain", "train", "Running/RUNNING"]
    assert lines[2].split()[6].endswith("d")


def test_logs_prints_the_submitter_pods_log_and_follow_streams_it_until_the_job_ends(
        api: KubeApiServer, capsys: pytest.CaptureFixture[str]) -> None:
    assert main("runs", "logs", "pretrain-r1", "--stack", STACK) == 0
    assert capsys.readouterr().out == "driver: started\nRAYTPU_TRAIN_RESULT {}\n"

    def finish() -> None:
        time.sleep(0.5)
        api.set_status("rayjobs", "pretrain-r1", {"jobDeploymentStatus": "Complete", "jobStatus": "SUCCEEDED"})

    ender = threading.Thread(target=finish)
    ender.start()
    assert main("runs", "logs", "pretrain-r1", "--follow", "--stack", STACK) == 0
    ender.join()
    captured = capsys.readouterr()
    assert captured.out == "driver: started\nRAYTPU_TRAIN_RESULT {}\n"
    assert "pretrain-r1: Complete/SUCCEEDED" in captured.err
    assert any(r.query.get("follow") == "true" for r in api.of("GET", "/log"))


def test_a_ranks_output_on_a_stack_is_exit_1_saying_where_it_is_and_how_to_read_it(
        api: KubeApiServer, capsys: pytest.CaptureFixture[str]) -> None:
    assert main("runs", "logs", "pretrain-r1", "--rank", "1", "--stack", STACK) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err
    assert f"rank 1's output is in {stack_runs.TRAIN_LOGS} inside its worker pod ({RAY_CLUSTER}-worker-0)" in err
    assert f"kubectl exec -n ray POD -c ray-worker -- sh -c 'cat {stack_runs.TRAIN_LOGS}'" in err


def test_logs_of_a_job_without_a_submitter_pod_yet_is_exit_1(api: KubeApiServer,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    assert main("runs", "logs", "nightly-r2", "--stack", STACK) == 1
    assert "error: nightly-r2: no submitter pod (not started yet" in capsys.readouterr().err


def test_cancel_deletes_the_rayjob_and_waits_until_its_ray_clusters_pods_are_gone(
        api: KubeApiServer, capsys: pytest.CaptureFixture[str]) -> None:
    def collect_garbage() -> None:  # what Kubernetes does with the RayCluster the RayJob owns, once it is deleted
        while api.get_object("rayjobs", "pretrain-r1") is not None:
            time.sleep(0.05)
        time.sleep(0.3)
        api.remove("pods", f"{RAY_CLUSTER}-worker-0")

    collector = threading.Thread(target=collect_garbage)
    collector.start()
    assert main("runs", "cancel", "pretrain-r1", "--stack", STACK) == 0
    collector.join()
    err = capsys.readouterr().err
    assert "pretrain-r1: RayJob deleted" in err
    assert "cancelled; no pod of its Ray cluster is left (slice train free)" in err
    [delete] = api.of("DELETE")
    assert delete.path.endswith("/rayjobs/pretrain-r1") and delete.query["propagationPolicy"] == "Background"
    assert api.get_object("rayjobs", "serve") is None and api.get_object("rayservices", "serve") is not None


def test_cancel_of_a_rayjob_kuberay_keeps_is_exit_1_after_the_timeout(
        api: KubeApiServer, capsys: pytest.CaptureFixture[str]) -> None:
    api.fail("DELETE", "/rayjobs/nightly-r2", 200, {"kind": "Status", "status": "Success"})  # a finalizer holds it
    assert main("runs", "cancel", "nightly-r2", "--timeout-s", "1", "--stack", STACK) == 1
    assert "error: nightly-r2: RayJob still there after 1s" in capsys.readouterr().err



def test_cancel_waits_for_every_ray_cluster_of_the_run_an_earlier_attempts_too(
        api: KubeApiServer, capsys: pytest.CaptureFixture[str]) -> None:
    """A retry's RayJob names only its new cluster; the earlier attempt's, still going, holds the slice too.
    Source: KubeRay v1.7.0 utils/constant.go RayOriginatedFromCRNameLabelKey (every pod of the run's clusters)."""
    earlier = "pretrain-r1-raycluster-a1-worker-0"
    api.add_pod(earlier, {"ray.io/cluster": "pretrain-r1-raycluster-a1", "ray.io/node-type": "worker",
                          "raytpu.dev/ray-cluster": "job-pretrain-r1"}, [], container="ray-worker")

    def collect_garbage() -> None:
        while api.get_object("rayjobs", "pretrain-r1") is not None:
            time.sleep(0.05)
        api.remove("pods", f"{RAY_CLUSTER}-worker-0")
        time.sleep(0.5)  # cancel (polling every 50 ms) must still be waiting here: the earlier attempt's pod is left
        gone.append(time.monotonic())
        api.remove("pods", earlier)

    gone: list[float] = []
    collector = threading.Thread(target=collect_garbage)
    collector.start()
    assert main("runs", "cancel", "pretrain-r1", "--stack", STACK) == 0
    ended = time.monotonic()
    collector.join()
    assert gone and ended >= gone[0]
    assert "cancelled; no pod of its Ray cluster is left" in capsys.readouterr().err


def test_follow_resumes_a_broken_stream_and_a_replacement_pod_prints_no_line_twice(
        api: KubeApiServer, capsys: pytest.CaptureFixture[str]) -> None:
    """Issue 49: a broken stream lost the rest of the log, and a replacement submitter pod (same Ray job) replayed it
    whole (`ray job logs --follow` from the start). Source: KubeRay v1.7.0 rayjob_controller.go (a retry gets a new
    status.jobId; a replacement pod of the submitter Job keeps it)."""
    running = {"jobDeploymentStatus": "Running", "jobStatus": "RUNNING", "rayClusterName": RAY_CLUSTER,
               "jobId": "pretrain-r1-abcde", "startTime": "2026-01-01T00:01:00Z"}
    api.set_status("rayjobs", "pretrain-r1", running)
    api.add_pod("pretrain-r1-submit", {"job-name": "pretrain-r1"}, ["driver: started", "step 1", "step 2"])
    api.break_log("pretrain-r1-submit", 2, 3)  # read twice, broken each time: after "step 1", then after "step 2"

    def reads(pod: str) -> int:
        return sum(1 for r in api.of("GET", f"/pods/{pod}/log") if r.query.get("follow") == "true")

    def run_on() -> None:
        while reads("pretrain-r1-submit") < 2:
            time.sleep(0.05)
        time.sleep(0.3)  # the submitter pod is replaced (its node lost): the new one replays the job's whole log
        api.add_pod("pretrain-r1-submit-2", {"job-name": "pretrain-r1"},
                    ["following job pretrain-r1-abcde", "driver: started", "step 1", "step 2", "step 3",
                     "RAYTPU_TRAIN_RESULT {}"], created="2026-01-01T00:05:00Z")
        while reads("pretrain-r1-submit-2") < 1:
            time.sleep(0.05)
        time.sleep(0.5)
        api.set_status("rayjobs", "pretrain-r1", {**running, "jobDeploymentStatus": "Complete",
                                                  "jobStatus": "SUCCEEDED"})

    runner = threading.Thread(target=run_on)
    runner.start()
    assert main("runs", "logs", "pretrain-r1", "--follow", "--stack", STACK) == 0
    runner.join()
    assert capsys.readouterr().out.splitlines() == [
        "driver: started", "step 1", "step 2", "following job pretrain-r1-abcde", "step 3", "RAYTPU_TRAIN_RESULT {}"]


def test_follow_past_its_timeout_is_exit_1_saying_the_run_goes_on(
        api: KubeApiServer, capsys: pytest.CaptureFixture[str]) -> None:
    """It stopped after an hour with exit 0 while the run went on; now it ends with the run, or says why."""
    assert main("runs", "logs", "pretrain-r1", "--follow", "--timeout-s", "1", "--stack", STACK) == 1
    err = capsys.readouterr().err
    assert "error: pretrain-r1: still Running/RUNNING after --timeout-s 1 (the run goes on" in err


def test_follow_with_no_timeout_waits_for_the_run() -> None:
    from raytpu.commands import runs as runs_command
    from raytpu.core.specs.kinds import MAX_RUN_TIME_S

    assert runs_command.FOLLOW_S > MAX_RUN_TIME_S  # longer than any run's deadline

BAD = [
    (("runs", "cancel", "nope", "--stack", STACK),
     "error: RUN: 'nope' is not allowed (no such run here); valid: pretrain-r1, serve, nightly-r2"),
    (("runs", "logs", "theirs", "--stack", STACK),
     "error: RUN: 'theirs' is not allowed (no such run here); valid: pretrain-r1, serve, nightly-r2"),
    (("runs",), "error: --stack: is required (or --local)"),
    (("runs", "logs", "pretrain-r1"), "error: --stack: is required (or --local)"),
    (("runs", "--local", "--stack", STACK), "error: --stack: 'ray-tpu-cluster' is not allowed with --local"),
    (("runs", "cancel", "x", "--stack", STACK, "--dir", "d"), "error: --dir: 'd' is not allowed without --local"),
    (("runs", "logs", "x", "--rank", "-2", "--stack", STACK), "error: --rank: '-2' is not a world rank; valid: an "
                                                              "integer >= 0"),
    (("runs", "logs", "x", "--rank", "1.5", "--stack", STACK), "error: --rank: '1.5' is not a world rank"),
    (("runs", "logs", "--stack", STACK), "error: RUN: is required"),
    (("runs", "stop", "x"), "error: ACTION: invalid choice: 'stop'"),
    (("runs", "cancel", "x", "--timeout-s", "0", "--stack", STACK), "error: --timeout-s:"),
    (("runs", "--stack", "other-cluster"), "error: --stack:"),
    (("runs", "--stack", STACK, "--outputs", "missing.json"), "error: --outputs: cannot read 'missing.json'"),
    (("runs", "--stack", STACK, "--follow"), "error: --follow: is not a known option"),
]


@pytest.mark.parametrize(("argv", "message"), BAD, ids=[" ".join(a) for a, _ in BAD])
def test_bad_input_is_exit_2_with_one_clear_line_and_nothing_deleted(
        api: KubeApiServer, capsys: pytest.CaptureFixture[str], argv: tuple[str, ...], message: str) -> None:
    assert main(*argv) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1 and "Traceback" not in err
    assert not api.of("DELETE")


def test_an_unreachable_local_cluster_is_exit_1(tmp_path: Path) -> None:
    token = tmp_path / "auth_token"
    token.write_text("t" * 64)
    LocalCluster(str(tmp_path), "/tmp/raytpu-none", "127.0.0.1:1", {}, [], dashboard="http://127.0.0.1:1",
                 auth_token_path=str(token)).save()
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_AUTH")}  # Ray reads a token once a process
    done = subprocess.run([sys.executable, "-m", "raytpu", "runs", "--local", "--dir", str(tmp_path)], env=env,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 1, done.stderr
    assert done.stderr.startswith("error: local: the cluster's Job Submission API at http://127.0.0.1:1 did not "
                                  "answer"), done.stderr
    assert done.stderr.count("\n") == 1


# ---------------------------------------------------------------------- the emulated slice, without a cluster


def record(job_id: str, rank: int, message: str) -> str:
    """One line of a Ray Train 2.60 worker's application log (JSONFormatter, CoreContextFilter, TrainContextFilter)."""
    return json.dumps({"asctime": "2026-01-01 00:00:00,000", "levelname": "INFO", "message": message,
                       "job_id": job_id, "worker_id": "w", "node_id": "n", "run_name": "train-r1",
                       "component": "worker", "world_rank": rank, "local_rank": 0, "node_rank": rank})


def test_rank_records_keep_the_jobs_records_of_each_rank() -> None:
    lines = [record("02000000", 0, "a"), record("03000000", 0, "other job"), "{partial", record("02000000", 1, "b"),
             json.dumps({"job_id": "02000000", "message": "the controller's, no rank"})]
    assert list(local_runs.rank_records(lines, "02000000")) == [(0, "a"), (1, "b")]


class FakeJobs:
    """What :mod:`raytpu.local.running.runs` asks of the Job Submission API, for one ended job."""

    def __init__(self, job_id: str) -> None:
        from ray.job_submission import JobStatus

        self.info = type("Info", (), {"status": JobStatus.SUCCEEDED, "job_id": job_id})()

    def get_job_info(self, _run: str) -> Any:
        return self.info


def test_a_ranks_output_is_read_from_every_nodes_train_logs_and_an_absent_rank_lists_those_seen(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    nodes = []
    for host in range(2):
        folder = tmp_path / f"node{host}" / "session_2026" / "logs" / "train"
        folder.mkdir(parents=True)
        (folder / f"ray-train-app-worker-{host}.log").write_text(
            record("02000000", host, f"hello from {host}") + "\n" + record("02000000", host, "bye") + "\n")
        nodes.append(NodeProc("host", 1, "", temp=str(tmp_path / f"node{host}")))
    cluster = LocalCluster(str(tmp_path), str(tmp_path / "none"), "x", {}, [], nodes=nodes)
    run = Run("train-r1", "Ray job", "train", "train", "s", "SUCCEEDED", 1.0, "", True)
    lines: list[str] = []
    local_runs.rank_log(cluster, FakeJobs("02000000"), run, 1, follow=True, timeout_s=5,  # type: ignore[arg-type]
                        sink=lines.append)
    assert lines == ["hello from 1", "bye"]
    with pytest.raises(Exception) as absent:
        local_runs.rank_log(cluster, FakeJobs("02000000"), run, 7, follow=False, timeout_s=5,  # type: ignore[arg-type]
                            sink=lines.append)
    assert str(absent.value) == "--rank: 7 is not allowed (no output of that rank in train-r1); valid: 0, 1"


def test_a_local_job_is_a_run_with_its_labels_else_its_spec() -> None:
    from ray.job_submission import JobDetails, JobStatus, JobType

    from raytpu.core.specs.spec import WORKLOAD_ENV

    spec = json.dumps({"name": "pretrain", "kind": "train", "slice": {"name": "local"}})
    job = JobDetails(type=JobType.SUBMISSION, submission_id="pretrain-r1", job_id="02000000", status=JobStatus.RUNNING,
                     entrypoint="python -m raytpu.workloads.train", start_time=1_000_000, metadata={},
                     runtime_env={"env_vars": {WORKLOAD_ENV: spec}})
    assert local_runs.to_run(job, now=1_060.0) == Run("pretrain-r1", "Ray job", "train", "pretrain", "local",
                                                      "RUNNING", 60.0, "1970-01-01T00:16:40Z", False)
    labelled = job.model_copy(update={"metadata": {names.WORKLOAD_LABEL: "job", names.SLICE_LABEL: "s"},
                                      "runtime_env": None, "status": JobStatus.STOPPED})
    assert local_runs.to_run(labelled, now=1_060.0).__dict__ | {} == {
        **Run("pretrain-r1", "Ray job", "job", "", "s", "STOPPED", 60.0, "1970-01-01T00:16:40Z", True).__dict__}


@pytest.mark.parametrize(("seconds", "shown"), [(None, "-"), (5.2, "5s"), (119, "119s"), (120, "2m"), (7200, "2h"),
                                                (3 * 86400, "3d")])
def test_ages_read_as_kubectl_shows_them(seconds: float | None, shown: str) -> None:
    assert age(seconds) == shown


def test_a_rayjob_a_user_wrote_with_yaml_runtime_env_and_no_status_still_lists() -> None:
    from raytpu.core.specs.spec import WORKLOAD_ENV

    obj: dict[str, Any] = {"metadata": {"name": "mine", "labels": {names.WORKLOAD_LABEL: "job"}},
                           "spec": {"runtimeEnvYAML": f"env_vars:\n  {WORKLOAD_ENV}: '{{\"name\": \"nightly\"}}'\n"}}
    assert stack_runs.to_run("RayJob", obj, now=0.0) == Run("mine", "RayJob", "job", "nightly", "", "New/-", None, "")
    obj["spec"]["runtimeEnvYAML"] = "env_vars: [unclosed"
    assert stack_runs.to_run("RayJob", obj, now=0.0).workload == ""
