"""checkov on every synthesized stack of the example configs (Standard and Autopilot): 0 failed checks.

Skips live in ``checkov-skips.yaml`` with a reason each (checkov cannot read inline skips in
cdk.tf.json), optionally limited to one cluster mode. checkov is located at ``$RAYTPU_CHECKOV`` or
``.venv-checkov/bin/checkov``.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from _synth import EXAMPLES, REPO, checkov_bin, synth_config

pytestmark = [pytest.mark.synth, pytest.mark.timeout(600)]

SKIPS_FILE = REPO / "checkov-skips.yaml"


def skips_for(mode: str) -> list[str]:
    """Check ids skipped for stacks of a cluster mode."""
    entries = yaml.safe_load(SKIPS_FILE.read_text())["skips"]
    return [e["check"] for e in entries if mode in e.get("modes", ["standard", "autopilot"])]


def test_every_skip_has_a_reason_and_a_known_mode() -> None:
    for entry in yaml.safe_load(SKIPS_FILE.read_text())["skips"]:
        assert entry["check"].startswith(("CKV_", "CKV2_")), entry
        assert len(entry.get("reason", "")) > 40, f"{entry['check']}: give a real reason"
        assert set(entry.get("modes", ["standard"])) <= {"standard", "autopilot"}


def run_checkov(stack_file: Path, skips: list[str]) -> dict[str, Any]:
    checkov = checkov_bin()
    if checkov is None:
        pytest.fail("checkov not found: set RAYTPU_CHECKOV or install it in .venv-checkov")
    args = [str(checkov), "-f", str(stack_file), "--framework", "terraform_json", "-o", "json", "--quiet",
            "--compact", "--skip-download"]
    if skips:
        args += ["--skip-check", ",".join(skips)]
    result = subprocess.run(args, capture_output=True, text=True, timeout=300, cwd=stack_file.parent)
    assert result.stdout.strip(), result.stderr[-2000:]
    report = json.loads(result.stdout)
    reports = report if isinstance(report, list) else [report]
    summary: dict[str, Any] = {"passed": 0, "failed": 0, "skipped": 0, "parsing_errors": 0, "failures": []}
    for item in reports:
        if "summary" not in item:  # an empty report ("no resources") is a plain dict with zero counts
            continue
        for key in ("passed", "failed", "skipped", "parsing_errors"):
            summary[key] += item["summary"][key]
        summary["failures"] += [f"{c['check_id']} {c['resource']}" for c in item["results"]["failed_checks"]]
    return summary


CASES = [(mode, kind) for mode in EXAMPLES for kind in ("cluster", "workloads")]


@pytest.mark.parametrize(("mode", "kind"), CASES, ids=[f"{m}-{k}" for m, k in CASES])
def test_checkov_passes_every_example_stack(mode: str, kind: str) -> None:
    outdir, stacks = synth_config(str(EXAMPLES[mode]))
    sid = next(s for s in stacks if s.endswith(f"-{kind}"))
    summary = run_checkov(outdir / "stacks" / sid / "cdk.tf.json", skips_for(mode))
    print(f"checkov {mode}/{sid}: {summary['passed']} passed, {summary['failed']} failed, "
          f"{summary['skipped']} skipped")
    assert summary["parsing_errors"] == 0
    assert summary["failed"] == 0, summary["failures"]
    assert summary["passed"] > 0
