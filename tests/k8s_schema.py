"""Validate built-in Kubernetes objects (NetworkPolicy, Pod, Service) against the Kubernetes API's own schema.

The schema is vendored in ``tests/data/k8s-openapi/v1.34.0`` (see the README there): the OpenAPI definitions of
Kubernetes v1.34.0 as strict JSON Schema (unknown fields rejected, as ``kubectl apply --validate=strict`` does).
"""

from __future__ import annotations

import functools
import json
from pathlib import Path
from typing import Any

import jsonschema

SCHEMA_DIR = Path(__file__).resolve().parent / "data" / "k8s-openapi" / "v1.34.0"
DEFINITIONS = {"NetworkPolicy": "io.k8s.api.networking.v1.NetworkPolicy", "Pod": "io.k8s.api.core.v1.Pod",
               "Service": "io.k8s.api.core.v1.Service", "PodSpec": "io.k8s.api.core.v1.PodSpec",
               "ServiceSpec": "io.k8s.api.core.v1.ServiceSpec"}


@functools.cache
def _definitions() -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads((SCHEMA_DIR / "definitions.json").read_text())
    return loaded


@functools.cache
def validator(kind: str) -> jsonschema.Draft202012Validator:
    """A validator of ``kind`` (:data:`DEFINITIONS`)."""
    schema = {**_definitions(), "$ref": f"#/$defs/{DEFINITIONS[kind]}"}
    return jsonschema.Draft202012Validator(schema)


def schema_errors(obj: Any, kind: str | None = None) -> list[str]:
    """``path: message`` for every way ``obj`` breaks its kind's schema (``kind`` defaults to ``obj["kind"]``)."""
    found = validator(kind or obj["kind"]).iter_errors(obj)
    return sorted(f"{'.'.join(str(p) for p in e.absolute_path) or '<root>'}: {e.message}" for e in found)
