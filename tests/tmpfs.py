"""A real full or read-only file system for one command: a tiny tmpfs mounted in a mount namespace of the command's
own (``unshare -m`` as root, ``unshare -Urm`` otherwise), so the kernel itself answers ENOSPC or EROFS, where a chmod
stops no write of root's. Nothing is mounted outside that namespace: the mount ends with the command.
Source: mount_namespaces(7), tmpfs(5) (``size=``; a full tmpfs: write(2) ENOSPC), mount(8) (``remount,ro``)."""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path

SCRIPT = r"""
set -e
mount --make-rprivate /
mount -t tmpfs -o size=256k,mode=0755 tmpfs "$RAYTPU_T_MNT"
eval "$RAYTPU_T_PREPARE"
if [ "$RAYTPU_T_MODE" = full ]; then
  cat /dev/zero > "$RAYTPU_T_MNT/.fill" 2>/dev/null || true
else
  mount -o remount,ro "$RAYTPU_T_MNT"
fi
set +e
"$@"
rc=$?
find "$RAYTPU_T_MNT" -mindepth 1 ! -name .fill > "$RAYTPU_T_LEFT"
exit $rc
"""


def _unshare() -> list[str]:
    return ["unshare", "-m"] if os.geteuid() == 0 else ["unshare", "-Urm"]


@functools.cache
def unavailable() -> str:
    """Why no tmpfs can be mounted here (a test skips saying so), or ``""``."""
    if shutil.which("unshare") is None or shutil.which("mount") is None:
        return "needs unshare and mount (util-linux)"
    with tempfile.TemporaryDirectory() as folder:
        probe = subprocess.run([*_unshare(), "sh", "-c", f"mount -t tmpfs -o size=64k tmpfs {folder}"],
                               capture_output=True, text=True, timeout=30)
    return "" if probe.returncode == 0 else f"no tmpfs in a mount namespace here: {probe.stderr.strip()[:200]}"


def run_on(mode: str, mount: Path, argv: Sequence[str], *, prepare: str = "", env: Mapping[str, str],
           cwd: Path, timeout: float = 60, scratch: Path | None = None
           ) -> tuple[subprocess.CompletedProcess[str], list[str]]:
    """Runs ``argv`` with a 256 KiB tmpfs on ``mount`` (an empty folder; or ``/tmp``, hidden for the run), ``full``
    (filled to the last byte) or ``ro`` (read-only), after the shell lines ``prepare`` made what the run needs there
    (``$RAYTPU_T_MNT``); returns the run and what it left on the tmpfs (paths under ``mount``, the filler aside).
    ``scratch`` (default ``mount``'s parent) is a folder outside the tmpfs for that listing."""
    assert mode in ("full", "ro") and mount.is_dir() and (mount == Path("/tmp") or not any(mount.iterdir()))
    left = (scratch or mount.parent) / f".tmpfs-left-{mount.name}"
    script_env = {**env, "RAYTPU_T_MNT": str(mount), "RAYTPU_T_MODE": mode, "RAYTPU_T_PREPARE": prepare,
                  "RAYTPU_T_LEFT": str(left)}
    try:
        done = subprocess.run([*_unshare(), "bash", "-c", SCRIPT, "tmpfs", *argv], env=script_env, cwd=cwd,
                              capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL)
        found = left.read_text().split("\n") if left.exists() else []
    finally:
        left.unlink(missing_ok=True)
    return done, sorted(str(Path(p).relative_to(mount)) for p in found if p)
