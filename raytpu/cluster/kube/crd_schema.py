"""The fields of a manifest its cluster's CRD does not declare, found before anything is applied: an older operator
(GKE's add-on follows the cluster's version) rejects or drops KubeRay's newer fields. Hand-written: the ``kubernetes``
models are the core API's, and ``fieldValidation=Strict`` answers only at apply time, naming no KubeRay version."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from raytpu.cluster.kube.kube_errors import KubeError
from raytpu.core.manifests import kuberay
from raytpu.core.manifests.kube_resources import Resource


def undeclared_fields(value: Any, schema: Mapping[str, Any], path: str = "") -> list[str]:
    """Paths of ``value``'s fields that OpenAPI ``schema`` (a CRD's structural schema) does not declare; a node
    that preserves unknown fields or maps arbitrary keys (``additionalProperties``) declares everything below."""
    if schema.get("x-kubernetes-preserve-unknown-fields") or not schema:
        return []
    if isinstance(value, Mapping):
        props = schema.get("properties")
        extra = schema.get("additionalProperties")
        found = []
        for key, item in value.items():
            where = f"{path}.{key}" if path else str(key)
            if path == "" and key in ("apiVersion", "kind", "metadata"):
                continue
            if props is not None and key in props:
                found += undeclared_fields(item, props[key], where)
            elif isinstance(extra, Mapping):
                found += undeclared_fields(item, extra, where)
            elif extra is not True:
                found.append(where)
        return found
    if isinstance(value, list) and isinstance(schema.get("items"), Mapping):
        return [f for i, item in enumerate(value) for f in undeclared_fields(item, schema["items"], f"{path}[{i}]")]
    return []


def served_schema(crd: Mapping[str, Any], res: Resource) -> Mapping[str, Any]:
    """The OpenAPI schema a CRD serves for ``res``'s version (empty when it serves none: nothing is checked)."""
    version = res.api_version.rpartition("/")[2]
    served = [v for v in crd.get("spec", {}).get("versions", []) if v.get("name") == version]
    return ((served[0].get("schema") or {}).get("openAPIV3Schema") if served else None) or {}


def check_declared(obj: Mapping[str, Any], res: Resource, crd: Mapping[str, Any], needs: str) -> None:
    """Raises a KubeError (422) naming ``obj``'s first fields the cluster's CRD does not declare (with the release that
    brought those of :data:`kuberay.NEWEST_FIELDS`); ``needs`` names the oldest KubeRay the kit supports."""
    missing = undeclared_fields(obj, served_schema(crd, res))
    if missing:
        newest, brought = kuberay.NEWEST_FIELDS.get(str(obj.get("kind")), ((), ""))
        named = [f"{f} (KubeRay {brought})" if f in newest else f for f in missing[:3]]
        raise KubeError(422, f"the cluster's {res.display} (KubeRay) does not declare {', '.join(named)}"
                        f"{f' and {len(missing) - 3} more' if len(missing) > 3 else ''}: its KubeRay is older "
                        f"than the kit's objects need", kuberay.kuberay_remedy(needs, str(obj.get("kind"))))
