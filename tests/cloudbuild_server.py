"""A loopback Cloud Build + Cloud Storage server: the boundary ``raytpu images build`` is tested at.

Neither API can be reached from the test machine, so the tests stop at the wire. This threaded HTTP server on
127.0.0.1 answers the calls the kit makes, the way Google's REST APIs answer them:

- ``POST /token``: the OAuth2 JWT-bearer grant (the service-account key's ``token_uri``), as in
  ``tests/kube_server.py``: google-auth's real credentials refresh here, and API calls must carry a token it issued;
- GCS JSON API (https://cloud.google.com/storage/docs/json_api/v1/objects): simple media upload
  ``POST /upload/storage/v1/b/{bucket}/o?uploadType=media&name=...`` (answers the Object with its ``generation``;
  ``ifGenerationMatch=0`` answers 412 when the object exists), ``GET /storage/v1/b/{bucket}/o/{object}`` (metadata),
  and ``GET /storage/v1/b/{bucket}/o/{object}?alt=media`` honouring ``Range: bytes=N-`` (206; 416 when nothing lies
  past N; 404 for no object);
- Cloud Build v1 (https://cloud.google.com/build/docs/api/reference/rest/v1/projects.locations.builds):
  ``POST /v1/projects/{p}/locations/{l}/builds`` checks the body against the vendored ``cloudbuild.proto``
  (:func:`cloudbuild_schema.request_errors`; a 400 ``INVALID_ARGUMENT`` naming each field otherwise) and that its
  ``storageSource`` object was uploaded, and answers a ``google.longrunning.Operation`` whose metadata is a
  ``BuildOperationMetadata``; ``GET .../builds/{id}`` steps the build one state per call along its ``scenario``
  (``QUEUED -> WORKING -> SUCCESS``, or ``-> FAILURE`` with the step's exit code and ``failureInfo``), appending
  to its log object in ``logsBucket`` as Cloud Build streams it; every Build it answers is checked against the proto
  too (``response=True``);
- the steps run for real: when a build starts, each step's ``script`` runs in bash with the step's ``env``, in a
  ``/workspace`` stand-in holding the uploaded source, with ``$BUILDER_OUTPUT`` set (cloudbuild.proto
  ``Results.build_step_outputs``); only ``docker`` is a stand-in (``tests/fake_docker.py``: ``pull``,
  ``image inspect`` answering :attr:`CloudBuildServer.registry`'s digest, ``build`` resolving the Dockerfile's
  ``FROM`` through its build args). Each step's output comes back base64 in ``results.buildStepOutputs`` (a
  ``bytes`` field: base64 in the proto3 JSON mapping, https://protobuf.dev/programming-guides/json/), its log lines
  prefixed ``Step #N - "id": `` as Cloud Build's are;
- ``fail(...)``: the next matching request answers a scripted status with Google's error body
  (https://cloud.google.com/apis/design/errors), e.g. a 429 the client must retry or a 403.

Every request is recorded for the tests to assert on.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import io
import json
import os
import re
import subprocess
import sys
import tarfile
import tempfile
import threading
import urllib.parse
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from cloudbuild_schema import request_errors
from google.auth import jwt
from kube_server import JWT_AUDIENCE, SA_EMAIL, TOKEN_PATH, Recorded, ServiceAccountKey, serve_in_background

STATUS_NAMES = {400: "INVALID_ARGUMENT", 403: "PERMISSION_DENIED", 404: "NOT_FOUND", 429: "RESOURCE_EXHAUSTED",
                500: "INTERNAL", 503: "UNAVAILABLE"}
_BUILDS = re.compile(r"^/v1/projects/(?P<project>[^/]+)/locations/(?P<location>[^/]+)/builds(?:/(?P<id>[^/]+))?$")
_UPLOAD = re.compile(r"^/upload/storage/v1/b/(?P<bucket>[^/]+)/o$")
FAKE_DOCKER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fake_docker.py")
_OBJECT = re.compile(r"^/storage/v1/b/(?P<bucket>[^/]+)/o/(?P<object>[^/]+)$")


def google_error(status: int, message: str, reason: str = "") -> dict[str, Any]:
    """Google's JSON error body."""
    error: dict[str, Any] = {"code": status, "message": message, "status": STATUS_NAMES.get(status, "UNKNOWN")}
    if reason:
        error["details"] = [{"@type": "type.googleapis.com/google.rpc.ErrorInfo", "reason": reason,
                             "domain": "googleapis.com"}]
    return {"error": error}


@dataclass
class Failure:
    method: str
    path: str
    status: int
    body: dict[str, Any]
    times: int = 1


@dataclass
class FakeBuild:
    """A build and where it is in its scenario."""

    build: dict[str, Any]
    scenario: str
    log_object: tuple[str, str]
    polls: int = 0
    outputs: list[bytes] = field(default_factory=list)
    failed: tuple[int, int] | None = None


@dataclass
class CloudBuildServer:
    """The loopback server; ``url`` is both endpoints' base."""

    sa_key: ServiceAccountKey
    scenario: str = "success"
    """``success`` or ``failure``: how the next created build ends."""
    requests: list[Recorded] = field(default_factory=list)
    objects: dict[tuple[str, str], bytes] = field(default_factory=dict)
    builds: dict[str, FakeBuild] = field(default_factory=dict)
    schema_errors: list[str] = field(default_factory=list)
    """Every way a request or an answer broke the vendored schema (the tests assert it stays empty)."""
    registry: dict[str, str] = field(default_factory=dict)
    """Base tag -> the digest the registry serves for it (what ``docker pull`` of the tag gets)."""
    built_from: dict[str, str] = field(default_factory=dict)
    """Build id -> the ``FROM`` its ``docker build`` resolved (the Dockerfile's, through its build args)."""
    serve_pushed: bool = False
    """The registry serves what a build pushed (Artifact Registry does; off by default, tests add it by hand)."""

    def __post_init__(self) -> None:
        self._tokens: set[str] = set()
        self._failures: list[Failure] = []
        self._lock = threading.Lock()
        self._httpd = _Server(("127.0.0.1", 0), _Handler, self)
        self.url = f"http://127.0.0.1:{self._httpd.server_address[1]}"
        self._thread = serve_in_background(self._httpd)

    @property
    def token_uri(self) -> str:
        return self.url + TOKEN_PATH

    def fail(self, method: str, path: str, status: int, message: str, *, reason: str = "", times: int = 1) -> None:
        self._failures.append(Failure(method, path, status, google_error(status, message, reason), times))

    def of(self, method: str, path: str = "") -> list[Recorded]:
        return [r for r in self.requests if r.method == method and re.search(path, r.path)]

    def close(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()

    # ------------------------------------------------------------------------------------------- handling

    def handle(self, h: _Handler) -> None:
        parsed = urllib.parse.urlsplit(h.path)
        query = {k: v[-1] for k, v in urllib.parse.parse_qs(parsed.query, keep_blank_values=True).items()}
        length = int(h.headers.get("Content-Length") or 0)
        body = h.rfile.read(length) if length else b""
        with self._lock:
            self.requests.append(Recorded(h.command, parsed.path, query,
                                          {k.lower(): v for k, v in h.headers.items()}, body))
            if parsed.path == TOKEN_PATH:
                return self._token(h, body)
            for failure in self._failures:
                if failure.times > 0 and failure.method == h.command and re.search(failure.path, parsed.path):
                    failure.times -= 1
                    return h.send(failure.status, json.dumps(failure.body).encode())
            if h.headers.get("Authorization", "").removeprefix("Bearer ") not in self._tokens:
                return h.send(401, json.dumps(google_error(401, "Request had invalid authentication credentials."))
                              .encode())
            return self._api(h, h.command, parsed.path, query, body)

    def _token(self, h: _Handler, body: bytes) -> None:
        form = {k: v[-1] for k, v in urllib.parse.parse_qs(body.decode()).items()}
        claims = jwt.decode(form["assertion"], certs=self.sa_key.public_pem, audience=JWT_AUDIENCE)
        assert claims["iss"] == SA_EMAIL and "cloud-platform" in claims["scope"], claims
        token = f"ya29.build-{len(self._tokens) + 1}"
        self._tokens.add(token)
        h.send(200, json.dumps({"access_token": token, "expires_in": 3600, "token_type": "Bearer"}).encode())

    def _api(self, h: _Handler, method: str, path: str, query: dict[str, str], body: bytes) -> None:
        if method == "POST" and (m := _UPLOAD.match(path)):
            assert query.get("uploadType") == "media" and query.get("name"), query
            key = (m["bucket"], query["name"])
            if query.get("ifGenerationMatch") == "0" and key in self.objects:  # create only if absent
                return h.send(412, json.dumps(google_error(412, "At least one of the pre-conditions you specified "
                                                                "did not hold.", "conditionNotMet")).encode())
            self.objects[key] = body
            generation = str(1_700_000_000_000_000 + len(self.objects))
            return h.send(200, json.dumps({"kind": "storage#object", "bucket": key[0], "name": key[1],
                                           "generation": generation, "size": str(len(body))}).encode())
        if method == "GET" and (m := _OBJECT.match(path)):
            data = self.objects.get((m["bucket"], urllib.parse.unquote(m["object"])))
            if data is None:
                return h.send(404, json.dumps(google_error(404, "No such object")).encode())
            if query.get("alt") != "media":  # the object's metadata
                # md5Hash: "MD5 hash of the data, encoded using base64" (GCS JSON API, Objects resource)
                return h.send(200, json.dumps({"kind": "storage#object", "bucket": m["bucket"], "size": str(len(data)),
                                               "name": urllib.parse.unquote(m["object"]),
                                               "md5Hash": base64.b64encode(hashlib.md5(data).digest()).decode()
                                               }).encode())
            start = int(re.fullmatch(r"bytes=(\d+)-", h.headers.get("Range", "bytes=0-"))[1])  # type: ignore[index]
            if start >= len(data):
                return h.send(416, json.dumps(google_error(416, "Requested range not satisfiable")).encode())
            return h.send(206, data[start:], "text/plain",
                          {"Content-Range": f"bytes {start}-{len(data) - 1}/{len(data)}"})
        m = _BUILDS.match(path)
        if m and method == "POST" and not m["id"]:
            return self._create(h, m["project"], m["location"], json.loads(body))
        if m and method == "GET" and m["id"] in self.builds:
            return self._get(h, self.builds[m["id"]])
        return h.send(404, json.dumps(google_error(404, f"{method} {path}: not found")).encode())

    def _create(self, h: _Handler, project: str, location: str, body: dict[str, Any]) -> None:
        problems = request_errors("Build", body)
        self.schema_errors += problems
        if problems:
            return h.send(400, json.dumps(google_error(400, "; ".join(problems))).encode())
        source = body.get("source", {}).get("storageSource", {})
        if (source.get("bucket"), source.get("object")) not in self.objects:
            return h.send(400, json.dumps(google_error(400, f"source {source} was not uploaded")).encode())
        build_id = hashlib.sha256(f"{len(self.builds)}".encode()).hexdigest()[:8] + "-1234-5678-9abc-def012345678"
        logs_bucket, _, prefix = body["logsBucket"].removeprefix("gs://").partition("/")
        build = {**body, "id": build_id, "projectId": project, "status": "QUEUED",
                 "name": f"projects/{project}/locations/{location}/builds/{build_id}",
                 "createTime": "2026-12-02T15:00:00Z",
                 "logUrl": f"https://console.cloud.google.com/cloud-build/builds;region={location}/{build_id}",
                 "steps": [{**s, "status": "QUEUED"} for s in body["steps"]]}
        fake = FakeBuild(build, self.scenario, (logs_bucket, f"{prefix}/log-{build_id}.txt"))
        self.builds[build_id] = fake
        operation = {"name": f"projects/{project}/locations/{location}/operations/b3BlcmF0aW9u{len(self.builds)}",
                     "metadata": {"@type": "type.googleapis.com/google.devtools.cloudbuild.v1.BuildOperationMetadata",
                                  "build": build}}
        self.schema_errors += request_errors("Build", build, response=True)
        h.send(200, json.dumps(operation).encode())

    def _get(self, h: _Handler, fake: FakeBuild) -> None:
        build, fake.polls = fake.build, fake.polls + 1
        log = self.objects.setdefault(fake.log_object, b"")
        if fake.polls == 2:  # QUEUED -> WORKING
            build.update(status="WORKING", startTime="2026-12-02T15:00:05Z")
            build["steps"][0]["status"] = "WORKING"
            log += b"starting build\n"
        elif fake.polls == 3:  # the steps run
            fake.outputs, fake.failed, ran = self._run_steps(build)
            log += ran
        elif fake.polls >= 4 and build["status"] == "WORKING":
            build["finishTime"] = "2026-12-02T15:03:00Z"
            for n, step in enumerate(build["steps"]):
                step["status"] = "SUCCESS" if fake.failed is None or n < fake.failed[0] else (
                    "FAILURE" if n == fake.failed[0] else "QUEUED")
            if fake.failed is None:
                build["status"] = "SUCCESS"
                digest = "sha256:" + hashlib.sha256(build["id"].encode()).hexdigest()
                if self.serve_pushed:
                    self.registry[build["images"][0].rsplit(":", 1)[0]] = digest
                build["results"] = {"images": [{"name": build["images"][0], "digest": digest}],
                                    "buildStepOutputs": [base64.b64encode(o).decode() for o in fake.outputs]}
                log += b"PUSH\nDONE"  # the last line has no newline
            else:
                n, code = fake.failed
                detail = (f"Build step failure: build step {n} \"{build['steps'][n]['name']}\" failed: step exited "
                          f"with non-zero status: {code}")
                build.update(status="FAILURE", statusDetail=detail,
                             failureInfo={"type": "USER_BUILD_STEP", "detail": detail})
                build["steps"][n]["exitCode"] = code
                log += f"ERROR\nERROR: build step {n} \"{build['steps'][n]['name']}\" failed\n".encode()
        self.objects[fake.log_object] = log
        self.schema_errors += request_errors("Build", build, response=True)
        h.send(200, json.dumps(build).encode())

    def _run_steps(self, build: dict[str, Any]) -> tuple[list[bytes], tuple[int, int] | None, bytes]:
        """Runs each step's script as Cloud Build would, in order, until one fails: (outputs, (failed step, exit
        code) or None, log)."""
        source = build["source"]["storageSource"]
        outputs: list[bytes] = []
        log = b""
        with tempfile.TemporaryDirectory(prefix="cloudbuild-") as root:
            workspace, builder_output = os.path.join(root, "workspace"), os.path.join(root, "builder-output")
            stub = os.path.join(root, "bin")
            for d in (workspace, builder_output, stub):
                os.mkdir(d)
            with tarfile.open(fileobj=io.BytesIO(self.objects[(source["bucket"], source["object"])]),
                              mode="r:gz") as tar:
                tar.extractall(workspace, filter="data")
            with open(os.path.join(stub, "docker"), "w") as docker:
                docker.write(f"#!{sys.executable}\nimport runpy, sys\nsys.argv[0] = 'docker'\n"
                             f"runpy.run_path({FAKE_DOCKER!r}, run_name='__main__')\n")
            os.chmod(os.path.join(stub, "docker"), 0o755)
            state = os.path.join(root, "docker.json")
            with open(state, "w") as f:
                json.dump({"registry": self.registry, "fail_build": self.scenario == "failure"}, f)
            for n, step in enumerate(build["steps"]):
                env = {"PATH": f"{stub}:/usr/bin:/bin", "BUILDER_OUTPUT": builder_output, "FAKE_DOCKER_STATE": state,
                       **dict(e.split("=", 1) for e in step.get("env", []))}
                done = subprocess.run(["bash", "-c", step["script"]], cwd=workspace, env=env, capture_output=True,
                                      timeout=60, check=False)
                prefix = f'Step #{n} - "{step.get("id", n)}": '.encode()
                log += b"".join(prefix + line + b"\n" for line in (done.stdout + done.stderr).splitlines())
                out = os.path.join(builder_output, "output")
                if os.path.exists(out):
                    with open(out, "rb") as written:
                        outputs.append(written.read()[:50 * 1024])  # "Only the first 50KB of data is stored."
                    os.remove(out)
                else:
                    outputs.append(b"")
                if done.returncode:
                    return outputs, (n, done.returncode), log
            with open(state) as f:
                built = json.load(f).get("built")
            if built:
                self.built_from[build["id"]] = built["from"]
        return outputs, None, log


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, address: tuple[str, int], handler: type[_Handler], app: CloudBuildServer) -> None:
        self.app = app
        super().__init__(address, handler)


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True  # a reply is two writes (headers, body): no 40 ms wait for the delayed ACK
    server: _Server

    def log_message(self, format: str, *args: Any) -> None:
        """Quiet."""

    def _dispatch(self) -> None:
        self.server.app.handle(self)

    do_GET = do_POST = _dispatch

    def send(self, status: int, data: bytes, content_type: str = "application/json",
             headers: dict[str, str] | None = None) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        for key, value in (headers or {}).items():
            self.send_header(key, value)
        self.end_headers()
        self.wfile.write(data)


@contextlib.contextmanager
def serving(sa_key: ServiceAccountKey) -> Iterator[CloudBuildServer]:
    server = CloudBuildServer(sa_key)
    try:
        yield server
    finally:
        server.close()

