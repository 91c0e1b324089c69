"""Builds one of the kit's images with Cloud Build and returns it by digest.

Why the kit calls the Cloud Build API itself instead of a trigger the stack owns: a trigger builds from a connected
source repository (GitHub, Cloud Source Repositories), which a kit installed from a wheel has no claim on and which
the team would have to connect by hand; and what a build made must come back to the kit, which records the digest
(:mod:`raytpu.images.record`) that every pod then names. Called from the CLI, the build uses exactly the definition
of the installed kit, streams its progress and log, and the record is written only once the build succeeded.

The steps (Cloud Build REST v1, https://cloud.google.com/build/docs/api/reference/rest/v1/projects.locations.builds):

1. the image's build context (its folder: ``Dockerfile``, lock) as a deterministic ``.tar.gz``, uploaded to the
   stack's bucket (GCS JSON API simple upload, https://cloud.google.com/storage/docs/uploading-objects);
2. ``projects.locations.builds.create`` in the stack's region: ``source.storageSource`` (that object and its
   generation), one ``docker build`` step, ``images`` (Cloud Build pushes them to the stack's Artifact Registry
   repository once the steps succeed and reports each digest in ``results.images[].digest``), run as the stack's
   builder service account with its log in the bucket (``logsBucket``; a user-specified service account needs a
   logs bucket or Cloud Logging, https://cloud.google.com/build/docs/securing-builds/configure-user-specified-service-accounts);
3. ``projects.locations.builds.get`` polled until the build ends, the log object read on from where it was last read
   (``Range``) and printed as it grows (``logStreamingOption: STREAM_ON``), as ``gcloud builds submit`` streams it.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import sys
import tarfile
import time
import urllib.parse
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from raytpu.errors import RuntimeFailure
from raytpu.images.definitions import ImageDefinition
from raytpu.images.google_api import GoogleApi
from raytpu.images.record import BuiltImage, ref_problems

DOCKER_BUILDER = "gcr.io/cloud-builders/docker"
"""Cloud Build's Docker builder (https://cloud.google.com/build/docs/building/build-containers)."""
CONTEXT_PREFIX = "raytpu/images/"
"""Where build contexts go in the bucket; their logs go under ``<prefix>logs/``."""
DONE = ("SUCCESS", "FAILURE", "INTERNAL_ERROR", "TIMEOUT", "CANCELLED", "EXPIRED")
"""``Build.Status`` values that end a build (google/devtools/cloudbuild/v1/cloudbuild.proto, ``Build.Status``)."""
LOG_TAIL_LINES = 20
VIEW_ROLE = "roles/cloudbuild.builds.viewer on the project (cloudbuild.builds.get)"


def build_role(message: str) -> str:
    """What a refused ``builds.create`` lacks, by what Cloud Build's message names: running as the builder
    (``iam.serviceAccounts.actAs``), the project's quota (``serviceusage.services.use``), the logs bucket, else the
    permission to create builds (https://cloud.google.com/build/docs/iam-roles-permissions)."""
    text = message.lower()
    if "act as" in text or "actas" in text:
        return "roles/iam.serviceAccountUser on the builder service account (iam.serviceAccounts.actAs)"
    if "serviceusage" in text:
        return "roles/serviceusage.serviceUsageConsumer on the project (serviceusage.services.use)"
    if "bucket" in text:
        return "roles/storage.legacyBucketReader on the stack's bucket, which holds the build log (storage.buckets.get)"
    return ("roles/cloudbuild.builds.editor on the project (cloudbuild.builds.create), and "
            "roles/iam.serviceAccountUser on the builder service account (iam.serviceAccounts.actAs)")



@dataclass(frozen=True, kw_only=True)
class Target:
    """Where a build runs and pushes, from the cluster stack's outputs.

    Attributes:
        project: The stack's project.
        location: The region builds run in (the stack's).
        registry: The Artifact Registry repository path (``REGION-docker.pkg.dev/PROJECT/REPO``).
        bucket: The stack's bucket (build contexts and logs).
        builder: The builder service account's email (builds run as it).
    """

    project: str
    location: str
    registry: str
    bucket: str
    builder: str


def context_tarball(definition: ImageDefinition) -> bytes:
    """The image's folder as a gzipped tar with fixed owners and times: the same files, the same bytes (and so the
    same object name and tag)."""
    buffer = io.BytesIO()
    with gzip.GzipFile(fileobj=buffer, mode="wb", mtime=0) as zipped, \
            tarfile.open(fileobj=zipped, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for path in sorted(p for p in definition.context.rglob("*") if "__pycache__" not in p.parts):
            info = tar.gettarinfo(str(path), arcname=path.relative_to(definition.context).as_posix())
            info.uid = info.gid = 0
            info.uname = info.gname = ""
            info.mtime = 0
            info.mode = 0o755 if path.is_dir() else 0o644
            if path.is_dir():
                tar.addfile(info)
            else:
                with path.open("rb") as data:
                    tar.addfile(info, data)
    return buffer.getvalue()


def build_body(definition: ImageDefinition, target: Target, *, source_object: str, generation: str | None,
               tag: str, timeout_s: int) -> dict[str, Any]:
    """The ``Build`` resource ``builds.create`` is sent (field names: cloudbuild.proto ``Build``, JSON names)."""
    tagged = f"{target.registry}/{definition.name}:{tag}"
    storage_source: dict[str, Any] = {"bucket": target.bucket, "object": source_object}
    if generation:
        storage_source["generation"] = generation  # int64: a string in JSON (proto3 JSON mapping)
    return {
        "source": {"storageSource": storage_source},
        "steps": [{"id": "build", "name": DOCKER_BUILDER, "args": ["build", "--tag", tagged, "."]}],
        "images": [tagged],
        "timeout": f"{timeout_s}s",
        "serviceAccount": f"projects/{target.project}/serviceAccounts/{target.builder}",
        "logsBucket": f"gs://{target.bucket}/{CONTEXT_PREFIX}logs",
        "options": {"logging": "GCS_ONLY", "logStreamingOption": "STREAM_ON"},
        "tags": ["raytpu", f"raytpu-image-{definition.name}"],
    }


def _stderr(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def _stdout(line: str) -> None:
    print(line, flush=True)


class ImageBuild:
    """One build of one image: upload, create, follow, read the digest."""

    def __init__(self, api: GoogleApi, definition: ImageDefinition, target: Target, *, timeout_s: int,
                 poll_s: float = 3.0, progress: Callable[[str], None] = _stderr,
                 log: Callable[[str], None] = _stdout) -> None:
        self.api, self.definition, self.target = api, definition, target
        self.timeout_s, self.poll_s = timeout_s, poll_s
        self.progress, self.log = progress, log
        self._log_offset = 0
        self._partial = b""
        self.log_lines: list[str] = []

    def run(self) -> BuiltImage:
        """Uploads, builds, follows; the image by digest, or RuntimeFailure naming what failed."""
        name, target = self.definition.name, self.target
        data = context_tarball(self.definition)
        digest = hashlib.sha256(data).hexdigest()
        source_object = f"{CONTEXT_PREFIX}{name}-{digest[:16]}.tar.gz"
        self.progress(f"image {name}: uploading its build context ({len(data)} bytes) to "
                      f"gs://{target.bucket}/{source_object}")
        uploaded = self.api.call(
            "POST", f"{self.api.storage}/upload/storage/v1/b/{target.bucket}/o", f"upload {source_object}",
            role=f"roles/storage.objectCreator on gs://{target.bucket} (storage.objects.create)",
            params={"uploadType": "media", "name": source_object}, data=data,
            headers={"Content-Type": "application/gzip"}, timeout=300).json()
        tag = f"{digest[:12]}-{int(time.time()):x}"  # immutable tags: every build gets a new one
        body = build_body(self.definition, target, source_object=source_object,
                          generation=uploaded.get("generation"), tag=tag, timeout_s=self.timeout_s)
        parent = f"projects/{target.project}/locations/{target.location}"
        operation = self.api.call("POST", f"{self.api.cloudbuild}/v1/{parent}/builds", f"image {name}: create build",
                                  role=build_role, json=body).json()
        build = operation.get("metadata", {}).get("build", {})
        build_id = build.get("id")
        if not build_id:
            raise RuntimeFailure(f"image {name}: Cloud Build answered no build id ({str(operation)[:200]})",
                                 "the Cloud Build API's Operation with BuildOperationMetadata")
        build_name = f"{parent}/builds/{build_id}"
        self.progress(f"image {name}: build {build_id} created; log: {build.get('logUrl', '(none)')}")
        build = self._follow(build_name)
        status = build.get("status")
        if status != "SUCCESS":
            raise self._failure(build, build_name)
        tagged = body["images"][0]
        found = [i for i in build.get("results", {}).get("images", []) if i.get("name") == tagged]
        ref = f"{target.registry}/{name}@{found[0].get('digest')}" if found else ""
        if not found or ref_problems("ref", ref):
            raise RuntimeFailure(f"image {name}: build {build_id} succeeded but reported no digest for {tagged} "
                                 f"(results.images: {build.get('results', {}).get('images')})",
                                 "a build whose results.images names the pushed image")
        self.progress(f"image {name}: built {ref}")
        return BuiltImage(ref, build_name, dict(self.definition.versions))

    def _follow(self, build_name: str) -> dict[str, Any]:
        """Polls the build until it ends (progress on each change of status or step, and every 30 s), reading its
        log as it grows; RuntimeFailure once ``timeout_s`` plus a queueing allowance have passed."""
        name = self.definition.name
        start = time.monotonic()
        deadline = start + self.timeout_s + 600  # the build's own timeout, plus time in the queue
        shown, last_shown = "", 0.0
        while True:
            build = self.api.call("GET", f"{self.api.cloudbuild}/v1/{build_name}", f"image {name}: get build",
                                  role=VIEW_ROLE).json()
            self._read_log(build)
            status = str(build.get("status", "STATUS_UNKNOWN"))
            step = next((s.get("id") or s.get("name") for s in build.get("steps", [])
                         if s.get("status") == "WORKING"), None)
            line = f"{status} (step {step})" if step else status
            now = time.monotonic()
            if line != shown or now - last_shown >= 30:
                self.progress(f"image {name}: {line}, {now - start:.0f}s")
                shown, last_shown = line, now
            if status in DONE:
                self._read_log(build, final=True)
                return build
            if now > deadline:
                raise RuntimeFailure(f"image {name}: build {build_name} still {status} after {now - start:.0f}s",
                                     "a larger --timeout-s; the build goes on: see its log in the console")
            time.sleep(self.poll_s)

    def _read_log(self, build: dict[str, Any], final: bool = False) -> None:
        """Prints the lines added to the build's log object since the last read (a 404: not written yet; a 416:
        nothing new)."""
        logs, build_id = build.get("logsBucket"), build.get("id")
        if not logs or not build_id:
            return
        bucket, _, prefix = str(logs).removeprefix("gs://").partition("/")
        obj = f"{prefix.rstrip('/')}/log-{build_id}.txt" if prefix else f"log-{build_id}.txt"
        response = self.api.call(
            "GET", f"{self.api.storage}/storage/v1/b/{bucket}/o/{urllib.parse.quote(obj, safe='')}",
            f"read the build log gs://{bucket}/{obj}", ok=(404, 416),
            role=f"roles/storage.objectViewer on gs://{bucket} (storage.objects.get)",
            params={"alt": "media"}, headers={"Range": f"bytes={self._log_offset}-"})
        data = b"" if response.status_code in (404, 416) else response.content
        if response.status_code == 200 and self._log_offset:  # the whole object: skip what was shown
            data = data[self._log_offset:]
        self._log_offset += len(data)
        text = self._partial + data
        *lines, self._partial = text.split(b"\n")
        if final and self._partial:
            lines.append(self._partial)
            self._partial = b""
        for raw in lines:
            line = raw.decode("utf-8", "replace").rstrip("\r")
            self.log_lines.append(line)
            self.log(line)

    def _failure(self, build: dict[str, Any], build_name: str) -> RuntimeFailure:
        """The failing step, the reason Cloud Build gives, and the log's tail (on stderr, before the error)."""
        steps = build.get("steps", [])
        failed = [i for i, s in enumerate(steps) if s.get("status") in ("FAILURE", "TIMEOUT", "INTERNAL_ERROR")]
        where = ""
        if failed:
            step = steps[failed[0]]
            code = f", exit {step['exitCode']}" if "exitCode" in step else ""
            where = f" at step {failed[0]} {step.get('id') or step.get('name')!r}{code}"
        detail = build.get("failureInfo", {}).get("detail") or build.get("statusDetail") or "no detail"
        if self.log_lines:
            self.progress(f"image {self.definition.name}: the build log's last lines:")
            for line in self.log_lines[-LOG_TAIL_LINES:]:
                self.progress(f"  | {line}")
        return RuntimeFailure(f"image {self.definition.name}: build {build_name} ended {build.get('status')}{where}: "
                              f"{detail}", "a definition that builds: see the build log above")
