"""Issue 70 part 3: the package's face. ``raytpu`` offers the dozen names an outside CDK app needs
(``examples/platform_app/app.py``), loaded on first use so ``import raytpu`` stays cheap, each marked public in its
docstring; type checkers read the same names from ``raytpu/__init__.pyi``. Each name loaded:
tests/test_face_names.py (the heavy tier: loading them loads the CDK bindings)."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

import raytpu

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[1]
FACE = [name for name in raytpu.__all__ if name != "__version__"]


def test_importing_raytpu_imports_no_other_module() -> None:
    code = "import sys, raytpu; print(sorted(m for m in sys.modules if m.startswith('raytpu')))"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    assert done.stdout.strip() == "['raytpu']"


def test_an_unknown_name_is_an_attribute_error() -> None:
    with pytest.raises(AttributeError, match="no_such_name"):
        raytpu.no_such_name  # type: ignore[attr-defined]  # noqa: B018


def test_the_stub_offers_the_same_names_from_the_same_modules() -> None:
    """``__init__.pyi`` (what mypy reads for ``raytpu``) and the lazy table agree, name for name."""
    stub = ast.parse((ROOT / "raytpu" / "__init__.pyi").read_text())
    imported = {alias.asname or alias.name: node.module for node in stub.body if isinstance(node, ast.ImportFrom)
                for alias in node.names}
    assert imported == {name: vars(raytpu)["_PUBLIC"][name] for name in FACE}
    listed = next(node.value for node in stub.body if isinstance(node, ast.Assign)
                  and any(isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets))
    assert sorted(ast.literal_eval(listed)) == sorted(raytpu.__all__)


def test_the_platform_app_imports_the_kit_in_one_line() -> None:
    tree = ast.parse((ROOT / "examples" / "platform_app" / "app.py").read_text())
    kit = [node for node in ast.walk(tree) if isinstance(node, ast.ImportFrom | ast.Import)
           and any(name.split(".")[0] == "raytpu"
                   for name in ([node.module or ""] if isinstance(node, ast.ImportFrom) else
                                [a.name for a in node.names]))]
    assert len(kit) == 1 and isinstance(kit[0], ast.ImportFrom) and kit[0].module == "raytpu"
