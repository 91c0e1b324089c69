"""A team's own code on the slice (issue 38): the code folder's zip, the static checks, the RayJob of both forms (a
``train_loop`` in the kit's JaxTrainer, a ``job``'s own entrypoint) against the vendored KubeRay CRDs, and the upload
at the Cloud Storage boundary (tests/cloudbuild_server.py: the GCS JSON API cannot be reached from here).

End to end on the emulated slice: tests/test_team_slice.py. Bad configs, argv to exit code: tests/bad_inputs.py
(``TEAM_CASES``)."""

from __future__ import annotations

import hashlib
import io
import json
import os
import re
import sys
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from cloudbuild_server import CloudBuildServer
from cloudbuild_server import serving as storage_serving
from crd import schema_errors
from image_refs import FIXTURE_IMAGES
from kube_server import ServiceAccountKey

from raytpu.cluster import google_api
from raytpu.cluster.http_retry import HttpRetry
from raytpu.config import parse
from raytpu.core.common import errors, names
from raytpu.core.common.errors import InvalidInput, InvalidInputs
from raytpu.core.manifests import kuberay
from raytpu.core.specs.runtime import user_code
from raytpu.teamcode import bundle as bundle_mod
from raytpu.teamcode import checks

pytestmark = pytest.mark.unit

REPO = Path(__file__).resolve().parents[1]


def write(root: Path, files: dict[str, str]) -> Path:
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root


SRC = {"lm/__init__.py": "", "lm/train.py": "def train_loop(config):\n    return config\n",
       "tools/reserve.py": "print('reserve')\n", "README.md": "team notes\n"}


# ---------------------------------------------------------------------- the zip


def test_the_zip_is_the_same_bytes_whatever_the_file_times_order_and_umask(tmp_path: Path) -> None:
    first = bundle_mod.bundle("code", write(tmp_path / "a", SRC), "pretrain")
    second_root = tmp_path / "b"
    for rel in reversed(list(SRC)):  # another creation order, other times, other modes
        write(second_root, {rel: SRC[rel]})
        os.utime(second_root / rel, (1_000_000, 1_000_000))
        os.chmod(second_root / rel, 0o600)
    second = bundle_mod.bundle("code", second_root, "pretrain")
    assert first.data == second.data
    assert first.object_name == f"pretrain-{hashlib.sha256(first.data).hexdigest()}.zip" == second.object_name


def test_a_changed_file_gets_a_new_name(tmp_path: Path) -> None:
    """Ray caches an unpacked remote working_dir by URI: new content must never reuse a name."""
    before = bundle_mod.bundle("code", write(tmp_path, SRC), "pretrain")
    (tmp_path / "lm" / "train.py").write_text("def train_loop(config):\n    return 1\n")
    assert bundle_mod.bundle("code", tmp_path, "pretrain").object_name != before.object_name


def test_what_never_ships_is_left_out_and_said(tmp_path: Path) -> None:
    write(tmp_path, {**SRC, ".git/config": "x", "lm/__pycache__/train.cpython-311.pyc": "x", "lm/old.pyc": "x",
                     ".env": "TOKEN=1", ".env.prod": "TOKEN=2", "keys/tls.key": "k", "keys/ca.pem": "k",
                     "id_rsa": "k", "gcp-credentials.json": "{}", "my-service-account.json": "{}",
                     "venv2/pyvenv.cfg": "home = /usr", "venv2/lib/site.py": "x", "node_modules/a.js": "x",
                     ".venv/bin/python": "x", "data/.DS_Store": "x"})
    made = bundle_mod.bundle("code", tmp_path, "w")
    with zipfile.ZipFile(io.BytesIO(made.data)) as archive:
        shipped = sorted(n.removeprefix("code/") for n in archive.namelist())
    assert shipped == sorted(SRC)
    assert set(made.excluded) >= {".git/", "lm/__pycache__/", "lm/old.pyc", ".env", ".env.prod", "keys/tls.key",
                                  "keys/ca.pem", "id_rsa", "gcp-credentials.json", "my-service-account.json",
                                  "venv2/", "node_modules/", ".venv/", "data/.DS_Store"}


def test_rays_own_unpacking_gives_back_the_folder(tmp_path: Path) -> None:
    """Ray 2.60 unpacks a remote working_dir zip without its single top-level folder: what the job's cwd holds is
    the team's folder as it is."""
    from ray._private.runtime_env.packaging import unzip_package

    made = bundle_mod.bundle("code", write(tmp_path / "src", SRC), "w")
    (tmp_path / made.object_name).write_bytes(made.data)
    unzip_package(package_path=str(tmp_path / made.object_name), target_dir=str(tmp_path / "out"),
                  remove_top_level_directory=True, unlink_zip=False)
    found = {p.relative_to(tmp_path / "out").as_posix(): p.read_text()
             for p in (tmp_path / "out").rglob("*") if p.is_file()}
    assert found == SRC


def test_links_inside_ship_and_links_out_are_refused(tmp_path: Path) -> None:
    root = write(tmp_path / "src", SRC)
    (root / "lm" / "alias.py").symlink_to(root / "lm" / "train.py")
    (root / "loop").symlink_to(root)  # a link back up: walked once, no endless loop
    assert "lm/alias.py" in [n for n, _ in bundle_mod.code_files("code", root)[0]]
    (root / "secrets").symlink_to("/etc")
    with pytest.raises(InvalidInput, match="code: 'secrets' is a link leading out of the folder"):
        bundle_mod.code_files("code", root)


def test_a_fifo_is_refused_not_read(tmp_path: Path) -> None:
    root = write(tmp_path / "src", SRC)
    os.mkfifo(root / "pipe")
    with pytest.raises(InvalidInput, match="not a regular file"):
        bundle_mod.code_files("workloads[3].code", root)


def test_a_folder_over_the_limit_is_refused_naming_the_field(tmp_path: Path, monkeypatch: pytest.MonkeyPatch
                                                              ) -> None:
    monkeypatch.setattr(bundle_mod, "MAX_CODE_BYTES", 1024)
    root = write(tmp_path / "src", {**SRC, "data/big.bin": "x" * 2048})
    with pytest.raises(InvalidInput) as raised:
        bundle_mod.code_files("workloads[3].code", root)
    assert raised.value.field == "workloads[3].code" and "MiB" in str(raised.value)


# ---------------------------------------------------------------------- the static checks


@pytest.mark.parametrize(("source", "ok"), [
    ("def train_loop(config):\n    pass\n", True),
    ("def train_loop(config, seed=0, *, debug=False):\n    pass\n", True),
    ("def train_loop(*args):\n    pass\n", True),  # Ray Train counts *args as a required argument: the config
    ("def train_loop(config=None):\n    pass\n", True),  # without train_config called with none, as Ray Train does
    ("from lm.impl import train_loop\n", True),  # bound by an import: its arguments are not known
    ("train_loop = make_loop()\n", True),
    ("def train_loop():\n    pass\n", True),  # without train_config: Ray Train calls it with no argument
    ("def train_loop(config, extra):\n    pass\n", False),
    ("def train_loop(config, *, required):\n    pass\n", False),
    ("async def train_loop(config):\n    pass\n", False),
    ("def other(config):\n    pass\n", False),
    ("if True:\n    def train_loop(config):\n        pass\n", False),  # not at the top level
    ("def train_loop(config:\n", False),
])
def test_train_loop_is_read_without_importing_the_team_code(tmp_path: Path, source: str, ok: bool) -> None:
    write(tmp_path, {"lm/train.py": "raise SystemExit('imported!')\n" + source})
    found = checks.train_loop_problems("train_loop", tmp_path, "lm.train:train_loop")
    assert (found == []) is ok, found


@pytest.mark.parametrize(("source", "ok"), [
    ("def train_loop(config):\n    pass\n", True),
    ("def train_loop(config=None):\n    pass\n", True),  # the kit passes it the config
    ("def train_loop(*args):\n    pass\n", True),
    ("def train_loop():\n    pass\n", False),
    ("def train_loop(*, debug=False):\n    pass\n", False),  # no positional argument either
])
def test_a_train_config_needs_a_parameter_to_go_to(tmp_path: Path, source: str, ok: bool) -> None:
    """Issue 67: Ray 2.60 calls a train_loop_per_worker of no required parameter with no argument; a train_config
    would then go nowhere, so it is refused under its own field."""
    write(tmp_path, {"lm/train.py": source})
    found = checks.train_loop_problems("workloads[0].train_loop", tmp_path, "lm.train:train_loop", {"steps": 3})
    assert (found == []) is ok, found
    if not ok:
        assert [p.field for p in found] == ["workloads[0].train_config"]
        assert "nothing to pass it to" in found[0].problem
        assert found[0].valid.startswith("a parameter on the function") and "no train_config" in found[0].valid


def _validate(config: Path) -> Any:
    import subprocess

    return subprocess.run([sys.executable, "-m", "raytpu", "validate", str(config)], capture_output=True, text=True,
                          cwd=REPO, timeout=120)


def test_a_train_loop_of_no_argument_validates_and_refuses_a_train_config(tmp_path: Path) -> None:
    write(tmp_path / "src", {**SRC, "lm/train.py": "def train_loop():\n    return 1\n"})
    (tmp_path / "raytpu.yaml").write_text(CONFIG)
    refused = _validate(tmp_path / "raytpu.yaml")
    assert refused.returncode == 2, refused.stderr
    assert "Traceback" not in refused.stderr and refused.stdout == ""
    assert refused.stderr.splitlines() == [
        "error: workloads[0].train_config: {steps: 200, lr: 0.0003, schedule: {warmup: 10}} is set, "  # as in YAML
        "but lm.train:train_loop takes no argument (train_loop()), so there is nothing to pass it to; valid: a "
        "parameter on the function (def train_loop(config): ... at the top level of train.py) or no train_config"]
    (tmp_path / "raytpu.yaml").write_text(re.sub(r"\n    train_config: .*\n", "\n", CONFIG))
    accepted = _validate(tmp_path / "raytpu.yaml")
    assert accepted.returncode == 0, accepted.stderr
    assert "runs lm.train:train_loop" in accepted.stdout


def _required(params: str) -> Any:
    namespace: dict[str, Any] = {}
    exec(f"def f({params}):\n    return 'called'\n", namespace)  # the test's own source
    return namespace["f"]


@pytest.mark.parametrize("params", ["", "config", "config=None", "*args", "config, seed=0, *, debug=False",
                                    "config, /", "*, debug=False", "**kwargs", "a, b", "config, *, must"])
def test_the_source_and_the_function_read_alike_and_as_ray_counts(params: str) -> None:
    """One rule for validate (ast) and the train program (inspect); its count is Ray Train's own."""
    import ast

    from ray.train._internal.utils import count_required_parameters

    node = ast.parse(f"def f({params}):\n    pass\n").body[0]
    assert isinstance(node, ast.FunctionDef)
    read, found = user_code.LoopParameters.of_source(node.args), user_code.LoopParameters.of_function(_required(params))
    assert found is not None
    assert (read.required, read.positional, read.required_keywords) == (found.required, found.positional,
                                                                        found.required_keywords)
    assert read.required == count_required_parameters(_required(params))


@pytest.mark.parametrize(("params", "configured", "passed"), [
    ("", False, False),
    ("config", False, True),  # {} as Ray Train passes it
    ("config", True, True),
    ("config=None", False, False),  # Ray Train calls it with none: it trains on its defaults
    ("config=None", True, True),  # the kit passes the workload's train_config
    ("*args", False, True),
    ("*args", True, True),
])
def test_the_train_programs_call_passes_the_config_only_where_it_can_go(params: str, configured: bool,
                                                                        passed: bool) -> None:
    """``run_attempt`` calls the team's function with ``train_loop_arguments``: no argument to a function of none."""
    config = {"steps": 3} if configured else {}
    function = _required(params)
    arguments = user_code.train_loop_arguments(function, config, configured)
    assert arguments == ((config,) if passed else ())
    assert function(*arguments) == "called"


def test_run_attempt_is_still_given_the_config_by_ray_train() -> None:
    """The JaxTrainer's function is ``run_attempt`` bound to the workload: one required argument, so Ray Train 2.60
    passes it train_loop_config, and run_attempt decides what the team's function gets."""
    import functools

    from ray.train._internal.utils import count_required_parameters

    from raytpu.workloads.support import team_train

    bound = functools.partial(team_train.run_attempt, "lm.train:train_loop", object(), configured=False)
    assert count_required_parameters(bound) == 1


def test_the_train_program_refuses_a_train_config_its_function_cannot_take(spec: Any, tmp_path: Path,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """Code in an image is read only on the pod: there too a train_config for a function of no argument is exit 2
    naming the field, before any slice is reserved."""
    from dataclasses import replace

    from raytpu.workloads.support import team_train

    write(tmp_path, {"zero/__init__.py": "", "zero/train.py": "def train_loop():\n    return 7\n"})
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", list(sys.path))
    work = replace(spec.workload("pretrain"), train_loop="zero.train:train_loop")
    with pytest.raises(InvalidInput, match=r"^train_config: .* takes no argument \(train_loop\(\)\), so there is "
                       "nothing to pass it to"):
        team_train.run(None, work, {})  # type: ignore[arg-type]


# a job's driver entrypoint that never imports ray (issue 67): it would run on the head's CPU, the chips waiting

HEAD_WARNING = ("warning: workloads[1].entrypoint: runs on the Ray head (CPU); the slice's 16 chips would wait: set "
                "workloads[1].run_on: every_host")


def _job_config(tmp_path: Path, files: dict[str, str], entrypoint: str = "python train.py",
                run_on: str | None = None) -> Path:
    write(tmp_path / "src", {**SRC, **files})
    text = CONFIG.replace('entrypoint: python tools/reserve.py --topology "4x4"', f"entrypoint: {entrypoint}"
                          + (f"\n    run_on: {run_on}" if run_on else ""))
    (tmp_path / "raytpu.yaml").write_text(text)
    return tmp_path / "raytpu.yaml"


def test_a_driver_script_that_never_imports_ray_is_warned_of(tmp_path: Path) -> None:
    proc = _validate(_job_config(tmp_path, {"train.py": "import jax\nimport numpy as np\nprint(jax.devices())\n"}))
    assert proc.returncode == 0, proc.stderr
    warned = [line for line in proc.stderr.splitlines() if "entrypoint" in line]
    assert len(warned) == 1 and warned[0].startswith(HEAD_WARNING), proc.stderr
    assert "workloads[1].run_on" in warned[0] and "16 chips" in warned[0] and "Traceback" not in proc.stderr


@pytest.mark.parametrize(("files", "entrypoint", "run_on"), [
    ({"train.py": "import ray\n"}, "python train.py", None),
    ({"train.py": "import jax\nfrom ray.util import tpu\n"}, "python train.py", None),
    ({"train.py": "def main():\n    import ray.train\n"}, "python train.py", "driver"),
    ({"train.py": "from lib import util\n", "lib/__init__.py": "", "lib/util.py": "import ray\n"},
     "python train.py", None),  # a module of the code folder it imports does
    ({"tools/run.py": "from . import helper\n", "tools/helper.py": "from ray import train\n"},
     "python -m tools.run", None),
    ({"train.py": "import jax\n"}, "python train.py", "every_host"),
    ({"run.sh": "python train.py\n"}, "./run.sh", None),  # not a Python script: not read
    ({"train.py": "x = " + "+".join(["1"] * 100_000) + "\n"}, "python train.py", None),  # ast.parse: RecursionError
    ({"train.py": "import jax\nimport big\n", "big.py": "#" * (2 << 20) + "\n"}, "python train.py", None),
])
def test_no_warning_where_the_script_may_be_a_ray_driver_or_runs_on_every_host(
        tmp_path: Path, files: dict[str, str], entrypoint: str, run_on: str | None) -> None:
    proc = _validate(_job_config(tmp_path, files, entrypoint, run_on))
    assert proc.returncode == 0, proc.stderr
    assert "entrypoint" not in proc.stderr and "Traceback" not in proc.stderr, proc.stderr


def test_the_import_walk_is_bounded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A chain of local imports past MAX_IMPORT_FILES counts as importing ray (unread), not as a warning."""
    chain = {f"m{i}.py": f"import m{i + 1}\n" for i in range(60)}
    spec_ = parse(_job_config(tmp_path, {"train.py": "import m0\n", **chain}).read_text(),
                  str(tmp_path / "raytpu.yaml"), base=tmp_path)
    assert checks.head_warnings("workloads[1]", spec_.workload("custom")) == []
    monkeypatch.setattr(checks, "MAX_IMPORT_FILES", 100)
    assert checks.head_warnings("workloads[1]", spec_.workload("custom"))[0].startswith(
        HEAD_WARNING.removeprefix("warning: "))


def test_a_multislice_job_counts_every_slices_chips(tmp_path: Path) -> None:
    text = _job_config(tmp_path, {"train.py": "import jax\n"}).read_text()
    text = text.replace("    count: 1\n", "    count: 2\n", 1).replace("    slices: 1\n    code",
                                                                  "    slices: 2\n    code")
    work = parse(text, str(tmp_path / "raytpu.yaml"), base=tmp_path).workload("custom")
    assert work.slices_per_run == 2
    assert "the 2 slices' 32 chips would wait" in checks.head_warnings("workloads[1]", work)[0]


def test_submit_says_the_warning_before_it_submits(tmp_path: Path) -> None:
    import subprocess

    config = _job_config(tmp_path, {"train.py": "import jax\n"})
    for where in (["--local", "--dir", str(tmp_path / "run")],  # no local cluster: refused after the warning
                  ["--stack", "ray-tpu-cluster", "--outputs", str(tmp_path / "none.json")]):  # no outputs: likewise
        proc = subprocess.run([sys.executable, "-m", "raytpu", "submit", "custom", "--config", str(config), *where],
                              capture_output=True, text=True, cwd=REPO, timeout=120)
        assert proc.returncode != 0 and proc.stderr.startswith(HEAD_WARNING), proc.stderr
        assert "Traceback" not in proc.stderr


def test_a_package_module_is_found_by_its_init(tmp_path: Path) -> None:
    write(tmp_path, {"lm/train/__init__.py": "def train_loop(config):\n    pass\n"})
    assert checks.train_loop_problems("train_loop", tmp_path, "lm.train:train_loop") == []


@pytest.mark.parametrize(("entrypoint", "target"), [
    ("python tools/reserve.py --topology 4x4", ("script", "tools/reserve.py")),
    ("python3 -u -W ignore tools/reserve.py", ("script", "tools/reserve.py")),
    ("/usr/bin/python3 -m tools.reserve", ("module", "tools.reserve")),
    ("python -c 'import ray'", None),
    ("./run.sh", ("script", "./run.sh")),
    ("bash -lc 'echo hi'", None),
    ("ray status", None),
])
def test_what_an_entrypoint_runs_from_the_folder(entrypoint: str, target: tuple[str, str] | None) -> None:
    assert user_code.entrypoint_target(user_code.entrypoint_words("entrypoint", entrypoint)[0]) == target


def test_an_entrypoint_module_or_script_must_be_in_the_folder(tmp_path: Path) -> None:
    write(tmp_path, {**SRC, "tools/__init__.py": "", "cli/__main__.py": ""})
    for good in ("python tools/reserve.py", "python -m tools.reserve", "python -m cli", "ray status"):
        assert checks.entrypoint_problems("entrypoint", tmp_path, good) == [], good
    for bad in ("python tools/nope.py", "python -m tools.nope", "python /etc/passwd", "python ../x.py", "./run.sh"):
        assert checks.entrypoint_problems("entrypoint", tmp_path, bad), bad


@pytest.mark.parametrize("value", ["lm.train:train_loop", "a:b", "pkg.sub.mod:_private"])
def test_good_train_loop_spellings(value: str) -> None:
    assert user_code.train_loop_problems("train_loop", value) == []


@pytest.mark.parametrize("value", ["", "lm.train", ":f", "m:", "lm/train:f", "lm.train:f:g", "1lm:f", "lm.def:f",
                                   "lm.train:f()", " lm:f", 3, None])
def test_bad_train_loop_spellings(value: object) -> None:
    assert user_code.train_loop_problems("train_loop", value)


# ---------------------------------------------------------------------- the RayJobs

CONFIG = (REPO / "raytpu.example.yaml").read_text().split("\nworkloads:")[0] + """
workloads:
  - name: pretrain
    kind: train
    slice: train
    code: ./src
    train_loop: lm.train:train_loop
    train_config: {steps: 200, lr: 3.0e-4, schedule: {warmup: 10}}
  - name: custom
    kind: job
    slice: train
    slices: 1
    code: ./src
    entrypoint: python tools/reserve.py --topology "4x4"
  - name: smoke
    kind: smoke
    slice: train
"""


@pytest.fixture
def spec(tmp_path: Path) -> Any:
    write(tmp_path / "src", SRC)
    return parse(CONFIG, str(tmp_path / "raytpu.yaml"), base=tmp_path)


def manifest(spec: Any, workload: str, code_zip: str = "w-abc.zip") -> dict[str, Any]:
    work = spec.workload(workload)
    name = f"{workload}-r1"
    return kuberay.workload_manifest(spec, work, images=FIXTURE_IMAGES, service_account="ray", bucket="b",
                                     namespace="ray", name=name, args=work.kind.run_args(name), code_zip=code_zip)


def test_code_is_made_absolute_against_the_config_folder(spec: Any, tmp_path: Path) -> None:
    assert spec.workload("pretrain").code == str(tmp_path / "src")


@pytest.mark.parametrize("workload", ["pretrain", "custom"])
def test_both_forms_pass_the_vendored_crds_and_carry_the_code_and_the_slice(spec: Any, workload: str) -> None:
    job = manifest(spec, workload)
    assert schema_errors(job) == []
    runtime = yaml.safe_load(job["spec"]["runtimeEnvYAML"])
    assert runtime["working_dir"] == "file:///mnt/gcs/code/w-abc.zip"
    assert runtime["py_modules"] == [names.py_modules_uri()]
    env = runtime["env_vars"]
    assert {k: env[k] for k in ("RAYTPU_GENERATION", "RAYTPU_TOPOLOGY", "RAYTPU_HOSTS", "RAYTPU_CHIPS_PER_HOST",
                                "RAYTPU_SLICES", "RAYTPU_STORAGE", "RAYTPU_RUN")} == {
        "RAYTPU_GENERATION": "v6e", "RAYTPU_TOPOLOGY": "4x4", "RAYTPU_HOSTS": "4", "RAYTPU_CHIPS_PER_HOST": "4",
        "RAYTPU_SLICES": "1", "RAYTPU_STORAGE": f"/mnt/gcs/checkpoints/{workload}-r1", "RAYTPU_RUN": f"{workload}-r1"}
    carried = json.loads(env["RAYTPU_WORKLOAD"])
    # issue 49: the job runs in working_dir's copy; the submitting machine's path stays on the submitting machine
    # Source: Ray 2.60 ray._private.runtime_env.working_dir.WorkingDirPlugin.modify_context (`cd <dir> &&`)
    assert carried["code"] == user_code.SHIPPED_CODE
    assert spec.workload(workload).code not in json.dumps(job)


def test_a_train_loop_runs_the_kits_train_program_with_its_config(spec: Any) -> None:
    job = manifest(spec, "pretrain")
    assert job["spec"]["entrypoint"].startswith("python -m raytpu.workloads.train --storage-path /mnt/gcs/checkpoints "
                                                "--name pretrain-r1")
    carried = json.loads(yaml.safe_load(job["spec"]["runtimeEnvYAML"])["env_vars"]["RAYTPU_WORKLOAD"])
    assert carried["train_loop"] == "lm.train:train_loop"
    assert carried["train_config"] == {"steps": 200, "lr": 3.0e-4, "schedule": {"warmup": 10}}


def test_a_job_runs_the_teams_entrypoint_as_written(spec: Any) -> None:
    job = manifest(spec, "custom")
    assert job["spec"]["entrypoint"] == 'python tools/reserve.py --topology "4x4"'
    assert job["metadata"]["labels"][names.WORKLOAD_LABEL] == "job"


def test_the_kits_own_workloads_get_no_team_environment(spec: Any) -> None:
    smoke = kuberay.workload_manifest(spec, spec.workload("smoke"), images=FIXTURE_IMAGES, service_account="ray",
                                      bucket="b", name="smoke-r1")
    runtime = yaml.safe_load(smoke["spec"]["runtimeEnvYAML"])
    assert "working_dir" not in runtime and not any(k.startswith("RAYTPU_") and k != "RAYTPU_WORKLOAD"
                                                    for k in runtime["env_vars"])


def test_the_spec_round_trips_through_the_pods_json(spec: Any) -> None:
    from dataclasses import replace

    from raytpu.core.specs.spec import WorkloadSpec

    for work in spec.workloads:
        shipped = work if work.code is None else replace(work, code=user_code.SHIPPED_CODE)
        assert WorkloadSpec.from_env(work.workload_env()) == shipped


# ---------------------------------------------------------------------- the upload


@pytest.fixture
def storage(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, sa_key: ServiceAccountKey
            ) -> Iterator[CloudBuildServer]:
    """The loopback GCS JSON API and Application Default Credentials whose token endpoint it is."""
    with storage_serving(sa_key) as server:
        (tmp_path / "adc.json").write_text(json.dumps(sa_key.info(server.token_uri)))
        monkeypatch.setenv("GOOGLE_APPLICATION_CREDENTIALS", str(tmp_path / "adc.json"))
        monkeypatch.setenv(google_api.STORAGE_ENV, server.url)
        monkeypatch.setenv(google_api.CLOUDBUILD_ENV, server.url)
        monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")
        monkeypatch.setattr(HttpRetry, "get_backoff_time", lambda self: 0.0)
        yield server


def test_the_code_zip_is_uploaded_once_and_created_only_if_absent(storage: CloudBuildServer, tmp_path: Path) -> None:
    made = bundle_mod.bundle("code", write(tmp_path / "src", SRC), "pretrain")
    uri = names.code_zip_uri("my-bucket", made.object_name)
    assert google_api.upload_code(uri, made.data) is True
    assert storage.objects[("my-bucket", f"code/{made.object_name}")] == made.data
    assert google_api.upload_code(uri, made.data) is False  # already there: looked up, not sent again
    uploads = storage.of("POST", "/upload/")
    assert len(uploads) == 1 and uploads[0].query["ifGenerationMatch"] == "0"


def test_an_existing_code_zip_that_holds_other_bytes_is_refused_not_trusted(storage: CloudBuildServer,
                                                                           tmp_path: Path) -> None:
    """A pod that may write the bucket replaced the zip named by this code's SHA-256: submit stops (exit 1) naming
    it, never runs what is there. Source: GCS JSON API Objects resource md5Hash (base64 MD5 of the data)"""
    made = bundle_mod.bundle("code", write(tmp_path / "src", SRC), "pretrain")
    uri = names.code_zip_uri("my-bucket", made.object_name)
    storage.objects[("my-bucket", f"code/{made.object_name}")] = b"PK evil"
    with pytest.raises(errors.RuntimeFailure, match=re.escape(f"{uri} exists but does not hold this code")):
        google_api.upload_code(uri, made.data)
    assert not storage.of("POST", "/upload/")
    storage.objects[("my-bucket", f"code/{made.object_name}")] = made.data
    assert google_api.upload_code(uri, made.data) is False


def test_a_refused_upload_names_the_grant(storage: CloudBuildServer, tmp_path: Path) -> None:
    storage.fail("GET", r"/storage/v1/b/", 403, "caller does not have storage.objects.get access")
    with pytest.raises(errors.RuntimeFailure, match=re.escape("roles/storage.objectUser on gs://my-bucket")):
        google_api.upload_code("gs://my-bucket/code/x.zip", b"zip")


# ---------------------------------------------------------------------- the train program's import


def test_a_train_loop_that_cannot_be_imported_is_exit_2_before_any_slice(tmp_path: Path,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    from raytpu.workloads.support import team_train

    write(tmp_path, {"broken/__init__.py": "", "broken/train.py": "import no_such_module_xyz\n",
                     "ok/__init__.py": "", "ok/train.py": "def train_loop(config):\n    return 7\n"})
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", list(sys.path))
    with pytest.raises(InvalidInput, match=r"train_loop: 'broken\.train:train_loop' cannot be imported.*"
                                           r"ModuleNotFoundError"):
        team_train.load_train_loop("broken.train:train_loop")
    with pytest.raises(InvalidInput, match="has no function nope"):
        team_train.load_train_loop("ok.train:nope")
    assert team_train.load_train_loop("ok.train:train_loop")({}) == 7


def test_reported_metrics_become_plain_json() -> None:
    import numpy as np

    from raytpu.workloads.support.team_train import plain

    assert json.dumps(plain({"loss": np.float32(0.5), "step": np.int64(3), "hist": np.zeros(3), "obj": object()}))


def test_invalid_inputs_of_both_kinds_at_once(tmp_path: Path) -> None:
    """Every problem at once, each under its own workload; loading the config reads no folder (issue 70)."""
    from raytpu.images import team

    write(tmp_path / "src", SRC)
    text = CONFIG.replace("lm.train:train_loop", "lm.train:nope").replace("tools/reserve.py", "tools/gone.py")
    spec_ = parse(text, str(tmp_path / "raytpu.yaml"), base=tmp_path)
    with pytest.raises(InvalidInputs) as raised:
        team.prepare_all(spec_, lock=False)
    assert [p.field for p in raised.value.problems] == ["workloads[0].train_loop", "workloads[1].entrypoint"]


def test_a_spec_holding_what_the_submitters_bash_expands_travels_encoded(spec: Any) -> None:
    """KubeRay v1.7.0 passes runtimeEnvYAML through ``bash -ce`` inside Go's double quotes, where ``$`` and
    backquotes expand: such a spec travels as base64 and comes back whole."""
    from dataclasses import replace

    from raytpu.core.specs.spec import WorkloadSpec

    work = replace(spec.workload("pretrain"), train_config={"prompt": "cost $HOME `id`"})
    env = work.workload_env()
    assert env["RAYTPU_WORKLOAD"].startswith("base64:") and "$" not in env["RAYTPU_WORKLOAD"]
    assert WorkloadSpec.from_env(env) == replace(work, code=user_code.SHIPPED_CODE)
    plain = spec.workload("custom").workload_env()["RAYTPU_WORKLOAD"]
    assert not plain.startswith("base64:")  # plain JSON stays readable


@pytest.mark.parametrize("entrypoint", ["python a.py && echo x", "python a.py; rm -rf /", "python a.py | tee log",
                                        "python $SCRIPT", "python `which x`", "python a.py > out", "python a.py #c",
                                        "python a.py *.txt", "(python a.py)", "python ~/a.py"])
def test_an_entrypoint_the_submitters_shell_would_act_on_is_refused(entrypoint: str) -> None:
    _, found = user_code.entrypoint_words("entrypoint", entrypoint)
    assert found and "submitter" in str(found[0]), entrypoint
