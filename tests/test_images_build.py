"""``raytpu images build`` end to end against a loopback Cloud Build + Cloud Storage server
(``tests/cloudbuild_server.py``), and the digest record it writes (``raytpu.images.record``).

Cloud Build cannot be reached from here, so the test stops at the wire: the real CLI (a subprocess for the full run,
``cli.main`` for the rest), google-auth's real service-account credentials (their token endpoint is the loopback
server), the endpoints overridden by environment (``RAYTPU_CLOUDBUILD_ENDPOINT``, ``RAYTPU_STORAGE_ENDPOINT``), never
by patching. Every request body is checked against Cloud Build's own schema (the vendored ``cloudbuild.proto``).
"""

from __future__ import annotations

import base64
import dataclasses
import hashlib
import io
import json
import os
import re
import subprocess
import sys
import tarfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from cloudbuild_schema import request_errors
from cloudbuild_server import CloudBuildServer, serving
from kube_server import ServiceAccountKey

from raytpu import cli
from raytpu.cluster.google_api import CLOUDBUILD_ENV, STORAGE_ENV
from raytpu.cluster.http_retry import HttpRetry
from raytpu.core.common.errors import RuntimeFailure
from raytpu.images import record
from raytpu.images.build import BUILD_FROM_BASE, DOCKER_BUILDER, RESOLVE_BASE, resolved_base
from raytpu.images.definitions import IMAGES

pytestmark = pytest.mark.unit

REPO = Path(__file__).resolve().parents[1]
STACK = "ray-tpu-cluster"
REGISTRY = "us-east5-docker.pkg.dev/my-ml-project/ray-tpu-images"
BUILDER = "raytpu-ray-tpu-img@my-ml-project.iam.gserviceaccount.com"
OUTPUTS = {"endpoint": "https://gke.example", "ca_certificate": "", "cluster_name": "ray-tpu", "location": "us-east5",
           "project": "my-ml-project", "namespace": "ray", "service_account": "ray-tpu-ray",
           "bucket": "my-ml-project-ray-tpu-ray",
           "registry": REGISTRY, "builder_service_account": BUILDER}
BASES = {image.base: "sha256:" + hashlib.sha256(image.base.encode()).hexdigest() for image in IMAGES.values()}
"""What the loopback registry serves for each base tag (made up here, in the test's registry only: the kit never
records a digest it did not get from the build)."""


@pytest.fixture
def site(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, sa_key: ServiceAccountKey) -> Iterator[CloudBuildServer]:
    """A working directory with the example config and outputs naming the registry, Application Default Credentials
    whose token endpoint is the loopback server, and both API endpoints pointed at it."""
    with serving(sa_key) as server:
        server.registry.update(BASES)
        (tmp_path / "raytpu.yaml").write_text((REPO / "raytpu.example.yaml").read_text())
        (tmp_path / "outputs.json").write_text(json.dumps({STACK: OUTPUTS, "ray-tpu-workloads": {}}))
        (tmp_path / "adc.json").write_text(json.dumps(sa_key.info(server.token_uri)))
        monkeypatch.setenv("GOOGLE_APPLICATION_CREDENTIALS", str(tmp_path / "adc.json"))
        monkeypatch.setenv(CLOUDBUILD_ENV, server.url)
        monkeypatch.setenv(STORAGE_ENV, server.url)
        monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")
        monkeypatch.delenv("RAYTPU_CONFIG", raising=False)
        # Retries are counted here, not waited for (the pause itself: tests/test_kube.py, backoff_s)
        monkeypatch.setattr(HttpRetry, "get_backoff_time", lambda self: 0.0)
        monkeypatch.chdir(tmp_path)
        yield server


def build(*argv: str) -> int:
    return cli.main(["images", "build", *argv, "--stack", STACK, "--poll-s", "0.01"])


def test_a_build_uploads_the_context_builds_by_the_schema_streams_its_log_and_records_the_digest(
        site: CloudBuildServer, tmp_path: Path) -> None:
    site.fail("POST", r"/builds$", 429, "Quota exceeded for quota metric 'Build requests'")  # retried
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    done = subprocess.run([sys.executable, "-m", "raytpu", "images", "build", "job", "--stack", STACK,
                           "--poll-s", "0.01"], capture_output=True, text=True, env=env, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    # the context: the image's own folder, uploaded to the stack's bucket
    (upload,) = site.of("POST", r"^/upload/storage/v1/b/my-ml-project-ray-tpu-ray/o$")
    assert upload.query["uploadType"] == "media" and upload.query["name"].startswith("raytpu/images/job-")
    with tarfile.open(fileobj=io.BytesIO(upload.body), mode="r:gz") as tar:
        names = tar.getnames()
    assert sorted(names) == sorted(p.relative_to(IMAGES["job"].context).as_posix()
                                   for p in IMAGES["job"].context.rglob("*") if "__pycache__" not in p.parts)
    # builds.create: asked twice (the 429, then the build), each body valid by cloudbuild.proto
    creates = site.of("POST", r"^/v1/projects/my-ml-project/locations/us-east5/builds$")
    assert len(creates) == 2 and creates[0].body == creates[1].body
    body = creates[1].json
    assert request_errors("Build", body) == [] and site.schema_errors == []
    assert body["source"]["storageSource"]["bucket"] == "my-ml-project-ray-tpu-ray"
    assert body["source"]["storageSource"]["object"] == upload.query["name"]
    (image,) = body["images"]
    assert image.startswith(f"{REGISTRY}/job:")
    # step 0 resolves the base's digest, step 1 builds FROM it (the scripts ran in bash on the loopback server)
    job = IMAGES["job"]
    assert body["steps"] == [
        {"id": "base", "name": DOCKER_BUILDER, "env": [f"BASE={job.base}", "PINNED="], "script": RESOLVE_BASE},
        {"id": "build", "name": DOCKER_BUILDER, "env": [f"IMAGE={image}"], "script": BUILD_FROM_BASE}]
    assert body["serviceAccount"] == f"projects/my-ml-project/serviceAccounts/{BUILDER}"
    assert body["logsBucket"] == "gs://my-ml-project-ray-tpu-ray/raytpu/images/logs"
    assert all(r.headers["authorization"].startswith("Bearer ya29.build-") for r in site.requests
               if r.path != "/token")
    # progress on stderr, the log on stdout, each log line once
    assert "uploading its build context" in done.stderr
    assert f"image job: base {job.base}, not pinned in versions.toml" in done.stderr
    for state in ("QUEUED", "WORKING (step base)", "SUCCESS"):
        assert f"image job: {state}," in done.stderr
    base = f"{job.base}@{BASES[job.base]}"
    assert done.stdout.splitlines() == [
        "starting build",
        'Step #0 - "base": 2.60.0-py311: Pulling from rayproject/ray',
        f'Step #0 - "base": Digest: {BASES[job.base]}',
        f'Step #0 - "base": Status: Downloaded newer image for {job.base}',
        f'Step #1 - "build": Step 1/4 : FROM {base}',
        f'Step #1 - "build": Successfully tagged {image}',
        "PUSH", "DONE"]
    # the record: the image by digest, what built it, the base it was built FROM
    (built,) = site.builds.values()
    digest = built.build["results"]["images"][0]["digest"]
    assert built.build["results"]["buildStepOutputs"] == [base64.b64encode(BASES[job.base].encode()).decode(), ""]
    assert site.built_from == {built.build["id"]: base}
    assert record.load_refs(tmp_path / "raytpu.yaml") == {"job": f"{REGISTRY}/job@{digest}"}
    saved = json.loads((tmp_path / record.RECORD_NAME).read_text())
    assert saved["images"]["job"]["build"] == built.build["name"]
    assert saved["images"]["job"]["versions"] == dict(job.versions)
    assert saved["images"]["job"]["base"] == base
    assert f"recorded job: {REGISTRY}/job@{digest}" in done.stderr
    # what it now runs, as a table
    table = done.stderr.splitlines()[-2:]
    assert table[0].split() == ["image", "ref", "base", "digest", "ray", "jax/libtpu", "or", "vllm", "protobuf"]
    assert table[1].split() == ["job", f"{REGISTRY}/job@{digest[:19]}", BASES[job.base][:19], "2.60.0", "jax",
                                "0.10.2", "/", "libtpu", "0.0.42.1", "7.36.2"]


def test_a_pinned_base_is_built_from_and_checked(site: CloudBuildServer, tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    """With ``base_digest`` in versions.toml the base step checks the tag still resolves to it; the build is FROM it
    and the record says so. When the tag has moved, the build fails at the base step saying both digests, and
    nothing is recorded."""
    serve = IMAGES["serve"]
    monkeypatch.setitem(IMAGES, "serve", dataclasses.replace(serve, base_digest=BASES[serve.base]))
    assert build("serve") == 0
    (create,) = site.of("POST", r"/builds$")
    assert create.json["steps"][0]["env"] == [f"BASE={serve.base}", f"PINNED={BASES[serve.base]}"]
    assert list(site.built_from.values()) == [f"{serve.base}@{BASES[serve.base]}"]
    assert record.load(tmp_path / "raytpu.yaml")["serve"].base == f"{serve.base}@{BASES[serve.base]}"
    assert f"image serve: base {serve.base}, pinned at {BASES[serve.base]}" in capsys.readouterr().err
    before = (tmp_path / record.RECORD_NAME).read_text()
    moved = "sha256:" + "e" * 64
    site.registry[serve.base] = moved
    assert build("serve") == 1
    err = capsys.readouterr().err
    assert "ended FAILURE at step 0 'base', exit 1" in err
    assert (f'  | Step #0 - "base": raytpu: base {serve.base} resolves to {moved}, but versions.toml pins '
            f"base_digest {BASES[serve.base]}") in err
    assert (tmp_path / record.RECORD_NAME).read_text() == before and len(site.built_from) == 1


def test_a_malformed_pinned_base_digest_is_bad_input_before_any_request(
        site: CloudBuildServer, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setitem(IMAGES, "job", dataclasses.replace(IMAGES["job"], base_digest="sha256:ABC"))
    assert build("job") == 2
    err = capsys.readouterr().err
    assert "versions.toml: base_digest: 'sha256:ABC' is not a digest; valid: sha256:<64 lowercase hex digits>" in err
    assert site.requests == [] and "Traceback" not in err


@pytest.mark.parametrize(("outputs", "pinned", "expected"), [
    ([], None, "its base step's output is '', not sha256:<64 hex>"),
    (["not base64!"], None, "its base step's output is not base64 text"),
    ([base64.b64encode(b"rayproject/ray:2.60.0-py311").decode()], None, "output is 'rayproject/ray:2.60.0-py311', not"),
    ([base64.b64encode(b"sha256:" + b"a" * 64).decode()], "sha256:" + "b" * 64,
     f"resolved to sha256:{'a' * 64}, but versions.toml pins base_digest sha256:{'b' * 64}"),
])
def test_a_base_step_output_that_is_not_the_base_digest_fails_the_build(
        outputs: list[str], pinned: str | None, expected: str) -> None:
    """The kit reads the digest only from the build's answer, and refuses anything but one digest (the pinned one
    where there is a pin): it never records a digest it did not get."""
    job = dataclasses.replace(IMAGES["job"], base_digest=pinned)
    with pytest.raises(RuntimeFailure, match=re.escape(expected)):
        resolved_base(job, {"id": "b1", "results": {"buildStepOutputs": outputs}})


@pytest.mark.parametrize(("build", "expected"), [
    ({"steps": [{"name": DOCKER_BUILDER, "script": "true", "args": ["x"]}]}, "Build.steps[0].args: not with script"),
    ({"steps": [{"name": DOCKER_BUILDER, "script": "true", "entrypoint": "bash"}]},
     "Build.steps[0].entrypoint: not with script"),
    ({"steps": [{"name": "x"}], "results": {"buildStepOutputs": ["sha256:ab"]}},
     "Build.results.buildStepOutputs[0]: 'sha256:ab' is not base64 (a bytes field)"),
])
def test_the_schema_check_has_teeth_for_scripts_and_step_outputs(build: dict[str, Any], expected: str) -> None:
    """cloudbuild.proto ``BuildStep.script`` ("When script is provided, the user cannot specify the entrypoint or
    args") and ``Results.build_step_outputs`` (``bytes``: base64 in JSON)."""
    assert expected in request_errors("Build", build, response=True)


def test_by_default_every_image_the_configs_workloads_run_is_built_and_recorded(
        site: CloudBuildServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert build() == 0
    built = record.load(tmp_path / "raytpu.yaml")
    assert sorted(built) == ["job", "serve"]
    assert {n: b.base for n, b in built.items()} == {n: f"{i.base}@{BASES[i.base]}" for n, i in IMAGES.items()}
    assert site.schema_errors == []
    # the table: one row per image, the serving image with its vLLM commit and the protobuf Ray Serve needs
    rows = [line.split() for line in capsys.readouterr().err.splitlines()[-3:]]
    assert [r[0] for r in rows] == ["image", "job", "serve"]
    assert rows[2][2:] == [BASES[IMAGES["serve"].base][:19], "2.56.0", "vllm", "9969466a5978", "5.29.6"]


def test_a_failed_build_names_its_step_shows_the_log_tail_and_records_nothing(
        site: CloudBuildServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert build("job") == 0
    before = (tmp_path / record.RECORD_NAME).read_text()
    site.scenario = "failure"
    assert build("job") == 1
    err = capsys.readouterr().err
    assert "ended FAILURE at step 1 'build', exit 1: Build step failure" in err
    assert "  | Step #1 - \"build\": ERROR: No matching distribution found for jax==0.0.0" in err
    assert err.rstrip().splitlines()[-1].startswith("error: image job: build projects/my-ml-project/locations/"
                                                    "us-east5/builds/")
    assert (tmp_path / record.RECORD_NAME).read_text() == before


@pytest.mark.parametrize(("path", "status", "message", "reason", "expected"), [
    (r"/builds$", 403, "The caller does not have permission", "", "roles/cloudbuild.builds.editor on the project"),
    (r"^/upload/", 403, "raytpu-ci does not have storage.objects.create access", "",
     "roles/storage.objectCreator on gs://my-ml-project-ray-tpu-ray"),
    (r"/builds/", 403, "The caller does not have permission", "", "roles/cloudbuild.builds.viewer"),
    (r"/builds$", 403, "caller does not have permission to act as service account projects/-/serviceAccounts/"
     f"{BUILDER}", "", "roles/iam.serviceAccountUser on the builder service account"),
    (r"/builds$", 403, "Cloud Build API has not been used in project 123 before or it is disabled", "SERVICE_DISABLED",
     "`cdktf deploy` of the cluster stack enables it"),
    (r"/builds$", 503, "The service is currently unavailable", "", "valid: retry later; first see whether it was "
     "done anyway (`gcloud builds list"),
    (r"/builds/", 503, "The service is currently unavailable", "", "after retries; valid: retry later"),
])
def test_an_api_refusal_is_one_line_naming_the_fix_and_records_nothing(
        site: CloudBuildServer, tmp_path: Path, capsys: pytest.CaptureFixture[str], path: str, status: int,
        message: str, reason: str, expected: str) -> None:
    method = "GET" if path == r"/builds/" else "POST"
    site.fail(method, path, status, message, reason=reason, times=10)
    assert build("job") == 1
    # a GET's 5xx is asked 3 times more; a POST's is not (the build may have started: no second one), nor a refusal
    assert len(site.of(method, path)) == (4 if status >= 500 and method == "GET" else 1)
    (line,) = [x for x in capsys.readouterr().err.splitlines() if x.startswith("error:")]
    assert f"HTTP {status} ({message}" in line and expected in line
    assert not (tmp_path / record.RECORD_NAME).exists()


BAD_INPUTS: list[tuple[list[str], dict[str, Any], str]] = [
    (["jobb"], {}, "error: IMAGE: 'jobb' is not allowed (the kit's images); valid: job, serve"),
    (["serve"], {"workloads": "train"}, "error: IMAGE: 'serve' is run by no workload of"),
    ([], {"workloads": "none"}, "error: IMAGE: is required (no workload of"),
    (["job"], {"outputs": "no-registry"}, "error: outputs.registry: is required in outputs.json for stack "
                                          "'ray-tpu-cluster' to build images"),
    (["job"], {"outputs": "other-stack"}, "error: --stack: 'ray-tpu-cluster' is not allowed"),
    (["job", "--timeout-s", "5"], {}, "error: --timeout-s: 5 is outside Cloud Build's build timeout range; valid: "
                                      "60 to 86400 seconds"),
    (["job"], {"record": '{"images": {"job": {"ref": "us-east5-docker.pkg.dev/p/r/job:latest", "build": "b"}}}'},
     "raytpu.images.json: images.job.ref: 'us-east5-docker.pkg.dev/p/r/job:latest' is not an image reference by "
     "digest"),
    (["job"], {"record": '{"images": {"gpu": {"ref": "x", "build": "b"}}}'},
     "raytpu.images.json: images.gpu: 'gpu' is not allowed (the kit's images); valid: job, serve"),
    (["job"], {"record": "[1, 2"}, "raytpu.images.json: is not JSON"),
]


@pytest.mark.parametrize(("argv", "setup", "expected"), BAD_INPUTS)
def test_bad_input_exits_2_naming_the_field_before_any_request(
        site: CloudBuildServer, tmp_path: Path, capsys: pytest.CaptureFixture[str], argv: list[str],
        setup: dict[str, Any], expected: str) -> None:
    config = (tmp_path / "raytpu.yaml").read_text()
    head = config.split("\nworkloads:")[0]
    if setup.get("workloads") == "train":
        (tmp_path / "raytpu.yaml").write_text(head + "\nworkloads:\n  - {name: train, kind: train, slice: train}\n")
    elif setup.get("workloads") == "none":
        (tmp_path / "raytpu.yaml").write_text(head + "\n")
    if setup.get("outputs") == "no-registry":
        old = {k: v for k, v in OUTPUTS.items() if k not in ("registry", "builder_service_account")}
        (tmp_path / "outputs.json").write_text(json.dumps({STACK: old}))
    elif setup.get("outputs") == "other-stack":
        (tmp_path / "outputs.json").write_text(json.dumps({"other-cluster": OUTPUTS}))
    if "record" in setup:
        (tmp_path / record.RECORD_NAME).write_text(setup["record"])
    assert build(*argv) == 2
    err = capsys.readouterr().err
    assert expected in err and "Traceback" not in err
    assert site.requests == []


def test_a_definition_no_workload_kind_runs_is_bad_input(site: CloudBuildServer, monkeypatch: pytest.MonkeyPatch,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setitem(IMAGES, "gpu", dataclasses.replace(IMAGES["job"], name="gpu", kinds=("inference",)))
    assert build("job") == 2
    assert ("error: images.gpu.kinds: [inference] names no workload kind of the kit; valid: smoke, train, job, "
            "serve, batch" in capsys.readouterr().err)
    assert site.requests == []


# ------------------------------------------------------------------------------------------ the record


DIGEST = "sha256:" + "ab" * 32


def test_the_record_is_empty_without_a_file_and_merges_builds(tmp_path: Path) -> None:
    config = tmp_path / "raytpu.yaml"
    assert record.load_refs(config) == {}
    record.save(config, "job", record.BuiltImage(f"{REGISTRY}/job@{DIGEST}", "projects/p/builds/1", {"ray": "2.60.0"}))
    record.save(config, "serve", record.BuiltImage(f"{REGISTRY}/serve@{DIGEST}", "projects/p/builds/2"))
    record.save(config, "job", record.BuiltImage(f"{REGISTRY}/job@sha256:{'cd' * 32}", "projects/p/builds/3"))
    assert record.load_refs(config) == {"job": f"{REGISTRY}/job@sha256:{'cd' * 32}",
                                        "serve": f"{REGISTRY}/serve@{DIGEST}"}
    assert [p.name for p in tmp_path.iterdir()] == [record.RECORD_NAME]  # no temporary file left behind


@pytest.mark.parametrize("ref", [f"{REGISTRY}/job:2.60.0", f"{REGISTRY}/job@sha256:{'AB' * 32}", f"job@{DIGEST}",
                                 f"{REGISTRY}/job@sha256:{'ab' * 31}", f"{REGISTRY}/Job@{DIGEST}", ""])
def test_a_reference_not_by_digest_is_refused_and_never_saved(tmp_path: Path, ref: str) -> None:
    with pytest.raises(record.InvalidInput, match="is not an image reference by digest"):
        record.save(tmp_path / "raytpu.yaml", "job", record.BuiltImage(ref, "b"))
    assert not (tmp_path / record.RECORD_NAME).exists()


@pytest.mark.parametrize(("text", "field"), [
    ('{"images": []}', "images"),
    ('{"images": {}, "extra": 1}', "images"),
    ('{"images": {"job": "x"}}', "images.job"),
    (json.dumps({"images": {"job": {"ref": f"{REGISTRY}/job@{DIGEST}"}}}), "images.job"),
    (json.dumps({"images": {"job": {"ref": f"{REGISTRY}/job@{DIGEST}", "build": 3}}}), "images.job.build"),
    (json.dumps({"images": {"job": {"ref": f"{REGISTRY}/job@{DIGEST}", "build": "b", "versions": {"ray": 2}}}}),
     "images.job.versions"),
    (json.dumps({"images": {"job": {"ref": f"{REGISTRY}/job@{DIGEST}", "build": "b", "base": "rayproject/ray:2"}}}),
     "images.job.base"),
    (json.dumps({"images": {"job": {"ref": f"{REGISTRY}/job@{DIGEST}", "build": "b", "base": None}}}),
     "images.job.base"),
    (json.dumps({"images": {"job": {"ref": f"{REGISTRY}/job@{DIGEST}", "build": "b", "basee": "x"}}}),
     "images.job"),
])
def test_a_malformed_record_names_its_field(tmp_path: Path, text: str, field: str) -> None:
    (tmp_path / record.RECORD_NAME).write_text(text)
    with pytest.raises(record.InvalidInput) as caught:
        record.load_refs(tmp_path / "raytpu.yaml")
    assert caught.value.field == f"{tmp_path / record.RECORD_NAME}: {field}"


def test_the_record_keeps_the_base_and_reads_records_without_one(tmp_path: Path) -> None:
    config = tmp_path / "raytpu.yaml"
    base = f"docker.io/rayproject/ray:2.60.0-py311@{DIGEST}"
    record.save(config, "job", record.BuiltImage(f"{REGISTRY}/job@{DIGEST}", "projects/p/builds/1", {}, base))
    record.save(config, "serve", record.BuiltImage(f"{REGISTRY}/serve@{DIGEST}", "projects/p/builds/2"))
    loaded = record.load(config)
    assert (loaded["job"].base, loaded["serve"].base) == (base, None)
    assert "base" not in json.loads((tmp_path / record.RECORD_NAME).read_text())["images"]["serve"]


@pytest.mark.parametrize("base", ["docker.io/rayproject/ray:2.60.0-py311", f"ray:2.60.0@{DIGEST}",
                                  f"docker.io/rayproject/ray:2.60.0-py311@sha256:{'AB' * 32}", ""])
def test_a_base_not_by_digest_is_refused_and_never_saved(tmp_path: Path, base: str) -> None:
    with pytest.raises(record.InvalidInput, match="is not a base image by digest"):
        record.save(tmp_path / "raytpu.yaml", "job", record.BuiltImage(f"{REGISTRY}/job@{DIGEST}", "b", {}, base))
    assert not (tmp_path / record.RECORD_NAME).exists()


# ---------------------------------------------------------------------- a team's image per requirements lock

TEAM_WORKLOAD = """
  - name: pretrain
    kind: train
    slice: train
    code: ./src
    requirements: requirements.txt
    train_loop: lm.train:train_loop
"""


@pytest.fixture
def team_site(site: CloudBuildServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """The example config plus a workload whose requirements the job image lacks; its team image's name."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))  # the lock and the image's context, this test's
    for rel, text in {"src/lm/__init__.py": "", "src/lm/train.py": "def train_loop(config):\n    pass\n",
                      "src/requirements.txt": "inflection==0.5.1\n"}.items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(text)
    (tmp_path / "raytpu.yaml").write_text((tmp_path / "raytpu.yaml").read_text().rstrip("\n") + TEAM_WORKLOAD)
    from raytpu import config as config_mod
    from raytpu.images import team

    spec = config_mod.load(str(tmp_path / "raytpu.yaml"))
    name = team.image_name(team.prepare(spec, spec.workload("pretrain")))
    assert name is not None
    return name


def test_a_team_image_is_built_by_name_from_the_job_image_by_digest_and_recorded(
        site: CloudBuildServer, team_site: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Issue 47.1 on GKE: ``raytpu images build job team-<hash>`` builds the job image, then the lock's image FROM
    the job image as just recorded (by digest), through the same Cloud Build path; only the lock's extras go in."""
    assert build(team_site) == 2  # the job image is not recorded yet: refused before any request
    assert f"error: image job: is required to layer {team_site} on" in capsys.readouterr().err
    assert site.requests == []
    assert build("job") == 0
    job_ref = record.load_refs(tmp_path / "raytpu.yaml")["job"]
    site.registry[job_ref.split("@")[0]] = job_ref.split("@")[1]  # the registry now serves the pushed job image
    capsys.readouterr()
    assert build(team_site) == 0
    create = site.of("POST", r"/builds$")[-1].json
    assert request_errors("Build", create) == [] and site.schema_errors == []
    assert create["images"][0].startswith(f"{REGISTRY}/{team_site}:")
    assert create["steps"][0]["env"] == [f"BASE={job_ref}", f"PINNED={job_ref.split('@')[1]}"]
    upload = site.of("POST", r"^/upload/storage/v1/b/my-ml-project-ray-tpu-ray/o$")[-1]
    with tarfile.open(fileobj=io.BytesIO(upload.body), mode="r:gz") as tar:
        files = {m.name: tar.extractfile(m).read().decode() for m in tar.getmembers() if m.isfile()}  # type: ignore[union-attr]
    assert set(files) == {"Dockerfile", "lock-extras.txt"} and files["lock-extras.txt"].split() == ["inflection==0.5.1"]
    built = record.load(tmp_path / "raytpu.yaml")
    assert sorted(built) == ["job", team_site] and built[team_site].base == job_ref
    assert list(site.built_from.values())[-1] == job_ref
    assert len(site.of("POST", r"/builds$")) == 2  # the job image was not built again
    capsys.readouterr()
    assert cli.main(["images", "list", "--json"]) == 0
    rows = {r["workload"]: r for r in json.loads(capsys.readouterr().out)["workloads"]}
    assert rows["pretrain"]["image"] == team_site and rows["pretrain"]["reference"] == built[team_site].ref


def test_an_image_name_no_lock_of_the_config_has_lists_the_team_images(
        site: CloudBuildServer, team_site: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert build("team-0123456789abcdef") == 2
    err = capsys.readouterr().err
    assert (f"error: IMAGE: 'team-0123456789abcdef' is not allowed (the kit's images, then the config's team "
            f"images); valid: job, serve, {team_site}") in err
    assert site.requests == []


def test_a_team_image_follows_the_job_image_it_was_built_on(
        site: CloudBuildServer, team_site: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Issue 71 item 1: after the kit's job image is rebuilt (a kit upgrade, a security rebuild), the lock's image
    built on the old one is not run (no pod would get the new Ray, JAX and libtpu under the new ``rayVersion``):
    ``load_refs`` leaves it out, ``images list`` says so, and ``raytpu images build`` builds it again on the new
    job image instead of saying "built already"."""
    site.serve_pushed = True
    assert build("job") == 0
    first = record.load_refs(tmp_path / "raytpu.yaml")["job"]
    site.registry[first.split("@")[0]] = first.split("@")[1]
    assert build(team_site) == 0
    kept = json.loads((tmp_path / record.RECORD_NAME).read_text())
    newer = first.split("@")[0] + "@sha256:" + "e" * 64  # the job image as a later build recorded it
    kept["images"]["job"]["ref"] = newer
    (tmp_path / record.RECORD_NAME).write_text(json.dumps(kept))
    assert team_site not in record.load_refs(tmp_path / "raytpu.yaml")
    capsys.readouterr()
    assert cli.main(["images", "list", "--json"]) == 0
    rows = {r["workload"]: r for r in json.loads(capsys.readouterr().out)["workloads"]}
    assert rows["pretrain"]["built"] is False and "earlier job image" in rows["pretrain"]["stale"]
    site.registry[newer.split("@")[0]] = newer.split("@")[1]
    builds = len(site.of("POST", r"/builds$"))
    assert build() == 0
    err = capsys.readouterr().err
    assert f"image {team_site}: built already" not in err
    built = record.load(tmp_path / "raytpu.yaml")
    base = built[team_site].base
    assert base is not None and base.endswith(built["job"].ref.split("@")[1])
    assert len(site.of("POST", r"/builds$")) > builds
