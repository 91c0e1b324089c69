"""Importing every test module (what collection does) loads no Ray: checked in a fresh interpreter, the way a
pytest session starts (the heavy tier: it imports the whole suite, seconds)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.heavy


def test_collecting_the_tests_loads_no_ray() -> None:
    """Ray 2.60 reads its auth mode once, when ``ray._raylet`` loads; the slice tier's session sets token auth before
    its first cluster (tests/conftest.py), so a test module importing Ray at collection breaks every slice test."""
    here = Path(__file__).resolve().parent
    modules = sorted(p.stem for p in here.glob("test_*.py"))
    script = ("import sys\nsys.path.insert(0, sys.argv[1])\n"
              "for name in sys.argv[2:]:\n    try:\n        __import__(name)\n"
              "    except BaseException:\n        pass\n"  # a module that skips itself or needs .venv-serve
              "    if 'ray._raylet' in sys.modules:\n        print(name)\n        break\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_AUTH")}
    done = subprocess.run([sys.executable, "-c", script, str(here), *modules], capture_output=True, text=True,
                          timeout=300, env=env, cwd=here)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "", f"{done.stdout.strip()} loads Ray when imported: import it inside the test"
