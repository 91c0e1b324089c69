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
