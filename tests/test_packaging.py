"""Issue 70 part 3: one package, the top-level layout kept. ``stacks/``, ``modules/`` and ``workloads/`` stay folders
beside ``tests/`` and install as ``raytpu.stacks``, ``raytpu.modules`` and ``raytpu.workloads`` through pyproject's
``package-dir``, not through links: the tree holds no link, and the wheel, the editable install and the core zip
carry real files."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from kit_layout import MAPPED, ROOT, SETUPTOOLS, checkout_copy, git_files, module_name

from raytpu.core import core_zip

pytestmark = pytest.mark.unit


def test_the_tree_holds_no_symlink() -> None:
    """git records a link as mode 120000: none is tracked (a link breaks on Windows checkouts and in sdists)."""
    links = [entry.split("\t", 1)[1] for entry in git_files("-s") if entry.startswith("120000 ")]
    assert links == []


def test_pyproject_lists_every_package_of_the_tree() -> None:
    """``packages`` is a list (``packages.find`` cannot map a folder): every folder with an ``__init__.py`` under
    ``raytpu/`` and the mapped folders is in it, and nothing else."""
    folders = [ROOT / "raytpu", *(ROOT / folder for folder in MAPPED)]
    found = {module_name(p.parent) for folder in folders for p in folder.rglob("__init__.py")
             if "__pycache__" not in p.parts}
    assert sorted(SETUPTOOLS["packages"]) == sorted(found)


@pytest.mark.parametrize("folder", sorted(MAPPED))
def test_the_installed_kit_imports_each_mapped_package_from_its_top_level_folder(folder: str) -> None:
    """The editable install (``make``) maps ``raytpu.<folder>`` to this checkout's ``<folder>/``. Another
    checkout's install (a venv shared between clones) would import that clone's files: reinstall (``make``)."""
    spec = importlib.util.find_spec(MAPPED[folder])
    assert spec is not None and spec.submodule_search_locations is not None, f"{MAPPED[folder]} is not installed"
    assert [Path(p).resolve() for p in spec.submodule_search_locations] == [ROOT / folder], \
        f"{MAPPED[folder]} is imported from another checkout: run `make .venv/.installed` here"


def test_the_core_zip_reads_the_workloads_from_their_real_files() -> None:
    """The zip takes ``raytpu.workloads`` from where the import system finds it (``workloads/``, mapped), every file
    a regular file, each of them under ``raytpu/workloads/``."""
    sources = dict(core_zip.core_zip_files())
    shipped = {name for name in sources if name.startswith("raytpu/workloads/")}
    assert shipped == {f"raytpu/workloads/{p.relative_to(ROOT / 'workloads').as_posix()}"
                       for p in (ROOT / "workloads").rglob("*.py")}
    assert all(path.is_file() and not path.is_symlink() for path in sources.values())
    assert not [path for path in sources.values() if any(part.is_symlink() for part in path.parents)]


def test_a_wheel_built_from_a_fresh_clone_holds_the_three_packages_and_no_link(tmp_path: Path) -> None:
    """What ``pip install`` of the repository builds (setuptools, isolated, as uv builds ``-e .``): the mapped
    packages are in it as ``raytpu/<folder>/``, file for file, with the image definitions and the typing markers."""
    uv = Path(sys.executable).with_name("uv")
    if not uv.is_file():
        pytest.skip("needs the venv's uv (make .venv/.installed) to build the wheel")
    clone = checkout_copy(tmp_path / "clone")
    built = subprocess.run([str(uv), "build", "--wheel", "--quiet", "--out-dir", str(tmp_path / "dist"), str(clone)],
                           capture_output=True, text=True, timeout=180, check=False)
    assert built.returncode == 0, built.stderr[-3000:]
    [wheel] = (tmp_path / "dist").glob("raytpu-*.whl")
    with zipfile.ZipFile(wheel) as archive:
        infos = archive.infolist()
    names = {info.filename for info in infos}
    for folder, package in MAPPED.items():
        expected = {f"{package.replace('.', '/')}/{p.relative_to(clone / folder).as_posix()}"
                    for p in (clone / folder).rglob("*.py")}
        assert expected and expected <= names, sorted(expected - names)
    assert not [n for n in names if n.startswith(tuple(f"{folder}/" for folder in MAPPED))]  # none at the top
    assert {"raytpu/py.typed", "raytpu/__init__.pyi", "raytpu/images/job/Dockerfile",
            "raytpu/images/serve/requirements.lock"} <= names
    assert not [i.filename for i in infos if (i.external_attr >> 16) & 0o170000 == 0o120000]  # no link entry
