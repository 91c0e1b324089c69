"""House rules that span files: import boundaries and "no TPU literal outside the catalog"."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from raytpu.catalog import GENERATIONS

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[1]
LINKED = {"stacks", "modules", "workloads"}  # raytpu/<name> is a symlink to the top-level folder
SHIPPED = [p for d in ("raytpu", *sorted(LINKED)) for p in sorted((ROOT / d).rglob("*.py"))
           if not (p.parts[len(ROOT.parts)] == "raytpu" and p.parts[len(ROOT.parts) + 1] in LINKED)]
CATALOG = ROOT / "raytpu" / "catalog.py"


def imported_roots(path: Path) -> set[str]:
    """Top-level names of every module a file imports, at any depth of the file."""
    roots: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            roots.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            roots.add(node.module)
    return roots


def test_shipped_files_are_found() -> None:
    names = {p.relative_to(ROOT).as_posix() for p in SHIPPED}
    assert "raytpu/catalog.py" in names
    assert any(n.startswith("workloads/") for n in names)


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
