"""A local run's secrets, handed over in a private file rather than the runtime env: Ray 2.60's runtime env agent
logs a job's ``env_vars`` (``runtime_env_agent.log`` in the cluster's temp folder), so values there would be written.
On GKE the kubelet sets them from ``secretKeyRef``; this stands in on the emulated slice only. Standard library."""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
from collections.abc import Mapping

ENV = "RAYTPU_LOCAL_SECRETS"
"""The path of the secrets file, the only thing the runtime env carries."""


def write(values: Mapping[str, str]) -> str:
    """A new 0600 file (in a 0700 folder of its own, outside the run folder and Ray's) holding ``values``."""
    folder = tempfile.mkdtemp(prefix="raytpu-secrets-")
    path = os.path.join(folder, "secrets.json")
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as out:
        json.dump(dict(values), out)
    return path


def remove(path: str) -> None:
    """The file and its folder, once the run has ended."""
    shutil.rmtree(os.path.dirname(path), ignore_errors=True)


KEPT = "serve-secrets.txt"
"""In the run folder: the paths of the secrets files a served app still reads (``raytpu local down`` removes them)."""

SETUP_HOOK_ENV = "__RAY_WORKER_PROCESS_SETUP_HOOK_ENV_VAR"
"""Every Ray worker of a runtime env carrying it runs the named function at its start, before it imports anything of
the app: how a served app's build task and replicas load the file (a Serve app's runtime env is not ``ray.init``'s,
where the public ``worker_process_setup_hook`` field is turned into this variable).
Source: Ray 2.60 ray/_private/workers/default_worker.py (reads it, runs load_and_execute_setup_hook) and
ray/_private/runtime_env/setup_hook.py export_setup_func_module (a module path as the value)."""


def setup_hook() -> str:
    """The import path of :func:`load`, as Ray's worker setup hook takes it."""
    return f"{__name__ if __name__ != '__main__' else 'raytpu.workloads.local_secrets'}.load"


def keep(run_dir: str, path: str) -> None:
    """Records ``path`` in ``run_dir`` (a served app reads it until ``local down``)."""
    with open(os.path.join(run_dir, KEPT), "a", encoding="utf-8") as out:
        out.write(path + "\n")


def remove_kept(run_dir: str) -> int:
    """Removes every secrets file recorded in ``run_dir`` and the record; how many there were."""
    record = os.path.join(run_dir, KEPT)
    try:
        with open(record, encoding="utf-8") as given:
            paths = [line.strip() for line in given if line.strip()]
    except FileNotFoundError:
        return 0
    for path in paths:
        if os.path.basename(path) == "secrets.json":  # only files this module wrote
            remove(path)
    os.unlink(record)
    return len(paths)


def load() -> None:
    """Puts the file's values into this process's environment (a no-op where no file is named: GKE, or no secrets)."""
    path = os.environ.get(ENV)
    if path and os.path.isfile(path):
        with open(path) as given:
            os.environ.update(json.load(given))


def main(argv: list[str]) -> None:
    """``python -m raytpu.workloads.local_secrets COMMAND...``: a team's driver started with its secrets."""
    load()
    os.execvp(argv[0], argv)


if __name__ == "__main__":
    main(sys.argv[1:])
