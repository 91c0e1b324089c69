"""The core zip as a real Ray cluster takes it: ``py_modules`` with the ``file://`` URI a RayJob names (its bucket's
GCS FUSE mount on GKE), imported by a task from what Ray unpacked, not from the kit installed here."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from raytpu.core import core_zip

pytestmark = [pytest.mark.slice, pytest.mark.timeout(600)]

TASK = """
import sys
import ray
ray.init(address="local", num_cpus=1, include_dashboard=False, runtime_env={"py_modules": [sys.argv[1]]})
try:
    @ray.remote
    def where() -> str:
        import raytpu.core.tpu.plan
        import raytpu.workloads.train
        assert raytpu.core.tpu.plan.plan_slice("v6e", "4x4").hosts == 4
        return raytpu.core.tpu.plan.__file__
    print(ray.get(where.remote(), timeout=300))
finally:
    ray.shutdown()
"""


def test_a_task_imports_the_kit_from_the_unpacked_core_zip(tmp_path: Path) -> None:
    """Ray 2.60 unpacks a remote ``py_modules`` zip without its top-level folder
    (``packaging.download_and_unpack_package``) into ``runtime_resources/py_modules_files/``: the task's ``raytpu``
    must come from there (here the kit is also installed, so a zip that lost ``raytpu/`` would fall back to it
    silently; on a pod it would not be found at all)."""
    zipped = core_zip.build_core_zip(tmp_path / "raytpu-0.1.0.zip")
    env = {**os.environ, "RAY_USAGE_STATS_ENABLED": "0"}
    env.pop("RAY_ADDRESS", None)
    done = subprocess.run([sys.executable, "-c", TASK, f"file://{zipped}"], capture_output=True, text=True,
                          timeout=500, cwd=tmp_path, env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    origin = done.stdout.strip().splitlines()[-1]
    assert "/runtime_resources/py_modules_files/" in origin and origin.endswith("/raytpu/core/tpu/plan.py"), origin
