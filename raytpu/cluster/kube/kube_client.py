"""The Kubernetes API of one cluster and namespace, as the kit uses it: :class:`KubeClient`.

Server-side apply with ``force=false`` and ``fieldValidation=Strict`` (a field another manager owns is a conflict, an
unknown field an error); watches that resume; pod logs, streamed; one request path for every kind through the
``kubernetes`` client's generic ``ApiClient`` (the server's JSON as it came), a google-auth token refreshed before
expiry and on 401, failures as :class:`~raytpu.cluster.kube.kube_errors.KubeError` lines. Source:
docs/FACTS.md#client-kube-client. Cheap to import. Tested at the HTTP boundary against a loopback server
(``tests/kube_server.py``)."""

from __future__ import annotations

import base64
import binascii
import json
import math
import time
from collections.abc import Iterable, Iterator, Mapping
from typing import TYPE_CHECKING, Any

from raytpu.cluster.kube.crd_schema import check_declared
from raytpu.cluster.kube.kube_errors import (
    KubeError,
    client_error,
    credentials_error,
    namespace_missing,
    no_credentials,
    not_json,
    not_served,
    one_line,
    status_error,
    status_obj,
    stream_broke,
    transport_error,
)
from raytpu.core.common import errors
from raytpu.core.manifests.kube_resources import RESOURCES, Resource, describe_call, manifest_target, resource

if TYPE_CHECKING:
    import google.auth.credentials
    import google.auth.transport.requests
    import urllib3
    from kubernetes.client import ApiClient, Configuration
    from kubernetes.client.rest import RESTResponse

    from raytpu.cluster.http_retry import HttpRetry

SCOPES = ("https://www.googleapis.com/auth/cloud-platform",)
"""OAuth scope of the access token GKE accepts (what ``gcloud container clusters get-credentials`` uses)."""

APPLY_CONTENT_TYPE = "application/apply-patch+yaml"
USER_AGENT = "raytpu"
WATCH_CAP_S = 3600
"""The longest single watch request; a longer watch re-watches from the last resourceVersion."""


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
    """The Kubernetes API of one cluster and namespace. ``endpoint``: GKE's ``endpoint`` output or
    ``https://HOST[:PORT]``; ``ca_certificate``: base64 PEM as GKE outputs it (None: system CAs); ``credentials``:
    default ADC with the cloud-platform scope; ``timeout_s``: one request's connect and read timeout; ``retries``,
    ``backoff_s``: retries of a 5xx, 429, connection error or dropped watch, the first pause doubling (at most 30 s);
    ``field_manager``: the owner of the fields the kit applies."""

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
        self._retry: HttpRetry | None = None
        self._auth_request: google.auth.transport.requests.Request | None = None
        self._served: dict[str, frozenset[str]] = {}

    # ------------------------------------------------------------------------------------ the public API

    def in_namespace(self, namespace: str) -> KubeClient:
        """A client of the same cluster and credentials in another namespace (a team's, Kueue's); close it after."""
        other = KubeClient(self.host, None, namespace, self._credentials, timeout_s=self.timeout_s,
                           retries=self.retries, field_manager=self.field_manager, backoff_s=self.backoff_s)
        other.ca_pem = self.ca_pem
        return other

    def apply(self, obj: Mapping[str, Any]) -> dict[str, Any]:
        """Server-side applies ``obj`` (created or updated; fields of other managers conflict); the server's object."""
        res, name = manifest_target(obj)
        namespace = str((obj.get("metadata") or {}).get("namespace") or self.namespace)
        what = describe_call("apply", res, name, namespace)
        query = [("fieldManager", self.field_manager), ("force", "false"), ("fieldValidation", "Strict")]
        out = self._json(what, "PATCH", res.path(namespace, name), res, name, query=query, body=dict(obj),
                         content_type=APPLY_CONTENT_TYPE)
        if out is None:
            raise KubeError(404, f"404 Not Found: {what}: the server answered not found",
                            "a cluster and namespace that serve this object")
        return out

    def check_schema(self, obj: Mapping[str, Any], needs: str) -> None:
        """Refuses ``obj`` (KubeError naming the field's path) when the cluster's CRD of its kind lacks a field it sets
        (:mod:`raytpu.cluster.kube.crd_schema`; ``needs``: the oldest KubeRay supported). No check when reading CRDs is
        forbidden."""
        res, _ = manifest_target(obj)
        name, crds = res.display, RESOURCES["CustomResourceDefinition"]
        try:
            crd = self._json(describe_call("get", crds, name, ""), "GET", crds.path("", name), crds, name)
        except KubeError as exc:
            if exc.status == 403:
                return
            raise
        if crd is None:
            raise not_served(res)
        check_declared(obj, res, crd, needs)

    def get(self, kind: str, name: str) -> dict[str, Any] | None:
        """The object, or None when it does not exist (a missing resource type is an error, not None)."""
        res = resource(kind)
        return self._json(describe_call("get", res, name, self.namespace), "GET", res.path(self.namespace, name),
                          res, name)

    def delete(self, kind: str, name: str) -> bool:
        """Deletes the object and what it owns (background propagation); False when it did not exist."""
        res = resource(kind)
        what = describe_call("delete", res, name, self.namespace)
        out = self._json(what, "DELETE", res.path(self.namespace, name), res, name,
                         query=[("propagationPolicy", "Background")])
        return out is not None

    def watch(self, kind: str, name: str, resource_version: str | None = None,
              timeout_s: float = 600.0) -> Iterator[dict[str, Any]]:
        """Yields the object on each change until it is deleted or ``timeout_s`` passes. Lists first unless given
        ``resource_version``; resumes a dropped stream from the last version, lists again on 410 Gone; drops in a row
        pause by the request policy. Hand-written: kubernetes 37.0.2 ``Watch.stream`` does neither
        (docs/FACTS.md#client-kube-client)."""
        from urllib3.exceptions import MaxRetryError

        res = resource(kind)
        what = describe_call("watch", res, name, self.namespace)
        deadline = time.monotonic() + timeout_s
        version = resource_version
        if version is None:
            obj, version = self._list_one(res, name)
            if obj is not None:
                yield obj
        retry = self._retry_policy()
        while (left := deadline - time.monotonic()) > 0:
            started = time.monotonic()
            try:
                for event_type, obj in self._watch_stream(res, name, version, left):
                    version = _resource_version(obj) or version
                    retry = self._retry_policy()
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
                    retry = self._retry_policy()  # a stream that lasted is not a failure in a row
                try:
                    retry = retry.increment("GET", res.collection(self.namespace), error=drop)
                except MaxRetryError as exc:
                    raise stream_broke(what, self.host, f"the stream broke {len(retry.history) + 1} times in a row "
                                                        f"({drop})") from exc
                retry.sleep()

    def objects(self, kind: str, label_selector: str) -> list[dict[str, Any]]:
        """Objects of ``kind`` in the namespace matching ``label_selector`` (e.g. the kit's RayJobs)."""
        return self._list(resource(kind), [("labelSelector", label_selector)])

    def pods(self, label_selector: str) -> list[dict[str, Any]]:
        """Pods in the namespace matching ``label_selector`` (e.g. ``job-name=smoke-x``)."""
        return self._list(resource("Pod"), [("labelSelector", label_selector)])

    def all_pods(self, field_selector: str = "", label_selector: str = "") -> list[dict[str, Any]]:
        """Pods of every namespace (e.g. ``spec.nodeName=<node>``: what holds a node, whoever runs it)."""
        res = resource("Pod")
        query = [*([("fieldSelector", field_selector)] if field_selector else []),
                 *([("labelSelector", label_selector)] if label_selector else [])]
        data = self._json(describe_call("list", res, None, "*"), "GET", f"{res.base}/{res.plural}", res, None,
                          query=query) or {}
        return _items(data)

    def nodes(self, label_selector: str) -> list[dict[str, Any]]:
        """Nodes matching ``label_selector`` (e.g. a TPU node pool's ``cloud.google.com/gke-nodepool=...``)."""
        return self._list(resource("Node"), [("labelSelector", label_selector)])

    def listed(self, kind: str, label_selector: str = "") -> list[dict[str, Any]]:
        """Every object of ``kind`` (cluster-scoped kinds: the cluster's; namespaced: the namespace's), read-only."""
        return self._list(resource(kind), [("labelSelector", label_selector)] if label_selector else [])

    def version(self) -> dict[str, Any]:
        """The API server's ``GET /version`` (``gitVersion``: GKE's ``v1.31.2-gke.1115000``)."""
        return self._json("get version", "GET", "/version", RESOURCES["Namespace"], None) or {}

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
            raise stream_broke(what, self.host, f"the log stream broke ({drop})") from drop
        finally:
            _release(raw)

    def job_logs(self, job_name: str, follow: bool = False) -> Iterator[str]:
        """Log lines of the newest pod of Job ``job_name`` (KubeRay's submitter Job is named like the RayJob); nothing
        when it has no pod yet or any more."""
        if (pod := self.job_pod(job_name)) is not None:
            yield from self.logs(pod, follow=follow)

    def job_pod(self, job_name: str) -> str | None:
        """The name of Job ``job_name``'s newest pod; None when it has none."""
        pods = self.pods(f"job-name={job_name}")
        if not pods:
            return None
        return str(max(pods, key=lambda p: str(p.get("metadata", {}).get("creationTimestamp", "")))["metadata"]["name"])

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
        data = self._json(describe_call("list", res, None, self.namespace), "GET", res.collection(self.namespace),
                          res, None, query=query) or {}
        return _items(data)

    def _list_one(self, res: Resource, name: str) -> tuple[dict[str, Any] | None, str]:
        """The object (None when absent) and the list's resourceVersion, the point a watch starts from."""
        query = [("fieldSelector", f"metadata.name={name}")]
        data = self._json(describe_call("list", res, name, self.namespace), "GET", res.collection(self.namespace),
                          res, None, query=query) or {}
        items = _items(data)
        return (items[0] if items else None), str((data.get("metadata") or {}).get("resourceVersion") or "")

    def _watch_stream(self, res: Resource, name: str, version: str,
                      left_s: float) -> Iterator[tuple[str, dict[str, Any]]]:
        """One watch request's ``(type, object)`` events; raises _Expired (410) and _Dropped (a broken stream)."""
        what = describe_call("watch", res, name, self.namespace)
        query = [("watch", "1"), ("fieldSelector", f"metadata.name={name}"), ("allowWatchBookmarks", "true"),
                 ("timeoutSeconds", str(max(1, min(math.ceil(left_s), WATCH_CAP_S))))]
        if version:
            query.insert(1, ("resourceVersion", version))
        try:
            raw = self._open(what, res.collection(self.namespace), res, None, query,
                             read_timeout=min(left_s, WATCH_CAP_S) + self.timeout_s)
        except KubeError as exc:
            if exc.status == 410:
                raise _Expired() from exc
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
                    raise status_error(int(obj.get("code") or 0), obj, what, 1)
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
            raise status_error(404, failure.status_obj, what, failure.attempts) from failure
        return reply.response

    def _absent_or_raise(self, failure: _HttpFailure, what: str, res: Resource, name: str | None) -> None:
        """Raises the KubeError of a failed call; returns (None) only when the named object does not exist."""
        if failure.status != 404:
            raise status_error(failure.status, failure.status_obj, what, failure.attempts) from failure
        details = failure.status_obj.get("details") or {}
        if details.get("kind") == "namespaces":
            raise namespace_missing(what, details.get("name")) from failure
        if name is not None and details.get("name") == name:
            return None
        if res.plural not in self._served_plurals(res):
            raise not_served(res) from failure
        if name is not None:
            return None
        raise status_error(404, failure.status_obj, what, failure.attempts) from failure

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
                    raise status_error(failure.status, failure.status_obj, what, failure.attempts) from failure
                found = frozenset()
            self._served[res.api_version] = found
        return self._served[res.api_version]

    def _send(self, what: str, method: str, path: str, query: list[tuple[str, str]], body: dict[str, Any] | None,
              content_type: str | None, read_timeout: float | None, accept: str, stream: bool = False) -> RESTResponse:
        """Sends one call; a 401 refreshes the token once. The pool retries 5xx, 429 and connection errors, and this an
        answer that broke after its headers (read after ``urlopen`` returned). Returns a 2xx/3xx response, read whole
        unless ``stream``; _HttpFailure for an error status, KubeError otherwise."""
        import urllib3
        from google.auth.exceptions import GoogleAuthError
        from kubernetes.client.exceptions import ApiException

        retry, refreshed = self._retry_policy(), False
        while True:
            try:
                reply = self._call(method, path, query, body, content_type, read_timeout, accept)
                if not stream or reply.status >= 400:
                    reply.read()
            except GoogleAuthError as exc:
                raise credentials_error(exc, what) from exc
            except ApiException as exc:  # the client raises urllib3's SSLError as a status-0 ApiException
                raise client_error(exc, what, self.host) from exc
            except urllib3.exceptions.MaxRetryError as exc:  # the pool's retries are spent
                raise transport_error(exc, what, self.host, self.retries + 1, self.timeout_s, read_timeout) from exc
            except urllib3.exceptions.HTTPError as exc:  # not worth a retry (a timeout), or the body broke
                try:
                    retry = retry.increment(method, path, error=exc)
                except urllib3.exceptions.HTTPError as final:
                    raise transport_error(final, what, self.host, len(retry.history) + 1, self.timeout_s,
                                          read_timeout) from exc
                retry.sleep()
                continue
            if reply.status < 400:
                return reply
            tried = reply.response.retries
            failure = _HttpFailure(reply.status, reply.read(), len(tried.history) + 1 if tried else 1)
            if reply.status == 401 and not refreshed:
                refreshed = True
                try:
                    self._refresh(force=True)
                except GoogleAuthError as exc:
                    raise credentials_error(exc, what) from exc
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

    # ------------------------------------------------------------------------------------ client and credentials

    def _retry_policy(self) -> HttpRetry:
        """The retry policy of every request (:mod:`raytpu.cluster.http_retry`), made on first use (it loads
        urllib3)."""
        if self._retry is None:
            from raytpu.cluster.http_retry import policy

            self._retry = policy(self.retries, self.backoff_s)
        return self._retry

    def _client(self) -> ApiClient:
        """The kubernetes ApiClient, made on first use: TLS to the cluster CA, a google-auth bearer token, and the
        retry policy, which kubernetes 37.0.2 ``RESTClientObject`` hands to its urllib3 PoolManager."""
        if self._api is None:
            from kubernetes.client import ApiClient, Configuration

            config = Configuration(host=self.host, ca_cert_data=self.ca_pem, api_key={"BearerToken": ""},
                                   api_key_prefix={"BearerToken": "Bearer"}, retries=self._retry_policy())
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
                raise no_credentials(exc) from exc
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
        self.status_obj = status_obj(body)
        self.attempts = attempts


class _Expired(Exception):
    """A watch's resourceVersion is too old (410 Gone): list again."""


class _Dropped(Exception):
    """A stream broke before its end: watch again from the last resourceVersion."""


def _items(data: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The objects of a list answer (anything but a mapping is skipped)."""
    return [item for item in data.get("items") or [] if isinstance(item, dict)]


def _resource_version(obj: Mapping[str, Any]) -> str:
    return str((obj.get("metadata") or {}).get("resourceVersion") or "")


def _parse_json(data: bytes, what: str) -> dict[str, Any]:
    """A JSON object from the API; KubeError when the answer is not one (a proxy's HTML page, say)."""
    try:
        out = json.loads(data)
    except ValueError:
        out = None
    if not isinstance(out, dict):
        raise not_json(what, data)
    return out


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
        raise _Dropped(one_line(str(exc))[:200]) from exc
    if pending:
        yield pending


def _release(raw: urllib3.BaseHTTPResponse) -> None:
    """Closes a streamed response (its connection may be mid-stream, so it is not reused)."""
    raw.close()
    raw.release_conn()
