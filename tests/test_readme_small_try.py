"""Issue 47.4: the team example README's small try (``local up``, ``submit pretrain --local --set ...``, ``local
down``) runs as written in a fresh clone. Its own module: tests/test_readme.py is all unit tier (its ``pytestmark``),
and this test starts an emulated slice (slice tier only; it ran in ``-m unit`` while it lived there)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from test_readme import ROOT, bare, commands, fresh_clone

EXAMPLE_README = ROOT / "examples" / "team_project" / "README.md"
pytestmark = [pytest.mark.slice, pytest.mark.timeout(900)]


def test_the_team_examples_small_try_runs_as_written(tmp_path: Path) -> None:
    """Issue 47.4: the example README's ```bash block (local up, submit pretrain --local --set ..., local down) runs
    as written in a fresh clone on the emulated slice; ``local down`` runs even when the submit fails."""
    found = commands(EXAMPLE_README.read_text(encoding="utf-8"))
    assert [bare(c.text).split()[:3] for c in found] == [["raytpu", "local", "up"], ["raytpu", "submit", "pretrain"],
                                                          ["raytpu", "local", "down"]]
    assert "--set" in found[1].text
    clone = fresh_clone(tmp_path / "clone")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("RAYTPU_", "RAY_AUTH", "RAY_ADDRESS"))}
    env.update(PATH=f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}", RAY_USAGE_STATS_ENABLED="0",
               CHECKPOINT_DISABLE="1", PYTHONPATH=str(ROOT))
    try:
        for command in found[:2]:
            proc = subprocess.run(["bash", "-c", command.text], cwd=clone, env=env, capture_output=True, text=True,
                                  timeout=420, check=False)
            assert proc.returncode == 0, f"{command.text!r} exited {proc.returncode}: {proc.stderr[-3000:]}"
    finally:
        subprocess.run(["bash", "-c", found[2].text], cwd=clone, env=env, capture_output=True, timeout=120,
                       check=False)
