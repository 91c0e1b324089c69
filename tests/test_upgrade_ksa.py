"""An upgrade of a cluster deployed before the per-cluster KSA (``ray`` -> ``<cluster>-ray``), judged on the synthesized
plan against the stack that version synthesized (tests/upgrade/pre_ksa_rename.json): with ``cluster.legacy_ksa:
keep`` the old binding and KSA stay at their addresses unchanged and the new ones are added (nothing replaced, so
running pods keep the bucket); ``drop`` then only removes the old ones (docs/FACTS.md#networking-legacy-ksa)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from _synth import STANDARD_EXAMPLE, resources, synth_text

pytestmark = [pytest.mark.synth, pytest.mark.timeout(600)]

OLD = json.loads((Path(__file__).parent / "upgrade" / "pre_ksa_rename.json").read_text())
CLUSTER, WORKLOADS = "ray-tpu-cluster", "ray-tpu-workloads"
PRINCIPAL = "serviceAccount:my-ml-project.svc.id.goog[ray/{}]"


def _synth(legacy: str | None) -> dict[str, dict[str, Any]]:
    text = STANDARD_EXAMPLE.read_text()
    if legacy is not None:
        text = text.replace("cluster:\n  name: ray-tpu\n", f"cluster:\n  name: ray-tpu\n  legacy_ksa: {legacy}\n", 1)
        assert f"legacy_ksa: {legacy}" in text
    return synth_text(text)


def _identity(stacks: dict[str, dict[str, Any]]) -> tuple[dict[str, Any], dict[str, Any]]:
    """The binding and KSA resources by address, without cdktf's ``//`` metadata (not in the plan)."""
    def plain(found: dict[str, Any]) -> dict[str, Any]:
        return {a: {k: v for k, v in r.items() if k != "//"} for a, r in found.items()}
    return (plain(resources(stacks[CLUSTER], "google_service_account_iam_member")),
            plain(resources(stacks[WORKLOADS], "kubernetes_service_account_v1")))


def test_keep_leaves_the_old_binding_and_ksa_as_they_were_and_only_adds_the_clusters() -> None:
    """Source: google provider google_service_account_iam_member (member ForceNew: a changed member is a replace);
    KubeRay v1.7.0 rayservice_controller.go isZeroDowntimeUpgradeEnabled (upgradeStrategy None: no new RayCluster)"""
    bindings, ksas = _identity(_synth("keep"))
    old_bindings = OLD[CLUSTER]["google_service_account_iam_member"]
    old_ksas = OLD[WORKLOADS]["kubernetes_service_account_v1"]
    for address, old in old_bindings.items():  # same address, same values: no change in the plan
        assert bindings[address] == old, address
    for address, old in old_ksas.items():
        assert ksas[address] == old, address
    added = {a: r["member"] for a, r in bindings.items() if a not in old_bindings}
    assert list(added.values()) == [PRINCIPAL.format("ray-tpu-ray")]
    assert [r["metadata"]["name"] for a, r in ksas.items() if a not in old_ksas] == ["ray-tpu-ray"]


def test_drop_only_removes_the_old_ones_and_keeps_the_clusters_where_keep_put_them() -> None:
    kept_bindings, kept_ksas = _identity(_synth("keep"))
    bindings, ksas = _identity(_synth("drop"))
    assert set(bindings) < set(kept_bindings) and set(ksas) < set(kept_ksas)
    assert {a: r for a, r in kept_bindings.items() if a in bindings} == bindings
    assert {a: r for a, r in kept_ksas.items() if a in ksas} == ksas
    assert [r["member"] for r in bindings.values()] == [PRINCIPAL.format("ray-tpu-ray")]
    assert set(OLD[CLUSTER]["google_service_account_iam_member"]).isdisjoint(bindings)


def test_without_it_the_upgrade_replaces_the_old_principal_which_is_why_the_readme_says_keep_first() -> None:
    """What an upgrade without ``legacy_ksa`` plans: the binding's address now holds the new principal (a replace:
    ``ray/ray`` loses the GSA at once) and the KSA's address a new name (a replace: the ``ray`` KSA is deleted)."""
    bindings, ksas = _identity(_synth(None))
    (address, old), = OLD[CLUSTER]["google_service_account_iam_member"].items()
    assert bindings[address]["member"] == PRINCIPAL.format("ray-tpu-ray") != old["member"]
    (ksa_address, old_ksa), = OLD[WORKLOADS]["kubernetes_service_account_v1"].items()
    assert ksas[ksa_address]["metadata"]["name"] == "ray-tpu-ray" != old_ksa["metadata"]["name"]
