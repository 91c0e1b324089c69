"""The pods' security rules, enacted on this machine: a real emulated slice and the real smoke workload run as the
pods' non-root uid/gid, with no capabilities, ``no_new_privs`` (``allowPrivilegeEscalation: false``) and a read-only
root filesystem where only :data:`raytpu.core.manifests.pod_security.SCRATCH` (the pods' emptyDirs) is writable, and
``HOME`` where the pods put it.

Built with the kernel's own tools rather than a container runtime (none runs here): a private mount namespace
(``unshare -m``) remounts ``/`` read-only and mounts a tmpfs on every scratch path; ``setpriv`` drops to the uid/gid
with an empty capability bounding set. What this does not enact: the seccomp profile (RuntimeDefault only blocks
syscalls Ray does not make) and GKE's TPU device plugin. Needs root and ``unshare``; skipped, saying so, without.
"""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from raytpu.core.manifests import pod_security
from raytpu.core.specs.cluster.security import SecuritySpec

pytestmark = [pytest.mark.slice, pytest.mark.timeout(600)]

REPO = Path(__file__).resolve().parents[1]
SECURITY = SecuritySpec()


def _needed() -> list[Path]:
    """What the sandbox must still see, read-only: the checkout and the interpreter (a venv and its base)."""
    paths = sorted({REPO, Path(sys.prefix).resolve(), Path(sys.base_prefix).resolve()}, key=lambda p: len(p.parts))
    return [p for i, p in enumerate(paths) if not any(p.is_relative_to(q) for q in paths[:i])]


def sandbox_script(command: str) -> str:
    """A shell script (run as root under ``unshare -m``) that enacts the pod rules, then runs ``command``.

    The checkout and the interpreter stay visible, read-only, even where a pod's emptyDir or a private home would
    hide them (a clone under ``/tmp``, pyenv under ``/root``): they are bind-mounted aside first and back after.
    """
    uid, gid = SECURITY.run_as_user, SECURITY.run_as_group
    hidden = [Path(p) for p in pod_security.SCRATCH.values()] + [Path("/root")]
    kept = [p for p in _needed() if any(p.is_relative_to(h) for h in hidden)]
    lines = ["set -e", "mount --make-rprivate /", "mount -t tmpfs tmpfs /mnt"]
    lines += [f"mkdir -p /mnt/keep{i} && mount --bind {shlex.quote(str(p))} /mnt/keep{i}" for i, p in enumerate(kept)]
    lines += ["mount -t tmpfs -o mode=755 tmpfs /root"]
    for path in pod_security.SCRATCH.values():  # every emptyDir: writable, owned by the pod's fsGroup
        if not Path(path).exists():  # a mount point the image lacks (kubelet creates it): under a tmpfs parent
            lines += [f"mount -t tmpfs tmpfs {Path(path).parent}", f"mkdir -p {path}"]
        lines += [f"mount -t tmpfs -o mode=1777 tmpfs {path}", f"chown {uid}:{gid} {path}"]
    for i, kept_path in enumerate(kept):
        quoted = shlex.quote(str(kept_path))
        lines += [f"mkdir -p {quoted}", f"mount --bind /mnt/keep{i} {quoted}", f"mount -o remount,bind,ro {quoted}"]
    lines += ["mount -o remount,bind,ro /",
              f"export HOME={pod_security.HOME} RAYTPU_LOCAL_DIR=/tmp/raytpu-local RAY_USAGE_STATS_ENABLED=0",
              f"exec setpriv --reuid={uid} --regid={gid} --clear-groups --no-new-privs --bounding-set=-all "
              f"--inh-caps=-all bash -c {shlex.quote(command)}"]
    return "\n".join(lines) + "\n"


def _can_sandbox() -> str:
    if os.geteuid() != 0:
        return "needs root (mount namespaces)"
    for tool in ("unshare", "setpriv"):
        if shutil.which(tool) is None:
            return f"needs {tool} (util-linux)"
    if not Path("/mnt").is_dir():
        return "needs /mnt (where the checkout and interpreter are held while the pod's volumes are mounted)"
    probe = subprocess.run(["unshare", "-m", "true"], capture_output=True, text=True)
    return "" if probe.returncode == 0 else f"unshare -m is not permitted here: {probe.stderr.strip()}"


def test_a_slice_and_its_smoke_check_run_under_the_pods_security_rules(tmp_path: Path) -> None:
    why = _can_sandbox()
    if why:
        pytest.skip(why)
    raytpu = f"{shlex.quote(sys.executable)} -m raytpu local"
    command = (f"cd {shlex.quote(str(REPO))}; trap '{raytpu} down >/dev/null 2>&1' EXIT; "
               "id -u; id -g; cat /proc/self/status | grep -E '^(CapEff|NoNewPrivs)'; "
               f"touch {shlex.quote(str(REPO))}/.sandbox-write 2>/dev/null && echo ROOT-WRITABLE; "
               f"{raytpu} up --generation v5e --topology 2x4 --machine-type ct5lp-hightpu-4t && {raytpu} smoke")
    script = tmp_path / "sandbox.sh"
    script.write_text(sandbox_script(command))
    done = subprocess.run(["unshare", "-m", "bash", str(script)], capture_output=True, text=True, timeout=540,
                          env={k: v for k, v in os.environ.items() if not k.startswith("RAY_")})
    out = done.stdout
    assert done.returncode == 0, (out + done.stderr)[-4000:]
    lines = out.splitlines()
    assert lines[:2] == [str(SECURITY.run_as_user), str(SECURITY.run_as_group)]
    assert "CapEff:\t0000000000000000" in lines and "NoNewPrivs:\t1" in lines
    assert "ROOT-WRITABLE" not in out and not (REPO / ".sandbox-write").exists()
    assert "1/1 slices healthy" in out, out[-3000:]
