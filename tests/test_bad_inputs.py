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

OPEN = {
    # Issue 28 items still open (their fix was cut off before it landed): strict xfail, so a fix turns them red here
    # until they are taken out of this list. Nothing else in the corpus may fail.
    "28.1 synth --out": ("synth-out-nonempty-folder", "synth-out-a-file", "synth-out-unwritable"),
    "28.3 non-UTF-8 config": ("config-non-utf8", "config-utf16"),
    "28.5 bounded excerpts and size limits": ("project-1mb", "config-alias-bomb", "config-134k-slices"),
    "28.7 duplicate YAML keys": ("duplicate-key",),
    "28.8 strict YAML types, :latest": ("count-string", "count-float", "count-bool", "deletion-protection-str",
                                        "image-latest", "smoke-image-latest", "smoke-image-no-tag"),
    "28 name rules (machine type, reservation)": ("head-pool-machine", "reservation-bad-name"),
}
OPEN_CASES = {case_id: item for item, ids in OPEN.items() for case_id in ids}


def _param(case: Case) -> object:
    marks = [pytest.mark.xfail(strict=True, reason=f"open: issue {OPEN_CASES[case.id]}")] if case.id in OPEN_CASES \
        else []
    return pytest.param(case, id=case.id, marks=marks)


def test_the_corpus_is_wide_and_its_ids_unique() -> None:
    assert len(CASES) >= 80
    assert len({c.id for c in CASES}) == len(CASES)
    commands = {c.argv[0] for c in CASES}
    assert {"catalog", "describe", "validate", "synth", "plan", "images", "submit", "smoke", "local",
            "demo"} <= commands


def test_every_open_case_is_in_the_corpus() -> None:
    assert set(OPEN_CASES) <= {c.id for c in CASES}


@pytest.mark.parametrize("case", [_param(c) for c in CASES])
def test_a_bad_input_is_refused_naming_its_field_and_changes_nothing(case: Case, tmp_path: Path) -> None:
    outcome = (run_case if case.process else run_in_process)(case, tmp_path)
    problems = outcome.problems(case)
    assert not problems, f"{case.id} ({' '.join(case.argv)[:200]}): {'; '.join(problems)}\n{outcome.stderr[:2000]}"
