"""House rules that span files: import boundaries and "no TPU literal outside the catalog"."""

from __future__ import annotations

import ast
import functools
import re
import sys
from collections.abc import Sequence
from pathlib import Path

import pytest
from kit_layout import MAPPED, module_name

from raytpu.core.tpu.catalog import GENERATIONS

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[1]
LINKED = set(MAPPED)  # top-level folders installed as raytpu.<name> (pyproject's package-dir)
SHIPPED = [p for d in ("raytpu", *sorted(LINKED)) for p in sorted((ROOT / d).rglob("*.py"))]
CATALOG = ROOT / "raytpu" / "core" / "tpu" / "catalog.py"


@functools.cache
def parsed(source: str) -> ast.Module:
    """A module's syntax tree, parsed once for the run: most of the checks below walk every shipped module."""
    return ast.parse(source)


def imported_roots(path: Path) -> set[str]:
    """Top-level names of every module a file imports, at any depth of the file."""
    roots: set[str] = set()
    for node in ast.walk(parsed(path.read_text())):
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
    for node in ast.walk(parsed(source)):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = from_base(node, package)
            found.add(base)
            found.update(f"{base}.{alias.name}" for alias in node.names)
    return found


def top_level(modules: set[str]) -> set[str]:
    return {m.split(".")[0] for m in modules}


CORE = sorted((ROOT / "raytpu" / "core").rglob("*.py"))
"""The core layer is its folder: what every layer reads and what ships to pods (raytpu/core/core_zip.py)."""

ROOMS = {"common": set(), "tpu": {"common"}, "specs": {"common", "tpu"}, "manifests": {"common", "tpu", "specs"}}
"""The rooms of raytpu/core/ and the rooms each may import (its ``__init__`` docstring says the same)."""
CORE_TOP = {"__init__", "core_zip"}
"""What sits in raytpu/core/ beside the rooms: the package marker and the core zip's builder (it reads no room)."""


def room_of(module: str) -> str | None:
    """The room of a ``raytpu.core.<room>...`` module, else None."""
    parts = module.split(".")
    return parts[2] if parts[:2] == ["raytpu", "core"] and len(parts) > 2 and parts[2] in ROOMS else None


def test_the_core_is_a_folder_that_holds_the_spec_layer() -> None:
    names = {p.stem for p in CORE}
    assert {"spec", "catalog", "plan", "kinds", "provisioning", "errors", "multislice", "names", "kuberay",
            "models"} <= names


def test_the_core_holds_rooms_only() -> None:
    """Every module of the core lives in a room (or is the core zip's builder); every room is a package."""
    top = {p.stem for p in (ROOT / "raytpu" / "core").glob("*.py")}
    rooms = {p.name for p in (ROOT / "raytpu" / "core").iterdir() if p.is_dir() and p.name != "__pycache__"}
    assert top == CORE_TOP and rooms == set(ROOMS), (sorted(top), sorted(rooms))
    assert all((ROOT / "raytpu" / "core" / room / "__init__.py").is_file() for room in ROOMS)


@pytest.mark.parametrize("path", [p for p in CORE if p.parent != ROOT / "raytpu" / "core"],
                         ids=lambda p: p.relative_to(ROOT).as_posix())
def test_a_room_imports_the_rooms_it_may(path: Path) -> None:
    """A room's ``__init__`` docstring names the rooms it may import: common imports none, tpu common, specs common
    and tpu, manifests the other three. Lazy imports count too."""
    room = path.relative_to(ROOT / "raytpu" / "core").parts[0]
    found = {r for m in imported_modules(path) if (r := room_of(m)) is not None} - {room}
    assert found <= ROOMS[room], f"{room} imports {sorted(found - ROOMS[room])}"


def test_the_core_zip_builder_reads_no_room() -> None:
    found = {m for m in imported_modules(ROOT / "raytpu" / "core" / "core_zip.py") if m.startswith("raytpu.")}
    assert not found, sorted(found)


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


CDK_CODE = sorted((ROOT / "stacks").glob("*.py")) + sorted((ROOT / "modules").rglob("*.py"))
CLUSTER_DATA = {"raytpu.cluster.outputs"}
"""What of the cluster package CDK code may read: the stack outputs' schema the cluster stack writes (it loads the
Kubernetes client only inside the functions that read a deployed stack's outputs)."""


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
    assert found <= {"__future__", "importlib", "io", "os", "zipfile", "pathlib", "raytpu"}, sorted(found)


TOP = {"__init__", "__main__", "cdktf_app"}
"""The modules at the top of raytpu/: the package marker and the entry points (``python -m raytpu``, the app
``cdktf.json`` runs); the ``raytpu`` console script is :func:`raytpu.cli.main`. All else lives in a package."""


def test_the_top_of_the_package_holds_packages_and_entry_points_only() -> None:
    assert {p.stem for p in (ROOT / "raytpu").glob("*.py")} == TOP


def module_of(path: Path) -> str:
    """The dotted name a shipped file imports as (``stacks/app.py`` is ``raytpu.stacks.app``)."""
    return module_name(path)


def from_base(node: ast.ImportFrom, package: Sequence[str]) -> str:
    """The module a ``from ... import`` reads from, a relative one resolved against ``package``."""
    if not node.level:
        return node.module or ""
    return ".".join([*package[:len(package) - node.level + 1], *([node.module] if node.module else [])])


def imported(node: ast.AST, package: Sequence[str], known: set[str]) -> set[str]:
    """What one statement imports (nothing unless it is an import); ``from a import b`` is ``a.b`` when that is a
    module of ``known``."""
    if isinstance(node, ast.Import):
        return {alias.name for alias in node.names}
    if not isinstance(node, ast.ImportFrom):
        return set()
    base = from_base(node, package)
    return {f"{base}.{a.name}" if f"{base}.{a.name}" in known else base for a in node.names}


def module_level_imports(source: str, package: list[str], known: set[str]) -> set[str]:
    """The modules of ``known`` that ``source`` imports when it is imported: every import outside a function body
    (``if TYPE_CHECKING:`` blocks and class bodies count); ``from a import b`` is ``a.b`` when that is a module."""
    found: set[str] = set()

    def visit(body: list[ast.stmt]) -> None:
        for node in body:
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                continue
            found.update(imported(node, package, known))
            for child in ast.iter_child_nodes(node):
                if isinstance(child, ast.ExceptHandler):
                    visit(child.body)
            for name in ("body", "orelse", "finalbody"):
                block = getattr(node, name, None)
                if isinstance(block, list) and block and isinstance(block[0], ast.stmt):
                    visit(block)

    visit(parsed(source).body)
    return found & known


def import_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected parts of more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for other in sorted(graph.get(node, ())):
            if other not in index:
                visit(other)
                low[node] = min(low[node], low[other])
            elif other in stack:
                low[node] = min(low[node], index[other])
        if low[node] == index[node]:
            part = [stack.pop()]
            while part[-1] != node:
                part.append(stack.pop())
            if len(part) > 1:
                found.append(sorted(part))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_no_import_cycle_in_the_package() -> None:
    """Issue 43: no module of ``raytpu`` imports, at module level, one that imports it back, even only for types (a
    rule that needs a spec's fields takes a protocol of them: ``raytpu.core.specs.serving.sampling.SamplingWork``)."""
    modules = {module_of(p): p for p in SHIPPED}
    graph = {}
    for name, path in modules.items():
        package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
        graph[name] = module_level_imports(path.read_text(), package, set(modules)) - {name}
    assert len(graph) > 100 and graph["raytpu.core.specs.spec"]
    assert not import_cycles(graph)


def test_the_cycle_check_sees_a_cycle() -> None:
    source = ("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from raytpu.core.specs import spec\n"
              "def f():\n    import raytpu.cli\n")
    known = {"raytpu.core.specs.spec", "raytpu.core.specs.runtime.data", "raytpu.cli"}
    assert module_level_imports(source, ["raytpu", "core", "specs"], known) == {"raytpu.core.specs.spec"}
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}, "e": {"e"}}
    assert import_cycles(graph) == [["a", "b", "c"]]


def all_imports(source: str, package: list[str], known: set[str]) -> set[str]:
    """The modules of ``known`` that ``source`` imports anywhere, inside functions too (what runs when the function
    does is an arrow all the same); ``from a import b`` is ``a.b`` when that is a module."""
    found: set[str] = set()
    for node in ast.walk(parsed(source)):
        found.update(imported(node, package, known))
    return found & known


@functools.cache
def import_graph() -> dict[str, set[str]]:
    """Every shipped module -> the shipped modules it imports at any depth (:func:`all_imports`); parsed once for the
    three tests that read it (0.6 s each)."""
    modules = {module_of(p): p for p in SHIPPED}
    graph = {}
    for name, path in modules.items():
        package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
        graph[name] = all_imports(path.read_text(), package, set(modules)) - {name}
    return graph


def test_no_import_cycle_at_any_depth() -> None:
    """Issue 50 item 4: no two modules import each other, even through imports inside functions (the kit's trainer
    and a team's imported each other so; what both use lives in ``workloads/support/slice_training.py``)."""
    graph = import_graph()
    assert len(graph) > 100 and graph["raytpu.workloads.train"]
    assert not import_cycles(graph)


@pytest.mark.parametrize("depth", [2, 3])
def test_no_import_cycle_between_packages(depth: int) -> None:
    """Issue 50 item 4: packages import one way too (``raytpu.cli`` -> ``raytpu.commands`` -> ``raytpu.console``;
    ``raytpu.cluster`` -> ``raytpu.images``), at depth 2 (``raytpu.cli``) and 3 (``raytpu.core.specs``)."""
    packages: dict[str, set[str]] = {}
    for name, imported in import_graph().items():
        own = ".".join(name.split(".")[:depth])
        kept = {".".join(m.split(".")[:depth]) for m in imported}
        packages.setdefault(own, set()).update(kept - {own})
    assert not import_cycles(packages)


def test_the_any_depth_finder_sees_imports_inside_functions() -> None:
    source = "def f():\n    from raytpu.cli import machine\n    import raytpu.core.specs.spec\n"
    known = {"raytpu.cli", "raytpu.cli.machine", "raytpu.core.specs.spec"}
    assert all_imports(source, ["raytpu", "local"], known) == {"raytpu.cli.machine", "raytpu.core.specs.spec"}


LIBRARY = [p for d in ("local", "cluster", "core", "runs", "sizing", "teamcode", "images", "config")
           for p in sorted((ROOT / "raytpu" / d).rglob("*.py"))]


@pytest.mark.parametrize("path", LIBRARY, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_library_code_never_imports_the_cli(path: Path) -> None:
    """Issue 43: the CLI (``raytpu.cli``, ``raytpu.commands``) prints what library code returns; no library module
    imports it."""
    found = {m for m in imported_modules(path) if m.split(".")[:2] in (["raytpu", "cli"], ["raytpu", "commands"],
                                                                       ["raytpu", "console"])}
    assert not found, sorted(found)


@pytest.mark.parametrize("path", [*sorted((ROOT / "raytpu" / "local").rglob("*.py")),
                                  *sorted((ROOT / "modules").rglob("*.py"))],
                         ids=lambda p: p.relative_to(ROOT).as_posix())
def test_the_emulated_slice_and_constructs_read_names_in_the_core(path: Path) -> None:
    """Issue 43: names and tables (run ids, the kinds' API paths) live in the core; the emulated slice and the
    constructs never import the API client's package."""
    found = {m for m in imported_modules(path) if m.split(".")[:2] == ["raytpu", "cluster"]}
    assert not found, sorted(found)


SIDES = [p for d in ("cluster", "local") for p in sorted((ROOT / "raytpu" / d).rglob("*.py"))]
"""The API clients' package and the emulated slice: library code that submits and follows runs."""
PRINTERS = ("raytpu.cli", "raytpu.commands", "raytpu.console")
"""What prints a run for the command: the CLI and its printer of a followed run."""


@pytest.mark.parametrize("path", SIDES, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_the_two_sides_never_import_the_printers(path: Path) -> None:
    """Issue 43 item 3: ``cluster/`` and ``local/`` return what the command prints and stream lines to the sinks it
    passes (``raytpu.runs.following.Streams``); they import neither the CLI
    nor its printer ``raytpu.console.followed_run``."""
    found = {m for m in imported_modules(path) if any(m == p or m.startswith(f"{p}.") for p in PRINTERS)}
    assert not found, sorted(found)


CONSOLE_WRITERS = {
    "raytpu/cluster/gke.py": "follow_jobs and wait_for_service print progress to stderr when a caller passes no "
                             "progress sink (raytpu smoke, raytpu runs)",
    "raytpu/cluster/runs.py": "cancel prints progress to stderr when a caller passes no progress sink",
    "raytpu/local/running/deploy.py": "deploy_serving's default progress and echo sinks write to stderr",
    "raytpu/local/demos/data_demo.py": "a program of its own (python -m raytpu.local.demos.data_demo, run by raytpu "
                                       "demo --data): its console is its output",
}
"""The modules of the two sides that still write to the console themselves, and why."""


def console_writes(source: str) -> list[int]:
    """The lines that call the builtin ``print`` or read ``sys.stdout``/``sys.stderr``."""
    return sorted({node.lineno for node in ast.walk(parsed(source))
                   if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "print")
                   or (isinstance(node, ast.Attribute) and node.attr in ("stdout", "stderr")
                       and isinstance(node.value, ast.Name) and node.value.id == "sys")})


@pytest.mark.parametrize("path", SIDES, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_the_two_sides_print_nothing_themselves(path: Path) -> None:
    """Issue 43 item 3: library code hands its lines to a sink the command passes; only
    :data:`CONSOLE_WRITERS` still write to the console, each for its reason (and each still does)."""
    lines = console_writes(path.read_text())
    if path.relative_to(ROOT).as_posix() in CONSOLE_WRITERS:
        assert lines, "no longer writes to the console: remove it from CONSOLE_WRITERS"
    else:
        assert not lines, f"prints on lines {lines}; stream through a sink the command passes"


def test_the_console_finder_sees_print_and_the_std_streams() -> None:
    source = ("import sys\nprint('a')\ndef f():\n    sys.stderr.write('b')\nout = sys.stdout\n"
              "log = lambda s: s\nlog('c')\n")
    assert console_writes(source) == [2, 4, 5]
    assert set(CONSOLE_WRITERS) <= {p.relative_to(ROOT).as_posix() for p in SIDES}


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
    strings = {node.value for node in ast.walk(parsed(path.read_text()))
               if isinstance(node, ast.Constant) and isinstance(node.value, str)}
    found = {lit for lit in tpu_literals() for s in strings if re.search(rf"(?<![\w-]){re.escape(lit)}(?![\w-])", s)}
    assert not found, f"{path.name} spells catalog facts: {sorted(found)}"
