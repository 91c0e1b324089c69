"""raytpu.cluster.kube.kube_client at its boundary: the Kubernetes API over loopback HTTPS.

GKE cannot be reached from here, so these tests speak the Kubernetes API to ``kube_server.KubeApiServer``, a
loopback HTTPS server (its CA made for the test and handed over base64-encoded, as GKE outputs it) that
answers the paths the kit uses as kube-apiserver does, validates applied bodies against the vendored
KubeRay CRD schemas and records every request. The tests assert the exact requests (method, path, query,
content type, field manager, bearer token), the watch's resume after a dropped stream and after 410 Gone,
and each failure's one-line message and exit code. Credentials are real ``google.auth`` objects: a
service-account key made for the test, whose JWT assertion the loopback token endpoint verifies before it
issues the bearer token the API then requires. Nothing is patched in the code under test.
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from google.oauth2 import service_account
from kube_server import (
    NAMESPACE,
    SA_EMAIL,
    KubeApiServer,
    ServiceAccountKey,
    TlsFiles,
    apply_conflict,
    forbidden,
    internal_error,
    serving,
    status_body,
    unauthorized,
    unavailable,
)

from raytpu.cluster.kube.kube_client import SCOPES, KubeClient, api_host, ca_pem
from raytpu.cluster.kube.kube_errors import ADC_HELP, KubeError
from raytpu.core.common.errors import EXIT_INVALID, EXIT_RUNTIME, InvalidInput
from raytpu.core.manifests.kube_resources import manifest_target, resource

pytestmark = pytest.mark.unit

JOB = "smoke-a1"
JOB_PATH = f"/apis/ray.io/v1/namespaces/{NAMESPACE}/rayjobs/{JOB}"
JOBS_PATH = f"/apis/ray.io/v1/namespaces/{NAMESPACE}/rayjobs"
RETRY_VALID = ("retry later: the control plane is busy or upgrading (GKE answers 5xx during control-plane upgrades "
               "and resizes)")


def rayjob(name: str = JOB, **spec: Any) -> dict[str, Any]:
    """A minimal RayJob the KubeRay v1.7.0 schema accepts."""
    head = {"rayStartParams": {}, "template": {"spec": {"containers": [
        {"name": "ray-head", "image": "rayproject/ray:2.60.0"}]}}}
    return {"apiVersion": "ray.io/v1", "kind": "RayJob", "metadata": {"name": name, "labels": {"app": "raytpu"}},
            "spec": {"entrypoint": "python -m raytpu.workloads.smoke", "submissionMode": "K8sJobMode",
                     "rayClusterSpec": {"headGroupSpec": head}, **spec}}


def job_status(deployment: str, job: str = "") -> dict[str, str]:
    return {"jobDeploymentStatus": deployment, **({"jobStatus": job} if job else {})}


@pytest.fixture
def server(tls: TlsFiles, sa_key: ServiceAccountKey, monkeypatch: pytest.MonkeyPatch) -> Iterator[KubeApiServer]:
    # google-auth refreshes tokens over `requests`, which trusts REQUESTS_CA_BUNDLE: the loopback server's CA.
    monkeypatch.setenv("REQUESTS_CA_BUNDLE", str(tls.ca_path))
    monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")
    with serving(tls, sa_key) as running:
        yield running


@pytest.fixture(scope="module")
def sa_creds(sa_key: ServiceAccountKey) -> service_account.Credentials:
    """Service-account credentials from a key file's JSON, as ``gcloud iam service-accounts keys create`` writes it."""
    return service_account.Credentials.from_service_account_info(sa_key.info("https://unused.invalid/token"),
                                                                 scopes=list(SCOPES))


@pytest.fixture
def creds(server: KubeApiServer, sa_creds: service_account.Credentials) -> service_account.Credentials:
    """Fresh real credentials (no token yet) whose token_uri is the loopback token endpoint (the key parsed once)."""
    return sa_creds.with_token_uri(server.token_uri)


def connect(server: KubeApiServer, creds: Any = None, **kwargs: Any) -> KubeClient:
    options: dict[str, Any] = {"timeout_s": 5.0, "retries": 2, "backoff_s": 0.01, **kwargs}
    return KubeClient(server.url, server.tls.ca_b64, NAMESPACE, creds, **options)


@pytest.fixture
def client(server: KubeApiServer, creds: service_account.Credentials) -> Iterator[KubeClient]:
    with connect(server, creds) as made:
        yield made


def failure(call: Any) -> KubeError:
    """The KubeError ``call()`` raises, checked to be one line of the kit's error form with exit code 1."""
    with pytest.raises(KubeError) as caught:
        call()
    text = str(caught.value)
    assert "\n" not in text and text.startswith("kubernetes: ") and "; valid: " in text, text
    assert caught.value.exit_code == EXIT_RUNTIME
    return caught.value


def paths(server: KubeApiServer) -> list[str]:
    return [f"{r.method} {r.path}" for r in server.requests]


# ------------------------------------------------------------------------------------------ requests


def test_apply_is_a_server_side_apply_patch_with_the_field_manager(server: KubeApiServer, client: KubeClient) -> None:
    out = client.apply(rayjob())
    assert paths(server) == ["POST /token", f"PATCH {JOB_PATH}"]
    patch = server.requests[-1]
    assert patch.query == {"fieldManager": "raytpu", "force": "false", "fieldValidation": "Strict"}
    assert patch.headers["content-type"] == "application/apply-patch+yaml"
    assert patch.headers["accept"] == "application/json"
    assert patch.json == rayjob()
    assert patch.bearer == server.tokens[-1]
    assert out["metadata"]["resourceVersion"] and out["metadata"]["namespace"] == NAMESPACE
    assert out["metadata"]["managedFields"][0]["manager"] == "raytpu"


def test_apply_again_updates_and_keeps_the_status(server: KubeApiServer, client: KubeClient) -> None:
    first = client.apply(rayjob())
    server.set_status("rayjobs", JOB, job_status("Running", "RUNNING"))
    second = client.apply(rayjob(shutdownAfterJobFinishes=True))
    assert int(second["metadata"]["resourceVersion"]) > int(first["metadata"]["resourceVersion"])
    assert second["spec"]["shutdownAfterJobFinishes"] is True
    assert second["status"] == job_status("Running", "RUNNING")


def test_apply_uses_the_manifests_namespace_and_a_custom_field_manager(server: KubeApiServer,
                                                                        creds: Any) -> None:
    manifest = rayjob()
    manifest["metadata"]["namespace"] = "team-a"
    with connect(server, creds, field_manager="raytpu-ci") as client:
        client.apply(manifest)
    patch = server.of("PATCH")[0]
    assert patch.path == f"/apis/ray.io/v1/namespaces/team-a/rayjobs/{JOB}"
    assert patch.query["fieldManager"] == "raytpu-ci"


def test_apply_of_an_invalid_manifest_is_the_servers_422_in_one_line(server: KubeApiServer,
                                                                     client: KubeClient) -> None:
    error = failure(lambda: client.apply(rayjob(suspendd=True)))
    assert error.status == 422
    assert str(error) == (
        f'kubernetes: 422 Unprocessable Entity: apply rayjobs.ray.io "{JOB}" in namespace "{NAMESPACE}": the '
        "manifest is invalid (spec: Additional properties are not allowed ('suspendd' was unexpected)); valid: a "
        "manifest the served CRD schema accepts (check the kit's and KubeRay's versions match)")
    assert server.get_object("rayjobs", JOB) is None


def test_get_reads_the_object_and_none_when_it_does_not_exist(server: KubeApiServer, client: KubeClient) -> None:
    server.put(rayjob())
    obj = client.get("rayjob", JOB)
    assert obj is not None and obj["spec"]["entrypoint"] == "python -m raytpu.workloads.smoke"
    assert client.get("RayJob", "missing") is None
    assert [f"{r.method} {r.path}" for r in server.api_requests()] == [f"GET {JOB_PATH}", f"GET {JOBS_PATH}/missing"]
    assert all(r.query == {} and r.bearer == server.tokens[-1] for r in server.api_requests())


def test_delete_removes_the_object_once(server: KubeApiServer, client: KubeClient) -> None:
    server.put(rayjob())
    assert client.delete("rayjob", JOB) is True
    assert client.delete("rayjob", JOB) is False
    deletes = server.of("DELETE")
    assert [(d.path, d.query) for d in deletes] == [(JOB_PATH, {"propagationPolicy": "Background"})] * 2


def test_pods_nodes_and_events_list_with_their_selectors(server: KubeApiServer, client: KubeClient) -> None:
    server.add_pod("a-1", {"job-name": "a"}, [])
    server.add_pod("b-1", {"job-name": "b"}, [])
    server.put({"apiVersion": "v1", "kind": "Node", "metadata": {
        "name": "gke-tpu-1", "labels": {"cloud.google.com/gke-tpu-topology": "4x4"}}}, namespace=None)
    server.put({"apiVersion": "v1", "kind": "Event", "metadata": {"name": "e1"}, "reason": "FailedScheduling",
                "involvedObject": {"kind": "Pod", "name": "a-1"}})
    assert [p["metadata"]["name"] for p in client.pods("job-name=a")] == ["a-1"]
    assert [n["metadata"]["name"] for n in client.nodes("cloud.google.com/gke-tpu-topology=4x4")] == ["gke-tpu-1"]
    assert [e["reason"] for e in client.events("involvedObject.name=a-1")] == ["FailedScheduling"]
    assert [(r.path, r.query) for r in server.api_requests()] == [
        (f"/api/v1/namespaces/{NAMESPACE}/pods", {"labelSelector": "job-name=a"}),
        ("/api/v1/nodes", {"labelSelector": "cloud.google.com/gke-tpu-topology=4x4"}),
        (f"/api/v1/namespaces/{NAMESPACE}/events", {"fieldSelector": "involvedObject.name=a-1"}),
    ]


def test_logs_read_and_follow_a_pod(server: KubeApiServer, client: KubeClient) -> None:
    server.add_pod("p", {}, ["one", "two", "three"])
    assert list(client.logs("p")) == ["one", "two", "three"]
    assert list(client.logs("p", container="ray-job-submitter", follow=True)) == ["one", "two", "three"]
    reads = server.of("GET", "/log")
    assert [(r.path, r.query) for r in reads] == [
        (f"/api/v1/namespaces/{NAMESPACE}/pods/p/log", {}),
        (f"/api/v1/namespaces/{NAMESPACE}/pods/p/log", {"container": "ray-job-submitter", "follow": "true"}),
    ]


def test_job_logs_stream_the_newest_submitter_pod(server: KubeApiServer, client: KubeClient) -> None:
    server.add_pod(f"{JOB}-old", {"job-name": JOB}, ["attempt 1 failed"], created="2026-01-01T00:00:00Z")
    server.add_pod(f"{JOB}-new", {"job-name": JOB}, ["smoke: ok", "done"], created="2026-01-01T00:05:00Z")
    assert list(client.job_logs(JOB, follow=True)) == ["smoke: ok", "done"]
    assert [(r.path, r.query) for r in server.api_requests()] == [
        (f"/api/v1/namespaces/{NAMESPACE}/pods", {"labelSelector": f"job-name={JOB}"}),
        (f"/api/v1/namespaces/{NAMESPACE}/pods/{JOB}-new/log", {"follow": "true"}),
    ]
    assert list(client.job_logs("no-such-job")) == []


# ------------------------------------------------------------------------------------------ watch


def follow(server: KubeApiServer, client: KubeClient, states: list[dict[str, str]], **kwargs: Any) -> list[str]:
    """Watches the RayJob; on each event the server moves it to the next state (as KubeRay would)."""
    pending = list(states)
    seen = []
    for obj in client.watch("rayjob", JOB, timeout_s=10, **kwargs):
        seen.append(obj.get("status", {}).get("jobDeploymentStatus", "New"))
        if not pending:
            break
        server.set_status("rayjobs", JOB, pending.pop(0))
    return seen


def watch_queries(server: KubeApiServer) -> list[dict[str, str]]:
    return [r.query for r in server.of("GET", JOBS_PATH) if r.path == JOBS_PATH]


def test_watch_lists_then_watches_from_the_lists_version(server: KubeApiServer, client: KubeClient) -> None:
    server.put(rayjob())
    listed_at = server.resource_version
    seen = follow(server, client, [job_status("Initializing"), job_status("Running"), job_status("Complete")])
    assert seen == ["New", "Initializing", "Running", "Complete"]
    queries = watch_queries(server)
    assert queries[0] == {"fieldSelector": f"metadata.name={JOB}"}
    assert queries[1] == {"watch": "1", "resourceVersion": listed_at, "fieldSelector": f"metadata.name={JOB}",
                          "allowWatchBookmarks": "true", "timeoutSeconds": "10"}
    assert len(queries) == 2


def test_watch_resumes_from_the_last_version_after_a_dropped_stream(server: KubeApiServer,
                                                                   client: KubeClient) -> None:
    server.put(rayjob())
    server.drop_next_watch(after_events=1)
    versions: list[str] = []
    pending = [job_status("Initializing"), job_status("Running"), job_status("Complete")]
    seen = []
    for obj in client.watch("rayjob", JOB, timeout_s=10):
        seen.append(obj.get("status", {}).get("jobDeploymentStatus", "New"))
        versions.append(obj["metadata"]["resourceVersion"])
        if not pending:
            break
        server.set_status("rayjobs", JOB, pending.pop(0))
    assert seen == ["New", "Initializing", "Running", "Complete"]  # nothing lost, nothing repeated
    watches = [q for q in watch_queries(server) if q.get("watch")]
    assert [w["resourceVersion"] for w in watches] == [versions[0], versions[1]]


def test_watch_relists_after_an_expired_version_in_the_stream(server: KubeApiServer, client: KubeClient) -> None:
    server.put(rayjob())
    old = server.set_status("rayjobs", JOB, job_status("Initializing"))["metadata"]["resourceVersion"]
    server.set_status("rayjobs", JOB, job_status("Running"))
    server.compact()
    seen = follow(server, client, [job_status("Complete")], resource_version=old)
    assert seen == ["Running", "Complete"]
    queries = watch_queries(server)
    assert [q.get("resourceVersion") for q in queries] == [old, None, str(int(old) + 1)]
    assert [q.get("watch") for q in queries] == ["1", None, "1"]


def test_watch_relists_after_a_410_gone_answer(server: KubeApiServer, client: KubeClient) -> None:
    server.watch_gone_as_http = True
    server.put(rayjob())
    server.set_status("rayjobs", JOB, job_status("Running"))
    server.compact()
    listed_at = server.resource_version
    assert follow(server, client, [job_status("Complete")], resource_version="1") == ["Running", "Complete"]
    assert [q.get("resourceVersion") for q in watch_queries(server)] == ["1", None, listed_at]


def test_watch_ends_when_the_object_is_deleted(server: KubeApiServer, client: KubeClient) -> None:
    server.put(rayjob())
    seen = []
    for obj in client.watch("rayjob", JOB, timeout_s=10):
        seen.append(obj["metadata"]["name"])
        server.remove("rayjobs", JOB)
    assert seen == [JOB]


def test_watch_stops_at_its_deadline(server: KubeApiServer, client: KubeClient) -> None:
    server.put(rayjob())
    start = time.monotonic()
    assert len(list(client.watch("rayjob", JOB, timeout_s=1.0))) == 1
    assert time.monotonic() - start < 4


def test_watch_gives_up_after_repeated_drops(server: KubeApiServer, client: KubeClient) -> None:
    server.put(rayjob())
    for _ in range(3):
        server.drop_next_watch(after_events=0)
    error = failure(lambda: list(client.watch("rayjob", JOB, timeout_s=10)))
    assert error.status == 0
    assert str(error).startswith(f'kubernetes: watch rayjobs.ray.io "{JOB}" in namespace "{NAMESPACE}": the '
                                 "stream broke 3 times in a row (")
    assert len([q for q in watch_queries(server) if q.get("watch")]) == 3


# ------------------------------------------------------------------------------------------ failures


def test_403_names_the_missing_permission_and_the_principal(server: KubeApiServer, client: KubeClient) -> None:
    body = forbidden("get", "rayjobs", "ray.io", JOB, "container.thirdPartyObjects.get")
    server.fail("GET", JOB_PATH, 403, body)
    error = failure(lambda: client.get("rayjob", JOB))
    assert error.status == 403
    assert str(error) == (
        f'kubernetes: 403 Forbidden: get rayjobs.ray.io "{JOB}" in namespace "{NAMESPACE}": missing permission '
        f"container.thirdPartyObjects.get ({body['message']}); valid: grant roles/container.developer (or a role "
        f"with container.thirdPartyObjects.get) to {SA_EMAIL}")
    assert len(server.of("GET", JOB_PATH)) == 1  # not retried


def test_401_refreshes_the_token_once_then_says_how_to_get_credentials(server: KubeApiServer,
                                                                       client: KubeClient) -> None:
    server.fail("GET", JOB_PATH, 401, unauthorized(), times=2)
    error = failure(lambda: client.get("rayjob", JOB))
    assert error.status == 401
    assert str(error) == (f'kubernetes: 401 Unauthorized: get rayjobs.ray.io "{JOB}" in namespace "{NAMESPACE}": '
                          f"the cluster rejected the access token (Unauthorized); valid: {ADC_HELP}")
    assert paths(server) == ["POST /token", f"GET {JOB_PATH}", "POST /token", f"GET {JOB_PATH}"]
    assert [r.bearer for r in server.of("GET")] == server.tokens


def test_404_of_the_resource_type_asks_for_the_ray_operator_add_on(server: KubeApiServer,
                                                                   client: KubeClient) -> None:
    server.serve_ray = False
    expected = ("kubernetes: 404 Not Found: ray.io/v1 RayJob is not served by this cluster: is the Ray Operator "
                "add-on enabled?; valid: a cluster with the Ray Operator add-on (the cluster stack enables it; by "
                "hand: `gcloud container clusters update CLUSTER --location LOCATION "
                "--update-addons=RayOperator=ENABLED`)")
    for call in (lambda: client.get("rayjob", JOB), lambda: client.apply(rayjob()),
                 lambda: list(client.watch("rayjob", JOB, timeout_s=5))):
        error = failure(call)
        assert (error.status, str(error)) == (404, expected)
    assert [f"{r.method} {r.path}" for r in server.api_requests()] == [
        f"GET {JOB_PATH}", "GET /apis/ray.io/v1", f"PATCH {JOB_PATH}", f"GET {JOBS_PATH}"]  # discovery cached


def test_404_of_the_namespace_names_it(server: KubeApiServer, client: KubeClient) -> None:
    server.fail("PATCH", JOB_PATH, 404, status_body(404, "NotFound", f'namespaces "{NAMESPACE}" not found',
                                                    {"name": NAMESPACE, "kind": "namespaces"}))
    error = failure(lambda: client.apply(rayjob()))
    assert str(error) == (f'kubernetes: 404 Not Found: apply rayjobs.ray.io "{JOB}" in namespace "{NAMESPACE}": '
                          f'namespace "{NAMESPACE}" does not exist; valid: the namespace from the cluster stack\'s '
                          "outputs (the stack creates it)")


def test_409_names_the_conflicting_field_manager(server: KubeApiServer, client: KubeClient) -> None:
    server.fail("PATCH", JOB_PATH, 409, apply_conflict("kubectl-client-side-apply", [".spec.entrypoint"]))
    error = failure(lambda: client.apply(rayjob()))
    assert error.status == 409
    assert str(error) == (
        f'kubernetes: 409 Conflict: apply rayjobs.ray.io "{JOB}" in namespace "{NAMESPACE}": field manager '
        '"kubectl-client-side-apply" owns .spec.entrypoint the kit applies; valid: leave those fields to '
        '"kubectl-client-side-apply" (drop them from the manifest), or delete the object so the kit\'s field '
        "manager creates it again")
    assert len(server.of("PATCH")) == 1


def test_5xx_is_retried_then_fails_in_one_line(server: KubeApiServer, client: KubeClient) -> None:
    server.fail("GET", JOB_PATH, 503, unavailable(), times=3)
    error = failure(lambda: client.get("rayjob", JOB))
    assert error.status == 503
    assert str(error) == (
        f'kubernetes: 503 Service Unavailable: get rayjobs.ray.io "{JOB}" in namespace "{NAMESPACE}": failed 3 '
        f"times (the server is currently unable to handle the request); valid: {RETRY_VALID}")
    assert len(server.of("GET", JOB_PATH)) == 3  # retries=2: three attempts


def test_5xx_is_retried_then_succeeds(server: KubeApiServer, client: KubeClient) -> None:
    server.put(rayjob())
    server.fail("GET", JOB_PATH, 500, internal_error(), times=2)
    assert client.get("rayjob", JOB) is not None
    assert len(server.of("GET", JOB_PATH)) == 3


def test_an_answer_broken_midway_is_retried(server: KubeApiServer, client: KubeClient) -> None:
    server.put(rayjob())
    server.fail("GET", JOB_PATH, 200, rayjob(), drop=True)
    obj = client.get("rayjob", JOB)
    assert obj is not None and obj["metadata"]["resourceVersion"]
    assert len(server.of("GET", JOB_PATH)) == 2


def test_logs_of_a_missing_pod_are_one_line(server: KubeApiServer, client: KubeClient) -> None:
    error = failure(lambda: list(client.logs("gone")))
    assert str(error) == (f'kubernetes: 404 Not Found: get logs of pod "gone" in namespace "{NAMESPACE}": pods '
                          '"gone" not found; valid: the name of an object that exists')


def test_429_waits_for_retry_after(server: KubeApiServer, client: KubeClient) -> None:
    server.put(rayjob())
    server.fail("GET", JOB_PATH, 429, status_body(429, "TooManyRequests", "Too many requests, please try again later."),
                headers={"Retry-After": "1"})
    start = time.monotonic()
    assert client.get("rayjob", JOB) is not None
    assert time.monotonic() - start >= 1.0


def test_a_slow_answer_is_a_timeout_not_retried(server: KubeApiServer, creds: Any) -> None:
    server.fail("GET", JOB_PATH, 200, {}, delay_s=2.0)
    with connect(server, creds, timeout_s=0.3) as client:
        error = failure(lambda: client.get("rayjob", JOB))
    assert str(error) == (
        f'kubernetes: get rayjobs.ray.io "{JOB}" in namespace "{NAMESPACE}": no answer from {server.url} within '
        "0.3s; valid: a reachable, responsive control plane (GKE authorized networks must include this machine; "
        "retry later if the control plane is upgrading)")
    assert len(server.of("GET", JOB_PATH)) == 1


def test_an_unreachable_endpoint_is_retried_then_one_line(creds: Any) -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    client = KubeClient(f"127.0.0.1:{port}", None, NAMESPACE, creds, retries=2, backoff_s=0.01)
    creds.token, creds.expiry = "unused", None  # no token endpoint here: a token google-auth treats as fresh
    error = failure(lambda: client.get("rayjob", JOB))
    assert str(error).startswith(f'kubernetes: get rayjobs.ray.io "{JOB}" in namespace "{NAMESPACE}": cannot '
                                 f"reach https://127.0.0.1:{port} after 3 attempts (")
    assert str(error).endswith("valid: the cluster endpoint from the stack outputs, reachable from here (GKE "
                               "authorized networks, or the DNS endpoint)")


def test_a_wrong_ca_is_a_tls_error(server: KubeApiServer, creds: Any) -> None:
    with KubeClient(server.url, None, NAMESPACE, creds, retries=2) as client:
        error = failure(lambda: client.get("rayjob", JOB))
    assert "TLS to " in str(error) and "CERTIFICATE_VERIFY_FAILED" in str(error)
    assert str(error).endswith("valid: the cluster CA certificate from the stack outputs (ca_certificate) for this "
                               "endpoint")
    assert server.api_requests() == []


# ------------------------------------------------------------------------------------------ credentials


def test_api_calls_carry_the_token_the_token_endpoint_issued(server: KubeApiServer, client: KubeClient) -> None:
    server.put(rayjob())
    client.get("rayjob", JOB)
    client.get("rayjob", JOB)
    token_request = server.of("POST", "/token")
    assert len(token_request) == 1 and token_request[0].headers["content-type"] == "application/x-www-form-urlencoded"
    assert [r.bearer for r in server.api_requests()] == [server.tokens[0]] * 2


def test_a_token_about_to_expire_is_refreshed_before_the_call(server: KubeApiServer, client: KubeClient) -> None:
    server.token_ttl_s = 60  # under google-auth's 3m45s refresh threshold: stale as soon as issued
    server.put(rayjob())
    client.get("rayjob", JOB)
    client.get("rayjob", JOB)
    assert paths(server) == ["POST /token", f"GET {JOB_PATH}", "POST /token", f"GET {JOB_PATH}"]
    assert [r.bearer for r in server.api_requests()] == server.tokens == ["ya29.test-1", "ya29.test-2"]


def test_an_expired_token_is_refreshed_once_on_401(server: KubeApiServer, client: KubeClient) -> None:
    server.put(rayjob())
    client.get("rayjob", JOB)
    server.revoke_tokens()
    assert client.get("rayjob", JOB) is not None
    assert paths(server) == ["POST /token", f"GET {JOB_PATH}", f"GET {JOB_PATH}", "POST /token", f"GET {JOB_PATH}"]
    assert [r.bearer for r in server.api_requests()] == ["ya29.test-1", "ya29.test-1", "ya29.test-2"]


def test_default_credentials_come_from_adc(server: KubeApiServer, sa_key: ServiceAccountKey, tmp_path: Path,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    key_file = tmp_path / "sa.json"
    key_file.write_text(json.dumps(sa_key.info(server.token_uri)))
    monkeypatch.setenv("GOOGLE_APPLICATION_CREDENTIALS", str(key_file))
    server.put(rayjob())
    with connect(server) as client:
        assert client.get("rayjob", JOB) is not None
    assert paths(server) == ["POST /token", f"GET {JOB_PATH}"]
    assert server.api_requests()[0].bearer == server.tokens[0]


def test_missing_adc_is_one_line(server: KubeApiServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GOOGLE_APPLICATION_CREDENTIALS", str(tmp_path / "absent.json"))
    with connect(server) as client:
        error = failure(lambda: client.get("rayjob", JOB))
    assert str(error).startswith("kubernetes: no Application Default Credentials (File ")
    assert str(error).endswith(f"; valid: {ADC_HELP}")
    assert server.requests == []


def test_a_refused_token_refresh_is_one_line(server: KubeApiServer, client: KubeClient) -> None:
    server.fail("POST", "/token", 400, {"error": "invalid_grant", "error_description": "Invalid JWT Signature."})
    error = failure(lambda: client.get("rayjob", JOB))
    assert str(error).startswith(f'kubernetes: get rayjobs.ray.io "{JOB}" in namespace "{NAMESPACE}": cannot get an '
                                 "access token (invalid_grant: Invalid JWT Signature.")
    assert str(error).endswith(f"; valid: {ADC_HELP}")
    assert server.api_requests() == []


# ------------------------------------------------------------------------------------------ inputs


@pytest.mark.parametrize(("endpoint", "url"), [
    ("34.1.2.3", "https://34.1.2.3"),
    ("https://34.1.2.3/", "https://34.1.2.3"),
    ("gke-abc.us-east5.gke.goog", "https://gke-abc.us-east5.gke.goog"),
])
def test_endpoint_becomes_an_https_url(endpoint: str, url: str) -> None:
    assert api_host(endpoint) == url


@pytest.mark.parametrize(("call", "field"), [
    (lambda: api_host("http://34.1.2.3"), "endpoint"),
    (lambda: api_host(" "), "endpoint"),
    (lambda: ca_pem("bm90IGEgY2VydA=="), "ca_certificate"),
    (lambda: resource("StatefulSet"), "kind"),
    (lambda: manifest_target({"apiVersion": "ray.io/v1", "kind": "RayJob", "metadata": {}}),
     "manifest.metadata.name"),
    (lambda: manifest_target({"apiVersion": "ray.io/v1alpha1", "kind": "RayJob", "metadata": {"name": "x"}}),
     "manifest.apiVersion"),
])
def test_bad_inputs_exit_2_naming_the_field(call: Any, field: str) -> None:
    with pytest.raises(InvalidInput) as caught:
        call()
    assert caught.value.field == field and caught.value.exit_code == EXIT_INVALID


def test_ca_certificate_is_decoded_from_gkes_base64(tls: TlsFiles) -> None:
    assert ca_pem(tls.ca_b64) == tls.ca_pem.decode()
    assert ca_pem(tls.ca_pem.decode()) == tls.ca_pem.decode()
    # the DNS-based endpoint's stack outputs an empty CA: its certificate is publicly trusted (system CAs)
    assert ca_pem("") is None and ca_pem(None) is None


def test_importing_the_module_loads_no_client_library() -> None:
    code = ("import sys, raytpu.cluster.kube.kube_client; print(sorted(m for m in sys.modules "
            "if m.split('.')[0] in ('kubernetes', 'google', 'urllib3', 'requests')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
