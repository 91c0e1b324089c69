"""Builds one of the kit's images with Cloud Build and returns it by digest.

The kit calls the Cloud Build API itself, not a trigger the stack owns: a trigger needs a connected source repository (a
wheel-installed kit has none), and the digest must come back to be recorded (:mod:`raytpu.images.record`, written only
once the build succeeded). Steps: the folder as a deterministic ``.tar.gz`` in the stack's bucket, ``builds.create``
(resolve the base's digest, ``docker build`` FROM it, push), then ``builds.get`` polled while the log streams. Source:
https://cloud.google.com/build/docs/api/reference/rest/v1/projects.locations.builds
(docs/FACTS.md#images-cloud-build)."""

from __future__ import annotations

import base64
import binascii
import gzip
import hashlib
import io
import sys
import tarfile
import time
import urllib.parse
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from raytpu.core.common.errors import RuntimeFailure
from raytpu.images.definitions import DIGEST, ImageDefinition
from raytpu.images.record import BuiltImage, ref_problems

DOCKER_BUILDER = "gcr.io/cloud-builders/docker"
"""Cloud Build's Docker builder (https://cloud.google.com/build/docs/building/build-containers)."""
CONTEXT_PREFIX = "raytpu/images/"
"""Where build contexts go in the bucket; their logs go under ``<prefix>logs/``."""
DONE = ("SUCCESS", "FAILURE", "INTERNAL_ERROR", "TIMEOUT", "CANCELLED", "EXPIRED")
"""``Build.Status`` values that end a build (google/devtools/cloudbuild/v1/cloudbuild.proto, ``Build.Status``)."""
LOG_TAIL_LINES = 20
BASE_FILE = ".raytpu-base"
"""Where the base step leaves ``BASE@sha256:...`` in ``/workspace`` (shared by steps) for the build step. Source:
https://cloud.google.com/build/docs/build-config-file-schema#dir"""
INSPECT_FORMAT = "{{range .RepoDigests}}{{println .}}{{end}}"
"""``docker image inspect --format``: every ``REPO@sha256:...`` the pulled image is known by (``RepoDigests``)."""

# The base step. Scripts get no Cloud Build substitutions, only environment variables, so ``$`` needs no escaping
# (https://cloud.google.com/build/docs/configuring-builds/run-bash-scripts, "Using substitutions with the script
# field"). Whatever a step writes to ``$BUILDER_OUTPUT/output`` comes back in ``Build.results.buildStepOutputs`` at
# the step's index (cloudbuild.proto ``Results.build_step_outputs``: "Cloud Builders can produce this output by
# writing to `$BUILDER_OUTPUT/output`. Only the first 50KB of data is stored.").
RESOLVE_BASE = f"""#!/usr/bin/env bash
set -euo pipefail
docker pull "$BASE"
digests=$(docker image inspect --format '{INSPECT_FORMAT}' "$BASE" | sed -n 's/^.*@//p' | sort -u)
if [ "$(printf '%s\\n' "$digests" | grep -c '^sha256:')" != 1 ]; then
  echo "raytpu: base $BASE: docker reports not exactly one digest: ${{digests:-none}}" >&2
  exit 1
fi
if [ -n "$PINNED" ] && [ "$digests" != "$PINNED" ]; then
  echo "raytpu: base $BASE resolves to $digests, but versions.toml pins base_digest $PINNED" >&2
  exit 1
fi
printf '%s' "$digests" > "$BUILDER_OUTPUT/output"
printf '%s@%s' "${{BASE%%@*}}" "$digests" > {BASE_FILE}
"""
BUILD_FROM_BASE = f"""#!/usr/bin/env bash
set -euo pipefail
base=$(cat {BASE_FILE})
docker build --tag "$IMAGE" --build-arg "BASE_IMAGE=$base" .
"""
"""The build step: ``ARG BASE_IMAGE`` set to the base by its resolved digest, so the image is built on the base
recorded."""
VIEW_ROLE = "roles/cloudbuild.builds.viewer on the project (cloudbuild.builds.get)"


def build_role(message: str) -> str:
    """What a refused ``builds.create`` lacks, by Cloud Build's message: ``iam.serviceAccounts.actAs`` on the builder,
    ``serviceusage.services.use``, the logs bucket, else create. Source:
    cloud.google.com/build/docs/iam-roles-permissions"""
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
    """Where a build runs and pushes, from the cluster stack's outputs: ``project``, ``location`` (its region),
    ``registry`` (``REGION-docker.pkg.dev/PROJECT/REPO``), ``bucket`` (contexts and logs), ``builder`` (the SA builds
    run as)."""

    project: str
    location: str
    registry: str
    bucket: str
    builder: str


def context_tarball(definition: ImageDefinition) -> bytes:
    """The image's folder as a gzipped tar with fixed owners and times: same files, same bytes (object name, tag)."""
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
        "steps": build_steps(definition, tagged),
        "images": [tagged],
        "timeout": f"{timeout_s}s",
        "serviceAccount": f"projects/{target.project}/serviceAccounts/{target.builder}",
        "logsBucket": f"gs://{target.bucket}/{CONTEXT_PREFIX}logs",
        "options": {"logging": "GCS_ONLY", "logStreamingOption": "STREAM_ON"},
        "tags": ["raytpu", f"raytpu-image-{definition.name}"],
    }


def build_steps(definition: ImageDefinition, tagged: str) -> list[dict[str, Any]]:
    """Step ``base`` pulls the base by tag and resolves its digest (a pinned ``base_digest`` must match: a pin is
    checked against what the tag serves now); step ``build`` builds FROM that digest. Both run in Cloud Build's Docker
    builder, which has ``bash``. Source: GoogleCloudPlatform/cloud-builders ``docker/Dockerfile-versioned``."""
    return [
        {"id": "base", "name": DOCKER_BUILDER, "env": [f"BASE={definition.base}",
                                                        f"PINNED={definition.base_digest or ''}"],
         "script": RESOLVE_BASE},
        {"id": "build", "name": DOCKER_BUILDER, "env": [f"IMAGE={tagged}"], "script": BUILD_FROM_BASE},
    ]


def resolved_base(definition: ImageDefinition, build: dict[str, Any]) -> str:
    """``BASE@sha256:...`` from ``results.buildStepOutputs[0]`` (bytes: base64 in proto3 JSON); RuntimeFailure when
    absent, not one digest, or not the pinned one. Source: https://protobuf.dev/programming-guides/json/"""
    outputs = build.get("results", {}).get("buildStepOutputs", [])
    where = f"image {definition.name}: build {build.get('id')} succeeded but its base step's output"
    try:
        digest = base64.b64decode(outputs[0], validate=True).decode("ascii").strip() if outputs else ""
    except (binascii.Error, UnicodeDecodeError, TypeError) as exc:
        raise RuntimeFailure(f"{where} is not base64 text ({str(outputs[0])[:80]!r})",
                             "results.buildStepOutputs as Cloud Build returns them") from exc
    if not DIGEST.match(digest):
        raise RuntimeFailure(f"{where} is {digest[:80]!r}, not sha256:<64 hex>",
                             "the base step writing the base's digest to $BUILDER_OUTPUT/output")
    if definition.base_digest and digest != definition.base_digest:
        raise RuntimeFailure(f"image {definition.name}: base {definition.base} resolved to {digest}, but "
                             f"versions.toml pins base_digest {definition.base_digest}",
                             "the pinned digest, or base_digest updated in versions.toml after review")
    return f"{definition.base.split('@')[0]}@{digest}"  # a base named by digest (a team's image) keeps one


def _stderr(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def _stdout(line: str) -> None:
    print(line, flush=True)


class BuildApi(Protocol):
    """What a build calls: an authorized Google API session (:class:`raytpu.cluster.google_api.GoogleApi`); a protocol,
    so the images package does not import the API clients' package, which imports it."""

    storage: str
    cloudbuild: str

    def call(self, method: str, url: str, what: str, *, role: str | Callable[[str], str], ok: tuple[int, ...] = (),
             **kwargs: Any) -> Any: ...


class ImageBuild:
    """One build of one image: upload, create, follow, read the digest."""

    def __init__(self, api: BuildApi, definition: ImageDefinition, target: Target, *, timeout_s: int,
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
        pin = (f"pinned at {self.definition.base_digest}" if self.definition.base_digest
               else "not pinned in versions.toml: the build resolves its tag and records the digest it built on")
        self.progress(f"image {name}: base {self.definition.base}, {pin}")
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
        base = resolved_base(self.definition, build)
        self.progress(f"image {name}: built {ref} on {base}")
        return BuiltImage(ref, build_name, dict(self.definition.versions), base)

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
        """Prints the lines added to the build's log since the last read (404: not written yet; 416: nothing new)."""
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
