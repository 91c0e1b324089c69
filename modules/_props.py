"""Shared checks for construct options that no spec covers, and the ``overrides`` escape hatch."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any, Protocol

from raytpu import errors
from raytpu.spec import REGION, ZONE, label_problems

RESOURCE_NAME = re.compile(r"^[a-z](?:[a-z0-9-]{0,61}[a-z0-9])?$")

MANAGED_BY_LABEL = {"managed-by": "raytpu"}
"""Added to every labelled resource so inventories can find what raytpu created."""


class _Overridable(Protocol):
    def add_override(self, path: str, value: Any) -> None: ...


def is_token(value: object) -> bool:
    """True for an unresolved CDK token string (a reference resolved at synth), which is not checked."""
    return isinstance(value, str) and "${" in value


def check_name(field: str, value: str, max_len: int = 63) -> None:
    """A GCP/Kubernetes resource name: lowercase letters, digits, hyphens; starts with a letter."""
    if is_token(value):
        return
    if not isinstance(value, str) or not RESOURCE_NAME.match(value) or len(value) > max_len:
        raise errors.invalid_value(field, value, "is not a valid resource name",
                                   f"1-{max_len} characters: lowercase letters, digits, hyphens; "
                                   "starts with a letter, ends with a letter or digit")


def check_choice(field: str, value: object, choices: Iterable[object]) -> None:
    """One of a fixed set."""
    choices = tuple(choices)
    if value not in choices:
        raise errors.invalid_choice(field, value, choices)


def check_range(field: str, value: int | float | None, low: int | float, high: int | float, unit: str = "") -> None:
    """A number within ``[low, high]`` (None passes: it means "use the default")."""
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, int | float) or not low <= value <= high:
        raise errors.invalid_value(field, value, "is out of range", f"{low} to {high}{unit}")


def check_zone(field: str, value: str) -> None:
    """A GCP zone such as ``us-east5-b`` (the spec's pattern, :data:`raytpu.spec.ZONE`)."""
    if not isinstance(value, str) or not ZONE.match(value):
        raise errors.invalid_value(field, value, "is not a GCP zone", "a zone such as us-east5-b")


def check_region(field: str, value: str) -> None:
    """A GCP region such as ``us-east5`` (the spec's pattern, :data:`raytpu.spec.REGION`)."""
    if not isinstance(value, str) or not REGION.match(value):
        raise errors.invalid_value(field, value, "is not a GCP region", "a region such as us-east5")


def check_labels(field: str, labels: Mapping[str, str]) -> None:
    """GCP resource labels (the spec's rule, :func:`raytpu.spec.label_problems`)."""
    found = label_problems(field, labels)
    if found:
        raise errors.InvalidInputs(found)


def check_overrides(field: str, overrides: Mapping[str, Any]) -> None:
    """Override keys are dotted Terraform attribute paths."""
    for path in overrides:
        if not isinstance(path, str) or not path or path.startswith(".") or " " in path:
            raise errors.invalid_value(f"{field}[{path!r}]", path, "is not a Terraform attribute path",
                                       "a dotted path such as node_config.disk_type")


def apply_overrides(resource: _Overridable, overrides: Mapping[str, Any]) -> None:
    """The escape hatch: writes raw provider fields onto ``resource`` (after everything else)."""
    for path, value in overrides.items():
        resource.add_override(path, value)


def with_default_labels(labels: Mapping[str, str]) -> dict[str, str]:
    """``labels`` plus ``managed-by: raytpu`` (the caller's value wins)."""
    return {**MANAGED_BY_LABEL, **labels}
