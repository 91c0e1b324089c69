"""examples/team_project: the team's own model trains on CPU (loss falls), its checkpoints round-trip exactly and a
resume continues the same data; on an emulated two-host slice its train_loop runs in a real JaxTrainer (reports,
checkpoints, resumes) and its reserve.py driver reserves the slice and hears from every host."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

pytest.importorskip("jax", reason="the example's model needs JAX (.venv; the serve tier's .venv-serve has none)")
SRC = Path(__file__).resolve().parents[1] / "examples" / "team_project" / "src"
sys.path.insert(0, str(SRC))

from lm import checkpoint, model, optim, step  # noqa: E402
from lm.config import Config, resolve  # noqa: E402
from lm.data import Batches, synthetic_rows  # noqa: E402
from tools import reserve  # noqa: E402

os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")


def _host(tree: Any) -> Any:
    import jax

    return jax.tree.map(np.asarray, jax.device_get(tree))


def _train(c: Config, steps: int, start: Any = None, position: int = 0) -> tuple[Any, Any, list[float], int]:
    """``steps`` steps of the example's jitted step from fresh state (or ``start``: host params, opt state)."""
    mesh = step.make_mesh(c)
    params, opt_state, p_sharding, o_sharding = step.init_state(c, mesh)
    if start is not None:
        params, opt_state = step.place(start[0], p_sharding), step.place(start[1], o_sharding)
    train_step = step.make_train_step(c, mesh, p_sharding, o_sharding)
    batches = Batches(c, step.batch_sharding(mesh), position)
    losses = []
    for _ in range(steps):
        params, opt_state, loss = train_step(params, opt_state, batches.next())
        losses.append(float(loss))
    return _host(params), _host(opt_state), losses, batches.position


def _equal(a: Any, b: Any) -> bool:
    import jax

    return all(np.array_equal(x, y) for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b), strict=True))


@pytest.mark.heavy
def test_loss_falls_within_a_few_cpu_steps() -> None:
    _, _, losses, _ = _train(resolve({"steps": 30}), 30)
    assert np.mean(losses[-3:]) < np.mean(losses[:3]) - 0.5, losses


@pytest.mark.heavy
def test_checkpoint_round_trips_params_optimizer_state_and_position_exactly(tmp_path: Path) -> None:
    c = resolve({"steps": 3})
    params, opt_state, _, position = _train(c, 3)
    checkpoint.save(str(tmp_path), params, opt_state, {"step": 3, "data_position": position})
    loaded_params, loaded_opt, state = checkpoint.load(str(tmp_path), params, opt_state)
    assert _equal(loaded_params, params) and _equal(loaded_opt, opt_state)
    assert int(loaded_opt[0].count) == 3  # optax's ScaleByAdamState: the step count it bias-corrects with
    assert state == {"step": 3, "data_position": 3}


@pytest.mark.heavy
def test_a_resume_from_a_checkpoint_continues_the_same_data_and_the_same_run(tmp_path: Path) -> None:
    c = resolve({"steps": 6})
    straight_params, straight_opt, straight_losses, _ = _train(c, 6)
    params, opt_state, first_losses, position = _train(c, 3)
    checkpoint.save(str(tmp_path), params, opt_state, {"step": 3, "data_position": position})
    params, opt_state, state = checkpoint.load(str(tmp_path), params, opt_state)
    resumed_params, resumed_opt, later_losses, _ = _train(c, 3, (params, opt_state), state["data_position"])
    assert first_losses + later_losses == straight_losses
    assert _equal(resumed_params, straight_params) and _equal(resumed_opt, straight_opt)


@pytest.mark.unit
def test_the_synthetic_stream_depends_on_seed_step_and_row_only() -> None:
    c = resolve({})
    whole = synthetic_rows(c, 5, 0, 8)
    assert np.array_equal(np.concatenate([synthetic_rows(c, 5, 0, 3), synthetic_rows(c, 5, 3, 8)]), whole)
    assert not np.array_equal(synthetic_rows(c, 6, 0, 8), whole)
    assert whole.shape == (8, c.seq_len + 1) and whole.max() < c.vocab


@pytest.mark.unit
def test_model_flops_count_matmul_params_and_full_attention() -> None:
    c = resolve({"d_model": 128, "n_layers": 2, "n_heads": 1, "vocab": 256, "seq_len": 64})
    matmul = 2 * (4 * 128**2 + 2 * 128 * 512) + 128 * 256
    assert model.matmul_params(c) == matmul
    assert model.model_flops_per_step(c, 4) == 6 * matmul * 4 * 64 + 12 * 2 * 128 * 64**2 * 4


@pytest.mark.unit
def test_auto_attention_is_plain_einsum_off_tpu() -> None:
    assert model.attention_kind(resolve({})) == "einsum"
    assert model.attention_kind(resolve({"attention": "flash"})) == "flash"


@pytest.mark.unit
def test_adamw_leaves_norm_scales_undecayed() -> None:
    import jax.numpy as jnp

    c = resolve({"weight_decay": 0.5, "lr": 0.1, "warmup": 0})
    params = {"ln1": jnp.ones((2,)), "w": jnp.ones((2, 2))}
    zero = {k: jnp.zeros_like(v) for k, v in params.items()}
    updated, _ = optim.update(c, params, zero, optim.init(params))
    assert np.allclose(updated["ln1"], 1.0) and np.all(np.asarray(updated["w"]) < 1.0)


@pytest.mark.unit
def test_the_learning_rate_warms_up_then_decays_by_a_cosine_to_its_floor() -> None:
    import itertools

    c = resolve({"lr": 1.0, "warmup": 4, "steps": 20})
    lrs = [float(np.asarray(optim.schedule(c)(i))) for i in range(21)]
    assert lrs[0] == pytest.approx(0.25) and lrs[4] == pytest.approx(1.0)
    assert all(a < b for a, b in itertools.pairwise(lrs[:5]))
    assert all(a > b for a, b in itertools.pairwise(lrs[4:]))
    assert lrs[20] == pytest.approx(optim.FLOOR)


@pytest.mark.unit
def test_the_optimizer_is_optax_from_the_projects_requirements() -> None:
    """optax comes from the example's own ``requirements.txt`` (the kit's image has none; its raytpu.yaml names
    the file on every workload that runs the code)."""
    import optax

    from raytpu.images import team
    from raytpu.teamcode import requirements

    assert isinstance(optim.optimizer(resolve({})), optax.GradientTransformation)
    wanted = requirements.pins((SRC / "requirements.txt").read_text())
    kit = requirements.pins((SRC.parents[2] / "requirements.lock").read_text())
    assert wanted["optax"] == kit["optax"] == optax.__version__  # the kit's venv (tests, mypy) has the same optax
    assert "optax" not in team.base_lock().pins


@pytest.mark.unit
def test_train_loop_takes_its_config_as_one_required_parameter() -> None:
    import inspect

    from lm.train import train_loop

    params = list(inspect.signature(train_loop).parameters.values())
    assert len(params) == 1 and params[0].default is inspect.Parameter.empty  # else Ray passes no config


BAD_CONFIGS = [
    ({"stepz": 3}, "stepz"),
    ({"steps": "many"}, "train_config.steps"),
    ({"steps": 0}, "train_config.steps"),
    ({"d_model": 64, "n_heads": 3}, "train_config.n_heads"),
    ({"attention": "fast"}, "train_config.attention"),
    ({"remat": "some"}, "train_config.remat"),
    ({"lr": -1}, "lr"),
]


@pytest.mark.unit
@pytest.mark.parametrize(("given", "named"), BAD_CONFIGS, ids=[n for _, n in BAD_CONFIGS])
def test_a_bad_train_config_names_its_key(given: dict[str, Any], named: str) -> None:
    with pytest.raises(ValueError, match=named.replace(".", r"\.")):
        resolve(given)


@pytest.mark.unit
def test_a_mesh_the_devices_cannot_hold_is_refused() -> None:
    with pytest.raises(ValueError, match="fsdp 3"):
        step.make_mesh(resolve({"fsdp": 3}))


RESERVE_ARGS = [
    ([], {"RAYTPU_TOPOLOGY": "4x4", "RAYTPU_GENERATION": "v6e", "RAYTPU_CHIPS_PER_HOST": "4"}, ("4x4", "v6e", 4)),
    (["--topology", "2x4", "--accelerator", "TPU-V6E"], {}, ("2x4", "TPU-V6E", None)),
    (["--topology", "2x2"], {"RAYTPU_TOPOLOGY": "4x4", "RAYTPU_GENERATION": "v5litepod"}, ("2x2", "v5litepod", None)),
]


@pytest.mark.unit
@pytest.mark.parametrize(("argv", "env", "expected"), RESERVE_ARGS)
def test_reserve_takes_flags_over_the_job_environment(argv: list[str], env: dict[str, str],
                                                      expected: tuple[str, str, int | None]) -> None:
    args = reserve.parse_args(argv, env)
    assert (args.topology, args.accelerator, args.chips_per_host) == expected


BAD_RESERVE_ARGS: list[tuple[list[str], dict[str, str], str]] = [
    ([], {}, "--topology is required"),
    (["--topology", "4x4"], {}, "--accelerator is required"),
    (["--topology", "4x4", "--accelerator", "v6e", "--chips-per-host", "0"], {}, "--chips-per-host: 0"),
]


@pytest.mark.unit
@pytest.mark.parametrize(("argv", "env", "message"), BAD_RESERVE_ARGS, ids=[m for _, _, m in BAD_RESERVE_ARGS])
def test_reserve_refuses_missing_flags_with_exit_2(argv: list[str], env: dict[str, str], message: str,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        reserve.parse_args(argv, env)
    assert exited.value.code == 2 and message in capsys.readouterr().err


@pytest.mark.unit
def test_reserve_prints_one_aligned_row_per_host() -> None:
    rows = [{"bundle": i, "node": f"n{i}", "TPU_WORKER_ID": str(i), "jax devices": 8, "local devices": 4,
             "checksum": 1.5} for i in range(2)]
    lines = reserve.table(rows).splitlines()
    assert len(lines) == 3 and lines[0].startswith("bundle") and lines[2].split()[:3] == ["1", "n1", "1"]


CONFIG = """\
project: my-ml-project
region: us-east5
cluster: {{name: ray-tpu}}
slices:
  - {{name: train, generation: v6e, topology: 2x4, machine_type: ct6e-standard-4t, zone: us-east5-b, count: 2,
     provisioning: spot}}
workloads:
  - name: pretrain
    kind: train
    slice: train
    code: {src}
    requirements: requirements.txt
    train_loop: lm.train:train_loop
    train_config: {train_config}
"""


def _config(tmp_path: Path, train_config: dict[str, Any]) -> Path:
    """The example's workload, as a team writes it, on the emulated slice's shape (two 4-chip hosts)."""
    path = tmp_path / "raytpu.yaml"
    path.write_text(CONFIG.format(src=SRC, train_config=json.dumps(train_config)))
    return path


def _submit(cluster: Any, config: Path, run_id: str, report: Path) -> list[str]:
    """``raytpu submit pretrain --local --wait``: the kit's own JaxTrainer around the example's function."""
    return [sys.executable, "-m", "raytpu", "submit", "pretrain", "--local", "--wait", "--config", str(config),
            "--dir", cluster.run_dir, "--run-id", run_id, "--report", str(report)]


def _states(storage: Path) -> list[dict[str, Any]]:
    """Every checkpoint's state.json under the run, by step."""
    found = [json.loads(p.read_text()) for p in storage.glob(f"checkpoint_*/{checkpoint.STATE}")]
    return sorted(found, key=lambda s: s["step"])


@pytest.fixture(scope="module")
def cluster(two_slices: Any) -> Any:
    """The session's two emulated v6e 2x4 slices of two 4-chip hosts (``conftest.two_slices``)."""
    return two_slices


def _env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith(("RAY_AUTH", "RAY_ADDRESS"))}


@pytest.mark.slice
@pytest.mark.timeout(480)
def test_the_example_trains_and_checkpoints_through_submit_local(cluster: Any, tmp_path: Path) -> None:
    """The run reports every ``checkpoint_every`` steps; the report carries the last metrics and checkpoint (the
    resume from a checkpoint: the preemption test below)."""
    report = tmp_path / "report.json"
    done = subprocess.run(_submit(cluster, _config(tmp_path, {"steps": 6, "checkpoint_every": 3}), "ex1", report),
                          env=_env(), capture_output=True, text=True, timeout=420)
    assert done.returncode == 0, done.stderr[-3000:] + done.stdout[-3000:]
    # the workers' echoed lines: no JAX warning about the nodes' serving-only RAY_SERVE_ENABLE_HA_PROXY
    # (raytpu.workloads.support.job_worker_env); source: JAX 0.10.2 jax._src.distributed.State.initialize
    assert "detected proxy variable" not in done.stdout + done.stderr
    train = json.loads(report.read_text())["train"]
    assert train["ok"] and train["metrics"]["step"] == 6 and train["reports"] == 2, train
    assert train["metrics"]["devices"] == 8  # two hosts x 4 emulated chips
    assert [a["resumed"] for a in train["attempts"]] == [False]
    # every rank told its compile (the first report waited for the last): rank 0's is the attempt's own
    processes = train["attempts"][0]["compile"]["processes"]
    assert [p["process"] for p in processes] == [0, 1] and all(p["s"] > 0 for p in processes)
    assert processes[0]["s"] == train["attempts"][0]["compile"]["s"]
    state = json.loads((Path(train["checkpoint"]) / checkpoint.STATE).read_text())
    assert (state["step"], state["data_position"]) == (6, 6)
    assert {p.name for p in Path(train["checkpoint"]).iterdir()} >= {checkpoint.PARAMS, checkpoint.OPT}


@pytest.mark.slice
@pytest.mark.timeout(600)
def test_the_example_survives_local_preempt_checkpointing_at_the_notice(cluster: Any, tmp_path: Path) -> None:
    """``raytpu local preempt`` drains a host of the run's slice (15 s notice), kills and replaces it: the loop
    checkpoints at the notice's step, takes no further step, and the run resumes from it; the run's report shows the
    second attempt started from a checkpoint."""
    import time

    from ray.job_submission import JobSubmissionClient

    from raytpu.local.slice.connection import speak_auth

    report, storage = tmp_path / "report.json", Path(cluster.run_dir) / "checkpoints" / "pretrain-ex2"
    config = _config(tmp_path, {"steps": 100000, "checkpoint_every": 40})  # long enough to be preempted mid-run
    log = tmp_path / "submit.log"  # a file, not a pipe nobody reads while it runs
    with log.open("w") as sink:
        proc = subprocess.Popen(_submit(cluster, config, "ex2", report), env=_env(), stdout=sink,
                                stderr=subprocess.STDOUT, start_new_session=True)
    deadline = time.monotonic() + 420
    try:
        while not _states(storage) and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.5)
        assert _states(storage), "no periodic checkpoint before the preemption\n" + log.read_text()[-3000:]
        [pinned] = [line.rsplit(" ", 1)[-1] for line in log.read_text().splitlines()
                    if line.startswith("train: workers pinned to slice ")]
        preempted = subprocess.run([sys.executable, "-m", "raytpu", "local", "preempt", "--dir", cluster.run_dir,
                                    "--slice", pinned, "--host", "1", "--notice-s", "15"],
                                   env=_env(), capture_output=True, text=True, timeout=300)
        assert preempted.returncode == 0, preempted.stderr[-3000:]
        while time.monotonic() < deadline:  # until the resumed run's next periodic checkpoint
            notices = [s["step"] for s in _states(storage) if s["at_notice"]]
            if notices and any(s["step"] > notices[0] for s in _states(storage)):
                break
            time.sleep(1)
    finally:
        speak_auth(cluster)
        client = JobSubmissionClient(cluster.dashboard)
        for job in client.list_jobs():
            if job.status.value == "RUNNING" and job.submission_id:
                client.stop_job(job.submission_id)
        proc.wait(timeout=120)
    states = _states(storage)
    notices = [s["step"] for s in states if s["at_notice"]]
    assert len(notices) == 1, (states, log.read_text()[-3000:])
    later = [s for s in states if s["step"] > notices[0]]
    assert later and later[0]["resumed_from"] == notices[0], states  # resumed from the notice's checkpoint
    assert later[0]["step"] == (notices[0] // 40 + 1) * 40, states
    assert all(s["data_position"] == s["step"] for s in states), states  # the data continues where it stopped
    attempts = json.loads(report.read_text())["train"]["attempts"]
    assert [a["resumed"] for a in attempts][:2] == [False, True], attempts


@pytest.mark.slice
@pytest.mark.timeout(300)
def test_reserve_holds_one_whole_slice_and_hears_from_every_host(cluster: Any) -> None:
    done = subprocess.run([sys.executable, "tools/reserve.py", "--topology", "2x4", "--accelerator", "v6e",
                           "--chips-per-host", "4", "--timeout-s", "120"], cwd=SRC,
                          env=cluster.driver_env() | cluster.workload("train").workload_env(),
                          capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stdout + done.stderr[-3000:]
    rows = [line.split() for line in done.stdout.splitlines()[2:] if line and line[0].isdigit()]
    assert sorted(row[2] for row in rows) == ["0", "1"], done.stdout  # TPU_WORKER_ID of each host
    assert all(row[3] == "4" for row in rows), done.stdout  # each task's JAX sees its host's 4 emulated chips
