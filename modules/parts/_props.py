"""Rules for construct options that no spec covers, and the ``overrides`` escape hatch. Each returns the problems of one
value, in the spec layer's style (:func:`raytpu.core.common.errors.raise_found` raises them together); rules a spec
states are imported from :mod:`raytpu.core.specs.field_rules`."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, Protocol

from raytpu.core.common import errors
from raytpu.core.common.errors import InvalidInput
from raytpu.core.specs.field_rules import ZONE

RESOURCE_NAME = re.compile(r"^[a-z](?:[a-z0-9-]{0,61}[a-z0-9])?$")

MANAGED_BY_LABEL = {"managed-by": "raytpu"}
"""Added to every labelled resource so inventories can find what raytpu created."""


class _Overridable(Protocol):
    def add_override(self, path: str, value: Any) -> None: ...


def is_token(value: object) -> bool:
    """True for an unresolved CDK token string (a reference resolved at synth), which is not checked."""
    return isinstance(value, str) and "${" in value


def resource_name_problems(field: str, value: object, max_len: int = 63) -> list[InvalidInput]:
    """A GCP/Kubernetes resource name: lowercase letters, digits, hyphens; starts with a letter."""
    if is_token(value) or (isinstance(value, str) and RESOURCE_NAME.match(value) and len(value) <= max_len):
        return []
    return [errors.invalid_value(field, value, "is not a valid resource name",
                                 f"1-{max_len} characters: lowercase letters, digits, hyphens; "
                                 "starts with a letter, ends with a letter or digit")]


def fraction_problems(field: str, value: object) -> list[InvalidInput]:
    """A number within ``[0, 1]`` (a sampling rate; :func:`raytpu.core.specs.field_rules.range_problems` takes whole
    numbers)."""
    if isinstance(value, int | float) and not isinstance(value, bool) and 0.0 <= value <= 1.0:
        return []
    return [errors.invalid_value(field, value, "is out of range", "0.0 to 1.0")]


def zone_problems(field: str, value: object) -> list[InvalidInput]:
    """A GCP zone such as ``us-east5-b`` (the spec's pattern, :data:`raytpu.core.specs.field_rules.ZONE`)."""
    return errors.unmatched(field, value, ZONE, "is not a GCP zone", "a zone such as us-east5-b")


def override_problems(field: str, overrides: Mapping[str, Any]) -> list[InvalidInput]:
    """Override keys are dotted Terraform attribute paths."""
    return [errors.invalid_value(f"{field}[{path!r}]", path, "is not a Terraform attribute path",
                                 "a dotted path such as node_config.disk_type")
            for path in overrides
            if not isinstance(path, str) or not path or path.startswith(".") or " " in path]


def apply_overrides(resource: _Overridable, overrides: Mapping[str, Any]) -> None:
    """The escape hatch: writes raw provider fields onto ``resource`` (after everything else)."""
    for path, value in overrides.items():
        resource.add_override(path, value)


def with_default_labels(labels: Mapping[str, str]) -> dict[str, str]:
    """``labels`` plus ``managed-by: raytpu`` (the caller's value wins)."""
    return {**MANAGED_BY_LABEL, **labels}
