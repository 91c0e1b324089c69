"""Issue 39.7: README.md works as written on a fresh clone, and so do the guides it links (issue 50: docs/guides/) and
the team example's README (issue 68.6: its walk from training to serving).

Every command of their ```bash and ```console blocks either runs here, in a copy of the checkout's files (no
``raytpu.yaml``, no records, no reports: what a fresh clone has), and exits 0 with the output a ```console block
shows; or matches one of :data:`EXCEPTIONS`, whose reason says why it cannot run in the unit tier, and then its
arguments must still parse (a renamed flag or command fails here).
"""

from __future__ import annotations

import itertools
import os
import re
import shlex
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
from kit_layout import checkout_copy

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
EXAMPLE_README = ROOT / "examples" / "team_project" / "README.md"
DOCS = (README, *sorted((ROOT / "docs" / "guides").glob("*.md")), EXAMPLE_README)
"""The README, the guides its content moved to (issue 50) and the team example's README it links (issue 68.6): each
one's commands run as the README's did. The example's need an emulated slice: tests/test_readme_small_try.py runs
them, as written, in the slice tier; here their arguments parse."""
RAYTPU = re.compile(r"^(?:\S*/)?raytpu(?:\s|$)")

EXCEPTIONS: dict[str, str] = {
    "make run": "starts an emulated slice for minutes; the slice tier runs the demo (tests/test_demo.py)",
    "make data": "starts emulated slices and vLLM; the serve and slice tiers run its parts (test_batch.py, "
                 "test_train_data.py)",
    "make serve": "starts an emulated slice and vLLM; the serve tier runs it (tests/test_serve_demo.py)",
    "make test": "is the suite this test belongs to",
    "make setup": "installs the environments the tests run in (CI's first step)",
    "npx cdktf deploy": "deploys to a GCP project",
    "raytpu images build": "calls Cloud Build (tests/test_images_build.py, against a loopback server)",
    "raytpu submit train --stack ray-tpu-cluster --outputs outputs.json": "needs a deployed stack's outputs",
    "raytpu submit serve --stack": "needs a deployed stack (tests/test_submit.py, against a loopback API server)",
    "raytpu smoke --stack": "needs a deployed stack (tests/test_submit.py, against a loopback API server)",
    "raytpu doctor --stack": "needs a deployed stack (tests/test_doctor.py, against a loopback API server)",
    "raytpu submit train --local": "needs an emulated slice (`raytpu local up`; tests/test_local.py)",
    "raytpu submit pretrain --config examples/team_project/raytpu.yaml --local": "needs an emulated slice (`raytpu "
        "local up`; tests/test_readme_small_try.py runs the example README's as written, in the slice tier)",
    "raytpu local up --config examples/team_project/raytpu.yaml": "starts the example's emulated slice "
        "(tests/test_readme_small_try.py runs the example README's walk as written, slice tier)",
    "raytpu local serve --config examples/team_project/raytpu.yaml --workload scorer": "deploys the example's app "
        "onto the emulated slice it trained on (tests/test_readme_small_try.py, slice tier)",
    "echo my-key > .raytpu/key": "the example README's serve walk, after `raytpu local up` made .raytpu/ "
                                 "(tests/test_readme_small_try.py, slice tier)",
    'curl -s -H "Authorization: Bearer my-key"': "asks the example's app `raytpu local serve` deployed on an emulated "
                                                 "slice (tests/test_readme_small_try.py, slice tier)",
    "raytpu submit pretrain --config examples/team_project/raytpu.yaml --stack ray-tpu-cluster --wait":
        "needs a deployed stack (tests/test_submit.py, against a loopback API server)",
    "raytpu submit label-reviews --local": "needs an emulated slice and vLLM's CPU build (tests/test_batch.py)",
    "raytpu local": "starts, reads or stops an emulated slice (the slice tier: tests/test_local.py, test_preempt.py)",
    "raytpu runs": "needs a deployed stack or an emulated slice with runs (tests/test_runs.py against a loopback API "
                   "server; tests/test_runs_local.py on the emulated slice)",
    "raytpu report reports/": "needs a saved report (tests/test_report_html.py renders every kind)",
}
"""Commands (by prefix, after ``.venv/bin/`` or ``.venv-serve/bin/``) that do not run here, and why."""
SHELL_OPERATORS = frozenset({"|", "||", "&&", ";", ">", ">>", "<", "2>", "2>&1"})


@dataclass(frozen=True)
class Command:
    block: int
    line: int
    text: str
    shown: tuple[str, ...] = ()
    """A ```console block's output lines after the command (``...`` elides)."""
    source: str = "README.md"
    """The file the command is written in, relative to the checkout."""


def blocks(text: str) -> list[tuple[int, str, list[tuple[int, str]]]]:
    """(first line, language, [(line number, line)]) of every fenced ```bash / ```console block."""
    found: list[tuple[int, str, list[tuple[int, str]]]] = []
    current: list[tuple[int, str]] | None = None
    for number, line in enumerate(text.splitlines(), 1):
        if current is None and (match := re.match(r"^```(bash|console)\s*$", line)):
            current = []
            found.append((number, match[1], current))
        elif current is not None and line.startswith("```"):
            current = None
        elif current is not None:
            current.append((number, line))
    return found


def commands(text: str, source: str = "README.md") -> list[Command]:
    """The commands of README (or guide) ``text``: a bash block's every non-comment line; a console block's ``$``
    lines, each with the output shown under it."""
    found: list[Command] = []
    for start, language, lines in blocks(text):
        if language == "bash":
            for number, line in lines:
                command = re.sub(r"\s+#.*$", "", line).strip()
                if command and not command.startswith("#"):
                    found.append(Command(start, number, command, source=source))
            continue
        for index, (number, line) in enumerate(lines):
            if line.startswith("$ "):
                shown = []
                for _, out in lines[index + 1:]:
                    if out.startswith("$ "):
                        break
                    shown.append(out)
                found.append(Command(start, number, line[2:].strip(), tuple(shown), source))
    return found


def bare(command: str) -> str:
    """The command as :data:`EXCEPTIONS` names it: ``.venv/bin/raytpu x`` -> ``raytpu x``."""
    return re.sub(r"^\S*/(raytpu\b)", r"\1", command)


def exception(command: str) -> str | None:
    return next((why for prefix, why in EXCEPTIONS.items() if bare(command).startswith(prefix)), None)


def matches(shown: tuple[str, ...], actual: list[str]) -> bool:
    """Whether ``actual`` output reads as ``shown``: a line ``...`` stands for any lines, ``...`` inside a line for
    any text; every other character as printed (trailing spaces aside)."""
    patterns = [None if s.strip() == "..." else
                re.compile(".*".join(re.escape(p) for p in s.rstrip().split("...")) + r"\Z") for s in shown]

    def walk(i: int, j: int) -> bool:
        if i == len(patterns):
            return j == len(actual)
        pattern = patterns[i]
        if pattern is None:
            return any(walk(i + 1, k) for k in range(j, len(actual) + 1))
        return j < len(actual) and bool(pattern.match(actual[j].rstrip())) and walk(i + 1, j + 1)

    return walk(0, 0)


def fresh_clone(target: Path) -> Path:
    """A copy of the checkout's files as git sees them (tracked, or new and not ignored), the environment linked."""
    checkout_copy(target)
    (target / ".venv").symlink_to(Path(sys.executable).parents[1])
    return target


README_COMMANDS = [c for doc in DOCS
                   for c in commands(doc.read_text(encoding="utf-8"), doc.relative_to(ROOT).as_posix())]


def test_the_readme_and_its_guides_are_read() -> None:
    """The README links every guide whose commands this test runs (a guide it does not read would go untested)."""
    assert len(DOCS) >= 9, DOCS
    readme = README.read_text(encoding="utf-8")
    assert all(f"({doc.relative_to(ROOT).as_posix()})" in readme for doc in DOCS[1:]), DOCS


def test_the_readme_has_commands_of_both_kinds() -> None:
    runnable = [c for c in README_COMMANDS if exception(c.text) is None]
    assert len(README_COMMANDS) >= 25 and len(runnable) >= 6, [c.text for c in runnable]


@pytest.mark.parametrize("command", [pytest.param(c, id=f"{c.source}-line-{c.line}") for c in README_COMMANDS
                                     if exception(c.text) and RAYTPU.match(bare(c.text))])
def test_a_listed_exception_still_parses(command: Command) -> None:
    """A command that cannot run here names a command and flags that exist (``[--x]`` is an optional flag; a pipe or
    a redirection ends its arguments)."""
    from raytpu.cli import build_parser

    words = shlex.split(bare(command.text).replace("[", "").replace("]", ""), comments=True)
    argv = list(itertools.takewhile(lambda word: word not in SHELL_OPERATORS, words))[1:]
    _, unknown = build_parser().parse_known_args(argv)
    assert not unknown, f"{command.source} line {command.line}: {command.text!r}: unknown {unknown}"


@pytest.mark.parametrize(("source", "start"), [
    pytest.param(source, start, id=f"{source}-line-{start}")
    for source, start in sorted({(c.source, c.block) for c in README_COMMANDS if exception(c.text) is None})])
def test_a_readme_block_runs_on_a_fresh_clone(source: str, start: int, tmp_path: Path) -> None:
    """Each block's runnable commands, in order, in one fresh copy: each exits 0, prints what its file shows."""
    clone = fresh_clone(tmp_path / "clone")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("RAYTPU_", "GOOGLE_", "CLOUDSDK_"))}
    env.update(PATH=f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}", RAY_USAGE_STATS_ENABLED="0",
               CHECKPOINT_DISABLE="1", CLOUDSDK_CONFIG=str(tmp_path / "gcloud"), NO_GCE_CHECK="True",
               GOOGLE_APPLICATION_CREDENTIALS=str(tmp_path / "none.json"), PYTHONPATH=str(ROOT))
    for command in (c for c in README_COMMANDS if (c.source, c.block) == (source, start) and exception(c.text) is None):
        proc = subprocess.run(["bash", "-c", command.text], cwd=clone, env=env, capture_output=True, text=True,
                              timeout=120, check=False)
        where = f"{command.source} line {command.line}: {command.text!r}"
        assert proc.returncode == 0, f"{where} exited {proc.returncode}: {proc.stderr[-2000:]}"
        assert "Traceback" not in proc.stderr, f"{where}: {proc.stderr[-2000:]}"
        if command.shown:
            assert matches(command.shown, proc.stdout.splitlines()), f"{where} printed:\n{proc.stdout[:3000]}"


@pytest.mark.parametrize(("shown", "actual", "ok"), [
    (("a", "...", "d"), ["a", "b", "c", "d"], True),
    (("a", "..."), ["a"], True),
    (("a b ... e",), ["a b c d e"], True),
    (("a", "c"), ["a", "b", "c"], False),
    (("a",), ["a", "b"], False),
    (("a", "...", "x"), ["a", "b"], False),
])
def test_shown_output_is_matched_with_elisions(shown: tuple[str, ...], actual: list[str], ok: bool) -> None:
    assert matches(shown, actual) is ok
