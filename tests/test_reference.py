"""Issue 50 item 2: the config and CLI references are generated (``python -m raytpu.tools.gen_reference``), never
written by hand; a change to a spec dataclass, the workload-field table or a command's options without regenerating
fails here."""

from __future__ import annotations

import pytest

from raytpu.tools import gen_reference

pytestmark = pytest.mark.unit


@pytest.mark.parametrize("path", sorted(gen_reference.generated()), ids=lambda p: p.as_posix())
def test_the_generated_reference_is_current(path) -> None:  # type: ignore[no-untyped-def]
    text = gen_reference.generated()[path]
    assert (gen_reference.ROOT / path).read_text() == text, \
        f"{path} is stale: run python -m raytpu.tools.gen_reference"


def test_the_config_reference_names_every_workload_field_and_kind() -> None:
    from raytpu.core.specs import workload_fields
    from raytpu.core.specs.kinds import KINDS

    text = gen_reference.config_reference()
    assert all(f"| `{name}` |" in text for name in workload_fields.FIELDS)
    assert all(f"| `{name}` |" in text for name in KINDS)


def test_the_cli_reference_names_every_command() -> None:
    from raytpu.cli import command_names

    text = gen_reference.cli_reference()
    assert all(f"## `raytpu {name}`" in text for name in command_names())


def test_the_check_fails_on_a_stale_file(tmp_path, monkeypatch, capsys) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setattr(gen_reference, "ROOT", tmp_path)
    assert gen_reference.main(["--check"]) == 1
    assert "stale: docs/reference/config.md, docs/reference/cli.md" in capsys.readouterr().err
    assert gen_reference.main([]) == 0 and gen_reference.main(["--check"]) == 0
