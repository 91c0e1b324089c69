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
from raytpu.core.specs.runtime import run_env

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
    # env on the containers only (no bash or Ray expansion on the way); the secret set by the kubelet, from the Secret
    assert "WANDB_PROJECT" not in env_vars and "WANDB_API_KEY" not in env_vars


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


# ------------------------------------------------------------------ issue 68 item 2: the names and values a team sets


LOOP = "    train_loop: lm.train:train_loop\n"


def with_entry(entry: str) -> str:
    """The team config with ``entry`` (``env: {...}``) on its train_loop workload (workloads[0])."""
    return CONFIG.replace(LOOP, f"{LOOP}    {entry}\n")


def test_libtpu_and_xla_flags_and_pythonpath_are_the_teams_and_reach_every_ray_container(tmp_path: Path) -> None:
    """Nothing sets ``LIBTPU_INIT_ARGS`` or ``XLA_FLAGS`` on the pods (docs/FACTS.md#spec-run-env); Ray keeps the
    code folder and the kit's zip before a team's ``PYTHONPATH``."""
    flags = {"LIBTPU_INIT_ARGS": "--xla_tpu_enable_latency_hiding_scheduler=true",
             "XLA_FLAGS": "--xla_dump_to=/tmp/xla-dump", "PYTHONPATH": "src"}
    entry = "env: {" + ", ".join(f"{k}: '{v}'" for k, v in flags.items()) + "}"
    assert problems(with_entry(entry), tmp_path) == []
    spec = parse(with_entry(entry), str(tmp_path / "raytpu.yaml"), base=tmp_path)
    job = kuberay.workload_manifest(spec, spec.workload("pretrain"), images=FIXTURE_IMAGES, service_account="ray",
                                    bucket="b", namespace="ray", name="pretrain-r1", code_zip="w-abc.zip")
    cluster = job["spec"]["rayClusterSpec"]
    for group in (cluster["headGroupSpec"], *cluster["workerGroupSpecs"]):
        env = group["template"]["spec"]["containers"][0]["env"]
        assert [e for e in env if e["name"] in flags] == [{"name": k, "value": v} for k, v in sorted(flags.items())]


def test_ray_puts_the_code_folder_and_the_kits_zip_before_a_teams_pythonpath(monkeypatch: pytest.MonkeyPatch) -> None:
    """Why ``PYTHONPATH`` is allowed: Ray 2.60's working_dir and py_modules plugins prepend their folders to the
    runtime env's and the raylet's own ``PYTHONPATH`` (``set_pythonpath_in_context``), so a team's entries never
    hide the kit's modules or the team's own code."""
    from ray._private.runtime_env.context import RuntimeEnvContext
    from ray._private.runtime_env.working_dir import set_pythonpath_in_context

    monkeypatch.setenv("PYTHONPATH", "src")  # the container's environment, which the raylet and its agent inherit
    context = RuntimeEnvContext(env_vars={})
    set_pythonpath_in_context("/ray/py_modules/core", context)
    set_pythonpath_in_context("/ray/working_dir/code", context)
    entries = context.env_vars["PYTHONPATH"].split(":")
    assert entries[:2] == ["/ray/working_dir/code", "/ray/py_modules/core"] and "src" in entries[2:]


@pytest.mark.parametrize("name", ["PYTHONHOME", "LD_PRELOAD", "LD_AUDIT", "LD_LIBRARY_PATH",
                                  "GOOGLE_APPLICATION_CREDENTIALS", "GCE_METADATA_HOST", "GCE_METADATA_ROOT",
                                  "GCE_METADATA_IP", "FQ_RAY_IP", "KUBERAY_GEN_RAY_START_CMD", "RAY_IP", "RAY_PORT",
                                  "RAY_ADDRESS", "RAY_CLOUD_INSTANCE_ID", "RAY_NODE_TYPE_NAME", "RAY_CLUSTER_NAME",
                                  "RAY_CLUSTER_NAMESPACE", "xla_flags", "Libtpu_Init_Args", "XLA_FLAGS_EXTRA",
                                  "LIBTPU_INIT_ARG", "HOME", "PATH"])
def test_a_name_that_breaks_every_worker_or_bypasses_workload_identity_is_one_line_saying_why(
        tmp_path: Path, name: str) -> None:
    for entry, field in ((f"env: {{{name}: x}}", f"workloads[0].env.{name}"),
                         (f"secrets: {{{name}: some-secret}}", f"workloads[0].secrets.{name}")):
        found = problems(with_entry(entry), tmp_path)
        assert len(found) == 1 and found[0].startswith(f"{field}: '{name}' "), found
        why = found[0].split(" ", 2)[2]
        assert "; valid: " in why and len(why.split("; valid: ")[0]) > 30  # a reason, not only "not allowed"


def test_a_value_that_is_not_a_string_says_how_to_quote_it_in_yaml_and_on_a_command_line(tmp_path: Path) -> None:
    found = problems(with_entry("env: {N: 8, T: true, F: 3.0e-4, E: null, L: [1]}"), tmp_path)
    assert found == [
        "workloads[0].env.N: 8: is not a string; valid: a string: quote it in YAML (N: \"8\"), and with --set quote "
        "it for YAML inside the shell's quotes (--set env.N='\"8\"')",
        "workloads[0].env.T: true: is not a string; valid: a string: quote it in YAML (T: \"true\"), and with --set "
        "quote it for YAML inside the shell's quotes (--set env.T='\"true\"')",
        "workloads[0].env.F: 0.0003: is not a string; valid: a string: quote it in YAML (F: \"0.0003\"), and with "
        "--set quote it for YAML inside the shell's quotes (--set env.F='\"0.0003\"')",
        "workloads[0].env.E: null: is not a string; valid: a string: quote it in YAML (E: \"\"), and with --set "
        "quote it for YAML inside the shell's quotes (--set env.E='\"\"')",
        "workloads[0].env.L: [1]: is not a string; valid: a string (a list or mapping is not an environment value)"]
    # the advice works: quoted in the file, and quoted for YAML inside the shell's quotes with --set
    assert problems(with_entry("env: {N: \"8\"}"), tmp_path) == []
    write(tmp_path / "src", SRC)
    spec = parse(CONFIG, str(tmp_path / "raytpu.yaml"), base=tmp_path, workload="pretrain",
                 overrides=('env.BATCH="32"',))
    assert spec.workload("pretrain").env == {"BATCH": "32"}
    assert problems(CONFIG, tmp_path, workload="pretrain", overrides=("env.BATCH=32",)) == [
        "--set env.BATCH: 32: is not a string; valid: a string: quote it in YAML (BATCH: \"32\"), and with --set "
        "quote it for YAML inside the shell's quotes (--set env.BATCH='\"32\"')"]


def test_an_env_name_that_looks_like_a_secret_is_a_validate_warning(tmp_path: Path) -> None:
    from bad_inputs import TEAM_SRC, Case, run_case, team_config

    env = {"WANDB_API_KEY": "k", "DB_PASSWORD": "p", "HF_TOKEN": "t", "APP_SECRET": "s", "WANDB_PROJECT": "lm",
           "KEYRING": "x"}
    case = Case("warn", ("validate", "raytpu.yaml"), "", {**TEAM_SRC, "raytpu.yaml": team_config({"env": env})},
                code=0)
    outcome = run_case(case, tmp_path)  # python -m raytpu validate raytpu.yaml
    assert outcome.exit_code == 0 and not outcome.traceback, outcome.stderr
    warned = [line for line in outcome.stderr.splitlines() if line.startswith("warning: workloads[3].env.")]
    assert [line.split(":", 2)[1].strip() for line in warned] == [
        "workloads[3].env.APP_SECRET", "workloads[3].env.DB_PASSWORD", "workloads[3].env.HF_TOKEN",
        "workloads[3].env.WANDB_API_KEY"]
    assert all("Ray logs" in line and "move it to secrets" in line for line in warned)
    assert run_env.secret_like_warnings("w", {"X_TOKEN": "t"}) == [
        "w.env.X_TOKEN: looks like a secret (its name ends in _TOKEN), but env is plain text in the RayJob and in the "
        "job's runtime env, which Ray logs; move it to secrets (X_TOKEN: SECRET, a Kubernetes Secret with key value, "
        "or {name: SECRET, key: KEY})"]


@pytest.mark.parametrize("case_id", ["env-name-ld_preload", "env-name-google_application_credentials",
                                     "env-name-fq_ray_ip", "env-value-int", "secret-number", "secret-ref-no-key",
                                     "set-env-number", "set-secret"])
def test_through_python_m_raytpu_a_bad_env_or_secret_is_exit_2_with_one_line(tmp_path: Path, case_id: str) -> None:
    """The corpus's cases (tests/bad_inputs.py ``ENV_CASES``) as real processes: exit 2, one ``error:`` line naming
    the field, no traceback."""
    from bad_inputs import ENV_CASES, run_case

    case = next(c for c in ENV_CASES if c.id == case_id)
    outcome = run_case(case, tmp_path)
    assert outcome.problems(case) == [], outcome.stderr
    assert [line for line in outcome.stderr.splitlines() if line.startswith("error:")] == [outcome.first_line]


# ------------------------------------------------------------------ a secret as {name, key}


def test_a_secret_given_as_name_and_key_is_read_from_that_key_everywhere(tmp_path: Path,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """A team's existing Secret with another key: the pods' ``secretKeyRef`` reads that key, the spec's JSON carries
    it, ``submit`` checks that key, and locally the shell's variable of the name is read, as for a bare name."""
    from typing import cast

    from raytpu.cluster import submission
    from raytpu.core.specs.spec import SecretKeyRef, WorkloadSpec

    entry = "secrets: {DB_PASS: {name: db-creds, key: password}, WANDB_API_KEY: wandb-key}"
    write(tmp_path / "src", SRC)
    spec = parse(with_entry(entry), str(tmp_path / "raytpu.yaml"), base=tmp_path)
    work = spec.workload("pretrain")
    assert work.secrets == {"DB_PASS": SecretKeyRef(name="db-creds", key="password"), "WANDB_API_KEY": "wandb-key"}
    job = kuberay.workload_manifest(spec, work, images=FIXTURE_IMAGES, service_account="ray", bucket="b",
                                    namespace="ray", name="pretrain-r1", code_zip="w-abc.zip")
    assert schema_errors(job) == []
    head = job["spec"]["rayClusterSpec"]["headGroupSpec"]["template"]
    assert pod_schema_errors(head["spec"], "PodSpec") == []
    assert [e for e in head["spec"]["containers"][0]["env"] if "valueFrom" in e and "secretKeyRef" in e["valueFrom"]
            ] == [{"name": "DB_PASS", "valueFrom": {"secretKeyRef": {"name": "db-creds", "key": "password"}}},
                  {"name": "WANDB_API_KEY", "valueFrom": {"secretKeyRef": {"name": "wandb-key", "key": "value"}}}]
    shipped = json.loads(json.dumps(work.to_json()))
    assert shipped["secrets"]["DB_PASS"] == {"name": "db-creds", "key": "password"}
    assert WorkloadSpec.from_json(shipped) == work
    assert run_env.local_secret_values(work.secrets, {"DB_PASS": "p", "WANDB_API_KEY": "w"}, "w") == {
        "DB_PASS": "p", "WANDB_API_KEY": "w"}

    class Secrets:
        def __init__(self, data: dict[str, dict[str, str]]) -> None:
            self.data = data

        def get(self, kind: str, name: str) -> dict[str, Any] | None:
            return {"data": self.data[name]} if name in self.data else None

    good = Secrets({"db-creds": {"password": "cA=="}, "wandb-key": {"value": "dw=="}})
    submission.check_team_secrets(cast(Any, good), work, "workloads[0].secrets", "ray")
    wrong = Secrets({"db-creds": {"value": "cA=="}, "wandb-key": {"value": "dw=="}})
    with pytest.raises(InvalidInput) as caught:
        submission.check_team_secrets(cast(Any, wrong), work, "workloads[0].secrets", "ray")
    assert str(caught.value) == (
        "workloads[0].secrets.DB_PASS: 'db-creds' has no key password (it holds value); valid: the value under key "
        "password: kubectl -n ray create secret generic db-creds --from-literal=password=...")


def test_set_cannot_override_secrets_and_says_why(tmp_path: Path) -> None:
    for given in ("secrets.WANDB_API_KEY=abc", "secrets={}"):
        found = problems(CONFIG, tmp_path, workload="pretrain", overrides=(given,))
        assert len(found) == 1 and "cannot be set for one run: a secret never travels on the command line" in found[0]
        assert found[0].startswith(f"--set '{given.split('=')[0]}': secrets ")


# ------------------------------------------------------------------ issue 71 item 8: --set reads as the file does


@pytest.mark.parametrize("text", ["off", "on", "no", "yes", "y", "n", "010", "0o10", "0x1f", "12:30", "1_000",
                                  "3.0e-4", "1e3", "True", "TRUE", "true", "null", "~", "Null", "2024-01-01",
                                  ".inf", "-7", "+7", "0.5", "'quoted'", '"32"', "a b", "a #c", "--flag=1"])
def test_set_reads_a_value_as_the_config_file_does(text: str) -> None:
    from raytpu.config import reading

    in_file = reading.load_yaml(f"x: {text}\n", "raytpu.yaml")["x"]
    assert overrides.parse_one(f"train_config.x={text}", ["train_config"]) == (("train_config", "x"), in_file)


def test_set_compile_cache_off_and_yaml_11_lookalikes_are_the_files_values(tmp_path: Path) -> None:
    """Under YAML 1.1 (PyYAML's safe_load) these were false, 750, 8 and false: the file reads them as strings and 10."""
    write(tmp_path / "src", SRC)
    spec = parse(CONFIG, str(tmp_path / "raytpu.yaml"), base=tmp_path, workload="pretrain",
                 overrides=("compile_cache=off", "train_config.at=12:30", "train_config.width=010",
                            "train_config.shuffle=no"))
    work = spec.workload("pretrain")
    assert work.compile_cache == "off"
    assert work.train_config is not None
    assert (work.train_config["at"], work.train_config["width"], work.train_config["shuffle"]) == ("12:30", 10, "no")
    filed = parse(with_entry("compile_cache: off"), str(tmp_path / "raytpu.yaml"), base=tmp_path)
    assert filed.workload("pretrain").compile_cache == work.compile_cache


# ------------------------------------------------------------------ issue 71 item 7: values reach the code as written


VALUES = {"COST": "cost $5 and `touch PWNED` and $(touch PWNED2)", "REF": "$(HOME)/data ${HOME} $HOME $$ $",
          "PLAIN": "a 'quoted' \"value\" with \\ backslash"}
"""Values the submitter's bash, Ray's ``expandvars`` or the kubelet would change if they met them unescaped."""


def go_quote(text: str) -> str:
    """Go's ``strconv.Quote`` of printable ASCII text (what KubeRay v1.7.0 ``BuildJobSubmitCommand`` applies to the
    runtime env's JSON): backslash and double quote escaped, in double quotes."""
    assert all(" " <= c <= "~" for c in text), "the runtime env's JSON is printable ASCII here"
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def go_json(value: Any) -> str:
    """``sigs.k8s.io/yaml.YAMLToJSON``'s output (Go's ``json.Marshal``): compact, keys sorted, ``<>&`` escaped."""
    text = json.dumps(value, sort_keys=True, separators=(",", ":"))
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


def submitted_args(job: dict[str, Any], folder: Path) -> list[str]:
    """The arguments ``ray job submit`` receives in the submitter pod: KubeRay v1.7.0 ``BuildJobSubmitCommand``'s
    words (K8sJobMode) joined by spaces and run by ``/bin/bash -ce``, a stand-in ``ray`` first on PATH recording
    them."""
    import os
    import subprocess

    runtime = yaml.safe_load(job["spec"]["runtimeEnvYAML"])
    words = ["ray", "job", "submit", "--address", "http://pretrain-r1-head-svc:8265", "--no-wait",
             "--runtime-env-json", go_quote(go_json(runtime)), "--submission-id", "pretrain-r1", "--",
             job["spec"]["entrypoint"].strip(), ";"]
    bin_dir = folder / "bin"
    bin_dir.mkdir()
    (bin_dir / "ray").write_text('#!/bin/sh\nprintf \'%s\\0\' "$@" > "$RAY_ARGS"\n')
    (bin_dir / "ray").chmod(0o755)
    env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}", "RAY_ARGS": str(folder / "args"),
           "HOME": "/home/ray"}
    subprocess.run(["/bin/bash", "-ce", "--", " ".join(words)], cwd=folder, env=env, check=True, timeout=30)
    return (folder / "args").read_bytes().decode().split("\0")[:-1]


def test_env_values_pass_the_submitters_bash_unchanged(tmp_path: Path) -> None:
    """Issue 71 item 7, through a real bash as KubeRay runs the submit: the team's values never enter the command
    (the containers carry them), and the workload's spec, which holds them, arrives whole. The same pipeline changes
    a raw value (``cost $5`` -> ``cost ``), so it is the shell that would have changed them."""
    entry = "env: {" + ", ".join(f"{k}: {json.dumps(v)}" for k, v in VALUES.items()) + "}"
    run = "    entrypoint: python tools/reserve.py"
    text = CONFIG.replace(run, f"    {entry}\n{run}")
    write(tmp_path / "src", SRC)
    spec = parse(text, str(tmp_path / "raytpu.yaml"), base=tmp_path)
    work = spec.workload("custom")
    assert work.env == VALUES
    job = kuberay.workload_manifest(spec, work, images=FIXTURE_IMAGES, service_account="ray", bucket="b",
                                    namespace="ray", name="pretrain-r1", code_zip="w-abc.zip")
    (tmp_path / "run").mkdir()
    args = submitted_args(job, tmp_path / "run")
    runtime = json.loads(args[args.index("--runtime-env-json") + 1])
    assert runtime == yaml.safe_load(job["spec"]["runtimeEnvYAML"])  # every byte of the runtime env arrived
    assert not set(VALUES) & set(runtime["env_vars"])  # the team's env is the containers' (next test)
    from raytpu.core.specs.spec import WorkloadSpec

    assert WorkloadSpec.from_env(runtime["env_vars"]).env == VALUES
    assert args[args.index("--") + 1:] == ["python", "tools/reserve.py", "--topology", "4x4"]
    assert not list((tmp_path / "run").glob("PWNED*"))  # no backquoted or $(...) command ran
    # the control: the same pipeline with a raw value in the runtime env changes it, and runs the command
    raw = {**job, "spec": {**job["spec"], "runtimeEnvYAML": json.dumps({"env_vars": {"COST": VALUES["COST"]}})}}
    (tmp_path / "raw").mkdir()
    changed = submitted_args(raw, tmp_path / "raw")
    assert json.loads(changed[changed.index("--runtime-env-json") + 1])["env_vars"]["COST"] == "cost  and  and "
    assert (tmp_path / "raw" / "PWNED").exists()


def kube_expand(text: str, mapping: dict[str, str]) -> str:
    """k8s.io/kubernetes third_party/forked/golang/expansion ``Expand`` with ``MappingFuncFor(mapping)``: ``$(NAME)``
    replaced when defined (else kept), ``$$`` reduced to ``$``, any other ``$`` kept."""
    out, checkpoint, cursor = [], 0, 0
    while cursor < len(text):
        if text[cursor] == "$" and cursor + 1 < len(text):
            out.append(text[checkpoint:cursor])
            rest = text[cursor + 1:]
            if rest[0] == "$":
                read, advance = "$", 1
            elif rest[0] == "(" and (close := rest.find(")", 1)) != -1:
                read, advance = mapping.get(rest[1:close], f"$({rest[1:close]})"), close + 1
            elif rest[0] == "(":
                read, advance = "$(", 1
            else:
                read, advance = "$" + rest[0], 1
            out.append(read)
            cursor += advance
            checkpoint = cursor + 1
        cursor += 1
    return "".join(out) + text[checkpoint:]


@pytest.mark.parametrize(("given", "expected"), [  # Kubernetes' own cases (expansion/expand_test.go)
    ("$$(VAR_B)_$(VAR_A)", "$(VAR_B)_A"), ("$$(VAR_A)_$$(VAR_B)", "$(VAR_A)_$(VAR_B)"), ("f000-$$VAR_A", "f000-$VAR_A"),
    ("foo\\$(VAR_C)bar", "foo\\Cbar"), ("$(VAR_A$(VAR_B))", "$(VAR_A$(VAR_B))"), ("$(VAR_REF)", "$(VAR_A)"),
    ("foo$(VAR_EMPTY)bar", "foobar"), ("foo$(VAR_Awhoops!", "foo$(VAR_Awhoops!"), ("$?_boo_$!", "$?_boo_$!"),
    ("$VAR_A", "$VAR_A"), ("$(VAR_DNE)", "$(VAR_DNE)"), ("$$$$$$(BIG_MONEY)", "$$$(BIG_MONEY)"),
    ("$$$$$$$(VAR_A)", "$$$A"), ("${VAR_A}", "${VAR_A}"), ("$(VAR_C)_______$(", "C_______$("),
    ("$(VAR_A)foobarzab$", "Afoobarzab$"), ("--$($($($($--", "--$($($($($--"), ("$(foo$$var)", "$(foo$$var)"),
])
def test_the_kubelets_expansion_as_kubernetes_tests_it(given: str, expected: str) -> None:
    mapping = {"VAR_A": "A", "VAR_B": "B", "VAR_C": "C", "VAR_REF": "$(VAR_A)", "VAR_EMPTY": ""}
    assert kube_expand(given, mapping) == expected


def test_a_dollar_is_doubled_on_the_container_so_the_kubelet_hands_the_value_back(tmp_path: Path) -> None:
    """Kubernetes expands ``$(NAME)`` from a container's earlier variables (the kit's ``HOME`` comes first) and
    reduces ``$$``: each value is written with every ``$`` doubled, the exact EnvVar below, and comes back whole."""
    entry = "env: {" + ", ".join(f"{k}: {json.dumps(v)}" for k, v in VALUES.items()) + "}"
    write(tmp_path / "src", SRC)
    spec = parse(with_entry(entry), str(tmp_path / "raytpu.yaml"), base=tmp_path)
    job = kuberay.workload_manifest(spec, spec.workload("pretrain"), images=FIXTURE_IMAGES, service_account="ray",
                                    bucket="b", namespace="ray", name="pretrain-r1", code_zip="w-abc.zip")
    cluster = job["spec"]["rayClusterSpec"]
    for group in (cluster["headGroupSpec"], *cluster["workerGroupSpecs"]):
        container = group["template"]["spec"]["containers"][0]
        entries = [e for e in container["env"] if e["name"] in VALUES]
        assert entries == [
            {"name": "COST", "value": "cost $$5 and `touch PWNED` and $$(touch PWNED2)"},
            {"name": "PLAIN", "value": "a 'quoted' \"value\" with \\ backslash"},
            {"name": "REF", "value": "$$(HOME)/data $${HOME} $$HOME $$$$ $$"}]
        declared: dict[str, str] = {}
        for item in container["env"]:  # in order, as the kubelet builds the container's environment
            if "value" in item:
                declared[item["name"]] = kube_expand(item["value"], declared)
        assert declared["HOME"] and {k: declared[k] for k in VALUES} == VALUES
    assert kube_expand("$(HOME)/data", {"HOME": "/home/ray"}) == "/home/ray/data"  # what an unescaped value became


@pytest.mark.parametrize("value", ["", "$", "$$", "$(", "$()", "$(A)$", "a$b$(c)$$(d)$$$(e)", "$(HOME)", "`x`$1\\$"])
def test_every_value_survives_the_kubelet(value: str) -> None:
    assert kube_expand(run_env.kube_env_value(value), {"HOME": "/h", "A": "a", "c": "C", "d": "D", "e": "E"}) == value
