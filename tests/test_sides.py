"""Issue 70, "two sides, one interface": ``cluster/`` and ``local/`` each implement :class:`raytpu.runs.side.Side`,
each command chooses its side once, and ``submit NAME --local`` deploys a serving workload (the kit's LLM app or a
team's ``serve_app``) as ``local serve --workload NAME`` does, which stays as its alias. Argument and dispatch level
only: the deploy itself is stubbed (the slice and serve tiers run it: tests/test_serve_app_slice.py,
tests/test_team_example_serve.py, tests/test_serve.py)."""

from __future__ import annotations

import ast
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from test_named_right import app_config  # the example plus a team's Serve app, beside its code

from raytpu.cli import main
from raytpu.cluster.side import ClusterSide
from raytpu.config import parse
from raytpu.local.running.side import SERVE_TIMEOUT_S, LocalSide
from raytpu.runs.side import Side

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[1]
COMMANDS = ROOT / "raytpu" / "commands"
MAX_COMMAND_LINES = 250


def test_both_sides_implement_the_one_interface() -> None:
    """Every member the protocol declares, each side has (mypy checks the signatures where a side is used as one)."""
    declared = {name for name in vars(Side) if not name.startswith("_")} | set(Side.__annotations__)
    for side in (ClusterSide("s"), LocalSide()):
        assert not {name for name in declared if not hasattr(side, name)}, type(side).__name__
    chosen: list[Side] = [ClusterSide("s"), LocalSide()]  # mypy: both are a Side
    assert [s.name for s in chosen] == ["cluster", "local"]


@pytest.mark.parametrize("name", ["submit.py", "runs.py"])
def test_a_command_tests_local_once(name: str) -> None:
    """The command chooses its side once (``side_for(args, args.local, ...)``) and speaks the Side from then on."""
    tree = ast.parse((COMMANDS / name).read_text())
    uses = [node.lineno for node in ast.walk(tree) if isinstance(node, ast.Attribute) and node.attr == "local"]
    assert len(uses) == 1, f"{name} reads .local on lines {uses}"


@pytest.mark.parametrize("path", sorted(COMMANDS.glob("*.py")), ids=lambda p: p.name)
def test_no_command_is_over_250_lines(path: Path) -> None:
    """A command is an argparse adapter; what grows past that belongs in a library module."""
    count = len(path.read_text().splitlines())
    assert count <= MAX_COMMAND_LINES, f"{path.name}: {count} lines"


@pytest.fixture
def deployed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, list[dict[str, Any]]]:
    """A config, an emulated serve slice that is only recorded (no process), and every deploy asked of it."""
    config = app_config(tmp_path)
    monkeypatch.chdir(tmp_path)
    serve_slice = next(w.slice for w in parse(config.read_text(), base=tmp_path).workloads if w.name == "serve")
    cluster = SimpleNamespace(slice_plan=serve_slice.plan, slice_spec=serve_slice)
    monkeypatch.setattr(LocalSide, "cluster", lambda self: cluster)
    monkeypatch.setattr("raytpu.commands.local._cluster", lambda args: cluster)
    calls: list[dict[str, Any]] = []

    def deploy(self: LocalSide, work: Any, **given: Any) -> dict[str, str]:
        calls.append({"work": work, **{k: v for k, v in given.items() if k != "streams"}})
        given["streams"].out("endpoint: http://127.0.0.1:8000/")
        return {"endpoint": "http://127.0.0.1:8000/"}

    monkeypatch.setattr(LocalSide, "deploy", deploy)
    return config, calls


@pytest.mark.parametrize("name", ["serve", "app"])
def test_submit_local_deploys_a_serving_workload_as_local_serve_does(
        deployed: tuple[Path, list[dict[str, Any]]], capsys: pytest.CaptureFixture[str], name: str) -> None:
    config, calls = deployed
    assert main(["submit", name, "--local", "--config", str(config)]) == 0
    assert "endpoint: http://127.0.0.1:8000/" in capsys.readouterr().out
    assert main(["local", "serve", "--workload", name, "--config", str(config)]) == 0
    by_submit, by_alias = calls
    assert by_submit["work"] == by_alias["work"] and by_submit["work"].name == name
    assert by_submit["work"].image is None and by_submit["work"].slices is None  # moved onto the emulated slice
    assert by_submit["timeout_s"] == by_alias["timeout_s"] == SERVE_TIMEOUT_S
    assert by_submit["api_key_file"] is by_alias["api_key_file"] is None
    if name == "app":  # a team app's fields are named where the config has them, both ways
        assert by_submit["code"].field == by_alias["code"].field == "workloads[3]"
        assert by_submit["code"].files == by_alias["code"].files  # the same folder, read once by each command


def test_submit_local_maps_the_serve_flags(deployed: tuple[Path, list[dict[str, Any]]], tmp_path: Path) -> None:
    config, calls = deployed
    key = tmp_path / "key"
    key.write_text("k")
    argv = ["submit", "serve", "--local", "--config", str(config), "--timeout-s", "99", "--api-key-file", str(key)]
    assert main(argv) == 0
    assert calls[0]["timeout_s"] == 99 and calls[0]["api_key_file"] == str(key)


@pytest.mark.parametrize(("argv", "said"), [
    (["submit", "serve", "--stack", "s", "--api-key-file", "k"],
     "error: --api-key-file: is for a serving workload deployed on the emulated slice; valid: --api-key-file with "
     "--local"),
    (["submit", "train", "--local", "--api-key-file", "k"], "error: --api-key-file: is for a serving workload; train"),
    (["submit", "serve", "--local", "--report", "r.json"], "error: --report: 'r.json' is not allowed for serving "
                                                           "workload serve with --local"),
    (["submit", "serve", "--local", "--overwrite"], "error: --overwrite: is for a batch workload; serve is a serve "
                                                    "workload"),
])
def test_submit_local_refuses_a_flag_of_another_workload(
        deployed: tuple[Path, list[dict[str, Any]]], capsys: pytest.CaptureFixture[str], argv: list[str],
        said: str) -> None:
    config, calls = deployed
    assert main([*argv, "--config", str(config)]) == 2
    assert capsys.readouterr().err.startswith(said)
    assert not calls
