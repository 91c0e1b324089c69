"""Ctrl-C at any moment of ``raytpu submit NAME --local --wait`` ends it with exit 130 and leaves nothing running or
half-built (issue 68 item 1, "Interrupted and starved runs"), on one emulated v6e 2x2 slice shared by the module.

- During the first submit's lock build (``uv`` builds the venv of a ``requirements:`` lock): a terminal's Ctrl-C
  signals the whole process group, uv too; a SIGINT to the raytpu process alone leaves uv to the kit. No
  ``*.building`` folder stays in the run folder's ``envs/``, no uv runs on, no Ray job was submitted.
- While Ray loads (``python -X importtime`` prints each module as it is imported: the signal comes inside Ray's
  compiled ``_raylet``): its KeyboardInterrupt was dropped there (the run was submitted and followed, RUNNING on) or
  left ``ray`` half-imported (the stop's own import failed: exit 1, a traceback).
- Once the run runs (a sleeping ``kind: job``, a team's ``train_loop``): it is STOPPED and its placement groups gone
  within seconds, as the emulated-slice guide says.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import psutil
import pytest
from _terminal import as_from_a_terminal

from raytpu.local.slice import procs, state

pytestmark = [pytest.mark.slice, pytest.mark.timeout(600)]

HOLD = 'import time\nprint("holding the slice", flush=True)\ntime.sleep(600)\n'
LOOP = '''\
import time
import ray.train


def train_loop(config):
    for step in range(config["steps"]):
        print(f"step {step + 1}", flush=True)
        time.sleep(0.5)
        ray.train.report({"step": step + 1})
'''
CONFIG = """\
project: my-ml-project
region: us-east5
cluster: {name: ray-tpu}
slices:
  - {name: s, generation: v6e, topology: 2x2, zone: us-east5-b}
workloads:
  - {name: req, kind: job, slice: s, code: ./src, requirements: requirements.txt, entrypoint: python hold.py}
  - {name: hold, kind: job, slice: s, code: ./src, entrypoint: python hold.py}
  - {name: loop, kind: train, slice: s, code: ./src, train_loop: "loop:train_loop", train_config: {steps: 1000}}
"""
STOPPED_WITHIN_S = 15.0
"""Ctrl-C to exit 130 on a running run: Ray's stop (SIGTERM, SIGKILL 3 s later) and its placement groups removed."""


@pytest.fixture(scope="module")
def slice_(start_cluster: Callable[..., state.LocalCluster]) -> Iterator[state.LocalCluster]:
    from raytpu.core.tpu.plan import plan_slice

    cluster = start_cluster(plan_slice("v6e", "2x2"))
    yield cluster
    procs.stop(cluster.run_dir)


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("project")
    for rel, text in {"src/hold.py": HOLD, "src/loop.py": LOOP, "src/requirements.txt": "inflection>=0.5\n",
                      "raytpu.yaml": CONFIG}.items():
        (folder / rel).parent.mkdir(parents=True, exist_ok=True)
        (folder / rel).write_text(text)
    return folder


class Submit:
    """``raytpu submit WORKLOAD --local --wait`` in a process group of its own, its output read as it comes."""

    def __init__(self, project: Path, cluster: state.LocalCluster, workload: str, run_id: str, cache: Path) -> None:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("RAY_AUTH", "RAY_ADDRESS", "RAY_API"))}
        self.proc = subprocess.Popen(
            [sys.executable, "-X", "importtime", "-m", "raytpu", "submit", workload, "--local", "--wait", "--config",
             str(project / "raytpu.yaml"), "--dir", cluster.run_dir, "--run-id", run_id],
            env=env | {"XDG_CACHE_HOME": str(cache)}, cwd=project, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
            text=True, start_new_session=True, preexec_fn=as_from_a_terminal)
        self.lines: list[str] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.append(line.rstrip("\n"))

    @property
    def text(self) -> str:
        return "\n".join(line for line in self.lines if not line.startswith("import time:"))

    def wait_for(self, seen: Callable[[str], bool], timeout_s: float = 300) -> None:
        deadline, looked = time.monotonic() + timeout_s, 0
        while time.monotonic() < deadline and self.proc.poll() is None:
            while looked < len(self.lines):
                looked += 1
                if seen(self.lines[looked - 1]):
                    return
            time.sleep(0.005)
        pytest.fail(f"never seen; output:\n{self.text[-3000:]}")

    def interrupt(self, whole_group: bool) -> float:
        """Ctrl-C as a terminal sends it (the whole group) or to the raytpu process alone; when it was sent."""
        (os.killpg if whole_group else os.kill)(self.proc.pid, signal.SIGINT)
        return time.monotonic()

    def ended(self, timeout_s: float = 120) -> int:
        try:
            code = self.proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
            pytest.fail(f"still running {timeout_s:g}s after Ctrl-C; output:\n{self.text[-3000:]}")
        self._reader.join(timeout=10)
        return code


def job_state(cluster: state.LocalCluster, run: str) -> tuple[str, list[str]] | None:
    """The Ray job's status and its placement groups not removed; None when it was never submitted."""
    from raytpu.local.slice.connection import speak_auth

    speak_auth(cluster)
    from ray.job_submission import JobSubmissionClient
    from ray.util.state import list_placement_groups

    try:
        info = JobSubmissionClient(cluster.dashboard).get_job_info(run)
    except RuntimeError as exc:  # Ray 2.60 JobSubmissionClient.get_job_info: 404, no such job
        assert "does not exist" in str(exc), exc
        return None
    groups = list_placement_groups(address=cluster.dashboard, filters=[("creator_job_id", "=", info.job_id)],
                                   raise_on_missing_output=False) if info.job_id else []
    return str(info.status.value), [g.placement_group_id for g in groups if g.state != "REMOVED"]


def uv_child(proc: subprocess.Popen[str]) -> psutil.Process | None:
    """A ``uv`` the submit runs (resolving the lock, making its venv, installing into it), or None."""
    try:
        children = psutil.Process(proc.pid).children(recursive=True)
    except psutil.Error:
        return None
    for child in children:
        try:
            if Path(child.cmdline()[0]).name == "uv":
                return child
        except (psutil.Error, IndexError):
            continue
    return None


def assert_nothing_built_or_running(cluster: state.LocalCluster, run: str, uv: psutil.Process | None = None) -> None:
    envs = Path(cluster.run_dir) / "envs"
    partial = [p.name for p in envs.iterdir() if p.name.endswith(".building")] if envs.is_dir() else []
    assert not partial, f"half-built venvs left in {envs}: {partial}"
    if uv is not None:
        _, alive = psutil.wait_procs([uv], timeout=5)
        assert not alive, f"uv {uv.pid} runs on after the submit ended"  # nothing writes into envs/ now
    assert job_state(cluster, run) is None  # never submitted


@pytest.fixture
def fresh(slice_: state.LocalCluster, tmp_path: Path) -> Path:
    """A first submit of the lock: no venv of it in the run folder, no lock in the cache (returned)."""
    shutil.rmtree(Path(slice_.run_dir) / "envs", ignore_errors=True)
    return tmp_path / "cache"


@pytest.mark.parametrize("whole_group", [True, False], ids=["terminal", "raytpu-only"])
def test_ctrl_c_during_the_lock_build_ends_the_submit_with_nothing_half_built(
        slice_: state.LocalCluster, project: Path, fresh: Path, whole_group: bool) -> None:
    run_id = "lockg" if whole_group else "lockp"
    submit = Submit(project, slice_, "req", run_id, fresh)
    uv = None
    deadline = time.monotonic() + 120
    while uv is None and submit.proc.poll() is None and time.monotonic() < deadline:
        uv = uv_child(submit.proc)
        time.sleep(0.002)
    assert uv is not None, f"no uv seen building the lock; output:\n{submit.text[-3000:]}"
    submit.interrupt(whole_group)
    assert submit.ended() == 130, submit.text[-3000:]
    assert "Traceback" not in submit.text and "error: interrupted" in submit.text, submit.text[-3000:]
    assert_nothing_built_or_running(slice_, f"req-{run_id}", uv)


@pytest.mark.parametrize(("workload", "whole_group"), [("req", True), ("hold", False)],
                         ids=["lock-terminal", "plain-raytpu-only"])
def test_ctrl_c_while_ray_loads_ends_the_submit_with_nothing_submitted(
        slice_: state.LocalCluster, project: Path, fresh: Path, workload: str, whole_group: bool) -> None:
    run_id = "rayg" if whole_group else "rayp"
    submit = Submit(project, slice_, workload, run_id, fresh)
    submit.wait_for(lambda line: line.startswith("import time:") and line.endswith(" ray._version"))  # in _raylet's
    submit.interrupt(whole_group)
    assert submit.ended() == 130, submit.text[-3000:]
    assert "Traceback" not in submit.text, submit.text[-3000:]
    assert f"error: interrupted: run {workload}-{run_id} was never submitted; nothing runs" in submit.text
    assert_nothing_built_or_running(slice_, f"{workload}-{run_id}")


@pytest.mark.parametrize(("workload", "running"), [("hold", "holding the slice"), ("loop", "step 2")])
def test_ctrl_c_on_a_running_run_stops_it_and_frees_the_slice_within_seconds(
        slice_: state.LocalCluster, project: Path, tmp_path: Path, workload: str, running: str) -> None:
    run = f"{workload}-run"
    submit = Submit(project, slice_, workload, "run", tmp_path / "cache")
    submit.wait_for(lambda line: line.endswith(running))
    sent = submit.interrupt(whole_group=True)
    assert submit.ended() == 130, submit.text[-3000:]
    took = time.monotonic() - sent
    assert f"error: interrupted: run {run} was stopped before it ended; its slice is free" in submit.text, \
        submit.text[-3000:]
    assert job_state(slice_, run) == ("STOPPED", [])
    assert took < STOPPED_WITHIN_S, f"{took:.1f}s from Ctrl-C to exit 130"
