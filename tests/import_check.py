"""Imports everything a workload program imports, lazily or not, in the Python that runs this file.

``python import_check.py raytpu.workloads.train ...`` parses each module's source (every ``import`` and
``from ... import`` statement, inside functions too: the programs import Ray and JAX lazily), imports each
non-standard-library module it names and looks up each imported name. Prints one line per missing piece and
exits 1 if there is one. Run by ``tests/test_images.py`` inside an environment built from a workload kind's
image stand-in and packages, with the kit's core zip on ``PYTHONPATH`` as Ray's ``py_modules`` puts it.
"""

from __future__ import annotations

import ast
import importlib
import importlib.util
import os
import subprocess
import sys
from pathlib import Path


def imported(module: str) -> set[tuple[str, str | None]]:
    """(module, name or None) for every import statement of ``module``'s source."""
    spec = importlib.util.find_spec(module)
    assert spec is not None and spec.loader is not None, module
    source = spec.loader.get_source(module)  # type: ignore[attr-defined]
    found: set[tuple[str, str | None]] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found |= {(alias.name, None) for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found |= {(node.module, alias.name) for alias in node.names}
    return found


def missing(module: str) -> list[str]:
    """What of ``module``'s imports does not import here."""
    problems = []
    try:
        importlib.import_module(module)
    except ImportError as exc:
        return [f"{module}: {exc}"]
    for name, attr in sorted(imported(module), key=lambda pair: (pair[0], pair[1] or "")):
        if name.split(".")[0] in sys.stdlib_module_names or name == "__future__":
            continue
        try:
            loaded = importlib.import_module(name)
            if attr is not None and not hasattr(loaded, attr):
                importlib.import_module(f"{name}.{attr}")
        except ImportError as exc:
            problems.append(f"{module}: {name}{'.' + attr if attr else ''}: {exc}")
    return problems


def run_with_core_zip(python: str | Path, workdir: Path, *modules: str) -> subprocess.CompletedProcess[str]:
    """This checker run by ``python`` on ``modules``, with nothing but the kit's core zip on ``PYTHONPATH`` (as Ray's
    ``py_modules`` puts it) and ``workdir`` as home and working directory. Called from the test process."""
    from raytpu.core.core_zip import ZIP_TOP, core_zip_bytes

    core = workdir / "core.zip"
    core.write_bytes(core_zip_bytes())
    env = {"PATH": os.environ["PATH"], "PYTHONPATH": str(core / ZIP_TOP), "HOME": str(workdir), "PYTHONNOUSERSITE": "1",
           "JAX_PLATFORMS": "cpu"}
    return subprocess.run([str(python), __file__, *modules], cwd=workdir, env=env, capture_output=True, text=True,
                          timeout=300)


if __name__ == "__main__":
    problems = [p for module in sys.argv[1:] for p in missing(module)]
    print("\n".join(problems) or "ok")
    sys.exit(1 if problems else 0)
