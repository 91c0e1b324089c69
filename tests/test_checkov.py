"""checkov on every stack the synth tiers synthesize: 0 failed checks except the documented skips.

Scanned: the example configs (Standard and Autopilot), the every-provisioning-mode config, the outside-app
example, and both examples with slices and workloads added through ``ClusterStack.add_slice`` /
``WorkloadsStack.add_workload``. checkov runs once over all of them (one start-up); each failure is then
judged against ``checkov-skips.yaml`` for the cluster mode of its stack. Skips carry a reason each (checkov
cannot read inline skips in cdk.tf.json), optionally limited to one cluster mode and to the resources whose
fields match its ``where`` (dotted path: value), and every skip must be needed by some scanned stack of its
modes (no stale skips). checkov is located at ``$RAYTPU_CHECKOV`` or
``.venv-checkov/bin/checkov``.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import checkov_skips
import pytest
from _synth import (
    EVERY_MODE,
    EXAMPLES,
    NOTICE_CONFIG,
    checkov_bin,
    synth_added_slices,
    synth_config,
    synth_platform_app,
    synth_text_out,
)

pytestmark = [pytest.mark.synth, pytest.mark.timeout(600)]

MODES = checkov_skips.MODES

SOURCES: dict[str, Callable[[], tuple[Path, dict[str, Any]]]] = {
    "example-standard": lambda: synth_config(str(EXAMPLES["standard"])),
    "example-autopilot": lambda: synth_config(str(EXAMPLES["autopilot"])),
    "every-mode": lambda: synth_text_out(EVERY_MODE),
    "platform-app": synth_platform_app,
    "added-slices": synth_added_slices,
    "notice": lambda: synth_text_out(NOTICE_CONFIG),
}
# (source, stack id, cluster mode): every stack of every source above.
STACKS = [
    ("example-standard", "ray-tpu-cluster", "standard"), ("example-standard", "ray-tpu-workloads", "standard"),
    ("example-autopilot", "ray-tpu-auto-cluster", "autopilot"),
    ("example-autopilot", "ray-tpu-auto-workloads", "autopilot"),
    ("every-mode", "modes-cluster", "standard"), ("every-mode", "modes-workloads", "standard"),
    ("platform-app", "acme-cluster", "standard"), ("platform-app", "acme-workloads", "standard"),
    ("added-slices", "std-cluster", "standard"), ("added-slices", "std-workloads", "standard"),
    ("added-slices", "auto-cluster", "autopilot"), ("added-slices", "auto-workloads", "autopilot"),
    ("notice", "ray-tpu-cluster", "standard"), ("notice", "ray-tpu-workloads", "standard"),
]


def skip_entries() -> list[dict[str, Any]]:
    return checkov_skips.entries("skips")


def resource_of(stack: dict[str, Any], logical_id: str) -> dict[str, Any]:
    """A resource of a synthesized stack by its logical id (checkov's ``resource.<id>``)."""
    found = [r[logical_id] for r in stack.get("resource", {}).values() if logical_id in r]
    assert len(found) == 1, logical_id
    return found[0]


skipped = checkov_skips.skipped


def unskipped(failures: list[str], mode: str, stack: dict[str, Any]) -> list[str]:
    """The failures (``<check> resource.<id>``) no skip for ``mode`` covers."""
    left = []
    for failure in failures:
        check, address = failure.split()
        resource = resource_of(stack, address.split(".", 1)[1])
        if not any(skipped(e, check, resource) for e in checkov_skips.for_mode("skips", mode)):
            left.append(failure)
    return left


def test_every_skip_has_a_reason_and_a_known_mode() -> None:
    checkov_skips.check_entries("skips")


def test_the_scan_covers_every_synthesized_stack() -> None:
    for source, build in SOURCES.items():
        assert sorted(build()[1]) == sorted(sid for src, sid, _ in STACKS if src == source), source


def _stack_file(source: str, sid: str) -> Path:
    return (SOURCES[source]()[0] / "stacks" / sid / "cdk.tf.json").resolve()


@pytest.fixture(scope="module")
def scan() -> dict[Path, dict[str, list[str]]]:
    """checkov over every stack at once, no skips: resolved stack file -> {"passed": [...], "failed": [...],
    "parsing_errors": [...]} of ``<check id> <resource>``."""
    checkov = checkov_bin()
    if checkov is None:
        pytest.fail("checkov not found: set RAYTPU_CHECKOV or install it in .venv-checkov")
    files = [_stack_file(source, sid) for source, sid, _ in STACKS]
    args = [str(checkov), "--framework", "terraform_json", "-o", "json", "--compact", "--skip-download"]
    for path in files:
        args += ["-f", str(path)]
    result = subprocess.run(args, capture_output=True, text=True, timeout=500, cwd="/")
    assert result.stdout.strip(), result.stderr[-2000:]
    report = json.loads(result.stdout)
    found: dict[Path, dict[str, list[str]]] = {f: {"passed": [], "failed": [], "parsing_errors": []} for f in files}
    for item in report if isinstance(report, list) else [report]:
        if "results" not in item:  # an empty report ("no resources") is a plain dict with zero counts
            continue
        for key in ("passed", "failed"):
            for check in item["results"].get(f"{key}_checks", []):
                found[Path(check["file_abs_path"]).resolve()][key].append(f"{check['check_id']} {check['resource']}")
        for path in item["results"].get("parsing_errors", []):
            found[Path(path).resolve()]["parsing_errors"].append(str(path))
    return found


@pytest.mark.parametrize(("source", "sid", "mode"), STACKS, ids=[f"{s}/{sid}" for s, sid, _ in STACKS])
def test_checkov_passes_every_synthesized_stack(scan: dict[Path, dict[str, list[str]]], source: str, sid: str,
                                                mode: str) -> None:
    result = scan[_stack_file(source, sid)]
    failed = unskipped(result["failed"], mode, SOURCES[source]()[1][sid])
    print(f"checkov {source}/{sid} ({mode}): {len(result['passed'])} passed, {len(failed)} failed, "
          f"{len(result['failed']) - len(failed)} skipped")
    assert result["parsing_errors"] == []
    assert failed == []
    assert len(result["passed"]) > 0


def test_every_skip_is_needed_by_a_stack_of_its_modes(scan: dict[Path, dict[str, list[str]]]) -> None:
    """A skip no scanned stack trips is stale: remove it (or narrow its modes)."""
    for entry in skip_entries():
        for mode in entry.get("modes", MODES):
            tripped = [sid for source, sid, m in STACKS if m == mode
                       for f in scan[_stack_file(source, sid)]["failed"]
                       if skipped(entry, f.split()[0], resource_of(SOURCES[source]()[1][sid],
                                                                  f.split()[1].split(".", 1)[1]))]
            assert tripped, f"{entry['check']} is skipped for {mode} stacks but none of them fails it"


def test_a_where_limited_skip_leaves_other_resources_checked() -> None:
    entry = {"check": "CKV_GCP_9", "where": {"node_config.flex_start": True}}
    assert skipped(entry, "CKV_GCP_9", {"node_config": {"flex_start": True}})
    assert not skipped(entry, "CKV_GCP_9", {"node_config": {"spot": True}})
    assert not skipped(entry, "CKV_GCP_10", {"node_config": {"flex_start": True}})
