"""Test helpers: validate Kueue objects against the Kueue v0.19.2 CRD schemas (storage version ``v1beta2``) and a few
of the rules the API server and Kueue's webhook check when they are created.

Schema validation is :mod:`crd`'s structural approach (unknown fields rejected, int-or-string, nullable), on the
version the CRD stores; a Go-only pattern form (``^(?i)...``) is rewritten for Python's ``re``. CEL rules
(``x-kubernetes-validations``) are not evaluated; :func:`rule_errors` restates the create-time ones of the kinds the
kit emits, and the ClusterQueue webhook's resource-group checks (Kueue v0.19.2 ``pkg/webhooks/clusterqueue_webhook.go``
``validateResourceGroups``, ``validateFlavorQuotas``, ``validateAdmissionCheckOnFlavorsWithOld``).

The CRDs are vendored in ``tests/data/kueue-crds/v0.19.2/`` (see the README there).
"""

from __future__ import annotations

import copy
import functools
from pathlib import Path
from typing import Any

import jsonschema
from crd import _strict, load_yaml

KUEUE_VERSION = "v0.19.2"
STORAGE_VERSION = "v1beta2"
CRD_DIR = Path(__file__).resolve().parent / "data" / "kueue-crds" / KUEUE_VERSION
TAINT_EFFECTS = ("NoSchedule", "PreferNoSchedule", "NoExecute")


@functools.cache
def crds() -> dict[str, dict[str, Any]]:
    """Kind -> its vendored CustomResourceDefinition (parsed once; callers copy before editing)."""
    found = {}
    for path in sorted(CRD_DIR.glob("*.yaml")):
        loaded: dict[str, Any] = load_yaml(path.read_text())
        found[loaded["spec"]["names"]["kind"]] = loaded
    if not found:
        raise FileNotFoundError(f"no Kueue CRDs under {CRD_DIR} (vendored: tests/data/kueue-crds)")
    return found


def storage_version(kind: str) -> dict[str, Any]:
    """The CRD version entry of ``kind`` that the API server stores (``storage: true``)."""
    (version,) = [v for v in crds()[kind]["spec"]["versions"] if v.get("storage")]
    return version


def namespaced(kind: str) -> bool:
    return bool(crds()[kind]["spec"]["scope"] == "Namespaced")


def _python_patterns(node: Any) -> Any:
    """Go's regexp takes flags anywhere (``^(?i)...``), Python's only at the start: move them there."""
    if isinstance(node, list):
        return [_python_patterns(n) for n in node]
    if not isinstance(node, dict):
        return node
    out = {k: _python_patterns(v) for k, v in node.items()}
    if isinstance(out.get("pattern"), str) and out["pattern"].startswith("^(?i)"):
        out["pattern"] = "(?i)^" + out["pattern"].removeprefix("^(?i)")
    return out


@functools.cache
def schema(kind: str) -> dict[str, Any]:
    """The strict JSON Schema of ``kind`` at its storage version: apiVersion and kind fixed, metadata required, its
    namespace required for a namespaced kind and absent otherwise."""
    crd_ = crds()[kind]
    version = storage_version(kind)
    out = _python_patterns(_strict(copy.deepcopy(version["schema"]["openAPIV3Schema"])))
    out["properties"]["apiVersion"] = {"const": f"{crd_['spec']['group']}/{version['name']}"}
    out["properties"]["kind"] = {"const": kind}
    metadata: dict[str, Any] = {"type": "object", "required": ["name"], "properties": {
        "name": {"type": "string", "minLength": 1}, "labels": {"type": "object"}, "annotations": {"type": "object"}}}
    if namespaced(kind):
        metadata["required"] = ["name", "namespace"]
        metadata["properties"]["namespace"] = {"type": "string", "minLength": 1}
    out["properties"]["metadata"] = {**metadata, "additionalProperties": False}
    out["required"] = sorted({*out.get("required", []), "apiVersion", "kind", "metadata"})
    return out


def schema_errors(manifest: dict[str, Any]) -> list[str]:
    """Every schema violation of ``manifest`` as ``path: message`` (empty when valid)."""
    kind = manifest.get("kind")
    if kind not in crds():
        return [f"kind: {kind!r} is not one of {sorted(crds())}"]
    validator = jsonschema.Draft7Validator(schema(str(kind)))
    return sorted(f"{'.'.join(str(p) for p in e.absolute_path) or '<root>'}: {e.message}"
                  for e in validator.iter_errors(manifest))


def _quantity_negative(value: object) -> bool:
    return str(value).lstrip().startswith("-")


def _resource_group_errors(groups: list[dict[str, Any]], has_cohort: bool) -> list[str]:
    problems = []
    seen_resources: set[str] = set()
    seen_flavors: set[str] = set()
    for i, group in enumerate(groups):
        covered = group.get("coveredResources", [])
        for name in covered:
            if name in seen_resources:
                problems.append(f"resourceGroups[{i}].coveredResources: {name} duplicated")
            seen_resources.add(name)
        for j, flavor in enumerate(group.get("flavors", [])):
            where = f"resourceGroups[{i}].flavors[{j}]"
            if flavor["name"] in seen_flavors:
                problems.append(f"{where}.name: {flavor['name']} duplicated")
            seen_flavors.add(flavor["name"])
            resources = flavor.get("resources", [])
            if len(resources) != len(covered):  # CEL: flavors must have the same number of resources
                problems.append(f"{where}: {len(resources)} resources for {len(covered)} covered")
            for k, (quota, name) in enumerate(zip(resources, covered, strict=False)):
                if quota["name"] != name:
                    problems.append(f"{where}.resources[{k}].name: {quota['name']} is not {name}")
                if _quantity_negative(quota.get("nominalQuota", 0)):
                    problems.append(f"{where}.resources[{k}].nominalQuota is negative")
                if "borrowingLimit" in quota and not has_cohort:  # CEL and webhook: borrowing needs a cohort
                    problems.append(f"{where}.resources[{k}].borrowingLimit without a cohort")
    return problems


def rule_errors(manifest: dict[str, Any]) -> list[str]:
    """The create-time rules of the CRDs' CEL and Kueue's ClusterQueue webhook that the schema cannot state."""
    spec = manifest.get("spec", {})
    kind = manifest.get("kind")
    problems: list[str] = []
    if kind == "ClusterQueue":
        problems += _resource_group_errors(spec.get("resourceGroups", []), bool(spec.get("cohortName")))
        preemption = spec.get("preemption", {})
        if preemption.get("reclaimWithinCohort") == "Never" and \
                preemption.get("borrowWithinCohort", {}).get("policy", "Never") != "Never":
            problems.append("preemption: reclaimWithinCohort=Never and borrowWithinCohort.policy!=Never")
        flavors = {f["name"] for g in spec.get("resourceGroups", []) for f in g.get("flavors", [])}
        for check in spec.get("admissionChecksStrategy", {}).get("admissionChecks", []):
            problems += [f"admissionChecksStrategy: {check['name']} on {f}, not a flavor of the queue"
                         for f in check.get("onFlavors", []) if f not in flavors]
    elif kind == "Cohort":
        problems += _resource_group_errors(spec.get("resourceGroups", []), True)
    elif kind == "ResourceFlavor":
        problems += [f"nodeTaints: effect {t.get('effect')!r} is not one of {TAINT_EFFECTS}"
                     for t in spec.get("nodeTaints", []) if t.get("effect") not in TAINT_EFFECTS]
    return problems
