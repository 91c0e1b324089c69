"""The emulated slice's environment for a team's lock: a venv per lock in the run folder that sees every package of
the kit's own environment (the image's stand-in) and adds the lock's extras, so the second run installs nothing.

Ray runs the team's driver and every worker in it through the runtime env's ``py_executable``.
Source: Ray 2.60 ray/_private/runtime_env/py_executable.py PyExecutablePlugin.modify_context (sets the worker's
``context.py_executable``) and context.py RuntimeEnvContext.exec_worker (execs the worker with it).
"""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

from raytpu.core.common import errors
from raytpu.teamcode.requirements import Lock, run_uv, uv_binary, uv_valid

INSTALL_TIMEOUT_S = 900.0
DONE = ".raytpu-complete"
"""Written last: a venv without it was cut short and is built again."""


def env_dir(run_dir: Path, lock: Lock) -> Path:
    """``<run dir>/envs/<lock digest>``: one venv per lock, shared by every run of the run folder."""
    return Path(run_dir) / "envs" / lock.digest


def python_of(env: Path) -> Path:
    return env / "bin" / "python"


def ensure(run_dir: Path, lock: Lock) -> tuple[Path, bool]:
    """The venv of ``lock`` (its python), and whether it was built now (False: from the run folder, nothing
    installed). One builder per lock at a time (a file lock beside the venvs); the venv is built under a name of its
    own and renamed into place once complete, so a second submit of the same lock waits and never sees, nor deletes,
    a half-built one. RuntimeFailure (exit 1) naming the real cause: the folder full or read-only, the index
    unreachable, or uv's own reason."""
    env = env_dir(run_dir, lock)
    if (env / DONE).is_file():
        return python_of(env), False
    try:
        env.parent.mkdir(parents=True, exist_ok=True)
        with open(env.parent / f".{lock.digest}.lock", "a+") as held:
            fcntl.flock(held.fileno(), fcntl.LOCK_EX)  # released when the file closes, or the process dies
            if (env / DONE).is_file():  # another submit built it while this one waited
                return python_of(env), False
            for left in env.parent.glob(f".{lock.digest}.*.building"):  # a killed builder's (this one holds the lock)
                shutil.rmtree(left, ignore_errors=True)
            building = env.parent / f".{lock.digest}.{os.getpid()}.building"
            try:
                _build(building, lock)
                if env.exists():  # cut short before its marker (a killed build of an older kit): replaced whole
                    shutil.rmtree(env)
                building.rename(env)
            finally:
                shutil.rmtree(building, ignore_errors=True)
    except OSError as exc:
        raise errors.RuntimeFailure(f"requirements: cannot build the lock's venv in {env.parent} "
                                    f"({exc.strerror or exc})", errors.folder_valid(exc)) from exc
    return python_of(env), True


def _build(env: Path, lock: Lock) -> None:
    """A relocatable venv at ``env`` with the lock's extras over the kit's packages, its marker written last."""
    uv = uv_binary()
    # --relocatable: its scripts find their interpreter relative to themselves, so the venv works once renamed
    # Source: uv 0.13 `uv venv --relocatable`
    _run([uv, "venv", "--quiet", "--relocatable", "--python", sys.executable, str(env)], "create the venv")
    site = _site_packages(env)
    # the kit's own packages (and their .pth files: the editable kit) after the lock's: a `.pth` line that starts
    # with `import` runs. Source: Python 3.11 Lib/site.py addpackage
    kit = [p for p in dict.fromkeys((sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]))]
    (site / "_raytpu_kit.pth").write_text(
        "import site; " + "; ".join(f"site.addsitedir({p!r})" for p in kit) + "\n")
    if lock.extras:
        extras = env / "lock-extras.txt"
        extras.write_text(lock.extras_text())
        _run([uv, "pip", "install", "--quiet", "--no-config", "--no-deps", "--python", str(python_of(env)), "-r",
              str(extras)],
             "install the lock's packages")
    (env / "lock.txt").write_text(lock.text)
    (env / DONE).write_text(lock.digest + "\n")


def _site_packages(env: Path) -> Path:
    found = sorted((env / "lib").glob("python*/site-packages"))
    if not found:
        raise errors.RuntimeFailure(f"requirements: the venv {env} has no site-packages", "submit again")
    return found[0]


def _run(cmd: list[str], what: str) -> None:
    try:
        done = run_uv(cmd, INSTALL_TIMEOUT_S, env={**os.environ, "VIRTUAL_ENV": ""})
    except subprocess.TimeoutExpired as exc:
        raise errors.RuntimeFailure(f"requirements: uv did not {what} in {INSTALL_TIMEOUT_S:.0f} s",
                                    "a reachable package index (PyPI), then submit again") from exc
    if done.returncode != 0:
        tail = " ".join(done.stderr.split())[-400:]
        raise errors.RuntimeFailure(f"requirements: uv could not {what}: {tail}", uv_valid(done.stderr))

