"""The Google REST APIs the kit calls besides the cluster's (Cloud Build, Cloud Storage), as the caller's ADC.

:class:`GoogleApi`: one ``AuthorizedSession`` (refreshes the token, retries once on 401), 429 and 5xx retried with
backoff (:func:`raytpu.cluster.http_retry.policy`; a POST's 5xx is not), a timeout on every request, every failure one
line (exit 1) naming the IAM role that grants what was refused. :func:`upload_core` serves ``--upload-core``. Endpoints
are overridable (:data:`CLOUDBUILD_ENV`, :data:`STORAGE_ENV`: tests use loopback). Source: google-auth 2.63.0.
google-auth and requests load when a session is made."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from raytpu.cluster.http_retry import HttpRetry, policy
from raytpu.core import core_zip
from raytpu.core.common import names
from raytpu.core.common.errors import RuntimeFailure

if TYPE_CHECKING:
    import requests

CLOUDBUILD_ENV = "RAYTPU_CLOUDBUILD_ENDPOINT"
"""Overrides the Cloud Build endpoint (default :data:`CLOUDBUILD_API`)."""
STORAGE_ENV = "RAYTPU_STORAGE_ENDPOINT"
"""Overrides the Cloud Storage JSON API endpoint (default :data:`STORAGE_API`)."""
CLOUDBUILD_API = "https://cloudbuild.googleapis.com"
STORAGE_API = "https://storage.googleapis.com"
SCOPES = ("https://www.googleapis.com/auth/cloud-platform",)
ADC_HELP = ("Application Default Credentials (`gcloud auth application-default login`, Workload Identity "
            "Federation in CI, or a GKE pod's identity)")
TIMEOUT_S = 60.0
"""Per-request bound (connect and read); a build's whole wait is bounded by ``raytpu images build --timeout-s``."""


def endpoints() -> tuple[str, str]:
    """(Cloud Build, Cloud Storage) base URLs: the environment's overrides, else Google's."""
    return (os.environ.get(CLOUDBUILD_ENV) or CLOUDBUILD_API).rstrip("/"), \
        (os.environ.get(STORAGE_ENV) or STORAGE_API).rstrip("/")


class _CreateOnceRetry(HttpRetry):
    """A POST creates (a build, an object): one answered 5xx may have been carried out (Cloud Build may have queued
    the build), so asking again could start a second build. Only a 429, refused before any work, is asked again."""

    def is_retry(self, method: str, status_code: int, has_retry_after: bool = False) -> bool:
        if method == "POST" and status_code != 429:
            return False
        return super().is_retry(method, status_code, has_retry_after)


class GoogleApi:
    """An authorized session with retries; :meth:`call` returns a success or raises one line."""

    def __init__(self, credentials: Any = None, *, retries: int = 3, backoff_s: float = 1.0) -> None:
        import google.auth
        import requests.adapters
        from google.auth.exceptions import GoogleAuthError
        from google.auth.transport.requests import AuthorizedSession


        if credentials is None:
            try:
                credentials, _ = google.auth.default(scopes=list(SCOPES))
            except GoogleAuthError as exc:
                raise RuntimeFailure(f"no Application Default Credentials ({_first_line(exc)})", ADC_HELP) from exc
        self.session = AuthorizedSession(credentials)
        adapter = requests.adapters.HTTPAdapter(max_retries=policy(retries, backoff_s, _CreateOnceRetry))
        self.session.mount("https://", adapter)
        self.session.mount("http://", adapter)
        self.cloudbuild, self.storage = endpoints()

    def call(self, method: str, url: str, what: str, *, role: str | Callable[[str], str], ok: tuple[int, ...] = (),
             **kwargs: Any) -> requests.Response:
        """One request; a status below 300 or in ``ok`` is returned, else RuntimeFailure naming ``what``, the server's
        message and (403) ``role``, the grant it lacks (or a function of the message that says which)."""
        import requests
        from google.auth.exceptions import GoogleAuthError

        try:
            response = self.session.request(method, url, timeout=kwargs.pop("timeout", TIMEOUT_S), **kwargs)
        except GoogleAuthError as exc:
            raise RuntimeFailure(f"{what}: cannot get an access token ({_first_line(exc)})", ADC_HELP) from exc
        except requests.RequestException as exc:
            raise RuntimeFailure(f"{what}: no answer from {url.split('?')[0]} ({_first_line(exc)})",
                                 "network access to Google APIs from here; retry later") from exc
        if response.status_code < 300 or response.status_code in ok:
            return response
        raise api_error(response, what, role)


def api_error(response: requests.Response, what: str, role: str | Callable[[str], str]) -> RuntimeFailure:
    """One line for a Google API error answer (``{"error": {"code", "message", "status", "details"}}``,
    https://cloud.google.com/apis/design/errors#http_mapping): the fix by status."""
    status, message, reason = response.status_code, response.reason or "", ""
    try:
        error = response.json().get("error", {})
        message = str(error.get("message") or message)
        reason = " ".join(str(d.get("reason", "")) for d in error.get("details", []) if isinstance(d, dict))
    except (ValueError, AttributeError):
        pass
    head = f"{what}: HTTP {status} ({_first_line(message)[:300]})"
    if "SERVICE_DISABLED" in reason or "has not been used in project" in message:
        return RuntimeFailure(head, "the API enabled in the project: `cdktf deploy` of the cluster stack enables it "
                                    "(raytpu.modules.project_services)")
    if status == 401:
        return RuntimeFailure(head, ADC_HELP)
    if status == 403:
        return RuntimeFailure(head, f"grant the caller {role if isinstance(role, str) else role(message)}")
    if status == 404:
        return RuntimeFailure(head, "the stack's project, bucket and region from the outputs file; is the cluster "
                                    "stack deployed?")
    if status >= 500 and response.request is not None and response.request.method == "POST":
        return RuntimeFailure(head, "retry later; first see whether it was done anyway (`gcloud builds list "
                                    "--region REGION` for a build), as a create is not repeated on its own")
    if status == 429 or status >= 500:
        return RuntimeFailure(head + " after retries", "retry later")
    return RuntimeFailure(head, "a request the API accepts (report this as a raytpu bug)")


# --------------------------------------------------------------------------------------------- --upload-core

def upload_target(py_modules: str | None, bucket: str) -> str:
    """Where ``--upload-core`` copies the zip: ``py_modules`` if it is a ``gs://`` URI, else the bucket's default."""
    return py_modules if py_modules and py_modules.startswith("gs://") else names.core_zip_uri(bucket)


def upload_core(uri: str, credentials: Any = None, api: str = STORAGE_API) -> None:
    """Builds the core zip and uploads it to ``uri`` (``gs://bucket/object``, ``uploadType=media``) as the caller's ADC
    (RuntimeFailure, one line, on error). Source: https://cloud.google.com/storage/docs/uploading-objects"""
    import google.auth
    from google.auth.transport.requests import AuthorizedSession

    bucket, _, name = uri.removeprefix("gs://").partition("/")
    if credentials is None:
        credentials, _ = google.auth.default(scopes=["https://www.googleapis.com/auth/devstorage.read_write"])
    session = AuthorizedSession(credentials)
    response = session.post(f"{api}/upload/storage/v1/b/{bucket}/o",
                            params={"uploadType": "media", "name": name}, data=core_zip.core_zip_bytes(),
                            headers={"Content-Type": "application/zip"}, timeout=120)
    if response.status_code >= 300:
        raise RuntimeFailure(f"upload {uri}: HTTP {response.status_code} {response.reason}",
                             f"storage.objects.create on gs://{bucket} for the caller's credentials")


def upload_code(uri: str, data: bytes, api: GoogleApi | None = None) -> bool:
    """Uploads a team's code zip to ``uri`` unless there (its name is its SHA-256); True when it uploaded. With
    ``ifGenerationMatch=0`` a concurrent submit of the same code gets 412: the same bytes are there. Source:
    https://cloud.google.com/storage/docs/request-preconditions#special-case"""
    from urllib.parse import quote

    api = api or GoogleApi()
    bucket, _, name = uri.removeprefix("gs://").partition("/")
    role = f"roles/storage.objectUser on gs://{bucket} (the kit's bucket)"
    url = f"{api.storage}/storage/v1/b/{bucket}/o/{quote(name, safe='')}"
    found = api.call("GET", url, f"look up {uri}", role=role, ok=(404,))
    if found.status_code != 404:
        _check_same(uri, found.json(), data)
        return False
    made = api.call("POST", f"{api.storage}/upload/storage/v1/b/{bucket}/o", f"upload {uri}", role=role, ok=(412,),
                    params={"uploadType": "media", "name": name, "ifGenerationMatch": "0"}, data=data,
                    headers={"Content-Type": "application/zip"}, timeout=300)
    if made.status_code == 412:  # another submit made it first: trusted only if it holds these bytes
        _check_same(uri, api.call("GET", url, f"look up {uri}", role=role).json(), data)
        return False
    return True


def _check_same(uri: str, metadata: Any, data: bytes) -> None:
    """An existing code zip is used only if it holds ``data``: its name says what it should hold, but any pod that may
    write the bucket could have replaced it. Compared by the object's ``md5Hash`` (base64 MD5 of its data; absent
    for a composite object, which the kit never makes: refused too). RuntimeFailure naming the object otherwise.
    Source: GCS JSON API Objects resource (md5Hash), https://cloud.google.com/storage/docs/json_api/v1/objects"""
    import base64
    import hashlib

    want = base64.b64encode(hashlib.md5(data).digest()).decode()
    got = metadata.get("md5Hash") if isinstance(metadata, dict) else None
    if got != want:
        raise RuntimeFailure(f"{uri} exists but does not hold this code (MD5 {got or 'not given'}, this code's "
                             f"{want}): it was overwritten after upload", f"delete it (`gcloud storage rm {uri}`) "
                             "and submit again, and see who writes the bucket's code/ folder")


def _first_line(exc: object) -> str:
    text = exc.args[0] if isinstance(exc, Exception) and exc.args and isinstance(exc.args[0], str) else str(exc)
    return json.dumps(text)[1:-1].split("\\n")[0]
