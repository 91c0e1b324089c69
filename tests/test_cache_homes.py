"""Issue 68 item 1: ``XDG_CACHE_HOME`` naming a file, or a read-only ``HOME``, under every command that caches, run as
the real CLI: one ``error:`` line naming the variable (exit 2, as raytpu/console/machine.py names a bad ``TMPDIR``),
or the command's own exit code where it caches nothing; never a traceback, nothing of the user's changed.

What each cache does about it (the docstring of each says why): the requirements lock cache and a team image's build
context (``$XDG_CACHE_HOME/raytpu``: raytpu/teamcode/requirements.py ``cache_refused``) and the tiny model's
(``~/.cache/raytpu/tiny-llm``) refuse, naming the variable; uv's cache (``UV_CACHE_DIR``) is named from uv's own
message; matplotlib's (``plan --plot``) and vLLM's and Hugging Face's (``demo --serve/--data``, ``local serve``) are
checked before the work. The read-only ``HOME`` is a real read-only tmpfs (tests/tmpfs.py; skipped where none can be
mounted): as root a chmod stops no write."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import tmpfs

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[1]
CONFIG = (ROOT / "raytpu.example.yaml").read_text().split("\nworkloads:")[0] + """
workloads:
  - name: pretrain
    kind: train
    slice: train
    code: ./src
    requirements: requirements.txt
    train_loop: lm.train:train_loop
"""
FILES = {"raytpu.yaml": CONFIG, "src/lm/__init__.py": "", "src/lm/train.py": "def train_loop(config):\n    pass\n",
         "src/requirements.txt": "inflection==0.5.1\n", "notes.txt": "mine\n"}
PLOT = ("plan", "--model", "llama-3.1-8b", "--plot", "plan.png")

CASES = [  # argv, the variable named (None: the command's own outcome), its exit code
    (("validate", "raytpu.yaml", "--resolve"), "{var}", 2),
    (("images", "list", "--config", "raytpu.yaml"), "{var}", 2),
    (PLOT, "{var}", 2),
    (("validate", "raytpu.yaml"), None, 0),  # reads files only: no cache
    (("doctor", "--local", "--dir", "run"), None, 1),  # no emulated slice here: its own one line
]
IDS = ["validate-resolve", "images-list", "plan-plot", "validate", "doctor-local"]


def _user(tmp_path: Path) -> tuple[Path, dict[str, bytes]]:
    user = tmp_path / "user"
    for rel, text in FILES.items():
        (user / rel).parent.mkdir(parents=True, exist_ok=True)
        (user / rel).write_text(text)
    return user, _tree(user)


def _tree(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def _env(**change: str | None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("RAYTPU_", "UV_", "MPLCONFIGDIR"))}
    env.update({"PYTHONPATH": str(ROOT), "RAY_USAGE_STATS_ENABLED": "0"})
    for name, value in change.items():
        if value is None:
            env.pop(name, None)
        else:
            env[name] = value
    return env


def _check(done: subprocess.CompletedProcess[str], var: str | None, code: int) -> None:
    assert done.returncode == code, done.stderr
    assert "Traceback" not in done.stderr, done.stderr
    errors = [line for line in done.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == (code != 0), done.stderr
    if var is not None:
        assert errors[0].startswith(f"error: {var}: "), errors


@pytest.mark.parametrize(("argv", "var", "code"), CASES, ids=IDS)
def test_cache_home_naming_a_file(tmp_path: Path, argv: tuple[str, ...], var: str | None, code: int) -> None:
    user, before = _user(tmp_path)
    (tmp_path / "home").mkdir()
    env = _env(XDG_CACHE_HOME=str(user / "notes.txt"), HOME=str(tmp_path / "home"))
    done = subprocess.run([sys.executable, "-m", "raytpu", *argv], cwd=user, env=env, capture_output=True, text=True,
                          timeout=60, stdin=subprocess.DEVNULL)
    _check(done, var and var.format(var="XDG_CACHE_HOME"), code)
    assert _tree(user) == before


@pytest.mark.skipif(bool(tmpfs.unavailable()), reason=tmpfs.unavailable() or "-")
@pytest.mark.parametrize(("argv", "var", "code"), [
    *CASES, ((sys.executable, "-m", "raytpu.workloads.tiny_llm"), "{var}", 2)], ids=[*IDS, "tiny-llm"])
def test_a_read_only_home(tmp_path: Path, argv: tuple[str, ...], var: str | None, code: int) -> None:
    user, before = _user(tmp_path)
    home = tmp_path / "home"
    home.mkdir()
    command = list(argv) if argv[0] == sys.executable else [sys.executable, "-m", "raytpu", *argv]
    done, left = tmpfs.run_on("ro", home, command, env=_env(XDG_CACHE_HOME=None, HOME=str(home)), cwd=user)
    _check(done, var and var.format(var="HOME"), code)
    assert _tree(user) == before and left == []


def test_uvs_own_cache_naming_a_file_is_named_not_the_requirements(tmp_path: Path) -> None:
    """uv (which resolves the lock) keeps its cache under ``UV_CACHE_DIR``: one that is a file read as a requirements
    file that does not resolve (exit 2 naming the workload's field); it is the machine's fault, named (exit 1)."""
    user, before = _user(tmp_path)
    env = _env(XDG_CACHE_HOME=str(tmp_path / "cache"), UV_CACHE_DIR=str(user / "notes.txt"))
    done = subprocess.run([sys.executable, "-m", "raytpu", "validate", "raytpu.yaml", "--resolve"], cwd=user, env=env,
                          capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)
    _check(done, "requirements", 1)
    assert "Failed to initialize cache" in done.stderr and "valid: UV_CACHE_DIR" in done.stderr
    assert _tree(user) == before
