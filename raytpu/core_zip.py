"""The core zip: the pure-Python part of ``raytpu`` that a Ray job imports, as Ray's ``py_modules`` takes it.

Its own module, importing nothing but the standard library, because two sides build it: the cluster stack
(``stacks/cluster.py`` uploads it as a bucket object, and a CDK stack must not load the Kubernetes client) and
``--upload-core`` (:func:`raytpu.cluster.google_api.upload_core`).
"""

from __future__ import annotations

import io
import os
import zipfile
from pathlib import Path

CORE_FILES = ("__init__.py", "py.typed")
"""Top-level files of ``raytpu`` in the jobs' core zip: the package marker and its typing marker."""

CORE_PACKAGES = ("core", "workloads")
"""Subpackages of ``raytpu`` in the core zip, whole (``*.py`` and ``py.typed``; no ``__pycache__``): the core a Ray
job may import and the Ray programs themselves. The CLI, ``cluster``/``local``, ``sizing`` and the CDK subpackages
(``stacks``, ``modules``) never run inside a Ray job."""

ZIP_TOP = "raytpu-core"
"""The zip's one top-level folder, holding ``raytpu/``. Ray unpacks a remote ``py_modules`` zip (``file://``, ``gs://``)
without its single top-level folder and puts what is left on ``PYTHONPATH``, so ``raytpu/`` must sit one level down.
Source: Ray 2.60 ``ray._private.runtime_env.packaging.download_and_unpack_package`` (``remove_top_level_directory=True``
for ``Protocol.remote_protocols()``, ``file`` among them)."""

CORE_ZIP_DATE = (1980, 1, 1, 0, 0, 0)
"""The timestamp of every zip entry (the earliest a zip can hold), so the same sources give the same bytes."""


def core_zip_files(root: str | Path | None = None) -> list[tuple[str, Path]]:
    """``(name in the zip, source file)`` of every core file, sorted by name; ``root`` is the ``raytpu``
    package directory (default: the imported package's). Symlinked subpackages (the source tree's
    ``workloads``) are followed."""
    if root is None:
        import raytpu

        root = Path(raytpu.__file__).resolve().parent
    root = Path(root)
    files = {f"raytpu/{name}": root / name for name in CORE_FILES if (root / name).is_file()}
    for package in CORE_PACKAGES:
        base = root / package
        for dirpath, dirnames, filenames in os.walk(base, followlinks=True):
            rel = Path(dirpath).relative_to(base)
            dirnames[:] = sorted(d for d in dirnames if d != "__pycache__" and not d.startswith("."))
            for name in filenames:
                if name.endswith((".py", ".typed")) and not name.startswith("."):
                    files[(Path("raytpu") / package / rel / name).as_posix()] = Path(dirpath) / name
    return sorted(files.items())


def core_zip_bytes(root: str | Path | None = None) -> bytes:
    """The core zip for ``py_modules``, deterministically: the same sources give the same bytes on every
    machine (sorted entries, fixed timestamps and modes, stored uncompressed: deflate output differs
    between zlib builds). Every entry under :data:`ZIP_TOP`: ``raytpu-core/raytpu/...``."""
    return deterministic_zip([(f"{ZIP_TOP}/{name}", path, False) for name, path in core_zip_files(root)])


def deterministic_zip(entries: list[tuple[str, Path, bool]]) -> bytes:
    """``(name, file, executable)`` entries as a zip that is the same bytes on every machine: fixed timestamps and
    modes (rw-r--r--, or rwxr-xr-x), stored uncompressed (deflate output differs between zlib builds)."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_STORED) as archive:
        for name, path, executable in entries:
            info = zipfile.ZipInfo(name, date_time=CORE_ZIP_DATE)
            info.create_system = 3  # Unix, whatever builds it
            info.external_attr = (0o100755 if executable else 0o100644) << 16
            info.compress_type = zipfile.ZIP_STORED
            archive.writestr(info, path.read_bytes())
    return buffer.getvalue()


def build_core_zip(dest: str | Path) -> Path:
    """Writes :func:`core_zip_bytes` (the core and its workloads; no CLI, no CDK code) to ``dest``."""
    dest = Path(dest)
    dest.write_bytes(core_zip_bytes())
    return dest
