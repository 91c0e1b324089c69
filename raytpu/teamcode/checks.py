"""What ``validate`` checks in a code folder without running the team's code: the ``train_loop`` module defines that
function with one argument (read with :mod:`ast`, never imported) and the entrypoint's script or module exists.
Without ``code`` (the code is in the image) only the spellings; the train program then imports ``train_loop``
before it reserves a slice and exits 2 naming it when that fails."""

from __future__ import annotations

import ast
from pathlib import Path

from raytpu.core.common import errors
from raytpu.core.common.errors import InvalidInput
from raytpu.core.specs import user_code
from raytpu.teamcode.bundle import excluded

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
    except (SyntaxError, ValueError) as exc:
        line = getattr(exc, "lineno", None)
        return errors.invalid_value(field, value, f"names {path.name}, which Python cannot parse"
                                    f"{f' (line {line})' if line else ''}: {getattr(exc, 'msg', exc)}",
                                    "a module Python 3.11 parses")


def train_loop_problems(field: str, folder: Path, train_loop: str) -> list[InvalidInput]:
    """The module of ``train_loop`` is in ``folder`` and defines the function at its top level, taking one
    argument (Ray Train passes ``train_loop_config``)."""
    module, function = user_code.split_train_loop(train_loop)
    parsed = parsed_module(field, train_loop, folder, module, user_code.TRAIN_LOOP_VALID)
    if isinstance(parsed, InvalidInput):
        return [parsed]
    path, tree = parsed
    return _function_problems(field, train_loop, tree, function, path.name)


def _function_problems(field: str, train_loop: str, tree: ast.Module, function: str, file: str
                       ) -> list[InvalidInput]:
    valid = f"def {function}(config): ... at the top level of {file}"
    found = [node for node in tree.body if _binds(node, function)]
    if not found:
        return [errors.invalid_value(field, train_loop, f"{file} defines no {function} at its top level", valid)]
    node = found[-1]
    if isinstance(node, ast.AsyncFunctionDef):
        return [errors.invalid_value(field, train_loop, f"{function} is an async def", valid)]
    if not isinstance(node, ast.FunctionDef):
        return []  # bound by an assignment or an import: its arguments are not known without running it
    args = node.args
    required = len([*args.posonlyargs, *args.args]) - len(args.defaults)
    required_kw = [a for a, d in zip(args.kwonlyargs, args.kw_defaults, strict=True) if d is None]
    if required == 1 and not required_kw:
        return []
    # Source: Ray 2.60 ray.train.v2._internal.util.construct_train_func (the config goes only to a function of
    # exactly one required parameter; one with a default is called with none, and trains on its defaults)
    return [errors.invalid_value(field, train_loop, f"{function} takes ({ast.unparse(args)}), not exactly one "
                                 "required argument (Ray Train passes train_loop_config only to such a function)",
                                 valid)]


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


def folder_problems(field: str, folder: Path, work_fields: dict[str, object]) -> list[InvalidInput]:
    """Every check of one workload's code folder: the folder itself (:func:`raytpu.teamcode.bundle.code_files`),
    then its ``train_loop`` or ``entrypoint``; each problem under the field it is about (``field`` is the config path
    of ``code``, e.g. ``workloads[2].code``)."""
    from raytpu.teamcode.bundle import code_files

    prefix = field.rsplit(".", 1)[0]
    try:
        code_files(field, folder)
    except errors.InvalidInput as exc:
        return [exc]
    train_loop, entrypoint = work_fields.get("train_loop"), work_fields.get("entrypoint")
    found = requirements_problems(f"{prefix}.requirements", folder, work_fields.get("requirements"))
    serve_app = work_fields.get("serve_app")
    if isinstance(serve_app, str) and not user_code.train_loop_problems("serve_app", serve_app):
        return found + serve_app_problems(f"{prefix}.serve_app", folder, serve_app)
    if isinstance(train_loop, str) and not user_code.train_loop_problems("train_loop", train_loop):
        return found + train_loop_problems(f"{prefix}.train_loop", folder, train_loop)
    if isinstance(entrypoint, str):
        return found + entrypoint_problems(f"{prefix}.entrypoint", folder, entrypoint)
    return found


def requirements_problems(field: str, folder: Path, relative: object) -> list[InvalidInput]:
    """The requirements file is inside the code folder and resolves against the kit's image (a clash, a package no
    index has: :func:`raytpu.teamcode.requirements.resolve`, cached by content)."""
    if relative is None or not isinstance(relative, str) or not relative.strip():
        return []  # absent, or a spelling the spec reports
    from raytpu.teamcode import requirements

    found = requirements.file_problems(field, folder, relative)
    if found:
        return found
    try:
        requirements.resolve(field, folder, relative)
    except errors.InvalidInput as exc:
        return [exc]
    return []


def serve_app_problems(field: str, folder: Path, serve_app: str) -> list[InvalidInput]:
    """The module of ``serve_app`` is in ``folder`` and binds the name at its top level (a ``Deployment.bind()``
    assignment, an app builder ``def``, an import): read with :mod:`ast`, never imported, as ``train_loop`` is.
    Source: Ray 2.60 ``ray.serve._private.api.call_user_app_builder_with_args_if_necessary`` (the import path names
    an ``Application`` or a function returning one)."""
    from raytpu.core.specs import serve_app as rules

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
