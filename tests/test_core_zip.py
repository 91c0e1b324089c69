"""The kit's core zip: what it holds, that it is byte-for-byte reproducible, that it imports on its own, and
that the cluster stack uploads it (as a Terraform asset) to the object the RayJobs' ``py_modules`` name."""

from __future__ import annotations

import ast
import base64
import hashlib
import io
import json
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path
from typing import Any

import pytest
from _synth import AUTOPILOT_EXAMPLE, STANDARD_EXAMPLE, only, read_stacks, resources, synth_config
from image_refs import FIXTURE_REFS

from raytpu import __version__
from raytpu.core import core_zip
from raytpu.core.common import names
from raytpu.core.common.errors import InvalidInput

pytestmark = [pytest.mark.synth, pytest.mark.timeout(600)]

EXAMPLES = {"standard": (STANDARD_EXAMPLE, "ray-tpu-cluster"), "autopilot": (AUTOPILOT_EXAMPLE, "ray-tpu-auto-cluster")}
CDK = ("cdktn", "cdktf", "constructs", "jsii", "raytpu.stacks", "raytpu.modules")
ROOT = Path(__file__).resolve().parents[1]


def _names(data: bytes) -> list[str]:
    """The zip's entries below its one top-level folder (:data:`core_zip.ZIP_TOP`), which Ray drops on unpacking."""
    names = zipfile.ZipFile(io.BytesIO(data)).namelist()
    assert {n.split("/", 1)[0] for n in names} == {core_zip.ZIP_TOP}
    return [n.split("/", 1)[1] for n in names]


# ---------------------------------------------------------------------------------------------- contents


TOP = {"raytpu/__init__.py", "raytpu/py.typed"}
"""The top level of the zip: the package marker only. The core ships as its folder, whole."""


def test_core_zip_holds_the_core_and_the_workloads_only() -> None:
    names = _names(core_zip.core_zip_bytes())
    assert {n.split("/", 1)[0] for n in names} == {"raytpu"}
    assert {n for n in names if n.count("/") == 1} == TOP
    core = {f"raytpu/core/{p.relative_to(ROOT / 'raytpu' / 'core').as_posix()}"
            for p in (ROOT / "raytpu" / "core").rglob("*.py")}
    assert {"raytpu/core/__init__.py", "raytpu/core/specs/spec.py", "raytpu/core/tpu/models.py"} <= core
    # the whole core, its builder too: names.core_zip_object names the zip by its digest, in a job as on the machine
    assert {n for n in names if n.startswith("raytpu/core/")} == core
    programs = {f"raytpu/workloads/{p.relative_to(ROOT / 'workloads').as_posix()}"
                for p in (ROOT / "workloads").rglob("*.py")}
    assert {"raytpu/workloads/__init__.py", "raytpu/workloads/smoke/__main__.py", "raytpu/workloads/support/slices.py",
            "raytpu/workloads/train.py"} <= programs
    assert programs <= set(names)
    assert not [n for n in names
                if n.startswith(("raytpu/stacks/", "raytpu/modules/", "raytpu/commands/", "raytpu/cluster/",
                                 "raytpu/local/", "raytpu/sizing/"))]
    assert not {"raytpu/cli/__init__.py", "raytpu/__main__.py", "raytpu/cluster/outputs.py",
                "raytpu/cdktf_app.py"} & set(names)
    assert "raytpu/config/__init__.py" not in names  # jobs receive their spec as JSON; they never parse YAML
    assert not [n for n in names if "__pycache__" in n or not n.endswith((".py", ".typed"))]
    assert names == sorted(names)


def _imports(tree: ast.AST) -> set[tuple[str, str | None]]:
    """(module, imported name) of every absolute import at any depth (name None for ``import x``)."""
    found: set[tuple[str, str | None]] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update((alias.name, None) for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.update((node.module, alias.name) for alias in node.names)
    return found


def test_every_raytpu_import_in_the_zip_resolves_inside_it_and_none_is_cdk() -> None:
    """A Ray job imports from the zip only: a workload importing a kit module left out of the zip (or the CDK)
    would fail on the cluster, so it fails here."""
    data = core_zip.core_zip_bytes()
    archive = zipfile.ZipFile(io.BytesIO(data))
    names = set(_names(data))

    def read(name: str) -> bytes:
        return archive.read(f"{core_zip.ZIP_TOP}/{name}")

    package_names = {t.id for node in ast.parse(read("raytpu/__init__.py")).body
                     if isinstance(node, ast.Assign) for t in node.targets if isinstance(t, ast.Name)}

    def is_module(dotted: str) -> bool:
        path = dotted.replace(".", "/")
        return f"{path}.py" in names or f"{path}/__init__.py" in names

    for name in sorted(n for n in names if n.endswith(".py")):
        for module, imported in _imports(ast.parse(read(name))):
            assert not module.startswith(CDK), f"{name} imports {module}"
            if module.split(".")[0] != "raytpu":
                continue
            assert is_module(module), f"{name} imports {module}, which the core zip lacks"
            if imported is not None and module == "raytpu":
                assert is_module(f"raytpu.{imported}") or imported in package_names, \
                    f"{name} imports raytpu.{imported}, which the core zip lacks"


def test_rays_own_unpacking_of_a_remote_zip_leaves_the_raytpu_package(tmp_path: Path) -> None:
    """Ray unpacks a remote ``py_modules`` zip (the RayJobs' ``file:///mnt/gcs/...``, ``--upload-core``'s ``gs://``)
    without its single top-level folder and puts the rest on ``PYTHONPATH`` (Ray 2.60
    ``ray._private.runtime_env.packaging.download_and_unpack_package``: ``remove_top_level_directory=True`` for
    remote protocols; ``py_modules.PyModulesPlugin.modify_context``). Ray's own ``unzip_package`` must leave
    ``raytpu/`` there; a zip whose top folder was ``raytpu/`` itself lost it, and every job its imports."""
    from ray._private.runtime_env.packaging import unzip_package

    zipped = core_zip.build_core_zip(tmp_path / "raytpu-0.1.0.zip")
    unpacked = tmp_path / "py_modules_files"
    unzip_package(str(zipped), str(unpacked), remove_top_level_directory=True, unlink_zip=False)
    assert sorted(p.name for p in unpacked.iterdir()) == ["raytpu"]
    assert (unpacked / "raytpu" / "__init__.py").is_file()
    assert (unpacked / "raytpu" / "core" / "tpu" / "plan.py").is_file()
    assert (unpacked / "raytpu" / "workloads" / "train.py").is_file()


# ---------------------------------------------------------------------------------------------- reproducible


def test_core_zip_is_byte_identical_across_builds(tmp_path: Path) -> None:
    first = core_zip.build_core_zip(tmp_path / "a.zip").read_bytes()
    second = core_zip.build_core_zip(tmp_path / "b.zip").read_bytes()
    assert first == second == core_zip.core_zip_bytes()
    for info in zipfile.ZipFile(io.BytesIO(first)).infolist():
        assert info.date_time == core_zip.CORE_ZIP_DATE and info.external_attr == 0o100644 << 16, info.filename


def test_core_zip_ignores_file_times_and_modes(tmp_path: Path) -> None:
    """A fresh checkout (new mtimes, another umask) gives the same bytes: the asset hash does not churn."""
    copy = tmp_path / "raytpu"
    for package, folder in core_zip.package_folders().items():  # laid out as a wheel installs them
        shutil.copytree(folder, copy if package == "raytpu" else copy / package, copy_function=shutil.copy,
                        ignore=shutil.ignore_patterns("__pycache__"), dirs_exist_ok=True)
    for path in copy.rglob("*"):
        if path.is_file():
            path.chmod(0o600)
            os.utime(path, (1_900_000_000, 1_900_000_000))
    assert core_zip.core_zip_bytes(copy) == core_zip.core_zip_bytes()


# ---------------------------------------------------------------------------------------------- importable


def test_core_imports_from_the_zip_alone(tmp_path: Path) -> None:
    """``python -I -S``: no site-packages (and so no editable install of raytpu), only the zip on the path."""
    path = core_zip.build_core_zip(tmp_path / "raytpu.zip")
    code = (  # zipimport takes a folder inside the zip as a path entry
        "import importlib.util, sys\n"
        f"zip_path = {str(path / core_zip.ZIP_TOP)!r}\n"
        "assert not [p for p in sys.path if 'site-packages' in p], sys.path\n"
        "sys.path.insert(0, zip_path)\n"
        "import raytpu.core.tpu.plan, raytpu.core.tpu.catalog, raytpu.core.common.errors\n"
        "import raytpu.core.common.report, raytpu.core.manifests.kuberay\n"
        "assert raytpu.core.tpu.plan.__file__.startswith(zip_path), raytpu.core.tpu.plan.__file__\n"
        "assert raytpu.core.tpu.plan.plan_slice('v6e', '4x4').hosts == 4\n"
        "spec = importlib.util.find_spec('raytpu.workloads.smoke')\n"
        "assert spec is not None and spec.origin.startswith(zip_path), spec\n"
        "assert importlib.util.find_spec('raytpu.stacks') is None\n"
        "assert importlib.util.find_spec('raytpu.modules') is None\n"
        "assert importlib.util.find_spec('raytpu.config') is None\n"
        "print('ok')\n"
    )
    result = subprocess.run([sys.executable, "-I", "-S", "-c", code], capture_output=True, text=True,
                            timeout=60, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "ok"


def test_a_job_reads_its_workload_spec_from_the_zip_alone_without_pydantic_or_yaml(tmp_path: Path) -> None:
    """What a RayJob's driver does first: ``WorkloadSpec.from_env()`` from ``RAYTPU_WORKLOAD``, with only the zip
    and the standard library on ``sys.path`` (no pydantic, no PyYAML: the image need not have them)."""
    from raytpu.config import load

    spec = load(str(AUTOPILOT_EXAMPLE))
    work = spec.workload("train")
    path = core_zip.build_core_zip(tmp_path / "raytpu.zip")
    code = (
        "import importlib.util, json, sys\n"
        f"zip_path = {str(path / core_zip.ZIP_TOP)!r}\n"
        "sys.path[:] = [zip_path] + [p for p in sys.path if 'site-packages' not in p and 'dist-packages' not in p]\n"
        "assert importlib.util.find_spec('pydantic') is None and importlib.util.find_spec('yaml') is None\n"
        "from raytpu.core.specs.spec import WorkloadSpec\n"
        "import raytpu.core.specs.spec\n"
        "assert raytpu.core.specs.spec.__file__.startswith(zip_path), raytpu.core.specs.spec.__file__\n"
        "work = WorkloadSpec.from_env()\n"
        "bad = sorted(m for m in sys.modules if m.split('.')[0] in ('pydantic', 'yaml', 'ray', 'jax', 'cdktn'))\n"
        "assert not bad and 'raytpu.config' not in sys.modules, bad\n"
        "print(json.dumps(work.to_json(), sort_keys=True))\n"
    )
    env = {**os.environ, **work.workload_env()}
    result = subprocess.run([sys.executable, "-I", "-S", "-c", code], capture_output=True, text=True,
                            timeout=60, cwd=tmp_path, env=env)
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout) == work.to_json()
    assert work.slice.provisioning.name == "reservation" and work.slice.fallback  # a spec with every part set


# ---------------------------------------------------------------------------------------------- uploaded


@pytest.mark.parametrize("example", sorted(EXAMPLES))
def test_cluster_stack_uploads_the_core_zip_where_py_modules_looks(example: str) -> None:
    path, sid = EXAMPLES[example]
    outdir, stacks = synth_config(str(path))
    stack = stacks[sid]
    bucket_id = next(iter(resources(stack, "google_storage_bucket")))
    obj = only(stack, "google_storage_bucket_object")
    assert obj["bucket"] == f"${{google_storage_bucket.{bucket_id}.name}}"
    # named by its content: a zip someone else wrote under the version's name is not the one jobs import
    digest = hashlib.sha256(core_zip.core_zip_bytes()).hexdigest()[:16]
    assert obj["name"] == names.core_zip_object() == f"raytpu/raytpu-{__version__}-{digest}.zip"
    assert names.py_modules_uri() == f"file://{names.GCS_MOUNT_PATH}/{obj['name']}"
    assert names.core_zip_uri("b") == f"gs://b/{obj['name']}"
    assert obj["content_type"] == "application/zip"
    # a new kit version (a new name: a replacement) must not delete the zip running pods' new nodes still import
    # Source: google provider 8.7.0 storage_bucket_object deletion_policy (ABANDON: left in the bucket)
    assert obj["deletion_policy"] == "ABANDON"
    assert obj["//"]["metadata"]["path"] == f"{sid}/storage/core-zip/object"  # stable construct ids
    source = obj["source"]
    assert source.startswith("assets/") and not Path(source).is_absolute() and ".." not in source
    assert source.endswith(f"/raytpu-{__version__}-{digest}.zip")
    asset = outdir / "stacks" / sid / source
    assert asset.is_file(), f"{source} is not in the synth output"
    data = asset.read_bytes()
    assert data == core_zip.core_zip_bytes()
    assert obj["source_md5hash"] == base64.b64encode(hashlib.md5(data).digest()).decode()
    assert hashlib.sha256(data).hexdigest()[:32] in source  # a changed core is a new path: re-uploaded
    assert sorted(p.name for p in (outdir / "stacks" / sid / "assets").iterdir()) == [source.split("/")[1]]


def test_the_workloads_stack_deploys_after_the_cluster_stack() -> None:
    from raytpu.config import load
    from raytpu.stacks.app import build

    _, cluster, workloads = build(load(str(STANDARD_EXAMPLE)), FIXTURE_REFS, tempfile.mkdtemp())
    assert workloads.depends_on(cluster)
    assert cluster.core_zip.props.name == names.core_zip_object()


def _tree(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def test_resynth_changes_nothing(tmp_path: Path) -> None:
    """Same config, same process: every file of the synth output (assets included) is byte-identical."""
    from raytpu.config import load
    from raytpu.stacks.app import synth

    first, _ = synth_config(str(STANDARD_EXAMPLE))
    synth(load(str(STANDARD_EXAMPLE)), FIXTURE_REFS, tmp_path / "out")
    again, before = _tree(tmp_path / "out" / "stacks"), _tree(first / "stacks")
    assert sorted(again) == sorted(before)
    assert again == before


# ---------------------------------------------------------------------------------------------- construct


def _stack() -> Any:
    from raytpu.modules.parts.cdk import App, TerraformStack

    return TerraformStack(App(outdir=tempfile.mkdtemp()), "s")


def test_bucket_object_props_guard_rails(tmp_path: Path) -> None:
    import dataclasses

    from raytpu.modules.bucket import BucketObject, BucketObjectProps

    file = tmp_path / "f.bin"
    file.write_bytes(b"x")
    cases: list[tuple[str, dict[str, Any]]] = [
        ("name", {"name": "", "source": str(file)}),
        ("name", {"name": "a\nb", "source": str(file)}),
        ("name", {"name": "x" * 1025, "source": str(file)}),
        ("source", {"name": "ok", "source": str(tmp_path / "missing.zip")}),
        ("source", {"name": "ok", "source": str(tmp_path)}),
        ("overrides[' bad']", {"name": "ok", "source": str(file), "overrides": {" bad": 1}}),
    ]
    for field, kwargs in cases:
        with pytest.raises(InvalidInput) as info:
            BucketObjectProps(**kwargs)
        assert info.value.field == field, (field, str(info.value))
    props = BucketObjectProps(name="ok", source=str(file))
    with pytest.raises(dataclasses.FrozenInstanceError):
        props.name = "other"  # type: ignore[misc]
    with pytest.raises(TypeError):
        BucketObjectProps("ok", str(file))  # type: ignore[call-arg]
    with pytest.raises(InvalidInput) as info:
        BucketObject(_stack(), "o", props)
    assert info.value.field == "bucket"


def test_add_object_returns_the_child_in_this_bucket(tmp_path: Path) -> None:
    from raytpu.modules.bucket import Bucket, BucketObject, BucketObjectProps, BucketProps
    from raytpu.modules.parts.cdk import App, TerraformStack, google_provider

    file = tmp_path / "data.bin"
    file.write_bytes(b"hello")
    app = App(outdir=str(tmp_path / "out"))
    stack = TerraformStack(app, "s")
    google_provider.GoogleProvider(stack, "google", project="p")
    bucket = Bucket(stack, "storage", BucketProps(name="my-bucket", project="p", location="us-east5"))
    child = bucket.add_object("file", BucketObjectProps(name="dir/data.bin", source=str(file),
                                                        overrides={"metadata": {"k": "v"}}))
    assert isinstance(child, BucketObject) and child.node.path == "s/storage/file"
    md5 = base64.b64encode(hashlib.md5(b"hello").digest()).decode()
    assert child.md5_hash == md5
    app.synth()
    synthesized = read_stacks(tmp_path / "out")["s"]
    obj = only(synthesized, "google_storage_bucket_object")
    bucket_id = next(iter(resources(synthesized, "google_storage_bucket")))
    assert obj["bucket"] == f"${{google_storage_bucket.{bucket_id}.name}}"
    assert (obj["name"], obj["source_md5hash"], obj["metadata"]) == ("dir/data.bin", md5, {"k": "v"})
    assert "content_type" not in obj and "deletion_policy" not in obj
    assert (tmp_path / "out" / "stacks" / "s" / obj["source"]).read_bytes() == b"hello"
