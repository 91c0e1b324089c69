"""Issues 47.4 and 68.6: the team example README's walk from training to serving runs as written in a fresh clone:
``local up`` (the config's train slice), ``submit pretrain --local --set ...`` (shrunk), ``local down``; ``local up
--slice serve`` (scorer's slice; the checkpoints stayed in the run folder), the API key written, ``local serve
--workload scorer``, the request with curl (its answer as the README shows it), ``local down``. The commands are the
README's own (:func:`test_readme.commands` reads them), in order, one shell each; the test adds nothing to them.
Its own module: tests/test_readme.py is all unit tier (its ``pytestmark``), and this test starts emulated slices
(slice tier only; it ran in ``-m unit`` while it lived there)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from test_readme import EXAMPLE_README, ROOT, bare, commands, fresh_clone, matches

from raytpu.local.slice import state

pytestmark = [pytest.mark.slice, pytest.mark.timeout(1500)]
WALK = [["raytpu", "local", "up"], ["raytpu", "submit", "pretrain"], ["raytpu", "local", "down"],
        ["raytpu", "local", "up"], ["echo", "my-key", ">"], ["raytpu", "local", "serve"], ["curl", "-s", "-H"],
        ["raytpu", "local", "down"]]
"""The walk's steps, in the README's order (the first three words of each command)."""


def test_the_team_examples_walk_from_training_to_serving_runs_as_written(
        tmp_path: Path, record_property: Callable[[str, object], None]) -> None:
    """Issue 68.6: every command of the example README's ```bash and ```console blocks, as written, in order, in one
    fresh clone on the emulated slice: each exits 0 (a pipe fails when any part of it does) and prints what the README
    shows; ``local down`` runs even when a step fails. Each step's wall time is recorded (``--junitxml``) and
    printed."""
    found = commands(EXAMPLE_README.read_text(encoding="utf-8"), EXAMPLE_README.relative_to(ROOT).as_posix())
    assert [bare(c.text).split()[:3] for c in found] == WALK, [c.text for c in found]
    assert "--set" in found[1].text and "--slice serve" in found[3].text and "--workload scorer" in found[5].text
    assert found[6].shown, "the README shows the app's answer"
    if shutil.which("curl") is None:
        pytest.skip("the README's request needs curl")
    clone = fresh_clone(tmp_path / "clone")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("RAYTPU_", "RAY_AUTH", "RAY_ADDRESS"))}
    env.update(PATH=f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}", RAY_USAGE_STATS_ENABLED="0",
               CHECKPOINT_DISABLE="1", PYTHONPATH=str(ROOT))
    env[state.ENV_TMP_PREFIX] = os.environ.get(state.ENV_TMP_PREFIX, state.TMP_PREFIX)  # the session's leak check
    took: dict[str, float] = {}

    def run(command_text: str, timeout_s: float) -> subprocess.CompletedProcess[str]:
        start = time.monotonic()
        try:
            return subprocess.run(["bash", "-o", "pipefail", "-c", command_text], cwd=clone, env=env,
                                  capture_output=True, text=True, timeout=timeout_s, check=False)
        finally:
            took[f"{len(took) + 1}: {' '.join(bare(command_text).split()[:3])}"] = round(time.monotonic() - start, 1)

    start = time.monotonic()
    try:
        for command in found[:-1]:
            proc = run(command.text, 600)
            where = f"{command.source} line {command.line}: {command.text!r}"
            assert proc.returncode == 0, f"{where} exited {proc.returncode}: {proc.stderr[-3000:]}{proc.stdout[-2000:]}"
            if command.shown:
                assert matches(command.shown, proc.stdout.splitlines()), f"{where} printed:\n{proc.stdout[-3000:]}"
    finally:
        down = run(found[-1].text, 120)
        took["total"] = round(time.monotonic() - start, 1)
        record_property("wall_s", took)
        print(f"the example README's walk, wall s: {took}")
    assert down.returncode == 0, down.stderr[-2000:]
