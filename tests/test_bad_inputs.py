"""Issue 28: every bad input of tests/bad_inputs.py's corpus exits 2 (or its documented code) with one
``error: <field>: ...; valid: ...`` line naming the field, no traceback, under 4 KiB of stderr, nothing of the
user's changed, in under 10 s (docs/DESIGN.md, "CLI contract").

One test per case. Most run in this process (``raytpu.cli.main``: a Python start per case would make the file take
minutes on two cores); a case that may hang, reach the network or load CDK Terrain or matplotlib runs as
``python -m raytpu`` with a 10 s limit (``Case.process``). ``python -m tests.bad_inputs --table`` runs every case
as a process and prints the table of the issue's closing note.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from bad_inputs import CASES, Case, run_case, run_in_process

pytestmark = pytest.mark.unit

def test_the_corpus_is_wide_and_its_ids_unique() -> None:
    assert len(CASES) >= 80
    assert len({c.id for c in CASES}) == len(CASES)
    commands = {c.argv[0] for c in CASES}
    assert {"catalog", "describe", "validate", "synth", "plan", "images", "submit", "smoke", "local",
            "demo"} <= commands


@pytest.mark.parametrize("case", [pytest.param(c, id=c.id) for c in CASES])
def test_a_bad_input_is_refused_naming_its_field_and_changes_nothing(case: Case, tmp_path: Path) -> None:
    outcome = (run_case if case.process else run_in_process)(case, tmp_path)
    problems = outcome.problems(case)
    assert not problems, f"{case.id} ({' '.join(case.argv)[:200]}): {'; '.join(problems)}\n{outcome.stderr[:2000]}"
