"""Talking to a GKE cluster's Kubernetes API: the official ``kubernetes`` client, authenticated by google-auth.

Why not ``kubectl``: the kit runs where only Python is installed (a CI runner with Workload Identity
Federation, a GKE pod, a laptop with ``gcloud auth application-default login``). :class:`KubeClient` needs
the cluster stack's outputs (endpoint, CA certificate, namespace) and Application Default Credentials;
no kubeconfig, no ``kubectl``, no ``gcloud`` at run time.

What it does, and why each way:

- apply: server-side apply (``PATCH``, ``application/apply-patch+yaml``, ``fieldManager``, ``force=false``,
  ``fieldValidation=Strict``), so a field another manager owns is a conflict, not a silent overwrite, and an
  unknown field is an error, not a silently pruned one;
- watch: list, then watch from the list's ``resourceVersion``; a dropped stream resumes from the last
  version seen, an expired one (410 Gone) lists again; bounded by a deadline;
- logs: pod logs as lines, streamed with ``follow``; :meth:`KubeClient.job_logs` finds the pod of KubeRay's
  submitter Job (``K8sJobMode``: a Job named like the RayJob, pods labelled ``job-name=<name>``).

Failures: every API or transport failure is one :class:`KubeError` line (exit 1) of the form
``kubernetes: <status> <reason>: <what>: <problem>; valid: <fix>``: 401 (credentials), 403 (names the IAM
permission GKE asks for), 404 of a resource type (is the Ray Operator add-on enabled?), 409 (names the
other field manager), 5xx/429 and connection errors (retried with backoff, then one line), timeouts.
``kubernetes``, ``urllib3`` and ``google.auth`` are imported inside methods: importing this module is cheap.

GKE cannot be reached from the test machine: ``tests/test_kube.py`` tests this module at the HTTP boundary,
against a loopback HTTPS server that speaks these API paths (``tests/kube_server.py``).
"""

from __future__ import annotations

import base64
import binascii
import http
import json
import math
import re
import time
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from raytpu import errors
from raytpu.errors import RuntimeFailure

if TYPE_CHECKING:
    import google.auth.credentials
    import google.auth.transport.requests
    import urllib3
    from kubernetes.client import ApiClient, Configuration
    from kubernetes.client.rest import RESTResponse

SCOPES = ("https://www.googleapis.com/auth/cloud-platform",)
"""OAuth scope of the access token GKE accepts (what ``gcloud container clusters get-credentials`` uses)."""

APPLY_CONTENT_TYPE = "application/apply-patch+yaml"
USER_AGENT = "raytpu"
RETRIED_STATUSES = frozenset({429, 500, 502, 503, 504})
MAX_PAUSE_S = 30.0
WATCH_CAP_S = 3600
"""The longest single watch request; a longer watch re-watches from the last resourceVersion."""

ADC_HELP = ("Application Default Credentials of a principal with access to the cluster: "
            "`gcloud auth application-default login` on a workstation, Workload Identity Federation in CI "
            "(e.g. google-github-actions/auth), or the service account of the GKE pod it runs in")


class KubeError(RuntimeFailure):
    """One failed Kubernetes API call, as one line; ``status`` is the HTTP status (0: no HTTP answer)."""

    def __init__(self, status: int, problem: str, valid: str) -> None:
        self.status = status
        self.problem = problem
        self.valid = valid
        super().__init__(f"kubernetes: {_one_line(problem)}; valid: {_one_line(valid)}")


@dataclass(frozen=True)
class Resource:
    """A namespaced (or cluster-scoped) kind the kit talks to, and where the API serves it."""

    kind: str
    api_version: str
    plural: str
    namespaced: bool = True

    @property
    def group(self) -> str:
        """The API group (``""`` for the core group)."""
        return self.api_version.rpartition("/")[0]

    @property
    def base(self) -> str:
        """The group-version path, also its discovery document (``/api/v1``, ``/apis/ray.io/v1``)."""
        return f"/apis/{self.api_version}" if self.group else f"/api/{self.api_version}"

    @property
    def display(self) -> str:
        """How kubectl and the API server name it in messages: ``rayjobs.ray.io``, ``pods``."""
        return f"{self.plural}.{self.group}" if self.group else self.plural

    def collection(self, namespace: str) -> str:
        """The path of the collection (in ``namespace`` when namespaced)."""
        return f"{self.base}/namespaces/{namespace}/{self.plural}" if self.namespaced else f"{self.base}/{self.plural}"

    def path(self, namespace: str, name: str) -> str:
        """The path of one object."""
        return f"{self.collection(namespace)}/{name}"


RESOURCES = {r.kind: r for r in (
    Resource("RayJob", "ray.io/v1", "rayjobs"),
    Resource("RayService", "ray.io/v1", "rayservices"),
    Resource("RayCluster", "ray.io/v1", "rayclusters"),
    Resource("Pod", "v1", "pods"),
    Resource("Service", "v1", "services"),
    Resource("ConfigMap", "v1", "configmaps"),
    Resource("Secret", "v1", "secrets"),
    Resource("ServiceAccount", "v1", "serviceaccounts"),
    Resource("Event", "v1", "events"),
    Resource("Node", "v1", "nodes", namespaced=False),
    Resource("Namespace", "v1", "namespaces", namespaced=False),
    Resource("Job", "batch/v1", "jobs"),
    Resource("NetworkPolicy", "networking.k8s.io/v1", "networkpolicies"),
    Resource("Ingress", "networking.k8s.io/v1", "ingresses"),
    Resource("CustomResourceDefinition", "apiextensions.k8s.io/v1", "customresourcedefinitions", namespaced=False),
)}
"""The kinds :class:`KubeClient` knows, by kind; :func:`resource` also accepts ``rayjob`` and ``rayjobs``."""


def resource(kind: str) -> Resource:
    """The Resource of ``kind`` (``RayJob``, ``rayjob`` or ``rayjobs``); InvalidInput (exit 2) when unknown."""
    wanted = kind.lower()
    for res in RESOURCES.values():
        if wanted in (res.kind.lower(), res.plural):
            return res
    raise errors.invalid_choice("kind", kind, sorted(RESOURCES))


def api_host(endpoint: str) -> str:
    """The API server URL of a stack's ``endpoint`` output: a host or IP (GKE's output) or a full https URL."""
    value = endpoint.strip().rstrip("/")
    if not value:
        raise errors.missing("endpoint", "to reach the cluster", "the cluster stack's endpoint output (an IP or host)")
    if "://" not in value:
        return f"https://{value}"
    if not value.startswith("https://"):
        raise errors.invalid_value("endpoint", endpoint, "is not an https URL",
                                   "a host, an IP, or https://HOST[:PORT] (GKE serves its API over https only)")
    return value


def ca_pem(ca_certificate: str | None) -> str | None:
    """The PEM of GKE's ``cluster_ca_certificate`` output (base64 of a PEM); PEM itself is accepted too. None or
    empty: trust the system CAs (GKE's DNS-based endpoint has a publicly trusted certificate)."""
    if not ca_certificate:
        return None
    if "-----BEGIN" in ca_certificate:
        return ca_certificate
    try:
        text = base64.b64decode(ca_certificate.strip(), validate=True).decode("ascii")
    except (binascii.Error, UnicodeDecodeError):
        text = ""
    if "-----BEGIN CERTIFICATE-----" not in text:
        raise errors.invalid_value("ca_certificate", ca_certificate[:24] + "...", "is not a base64-encoded PEM "
                                   "certificate", "the cluster stack's CA certificate output, as GKE outputs it")
    return text


class KubeClient:
    """The Kubernetes API of one cluster and namespace, as the kit uses it.

    Args:
        endpoint: the API server: an IP or host (GKE's ``endpoint`` output) or ``https://HOST[:PORT]``.
        ca_certificate: the cluster CA, base64-encoded PEM as GKE outputs it; None trusts the system CAs
            (GKE's DNS endpoint has a publicly trusted certificate).
        namespace: where namespaced objects live (the stack's namespace output).
        credentials: google-auth credentials; default: Application Default Credentials with the
            cloud-platform scope (a user login, Workload Identity Federation, a GKE pod's identity).
        timeout_s: the connect and read timeout of one request (a watch or followed log waits longer).
        retries: how many times a 5xx, 429, connection error or dropped watch is retried, with backoff.
        field_manager: the server-side apply field manager: the owner of the fields the kit applies.
        backoff_s: the first pause between retries; it doubles on each retry (at most 30 s).
    """

    def __init__(self, endpoint: str, ca_certificate: str | None, namespace: str,
                 credentials: google.auth.credentials.Credentials | None = None, *, timeout_s: float = 30.0,
                 retries: int = 3, field_manager: str = "raytpu", backoff_s: float = 1.0) -> None:
        self.host = api_host(endpoint)
        self.ca_pem = ca_pem(ca_certificate)
        self.namespace = namespace
        self.timeout_s = timeout_s
        self.retries = retries
        self.field_manager = field_manager
        self.backoff_s = backoff_s
        self._credentials = credentials
        self._api: ApiClient | None = None
        self._auth_request: google.auth.transport.requests.Request | None = None
        self._served: dict[str, frozenset[str]] = {}

    # ------------------------------------------------------------------------------------ the public API

    def apply(self, obj: Mapping[str, Any]) -> dict[str, Any]:
        """Server-side applies ``obj`` (created or updated; fields of other managers conflict); the server's object."""
        res, name = _manifest_target(obj)
        namespace = str((obj.get("metadata") or {}).get("namespace") or self.namespace)
        what = _what("apply", res, name, namespace)
        query = [("fieldManager", self.field_manager), ("force", "false"), ("fieldValidation", "Strict")]
        out = self._json(what, "PATCH", res.path(namespace, name), res, name, query=query, body=dict(obj),
                         content_type=APPLY_CONTENT_TYPE)
        if out is None:
            raise KubeError(404, f"404 Not Found: {what}: the server answered not found",
                            "a cluster and namespace that serve this object")
        return out

    def check_schema(self, obj: Mapping[str, Any], needs: str) -> None:
        """Refuses ``obj`` before it is applied when the cluster's CRD of its kind does not declare every field it
        sets: KubeRay's CRDs grow fields release by release, and an older operator (GKE's Ray Operator add-on
        follows the cluster's version) would reject or silently drop them. ``needs`` names the oldest KubeRay the
        kit supports. No check when reading CRDs is forbidden (the apply then reports what the server says).

        Raises:
            KubeError: a field the served CRD lacks, named with its path.
        """
        res, _ = _manifest_target(obj)
        name, crds = res.display, RESOURCES["CustomResourceDefinition"]
        try:
            crd = self._json(_what("get", crds, name, ""), "GET", crds.path("", name), crds, name)
        except KubeError as exc:
            if exc.status == 403:
                return
            raise
        if crd is None:
            raise _not_served(res)
        version = res.api_version.rpartition("/")[2]
        served = [v for v in crd.get("spec", {}).get("versions", []) if v.get("name") == version]
        schema = (served[0].get("schema") or {}).get("openAPIV3Schema") if served else None
        missing = undeclared_fields(obj, schema or {})
        if missing:
            raise KubeError(422, f"the cluster's {name} (KubeRay) does not declare {', '.join(missing[:3])}"
                            f"{f' and {len(missing) - 3} more' if len(missing) > 3 else ''}: its KubeRay is older "
                            f"than the kit's objects need", f"KubeRay {needs} or newer: a GKE version whose Ray "
                            "Operator add-on ships it (the add-on follows the cluster's version)")

    def get(self, kind: str, name: str) -> dict[str, Any] | None:
        """The object, or None when it does not exist (a missing resource type is an error, not None)."""
        res = resource(kind)
        return self._json(_what("get", res, name, self.namespace), "GET", res.path(self.namespace, name), res, name)

    def delete(self, kind: str, name: str) -> bool:
        """Deletes the object and what it owns (background propagation); False when it did not exist."""
        res = resource(kind)
        what = _what("delete", res, name, self.namespace)
        out = self._json(what, "DELETE", res.path(self.namespace, name), res, name,
                         query=[("propagationPolicy", "Background")])
        return out is not None

    def watch(self, kind: str, name: str, resource_version: str | None = None,
              timeout_s: float = 600.0) -> Iterator[dict[str, Any]]:
        """Yields the object on each change until it is deleted or ``timeout_s`` passes.

        Without ``resource_version``, the object is listed first (and yielded when it exists), then watched
        from the list's version. A dropped stream resumes from the last version seen; an expired version
        (410 Gone) lists again and continues from there. The consumer may stop at any time (``break``).
        """
        res = resource(kind)
        deadline = time.monotonic() + timeout_s
        version = resource_version
        if version is None:
            obj, version = self._list_one(res, name)
            if obj is not None:
                yield obj
        failures = 0
        while (left := deadline - time.monotonic()) > 0:
            started = time.monotonic()
            try:
                for event_type, obj in self._watch_stream(res, name, version, left):
                    version = _resource_version(obj) or version
                    failures = 0
                    if event_type == "DELETED":
                        return
                    if event_type in ("ADDED", "MODIFIED"):
                        yield obj
            except _Expired:
                obj, version = self._list_one(res, name)
                if obj is not None:
                    yield obj
                continue
            except _Dropped as drop:
                if time.monotonic() - started >= self.timeout_s:
                    failures = 0
                failures += 1
                if failures > self.retries:
                    raise KubeError(0, f"{_what('watch', res, name, self.namespace)}: the stream broke "
                                       f"{failures} times in a row ({drop})",
                                    f"a stable connection to {self.host}") from None
                self._pause(failures - 1)

    def pods(self, label_selector: str) -> list[dict[str, Any]]:
        """Pods in the namespace matching ``label_selector`` (e.g. ``job-name=smoke-x``)."""
        return self._list(resource("Pod"), [("labelSelector", label_selector)])

    def all_pods(self, field_selector: str = "", label_selector: str = "") -> list[dict[str, Any]]:
        """Pods of every namespace (e.g. ``spec.nodeName=<node>``: what holds a node, whoever runs it)."""
        res = resource("Pod")
        query = [*([("fieldSelector", field_selector)] if field_selector else []),
                 *([("labelSelector", label_selector)] if label_selector else [])]
        data = self._json(_what("list", res, None, "*"), "GET", f"{res.base}/{res.plural}", res, None,
                          query=query) or {}
        return [item for item in data.get("items") or [] if isinstance(item, dict)]

    def nodes(self, label_selector: str) -> list[dict[str, Any]]:
        """Nodes matching ``label_selector`` (e.g. a TPU node pool's ``cloud.google.com/gke-nodepool=...``)."""
        return self._list(resource("Node"), [("labelSelector", label_selector)])

    def events(self, field_selector: str) -> list[dict[str, Any]]:
        """Events in the namespace matching ``field_selector`` (e.g. ``involvedObject.name=...``)."""
        return self._list(resource("Event"), [("fieldSelector", field_selector)])

    def logs(self, pod: str, container: str | None = None, follow: bool = False) -> Iterator[str]:
        """The pod's log lines (without newlines); with ``follow``, streamed until the container exits."""
        res = resource("Pod")
        what = f'get logs of pod "{pod}" in namespace "{self.namespace}"'
        query = [*([("container", container)] if container else []), *([("follow", "true")] if follow else [])]
        raw = self._open(what, res.path(self.namespace, pod) + "/log", res, pod, query,
                         read_timeout=None if follow else self.timeout_s, accept="text/plain")
        try:
            for line in _lines(raw):
                yield line.decode("utf-8", errors="replace")
        except _Dropped as drop:
            raise KubeError(0, f"{what}: the log stream broke ({drop})",
                            f"a stable connection to {self.host}") from None
        finally:
            _release(raw)

    def job_logs(self, job_name: str, follow: bool = False) -> Iterator[str]:
        """Log lines of the newest pod of Job ``job_name`` (KubeRay's submitter Job is named like the RayJob).

        Yields nothing when the Job has no pod (not started yet, or cleaned up).
        """
        pods = self.pods(f"job-name={job_name}")
        if not pods:
            return
        newest = max(pods, key=lambda p: str(p.get("metadata", {}).get("creationTimestamp", "")))
        yield from self.logs(str(newest["metadata"]["name"]), follow=follow)

    def close(self) -> None:
        """Closes the connection pool."""
        if self._api is not None:
            self._api.close()
            self._api = None

    def __enter__(self) -> KubeClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------------------------------ reading and watching

    def _list(self, res: Resource, query: list[tuple[str, str]]) -> list[dict[str, Any]]:
        """The items of a list call."""
        data = self._json(_what("list", res, None, self.namespace), "GET", res.collection(self.namespace), res,
                          None, query=query) or {}
        return [item for item in data.get("items") or [] if isinstance(item, dict)]

    def _list_one(self, res: Resource, name: str) -> tuple[dict[str, Any] | None, str]:
        """The object (None when absent) and the list's resourceVersion, the point a watch starts from."""
        query = [("fieldSelector", f"metadata.name={name}")]
        data = self._json(_what("list", res, name, self.namespace), "GET", res.collection(self.namespace), res, None,
                          query=query) or {}
        items = [item for item in data.get("items") or [] if isinstance(item, dict)]
        return (items[0] if items else None), str((data.get("metadata") or {}).get("resourceVersion") or "")

    def _watch_stream(self, res: Resource, name: str, version: str,
                      left_s: float) -> Iterator[tuple[str, dict[str, Any]]]:
        """One watch request's ``(type, object)`` events; raises _Expired (410) and _Dropped (a broken stream)."""
        what = _what("watch", res, name, self.namespace)
        query = [("watch", "1"), ("fieldSelector", f"metadata.name={name}"), ("allowWatchBookmarks", "true"),
                 ("timeoutSeconds", str(max(1, min(math.ceil(left_s), WATCH_CAP_S))))]
        if version:
            query.insert(1, ("resourceVersion", version))
        try:
            raw = self._open(what, res.collection(self.namespace), res, None, query,
                             read_timeout=min(left_s, WATCH_CAP_S) + self.timeout_s)
        except KubeError as exc:
            if exc.status == 410:
                raise _Expired() from None
            raise
        try:
            for line in _lines(raw):
                if not line.strip():
                    continue
                event = _parse_json(line, what)
                obj = event.get("object")
                if not isinstance(obj, dict):
                    obj = {}
                if event.get("type") == "ERROR":
                    if obj.get("code") == 410:
                        raise _Expired()
                    raise _status_error(int(obj.get("code") or 0), obj, what, 1)
                yield str(event.get("type")), obj
        finally:
            _release(raw)

    # ------------------------------------------------------------------------------------ one request

    def _json(self, what: str, method: str, path: str, res: Resource, name: str | None, *,
              query: Iterable[tuple[str, str]] = (), body: dict[str, Any] | None = None,
              content_type: str | None = None) -> dict[str, Any] | None:
        """A JSON call; None when the named object does not exist."""
        try:
            reply = self._send(what, method, path, list(query), body, content_type, self.timeout_s, "application/json")
        except _HttpFailure as failure:
            self._absent_or_raise(failure, what, res, name)
            return None
        return _parse_json(reply.read(), what)

    def _open(self, what: str, path: str, res: Resource, name: str | None, query: list[tuple[str, str]], *,
              read_timeout: float | None, accept: str = "application/json") -> urllib3.BaseHTTPResponse:
        """A streamed GET: the open response, to read incrementally and release."""
        try:
            reply = self._send(what, "GET", path, query, None, None, read_timeout, accept, stream=True)
        except _HttpFailure as failure:
            self._absent_or_raise(failure, what, res, name)
            raise _status_error(404, failure.status_obj, what, failure.attempts) from None
        return reply.response

    def _absent_or_raise(self, failure: _HttpFailure, what: str, res: Resource, name: str | None) -> None:
        """Raises the KubeError of a failed call; returns (None) only when the named object does not exist."""
        if failure.status != 404:
            raise _status_error(failure.status, failure.status_obj, what, failure.attempts)
        details = failure.status_obj.get("details") or {}
        if details.get("kind") == "namespaces":
            raise KubeError(404, f"404 Not Found: {what}: namespace \"{details.get('name')}\" does not exist",
                            "the namespace from the cluster stack's outputs (the stack creates it)")
        if name is not None and details.get("name") == name:
            return None
        if res.plural not in self._served_plurals(res):
            raise _not_served(res)
        if name is not None:
            return None
        raise _status_error(404, failure.status_obj, what, failure.attempts)

    def _served_plurals(self, res: Resource) -> frozenset[str]:
        """The resources the API serves in ``res``'s group-version (discovery); empty when the group is absent."""
        if res.api_version not in self._served:
            what = f"discover {res.api_version}"
            try:
                reply = self._send(what, "GET", res.base, [], None, None, self.timeout_s, "application/json")
                data = _parse_json(reply.read(), what)
                found = frozenset(str(r.get("name")) for r in data.get("resources") or [] if isinstance(r, dict))
            except _HttpFailure as failure:
                if failure.status != 404:
                    raise _status_error(failure.status, failure.status_obj, what, failure.attempts) from None
                found = frozenset()
            self._served[res.api_version] = found
        return self._served[res.api_version]

    def _send(self, what: str, method: str, path: str, query: list[tuple[str, str]], body: dict[str, Any] | None,
              content_type: str | None, read_timeout: float | None, accept: str, stream: bool = False) -> RESTResponse:
        """Sends one call, retrying 5xx, 429 and connection errors; a 401 refreshes the token once.

        Returns the response of a 2xx/3xx answer, read whole unless ``stream``; raises _HttpFailure for an
        error status, KubeError for a transport or credentials failure.
        """
        import urllib3
        from google.auth.exceptions import GoogleAuthError
        from kubernetes.client.exceptions import ApiException

        attempt, refreshed = 0, False
        while True:
            try:
                reply = self._call(method, path, query, body, content_type, read_timeout, accept)
                if not stream or reply.status >= 400:
                    reply.read()  # here, so that a connection broken mid-answer is retried too
            except GoogleAuthError as exc:
                raise _credentials_error(exc, what) from None
            except ApiException as exc:  # the client raises urllib3's SSLError as a status-0 ApiException
                raise self._client_error(exc, what) from None
            except urllib3.exceptions.HTTPError as exc:
                if not _transient(exc) or attempt >= self.retries:
                    raise self._transport_error(exc, what, attempt + 1, read_timeout) from None
                self._pause(attempt)
                attempt += 1
                continue
            if reply.status < 400:
                return reply
            failure = _HttpFailure(reply.status, reply.read(), attempt + 1)
            if reply.status == 401 and not refreshed:
                refreshed = True
                try:
                    self._refresh(force=True)
                except GoogleAuthError as exc:
                    raise _credentials_error(exc, what) from None
                continue
            if reply.status in RETRIED_STATUSES and attempt < self.retries:
                self._pause(attempt, reply.headers.get("Retry-After"))
                attempt += 1
                continue
            raise failure

    def _call(self, method: str, path: str, query: list[tuple[str, str]], body: dict[str, Any] | None,
              content_type: str | None, read_timeout: float | None, accept: str) -> RESTResponse:
        """One HTTP request through the kubernetes client (bearer token added by its auth settings)."""
        api = self._client()
        headers = {"Accept": accept, **({"Content-Type": content_type} if content_type else {})}
        request = api.param_serialize(method, path, query_params=query or None, header_params=headers, body=body,
                                      auth_settings=["BearerToken"])
        return api.call_api(*request, _request_timeout=(self.timeout_s, read_timeout))

    def _client_error(self, exc: Exception, what: str) -> KubeError:
        """One line for an error the kubernetes client raised before any answer: TLS, or a malformed request."""
        reason = _one_line(str(getattr(exc, "reason", None) or exc))
        if reason.startswith("SSLError "):
            return self._tls_error(what, reason.removeprefix("SSLError "))
        return KubeError(0, f"{what}: the request failed ({reason[:300]})", "a request the kubernetes client can send")

    def _tls_error(self, what: str, reason: str) -> KubeError:
        return KubeError(0, f"{what}: TLS to {self.host} failed ({reason[:300]})",
                         "the cluster CA certificate from the stack outputs (ca_certificate) for this endpoint")

    def _transport_error(self, exc: Exception, what: str, attempts: int, read_timeout: float | None) -> KubeError:
        """One line for a request that got no HTTP answer."""
        import urllib3

        reason = _one_line(str(getattr(exc, "reason", None) or exc))
        if isinstance(exc, urllib3.exceptions.SSLError):
            return self._tls_error(what, reason)
        if isinstance(exc, urllib3.exceptions.TimeoutError) and not isinstance(
                exc, urllib3.exceptions.NewConnectionError):
            read = isinstance(exc, urllib3.exceptions.ReadTimeoutError)
            limit = (read_timeout if read else None) or self.timeout_s
            return KubeError(0, f"{what}: no answer from {self.host} within {limit:g}s",
                             "a reachable, responsive control plane (GKE authorized networks must include this "
                             "machine; retry later if the control plane is upgrading)")
        tries = f" after {attempts} attempts" if attempts > 1 else ""
        return KubeError(0, f"{what}: cannot reach {self.host}{tries} ({reason})",
                         "the cluster endpoint from the stack outputs, reachable from here (GKE authorized networks, "
                         "or the DNS endpoint)")

    def _pause(self, attempt: int, retry_after: str | None = None) -> None:
        """Sleeps before retry ``attempt`` (0-based): exponential backoff, or the server's Retry-After if longer."""
        delay = self.backoff_s * 2 ** attempt
        if retry_after and retry_after.strip().isdigit():
            delay = max(delay, float(retry_after))
        time.sleep(min(delay, MAX_PAUSE_S))

    # ------------------------------------------------------------------------------------ client and credentials

    def _client(self) -> ApiClient:
        """The kubernetes ApiClient, made on first use: TLS to the cluster CA, a google-auth bearer token."""
        if self._api is None:
            from kubernetes.client import ApiClient, Configuration

            config = Configuration(host=self.host, ca_cert_data=self.ca_pem, api_key={"BearerToken": ""},
                                   api_key_prefix={"BearerToken": "Bearer"})
            config.retries = False  # raise transport errors at once: _send retries them, with backoff
            config.refresh_api_key_hook = self._refresh_hook  # type: ignore[assignment]  # typed as None
            self._api = ApiClient(config)
            self._api.user_agent = USER_AGENT
        return self._api

    def _refresh_hook(self, config: Configuration) -> None:
        """Runs before each request (the client's refresh hook): a token refreshed before it expires."""
        config.api_key["BearerToken"] = self._refresh()

    def _refresh(self, force: bool = False) -> str:
        """The current access token, refreshed first when ``force``d or no longer fresh (google-auth's
        FRESH: more than 3m45s left). GoogleAuthError propagates: _send names the call it failed."""
        from google.auth.credentials import TokenState

        creds = self._creds()
        if force or creds.token_state != TokenState.FRESH:
            creds.refresh(self._token_request())
        return str(creds.token)

    def _creds(self) -> google.auth.credentials.Credentials:
        """The credentials given, else Application Default Credentials (cloud-platform scope)."""
        if self._credentials is None:
            import google.auth
            from google.auth.exceptions import GoogleAuthError

            try:
                self._credentials, _ = google.auth.default(scopes=list(SCOPES))
            except GoogleAuthError as exc:
                raise KubeError(0, f"no Application Default Credentials ({_auth_reason(exc)})",
                                ADC_HELP) from None
        return self._credentials

    def _token_request(self) -> google.auth.transport.requests.Request:
        """google-auth's HTTP transport for token refreshes (one session, reused)."""
        if self._auth_request is None:
            import google.auth.transport.requests

            self._auth_request = google.auth.transport.requests.Request()
        return self._auth_request


# ---------------------------------------------------------------------------------------------- internals


class _HttpFailure(Exception):
    """An error status the API answered (after retries); the public methods turn it into a KubeError."""

    def __init__(self, status: int, body: bytes, attempts: int) -> None:
        super().__init__(status)
        self.status = status
        self.status_obj = _status_obj(body)
        self.attempts = attempts


class _Expired(Exception):
    """A watch's resourceVersion is too old (410 Gone): list again."""


class _Dropped(Exception):
    """A stream broke before its end: watch again from the last resourceVersion."""


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


def _manifest_target(obj: Mapping[str, Any]) -> tuple[Resource, str]:
    """The Resource and name of a manifest; InvalidInput when it lacks either or the apiVersion is wrong."""
    res = resource(str(obj.get("kind", "")))
    if obj.get("apiVersion") != res.api_version:
        raise errors.invalid_value("manifest.apiVersion", obj.get("apiVersion"), f"is not served for {res.kind}",
                                   res.api_version)
    name = (obj.get("metadata") or {}).get("name")
    if not name:
        raise errors.missing("manifest.metadata.name", f"to apply a {res.kind}", "a DNS-1123 name")
    return res, str(name)


def _what(verb: str, res: Resource, name: str | None, namespace: str) -> str:
    """The call, as kubectl phrases it: ``get rayjobs.ray.io "x" in namespace "ray"``."""
    target = f'{res.display} "{name}"' if name else res.display
    return f'{verb} {target} in namespace "{namespace}"' if res.namespaced else f"{verb} {target}"


def _one_line(text: str) -> str:
    return " ".join(str(text).split())


def _resource_version(obj: Mapping[str, Any]) -> str:
    return str((obj.get("metadata") or {}).get("resourceVersion") or "")


def _parse_json(data: bytes, what: str) -> dict[str, Any]:
    """A JSON object from the API; KubeError when the answer is not one (a proxy's HTML page, say)."""
    try:
        out = json.loads(data)
    except ValueError:
        out = None
    if not isinstance(out, dict):
        text = _one_line(data[:120].decode(errors="replace"))
        raise KubeError(0, f"{what}: the answer is not a JSON object ({text})",
                        "the cluster's API server as the endpoint (not a proxy or load balancer page)")
    return out


def _status_obj(body: bytes) -> dict[str, Any]:
    """The ``Status`` of an error answer; a plain-text answer (``404 page not found``) becomes its message."""
    try:
        data = json.loads(body)
    except ValueError:
        data = None
    if isinstance(data, dict) and data.get("kind") == "Status":
        return data
    return {"message": _one_line(body[:300].decode("utf-8", errors="replace"))}


def _lines(raw: urllib3.BaseHTTPResponse) -> Iterator[bytes]:
    """The lines of a streamed answer as they arrive; _Dropped when the stream breaks."""
    import urllib3

    pending = b""
    try:
        for chunk in raw.stream(2**16):
            pending += chunk
            *complete, pending = pending.split(b"\n")
            yield from complete
    except (urllib3.exceptions.HTTPError, OSError) as exc:
        raise _Dropped(_one_line(str(exc))[:200]) from None
    if pending:
        yield pending


def _release(raw: urllib3.BaseHTTPResponse) -> None:
    """Closes a streamed response (its connection may be mid-stream, so it is not reused)."""
    raw.close()
    raw.release_conn()


def _transient(exc: Exception) -> bool:
    """Whether a transport error is worth retrying: not TLS trust, not a timeout (already waited)."""
    import urllib3

    if isinstance(exc, urllib3.exceptions.SSLError):
        return False
    if isinstance(exc, urllib3.exceptions.NewConnectionError):
        return True
    return not isinstance(exc, urllib3.exceptions.TimeoutError)


def _credentials_error(exc: Exception, what: str) -> KubeError:
    """One line for credentials google-auth could not find or refresh (its first argument is the message;
    a RefreshError's second is the token endpoint's whole answer)."""
    return KubeError(0, f"{what}: cannot get an access token ({_auth_reason(exc)})", ADC_HELP)


def _auth_reason(exc: Exception) -> str:
    first = exc.args[0] if exc.args and isinstance(exc.args[0], str) else str(exc)
    return _one_line(first)[:200]


def _not_served(res: Resource) -> KubeError:
    """A resource type the cluster does not serve: for ray.io, the Ray Operator add-on is off."""
    if res.group == "ray.io":
        return KubeError(404, f"404 Not Found: {res.api_version} {res.kind} is not served by this cluster: is the "
                              "Ray Operator add-on enabled?",
                         "a cluster with the Ray Operator add-on (the cluster stack enables it; by hand: `gcloud "
                         "container clusters update CLUSTER --location LOCATION --update-addons=RayOperator=ENABLED`)")
    return KubeError(404, f"404 Not Found: {res.api_version} {res.kind} is not served by this cluster",
                     f"a cluster serving {res.api_version}")


_PERMISSIONS = re.compile(r'requires one of \[([^\]]*)\] permission')
_PRINCIPAL = re.compile(r'User "([^"]+)"')
_MANAGER = re.compile(r'conflict with "([^"]+)"')


def _status_error(status: int, obj: Mapping[str, Any], what: str, attempts: int) -> KubeError:
    """One line for an error status, with the fix that status calls for."""
    message = _one_line(str(obj.get("message") or ""))[:400]
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
        return KubeError(422, f"{head}: the manifest is invalid ({_one_line(causes or message)[:400]})",
                         "a manifest the served CRD schema accepts (check the kit's and KubeRay's versions match)")
    if status in RETRIED_STATUSES:
        tries = f"failed {attempts} times" if attempts > 1 else "failed"
        return KubeError(status, f"{head}: {tries} ({message or 'no message'})",
                         "retry later: the control plane is busy or upgrading (GKE answers 5xx during control-plane "
                         "upgrades and resizes)")
    return KubeError(status, f"{head}: {message or 'no message'}", "a request this cluster accepts")


def _forbidden(head: str, message: str) -> KubeError:
    """403: the IAM permission GKE names, and who lacks it.

    GKE's authorizer answers, e.g. (apache/airflow#37795): ``pods is forbidden: User "..." cannot create
    resource "pods" in API group "" in the namespace "staging": requires one of ["container.pods.create"]
    permission(s).``; custom resources (RayJob) need ``container.thirdPartyObjects.*``
    (cloud.google.com/kubernetes-engine/docs/reference/api-permissions). roles/container.developer holds both.
    """
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
    """409: for server-side apply, the fields another field manager owns, and that manager.

    The API server answers (fabric8io/kubernetes-client#6047): message ``Apply failed with 1 conflict: conflict
    with "elastic-operator" using elasticsearch.k8s.elastic.co/v1: .spec.nodeSets``, and one ``details.causes``
    entry per field: ``{"reason": "FieldManagerConflict", "message": "conflict with ...", "field": ".spec..."}``.
    """
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
