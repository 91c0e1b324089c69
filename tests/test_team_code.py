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
from raytpu.core.specs import user_code
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
    ("def train_loop(*args):\n    pass\n", False),  # Ray Train would call it with no config
    ("def train_loop(config=None):\n    pass\n", False),  # likewise: it would train on its defaults
    ("from lm.impl import train_loop\n", True),  # bound by an import: its arguments are not known
    ("train_loop = make_loop()\n", True),
    ("def train_loop():\n    pass\n", False),
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
    from raytpu.workloads import team_train

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

    from raytpu.workloads.team_train import plain

    assert json.dumps(plain({"loss": np.float32(0.5), "step": np.int64(3), "hist": np.zeros(3), "obj": object()}))


def test_invalid_inputs_of_both_kinds_at_once(tmp_path: Path) -> None:
    """Every problem at once, each under its own workload."""
    write(tmp_path / "src", SRC)
    text = CONFIG.replace("lm.train:train_loop", "lm.train:nope").replace("tools/reserve.py", "tools/gone.py")
    with pytest.raises(InvalidInputs) as raised:
        parse(text, str(tmp_path / "raytpu.yaml"), base=tmp_path)
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
