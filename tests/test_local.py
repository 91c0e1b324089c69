"""raytpu.local: the emulated slice's environment, state and the `raytpu local` command across invocations."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import psutil
import pytest

from raytpu.config import load
from raytpu.core.common.errors import RuntimeFailure
from raytpu.core.tpu.plan import SlicePlan, plan_slice
from raytpu.local.slice import diagnose, emulation, launch, procs, startup, state, status_table
from raytpu.local.slice import procs as local_procs

EXAMPLE = Path(__file__).resolve().parent.parent / "raytpu.example.yaml"


def example_train_plan() -> SlicePlan:
    from raytpu.local.slice.from_config import config_slice_plan

    return config_slice_plan(load(EXAMPLE))


@pytest.mark.unit
def test_host_env_multi_host_matches_what_the_gke_webhook_injects() -> None:
    plan = example_train_plan()
    env = emulation.host_env(plan, "s-0", 2)
    assert env["TPU_NAME"] == "s-0"
    assert env["TPU_WORKER_ID"] == "2"
    assert env["TPU_ACCELERATOR_TYPE"] == plan.gke_accelerator_type
    assert env["TPU_TOPOLOGY"] == plan.topology
    assert len(env["TPU_WORKER_HOSTNAMES"].split(",")) == plan.hosts
    assert env["JAX_PLATFORMS"] == "cpu"
    assert env["JAX_NUM_CPU_DEVICES"] == str(plan.chips_per_host)


@pytest.mark.unit
def test_host_env_single_host_has_no_worker_hostnames() -> None:
    single = plan_slice("v6e", "2x4")
    assert single.single_host
    assert "TPU_WORKER_HOSTNAMES" not in emulation.host_env(single, "s", 0)


MULTI_HOST = [("v4", "2x2x2"), ("v5e", "4x4"), ("v5p", "2x2x2"), ("v6e", "4x4"), ("tpu7x", "2x2x2")]


@pytest.mark.unit
@pytest.mark.parametrize(("gen", "topology"), MULTI_HOST)
def test_rays_tpu_detection_of_the_emulated_env_gives_the_plans_labels_and_resources(
        gen: str, topology: str, monkeypatch: pytest.MonkeyPatch) -> None:
    from ray._private.accelerators.tpu import TPUAcceleratorManager

    plan = plan_slice(gen, topology)
    for worker in (0, plan.hosts - 1):
        for key, value in emulation.host_env(plan, "s-0", worker).items():
            monkeypatch.setenv(key, value)
        assert TPUAcceleratorManager.get_current_node_accelerator_labels() | {
            "ray.io/accelerator-type": TPUAcceleratorManager.get_current_node_accelerator_type()
        } == plan.ray_labels("s-0", worker)
        extra = TPUAcceleratorManager.get_current_node_additional_resources() or {}
        assert extra.get("s-0") == 1
        assert (plan.head_resource in extra) == (worker == 0)


@pytest.mark.unit
def test_slice_names_are_distinct_and_name_the_pod_type() -> None:
    plan = example_train_plan()
    names = emulation.slice_names(plan, 3)
    assert len(set(names)) == 3
    assert all(plan.ray_pod_type in n for n in names)


@pytest.mark.unit
def test_every_emulated_node_runs_serves_hot_path_settings_unless_this_process_sets_them(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The proxy and replicas inherit their node's environment (docs/serving-profile.md); a value in this process's
    environment wins, so a bench can run Ray's defaults beside the kit's."""
    from raytpu.core.manifests.serving import DIRECT_STREAMING_ENV, SERVE_HOT_PATH_ENV

    cluster = state.LocalCluster(run_dir=str(tmp_path), temp_dir="/tmp/raytpu-x", address="127.0.0.1:1", plan={},
                                 slices=[])
    monkeypatch.delenv("RAY_SERVE_LOG_TO_STDERR", raising=False)
    monkeypatch.delenv("RAY_SERVE_EXPERIMENTAL_PIP_HAPROXY", raising=False)
    monkeypatch.setenv("RAY_SERVE_RUN_USER_CODE_IN_SEPARATE_THREAD", "1")
    monkeypatch.setenv("RAY_SERVE_ENABLE_HA_PROXY", "0")
    env = launch._base_env(cluster)
    assert env["RAY_SERVE_LOG_TO_STDERR"] == SERVE_HOT_PATH_ENV["RAY_SERVE_LOG_TO_STDERR"] == "0"
    assert env["RAY_SERVE_RUN_USER_CODE_IN_SEPARATE_THREAD"] == "1"
    assert env["RAY_SERVE_EXPERIMENTAL_PIP_HAPROXY"] == DIRECT_STREAMING_ENV["RAY_SERVE_EXPERIMENTAL_PIP_HAPROXY"]
    assert env["RAY_SERVE_ENABLE_HA_PROXY"] == "0"


@pytest.mark.unit
def test_emulated_nodes_run_serves_haproxy_with_one_thread_unless_this_process_says(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Ray's HAProxy manager reads its thread count from its node's environment, where Ray's default is 4; the
    emulated slice says 1 (bench/serve.py), and a value in this process's environment wins.
    Source: Ray 2.60 ``ray/serve/_private/constants.py`` ``RAY_SERVE_HAPROXY_NBTHREAD``."""
    from ray.serve._private import constants

    cluster = state.LocalCluster(run_dir=str(tmp_path), temp_dir="/tmp/raytpu-x", address="127.0.0.1:1", plan={},
                                 slices=[])
    monkeypatch.delenv("RAY_SERVE_HAPROXY_NBTHREAD", raising=False)
    assert constants.RAY_SERVE_HAPROXY_NBTHREAD == 4
    assert launch._base_env(cluster)["RAY_SERVE_HAPROXY_NBTHREAD"] == "1"
    monkeypatch.setenv("RAY_SERVE_HAPROXY_NBTHREAD", "4")
    assert launch._base_env(cluster)["RAY_SERVE_HAPROXY_NBTHREAD"] == "4"


@pytest.mark.unit
def test_emulated_nodes_prestart_no_workers_for_the_first_driver_unless_this_process_says(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The head's first driver is the kit's node check; workers prestarted for it serve no later job.
    Source: Ray 2.60 ``ray_config_def.h`` ``prestart_worker_first_driver``."""
    cluster = state.LocalCluster(run_dir=str(tmp_path), temp_dir="/tmp/raytpu-x", address="127.0.0.1:1", plan={},
                                 slices=[])
    monkeypatch.delenv("RAY_prestart_worker_first_driver", raising=False)
    assert launch._base_env(cluster)["RAY_prestart_worker_first_driver"] == "0"
    monkeypatch.setenv("RAY_prestart_worker_first_driver", "1")
    assert launch._base_env(cluster)["RAY_prestart_worker_first_driver"] == "1"


@pytest.mark.unit
def test_a_cluster_started_without_the_log_monitor_keeps_it_off_for_every_node_it_starts_later(tmp_path: Path) -> None:
    """``raytpu demo``'s drivers take no worker output (``log_to_driver=False``), so its nodes run no log monitor;
    the setting is in the cluster's state, so a host started again (the preemption drill) follows it.
    Source: Ray 2.60 ``ray.scripts.scripts.start`` ``--include-log-monitor``."""
    def flag(cluster: state.LocalCluster, head: bool) -> str:
        args = launch._node_args(cluster, head, "/tmp/raytpu-x/0")
        return args[args.index("--include-log-monitor") + 1]

    cluster = state.LocalCluster(run_dir=str(tmp_path), temp_dir="/tmp/raytpu-x", address="127.0.0.1:1", plan={},
                                 slices=[], dashboard="http://127.0.0.1:2")
    assert flag(cluster, True) == flag(cluster, False) == "true"  # `raytpu local up`: a team's driver reads it
    cluster.log_monitor = False
    cluster.save()
    loaded = state.LocalCluster.load(tmp_path)
    assert loaded is not None and loaded.log_monitor is False
    assert flag(loaded, True) == flag(loaded, False) == "false"


@pytest.mark.unit
def test_a_serving_workload_takes_set_overrides_onto_the_local_slice(tmp_path: Path) -> None:
    """``bench/serve.py --set`` reaches the app deployed locally as ``raytpu submit --set`` reaches a submitted one."""
    from raytpu.local.slice.from_config import serving_on_slice, serving_workload

    serve = next(w for w in load(EXAMPLE).workloads if w.kind.serves)
    cluster = state.LocalCluster(run_dir=str(tmp_path), temp_dir="/tmp/raytpu-x", address="127.0.0.1:1",
                                 plan=serve.plan.to_json(), slices=["s0"])
    changed = load(EXAMPLE, workload=serve.name, overrides=["engine_kwargs.stream_interval=4"]).workload(serve.name)
    work = serving_on_slice(cluster, changed)
    assert work.engine_kwargs == {**(serve.engine_kwargs or {}), "stream_interval": 4}
    assert work.slice == cluster.slice_spec and work.image is None
    assert serving_workload(cluster, str(EXAMPLE), serve.name) == serving_on_slice(cluster, serve)
    assert serving_workload(cluster, str(EXAMPLE), serve.name).engine_kwargs == serve.engine_kwargs


@pytest.mark.unit
def test_the_nodes_ray_cli_is_rays_own_without_its_serve_group() -> None:
    """``launch.RAY_CLI`` runs Ray's click group (``start`` among its commands) without importing Ray Serve, and with
    Ray Client reported missing. Source: Ray 2.60 ``ray.scripts.scripts`` (the ``serve`` group added in a ``try`` that
    skips it on ImportError; ``start`` sets a client port only when ``get_ray_client_dependency_error()`` is None)."""
    listed = subprocess.run([sys.executable, "-c", launch.RAY_CLI, "--help"], capture_output=True, text=True,
                            timeout=120, check=True).stdout
    commands = {line.split()[0] for line in listed.split("Commands:", 1)[1].splitlines() if line.strip()}
    assert {"start", "stop", "status"} <= commands
    assert "serve" not in commands
    # nor a Ray Client server on the head: `ray start` gives it one only when the client's dependencies import
    probe = launch.RAY_CLI.replace("scripts.main()", "print('ray.serve' in sys.modules, "
                                   "scripts.get_ray_client_dependency_error() is None)")
    assert probe != launch.RAY_CLI
    assert subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120,
                          check=True).stdout.strip() == "False False"


@pytest.mark.unit
def test_a_driver_reaches_its_own_cluster_not_one_this_process_spoke_to_before(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``speak_auth`` exports a cluster's addresses into this process; a driver started later for another cluster
    must not inherit them (the State API goes to ``RAY_API_SERVER_ADDRESS`` first: Ray 2.60
    ``ray.dashboard.utils.get_address_for_submission_client``). Found when a test's teardown listed another cluster's
    actors."""
    from raytpu.local.slice.connection import speak_auth

    cluster = state.LocalCluster(run_dir=str(tmp_path), temp_dir="/tmp/raytpu-x", address="127.0.0.1:1", plan={},
                                 slices=[], dashboard="http://127.0.0.1:2", auth_token_path="/tmp/raytpu-x/token")
    other = state.LocalCluster(run_dir=str(tmp_path / "o"), temp_dir="/tmp/raytpu-y", address="127.0.0.1:3",
                               plan={}, slices=[], dashboard="http://127.0.0.1:4", auth_token_path="/tmp/y")
    for key in ("RAY_ADDRESS", "RAY_API_SERVER_ADDRESS", "RAY_AUTH_MODE", "RAY_AUTH_TOKEN_PATH"):
        monkeypatch.delenv(key, raising=False)  # speak_auth below sets them; monkeypatch puts them back
    speak_auth(other)
    env = cluster.driver_env()
    assert (env["RAY_ADDRESS"], env["RAY_API_SERVER_ADDRESS"], env["RAY_AUTH_TOKEN_PATH"]) == (
        "127.0.0.1:1", "http://127.0.0.1:2", "/tmp/raytpu-x/token")


@pytest.mark.unit
def test_stop_without_a_cluster_is_a_no_op(tmp_path: Path) -> None:
    assert local_procs.stop(tmp_path) == 0


@pytest.mark.unit
def test_temp_prefix_outside_tmp_raytpu_is_rejected(monkeypatch: pytest.MonkeyPatch) -> None:
    from raytpu.core.common.errors import InvalidInput

    monkeypatch.setenv(state.ENV_TMP_PREFIX, "/home/x/")
    with pytest.raises(InvalidInput, match=state.ENV_TMP_PREFIX):
        state.temp_prefix()


def _raytpu(*args: str, run_dir: Path, timeout: float = 300, command: str = "local"
            ) -> subprocess.CompletedProcess[str]:
    # as a user runs them: no Ray token of the caller's; `up` makes the cluster's own, every later command reads it
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_AUTH")} | {"RAYTPU_LOCAL_DIR": str(run_dir)}
    return subprocess.run([sys.executable, "-m", "raytpu", command, *args], env=env, capture_output=True,
                          text=True, timeout=timeout, cwd=EXAMPLE.parent)


def assert_emulated_timeline(run: dict[str, Any], took_s: float, reserved: str = "measured",
                             compiled: str = "measured", smoke_checked: str = "not applicable",
                             trainer_started: str | None = None) -> None:
    """A local run's timeline (raytpu.core.common.timeline): every phase, in order; the ones the emulated slice lacks
    said so (the smoke check outside the demo), the ones it imitates marked emulated (``reserved`` too for the
    serving CPU twin, whose replica takes CPU bundles), the Ray ones measured; its durations add up to its wall time,
    which is within 5% of the wall time the caller measured around the whole command."""
    from raytpu.core.common import timeline
    rows = {r["phase"]: r for r in run["phases"]}
    assert list(rows) == list(timeline.PHASES)
    assert {p: rows[p]["status"] for p in timeline.PHASES} == {
        "applied": "emulated", "scheduled": "not applicable", "nodes_ready": "not applicable",
        "webhook_env": "emulated", "ray_joined": "measured", "reserved": reserved, "smoke_checked": smoke_checked,
        "trainer_started": compiled if trainer_started is None else trainer_started, "compiled": compiled,
        "first_step": "measured", "finished": "measured"}
    if compiled == "measured":  # from JAX's own monitoring events (workloads/support/compile_watch.py)
        assert "cache hit(s)" in rows["compiled"]["detail"]
    assert "no Kubernetes scheduler" in rows["scheduled"]["detail"]
    reached = [rows[p]["at_s"] for p in ("ray_joined", "reserved", "first_step", "finished")]
    assert reached == sorted(reached) and reached[-1] == run["wall_s"]
    assert sum(r["duration_s"] for r in rows.values()) == pytest.approx(run["wall_s"], abs=0.01)
    assert run["wall_s"] == pytest.approx(took_s, rel=0.05), (run["wall_s"], took_s)


@pytest.mark.slice
@pytest.mark.timeout(600)
def test_local_cli_up_status_smoke_down_across_invocations(tmp_path: Path) -> None:
    single = plan_slice("v6e", "2x2")  # one 4-chip host: the cheapest slice to bring up
    try:
        up = _raytpu("up", "--generation", single.generation, "--topology", single.topology, run_dir=tmp_path)
        assert up.returncode == 0, up.stderr
        assert "RAY_ADDRESS=" in up.stdout
        assert "worker 0 up" in up.stderr  # progress while nodes start

        cluster = state.LocalCluster.load(tmp_path)
        assert cluster is not None
        gcs = cluster.address.rsplit(":", 1)[1]  # no Ray Client server beside this head (launch.RAY_CLI)
        assert not [p.pid for p in psutil.process_iter(["cmdline"]) if "ray.util.client.server" in
                    " ".join(p.info["cmdline"] or []) and f":{gcs}" in " ".join(p.info["cmdline"] or [])]

        status = _raytpu("status", "--json", run_dir=tmp_path)
        assert status.returncode == 0, status.stderr
        nodes = json.loads(status.stdout)["nodes"]
        assert [n["alive"] for n in nodes] == [True, True]
        assert all(n["labels_ok"] for n in nodes)
        assert f"{single.head_resource}=1" in nodes[1]["resources"]

        # Ray's token authentication is on, as KubeRay's authOptions turn it on for GKE
        # (raytpu.core.common.names.AUTH_MODE): the Job Submission API refuses a request without the cluster's token and
        # answers one with it.
        cluster = state.LocalCluster.load(tmp_path)
        assert cluster is not None and cluster.auth_env()["RAY_AUTH_MODE"] == "token"
        token = Path(cluster.auth_token_path).read_text().strip()
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(f"{cluster.dashboard}/api/jobs/", timeout=30)
        assert refused.value.code in (401, 403)
        request = urllib.request.Request(f"{cluster.dashboard}/api/jobs/", headers={"Authorization": f"Bearer {token}"})
        with urllib.request.urlopen(request, timeout=30) as answered:
            assert answered.status == 200

        again = _raytpu("up", "--generation", single.generation, "--topology", single.topology, run_dir=tmp_path)
        assert again.returncode == 2 and "error: --dir: " in again.stderr and "already running" in again.stderr

        began = time.monotonic()
        smoke = _raytpu("smoke", "--json", "--report", str(tmp_path / "rep"), run_dir=tmp_path)
        took = time.monotonic() - began
        assert smoke.returncode == 0, smoke.stderr
        document = json.loads(smoke.stdout)
        assert document["format"] == 1 and "✓ healthy: 1 slice(s)" in (tmp_path / "rep" / "report.html").read_text()
        verdicts = document["slices"]
        assert verdicts[0]["healthy"] and verdicts[0]["hosts_found"] == 1
        assert_emulated_timeline(document["timeline"], took, trainer_started="not applicable")  # no trainer in a smoke
        assert "where the minutes went" in smoke.stderr  # the table, beside the JSON

        # `raytpu submit --local`: the same program and spec through Ray's Job Submission API, followed
        config = ["--config", str(EXAMPLE), "--local"]
        began = time.monotonic()
        job = _raytpu("train", *config, "--run-id", "l1", "--report", str(tmp_path / "l1.json"), run_dir=tmp_path,
                      command="submit")
        took = time.monotonic() - began
        assert job.returncode == 0, job.stderr[-3000:]
        assert '"ok": true' in job.stdout and "Ray job train-l1: SUCCEEDED" in job.stderr
        train_run = json.loads((tmp_path / "l1.json").read_text())
        assert train_run["run"] == "train-l1" and "train-l1: where the minutes went" in job.stderr
        assert_emulated_timeline(train_run["timeline"], took)  # joined, JaxTrainer's placement, the first step
        service = _raytpu("serve", *config, run_dir=tmp_path, command="submit")  # deployed as `local serve` does:
        assert service.returncode == 2 and "the local cluster emulates" in service.stderr  # its slice is not this one
        cluster = state.LocalCluster.load(tmp_path)
        assert cluster is not None
        local_procs.kill_host(cluster, cluster.slices[0], 0)  # the only host: the smoke job finds it missing, fails
        failed = _raytpu("smoke", *config, "--run-id", "l2", run_dir=tmp_path, command="submit")
        assert failed.returncode == 1, failed.stderr[-3000:]
        assert "error: smoke-l2: Ray job ended FAILED" in failed.stderr and "UNHEALTHY" in failed.stdout
    finally:
        down = _raytpu("down", run_dir=tmp_path)
    assert down.returncode == 0
    after = _raytpu("status", run_dir=tmp_path)
    assert after.returncode == 1 and "no local cluster" in after.stderr


@pytest.mark.slice
@pytest.mark.timeout(300)
def test_a_demo_stopped_by_sigterm_once_its_slice_is_up_tears_it_down(tmp_path: Path) -> None:
    """SIGTERM ends a kit command as Ctrl-C does: its cleanup runs, exit 130 (``raytpu.cli``). The demo's start of the
    slice connects its own process to Ray, whose ``ray.init`` and ``ray.shutdown`` replace that handler (Ray 2.60
    ``ray.init`` ``sigterm_handler``, ``RayLog::InstallFailureSignalHandler``); ``raytpu.local.slice.connection`` puts
    it back. Before, the demo ended at once and its slice kept running."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_AUTH")}
    log = tmp_path / "demo.log"
    with open(log, "w") as out:
        proc = subprocess.Popen([sys.executable, "-m", "raytpu", "demo", "--no-synth", "--dir", str(tmp_path / "run"),
                                 "--report", str(tmp_path / "demo.json")], env=env, stdout=out,
                                stderr=subprocess.STDOUT, text=True, cwd=EXAMPLE.parent, start_new_session=True)
    temp_dir = ""
    try:
        deadline = time.monotonic() + 180
        while "local slice up" not in log.read_text() and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.2)
        cluster = state.LocalCluster.load(tmp_path / "run")
        assert cluster is not None and proc.poll() is None, log.read_text()[-3000:]
        temp_dir = cluster.temp_dir
        os.kill(proc.pid, signal.SIGTERM)
        assert proc.wait(timeout=120) == 130, log.read_text()[-3000:]
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    text = log.read_text()
    assert "ok   teardown" in text and "error: interrupted" in text and "Traceback" not in text, text[-3000:]
    assert not procs.processes_under(temp_dir)


@pytest.mark.unit
def test_local_cli_up_rejects_an_impossible_slice(tmp_path: Path) -> None:
    bad = _raytpu("up", "--generation", "v6e", "--topology", "3x3", run_dir=tmp_path)
    assert bad.returncode == 2
    assert bad.stderr.startswith("error: ") and "Traceback" not in bad.stderr


@pytest.mark.slice
@pytest.mark.timeout(300)
def test_a_node_that_loses_a_port_race_is_started_again(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    real = launch.free_port
    calls = {"n": 0}

    def clashing() -> int:  # the head's first two ports collide, as when the kernel reoffers a port
        calls["n"] += 1
        if calls["n"] <= 3:
            return 50007  # one port, three times
        return real()

    monkeypatch.setattr(launch, "free_port", clashing)  # where startup and launch read it
    lines: list[str] = []
    cluster = startup.start(plan_slice("v6e", "2x2"), 1, tmp_path, progress=lines.append)
    try:
        assert any("port taken" in line and "new ports" in line for line in lines), lines
        assert [r.alive for r in status_table.status(cluster)] == [True, True]

        # the head goes away: a host started now cannot reach the GCS, which is said at once, not at a deadline
        head = cluster.nodes[0]
        os.killpg(head.pid, signal.SIGKILL)
        started = time.monotonic()
        with pytest.raises(RuntimeFailure, match="GCS unreachable: the head stopped") as failed:
            startup.add_host(cluster, cluster.slices[0], 0)
        assert time.monotonic() - started < diagnose.REGISTER_WAIT_S, failed.value
        assert "raytpu local down" in str(failed.value)
    finally:
        local_procs.stop(tmp_path)


SLOW_AGENT_ONCE = """
import os, sys, time
# worker 1's dashboard agent, once: held back past the raylet's fixed wait, as a busy machine holds it back
if sys.argv and sys.argv[0].endswith("dashboard/agent.py") and os.environ.get("TPU_WORKER_ID") == "1":
    marker = os.environ["RAYTPU_TEST_SLOW_AGENT_MARKER"]
    if not os.path.exists(marker):
        open(marker, "w").close()
        time.sleep(60)
"""


@pytest.mark.slice
@pytest.mark.timeout(300)
def test_an_agent_past_rays_fixed_wait_is_seen_at_once_and_its_host_started_again_alone(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The raylet's agent wait is fixed at 15 s in Ray 2.60.0 (``NodeManager::WaitForDashboardAgentPorts``) and
    ``RAY_agent_register_timeout_ms`` does not reach it: with it at 60 s the raylet still aborts at 15 s, which this
    test shows by setting it. The emulator reads the abort from the raylet's log, says which host and why, and
    starts that host again with nothing else starting; ``ray start`` itself would only say "timed out during
    startup", 30 s after launch."""
    hook = tmp_path / "hook"
    hook.mkdir()
    (hook / "sitecustomize.py").write_text(SLOW_AGENT_ONCE)
    monkeypatch.setenv("PYTHONPATH", str(hook))
    monkeypatch.setenv("RAYTPU_TEST_SLOW_AGENT_MARKER", str(tmp_path / "held-once"))
    monkeypatch.setenv("RAY_agent_register_timeout_ms", "60000")
    plan = plan_slice("v6e", "2x4", "ct6e-standard-4t")  # two hosts, started together
    lines: list[tuple[float, str]] = []
    run_dir = tmp_path / "run"
    cluster = startup.start(plan, 1, run_dir, progress=lambda line: lines.append((time.monotonic(), line)), slots=2)
    try:
        hosts_started = next(t for t, line in lines if "at a time" in line)
        told = [(t, line) for t, line in lines if "agent too slow" in line]
        assert len(told) == 1 and "worker 1" in told[0][1] and "no other node starting" in told[0][1], lines
        assert told[0][0] - hosts_started < diagnose.REGISTER_WAIT_S, lines  # before `ray start` gives up
        assert (tmp_path / "held-once").exists()
        rows = status_table.status(cluster)
        assert [(r.slice_name, r.worker_id, r.alive) for r in rows] == [
            ("(head)", -1, True), (cluster.slices[0], 0, True), (cluster.slices[0], 1, True)]
    finally:
        local_procs.stop(run_dir)


@pytest.mark.unit
def test_a_slice_that_stops_while_a_run_is_followed_is_exit_1_naming_what_to_run(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`raytpu local down` (or a crash) mid-run: Ray 2.60's JobSubmissionClient then raises requests' ConnectionError
    (its ``_do_request``); the follower says the slice stopped answering, exit 1, no traceback."""
    import ray.job_submission
    import requests

    from raytpu.core.common.errors import RuntimeFailure
    from raytpu.core.specs.kinds import kind
    from raytpu.core.specs.spec import SliceSpec, WorkloadSpec
    from raytpu.local.running import jobs

    class GoneMidRun:
        def __init__(self, _address: str) -> None: ...

        def submit_job(self, **_options: Any) -> str:
            return "fit-1"

        def get_job_status(self, _job_id: str) -> Any:
            raise requests.exceptions.ConnectionError("Connection refused")

    cluster = state.LocalCluster(run_dir=str(tmp_path), temp_dir="/tmp/raytpu-x", address="127.0.0.1:1", plan={},
                                 slices=[], dashboard="http://127.0.0.1:2")
    monkeypatch.setattr(jobs, "check_head", lambda _cluster: None)
    monkeypatch.setattr(jobs, "speak_auth", lambda _cluster: None)
    monkeypatch.setattr(jobs, "compile_env", lambda _cluster, _work: {})
    monkeypatch.setattr(ray.job_submission, "JobSubmissionClient", GoneMidRun)
    work = WorkloadSpec(name="fit", kind=kind("train"), slice=SliceSpec.create(
        name="s", generation="v6e", topology="2x4", zone="us-east5-b"))
    with pytest.raises(RuntimeFailure) as raised:
        jobs.submit_job(cluster, "train", work=work, timeout_s=5, poll_s=0.01)
    assert "job fit-1: the emulated slice stopped answering" in raised.value.problem
    assert f"raytpu local status --dir {tmp_path}" in (raised.value.valid or "") and raised.value.exit_code == 1
