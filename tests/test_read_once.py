"""Issue 70: a team's code is read once. Loading a config reads no code folder and runs no uv; one ``submit``, on
either side, walks the folder once and works the lock out once (counting spies on the walk and on the resolve), and
``validate`` still names a missing folder, as loading did."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from image_refs import write_record
from kube_server import TlsFiles

from raytpu import cli, config
from raytpu.teamcode import bundle, requirements

pytestmark = pytest.mark.unit

REPO = Path(__file__).resolve().parents[1]
STACK = "ray-tpu-cluster"
TEAM = {"name": "pretrain", "kind": "train", "slice": "train", "code": "./src", "train_loop": "lm.train:train_loop",
        "requirements": "requirements.txt"}
LOCK = requirements.Lock("inflection==0.5.1\n", {"inflection": "0.5.1"})


def write_project(folder: Path) -> Path:
    """The example config plus a team workload with code and requirements; its folder's files; the config's path."""
    data = yaml.safe_load((REPO / "raytpu.example.yaml").read_text())
    data["workloads"].append(TEAM)
    for rel, text in {"src/lm/__init__.py": "", "src/lm/train.py": "def train_loop(config):\n    return config\n",
                      "src/requirements.txt": "inflection==0.5.1\n"}.items():
        (folder / rel).parent.mkdir(parents=True, exist_ok=True)
        (folder / rel).write_text(text)
    path = folder / "raytpu.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


@pytest.fixture
def counted(monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[str, int]]:
    """Counts every walk of a code folder and every lock worked out (the resolve stands in: no uv, no index)."""
    counts = {"walks": 0, "locks": 0}
    walk = bundle.code_files

    def code_files(field: str, folder: Any) -> Any:
        counts["walks"] += 1
        return walk(field, folder)

    def resolve(field: str, folder: Path, relative: str, **_: Any) -> requirements.Lock:
        counts["locks"] += 1
        return LOCK

    monkeypatch.setattr(bundle, "code_files", code_files)
    monkeypatch.setattr(requirements, "resolve", resolve)
    yield counts


def test_loading_a_config_reads_no_code_folder_and_runs_no_uv(tmp_path: Path, counted: dict[str, int]) -> None:
    path = write_project(tmp_path)
    spec = config.load(path)
    assert spec.workload("pretrain").code == str(tmp_path / "src")
    assert counted == {"walks": 0, "locks": 0}
    (tmp_path / "src" / "lm" / "train.py").unlink()
    (tmp_path / "src" / "requirements.txt").unlink()
    config.load(path)  # the folder's problems are the commands' to find


def test_validate_still_names_a_missing_folder_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = write_project(tmp_path)
    (tmp_path / "src").rename(tmp_path / "gone")
    assert cli.main(["validate", str(path)]) == 2
    assert capsys.readouterr().err.startswith(f"error: workloads[3].code: '{tmp_path / 'src'}' does not exist")


def test_one_gke_submit_walks_the_folder_once_and_locks_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                             counted: dict[str, int], tls: TlsFiles,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    path = write_project(tmp_path)
    write_record(tmp_path)
    outputs = {STACK: {"endpoint": "34.1.2.3", "ca_certificate": tls.ca_b64, "cluster_name": "ray-tpu",
                       "location": "us-east5", "project": "my-ml-project", "namespace": "ray",
                       "service_account": "ray-tpu-ray", "bucket": "my-ml-project-ray-tpu-ray"}}
    (tmp_path / "outputs.json").write_text(json.dumps(outputs))
    monkeypatch.chdir(tmp_path)
    assert cli.main(["submit", "pretrain", "--stack", STACK, "--config", str(path), "--dry-run",
                     "--run-id", "r1"]) == 0
    shown = capsys.readouterr()
    assert f"team-{LOCK.digest}" in shown.out  # the image of the lock worked out, and the zip of the one walk
    assert "code: gs://my-ml-project-ray-tpu-ray/code/pretrain-" in shown.err
    assert counted == {"walks": 1, "locks": 1}


def test_one_local_submit_walks_the_folder_once_and_locks_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                               counted: dict[str, int]) -> None:
    from raytpu.local.running import jobs as local_jobs
    from raytpu.local.slice import state
    from raytpu.teamcode import envs

    path = write_project(tmp_path)
    monkeypatch.chdir(tmp_path)
    spec = config.load(path)
    (tmp_path / "run").mkdir()
    state.LocalCluster(str(tmp_path / "run"), "/tmp/none", "127.0.0.1:1",
                       spec.slice_named("serve").plan.to_json(), ["s0"]).save()
    given: list[dict[str, Any]] = []

    def submit_job(_cluster: state.LocalCluster, _kind: str, *_extra: str, **options: Any) -> str:
        given.append(options["runtime"])  # where the run would start: nothing launches
        return "SUCCEEDED"

    monkeypatch.setattr(local_jobs, "submit_job", submit_job)
    def ensure(_run_dir: Path, lock: requirements.Lock) -> tuple[Path, bool]:
        assert lock is LOCK  # the lock the command worked out, handed on
        return Path(sys.executable), False

    monkeypatch.setattr(envs, "ensure", ensure)
    assert cli.main(["submit", "pretrain", "--local", "--config", str(path), "--dir", str(tmp_path / "run"),
                     "--run-id", "r1"]) == 0
    [runtime] = given
    assert runtime["working_dir"].endswith(".zip") and runtime["py_executable"] == sys.executable
    assert counted == {"walks": 1, "locks": 1}
