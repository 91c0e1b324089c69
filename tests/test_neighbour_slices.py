"""Two emulated slices on one machine, and a followed run interrupted (issue 48), on real local clusters.

- Every process a cluster's nodes start knows its own cluster: Ray code that finds its cluster by itself (Ray Train's
  ``PlacementGroupCleaner`` reads the State API with no address) failed with "Found multiple active Ray instances"
  while a second cluster ran.
- Ctrl-C or SIGTERM during ``raytpu submit NAME --local`` stops the run and frees its slice (exit 130, the CLI
  contract's "interrupted"; no timeline that says it ended); a second Ctrl-C leaves it running and names
  ``raytpu runs cancel``.
- Two submissions in one second get two runs."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from _terminal import as_from_a_terminal

from raytpu.local.slice import procs, state

pytestmark = [pytest.mark.slice, pytest.mark.timeout(900)]

HOLD = '''\
import os, signal, sys, time
import ray
if os.environ.get("HOLD_IGNORES_SIGTERM"):
    signal.signal(signal.SIGTERM, signal.SIG_IGN)  # Ray then kills it after RAY_JOB_STOP_WAIT_TIME_S
ray.init()
group = ray.util.placement_group([{"CPU": 1}])
ray.get(group.ready())
print("holding the slice", flush=True)
time.sleep(600)
'''

FIND_OWN_CLUSTER = '''\
import ray
from ray.util.state import list_nodes


@ray.remote(num_cpus=0)
def nodes_seen_from_a_worker():
    # as Ray Train's PlacementGroupCleaner does: the State API with no address, from a worker process
    return len(list_nodes())


ray.init()
print("a worker sees", ray.get(nodes_seen_from_a_worker.remote()), "nodes", flush=True)
'''

CONFIG = """\
project: my-ml-project
region: us-east5
cluster: {name: ray-tpu}
slices:
  - {name: s, generation: v6e, topology: 2x2, zone: us-east5-b}
workloads:
  - {name: hold, kind: job, slice: s, code: ./src, entrypoint: python hold.py}
  - {name: find, kind: job, slice: s, code: ./src, entrypoint: python find.py}
  - {name: quick, kind: job, slice: s, code: ./src, entrypoint: python -c pass}
"""


@pytest.fixture(scope="module")
def neighbours(start_cluster: Callable[..., state.LocalCluster]) -> Iterator[tuple[state.LocalCluster,
                                                                                 state.LocalCluster]]:
    """Two one-host v6e 2x2 slices, each its own local cluster, side by side."""
    from raytpu.core.tpu.plan import plan_slice

    plan = plan_slice("v6e", "2x2")
    first = start_cluster(plan)
    try:
        second = start_cluster(plan)
    except BaseException:
        procs.stop(first.run_dir)
        raise
    yield first, second
    procs.stop(first.run_dir)
    procs.stop(second.run_dir)


def project(folder: Path) -> Path:
    for rel, text in {"src/hold.py": HOLD, "src/find.py": FIND_OWN_CLUSTER, "raytpu.yaml": CONFIG}.items():
        (folder / rel).parent.mkdir(parents=True, exist_ok=True)
        (folder / rel).write_text(text)
    return folder / "raytpu.yaml"


def user_env(**extra: str) -> dict[str, str]:
    """A user's shell: no Ray address or token of the caller's."""
    return {k: v for k, v in os.environ.items() if not k.startswith(("RAY_AUTH", "RAY_ADDRESS", "RAY_API"))} | extra


def submit(config: Path, cluster: state.LocalCluster, workload: str, *extra: str, log: Path,
           env: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
    with log.open("wb") as sink:
        return subprocess.Popen([sys.executable, "-m", "raytpu", "submit", workload, "--local", "--wait", "--config",
                                 str(config), "--dir", cluster.run_dir, *extra], env=env or user_env(), stdout=sink,
                                stderr=subprocess.STDOUT, cwd=config.parent, start_new_session=True,
                                preexec_fn=as_from_a_terminal)


def wait_for(log: Path, text: str, proc: subprocess.Popen[bytes], timeout_s: float = 300) -> None:
    deadline = time.monotonic() + timeout_s
    while text not in log.read_text() and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.2)
    assert text in log.read_text(), log.read_text()[-3000:]


def job_and_groups(cluster: state.LocalCluster, submission_id: str) -> tuple[str, list[str]]:
    """The job's status and its placement groups not removed."""
    from ray.job_submission import JobSubmissionClient
    from ray.util.state import list_placement_groups

    from raytpu.local.slice.connection import speak_auth

    speak_auth(cluster)
    info = JobSubmissionClient(cluster.dashboard).get_job_info(submission_id)
    groups = list_placement_groups(address=cluster.dashboard, filters=[("creator_job_id", "=", info.job_id)],
                                   raise_on_missing_output=False) if info.job_id else []
    return str(info.status.value), [g.placement_group_id for g in groups if g.state != "REMOVED"]


def test_a_worker_finds_its_own_cluster_while_another_runs(neighbours: tuple[state.LocalCluster, state.LocalCluster],
                                                           tmp_path: Path) -> None:
    config = project(tmp_path)
    for cluster in neighbours:
        log = tmp_path / f"find-{Path(cluster.run_dir).name}.log"
        proc = submit(config, cluster, "find", log=log)
        assert proc.wait(timeout=300) == 0, log.read_text()[-3000:]
        assert "a worker sees 2 nodes" in log.read_text(), log.read_text()[-3000:]  # its head and its host
        assert "multiple active Ray instances" not in log.read_text()


@pytest.mark.parametrize(("sig", "code", "name", "run_id"), [(signal.SIGINT, 130, "Ctrl-C", "int"),
                                                             (signal.SIGTERM, 130, "SIGTERM", "term")])
def test_an_interrupted_submit_stops_its_run_and_frees_the_slice(
        neighbours: tuple[state.LocalCluster, state.LocalCluster], tmp_path: Path, sig: int, code: int, name: str,
        run_id: str) -> None:
    cluster, config = neighbours[0], project(tmp_path)
    run, log = f"hold-{run_id}", tmp_path / "submit.log"
    proc = submit(config, cluster, "hold", "--run-id", run_id, log=log)
    try:
        wait_for(log, "holding the slice", proc)
        os.kill(proc.pid, sig)
        assert proc.wait(timeout=180) == code, log.read_text()[-3000:]
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    text = log.read_text()
    assert f"{name}: stopping run {run}" in text
    assert f"error: interrupted: run {run} was stopped before it ended; its slice is free" in text, text[-3000:]
    assert "where the minutes went" not in text and "Traceback" not in text  # no timeline that says it ended
    assert job_and_groups(cluster, run) == ("STOPPED", [])


def test_a_second_ctrl_c_leaves_the_run_going_and_names_the_command_that_cancels_it(
        neighbours: tuple[state.LocalCluster, state.LocalCluster], tmp_path: Path) -> None:
    cluster, config = neighbours[0], project(tmp_path)
    log = tmp_path / "submit.log"
    # the driver ignores SIGTERM: Ray's stop waits seconds before it kills it, time for a second Ctrl-C
    proc = submit(config, cluster, "hold", "--run-id", "twice", log=log, env=user_env(HOLD_IGNORES_SIGTERM="1"))
    try:
        wait_for(log, "holding the slice", proc)
        os.kill(proc.pid, signal.SIGINT)
        wait_for(log, "Ctrl-C: stopping run hold-twice", proc)
        os.kill(proc.pid, signal.SIGINT)
        assert proc.wait(timeout=60) == 130, log.read_text()[-3000:]
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    text = log.read_text()
    cancel = f"raytpu runs cancel hold-twice --local --dir {cluster.run_dir}"
    assert f"error: interrupted: run hold-twice goes on, holding its slice; cancel it with `{cancel}`" in text, text
    assert "Traceback" not in text
    done = subprocess.run([sys.executable, "-m", "raytpu", *cancel.split()[1:]], env=user_env(), capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert job_and_groups(cluster, "hold-twice") == ("STOPPED", [])


def test_two_submits_in_one_second_are_two_runs(neighbours: tuple[state.LocalCluster, state.LocalCluster],
                                                tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Both submissions see the same second (names.run_id fixed): the second moves on to the next id."""
    from raytpu import config as config_mod
    from raytpu.core.common import names
    from raytpu.images import team
    from raytpu.local.running.submission import submit_local
    from raytpu.runs.following import Streams

    cluster, config = neighbours[1], project(tmp_path)
    spec = config_mod.load(str(config), workload="quick")
    monkeypatch.setattr(names, "run_id", lambda now=None: "t5x2kq")
    ended: list[str] = []
    streams = Streams(out=lambda _line: None, err=lambda _line: None, ended=lambda run: ended.append(run.name))
    work = spec.workload("quick")
    code = team.prepare(spec, work)  # its folder read once, as `submit` reads it
    for _ in range(2):
        assert submit_local(work, directory=cluster.run_dir, run_id=None, timeout_s=300, streams=streams,
                            code=code) == 0
    assert ended == ["quick-t5x2kq", f"quick-{names.next_run_id('t5x2kq')}"]
