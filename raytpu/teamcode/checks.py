"""What ``validate`` checks in a code folder without running the team's code: the ``train_loop`` module defines that
function with one argument, or none without ``train_config`` (read with :mod:`ast`, never imported) and the
entrypoint's script or module exists. Without ``code`` (the code is in the image) only the spellings; the train
program then imports ``train_loop`` before it reserves a slice and exits 2 naming it when that fails. A warning, not
an error: a job's driver entrypoint that never imports ray (:func:`head_warnings`)."""

from __future__ import annotations

import ast
from pathlib import Path
from typing import TYPE_CHECKING

from raytpu.core.common import errors
from raytpu.core.common.errors import InvalidInput
from raytpu.core.specs import workload_fields
from raytpu.core.specs.runtime import user_code
from raytpu.teamcode.bundle import excluded

if TYPE_CHECKING:
    from raytpu.core.specs.workload_spec import WorkloadSpec
    from raytpu.teamcode.requirements import ImageLock

MAX_MODULE_BYTES = 4 * 1024 * 1024


def module_file(folder: Path, module: str) -> Path | None:
    """Where Python finds ``module`` with ``folder`` on its path (a module file or a package's ``__init__``)."""
    base = folder.joinpath(*module.split("."))
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


def parsed_module(field: str, value: str, folder: Path, module: str,
                  valid: str) -> tuple[Path, ast.Module] | InvalidInput:
    """``module``'s file inside ``folder`` and its syntax tree (read, never imported), or the problem naming ``field``:
    no such module, too large, or not Python that parses. ``valid`` is the field's own spelling rule."""
    path = module_file(folder, module)
    if path is None:
        tried = "/".join(module.split("."))
        return errors.invalid_value(field, value, f"names module {module}, found in neither {tried}.py nor "
                                    f"{tried}/__init__.py under code ({folder})", valid)
    if path.stat().st_size > MAX_MODULE_BYTES:
        return errors.invalid_value(field, value, f"names {path}, over {MAX_MODULE_BYTES // 2**20} MiB",
                                    "a Python module of source code")
    try:
        return path, ast.parse(path.read_bytes(), filename=str(path))
    except (SyntaxError, ValueError, RecursionError) as exc:  # RecursionError: nested past what CPython compiles
        line = getattr(exc, "lineno", None)
        return errors.invalid_value(field, value, f"names {path.name}, which Python cannot parse"
                                    f"{f' (line {line})' if line else ''}: {getattr(exc, 'msg', exc)}",
                                    "a module Python 3.11 parses")


def train_loop_problems(field: str, folder: Path, train_loop: str, train_config: object = None
                        ) -> list[InvalidInput]:
    """The module of ``train_loop`` is in ``folder`` and defines the function at its top level, taking one
    argument (Ray Train passes ``train_loop_config``) or, without ``train_config``, none
    (:func:`raytpu.core.specs.runtime.user_code.loop_call_problems`; a ``train_config`` problem goes under that
    field)."""
    module, function = user_code.split_train_loop(train_loop)
    parsed = parsed_module(field, train_loop, folder, module, user_code.TRAIN_LOOP_VALID)
    if isinstance(parsed, InvalidInput):
        return [parsed]
    path, tree = parsed
    return _function_problems(field, train_loop, tree, function, path.name, train_config)


def _function_problems(field: str, train_loop: str, tree: ast.Module, function: str, file: str,
                       train_config: object) -> list[InvalidInput]:
    valid = f"def {function}(config): ... at the top level of {file}"
    found = [node for node in tree.body if _binds(node, function)]
    if not found:
        return [errors.invalid_value(field, train_loop, f"{file} defines no {function} at its top level", valid)]
    node = found[-1]
    if isinstance(node, ast.AsyncFunctionDef):
        return [errors.invalid_value(field, train_loop, f"{function} is an async def", valid)]
    if not isinstance(node, ast.FunctionDef):
        return []  # bound by an assignment or an import: its arguments are not known without running it
    # Source: Ray 2.60 ray.train.v2._internal.util.construct_train_func (0 or 1 required arguments; none: no argument)
    return user_code.loop_call_problems(field.rpartition(".")[0], train_loop,
                                        user_code.LoopParameters.of_source(node.args), train_config, file)


def _binds(node: ast.stmt, name: str) -> bool:
    """Whether a top-level statement binds ``name`` (a def, an assignment, an import)."""
    if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
        return node.name == name
    if isinstance(node, ast.Assign | ast.AnnAssign):
        targets = node.targets if isinstance(node, ast.Assign) else [node.target]
        return any(isinstance(t, ast.Name) and t.id == name for t in targets)
    if isinstance(node, ast.Import | ast.ImportFrom):
        return any((alias.asname or alias.name.split(".")[0]) == name for alias in node.names)
    return False


def entrypoint_problems(field: str, folder: Path, entrypoint: str) -> list[InvalidInput]:
    """The script (or ``-m`` module) the entrypoint runs is in ``folder`` and ships with it."""
    words, bad = user_code.entrypoint_words(field, entrypoint)
    target = user_code.entrypoint_target(words)
    if bad or target is None:  # a spelling the spec's rules report
        return []
    what, name = target
    if what == "module":
        base = folder.joinpath(*name.split(".")) if name else folder
        if not name or not (base.with_suffix(".py").is_file() or (base / "__main__.py").is_file()):
            return [errors.invalid_value(field, entrypoint, f"runs module {name or '(none)'}, which is not in "
                                         f"code ({folder})", "a module inside the code folder")]
        return []
    path = (folder / name)
    if Path(name).is_absolute() or ".." in Path(name).parts:
        return [errors.invalid_value(field, entrypoint, f"runs {name}, outside the code folder",
                                     "a script path relative to the code folder, e.g. tools/reserve.py")]
    if not path.is_file():
        return [errors.invalid_value(field, entrypoint, f"runs {name}, which is not a file in code ({folder})",
                                     "a script inside the code folder")]
    if any(excluded("/".join(Path(name).parts[:i + 1]), i < len(Path(name).parts) - 1)
           for i in range(len(Path(name).parts))):
        return [errors.invalid_value(field, entrypoint, f"runs {name}, which the kit does not ship",
                                     "a script outside the folders and files left out (raytpu.teamcode.bundle)")]
    return []


def folder_problems(prefix: str, folder: Path, work: WorkloadSpec, image: ImageLock) -> list[InvalidInput]:
    """Every check of one workload's code folder after its walk (:class:`raytpu.teamcode.prepared.TeamCode`): its
    ``requirements`` against ``image``'s pins, then its ``serve_app``, ``train_loop`` or ``entrypoint``; each problem
    under the field it is about (``prefix`` is the workload's config path, e.g. ``workloads[2]``)."""
    found = requirements_problems(f"{prefix}.requirements", folder, work.requirements, image)
    if work.serve_app is not None:
        return found + serve_app_problems(f"{prefix}.serve_app", folder, work.serve_app)
    if work.train_loop is not None:
        return found + train_loop_problems(f"{prefix}.train_loop", folder, work.train_loop, work.train_config)
    if work.entrypoint is not None:
        return found + entrypoint_problems(f"{prefix}.entrypoint", folder, work.entrypoint)
    return found


def requirements_problems(field: str, folder: Path, relative: str | None, image: ImageLock) -> list[InvalidInput]:
    """The requirements file is inside the code folder, every line one the kit honours on both sides, and no line
    clashes with ``image``'s pins: read from files only, offline. Resolving it (a package no index has, a transitive
    clash) is for where a lock is needed: ``submit``, ``images build``, ``validate --resolve``
    (:func:`raytpu.teamcode.requirements.resolve`, cached by content)."""
    if relative is None:
        return []
    from raytpu.teamcode import requirements

    found = requirements.file_problems(field, folder, relative) or requirements.line_problems(field, folder, relative)
    if found:
        return found
    return requirements.clash_problems(field, requirements.expanded(folder, relative), image)


def serve_app_problems(field: str, folder: Path, serve_app: str) -> list[InvalidInput]:
    """The module of ``serve_app`` is in ``folder`` and binds the name at its top level (a ``Deployment.bind()``
    assignment, an app builder ``def``, an import): read with :mod:`ast`, never imported, as ``train_loop`` is.
    Source: Ray 2.60 ``ray.serve._private.api.call_user_app_builder_with_args_if_necessary`` (the import path names
    an ``Application`` or a function returning one)."""
    from raytpu.core.specs.serving import serve_app as rules

    module, name = rules.split(serve_app)
    parsed = parsed_module(field, serve_app, folder, module, rules.VALID)
    if isinstance(parsed, InvalidInput):
        return [parsed]
    path, tree = parsed
    if not any(_binds(node, name) for node in tree.body):
        return [errors.invalid_value(field, serve_app, f"{path.name} defines no {name} at its top level",
                                     f"{name} = MyDeployment.bind() (or def {name}(args): ...) at the top level "
                                     f"of {path.name}")]
    return []


MAX_IMPORT_FILES = 50
"""How many files of the code folder :func:`head_warnings` reads, following a script's imports; past it the script
is taken to import ray (no warning)."""
MAX_IMPORT_FILE_BYTES = 1 << 20
"""A file over this size is taken to import ray, unread."""


def head_warnings(prefix: str, work: WorkloadSpec) -> list[str]:
    """A ``kind: job`` whose entrypoint runs as the Ray driver on the head (``run_on`` unset or ``driver``) but whose
    script (or ``-m`` module) never imports ray, nor does any module of the code folder it imports (read with
    :mod:`ast`, never imported: :func:`might_import_ray`): a plain JAX program that would run on the head's CPU while
    the slice's chips wait. ``prefix`` is the workload's config path, e.g. ``workloads[2]``. Only the code folder's
    own files are followed; one that cannot be read counts as importing ray (no warning).
    Source: Ray 2.60 ``ray.dashboard.modules.job.job_manager.JobManager._get_label_selector`` (an entrypoint asking
    no resources runs on the head node)."""
    if (work.code is None or work.entrypoint is None or work.run_on not in (None, user_code.DRIVER)
            or not workload_fields.takes(work.kind.name, "run_on")):
        return []
    folder = Path(work.code)
    words, bad = user_code.entrypoint_words("entrypoint", work.entrypoint)
    target = None if bad else user_code.entrypoint_target(words)
    if target is None:
        return []
    what, name = target
    if what == "script" and name.startswith("./") and not name.endswith(".py"):
        return []  # a shell script or a program run directly: not read
    try:
        if what == "script":
            if Path(name).is_absolute() or ".." in Path(name).parts:
                return []
            starts, roots = [folder / name], [folder, (folder / name).parent]
        else:
            starts, roots = _module_files(folder, name), [folder]
        inside = folder.resolve()
        if not starts or not all(p.is_file() and p.resolve().is_relative_to(inside) for p in starts) \
                or might_import_ray(folder, starts, roots):
            return []
    except OSError:  # a name too long for the file system, a folder not readable: not known, so no warning
        return []
    chips, slices = work.plan.chips * work.slices_per_run, work.slices_per_run
    whose = "the slice's" if slices == 1 else f"the {slices} slices'"
    return [f"{prefix}.entrypoint: runs on the Ray head (CPU); {whose} {chips} chips would wait: set "
            f"{prefix}.run_on: {user_code.EVERY_HOST} ({name} never imports ray, nor do the code folder's modules "
            "it imports: it is no Ray driver)"]


def might_import_ray(folder: Path, starts: list[Path], roots: list[Path]) -> bool:
    """Whether the files ``starts`` import ray (``import ray``, ``import ray.x``, ``from ray[.x] import y``,
    ``importlib.import_module("ray...")``), themselves or through the modules of ``folder`` they import (looked up
    under ``roots``, as Python's path would find them; at most :data:`MAX_IMPORT_FILES` files). A file too large,
    unreadable or that Python cannot parse, or more files than the bound, count as importing ray."""
    queue, seen = list(starts), set[Path]()
    inside = folder.resolve()
    while queue:
        path = queue.pop()
        if path in seen:
            continue
        seen.add(path)
        if len(seen) > MAX_IMPORT_FILES:
            return True
        tree = _read_tree(path)
        if tree is None:
            return True
        for names, base in _imports(tree, path):
            if any(n == "ray" or n.startswith("ray.") for n in names):
                return True
            for found in _local_files(names, [base] if base is not None else roots):
                if found.resolve().is_relative_to(inside):
                    queue.append(found)
    return False


def _read_tree(path: Path) -> ast.Module | None:
    """A file's syntax tree, or None when it is too large or cannot be read or parsed (never raising)."""
    try:
        if path.stat().st_size > MAX_IMPORT_FILE_BYTES:
            return None
        return ast.parse(path.read_bytes(), filename=str(path))
    except (OSError, SyntaxError, ValueError, RecursionError, MemoryError):
        return None


def _imports(tree: ast.Module, path: Path) -> list[tuple[list[str], Path | None]]:
    """Every import in ``tree`` (at any depth, in functions too): the dotted names it may load, and the folder a
    relative import is relative to (None: an absolute import, looked up on the path)."""
    found: list[tuple[list[str], Path | None]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.append(([alias.name for alias in node.names], None))
        elif isinstance(node, ast.ImportFrom):
            module = node.module or ""
            names = [module] if module else []
            names += [f"{module}.{alias.name}" if module else alias.name for alias in node.names if alias.name != "*"]
            base = None
            if node.level:
                base = path.parent
                for _ in range(node.level - 1):
                    base = base.parent
            found.append((names, base))
        elif (isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant)
              and isinstance(node.args[0].value, str)
              and (getattr(node.func, "attr", None) == "import_module" or getattr(node.func, "id", None) in
                   ("import_module", "__import__"))):
            found.append(([node.args[0].value], None))
    return found


def _local_files(names: list[str], roots: list[Path]) -> list[Path]:
    """The files under ``roots`` that importing each dotted name runs: its packages' ``__init__.py`` and the module
    itself (``a/b.py`` or ``a/b/__init__.py``)."""
    found = []
    for name in names:
        parts = [p for p in name.split(".") if p]
        for root in roots:
            for depth in range(1, len(parts) + 1):
                base = root.joinpath(*parts[:depth])
                found += [c for c in (base / "__init__.py", base.with_suffix(".py")) if c.is_file()]
    return found


def _module_files(folder: Path, module: str) -> list[Path]:
    """What ``python -m module`` runs from ``folder``: its packages' ``__init__.py``, then the module (a package's
    ``__main__.py``)."""
    parts = [p for p in module.split(".") if p]
    files = [folder.joinpath(*parts[:depth], "__init__.py") for depth in range(1, len(parts))]
    base = folder.joinpath(*parts)
    files += [base.with_suffix(".py")] if base.with_suffix(".py").is_file() else [base / "__init__.py",
                                                                                  base / "__main__.py"]
    return [f for f in files if f.is_file()] if parts else []
