"""Issue 47 items 3-4: a workload's ``env``/``secrets`` (rules, the RayJob's containers against the vendored CRD) and
``raytpu submit --set KEY=VALUE`` (applied before compile, every rule judging it, named ``--set KEY``)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from crd import schema_errors
from image_refs import FIXTURE_IMAGES
from k8s_schema import schema_errors as pod_schema_errors
from test_team_code import CONFIG, SRC, write

from raytpu.config import overrides, parse
from raytpu.core.common.errors import InvalidInput, InvalidInputs
from raytpu.core.manifests import kuberay
from raytpu.core.specs import run_env

pytestmark = pytest.mark.unit

SECRET_VALUE = "sentinel-7f3c9e-not-for-logs"

WITH_ENV = CONFIG.replace("    train_config: {steps: 200, lr: 3.0e-4, schedule: {warmup: 10}}\n",
                          "    train_config: {steps: 200, lr: 3.0e-4, schedule: {warmup: 10}}\n"
                          "    env: {WANDB_PROJECT: lm}\n    secrets: {WANDB_API_KEY: wandb-key}\n")


def problems(text: str, tmp_path: Path, **kw: Any) -> list[str]:
    write(tmp_path / "src", SRC)
    try:
        parse(text, str(tmp_path / "raytpu.yaml"), base=tmp_path, **kw)
    except (InvalidInput, InvalidInputs) as exc:
        return str(exc).splitlines()
    return []


def test_secrets_are_secret_key_refs_on_head_and_workers_never_values(tmp_path: Path) -> None:
    write(tmp_path / "src", SRC)
    spec = parse(WITH_ENV, str(tmp_path / "raytpu.yaml"), base=tmp_path)
    work = spec.workload("pretrain")
    job = kuberay.workload_manifest(spec, work, images=FIXTURE_IMAGES, service_account="ray", bucket="b",
                                    namespace="ray", name="pretrain-r1", args=work.kind.run_args("pretrain-r1"),
                                    code_zip="w-abc.zip")
    assert schema_errors(job) == []  # the vendored KubeRay CRD
    for template in kuberay.pod_templates(job):  # Kubernetes v1.34 OpenAPI: EnvVar, SecretKeySelector {name, key}
        assert pod_schema_errors(template["spec"], "PodSpec") == []
    cluster = job["spec"]["rayClusterSpec"]
    ref = {"name": "WANDB_API_KEY", "valueFrom": {"secretKeyRef": {"name": "wandb-key", "key": "value"}}}
    for group in (cluster["headGroupSpec"], *cluster["workerGroupSpecs"]):
        env = group["template"]["spec"]["containers"][0]["env"]
        assert ref in env and {"name": "WANDB_PROJECT", "value": "lm"} in env
    submitter = job["spec"]["submitterPodTemplate"]["spec"]["containers"][0].get("env", [])
    assert not any(e["name"] == "WANDB_API_KEY" for e in submitter)  # it runs only `ray job submit`
    env_vars = json.loads(job["spec"]["runtimeEnvYAML"])["env_vars"]
    assert env_vars["WANDB_PROJECT"] == "lm" and "WANDB_API_KEY" not in env_vars  # the kubelet sets it, from the Secret


@pytest.mark.parametrize(("entry", "field"), [
    ("env: {RAY_ADDRESS: x}", "workloads[0].env.RAY_ADDRESS"),
    ("env: {TPU_NAME: x}", "workloads[0].env.TPU_NAME"),
    ("env: {JAX_PLATFORMS: cpu}", "workloads[0].env.JAX_PLATFORMS"),
    ("env: {RAYTPU_RUN: x}", "workloads[0].env.RAYTPU_RUN"),
    ("env: {PATH: /x}", "workloads[0].env.PATH"),
    ("env: {1BAD: x}", "workloads[0].env.1BAD"),
    ("secrets: {KEY: Not_A_Name}", "workloads[0].secrets.KEY"),
    ("secrets: {MEGASCALE_PORT: ok-name}", "workloads[0].secrets.MEGASCALE_PORT"),
])
def test_names_the_kit_owns_and_bad_names_are_refused(tmp_path: Path, entry: str, field: str) -> None:
    loop = "    train_loop: lm.train:train_loop\n"
    text = CONFIG.replace(loop, f"{loop}    {entry}\n")
    found = problems(text, tmp_path)
    assert any(line.startswith(f"{field}:") for line in found), found


def test_env_is_only_for_a_workload_with_code(tmp_path: Path) -> None:
    text = CONFIG.replace("    kind: smoke\n", "    kind: smoke\n    env: {A: b}\n")
    assert any(line.startswith("workloads[2].env:") for line in problems(text, tmp_path))


def test_a_secret_is_read_from_the_submitting_shell() -> None:
    assert run_env.local_secret_values({"B": "b"}, {"B": SECRET_VALUE}, "w") == {"B": SECRET_VALUE}


def test_one_unset_secret_is_one_line_naming_the_field() -> None:
    with pytest.raises(InvalidInput, match=r"^workloads\[0\]\.secrets\.A: is required"):
        run_env.local_secret_values({"A": "a"}, {}, "workloads[0]")


def test_set_changes_the_named_workload_before_compile(tmp_path: Path) -> None:
    write(tmp_path / "src", SRC)
    spec = parse(CONFIG, str(tmp_path / "raytpu.yaml"), base=tmp_path, workload="pretrain",
                 overrides=("train_config.steps=20", "train_config.d_model=256", "run_time_s=3600", "env.A=b"))
    work = spec.workload("pretrain")
    assert work.train_config is not None and work.train_config["steps"] == 20 and work.train_config["d_model"] == 256
    assert work.run_time_s == 3600 and work.env == {"A": "b"}
    assert overrides.summary(("train_config.steps=20", "retries=1")) == {"train_config.steps": 20, "retries": 1}


@pytest.mark.parametrize(("given", "start"), [
    ("train_confg.steps=2", "--set 'train_confg.steps': 'train_confg' is not allowed"),
    ("name=x", "--set 'name': 'name' is not allowed"),
    ("steps", "--set: 'steps' is not KEY=VALUE"),
    ("retries=[1]", "--set retries: '[1]' is a YAML mapping or list"),
    ("retries=many", "--set retries:"),
    ("slice.x=1", "--set slice.x:"),
    ("train_config.steps=.nan", "--set train_config.steps:"),
])
def test_bad_set_is_exit_2_naming_the_flag_and_key(tmp_path: Path, given: str, start: str) -> None:
    found = problems(CONFIG, tmp_path, workload="pretrain", overrides=(given,))
    assert any(line.startswith(start) for line in found), found


def test_the_override_is_recorded_as_an_annotation() -> None:
    manifest: dict[str, Any] = {"metadata": {"name": "x"}}
    overrides.annotate(manifest, {"train_config.steps": 20})
    assert yaml.safe_load(manifest["metadata"]["annotations"][overrides.ANNOTATION]) == {"train_config.steps": 20}


def test_local_secrets_travel_in_a_private_file_never_in_the_runtime_env(tmp_path: Path,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """Ray 2.60's runtime env agent logs a job's ``env_vars`` (``runtime_env_agent.log``): a local run's secret values
    go in a 0600 file whose path alone the runtime env carries; the team's function loads it, the run removes it."""
    import os
    import stat

    from raytpu.workloads import local_secrets

    path = local_secrets.write({"TEAM_TOKEN": "s3cret"})
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600 and stat.S_IMODE(os.stat(Path(path).parent).st_mode) == 0o700
    monkeypatch.setenv(local_secrets.ENV, path)
    monkeypatch.delenv("TEAM_TOKEN", raising=False)
    local_secrets.load()
    assert os.environ["TEAM_TOKEN"] == "s3cret"
    local_secrets.remove(path)
    assert not Path(path).parent.exists()
