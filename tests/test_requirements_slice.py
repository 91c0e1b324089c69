"""A held-out team project whose ``train_loop`` imports a library the kit's environment lacks (``inflection``, named in
its ``requirements``) trains with ``raytpu submit --local --wait`` on the emulated slice (issue 47.1): the lock is
resolved once, its venv built once in the run folder, and every JaxTrainer worker imports the library from it; the
second submit installs nothing."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

from raytpu.local.slice import state

pytestmark = [pytest.mark.slice, pytest.mark.timeout(900)]

LIBRARY = "inflection"

TRAIN = '''\
import os
import inflection
import ray.train


def train_loop(config):
    rank = ray.train.get_context().get_world_rank()
    print(f"rank {rank} imports {inflection.__name__} from {os.path.dirname(inflection.__file__)}: "
          f"{inflection.camelize('team_loop')}", flush=True)
    for step in range(config["steps"]):
        ray.train.report({"step": step + 1})
'''

CONFIG = """\
project: my-ml-project
region: us-east5
cluster: {name: ray-tpu}
slices:
  - {name: train, generation: v6e, topology: 2x4, machine_type: ct6e-standard-4t, zone: us-east5-b, count: 2}
workloads:
  - name: heldout
    kind: train
    slice: train
    code: ./src
    requirements: requirements.txt
    train_loop: heldout.train:train_loop
    train_config: {steps: 2}
"""


def test_a_library_the_kit_lacks_trains_from_the_projects_requirements(
        two_slices: state.LocalCluster, tmp_path: Path) -> None:
    assert importlib.util.find_spec(LIBRARY) is None, f"the held-out library {LIBRARY} is in the kit's venv"
    for rel, text in {"src/heldout/__init__.py": "", "src/heldout/train.py": TRAIN,
                      "src/requirements.txt": f"{LIBRARY}>=0.5\n", "raytpu.yaml": CONFIG}.items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(text)
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_AUTH")} | {
        "XDG_CACHE_HOME": str(tmp_path / "cache")}

    def submit(run_id: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "raytpu", "submit", "heldout", "--local", "--wait", "--config",
                               str(tmp_path / "raytpu.yaml"), "--dir", two_slices.run_dir, "--run-id", run_id],
                              capture_output=True, text=True, timeout=600, env=env, cwd=tmp_path)

    def env_folders() -> set[Path]:  # beside each: its lock file; the shared slice keeps earlier tests' envs
        folder = Path(two_slices.run_dir) / "envs"
        return {p for p in folder.iterdir() if p.is_dir()} if folder.is_dir() else set()

    before = env_folders()
    ran = submit("r1")
    assert ran.returncode == 0, ran.stderr[-3000:] + ran.stdout[-3000:]
    after = env_folders()
    assert len(after - before) <= 1  # one built, or none: an earlier test on this slice built the same lock's venv
    used = [(p, site) for p in after if (p / ".raytpu-complete").is_file()
            for site in p.glob("lib/python*/site-packages") if f"from {site}/{LIBRARY}: TeamLoop" in ran.stdout]
    assert len(used) == 1, (sorted(after), ran.stdout[-3000:])
    [(venv, site)] = used
    for rank in (0, 1):  # both workers of the JaxTrainer (one per host of the 2x4 slice) import it from the lock's venv
        assert f"rank {rank} imports {LIBRARY} from {site}/{LIBRARY}: TeamLoop" in ran.stdout, ran.stdout[-3000:]
    built = (venv / ".raytpu-complete").stat().st_mtime_ns
    again = submit("r2")
    assert again.returncode == 0, again.stderr[-3000:]
    assert (venv / ".raytpu-complete").stat().st_mtime_ns == built  # the second run installed nothing
    assert env_folders() == after
