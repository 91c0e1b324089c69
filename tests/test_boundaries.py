"""House rules that span files: import boundaries and "no TPU literal outside the catalog"."""

from __future__ import annotations

import ast
import re
import sys
from pathlib import Path

import pytest

from raytpu.core.tpu.catalog import GENERATIONS

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[1]
LINKED = {"stacks", "modules", "workloads"}  # raytpu/<name> is a symlink to the top-level folder
SHIPPED = [p for d in ("raytpu", *sorted(LINKED)) for p in sorted((ROOT / d).rglob("*.py"))
           if not (p.parts[len(ROOT.parts)] == "raytpu" and p.parts[len(ROOT.parts) + 1] in LINKED)]
CATALOG = ROOT / "raytpu" / "core" / "tpu" / "catalog.py"


def imported_roots(path: Path) -> set[str]:
    """Top-level names of every module a file imports, at any depth of the file."""
    roots: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            roots.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            roots.add(node.module)
    return roots


def imported_modules(path: Path) -> set[str]:
    """Every module a shipped file imports (see :func:`imports_of`), relative imports resolved against its package."""
    package = path.relative_to(ROOT).with_suffix("").parts[:-1]
    if package and package[0] in LINKED:  # installed as raytpu.<folder>
        package = ("raytpu", *package)
    return imports_of(path.read_text(), package)


def imports_of(source: str, package: tuple[str, ...]) -> set[str]:
    """Every module ``source`` imports, dotted, at any depth; ``from a import b`` counts both ``a`` and ``a.b``
    (``b`` may be a submodule)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = ".".join([*package[:len(package) - node.level + 1], *([node.module] if node.module else [])])
            else:
                base = node.module or ""
            found.add(base)
            found.update(f"{base}.{alias.name}" for alias in node.names)
    return found


def top_level(modules: set[str]) -> set[str]:
    return {m.split(".")[0] for m in modules}


CORE = sorted((ROOT / "raytpu" / "core").glob("*.py"))
"""The core layer is its folder: what every layer reads and what ships to pods (raytpu/core/core_zip.py)."""


def test_the_core_is_a_folder_that_holds_the_spec_layer() -> None:
    names = {p.stem for p in CORE}
    assert {"spec", "catalog", "plan", "kinds", "provisioning", "errors", "multislice", "names", "kuberay",
            "models"} <= names


@pytest.mark.parametrize("path", CORE, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_core_imports_the_standard_library_and_the_core_only(path: Path) -> None:
    """docs/DESIGN.md "The one spec": the core imports neither pydantic, CDK, Ray nor JAX, and nothing of the kit
    outside its folder, so it imports alone from the jobs' zip. vLLM is read only by the check that runs inside the
    serving image (``serving.parse_with_vllm``), lazily."""
    found = imported_modules(path)
    kit = {m for m in found if m.split(".")[0] == "raytpu"}
    package = {"raytpu", "raytpu.__version__"}  # the package marker ships beside the core
    assert not {m for m in kit - package if m != "raytpu.core" and not m.startswith("raytpu.core.")}, sorted(kit)
    outside = top_level(found) - {"raytpu", "vllm"} - set(sys.stdlib_module_names)
    assert not outside, sorted(outside)


@pytest.mark.parametrize("path", sorted((ROOT / "stacks").glob("*.py")), ids=lambda p: p.relative_to(ROOT).as_posix())
def test_stacks_read_specs_not_the_config_or_the_cli(path: Path) -> None:
    """Stacks take a ClusterSpec; parsing ``raytpu.yaml`` is the CLI's and the CDK app's job."""
    found = imported_modules(path)
    assert not {m for m in found if m.split(".")[:2] in (["raytpu", "config"], ["raytpu", "cli"])}, sorted(found)
    assert "pydantic" not in top_level(found)


CDK_CODE = sorted((ROOT / "stacks").glob("*.py")) + sorted((ROOT / "modules").glob("*.py"))
CLUSTER_DATA = {"raytpu.core.manifests.kube_resources"}
"""What of the cluster package CDK code may read: the kinds table (standard library, loads no client)."""


@pytest.mark.parametrize("path", [*CDK_CODE, ROOT / "raytpu" / "core" / "core_zip.py"],
                         ids=lambda p: p.relative_to(ROOT).as_posix())
def test_cdk_code_and_the_core_zip_never_import_the_api_clients(path: Path) -> None:
    """docs/DESIGN.md layout: the cluster stack builds the core zip (raytpu/core/core_zip.py) and no stack or construct
    loads a Kubernetes or Google API client (raytpu/cluster/) at synth time."""
    found = imported_modules(path)
    clients = {m for m in found if m.startswith("raytpu.cluster.")
               and not any(m == d or m.startswith(f"{d}.") for d in CLUSTER_DATA)}
    assert not clients, sorted(clients)
    assert not top_level(found) & {"kubernetes", "google", "urllib3", "requests"}


def test_core_zip_builder_imports_the_standard_library_only() -> None:
    found = top_level(imported_modules(ROOT / "raytpu" / "core" / "core_zip.py"))
    assert found <= {"__future__", "io", "os", "zipfile", "pathlib", "raytpu"}, sorted(found)


def test_the_http_retry_is_neutral() -> None:
    """raytpu/cluster/http_retry.py serves the Kubernetes and the Google API clients alike: it reads neither."""
    found = imported_modules(ROOT / "raytpu" / "cluster" / "http_retry.py")
    assert not {m for m in found if m.startswith("raytpu")}, sorted(found)


@pytest.mark.parametrize("path", sorted((ROOT / "raytpu" / "commands").glob("*.py")),
                         ids=lambda p: p.relative_to(ROOT).as_posix())
def test_commands_never_import_another_command(path: Path) -> None:
    """A command is an argparse adapter: what two commands share lives in a library module, not in a command."""
    found = {m for m in imported_modules(path) if m.split(".")[:2] == ["raytpu", "commands"]}
    assert not found, sorted(found)


def test_import_finder_sees_every_spelling_of_an_import() -> None:
    """The AST checks above would miss nothing: plain, from-, aliased, nested and relative imports all count."""
    source = ("import raytpu.config as c\nfrom raytpu import cli\nfrom . import cluster\nfrom ..spec import X\n"
              "def f():\n    from raytpu.config import load\n")
    found = imports_of(source, ("raytpu", "stacks"))
    assert {"raytpu.config", "raytpu.cli", "raytpu.stacks.cluster", "raytpu.spec", "raytpu.config.load"} <= found


def test_shipped_files_are_found() -> None:
    names = {p.relative_to(ROOT).as_posix() for p in SHIPPED}
    assert "raytpu/core/tpu/catalog.py" in names
    assert any(n.startswith("workloads/") for n in names)
    assert {"stacks/app.py", "stacks/cluster.py", "stacks/workloads.py"} <= names


@pytest.mark.parametrize("path", [p for p in SHIPPED if p.parent.name == "workloads"],
                         ids=lambda p: p.relative_to(ROOT).as_posix())
def test_workloads_never_import_the_cdk(path: Path) -> None:
    forbidden = re.compile(r"^(cdktn|cdktf|constructs|jsii|cdktn_provider_\w+|raytpu\.(stacks|modules))(\.|$)")
    assert not {m for m in imported_roots(path) if forbidden.match(m)}


def tpu_literals() -> set[str]:
    """Strings only the catalog may spell: machine types and GKE accelerator labels.

    Generation names (``v6e``, ``tpu7x``) are user vocabulary and may appear anywhere; tpu7x's
    label happens to equal its name, so it is not counted.
    """
    literals = set()
    for gen in GENERATIONS.values():
        literals.add(gen.gke_accelerator)
        literals.update(m.name for m in gen.machine_types)
    return literals - set(GENERATIONS)


@pytest.mark.parametrize("path", [p for p in SHIPPED if p != CATALOG], ids=lambda p: p.relative_to(ROOT).as_posix())
def test_no_tpu_literal_outside_the_catalog(path: Path) -> None:
    strings = {node.value for node in ast.walk(ast.parse(path.read_text()))
               if isinstance(node, ast.Constant) and isinstance(node.value, str)}
    found = {lit for lit in tpu_literals() for s in strings if re.search(rf"(?<![\w-]){re.escape(lit)}(?![\w-])", s)}
    assert not found, f"{path.name} spells catalog facts: {sorted(found)}"
