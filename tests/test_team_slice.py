"""A team's own code end to end on the emulated slice (issue 38): ``raytpu submit NAME --local`` runs a ``train_loop``
in the kit's JaxTrainer (real Ray Train, real JAX on CPU, real placement groups on two emulated v6e 2x4 slices) and a
``job``'s own driver that reserves a whole slice itself with ``ray.util.tpu.slice_placement_group``; the code folder
travels as the same content-addressed zip as on GKE. The example project's preemption drill:
tests/test_team_example.py."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from raytpu.core.common import names
from raytpu.local.slice import state
from raytpu.teamcode.bundle import bundle

pytestmark = [pytest.mark.slice, pytest.mark.timeout(900)]

TRAIN = '''\
import json, os, tempfile
import ray.train


def train_loop(config):
    ctx = ray.train.get_context()
    start = 0
    checkpoint = ray.train.get_checkpoint()
    if checkpoint is not None:
        with checkpoint.as_directory() as folder:
            with open(os.path.join(folder, "state.json")) as f:
                start = json.load(f)["step"]
    import jax
    print(f"team loop rank {ctx.get_world_rank()} of {ctx.get_world_size()}: {jax.device_count()} devices, "
          f"lr {config['lr']}, slice {os.environ['RAYTPU_TOPOLOGY']}", flush=True)
    for step in range(start, config["steps"]):
        with tempfile.TemporaryDirectory() as tmp:
            saved = None
            if ctx.get_world_rank() == 0:
                with open(os.path.join(tmp, "state.json"), "w") as f:
                    json.dump({"step": step + 1}, f)
                saved = ray.train.Checkpoint.from_directory(tmp)
            ray.train.report({"step": step + 1, "loss": config["lr"] / (step + 1)}, checkpoint=saved)
'''

RESERVE = '''\
import os, sys
import ray
from ray.util.tpu import slice_placement_group

ray.init()
# chips_per_vm: a v6e 2x4 may be one 8-chip host or two 4-chip hosts; the slice says which
group = slice_placement_group(topology=os.environ["RAYTPU_TOPOLOGY"],
                              accelerator_version=os.environ["RAYTPU_GENERATION"],
                              chips_per_vm=int(os.environ["RAYTPU_CHIPS_PER_HOST"]))
ray.get(group.placement_group.ready(), timeout=120)
print("team driver reserved", group.num_hosts, "hosts of",
      os.environ["RAYTPU_POD_TYPE"], "args", " ".join(sys.argv[1:]), "storage", os.environ["RAYTPU_STORAGE"])
ray.util.remove_placement_group(group.placement_group)
'''

CONFIG = """\
project: my-ml-project
region: us-east5
cluster: {name: ray-tpu}
slices:
  - {name: train, generation: v6e, topology: 2x4, machine_type: ct6e-standard-4t, zone: us-east5-b, count: 2}
workloads:
  - name: pretrain
    kind: train
    slice: train
    code: ./src
    train_loop: lm.train:train_loop
    train_config: {steps: 4, lr: 0.5}
  - name: custom
    kind: job
    slice: train
    code: ./src
    entrypoint: python tools/reserve.py --note "two words"
"""


def project(folder: Path) -> Path:
    """The team's project: its config and its code folder (with what must never ship beside it)."""
    for rel, text in {"src/lm/__init__.py": "", "src/lm/train.py": TRAIN, "src/tools/reserve.py": RESERVE,
                      "src/.env": "SECRET=1\n", "raytpu.yaml": CONFIG}.items():
        (folder / rel).parent.mkdir(parents=True, exist_ok=True)
        (folder / rel).write_text(text)
    return folder / "raytpu.yaml"


def submit(config: Path, cluster: state.LocalCluster, workload: str, *extra: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_AUTH")}
    return subprocess.run([sys.executable, "-m", "raytpu", "submit", workload, "--local", "--config", str(config),
                           "--dir", cluster.run_dir, *extra], capture_output=True, text=True, timeout=600, env=env,
                          cwd=config.parent)


def test_a_train_loop_and_a_teams_driver_run_through_submit_local(
        two_slices: state.LocalCluster, tmp_path: Path) -> None:
    config = project(tmp_path)
    report = tmp_path / "reports" / "pretrain.json"
    ran = submit(config, two_slices, "pretrain", "--run-id", "t1", "--report", str(report))
    assert ran.returncode == 0, ran.stderr[-3000:] + ran.stdout[-3000:]
    # the workers' output reaches the driver's log, as on GKE (each emulated node runs Ray's log monitor)
    assert "team loop rank 0 of 2: 8 devices, lr 0.5, slice 2x4" in ran.stdout
    written = json.loads(report.read_text())
    train = written["train"]
    assert train["ok"] and train["train_loop"] == "lm.train:train_loop"
    assert train["metrics"] == {"step": 4, "loss": 0.125} and train["reports"] == 4
    assert train["checkpoint"].startswith(f"{two_slices.run_dir}/checkpoints/pretrain-t1/checkpoint_")
    assert [a["resumed"] for a in train["attempts"]] == [False]
    phases = {row["phase"]: row for row in written["timeline"]["phases"]}
    assert phases["reserved"]["status"] == phases["first_step"]["status"] == "measured"
    assert "first report" in phases["first_step"]["detail"]
    # the same zip a stack would upload, kept where the bucket's mount stands in
    made = bundle("code", tmp_path / "src", "pretrain")  # .env left out, as on GKE
    assert (Path(two_slices.run_dir) / names.code_zip_object(made.object_name)).read_bytes() == made.data
    assert ".env" in made.excluded

    job = submit(config, two_slices, "custom", "--run-id", "t2")
    assert job.returncode == 0, job.stderr[-3000:] + job.stdout[-3000:]
    assert "team driver reserved 2 hosts of v6e-8 args --note two words" in job.stdout
    assert f"storage {names.run_storage('custom-t2', two_slices.run_dir)}" in job.stdout


def test_a_train_loop_that_fails_is_exit_1_with_the_teams_error(two_slices: state.LocalCluster,
                                                                 tmp_path: Path) -> None:
    config = project(tmp_path)
    (tmp_path / "src" / "lm" / "train.py").write_text("def train_loop(config):\n    raise ValueError('bad batch')\n")
    ran = submit(config, two_slices, "pretrain", "--run-id", "t3")
    assert ran.returncode == 1, ran.stderr[-3000:]
    assert "ValueError" in ran.stdout and "bad batch" in ran.stdout
    assert "Traceback" not in ran.stderr


SLOW_CONFIG = CONFIG.replace("count: 2}", "count: 2, provisioning: spot}").replace("{steps: 4, lr: 0.5}",
                                                                                  "{steps: 40, lr: 0.5}")
LOOP = "    for step in range(start, config[\"steps\"]):\n"
SLOW_TRAIN = TRAIN.replace(LOOP, f"    import time\n{LOOP}        time.sleep(0.5)\n")


def test_a_team_run_survives_losing_the_host_its_rank_0_ran_on(two_slices: state.LocalCluster,
                                                              tmp_path: Path) -> None:
    """Issue 49: the kit's report sink sat on any node (0 CPUs, unpinned), TPU hosts included, and a crashed host
    failed the run with ActorDiedError and no summary. It now sits on the driver's node; a host crash (no notice)
    mid-run is a retry, and the run ends with its summary.
    Source: Ray 2.60 ray.train.v2.api.data_parallel_trainer.DataParallelTrainer._initialize_and_run_controller
    (the controller: num_cpus=0, label_selector={RAY_NODE_ID_KEY: the driver's node})."""
    import time

    from ray.job_submission import JobSubmissionClient
    from ray.util.state import list_actors

    from raytpu.local.slice.connection import speak_auth

    config = project(tmp_path)
    config.write_text(SLOW_CONFIG)
    (tmp_path / "src" / "lm" / "train.py").write_text(SLOW_TRAIN)
    report, storage = tmp_path / "report.json", Path(two_slices.run_dir) / "checkpoints" / "pretrain-t9"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("RAY_AUTH", "RAY_ADDRESS"))}
    log = tmp_path / "submit.log"
    with log.open("w") as sink:
        proc = subprocess.Popen([sys.executable, "-m", "raytpu", "submit", "pretrain", "--local", "--config",
                                 str(config), "--dir", two_slices.run_dir, "--run-id", "t9", "--report", str(report)],
                                env=env, stdout=sink, stderr=subprocess.STDOUT, cwd=tmp_path, start_new_session=True)
    # a checkpoint the controller registered: a folder alone may be one it never heard of before the crash (it polls
    # the workers every 2 s). Source: Ray 2.60 ray.train.v2 CheckpointManager.register_checkpoint (writes
    # CHECKPOINT_MANAGER_SNAPSHOT_FILENAME), DEFAULT_HEALTH_CHECK_INTERVAL_S
    registered = storage / "checkpoint_manager_snapshot.json"
    deadline = time.monotonic() + 400
    try:
        while not registered.exists() and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.5)
        assert registered.exists() and list(storage.glob("checkpoint_*")), log.read_text()[-3000:]
        speak_auth(two_slices)
        [running] = [j for j in JobSubmissionClient(two_slices.dashboard).list_jobs() if j.status.value == "RUNNING"]
        [sink_actor] = [a for a in list_actors(address=two_slices.dashboard, filters=[("state", "=", "ALIVE")])
                        if a.class_name == "Reports"]
        assert sink_actor.node_id == running.driver_node_id  # pinned where the driver runs, never a TPU host
        [pinned] = [line.rsplit(" ", 1)[-1] for line in log.read_text().splitlines()
                    if line.startswith("train: workers pinned to slice ")]
        crashed = subprocess.run([sys.executable, "-m", "raytpu", "local", "preempt", "--dir", two_slices.run_dir,
                                  "--slice", pinned, "--host", "0", "--notice-s", "0"],
                                 env=env, capture_output=True, text=True, timeout=300)
        assert crashed.returncode == 0, crashed.stderr[-3000:]
        proc.wait(timeout=max(deadline - time.monotonic(), 1))
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, 15)
            proc.wait(timeout=60)
    text = log.read_text()
    assert proc.returncode == 0, text[-4000:]
    # Ray logs the crashed host's own workers' deaths; the sink never died, nor was any call to it lost
    assert "report sink unreachable" not in text and "reports were lost" not in text, text[-4000:]
    train = json.loads(report.read_text())["train"]
    assert train["ok"] and train["metrics"]["step"] == 40 and "reports_lost" not in train, train
    assert len(train["attempts"]) >= 2 and train["attempts"][-1]["resumed"], train["attempts"]
