"""The core zip: the pure-Python part of ``raytpu`` a Ray job imports, as ``py_modules`` takes it. Standard library
only: the cluster stack uploads it (a CDK stack must not load the Kubernetes client), and so does ``--upload-core``."""

from __future__ import annotations

import io
import os
import zipfile
from pathlib import Path

CORE_FILES = ("__init__.py", "py.typed")
"""Top-level files of ``raytpu`` in the jobs' core zip: the package marker and its typing marker."""

CORE_PACKAGES = ("core", "workloads")
"""Subpackages shipped whole (``*.py``, ``py.typed``): what a Ray job may import. The CLI, ``cluster``, ``local``,
``sizing`` and the CDK subpackages never run inside one. This module ships too: :mod:`raytpu.core.common.names` names
the zip by its digest (``core_zip_object``), so a job importing it reads the same bytes from its own copy."""

ZIP_TOP = "raytpu-core"
"""The zip's one top-level folder, holding ``raytpu/``: Ray unpacks a remote ``py_modules`` zip (``file://``, ``gs://``)
without it. Source: Ray 2.60 ``ray._private.runtime_env.packaging.download_and_unpack_package``
(``remove_top_level_directory=True``)."""

CORE_ZIP_DATE = (1980, 1, 1, 0, 0, 0)
"""The timestamp of every zip entry (the earliest a zip can hold), so the same sources give the same bytes."""


def package_folders(root: str | Path | None = None) -> dict[str, Path]:
    """The folder of ``raytpu`` and of each of :data:`CORE_PACKAGES`: under ``root`` (a ``raytpu`` folder laid out as
    installed) when given, else where the import system finds them. Found, not assumed beside ``raytpu/``: the
    source tree keeps ``workloads/`` at the top and the editable install maps it (pyproject's ``package-dir``); a
    wheel, and the zip itself in a job, nest it."""
    if root is not None:
        return {"raytpu": Path(root), **{package: Path(root) / package for package in CORE_PACKAGES}}
    import importlib.util

    import raytpu

    folders = {"raytpu": Path(raytpu.__file__).resolve().parent}
    for package in CORE_PACKAGES:
        spec = importlib.util.find_spec(f"raytpu.{package}")
        assert spec is not None and spec.submodule_search_locations, f"raytpu.{package} is not installed"
        folders[package] = Path(next(iter(spec.submodule_search_locations))).resolve()
    return folders


def core_zip_files(root: str | Path | None = None) -> list[tuple[str, Path]]:
    """``(name in the zip, source file)`` of every core file, sorted; ``root``: the ``raytpu`` package directory,
    laid out as installed (default: the imported package's folders, :func:`package_folders`)."""
    folders = package_folders(root)
    top = folders["raytpu"]
    files = {f"raytpu/{name}": top / name for name in CORE_FILES if (top / name).is_file()}
    for package in CORE_PACKAGES:
        base = folders[package]
        for dirpath, dirnames, filenames in os.walk(base):
            rel = Path(dirpath).relative_to(base)
            dirnames[:] = sorted(d for d in dirnames if d != "__pycache__" and not d.startswith("."))
            for name in filenames:
                entry = (Path(package) / rel / name).as_posix()
                if name.endswith((".py", ".typed")) and not name.startswith("."):
                    files[f"raytpu/{entry}"] = Path(dirpath) / name
    return sorted(files.items())


def core_zip_bytes(root: str | Path | None = None) -> bytes:
    """The core zip for ``py_modules``, the same bytes on every machine (:func:`deterministic_zip`), every entry under
    :data:`ZIP_TOP`."""
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
