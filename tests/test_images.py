"""Each job kind runs with what its program imports, by default: its image plus its pinned packages.

A RayJob's pods run the kind's image (``rayproject/ray:2.60.0-py311``: Ray, no JAX) and its runtime env installs
``WorkloadKind.packages`` (``jax[tpu]``) on every node. TPU wheels cannot install here, so each kind's
environment is built for real from its CPU twin: a fresh virtualenv with ``ray[default]`` (the least a Ray image
carries) and ``WorkloadKind.cpu_packages``, nothing else; the kit's core zip goes on ``PYTHONPATH`` as Ray's
``py_modules`` puts it. ``tests/import_check.py`` then imports everything the program imports, lazy imports
included. The serving kind's stand-in is ``.venv-serve`` (the serve tier).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from import_check import run_with_core_zip

from raytpu import kinds, kuberay
from raytpu.catalog import RAY_VERSION

pytestmark = [pytest.mark.slice, pytest.mark.timeout(900)]

ROOT = Path(__file__).resolve().parents[1]
UV = Path(sys.executable).parent / "uv"
IMAGE_STAND_IN = (f"ray[default]=={RAY_VERSION}",)
"""What the kind's image is taken to carry: Ray itself (rayproject/ray images are built around it)."""


def _environment(directory: Path, packages: tuple[str, ...]) -> Path:
    venv = directory / "venv"
    env = {**os.environ, "UV_NO_PROGRESS": "1"}
    subprocess.run([str(UV), "venv", "--quiet", "--python", sys.executable, str(venv)], check=True, env=env)
    python = venv / "bin" / "python"
    subprocess.run([str(UV), "pip", "install", "--quiet", "--python", str(python), *IMAGE_STAND_IN, *packages],
                   check=True, env=env, timeout=600)
    return python


@pytest.mark.parametrize("kind", [k for k in kinds.KINDS.values() if k.is_job], ids=lambda k: k.name)
def test_a_job_kinds_program_imports_everything_in_its_image_plus_its_packages(kind: kinds.WorkloadKind,
                                                                                tmp_path: Path) -> None:
    assert kind.image == kinds.RAY_IMAGE and kind.packages  # the image lacks JAX: the packages bring it
    done = run_with_core_zip(_environment(tmp_path, kind.cpu_packages), tmp_path, kind.module)
    assert done.returncode == 0, done.stdout + done.stderr[-2000:]


def test_without_its_packages_the_image_lacks_what_the_program_imports(tmp_path: Path) -> None:
    """The check has teeth: the train program in the bare image stand-in misses JAX."""
    done = run_with_core_zip(_environment(tmp_path, ()), tmp_path, kinds.kind("train").module)
    assert done.returncode == 1 and "jax" in done.stdout, done.stdout


def test_a_rayjob_installs_its_kinds_packages_unless_the_team_brings_its_own_image() -> None:
    from dataclasses import replace

    import yaml

    from raytpu.config import load

    spec = load(ROOT / "raytpu.example.yaml")
    jobs = [w for w in spec.workloads if w.kind.is_job]
    assert {w.kind.name for w in jobs} == {"smoke", "train"}
    for work in jobs:
        manifest = kuberay.workload_manifest(spec, work, service_account="ray", bucket="b")
        assert yaml.safe_load(manifest["spec"]["runtimeEnvYAML"])["pip"] == list(work.kind.packages)
        own = kuberay.workload_manifest(spec, replace(work, image="example.com/ray-jax:1"), service_account="ray",
                                        bucket="b")
        assert "pip" not in yaml.safe_load(own["spec"]["runtimeEnvYAML"])  # a team's image carries its imports
