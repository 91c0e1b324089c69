"""Test helpers: validate KubeRay manifests against the v1.7.0 CRD schemas and the GKE Ray TPU webhook's rules.

Schema validation: each CRD's ``openAPIV3Schema`` (version ``v1``) is turned into a JSON Schema the
way the API server treats it for a structural schema: every object that lists ``properties`` without
``x-kubernetes-preserve-unknown-fields`` rejects unknown fields (``additionalProperties: false``, i.e.
what ``kubectl apply --validate=strict`` and field pruning would catch), ``x-kubernetes-int-or-string``
accepts an integer or a string, ``nullable`` accepts null. CEL rules (``x-kubernetes-validations``)
are not evaluated.

The CRDs are vendored in ``tests/data/kuberay-crds/v1.7.0/`` (see the README there);
``RAYTPU_KUBERAY_CRDS`` overrides the directory.
"""

from __future__ import annotations

import copy
import functools
import os
import re
from pathlib import Path
from typing import Any

import jsonschema
import yaml

from raytpu.core.manifests import kuberay
from raytpu.core.tpu.catalog import chips_in
from raytpu.core.tpu.plan import ACCELERATOR_LABEL, TOPOLOGY_LABEL, TPU_RESOURCE

KUBERAY_VERSION = "v1.7.0"
REPO = Path(__file__).resolve().parents[1]
CRD_FILES = {"RayCluster": "ray.io_rayclusters.yaml", "RayJob": "ray.io_rayjobs.yaml",
             "RayService": "ray.io_rayservices.yaml"}

KUBERAY_POD_LABELS = {"app.kubernetes.io/name": "kuberay", "app.kubernetes.io/created-by": "kuberay-operator"}
"""Labels KubeRay's ``labelPod`` puts on every Ray pod (template labels may override them)."""
WEBHOOK_LABEL = ("app.kubernetes.io/name", "kuberay")
"""The GKE Ray TPU webhook only sees pods carrying this label."""


def crd_dir() -> Path:
    """The directory holding the KubeRay CRD YAMLs."""
    env = os.environ.get("RAYTPU_KUBERAY_CRDS")
    return Path(env) if env else REPO / "tests" / "data" / "kuberay-crds" / KUBERAY_VERSION


def _strict(node: Any) -> Any:
    """A structural schema node -> a JSON Schema node that rejects unknown fields."""
    if isinstance(node, list):
        return [_strict(n) for n in node]
    if not isinstance(node, dict):
        return node
    out = {k: _strict(v) for k, v in node.items()
           if k not in ("properties", "additionalProperties", "items")}
    if "properties" in node:
        out["properties"] = {k: _strict(v) for k, v in node["properties"].items()}
    if "items" in node:
        out["items"] = _strict(node["items"])
    if "additionalProperties" in node:
        ap = node["additionalProperties"]
        out["additionalProperties"] = _strict(ap) if isinstance(ap, dict) else ap
    elif "properties" in node and not node.get("x-kubernetes-preserve-unknown-fields"):
        out["additionalProperties"] = False
    if node.get("x-kubernetes-int-or-string"):
        out.pop("type", None)
        out["anyOf"] = [{"type": "integer"}, {"type": "string"}]
    if node.get("nullable") and "type" in out:
        out["type"] = [out["type"], "null"]
    return out


def load_yaml(text: str | bytes) -> Any:
    """One YAML document, parsed by libyaml where PyYAML has it (the same result as ``yaml.safe_load``, 5x faster:
    the unit tier parses a few thousand emitted fields)."""
    return yaml.load(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))


@functools.cache
def crd(kind: str) -> dict[str, Any]:
    """The vendored CustomResourceDefinition of ``kind`` (parsed once; callers copy before editing)."""
    path = crd_dir() / CRD_FILES[kind]
    if not path.is_file():
        raise FileNotFoundError(f"KubeRay CRD {path} not found (vendored under tests/data/kuberay-crds; "
                                "RAYTPU_KUBERAY_CRDS overrides the directory)")
    loaded: dict[str, Any] = load_yaml(path.read_text())
    return loaded


@functools.cache
def schema(kind: str) -> dict[str, Any]:
    """The strict JSON Schema of ``kind`` (RayCluster, RayJob, RayService) at ``ray.io/v1``."""
    crd_ = crd(kind)
    version = next(v for v in crd_["spec"]["versions"] if v["name"] == "v1")
    out = _strict(copy.deepcopy(version["schema"]["openAPIV3Schema"]))
    out["properties"]["apiVersion"] = {"const": f"{crd_['spec']['group']}/v1"}
    out["properties"]["kind"] = {"const": crd_["spec"]["names"]["kind"]}
    out["required"] = sorted({*out.get("required", []), "apiVersion", "kind", "metadata", "spec"})
    return out


def schema_errors(manifest: dict[str, Any]) -> list[str]:
    """Every schema violation of ``manifest`` as ``path: message`` (empty when valid)."""
    kind = manifest.get("kind")
    if kind not in CRD_FILES:
        return [f"kind: {kind!r} is not one of {sorted(CRD_FILES)}"]
    validator = jsonschema.Draft7Validator(schema(kind))
    return sorted(f"{'.'.join(str(p) for p in e.absolute_path) or '<root>'}: {e.message}"
                  for e in validator.iter_errors(manifest))


cluster_spec = kuberay.ray_cluster_of
"""The RayCluster spec inside any of the three kinds."""


def effective_pod_labels(template: dict[str, Any]) -> dict[str, str]:
    """The labels KubeRay gives a pod of ``template``: its defaults, overridden by template labels."""
    return {**KUBERAY_POD_LABELS, **template.get("metadata", {}).get("labels", {})}


def webhook_errors(manifest: dict[str, Any]) -> list[str]:
    """What the GKE Ray TPU webhook would reject or miss in ``manifest``'s TPU worker groups.

    Per TPU group (one requesting ``google.com/tpu``): the topology and accelerator selectors are
    present; requests == limits; ``numOfHosts == max(chips(topology) / tpu per pod, 1)``; the pods carry
    ``app.kubernetes.io/name: kuberay``; with ``MEGASCALE_NUM_SLICES`` (multi-slice) it equals ``replicas`` and the
    per-replica ``MEGASCALE_*`` are left to the webhook. Pods without TPUs are checked for the label only if they
    select a TPU topology.
    """
    problems = []
    groups = cluster_spec(manifest).get("workerGroupSpecs", [])
    for group in groups:
        name = group.get("groupName", "?")
        template = group["template"]
        selector = template["spec"].get("nodeSelector", {})
        tpu_containers = [c for c in template["spec"]["containers"]
                          if TPU_RESOURCE in c.get("resources", {}).get("limits", {})
                          or TPU_RESOURCE in c.get("resources", {}).get("requests", {})]
        if not tpu_containers:
            continue
        for c in tpu_containers:
            res = c.get("resources", {})
            if res.get("requests", {}).get(TPU_RESOURCE) != res.get("limits", {}).get(TPU_RESOURCE):
                problems.append(f"{name}: {TPU_RESOURCE} requests != limits")
        if TOPOLOGY_LABEL not in selector:
            problems.append(f"{name}: nodeSelector lacks {TOPOLOGY_LABEL}")
            continue
        if ACCELERATOR_LABEL not in selector:
            problems.append(f"{name}: nodeSelector lacks {ACCELERATOR_LABEL}")
        per_pod = int(tpu_containers[0]["resources"]["limits"][TPU_RESOURCE])
        expected = max(chips_in(selector[TOPOLOGY_LABEL]) // per_pod, 1)
        if group.get("numOfHosts", 1) != expected:
            problems.append(f"{name}: numOfHosts {group.get('numOfHosts', 1)} != {expected} "
                            f"(topology {selector[TOPOLOGY_LABEL]}, {per_pod} chips per pod)")
        env = {e["name"]: e.get("value") for e in tpu_containers[0].get("env", [])}
        if "MEGASCALE_NUM_SLICES" in env:
            # kuberay-tpu-webhook main.go (ef658db) mutatePod: with MEGASCALE_NUM_SLICES present it sets
            # MEGASCALE_SLICE_ID to the pod's replica index and the coordinator to replica 0's host 0, but only
            # where they are empty: a value in the template would be the same on every replica.
            if env["MEGASCALE_NUM_SLICES"] != str(group.get("replicas", 1)):
                problems.append(f"{name}: MEGASCALE_NUM_SLICES {env['MEGASCALE_NUM_SLICES']} != replicas "
                                f"{group.get('replicas', 1)} (the webhook numbers slices by replica)")
            for preset in ("MEGASCALE_SLICE_ID", "MEGASCALE_COORDINATOR_ADDRESS"):
                if env.get(preset):
                    problems.append(f"{name}: {preset} set in the template; the webhook then leaves it, the same "
                                    "on every replica")
        key, value = WEBHOOK_LABEL
        if effective_pod_labels(template).get(key) != value:
            problems.append(f"{name}: pods not labelled {key}: {value}; the webhook will not see them")
    return problems


_DNS_1035 = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")
NAME_LIMITS = {"RayCluster": 53, "RayJob": 47, "RayService": 47}


def _version(text: object) -> tuple[int, ...]:
    try:
        return tuple(int(p) for p in str(text).split(".")[:2])
    except ValueError:
        return (0,)


def operator_errors(manifest: dict[str, Any]) -> list[str]:
    """A few of the KubeRay operator's own checks (``ray-operator/controllers/ray/utils/validation.go``).

    Name length and DNS-1035 form; worker groups ``minReplicas <= replicas <= maxReplicas`` and
    ``numOfHosts >= 1``; RayJob ``ttlSecondsAfterFinished``/``backoffLimit`` >= 0, a positive
    ``activeDeadlineSeconds``, ``runtimeEnvYAML`` a YAML mapping; RayService ``serveConfigV2`` a YAML
    mapping and a known ``upgradeStrategy.type``; ``authOptions.mode: token`` needs ``rayVersion`` >= 2.52.0.
    (The CRDs' CEL rules only cover fields the kit never
    sets: ``managedBy``, ``deletionStrategy``, ``gcsFaultToleranceOptions``.)
    """
    problems = []
    kind, name = manifest["kind"], manifest["metadata"]["name"]
    if len(name) > NAME_LIMITS[kind] or not _DNS_1035.match(name):
        problems.append(f"metadata.name {name!r}: not a DNS-1035 label of <= {NAME_LIMITS[kind]} characters")
    for group in cluster_spec(manifest).get("workerGroupSpecs", []):
        low, want, high = group.get("minReplicas", 0), group.get("replicas", 0), group.get("maxReplicas", 2**31 - 1)
        if not low <= want <= high:
            problems.append(f"{group['groupName']}: replicas {want} outside [{low}, {high}]")
        if group.get("numOfHosts", 1) < 1:
            problems.append(f"{group['groupName']}: numOfHosts < 1")
    cluster = cluster_spec(manifest)
    if (cluster.get("authOptions") or {}).get("mode") == "token" and _version(cluster.get("rayVersion")) < (2, 52):
        # utils/validation.go (v1.7.0): token auth needs spec.rayVersion set and >= 2.52.0
        problems.append(f"authOptions.mode token with rayVersion {cluster.get('rayVersion')!r} (needs >= 2.52.0)")
    spec = manifest["spec"]
    if kind == "RayJob":
        for key in ("ttlSecondsAfterFinished", "backoffLimit"):
            if spec.get(key, 0) < 0:
                problems.append(f"spec.{key} is negative")
        if spec.get("activeDeadlineSeconds", 1) <= 0:
            problems.append("spec.activeDeadlineSeconds is not positive")
        if spec.get("ttlSecondsAfterFinished", 0) > 0 and not spec.get("shutdownAfterJobFinishes"):
            problems.append("spec.ttlSecondsAfterFinished without shutdownAfterJobFinishes")
        if "runtimeEnvYAML" in spec and not isinstance(load_yaml(spec["runtimeEnvYAML"]), dict):
            problems.append("spec.runtimeEnvYAML is not a YAML mapping")
    if kind == "RayService":
        if not isinstance(load_yaml(spec.get("serveConfigV2", "")), dict):
            problems.append("spec.serveConfigV2 is not a YAML mapping")
        if spec.get("upgradeStrategy", {}).get("type", "NewCluster") not in (
                "NewCluster", "None", "NewClusterWithIncrementalUpgrade"):
            problems.append("spec.upgradeStrategy.type is unknown")
    return problems
