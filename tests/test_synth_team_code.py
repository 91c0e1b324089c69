"""Issue 70: the workloads stack never runs a team's image nor ships its code (RayJobs and a team's Serve app are
``raytpu submit``'s), so synthesizing a config whose team workload's code folder is absent, with no uv to run, works:
in process with the walk and the resolve made to fail, and through ``npx cdktf synth`` (cdktf.json's app) with an
audit hook that refuses to start any uv."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
import yaml
from _synth import REPO, STANDARD_EXAMPLE, cdktf_cli, read_stacks
from image_refs import FIXTURE_REFS, write_record

from raytpu import config
from raytpu.teamcode import bundle, requirements

pytestmark = [pytest.mark.synth, pytest.mark.timeout(600)]

TEAM = {"name": "pretrain", "kind": "train", "slice": "train", "code": "./src", "train_loop": "lm.train:train_loop",
        "requirements": "requirements.txt"}

NO_UV = """\
import sys


def _no_uv(event, args):
    if event == "subprocess.Popen" and "uv" in str(args[0]).rsplit("/", 1)[-1].split():
        raise RuntimeError(f"uv started during synth: {args[1]!r}")


sys.addaudithook(_no_uv)
"""
"""A ``sitecustomize`` for the app's interpreter: starting any program named uv raises (Python's audit hook on
``subprocess.Popen``; Source: https://docs.python.org/3.11/library/audit_events.html)."""


def team_config(folder: Path) -> Path:
    """The example config plus a team workload whose code folder (./src) does not exist, the record beside it."""
    folder.mkdir(exist_ok=True)
    data = yaml.safe_load(STANDARD_EXAMPLE.read_text())
    data["workloads"].append(TEAM)
    path = folder / "raytpu.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    write_record(folder)
    assert not (folder / "src").exists()
    return path


def test_the_stacks_synthesize_without_the_code_folder_or_uv(tmp_path: Path, monkeypatch: pytest.MonkeyPatch
                                                             ) -> None:
    from raytpu.stacks.app import synth

    def refused(*_args: object, **_kwargs: object) -> None:
        raise AssertionError("synth read a team's code or ran uv")

    for module, name in ((bundle, "code_files"), (requirements, "resolve"), (requirements, "uv_binary")):
        monkeypatch.setattr(module, name, refused)
    written = synth(config.load(team_config(tmp_path / "cfg")), FIXTURE_REFS, tmp_path / "out")
    stacks = read_stacks(tmp_path / "out")
    assert len(written) == 2 and sorted(stacks) == ["ray-tpu-cluster", "ray-tpu-workloads"]
    assert "pretrain" not in str(stacks["ray-tpu-workloads"].get("resource", {}).get("kubernetes_manifest", {}))


def test_npx_cdktf_synth_works_without_the_code_folder_and_starts_no_uv(tmp_path: Path) -> None:
    cdktf = cdktf_cli()
    hook = tmp_path / "hook"
    hook.mkdir()
    (hook / "sitecustomize.py").write_text(NO_UV)
    python_path = os.pathsep.join([str(hook), *filter(None, [os.environ.get("PYTHONPATH")])])
    env = {**os.environ, "RAYTPU_CONFIG": str(team_config(tmp_path / "cfg")), "PYTHONPATH": python_path,
           "CHECKPOINT_DISABLE": "1", "CI": "1", "CDKTF_DISABLE_PLUGIN_CACHE_ENV": "1",
           "PATH": os.pathsep.join(p for p in os.environ.get("PATH", "").split(os.pathsep)
                                   if p and not (Path(p) / "uv").exists())}
    out = tmp_path / "cdktf.out"
    result = subprocess.run([str(cdktf), "synth", "--output", str(out)], cwd=REPO, env=env,
                            capture_output=True, text=True, timeout=400)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert sorted(read_stacks(out)) == ["ray-tpu-cluster", "ray-tpu-workloads"]
