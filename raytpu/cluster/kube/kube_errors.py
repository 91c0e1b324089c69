"""What a failed Kubernetes API call means and what fixes it: every failure becomes one :class:`KubeError` line (exit
1), ``kubernetes: <status> <reason>: <call>: <problem>; valid: <fix>``, with GKE's fix: the IAM permission (403), the
Ray Operator add-on (``ray.io`` not served), ADC (401), authorized networks (no answer), the cluster CA (TLS)."""

from __future__ import annotations

import http
import json
import re
from collections.abc import Mapping
from typing import Any

from raytpu.core.common.errors import RuntimeFailure
from raytpu.core.manifests.kube_resources import Resource

ADC_HELP = ("Application Default Credentials of a principal with access to the cluster: "
            "`gcloud auth application-default login` on a workstation, Workload Identity Federation in CI "
            "(e.g. google-github-actions/auth), or the service account of the GKE pod it runs in")


class KubeError(RuntimeFailure):
    """One failed Kubernetes API call, as one line; ``status`` is the HTTP status (0: no HTTP answer)."""

    def __init__(self, status: int, problem: str, valid: str) -> None:
        self.status = status
        super().__init__(f"kubernetes: {one_line(problem)}", one_line(valid))


def one_line(text: str) -> str:
    """``text`` with every run of whitespace (newlines included) as one space."""
    return " ".join(str(text).split())


def status_obj(body: bytes) -> dict[str, Any]:
    """The ``Status`` of an error answer; a plain-text answer (``404 page not found``) becomes its message."""
    try:
        data = json.loads(body)
    except ValueError:
        data = None
    if isinstance(data, dict) and data.get("kind") == "Status":
        return data
    return {"message": one_line(body[:300].decode("utf-8", errors="replace"))}


# ---------------------------------------------------------------------------------------------- an HTTP answer

_PERMISSIONS = re.compile(r'requires one of \[([^\]]*)\] permission')
_PRINCIPAL = re.compile(r'User "([^"]+)"')
_MANAGER = re.compile(r'conflict with "([^"]+)"')


def status_error(status: int, obj: Mapping[str, Any], what: str, attempts: int) -> KubeError:
    """One line for an error status, with the fix that status calls for."""
    from raytpu.cluster.http_retry import RETRIED_STATUSES  # urllib3: loaded already by the call that failed

    message = one_line(str(obj.get("message") or ""))[:400]
    head = f"{status} {_phrase(status)}: {what}"
    if status == 401:
        return KubeError(401, f"{head}: the cluster rejected the access token ({message or 'Unauthorized'})",
                         ADC_HELP)
    if status == 403:
        return _forbidden(head, message)
    if status == 404:
        return KubeError(404, f"{head}: {message or 'not found'}", "the name of an object that exists")
    if status == 409:
        return _conflict(head, obj, message)
    if status == 422:
        causes = ", ".join(f"{c.get('field', '')}: {c.get('message', '')}".strip(": ")
                           for c in (obj.get("details") or {}).get("causes") or [] if isinstance(c, dict))
        return KubeError(422, f"{head}: the manifest is invalid ({one_line(causes or message)[:400]})",
                         "a manifest the served CRD schema accepts (check the kit's and KubeRay's versions match)")
    if status in RETRIED_STATUSES:
        tries = f"failed {attempts} times" if attempts > 1 else "failed"
        return KubeError(status, f"{head}: {tries} ({message or 'no message'})",
                         "retry later: the control plane is busy or upgrading (GKE answers 5xx during control-plane "
                         "upgrades and resizes)")
    return KubeError(status, f"{head}: {message or 'no message'}", "a request this cluster accepts")


def namespace_missing(what: str, namespace: object) -> KubeError:
    """A 404 whose ``details`` name the namespace: the stack's namespace is not there."""
    return KubeError(404, f"404 Not Found: {what}: namespace \"{namespace}\" does not exist",
                     "the namespace from the cluster stack's outputs (the stack creates it)")


def not_served(res: Resource) -> KubeError:
    """A resource type the cluster does not serve: for ray.io, the Ray Operator add-on is off."""
    if res.group == "ray.io":
        return KubeError(404, f"404 Not Found: {res.api_version} {res.kind} is not served by this cluster: is the "
                              "Ray Operator add-on enabled?",
                         "a cluster with the Ray Operator add-on (the cluster stack enables it; by hand: `gcloud "
                         "container clusters update CLUSTER --location LOCATION --update-addons=RayOperator=ENABLED`)")
    return KubeError(404, f"404 Not Found: {res.api_version} {res.kind} is not served by this cluster",
                     f"a cluster serving {res.api_version}")


def _forbidden(head: str, message: str) -> KubeError:
    """403: the IAM permission GKE's authorizer names, and who lacks it (custom resources need
    ``container.thirdPartyObjects.*``; roles/container.developer holds both). Source:
    docs/FACTS.md#client-kube-errors."""
    found = _PERMISSIONS.search(message)
    permissions = [p.strip().strip('"') for p in found.group(1).split(",")] if found else []
    who = _PRINCIPAL.search(message)
    principal = who.group(1) if who else "the caller"
    if permissions:
        names = " or ".join(permissions)
        return KubeError(403, f"{head}: missing permission {names} ({message})",
                         f"grant roles/container.developer (or a role with {names}) to {principal}")
    return KubeError(403, f"{head}: {message or 'Forbidden'}",
                     f"grant roles/container.developer, or an RBAC Role allowing this, to {principal}")


def _conflict(head: str, obj: Mapping[str, Any], message: str) -> KubeError:
    """409: for server-side apply, the fields another field manager owns, and that manager (from ``details.causes``).
    Source: docs/FACTS.md#client-kube-errors."""
    causes = [c for c in (obj.get("details") or {}).get("causes") or [] if isinstance(c, dict)]
    managers = sorted({m for c in causes for m in _MANAGER.findall(str(c.get("message", "")))}
                      or set(_MANAGER.findall(message)))
    fields = [str(c.get("field")) for c in causes if c.get("field")]
    if managers:
        owners = ", ".join(f'"{m}"' for m in managers)
        return KubeError(409, f"{head}: field manager {owners} owns {', '.join(fields) or 'fields'} the kit applies",
                         f"leave those fields to {owners} (drop them from the manifest), or delete the object so the "
                         "kit's field manager creates it again")
    return KubeError(409, f"{head}: {message or 'Conflict'}", "apply again once the other change is done")


def _phrase(status: int) -> str:
    try:
        return http.HTTPStatus(status).phrase
    except ValueError:
        return "Error"


# ---------------------------------------------------------------------------------------------- no HTTP answer


def not_json(what: str, data: bytes) -> KubeError:
    """An answer that is not a JSON object (a proxy's HTML page, say)."""
    text = one_line(data[:120].decode(errors="replace"))
    return KubeError(0, f"{what}: the answer is not a JSON object ({text})",
                     "the cluster's API server as the endpoint (not a proxy or load balancer page)")


def stream_broke(what: str, host: str, detail: str) -> KubeError:
    """A streamed answer (a watch, a followed log) that broke and could not be resumed."""
    return KubeError(0, f"{what}: {detail}", f"a stable connection to {host}")


def client_error(exc: Exception, what: str, host: str) -> KubeError:
    """One line for an error the kubernetes client raised before any answer: TLS, or a malformed request."""
    reason = one_line(str(getattr(exc, "reason", None) or exc))
    if reason.startswith("SSLError "):
        return tls_error(what, host, reason.removeprefix("SSLError "))
    return KubeError(0, f"{what}: the request failed ({reason[:300]})", "a request the kubernetes client can send")


def tls_error(what: str, host: str, reason: str) -> KubeError:
    """TLS to the endpoint failed: the CA certificate given is not the cluster's."""
    return KubeError(0, f"{what}: TLS to {host} failed ({reason[:300]})",
                     "the cluster CA certificate from the stack outputs (ca_certificate) for this endpoint")


def transport_error(exc: Exception, what: str, host: str, attempts: int, timeout_s: float,
                    read_timeout: float | None) -> KubeError:
    """One line for a request that got no HTTP answer (``exc`` may be urllib3's MaxRetryError: its reason)."""
    import urllib3

    if isinstance(exc, urllib3.exceptions.MaxRetryError) and isinstance(exc.reason, Exception):
        exc = exc.reason
    reason = one_line(str(getattr(exc, "reason", None) or exc))
    if isinstance(exc, urllib3.exceptions.SSLError):
        return tls_error(what, host, reason)
    if isinstance(exc, urllib3.exceptions.TimeoutError) and not isinstance(
            exc, urllib3.exceptions.NewConnectionError):
        read = isinstance(exc, urllib3.exceptions.ReadTimeoutError)
        limit = (read_timeout if read else None) or timeout_s
        return KubeError(0, f"{what}: no answer from {host} within {limit:g}s",
                         "a reachable, responsive control plane (GKE authorized networks must include this "
                         "machine; retry later if the control plane is upgrading)")
    tries = f" after {attempts} attempts" if attempts > 1 else ""
    return KubeError(0, f"{what}: cannot reach {host}{tries} ({reason})",
                     "the cluster endpoint from the stack outputs, reachable from here (GKE authorized networks, "
                     "or the DNS endpoint)")


def credentials_error(exc: Exception, what: str) -> KubeError:
    """One line for credentials google-auth could not refresh."""
    return KubeError(0, f"{what}: cannot get an access token ({auth_reason(exc)})", ADC_HELP)


def no_credentials(exc: Exception) -> KubeError:
    """One line for Application Default Credentials google-auth could not find."""
    return KubeError(0, f"no Application Default Credentials ({auth_reason(exc)})", ADC_HELP)


def auth_reason(exc: Exception) -> str:
    """google-auth's first argument is the message (a RefreshError's second is the token endpoint's whole answer)."""
    first = exc.args[0] if exc.args and isinstance(exc.args[0], str) else str(exc)
    return one_line(first)[:200]
