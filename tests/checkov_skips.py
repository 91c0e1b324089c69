"""``checkov-skips.yaml``: the checkov checks the kit does not pass, each with its reason and its scope.

Two sections: ``skips`` for the synthesized Terraform stacks (``tests/test_checkov.py``) and ``kubernetes`` for the
pods and NetworkPolicies of every KubeRay object (``tests/test_checkov_pods.py``). An entry's ``modes`` limits it to
one cluster mode (standard | autopilot; default both); its ``where`` (dotted path: value; a number indexes a list)
to the resources holding those values.
"""

from __future__ import annotations

from typing import Any

import yaml
from _synth import REPO

SKIPS_FILE = REPO / "checkov-skips.yaml"
MODES = ("standard", "autopilot")


def entries(section: str) -> list[dict[str, Any]]:
    """The entries of one section."""
    return list(yaml.safe_load(SKIPS_FILE.read_text())[section])


def for_mode(section: str, mode: str) -> list[dict[str, Any]]:
    """The entries of ``section`` that apply to stacks or pods of a cluster mode."""
    return [e for e in entries(section) if mode in e.get("modes", list(MODES))]


def get(node: Any, path: str) -> Any:
    """The value at a dotted path (``spec.containers.0.name``), or None."""
    for part in path.split("."):
        if isinstance(node, list) and part.isdigit():
            node = node[int(part)] if int(part) < len(node) else None
        else:
            node = node.get(part) if isinstance(node, dict) else None
    return node


def skipped(entry: dict[str, Any], check: str, resource: dict[str, Any]) -> bool:
    """Whether ``entry`` covers failing ``check`` on ``resource``: same check, and every ``where`` path of the
    entry has its value in the resource (a skip can be limited to the resources it is about)."""
    return entry["check"] == check and all(get(resource, k) == v for k, v in entry.get("where", {}).items())


def check_entries(section: str) -> None:
    """Every entry names one check once, gives a real reason, known modes, and no unknown keys."""
    checks = [e["check"] for e in entries(section)]
    assert len(checks) == len(set(checks)), "one entry per check"
    for entry in entries(section):
        assert entry["check"].startswith(("CKV_", "CKV2_")), entry
        assert len(entry.get("reason", "")) > 40, f"{entry['check']}: give a real reason"
        assert set(entry.get("modes", MODES)) <= set(MODES)
        assert set(entry) <= {"check", "reason", "modes", "where"}, entry
        assert isinstance(entry.get("where", {}), dict), entry
