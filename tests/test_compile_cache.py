"""JAX's persistent compilation cache (issue 41 items 1, 3 and 5): where each job's cache lives, the fields that
place it and budget it, the ``compiled`` phase and what reports make of it."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import kind_fields
import pytest

from raytpu.core.common import names, timeline
from raytpu.core.common.errors import InvalidInput, InvalidInputs
from raytpu.core.manifests import kuberay
from raytpu.core.specs import kinds
from raytpu.core.specs.runtime import compile_cache
from raytpu.core.specs.spec import SliceSpec, WorkloadSpec

ROOT = Path(__file__).resolve().parents[1]
IMAGE = "us-docker.pkg.dev/p/r/ray-tpu@sha256:" + "a" * 64


def _slice(topology: str = "4x4") -> SliceSpec:
    return SliceSpec.create(name="train", generation="v6e", topology=topology, zone="us-east5-b")


def _work(kind: str = "train", **extra: Any) -> WorkloadSpec:
    item = _slice("2x4") if kind == "batch" else _slice()
    return WorkloadSpec(name="w", kind=kinds.kind(kind), slice=item, **{**kind_fields.fields(kind), **extra})


def _env(job: dict[str, Any]) -> dict[str, str]:
    return dict(json.loads(job["spec"]["runtimeEnvYAML"])["env_vars"])


PODS = kuberay.Pods(image=IMAGE, bucket="b")


@pytest.mark.unit
def test_one_cache_per_image_and_slice_shape_in_the_buckets_mount() -> None:
    env = _env(kuberay.ray_job("j", _work(), PODS))
    folder = env[compile_cache.DIR_ENV]
    assert folder.startswith(f"{names.GCS_MOUNT_PATH}/compile-cache/ray-tpu-") and folder.endswith("/v6e-4x4")
    assert compile_cache.FOLDER_ENV not in env  # the kit's own trainer; a team's code is told the folder too
    assert _env(kuberay.ray_job("j", _work("job"), PODS))[compile_cache.FOLDER_ENV] == folder
    # thresholds that keep the kit's small steps: any compile time, any size (JAX's default skips < 1 s)
    # Source: JAX 0.10.2 jax._src.config persistent_cache_min_compile_time_secs / _min_entry_size_bytes (env defaults)
    assert env[compile_cache.MIN_TIME_ENV] == "0" and env[compile_cache.MIN_SIZE_ENV] == "-1"
    other_image = _env(kuberay.ray_job("j", _work(), kuberay.Pods(image=IMAGE.replace("a", "b"), bucket="b")))
    other_shape = _env(kuberay.ray_job("j", WorkloadSpec(name="w", kind=kinds.kind("train"), slice=_slice("2x4")),
                                       PODS))
    assert len({folder, other_image[compile_cache.DIR_ENV], other_shape[compile_cache.DIR_ENV]}) == 3
    assert _env(kuberay.ray_job("j", _work("smoke"), PODS))[compile_cache.DIR_ENV] == folder  # one per image+shape


@pytest.mark.unit
@pytest.mark.parametrize(("work", "pods"), [
    (_work(compile_cache="off"), PODS),  # turned off
    (_work(), kuberay.Pods(image=IMAGE)),  # no bucket mounted
    (_work("batch"), PODS),  # vLLM keeps its own cache
])
def test_no_cache_variables_when_off_unmounted_or_vllm(work: WorkloadSpec, pods: kuberay.Pods) -> None:
    assert not set(_env(kuberay.ray_job("j", work, pods))) & set(compile_cache.ENV_NAMES)


@pytest.mark.unit
def test_a_chosen_folder_and_a_multislice_run_get_their_own_cache() -> None:
    folder = compile_cache.cache_dir("/mnt/gcs", "teams/ml/jax", IMAGE, "v6e", "4x4", slices=2)
    assert folder.startswith("/mnt/gcs/teams/ml/jax/ray-tpu-") and folder.endswith("/v6e-4x4-x2")
    assert compile_cache.image_key("").startswith("image-")


@pytest.mark.unit
@pytest.mark.parametrize(("value", "says"), [
    ("gs://other-bucket/cache", "gs:// URL"),
    ("gs://b/compile-cache", "gs:// URL"),
    ("/tmp/jax-cache", "absolute path"),
    ("../outside", "'..'"),
    ("a/../../b", "'..'"),
    ("", "not a folder path"),
    ("a//b", "not a folder path"),
    ("cache dir", "not a folder path"),
    ("x" * 201, "not a folder path"),
    (".hidden", "not a folder path"),
    (3, "not a folder name"),
])
def test_a_cache_location_the_pods_cannot_write_is_refused(value: object, says: str) -> None:
    with pytest.raises((InvalidInput, InvalidInputs)) as caught:
        _work(compile_cache=value)
    text = str(caught.value)
    assert "compile_cache" in text and says in text and "valid:" in text
    assert len(text) < 900  # a bounded excerpt of the value


@pytest.mark.unit
@pytest.mark.parametrize("value", [0, -1, -0.5, math.nan, math.inf, True, "60", None.__class__])
def test_a_budget_that_is_not_a_positive_number_is_refused(value: object) -> None:
    with pytest.raises((InvalidInput, InvalidInputs), match="compile_budget_s"):
        _work(compile_budget_s=value)


@pytest.mark.unit
@pytest.mark.parametrize(("kind", "field", "value"), [
    ("serve", "compile_cache", "compile-cache"), ("batch", "compile_cache", "compile-cache"),
    ("serve", "compile_budget_s", 60), ("batch", "compile_budget_s", 60), ("job", "compile_budget_s", 60),
])
def test_the_fields_belong_to_kinds_that_run_jax(kind: str, field: str, value: object) -> None:
    with pytest.raises((InvalidInput, InvalidInputs), match=field):
        _work(kind, **{field: value})


@pytest.mark.unit
def test_valid_fields_travel_in_the_jobs_spec() -> None:
    work = _work(compile_cache="teams/ml/jax", compile_budget_s=90)
    assert WorkloadSpec.from_json(work.to_json()) == work
    assert _work("smoke", compile_budget_s=0.5).compile_budget_s == 0.5
    assert _work("job", compile_cache="off").compile_cache == "off"


@pytest.mark.unit
def test_the_compiled_phase_sits_between_the_reservation_and_the_first_step() -> None:
    assert timeline.PHASES.index("reserved") < timeline.PHASES.index("compiled") < timeline.PHASES.index("first_step")
    assert "cache" in timeline.MEANING["compiled"]


@pytest.mark.unit
def test_first_and_resumed_starts_side_by_side_and_the_budget_flag() -> None:
    attempts = [{"s": 2.0, "hits": 0, "misses": 3}, {"s": 0.4, "hits": 3, "misses": 0}]
    assert compile_cache.first_and_resumed(attempts) == {"first_s": 2.0, "resumed_s": 0.4, "resumed_hits": 3,
                                                         "resumed_misses": 0}
    assert compile_cache.first_and_resumed(attempts[:1]) is None
    assert compile_cache.over_budget(2.0, 1.5) and not compile_cache.over_budget(1.0, 1.5)
    assert not compile_cache.over_budget(2.0, None) and not compile_cache.over_budget(None, 1.0)


@pytest.mark.unit
def test_a_train_report_flags_a_start_over_its_budget(capsys: pytest.CaptureFixture[str]) -> None:
    from raytpu.workloads.train import compile_verdict

    over = compile_verdict({"s": 12.0, "hits": 0, "misses": 4}, 5.0)
    assert over["compile_over_budget"] is True and "exceeds compile_budget_s 5s" in over["compile_warning"]
    assert "0 cache hit(s), 4 miss(es)" in capsys.readouterr().err
    assert compile_verdict({"s": 1.0, "hits": 4, "misses": 0}, 5.0) == {"compile_budget_s": 5.0,
                                                                        "compile_over_budget": False}
    assert compile_verdict(None, 5.0) == {} and compile_verdict({"s": 1.0}, None) == {}
    # process 0 hit the cache; process 1 compiled for 9 s, and the first step waited for it
    hosts = compile_verdict({"s": 0.5, "hits": 4, "misses": 0, "processes": [
        {"s": 0.5, "hits": 4, "misses": 0, "wall": 10.0}, {"s": 9.0, "hits": 0, "misses": 4, "wall": 18.0}]}, 5.0)
    assert hosts["compile_over_budget"] is True and hosts["compile_warning"].startswith("compile 9.0s exceeds")
    assert "0 cache hit(s), 4 miss(es)" in capsys.readouterr().err


@pytest.mark.unit
@pytest.mark.parametrize(("budget", "ok", "informational"), [(None, True, True), (10.0, True, False),
                                                              (1.0, False, False)])
def test_the_smoke_verdicts_compile_check(budget: float | None, ok: bool, informational: bool) -> None:
    from raytpu.workloads.smoke.driver import compile_check

    results = {0: {"compile": {"s": 3.0, "hits": 2, "misses": 1, "wall": 100.0}},
               1: {"compile": {"s": 1.0, "hits": 3, "misses": 0, "wall": 99.0}}}
    made = compile_check(results, budget)
    assert made is not None
    check, wall = made
    assert check["name"] == "compile" and check["ok"] is ok and bool(check.get("informational")) is informational
    assert wall == 100.0 and check["value"] == 3.0 and "5 cache hit(s), 1 miss(es)" in check["detail"]
    assert compile_check({0: {}}, budget) is None


def _jax_process(cache: Path, tmp: Path) -> dict[str, Any]:
    """One fresh process that compiles a small step under the kit's cache variables, as a job's worker would."""
    script = tmp / "step.py"
    script.write_text("import json\nimport jax, jax.numpy as jnp\n"
                      "from raytpu.workloads.support.compile_watch import CompileWatch\n"
                      "with CompileWatch() as watch:\n"
                      "    jax.jit(lambda x: jnp.tanh(x @ x.T).sum())(jnp.ones((32, 32))).block_until_ready()\n"
                      "print(json.dumps(watch.summary()))\n")
    env = {**os.environ, **compile_cache.env(str(cache)), "JAX_PLATFORMS": "cpu"}
    done = subprocess.run([sys.executable, str(script)], env=env, capture_output=True, text=True, timeout=120,
                          cwd=ROOT, check=True)
    return dict(json.loads(done.stdout.strip().splitlines()[-1]))


@pytest.mark.slice
def test_a_second_process_loads_every_executable_from_the_cache(tmp_path: Path) -> None:
    pytest.importorskip("jax")
    cold = _jax_process(tmp_path / "cache", tmp_path)
    warm = _jax_process(tmp_path / "cache", tmp_path)
    assert cold["misses"] == cold["written"] == cold["compiles"] > 0 and cold["hits"] == 0
    assert warm["hits"] == warm["compiles"] == cold["compiles"] and warm["misses"] == warm["written"] == 0
    assert cold["cache_dir"] == str(tmp_path / "cache")


@pytest.mark.unit
def test_a_team_loops_compile_is_kept_until_its_first_report_and_stamped(capsys: pytest.CaptureFixture[str]) -> None:
    from raytpu.workloads.support.team_train import Reports, team_stamps

    reports = Reports()
    reports.started(100.0, resumed=False)
    reports.compiled({"s": 1.5, "hits": 0, "misses": 2, "wall": 101.5})
    reports.reported(102.0, {"loss": 1.0}, None)
    reports.compiled({"s": 9.0, "hits": 0, "misses": 9, "wall": 110.0})  # after the first report: not its start's
    reports.started(120.0, resumed=True)
    reports.compiled({"s": 0.2, "hits": 2, "misses": 0, "wall": 120.2})
    first, resumed = reports.summary()["attempts"]
    assert first["compile"]["s"] == 1.5 and resumed["compile"]["hits"] == 2
    stamps = {s["phase"]: s for s in team_stamps(reports.summary()["attempts"])}
    assert stamps["compiled"]["wall"] == 101.5 and "0 cache hit(s), 2 miss(es)" in stamps["compiled"]["detail"]
    assert "RAYTPU_TIMELINE" in capsys.readouterr().out


@pytest.mark.unit
def test_a_team_runs_compiled_phase_is_the_rank_its_first_report_waited_for(capsys: pytest.CaptureFixture[str]) -> None:
    """Every rank tells its compile; rank 1 finished last (JAX writes the cache from process 0 only), so the phase is
    its compile, beside rank 0's; a rank's later compile replaces its earlier one, none counts after the report."""
    from raytpu.workloads.support.team_train import Reports, team_stamps

    reports = Reports()
    reports.compiled({"s": 5.0, "hits": 0, "misses": 1, "wall": 99.0}, 1)  # before any attempt: nothing to keep
    reports.started(100.2, resumed=False, rank=1)
    reports.started(100.0, resumed=False, rank=0)
    reports.compiled({"s": 0.1, "hits": 3, "misses": 0, "wall": 101.0}, 0)
    reports.compiled({"s": 0.5, "hits": 0, "misses": 1, "wall": 101.2}, 1)
    reports.compiled({"s": 1.4, "hits": 0, "misses": 3, "wall": 102.5}, 1)
    reports.reported(103.0, {"loss": 1.0}, None)
    reports.compiled({"s": 9.0, "hits": 0, "misses": 9, "wall": 110.0}, 1)
    attempt = reports.summary()["attempts"][0]
    assert len(reports.attempts) == 1 and attempt["started_wall"] == 100.0  # the first rank's start
    assert attempt["compile"]["s"] == 0.1
    assert [(p["process"], p["s"]) for p in attempt["compile"]["processes"]] == [(0, 0.1), (1, 1.4)]
    stamps = {s["phase"]: s for s in team_stamps([attempt])}
    assert stamps["compiled"]["wall"] == 102.5 and stamps["trainer_started"]["wall"] == pytest.approx(101.1)
    assert stamps["compiled"]["detail"] == ("XLA compile 1.40s before the first step on process 1, the last of 2 to "
                                            "finish: 0 cache hit(s), 3 miss(es); process 0: 0.10s, 3 hit(s), 0 "
                                            "miss(es)")
    # the run's compile budget judges the longest rank's, as a kit run's (workloads.slice_training.compile_verdict)
    from raytpu.workloads.support.slice_training import compile_verdict

    assert compile_verdict(attempt["compile"], 1.0)["compile_over_budget"] is True
    capsys.readouterr()
    # rank 0 finished last: its figures are the phase's, not repeated beside it
    reports.attempts[0]["compile"]["processes"][1]["wall"] = 100.5
    assert {s["phase"]: s for s in team_stamps([attempt])}["compiled"]["detail"] == (
        "XLA compile 0.10s before the first step on process 0, the last of 2 to finish: 3 cache hit(s), 0 miss(es)")
    capsys.readouterr()


@pytest.mark.unit
def test_a_restarts_compiles_count_in_the_attempt_each_rank_started_whatever_ranks_order() -> None:
    """A restart where rank 1 starts and compiles before rank 0 tells its start: rank 1's compile is the second
    attempt's, not the first's (Ray 2.60 runs one caller's calls to an actor in order; ranks race each other)."""
    from raytpu.workloads.support.team_train import Reports

    reports = Reports()
    for rank in (0, 1):
        reports.started(100.0, resumed=False, rank=rank)
        reports.compiled({"s": 2.0, "hits": 0, "misses": 4, "wall": 103.0}, rank)
    reports.reported(104.0, {"loss": 1.0}, "ckpt-1")
    reports.started(200.0, resumed=True, rank=1)  # the restart: rank 1 first
    reports.compiled({"s": 1.5, "hits": 0, "misses": 4, "wall": 202.0}, 1)
    reports.started(200.5, resumed=True, rank=0)
    reports.compiled({"s": 0.2, "hits": 4, "misses": 0, "wall": 201.0}, 0)
    first, second = reports.summary()["attempts"]
    assert [p["s"] for p in first["compile"]["processes"]] == [2.0, 2.0]
    assert second["started_wall"] == 200.0 and second["resumed"]
    assert [(p["process"], p["s"]) for p in second["compile"]["processes"]] == [(0, 0.2), (1, 1.5)]


@pytest.mark.unit
def test_a_followed_runs_report_carries_the_compile_and_its_budget_flag(capsys: pytest.CaptureFixture[str]) -> None:
    from raytpu.console.followed_run import team_result

    summary = {"ok": True, "compile": {"s": 12.0, "hits": 0, "misses": 4}, "compile_budget_s": 5.0,
               "compile_over_budget": True, "compile_warning": "compile 12.0s exceeds compile_budget_s 5s"}
    found = team_result(["noise", f"RAYTPU_TRAIN_RESULT {json.dumps(summary)}"])
    assert found == {"train": {k: v for k, v in summary.items() if k != "ok"}}
    assert "warning: compile 12.0s exceeds compile_budget_s 5s" in capsys.readouterr().err
    assert team_result(["RAYTPU_TRAIN_RESULT {\"ok\": true}"]) == {}


@pytest.mark.unit
@pytest.mark.parametrize(("job_config", "passed"), [
    (None, set(compile_cache.ENV_NAMES)),  # a driver run as a plain process (the demo, `raytpu local smoke`)
    ({"runtime_env": {"env_vars": {compile_cache.DIR_ENV: "/c", compile_cache.MIN_TIME_ENV: "0",
                                   compile_cache.MIN_SIZE_ENV: "-1", compile_cache.FOLDER_ENV: "/c"}}}, set()),
    ({"runtime_env": {"env_vars": {compile_cache.DIR_ENV: "/c"}}},
     {compile_cache.MIN_TIME_ENV, compile_cache.MIN_SIZE_ENV, compile_cache.FOLDER_ENV}),
    ({"runtime_env": None}, set(compile_cache.ENV_NAMES)),
    ("not json", set(compile_cache.ENV_NAMES)),
])
def test_a_driver_forwards_only_what_its_submitted_jobs_runtime_env_lacks(job_config: object,
                                                                          passed: set[str]) -> None:
    # Ray 2.60 ray._private.worker.init: a key in both the job's and ray.init's env_vars raises ValueError
    environ = {**compile_cache.env("/c"), compile_cache.FOLDER_ENV: "/c", "OTHER": "x"}
    if job_config is not None:
        environ[compile_cache.JOB_CONFIG_ENV] = job_config if isinstance(job_config, str) else json.dumps(job_config)
    assert set(compile_cache.forwarded(environ)) == passed
