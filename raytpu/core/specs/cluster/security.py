"""What runs on the cluster may do and who may reach it (config section ``security``): locked down by default.

Each setting relaxes something the kit closes (README's security section); the pods, network and ports sides live
in :mod:`raytpu.core.manifests`.
"""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass

from raytpu.core.common import errors
from raytpu.core.common.errors import InvalidInput
from raytpu.core.specs.field_rules import dns_subdomain_problems

SERVE_ENDPOINTS = ("cluster-ip", "internal-lb", "public-lb")
"""How a RayService's OpenAI endpoint is exposed: in-cluster, an internal load balancer, or a public one with a key."""
NAMESPACE_SOURCE = "namespace:"
_NAMESPACE = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")
SOURCE_FORMS = "a CIDR (10.20.0.0/16, 203.0.113.7/32) or namespace:NAME (every pod of that namespace)"
SOURCE_FIELDS = ("serve_from", "dashboard_from", "metrics_from", "operator_from")
ROOT_UID = 0
IMAGE_UID = 1000
IMAGE_GID = 100
"""rayproject/ray's user ``ray`` (uid 1000, gid 100), stated numerically so kubelet can check ``runAsNonRoot``.
Source: ray-project/ray ``docker/base-deps/Dockerfile`` (``RAY_UID``, ``RAY_GID``)."""


def source_problems(field: str, value: object) -> list[InvalidInput]:
    """A network source: a CIDR or ``namespace:NAME``."""
    if isinstance(value, str) and value.startswith(NAMESPACE_SOURCE):
        if _NAMESPACE.match(value[len(NAMESPACE_SOURCE):]):
            return []
        return [errors.invalid_value(field, value, "names no valid namespace", SOURCE_FORMS)]
    try:
        ipaddress.ip_network(str(value), strict=True)
    except ValueError as exc:
        return [errors.invalid_value(field, value, f"is not a source ({exc})", SOURCE_FORMS)]
    return [] if isinstance(value, str) else [errors.invalid_value(field, value, "is not a string", SOURCE_FORMS)]


def secret_name_problems(field: str, value: object) -> list[InvalidInput]:
    """A Kubernetes Secret's name. Source: k8s.io/apimachinery pkg/api/validation ``ValidateSecretName``."""
    return dns_subdomain_problems(field, value, "a Secret name")


def is_everywhere(source: str) -> bool:
    """The source admits every address (``0.0.0.0/0`` or ``::/0``)."""
    return not source.startswith(NAMESPACE_SOURCE) and ipaddress.ip_network(source).prefixlen == 0


@dataclass(frozen=True, kw_only=True)
class SecuritySpec:
    """Config section ``security``; the defaults are the locked-down setup (fields:
    docs/FACTS.md#networking-security-spec)."""

    serve_endpoint: str = "cluster-ip"
    serve_from: tuple[str, ...] = ()
    dashboard_from: tuple[str, ...] = ()
    metrics_from: tuple[str, ...] = ()
    operator_from: tuple[str, ...] = ()
    serve_api_key_secret: str | None = None
    writable_root_filesystem: bool = False
    run_as_user: int = IMAGE_UID
    run_as_group: int = IMAGE_GID

    def __post_init__(self) -> None:
        found: list[InvalidInput] = []
        if self.serve_endpoint not in SERVE_ENDPOINTS:
            found.append(errors.invalid_choice("serve_endpoint", self.serve_endpoint, SERVE_ENDPOINTS))
        for name in SOURCE_FIELDS:
            for i, source in enumerate(getattr(self, name)):
                found += source_problems(f"{name}[{i}]", source)
        if self.serve_api_key_secret is not None:
            found += secret_name_problems("serve_api_key_secret", self.serve_api_key_secret)
        if self.serve_endpoint == "public-lb" and self.serve_api_key_secret is None:
            found.append(errors.missing("serve_api_key_secret", "with serve_endpoint public-lb (a public endpoint "
                                        "is never open without authentication)", "the name of a Secret in the "
                                        "namespace with key api-key (kubectl create secret generic NAME "
                                        "--from-literal=api-key=...)"))
        for name in ("run_as_user", "run_as_group"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or not 0 < value < 2**31:
                found.append(errors.invalid_value(name, value, "is not a non-root id" if value == ROOT_UID
                                                  else "is not a valid id", "an integer from 1 to 2147483647 "
                                                  "(Ray containers never run as root)"))
        if not isinstance(self.writable_root_filesystem, bool):
            found.append(errors.invalid_value("writable_root_filesystem", self.writable_root_filesystem,
                                              "is not a boolean", "true or false"))
        if found:
            raise errors.InvalidInputs(found)

    def warnings(self) -> list[str]:
        """What ``raytpu validate`` warns about: every setting that opens something to the outside."""
        out = []
        if self.serve_endpoint == "public-lb":
            out.append("security.serve_endpoint is public-lb: RayServices' OpenAI endpoint gets a public IP, "
                       f"guarded by the API key in Secret {self.serve_api_key_secret!r}"
                       + ("" if self.serve_from else " and reachable from every address (serve_from is empty)"))
        for name in SOURCE_FIELDS:
            wide = [s for s in getattr(self, name) if is_everywhere(s)]
            if wide:
                out.append(f"security.{name} admits every address ({', '.join(wide)})")
        if self.writable_root_filesystem:
            out.append("security.writable_root_filesystem is true: Ray containers may write anywhere in their image")
        return out
