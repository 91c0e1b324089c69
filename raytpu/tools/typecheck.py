"""``mypy`` with the build's package mapping: ``python -m raytpu.tools.typecheck ARGS`` takes mypy's arguments.

mypy finds modules on paths and ``.pth`` entries, never through an editable install's import hook, so it cannot see
that ``stacks/``, ``modules/`` and ``workloads/`` install as ``raytpu.stacks``, ``raytpu.modules`` and
``raytpu.workloads`` (pyproject's ``package-dir``). This names their files to mypy by those modules, as sources of
every run, then runs mypy as its command does. Source: mypy 2.4 ``mypy.main.process_options``, ``mypy.build.build``
(``BuildSource(path, module)``); docs "Using installed packages" (import hooks unsupported)."""

from __future__ import annotations

import sys
import tomllib
from collections.abc import Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def mapped_folders(root: Path = ROOT) -> dict[str, str]:
    """pyproject's ``package-dir``: package -> folder (``{"raytpu.stacks": "stacks", ...}``)."""
    project = tomllib.loads((root / "pyproject.toml").read_text())
    return dict(project["tool"]["setuptools"]["package-dir"])


def main(argv: Sequence[str] | None = None) -> int:
    from mypy import build
    from mypy.errors import CompileError
    from mypy.main import process_options
    from mypy.modulefinder import BuildSource

    sources, options = process_options(list(sys.argv[1:] if argv is None else argv))
    given = {s.path for s in sources if s.path}
    for package, folder in mapped_folders().items():
        for path in sorted((ROOT / folder).rglob("*.py")):
            rel = path.relative_to(ROOT / folder).with_suffix("").parts
            module = ".".join((package, *(rel[:-1] if rel[-1] == "__init__" else rel)))
            if str(path) not in given and path.relative_to(ROOT).as_posix() not in given:
                sources.append(BuildSource(str(path.relative_to(ROOT)), module, None))
    try:
        result = build.build(sources, options, stdout=sys.stdout, stderr=sys.stderr)
    except CompileError as exc:
        result_errors = exc.messages
    else:
        result_errors = result.errors
    for line in result_errors:
        print(line)
    files = len({s.path for s in sources})
    if result_errors:
        return 1
    print(f"Success: no issues found ({files} source files named, with the mapped packages)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
