"""A loopback Kubernetes API server: the boundary ``raytpu.cluster`` is tested at.

GKE cannot be reached from the test machine, so the tests stop at the wire: this threaded HTTPS server on
127.0.0.1 (its certificate signed by a CA made for the test, handed to the client as GKE hands out its CA:
base64 of the PEM) speaks the Kubernetes API paths the kit uses, the way kube-apiserver answers them:

- discovery ``GET /api/v1``, ``/apis/batch/v1``, ``/apis/ray.io/v1`` (``serve_ray = False``: the Ray
  Operator add-on is off, and every ``/apis/ray.io/...`` path answers ``404 page not found``, as
  kube-apiserver does for a group nobody serves);
- server-side apply ``PATCH .../{plural}/{name}``: checks the content type, ``fieldManager`` and ``force``,
  validates KubeRay bodies against the vendored v1.7.0 CRD schemas (``crd.schema_errors``; 422 with a
  Status naming each field), stores the object with a new ``resourceVersion``;
- ``GET`` and ``DELETE`` of one object, lists with ``fieldSelector``/``labelSelector``, and watches
  (``?watch=1&resourceVersion=N``): newline-delimited WatchEvents, chunked, from an event history; the test
  drives state changes (``set_status``), drops a stream mid-way (``drop_next_watch``) or expires old
  versions (``compact``: 410 Gone as an ERROR event, or as an HTTP 410 answer);
- ``GET /version`` (``git_version``), ServiceAccounts, MutatingWebhookConfigurations and CSIDrivers to read;
- pods and their ``/log`` (``follow=true`` streams the lines chunk by chunk), nodes, events;
- ``POST /token``: an OAuth2 token endpoint that checks a service account's signed JWT assertion, so a real
  ``google.oauth2.service_account.Credentials`` refreshes its token here; API calls must carry a token it
  issued and has not revoked (else 401);
- ``fail(...)``: the next matching request answers a scripted status with a realistic ``Status`` body
  (401, 403, 404, 409, 5xx), optionally after a delay (client timeouts).

Every request is recorded (method, path, query, headers, body) for the tests to assert on.
"""

from __future__ import annotations

import base64
import contextlib
import copy
import datetime
import ipaddress
import itertools
import json
import re
import socket
import ssl
import threading
import time
import urllib.parse
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import k8s_schema
from crd import CRD_FILES, crd, load_yaml, schema_errors
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import NameOID
from google.auth import jwt

NAMESPACE = "ray"
TOKEN_PATH = "/token"
SA_EMAIL = "raytpu-ci@test-project.iam.gserviceaccount.com"
JWT_AUDIENCE = "https://oauth2.googleapis.com/token"
"""The audience google-auth signs service-account assertions for, whatever the token_uri (as Google expects)."""

RESOURCES: dict[str, tuple[str, str, bool]] = {
    # plural: (group/version, kind, namespaced)
    "rayjobs": ("ray.io/v1", "RayJob", True),
    "rayservices": ("ray.io/v1", "RayService", True),
    "rayclusters": ("ray.io/v1", "RayCluster", True),
    "pods": ("v1", "Pod", True),
    "events": ("v1", "Event", True),
    "configmaps": ("v1", "ConfigMap", True),
    "nodes": ("v1", "Node", False),
    "jobs": ("batch/v1", "Job", True),
    "deployments": ("apps/v1", "Deployment", True),
    "networkpolicies": ("networking.k8s.io/v1", "NetworkPolicy", True),
    "services": ("v1", "Service", True),
    "secrets": ("v1", "Secret", True),
    "customresourcedefinitions": ("apiextensions.k8s.io/v1", "CustomResourceDefinition", False),
    "serviceaccounts": ("v1", "ServiceAccount", True),
    "mutatingwebhookconfigurations": ("admissionregistration.k8s.io/v1", "MutatingWebhookConfiguration", False),
    "csidrivers": ("storage.k8s.io/v1", "CSIDriver", False),
    "workloads": ("kueue.x-k8s.io/v1beta2", "Workload", True),
    "localqueues": ("kueue.x-k8s.io/v1beta2", "LocalQueue", True),
    "clusterqueues": ("kueue.x-k8s.io/v1beta2", "ClusterQueue", False),
}
_PATH = re.compile(r"^/(?:api/(?P<core>v1)|apis/(?P<group>[^/]+)/(?P<version>[^/]+))"
                   r"(?:/namespaces/(?P<ns>[^/]+))?/(?P<plural>[^/]+)(?:/(?P<name>[^/]+))?(?:/(?P<sub>log))?$")


# ------------------------------------------------------------------------------------------ Status bodies


def status_body(code: int, reason: str, message: str, details: dict[str, Any] | None = None) -> dict[str, Any]:
    """A ``metav1.Status`` as kube-apiserver writes it for a failure."""
    out: dict[str, Any] = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                           "message": message, "reason": reason, "code": code}
    if details is not None:
        out["details"] = details
    return out


def unauthorized() -> dict[str, Any]:
    """What kube-apiserver answers a missing, expired or unknown bearer token."""
    return status_body(401, "Unauthorized", "Unauthorized")


def forbidden(verb: str, plural: str, group: str, name: str, permission: str, user: str = SA_EMAIL) -> dict[str, Any]:
    """GKE's 403: the RBAC sentence plus the IAM permissions that would allow it (apache/airflow#37795)."""
    display = f"{plural}.{group}" if group else plural
    return status_body(403, "Forbidden", f'{display} "{name}" is forbidden: User "{user}" cannot {verb} resource '
                       f'"{plural}" in API group "{group}" in the namespace "{NAMESPACE}": requires one of '
                       f'["{permission}"] permission(s).', {"name": name, "group": group, "kind": plural})


def apply_conflict(manager: str, fields: list[str], api_version: str = "ray.io/v1") -> dict[str, Any]:
    """A server-side apply conflict: one FieldManagerConflict cause per field (fabric8io/kubernetes-client#6047)."""
    cause = f'conflict with "{manager}" using {api_version}'
    return status_body(409, "Conflict", f"Apply failed with {len(fields)} conflict(s): {cause}: {', '.join(fields)}",
                       {"causes": [{"reason": "FieldManagerConflict", "message": cause, "field": f} for f in fields]})


def unavailable() -> dict[str, Any]:
    return status_body(503, "ServiceUnavailable", "the server is currently unable to handle the request")


def internal_error() -> dict[str, Any]:
    return status_body(500, "InternalError", "Internal error occurred: etcdserver: request timed out")


def expired(old: int, oldest: int) -> dict[str, Any]:
    """The Status of a watch from a compacted resourceVersion (wso2/apk#571 shows the event form)."""
    return status_body(410, "Expired", f"too old resource version: {old} ({oldest})")


def not_found(plural: str, group: str, name: str) -> dict[str, Any]:
    display = f"{plural}.{group}" if group else plural
    return status_body(404, "NotFound", f'{display} "{name}" not found', {"name": name, "group": group, "kind": plural})


def serve_in_background(httpd: Any) -> threading.Thread:
    """Runs a loopback server's ``serve_forever`` on a daemon thread (polling every 10 ms, so ``shutdown`` is quick)."""
    thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.01}, daemon=True)
    thread.start()
    return thread


# ------------------------------------------------------------------------------------------ TLS and keys


@dataclass(frozen=True)
class TlsFiles:
    """A CA and a server certificate for 127.0.0.1 it signed (EC keys: quick to make)."""

    ca_pem: bytes
    cert_path: Path
    key_path: Path
    ca_path: Path

    @property
    def ca_b64(self) -> str:
        """The CA as GKE outputs ``master_auth.cluster_ca_certificate``: base64 of the PEM."""
        return base64.b64encode(self.ca_pem).decode()


def _name(common_name: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


def make_tls(directory: Path) -> TlsFiles:
    """A CA (like a GKE cluster's own CA) and a server certificate for 127.0.0.1 and localhost."""
    now = datetime.datetime.now(datetime.UTC)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca = (x509.CertificateBuilder().subject_name(_name("raytpu-test-ca")).issuer_name(_name("raytpu-test-ca"))
          .public_key(ca_key.public_key()).serial_number(x509.random_serial_number())
          .not_valid_before(now - datetime.timedelta(hours=1)).not_valid_after(now + datetime.timedelta(days=1))
          .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
          .add_extension(x509.KeyUsage(digital_signature=True, content_commitment=False, key_encipherment=False,
                                       data_encipherment=False, key_agreement=False, key_cert_sign=True,
                                       crl_sign=True, encipher_only=False, decipher_only=False), critical=True)
          .add_extension(x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), critical=False)
          .sign(ca_key, hashes.SHA256()))
    key = ec.generate_private_key(ec.SECP256R1())
    san = x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1")), x509.DNSName("localhost")])
    cert = (x509.CertificateBuilder().subject_name(_name("kube-apiserver")).issuer_name(ca.subject)
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(hours=1)).not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(san, critical=False)
            .add_extension(x509.ExtendedKeyUsage([x509.oid.ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
            .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False)
            .sign(ca_key, hashes.SHA256()))
    ca_pem = ca.public_bytes(serialization.Encoding.PEM)
    files = TlsFiles(ca_pem, directory / "server.pem", directory / "server.key", directory / "ca.pem")
    files.cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    files.key_path.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                                 serialization.NoEncryption()))
    files.ca_path.write_bytes(ca_pem)
    return files


@dataclass(frozen=True)
class ServiceAccountKey:
    """An RSA key pair for a test service account (google-auth signs its JWT assertions with RS256)."""

    private_pem: str
    public_pem: bytes
    key_id: str = "test-key-1"

    @classmethod
    def generate(cls) -> ServiceAccountKey:
        """1024 bits, not Google's 2048: the JWT is the same RS256 assertion either way, and every command a test runs
        loads the key anew (google-auth's ``from_service_account_info``), where cryptography's key check costs about
        7 ms at 1024 bits and 50 ms at 2048."""
        key = rsa.generate_private_key(public_exponent=65537, key_size=1024)
        private = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                    serialization.NoEncryption()).decode()
        public = key.public_key().public_bytes(serialization.Encoding.PEM,
                                               serialization.PublicFormat.SubjectPublicKeyInfo)
        return cls(private, public)

    def info(self, token_uri: str) -> dict[str, str]:
        """The service-account JSON (as ``gcloud iam service-accounts keys create`` writes it)."""
        return {"type": "service_account", "project_id": "test-project", "private_key_id": self.key_id,
                "private_key": self.private_pem, "client_email": SA_EMAIL, "client_id": "1234567890",
                "auth_uri": "https://accounts.google.com/o/oauth2/auth", "token_uri": token_uri}


# ------------------------------------------------------------------------------------------ the server


@dataclass
class Recorded:
    """One request the server got."""

    method: str
    path: str
    query: dict[str, str]
    headers: dict[str, str]
    body: bytes

    @property
    def json(self) -> Any:
        return json.loads(self.body)

    @property
    def bearer(self) -> str | None:
        auth = self.headers.get("authorization", "")
        return auth.removeprefix("Bearer ") if auth.startswith("Bearer ") else None


@dataclass
class Failure:
    """A scripted answer for the next ``times`` requests matching ``method`` and ``path`` (a regex)."""

    method: str
    path: str
    status: int
    body: dict[str, Any] | str
    times: int = 1
    delay_s: float = 0.0
    headers: dict[str, str] = field(default_factory=dict)
    drop: bool = False


@dataclass
class _Event:
    rv: int
    type: str
    plural: str
    namespace: str | None
    obj: dict[str, Any]


class _Abort(Exception):
    """The handler stops writing (a scripted drop, a closed client, or the server shutting down)."""


class KubeApiServer:
    """The loopback API server; ``url`` is its endpoint, ``tls.ca_b64`` its CA as GKE outputs one."""

    def __init__(self, tls: TlsFiles, sa_key: ServiceAccountKey, *, token_ttl_s: int = 3600) -> None:
        self.tls = tls
        self.sa_key = sa_key
        self.token_ttl_s = token_ttl_s
        self.serve_ray = True
        self.git_version = "v1.35.1-gke.1396000"
        """What ``GET /version`` answers as ``gitVersion`` (GKE's form)."""
        self.watch_gone_as_http = False
        self.requests: list[Recorded] = []
        self.tokens: list[str] = []
        self._valid_tokens: dict[str, float] = {}
        self._failures: list[Failure] = []
        self._drops: list[int] = []
        self._objects: dict[tuple[str, str | None, str], dict[str, Any]] = {}
        self._history: list[_Event] = []
        self._oldest_rv = 0
        self._rv = itertools.count(100)
        self._last_rv = 99
        self._logs: dict[str, list[str]] = {}
        self._log_breaks: dict[str, list[int]] = {}
        self.crds: dict[str, dict[str, Any]] = {crd(kind)["metadata"]["name"]: crd(kind) for kind in CRD_FILES}
        """The CRDs the cluster serves, by name (the vendored KubeRay ones, shared: a test that edits one replaces
        it with its own copy first)."""
        self._changed = threading.Condition()
        self._closing = threading.Event()
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(tls.cert_path, tls.key_path)
        self._httpd = _Server(("127.0.0.1", 0), _Handler, self)
        self._httpd.socket = context.wrap_socket(self._httpd.socket, server_side=True)
        self.port = self._httpd.server_address[1]
        self.url = f"https://127.0.0.1:{self.port}"
        self._thread = serve_in_background(self._httpd)

    # ---------------------------------------------------------------------------------- what tests script

    @property
    def token_uri(self) -> str:
        return self.url + TOKEN_PATH

    @property
    def resource_version(self) -> str:
        """The newest resourceVersion (what a list answers now)."""
        return str(self._last_rv)

    def fail(self, method: str, path: str, status: int, body: dict[str, Any] | str, *, times: int = 1,
             delay_s: float = 0.0, headers: dict[str, str] | None = None, drop: bool = False) -> None:
        """The next ``times`` requests matching ``method`` and ``path`` (a regex) answer ``status`` and ``body``
        (after ``delay_s``; with ``drop``, the connection breaks halfway through the body)."""
        self._failures.append(Failure(method, path, status, body, times, delay_s, headers or {}, drop))

    def drop_next_watch(self, after_events: int) -> None:
        """The next watch stream breaks (no final chunk) right after sending ``after_events`` events."""
        self._drops.append(after_events)

    def compact(self) -> None:
        """Forgets the event history: a watch from any older resourceVersion is 410 Gone."""
        with self._changed:
            self._oldest_rv = self._last_rv
            self._history.clear()

    def revoke_tokens(self) -> None:
        """Every token issued so far stops working (as if it expired server-side)."""
        self._valid_tokens.clear()

    def put(self, obj: dict[str, Any], namespace: str | None = NAMESPACE) -> dict[str, Any]:
        """Stores ``obj`` as the server would (new resourceVersion), recording an ADDED/MODIFIED event."""
        plural = _plural_of(obj["kind"])
        key = (plural, namespace if RESOURCES[plural][2] else None, obj["metadata"]["name"])
        with self._changed:
            old = self._objects.get(key)
            stored = copy.deepcopy(obj)
            meta = stored.setdefault("metadata", {})
            if key[1] is not None:
                meta["namespace"] = key[1]
            meta.setdefault("uid", f"uid-{meta['name']}")
            meta.setdefault("creationTimestamp", "2026-01-01T00:00:00Z")
            return self._store(key, stored, "MODIFIED" if old else "ADDED")

    def set_status(self, plural: str, name: str, status: dict[str, Any]) -> dict[str, Any]:
        """Changes an object's status (as KubeRay does): a new resourceVersion and a MODIFIED event."""
        with self._changed:
            key = (plural, NAMESPACE, name)
            obj = copy.deepcopy(self._objects[key])
            obj["status"] = status
            return self._store(key, obj, "MODIFIED")

    def remove(self, plural: str, name: str, namespace: str = NAMESPACE) -> None:
        """Deletes an object server-side (a DELETED event)."""
        with self._changed:
            obj = self._objects.pop((plural, namespace, name))
            self._record_event(plural, namespace, "DELETED", obj)

    def get_object(self, plural: str, name: str, namespace: str = NAMESPACE) -> dict[str, Any] | None:
        return copy.deepcopy(self._objects.get((plural, namespace, name)))

    def add_pod(self, name: str, labels: dict[str, str], lines: list[str], created: str = "2026-01-01T00:00:00Z",
                container: str = "ray-job-submitter", namespace: str = NAMESPACE) -> None:
        """A pod (with one container) whose log is ``lines``."""
        self.put({"apiVersion": "v1", "kind": "Pod",
                  "metadata": {"name": name, "labels": labels, "creationTimestamp": created},
                  "spec": {"containers": [{"name": container, "image": "rayproject/ray:2.60.0"}]},
                  "status": {"phase": "Succeeded"}}, namespace=namespace)
        self._logs[name] = lines

    def break_log(self, pod: str, *after: int) -> None:
        """The next followed reads of ``pod``'s log break mid-stream, one after each count of lines in ``after``."""
        self._log_breaks[pod] = list(after)

    def of(self, method: str, path: str = "") -> list[Recorded]:
        """The recorded requests of ``method`` whose path contains ``path``."""
        return [r for r in self.requests if r.method == method and path in r.path]

    def api_requests(self) -> list[Recorded]:
        """The recorded Kubernetes API requests (not token refreshes)."""
        return [r for r in self.requests if r.path != TOKEN_PATH]

    def close(self) -> None:
        self._closing.set()
        with self._changed:
            self._changed.notify_all()
        self._httpd.shutdown()
        self._httpd.server_close()

    # ---------------------------------------------------------------------------------- the store

    def _store(self, key: tuple[str, str | None, str], obj: dict[str, Any], event: str) -> dict[str, Any]:
        obj["metadata"]["resourceVersion"] = str(next(self._rv))
        self._last_rv = int(obj["metadata"]["resourceVersion"])
        self._objects[key] = obj
        self._record_event(key[0], key[1], event, obj)
        return copy.deepcopy(obj)

    def _record_event(self, plural: str, namespace: str | None, type_: str, obj: dict[str, Any]) -> None:
        """Appends a watch event; a DELETED one gets its own resourceVersion, as etcd gives the deletion one."""
        event = copy.deepcopy(obj)
        if type_ == "DELETED":
            event["metadata"]["resourceVersion"] = str(next(self._rv))
            self._last_rv = int(event["metadata"]["resourceVersion"])
        self._history.append(_Event(int(event["metadata"]["resourceVersion"]), type_, plural, namespace, event))
        self._changed.notify_all()

    def _items(self, plural: str, namespace: str | None, query: dict[str, str]) -> list[dict[str, Any]]:
        # a namespaced kind listed without a namespace (``/api/v1/pods``) lists every namespace, as kube-apiserver does
        items = [o for (p, ns, _), o in sorted(self._objects.items(), key=lambda kv: (kv[0][0], kv[0][1] or "",
                                                                                         kv[0][2]))
                 if p == plural and (namespace is None or ns == namespace)]
        return [copy.deepcopy(o) for o in items if _selected(o, query)]

    # ---------------------------------------------------------------------------------- handling

    def handle(self, h: _Handler) -> None:
        """Answers one request: a scripted failure, the token endpoint, or the Kubernetes API."""
        parsed = urllib.parse.urlsplit(h.path)
        query = {k: v[-1] for k, v in urllib.parse.parse_qs(parsed.query, keep_blank_values=True).items()}
        length = int(h.headers.get("Content-Length") or 0)
        body = h.rfile.read(length) if length else b""
        self.requests.append(Recorded(h.command, parsed.path, query, {k.lower(): v for k, v in h.headers.items()},
                                      body))
        if self._scripted(h, parsed.path):
            return
        if parsed.path == TOKEN_PATH:
            self._token(h, body)
            return
        auth = h.headers.get("Authorization", "")
        token = auth.removeprefix("Bearer ")
        if not auth.startswith("Bearer ") or self._valid_tokens.get(token, 0) < time.time():
            h.send_json(401, unauthorized())
            return
        self._api(h, parsed.path, query, body)

    def _scripted(self, h: _Handler, path: str) -> bool:
        for failure in self._failures:
            if failure.method == h.command and re.search(failure.path, path) and failure.times > 0:
                failure.times -= 1
                if failure.delay_s:
                    self._closing.wait(failure.delay_s)
                if failure.drop:
                    h.send_partial(failure.status, json.dumps(failure.body).encode())
                if isinstance(failure.body, str):
                    h.send_text(failure.status, failure.body, failure.headers)
                else:
                    h.send_json(failure.status, failure.body, failure.headers)
                return True
        return False

    def _token(self, h: _Handler, body: bytes) -> None:
        """OAuth2 JWT-bearer grant (RFC 7523), as oauth2.googleapis.com/token answers it."""
        form = {k: v[-1] for k, v in urllib.parse.parse_qs(body.decode()).items()}
        if form.get("grant_type") != "urn:ietf:params:oauth:grant-type:jwt-bearer":
            h.send_json(400, {"error": "unsupported_grant_type"})
            return
        try:
            claims = jwt.decode(form.get("assertion", ""), certs=self.sa_key.public_pem, audience=JWT_AUDIENCE)
        except ValueError as exc:
            h.send_json(400, {"error": "invalid_grant", "error_description": str(exc)})
            return
        if claims.get("iss") != SA_EMAIL or "cloud-platform" not in str(claims.get("scope")):
            h.send_json(400, {"error": "invalid_scope", "error_description": f"claims {claims}"})
            return
        token = f"ya29.test-{len(self.tokens) + 1}"
        self.tokens.append(token)
        self._valid_tokens[token] = time.time() + self.token_ttl_s
        h.send_json(200, {"access_token": token, "expires_in": self.token_ttl_s, "token_type": "Bearer"})

    def _api(self, h: _Handler, path: str, query: dict[str, str], body: bytes) -> None:
        if path.startswith("/apis/ray.io") and not self.serve_ray:
            h.send_text(404, "404 page not found\n")
            return
        if h.command == "GET" and path == "/version":
            h.send_json(200, {"major": "1", "minor": "35", "gitVersion": self.git_version, "platform": "linux/amd64"})
            return
        discovery = {"/api/v1": "v1", "/apis/batch/v1": "batch/v1", "/apis/ray.io/v1": "ray.io/v1",
                     "/apis/apps/v1": "apps/v1",
                     "/apis/apiextensions.k8s.io/v1": "apiextensions.k8s.io/v1",
                     "/apis/admissionregistration.k8s.io/v1": "admissionregistration.k8s.io/v1",
                     "/apis/storage.k8s.io/v1": "storage.k8s.io/v1",
                     "/apis/kueue.x-k8s.io/v1beta2": "kueue.x-k8s.io/v1beta2"}
        if h.command == "GET" and path in discovery:
            h.send_json(200, _discovery(discovery[path]))
            return
        match = _PATH.match(path)
        if not match or match["plural"] not in RESOURCES:
            h.send_text(404, "404 page not found\n")
            return
        plural, name, namespace = match["plural"], match["name"], match["ns"]
        group_version = match["core"] or f"{match['group']}/{match['version']}"
        if RESOURCES[plural][0] != group_version:
            h.send_text(404, "404 page not found\n")
            return
        if match["sub"] == "log" and h.command == "GET" and name:
            self._log(h, name, query)
        elif h.command == "PATCH" and name:
            self._apply(h, plural, namespace, name, query, body)
        elif h.command == "GET" and name:
            self._get(h, plural, namespace, name)
        elif h.command == "DELETE" and name:
            self._delete(h, plural, namespace, name)
        elif h.command == "GET" and query.get("watch") in ("1", "true"):
            self._watch(h, plural, namespace, query)
        elif h.command == "GET":
            with self._changed:
                items, rv = self._items(plural, namespace, query), str(self._last_rv)
            h.send_json(200, {"kind": f"{RESOURCES[plural][1]}List", "apiVersion": group_version,
                              "metadata": {"resourceVersion": rv}, "items": items})
        else:
            h.send_json(405, status_body(405, "MethodNotAllowed", "the server does not allow this method"))

    def _apply(self, h: _Handler, plural: str, namespace: str | None, name: str, query: dict[str, str],
               body: bytes) -> None:
        """Server-side apply: content type, field manager, force, strict validation, the CRD schema."""
        group = RESOURCES[plural][0].rpartition("/")[0]
        content_type = h.headers.get("Content-Type")
        if content_type != "application/apply-patch+yaml":
            h.send_json(415, status_body(415, "UnsupportedMediaType",
                                         f"the body of the request was in an unknown format: {content_type}"))
            return
        if not query.get("fieldManager") or query.get("force") not in (None, "false", "true"):
            h.send_json(422, status_body(422, "Invalid", "PatchOptions.meta.k8s.io \"\" is invalid: fieldManager: "
                                                         "Required value: is required for apply patch"))
            return
        obj = load_yaml(body)
        kind = RESOURCES[plural][1]
        problems = (schema_errors(obj) if kind in CRD_FILES else
                    k8s_schema.schema_errors(obj) if kind in k8s_schema.DEFINITIONS else [])
        body_name = obj.get("metadata", {}).get("name")
        if body_name != name:
            problems.append(f"metadata.name: Invalid value: {body_name!r}: must match {name!r}")
        if problems:
            causes = [{"reason": "FieldValueInvalid", "field": p.split(": ", 1)[0], "message": p.split(": ", 1)[1]}
                      for p in problems]
            h.send_json(422, status_body(422, "Invalid", f'{kind}.{group} "{name}" is invalid: {"; ".join(problems)}',
                                         {"name": name, "group": group, "kind": kind, "causes": causes}))
            return
        with self._changed:
            key = (plural, namespace, name)
            old = self._objects.get(key)
            stored = copy.deepcopy(obj)
            meta = stored["metadata"]
            meta.update(namespace=namespace, uid=f"uid-{name}", creationTimestamp="2026-01-01T00:00:00Z",
                        managedFields=[{"manager": query["fieldManager"], "operation": "Apply",
                                        "apiVersion": RESOURCES[plural][0], "fieldsType": "FieldsV1"}])
            if old and "status" in old:
                stored["status"] = old["status"]
            out = self._store(key, stored, "MODIFIED" if old else "ADDED")
        h.send_json(200 if old else 201, out)

    def _get(self, h: _Handler, plural: str, namespace: str | None, name: str) -> None:
        obj = self._objects.get((plural, namespace, name))
        if plural == "customresourcedefinitions" and self.serve_ray:
            obj = self.crds.get(name)
        group = RESOURCES[plural][0].rpartition("/")[0]
        h.send_json(200, obj) if obj else h.send_json(404, not_found(plural, group, name))

    def _delete(self, h: _Handler, plural: str, namespace: str | None, name: str) -> None:
        group = RESOURCES[plural][0].rpartition("/")[0]
        with self._changed:
            obj = self._objects.pop((plural, namespace, name), None)
            if obj is not None:
                self._record_event(plural, namespace, "DELETED", obj)
        if obj is None:
            h.send_json(404, not_found(plural, group, name))
        else:
            h.send_json(200, {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success",
                              "details": {"name": name, "group": group, "kind": plural, "uid": f"uid-{name}"}})

    def _watch(self, h: _Handler, plural: str, namespace: str | None, query: dict[str, str]) -> None:
        """A watch stream: history after ``resourceVersion``, then live events, until timeoutSeconds."""
        since = int(query.get("resourceVersion") or 0)
        deadline = time.monotonic() + float(query.get("timeoutSeconds") or 30)
        drop_after = self._drops.pop(0) if self._drops else None
        if since and since < self._oldest_rv:
            gone = expired(since, self._oldest_rv)
            if self.watch_gone_as_http:
                h.send_json(410, gone)
                return
            h.start_chunked("application/json")
            h.chunk(json.dumps({"type": "ERROR", "object": gone}).encode() + b"\n")
            h.end_chunked()
            return
        h.start_chunked("application/json")
        sent = 0
        with self._changed:
            while not self._closing.is_set():
                for event in [e for e in self._history if e.rv > since]:
                    since = event.rv
                    if event.plural != plural or event.namespace != namespace or not _selected(event.obj, query):
                        continue
                    if drop_after is not None and sent >= drop_after:
                        break
                    h.chunk(json.dumps({"type": event.type, "object": event.obj}).encode() + b"\n")
                    sent += 1
                if drop_after is not None and sent >= drop_after:
                    h.drop()
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                self._changed.wait(min(left, 0.2))
        h.end_chunked()

    def _log(self, h: _Handler, pod: str, query: dict[str, str]) -> None:
        if pod not in self._logs:
            h.send_json(404, not_found("pods", "", pod))
            return
        lines = [line + "\n" for line in self._logs[pod]]
        if query.get("follow") != "true":
            h.send_text(200, "".join(lines))
            return
        breaks = self._log_breaks.get(pod) or []
        cut = breaks.pop(0) if breaks else None
        h.start_chunked("text/plain")
        for i, line in enumerate(lines):  # one chunk per line, a moment apart: what a running container writes
            if i == cut:
                h.drop()  # the stream breaks mid-run (a dropped connection)
            h.chunk(line.encode())
            time.sleep(0.005)
        h.end_chunked()


def _plural_of(kind: str) -> str:
    return next(p for p, (_, k, _) in RESOURCES.items() if k == kind)


def _discovery(group_version: str) -> dict[str, Any]:
    """An APIResourceList, as discovery answers ``GET /apis/<group>/<version>``."""
    resources = [{"name": p, "singularName": k.lower(), "namespaced": ns, "kind": k,
                  "verbs": ["delete", "get", "list", "patch", "watch"]}
                 for p, (gv, k, ns) in RESOURCES.items() if gv == group_version]
    resources += [{"name": f"{r['name']}/status", "namespaced": r["namespaced"], "kind": r["kind"],
                   "verbs": ["get", "patch"]} for r in list(resources)]
    return {"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": group_version, "resources": resources}


def _selected(obj: dict[str, Any], query: dict[str, str]) -> bool:
    """Equality field and label selectors (``a.b=c,d=e``), the subset the kit sends."""
    for term in filter(None, query.get("fieldSelector", "").split(",")):
        path, _, want = term.partition("=")
        value: Any = obj
        for part in path.split("."):
            value = value.get(part) if isinstance(value, dict) else None
        if str(value) != want:
            return False
    labels = obj.get("metadata", {}).get("labels") or {}
    for term in filter(None, query.get("labelSelector", "").split(",")):
        key, _, want = term.partition("=")
        if labels.get(key) != want:
            return False
    return True


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, address: tuple[str, int], handler: type[_Handler], app: KubeApiServer) -> None:
        self.app = app
        super().__init__(address, handler)

    def handle_error(self, request: Any, client_address: Any) -> None:
        """Quiet: clients closing streams early (a consumer's ``break``) is normal here."""


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True  # a reply is two writes (headers, body): no 40 ms wait for the delayed ACK
    disable_nagle_algorithm = True  # headers and body are separate writes: no 40 ms delayed-ACK stall between
    server: _Server

    def log_message(self, format: str, *args: Any) -> None:
        """Quiet."""

    def _dispatch(self) -> None:
        with contextlib.suppress(_Abort, OSError):
            self.server.app.handle(self)

    do_GET = do_POST = do_PATCH = do_DELETE = do_PUT = _dispatch

    def send_json(self, status: int, obj: Any, headers: dict[str, str] | None = None) -> None:
        self._send(status, json.dumps(obj).encode(), "application/json", headers)

    def send_text(self, status: int, text: str, headers: dict[str, str] | None = None) -> None:
        self._send(status, text.encode(), "text/plain; charset=utf-8", headers)

    def _send(self, status: int, data: bytes, content_type: str, headers: dict[str, str] | None) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        for key, value in (headers or {}).items():
            self.send_header(key, value)
        self.end_headers()
        self._write(data)

    def send_partial(self, status: int, data: bytes) -> None:
        """Headers promising all of ``data``, half of it, then a broken connection."""
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self._write(data[: len(data) // 2])
        self.drop()

    def start_chunked(self, content_type: str) -> None:
        self.send_response(200)
        self.send_header("Content-Type", content_type)
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        self.wfile.flush()

    def chunk(self, data: bytes) -> None:
        self._write(f"{len(data):x}\r\n".encode() + data + b"\r\n")

    def end_chunked(self) -> None:
        self._write(b"0\r\n\r\n")

    def drop(self) -> None:
        """Breaks the connection mid-stream: no final chunk, no TLS close_notify."""
        self.close_connection = True
        with contextlib.suppress(OSError):
            self.connection.shutdown(socket.SHUT_RDWR)
        raise _Abort()

    def _write(self, data: bytes) -> None:
        try:
            self.wfile.write(data)
            self.wfile.flush()
        except OSError:
            self.close_connection = True
            raise _Abort() from None


@contextlib.contextmanager
def serving(tls: TlsFiles, sa_key: ServiceAccountKey, **kwargs: Any) -> Iterator[KubeApiServer]:
    """A running KubeApiServer, closed on exit."""
    server = KubeApiServer(tls, sa_key, **kwargs)
    try:
        yield server
    finally:
        server.close()


def stack_folder(server: KubeApiServer, monkeypatch: Any, directory: Path, config: str, stack: str,
                 outputs: dict[str, str]) -> None:
    """A user's folder for a deployed stack behind ``server``: the config, the images record, ``outputs.json`` naming
    the server (its CA), and ADC (:func:`use_adc`), then works in it."""
    from image_refs import write_record

    (directory / "raytpu.yaml").write_text(config)
    write_record(directory)
    (directory / "outputs.json").write_text(json.dumps({stack: {**outputs, "endpoint": server.url,
                                                                "ca_certificate": server.tls.ca_b64}}))
    use_adc(server, monkeypatch, directory)


def use_adc(server: KubeApiServer, monkeypatch: Any, directory: Path) -> None:
    """This process's Application Default Credentials: a service-account key file in ``directory`` whose token
    endpoint is ``server``; the server's CA trusted, no proxy in the way. Then works in ``directory``."""
    key = directory / "adc.json"
    key.write_text(json.dumps(server.sa_key.info(server.token_uri)))
    monkeypatch.setenv("GOOGLE_APPLICATION_CREDENTIALS", str(key))
    monkeypatch.setenv("REQUESTS_CA_BUNDLE", str(server.tls.ca_path))
    monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")
    monkeypatch.chdir(directory)
