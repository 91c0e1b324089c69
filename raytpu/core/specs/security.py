"""What runs on the cluster may do and who may reach it (config section ``security``): locked down by default.

Every setting here relaxes or opens something the kit closes otherwise; the README's security section says what
each one protects against. The pod side is :mod:`raytpu.core.manifests.pod_security`, the network side
:mod:`raytpu.core.manifests.network_policy`, the ports :mod:`raytpu.core.manifests.ray_ports`.
"""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass

from raytpu.core.common import errors
from raytpu.core.common.errors import InvalidInput
from raytpu.core.specs.field_rules import dns_subdomain_problems

SERVE_ENDPOINTS = ("cluster-ip", "internal-lb", "public-lb")
"""How a RayService's OpenAI endpoint is exposed: in-cluster only; a GKE internal passthrough load balancer (the
VPC); a public load balancer (requires ``serve_api_key_secret``)."""
NAMESPACE_SOURCE = "namespace:"
_NAMESPACE = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")
SOURCE_FORMS = "a CIDR (10.20.0.0/16, 203.0.113.7/32) or namespace:NAME (every pod of that namespace)"
SOURCE_FIELDS = ("serve_from", "dashboard_from", "metrics_from", "operator_from")
ROOT_UID = 0
IMAGE_UID = 1000
IMAGE_GID = 100
"""rayproject/ray's user: ``ray``, uid 1000, group ``users`` (gid 100) (ray-project/ray
``docker/base-deps/Dockerfile``: ``useradd ... --uid $RAY_UID --gid $RAY_GID``, ``RAY_UID=1000``, ``RAY_GID=100``).
Stated numerically: kubelet cannot check ``runAsNonRoot`` against an image whose USER is a name."""


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
    """Config section ``security``. The defaults are the locked-down setup.

    Attributes:
        serve_endpoint: How RayServices' OpenAI endpoint is exposed (:data:`SERVE_ENDPOINTS`). Default
            ``cluster-ip``: reachable from inside the cluster only.
        serve_from: Sources admitted to the Serve port besides the namespace's pods (CIDRs or ``namespace:NAME``).
            Default none; with ``internal-lb`` and none given, the VPC subnet's range; with ``public-lb``, every
            address (the API key guards it).
        dashboard_from: Sources admitted to the dashboard/job API and Ray client ports besides the namespace's pods
            (e.g. a CI runner's range). Default none.
        metrics_from: Sources admitted to Ray's metrics port besides Google Cloud Managed Service for
            Prometheus's collectors, which are always admitted (e.g. a self-run Prometheus's namespace). Default none.
        operator_from: Where KubeRay's operator calls Ray heads from (dashboard, Serve health). Default: the control
            plane's range (``network.master_cidr``) and the Konnectivity agents it reaches pods through, where GKE
            hosts the Ray Operator add-on's operator; name a self-installed operator's namespace
            (``namespace:ray-system``) instead.
        serve_api_key_secret: A Secret in the namespace whose ``api-key`` every request to the OpenAI endpoint must
            present (``Authorization: Bearer <key>``). Required with ``public-lb``. Default none.
        writable_root_filesystem: Lets Ray containers write outside their scratch volumes (an image that writes
            elsewhere). Default False (read-only root filesystem).
        run_as_user: The uid Ray containers run as (non-root). Default 1000, the Ray image's user.
        run_as_group: Their gid. Default 100, the Ray image's group.
    """

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
