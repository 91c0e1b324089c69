"""A workload's ``requirements`` (issue 47.1): the file's rules, resolution against the job image's pins with the real
uv (a lock named by its hash, cached: the second resolve runs no uv), clashes named with both versions, the image
per lock on GKE (its Cloud Build definition, the RayJob pinned to it by digest against the vendored CRDs, ``submit``
naming ``raytpu images build`` when it is not built), and a failed run's missing module named with the field."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
import yaml
from crd import schema_errors
from image_refs import FIXTURE_REFS

from raytpu import images
from raytpu.config import parse
from raytpu.core.common import errors
from raytpu.core.manifests import kuberay
from raytpu.images import build as build_mod
from raytpu.images import team
from raytpu.images.record import DIGEST_REF
from raytpu.teamcode import envs, failures, requirements

pytestmark = pytest.mark.unit

REPO = Path(__file__).resolve().parents[1]
JOB_LOCK = team.base_lock()
CONFIG = (REPO / "raytpu.example.yaml").read_text().split("\nworkloads:")[0] + """
workloads:
  - name: pretrain
    kind: train
    slice: train
    code: ./src
    requirements: requirements.txt
    train_loop: lm.train:train_loop
"""


@pytest.fixture(autouse=True)
def own_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    return tmp_path / "cache"


def project(root: Path, reqs: str = "inflection>=0.5\n") -> Path:
    for rel, text in {"src/lm/__init__.py": "", "src/lm/train.py": "def train_loop(config):\n    pass\n",
                      "src/requirements.txt": reqs}.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    return root / "src"


def problems(exc: BaseException) -> list[str]:
    return [str(p) for p in errors.problems_of(exc)]  # type: ignore[arg-type]


# ---------------------------------------------------------------------- the file


@pytest.mark.parametrize(("relative", "why"), [
    ("nope.txt", "is not a file in code"), ("../outside.txt", "outside the code folder"),
    ("/etc/hosts", "outside the code folder"), ("link.txt", "links outside the code folder"),
    ("lm", "is not a file in code")])
def test_the_file_must_be_a_file_inside_code(tmp_path: Path, relative: str, why: str) -> None:
    src = project(tmp_path)
    (tmp_path / "outside.txt").write_text("optax\n")
    (src / "link.txt").symlink_to(tmp_path / "outside.txt")
    found = requirements.file_problems("workloads[0].requirements", src, relative)
    assert len(found) == 1 and why in str(found[0]) and str(found[0]).startswith("workloads[0].requirements:")


def test_a_link_inside_code_is_fine(tmp_path: Path) -> None:
    src = project(tmp_path)
    (src / "reqs.txt").symlink_to(src / "requirements.txt")
    assert requirements.file_problems("requirements", src, "reqs.txt") == []


def test_requirements_need_code_and_the_kits_image(tmp_path: Path) -> None:
    project(tmp_path)
    no_code = CONFIG.replace("    code: ./src\n", "").replace("    train_loop: lm.train:train_loop\n", "")
    with pytest.raises(errors.InvalidInputs) as caught:
        parse(no_code, str(tmp_path / "raytpu.yaml"), base=tmp_path)
    assert any(p.startswith("workloads[0].requirements:") and "without code" in p for p in problems(caught.value))
    own_image = CONFIG.replace("    code: ./src\n", "    code: ./src\n    image: us-docker.pkg.dev/p/r/i:1\n")
    with pytest.raises((errors.InvalidInput, errors.InvalidInputs)) as caught2:
        parse(own_image, str(tmp_path / "raytpu.yaml"), base=tmp_path)
    assert any(p.startswith("workloads[0].requirements:") and "with image" in p for p in problems(caught2.value))


# ---------------------------------------------------------------------- resolution


def test_a_clash_with_the_images_pins_names_the_package_and_both_versions(tmp_path: Path) -> None:
    src = project(tmp_path, "inflection\njax==0.4.30  # old\n")
    with pytest.raises(errors.InvalidInput) as caught:
        requirements.resolve("workloads[3].requirements", src, "requirements.txt", image=JOB_LOCK)
    [line] = problems(caught.value)
    pinned = JOB_LOCK.pins["jax"]
    assert line.startswith("workloads[3].requirements: 'jax==0.4.30'") and "jax==0.4.30" in line
    assert f"the kit's image pins jax=={pinned}" in line


def test_a_range_holding_the_pin_is_no_clash() -> None:
    assert requirements.clash_problems("r", "jax>=0.4\nnumpy\n-r other.txt\n", JOB_LOCK) == []


def test_resolution_is_against_the_image_and_cached_by_content(tmp_path: Path, own_cache: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    src = project(tmp_path, "inflection>=0.5\nnumpy\n")
    lock = requirements.resolve("requirements", src, "requirements.txt", image=JOB_LOCK)
    assert set(lock.extras) == {"inflection"}  # numpy is the image's own pin: nothing to add
    assert requirements.pins(lock.text)["numpy"] == JOB_LOCK.pins["numpy"]
    assert len(lock.digest) == 16 and lock.extras_text() == f"inflection=={lock.extras['inflection']}\n"
    monkeypatch.setattr(requirements, "uv_binary", lambda: pytest.fail("the second resolve ran uv"))
    assert requirements.resolve("requirements", src, "requirements.txt", image=JOB_LOCK) == lock
    (src / "requirements.txt").write_text("inflection>=0.5\n")  # same extras: same lock name
    monkeypatch.undo()
    monkeypatch.setenv("XDG_CACHE_HOME", str(own_cache))
    assert requirements.resolve("requirements", src, "requirements.txt", image=JOB_LOCK).digest == lock.digest


def test_a_package_no_index_has_is_refused_naming_the_field(tmp_path: Path) -> None:
    src = project(tmp_path, "no-such-package-raytpu-heldout-zz\n")
    with pytest.raises(errors.InvalidInput) as caught:
        requirements.resolve("workloads[1].requirements", src, "requirements.txt", image=JOB_LOCK)
    assert str(caught.value).startswith("workloads[1].requirements: 'requirements.txt' does not resolve")
    assert "no-such-package-raytpu-heldout-zz" in str(caught.value)


def test_a_transitive_clash_is_refused(tmp_path: Path) -> None:
    src = project(tmp_path, "numba==0.58.1\n")  # needs numpy<1.27; the image pins numpy 2
    with pytest.raises(errors.InvalidInput) as caught:
        requirements.resolve("requirements", src, "requirements.txt", image=JOB_LOCK)
    assert "does not resolve against the kit's image pins" in str(caught.value)
    assert "numpy>=1.22,<1.27" in str(caught.value) and f"numpy=={JOB_LOCK.pins['numpy']}" in str(
        caught.value)


def test_uv_is_found_beside_the_kit() -> None:
    assert os.access(requirements.uv_binary(), os.X_OK)


def test_uv_is_a_dependency_of_the_kit_pinned_where_make_pins_it() -> None:
    """``pip install raytpu`` brings the uv the kit runs; the lock and the Makefile agree on its version."""
    import re
    import tomllib

    declared = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["dependencies"]
    ranges = [d for d in declared if re.match(r"uv\b", d)]
    make_pin = re.search(r"^UV_VERSION := (\S+)$", (REPO / "Makefile").read_text(), re.M)
    assert ranges and make_pin
    locked = requirements.pins((REPO / "requirements.lock").read_text())
    assert locked["uv"] == make_pin.group(1)
    from packaging.specifiers import SpecifierSet

    assert make_pin.group(1) in SpecifierSet(ranges[0][2:])


def test_a_venv_per_lock_sees_the_kit_and_is_built_once(tmp_path: Path) -> None:
    lock = requirements.Lock("", {})
    python, built = envs.ensure(tmp_path, lock)
    assert built and python.is_file()
    assert envs.ensure(tmp_path, lock) == (python, False)
    import subprocess

    ran = subprocess.run([str(python), "-c", "import ray, raytpu; print(ray.__version__)"], capture_output=True,
                         text=True, check=True)
    assert ran.stdout.strip() == "2.60.0"


BUILD_AT_ONCE = """
import json, sys
from pathlib import Path
from raytpu.teamcode import envs, requirements
python, built = envs.ensure(Path(sys.argv[1]), requirements.Lock("", {}))
print(json.dumps({"python": str(python), "built": built}))
"""


def test_two_first_submits_of_one_lock_at_once_build_it_once_and_both_run(tmp_path: Path) -> None:
    """Issue 71 item 3: one builder per lock (a file lock), the venv built under its own name and renamed into place:
    the second waits and takes the first's, never deleting a half-built venv."""
    import json
    import subprocess
    import sys

    procs = [subprocess.Popen([sys.executable, "-c", BUILD_AT_ONCE, str(tmp_path)], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for _ in range(3)]
    results = [json.loads(p.communicate(timeout=300)[0]) for p in procs]
    assert all(p.returncode == 0 for p in procs)
    assert sorted(r["built"] for r in results) == [False, False, True]
    assert len({r["python"] for r in results}) == 1
    assert [p.name for p in (tmp_path / "envs").iterdir() if not p.name.endswith(".lock")] == [
        requirements.Lock("", {}).digest]  # no partial venv left beside it
    ran = subprocess.run([results[0]["python"], "-c", "import raytpu"], capture_output=True, text=True)
    assert ran.returncode == 0, ran.stderr


@pytest.mark.parametrize(("stderr", "says"), [
    ("error: Failed to install: No space left on device (os error 28)", "free space"),
    ("error: failed to create directory: Read-only file system (os error 30)", "a writable run folder"),
    ("error: Failed to fetch: `https://pypi.org/simple/inflection/` Caused by: dns error", "a reachable package index"),
    ("error: Because nothing satisfies x==9 ...", "what uv's message above names"),
])
def test_a_failed_uv_run_names_its_real_cause(stderr: str, says: str) -> None:
    assert envs.uv_valid(stderr).startswith(says)


@pytest.mark.parametrize(("code", "says"), [(28, "free space"), (30, "a writable run folder"),
                                            (13, "a writable run folder")])
def test_a_run_folder_that_cannot_take_the_venv_is_named(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, code: int,
                                                         says: str) -> None:
    """A full or read-only run folder is one error line naming the folder, not a traceback nor the package index
    (issue 68 item 1); the failure is made where the venv is written (root writes anywhere, so it is injected)."""

    def full(env: Path, lock: requirements.Lock) -> None:
        raise OSError(code, os.strerror(code), str(env))

    monkeypatch.setattr(envs, "_build", full)
    with pytest.raises(errors.RuntimeFailure) as raised:
        envs.ensure(tmp_path, requirements.Lock("", {}))
    assert str(tmp_path / "envs") in raised.value.problem and raised.value.valid is not None
    assert raised.value.valid.startswith(says)


# ---------------------------------------------------------------------- GKE: an image per lock


@pytest.fixture
def spec(tmp_path: Path) -> Any:
    project(tmp_path)
    return parse(CONFIG, str(tmp_path / "raytpu.yaml"), base=tmp_path)


def test_the_rayjob_runs_the_image_of_its_lock_by_digest(spec: Any, tmp_path: Path) -> None:
    work = spec.workload("pretrain")
    name = team.image_name(team.prepare(spec, work))
    assert name is not None and team.NAME.match(name)
    ref = f"us-docker.pkg.dev/fixture-project/raytpu-fixture/{name}@sha256:{'a' * 64}"
    resolve = images.resolver({**FIXTURE_REFS, name: ref}, stack="fixture-cluster", team_image=name)
    job = kuberay.workload_manifest(spec, work, images=resolve, service_account="ray", bucket="b", namespace="ray",
                                    name="pretrain-r1", args=work.kind.run_args("pretrain-r1"), code_zip="w.zip")
    assert schema_errors(job) == []
    pods = [job["spec"]["rayClusterSpec"]["headGroupSpec"], *job["spec"]["rayClusterSpec"]["workerGroupSpecs"]]
    assert {c["image"] for p in pods for c in p["template"]["spec"]["containers"]} == {ref}
    runtime = yaml.safe_load(job["spec"]["runtimeEnvYAML"])
    assert not {"pip", "uv", "conda"} & set(runtime)  # nothing installed at start: the image holds the lock
    assert json.loads(runtime["env_vars"]["RAYTPU_WORKLOAD"])["requirements"] == "requirements.txt"


def test_a_teams_serve_app_declares_the_ray_of_the_image_it_runs(tmp_path: Path) -> None:
    """A lock's image is layered on the job image (Ray 2.60), never the serving image (vLLM's Ray): the RayService's
    ``rayVersion`` names the Ray its pods run. Source: KubeRay v1.7.0 ``RayClusterSpec.RayVersion`` (the version
    checks KubeRay makes, e.g. token auth's 2.52 floor, read it)."""
    project(tmp_path)
    (tmp_path / "src" / "lm" / "serve.py").write_text("app = object()\n")
    config = CONFIG + """  - name: scorer
    kind: serve
    slice: serve
    code: ./src
    requirements: requirements.txt
    serve_app: lm.serve:app
"""
    spec = parse(config, str(tmp_path / "raytpu.yaml"), base=tmp_path)
    work = spec.workload("scorer")
    name = team.image_name(team.prepare(spec, work))
    assert name is not None
    ref = f"us-docker.pkg.dev/fixture-project/raytpu-fixture/{name}@sha256:{'a' * 64}"
    image = images.resolver({**FIXTURE_REFS, name: ref}, stack="fixture-cluster", team_image=name)(work)
    assert image == (ref, images.IMAGES[team.BASE_IMAGE].ray_version) and image.ray_version == "2.60.0"


def test_submit_names_the_build_command_when_the_locks_image_is_missing(spec: Any) -> None:
    work = spec.workload("pretrain")
    name = team.image_name(team.prepare(spec, work))
    with pytest.raises(errors.InvalidInput) as caught:
        images.pod_image(work, FIXTURE_REFS, stack="ray-tpu-cluster", team_image=name)
    assert str(caught.value).startswith(f"image {name}:")
    assert "`raytpu images build --stack ray-tpu-cluster`" in str(caught.value)
    assert images.unbuilt(work, FIXTURE_REFS, name) == name


def test_the_locks_image_is_built_on_the_job_image_by_digest(spec: Any, tmp_path: Path) -> None:
    work = spec.workload("pretrain")
    lock = requirements.resolve("requirements", Path(work.code), work.requirements, image=JOB_LOCK)
    job_ref = FIXTURE_REFS["job"]
    definition = team.definition(lock, job_ref, root=tmp_path / "ctx")
    assert definition.name == team.name_of(lock) and definition.base == job_ref
    assert definition.base_problems() == []
    assert (definition.context / "lock-extras.txt").read_text() == lock.extras_text()
    assert "FROM ${BASE_IMAGE}" in definition.dockerfile.read_text()
    again = build_mod.context_tarball(team.definition(lock, job_ref, root=tmp_path / "ctx"))
    assert build_mod.context_tarball(definition) == again  # the same lock, the same context bytes
    target = build_mod.Target(project="p", location="us-east5", registry="us-east5-docker.pkg.dev/p/raytpu",
                              bucket="b", builder="builder@p.iam.gserviceaccount.com")
    body = build_mod.build_body(definition, target, source_object="o", generation=None, tag="t", timeout_s=600)
    assert body["images"] == [f"us-east5-docker.pkg.dev/p/raytpu/{definition.name}:t"]
    assert body["steps"][0]["env"] == [f"BASE={job_ref}", f"PINNED={job_ref.split('@')[1]}"]
    import base64

    built = {"id": "1", "results": {"buildStepOutputs": [base64.b64encode(job_ref.split("@")[1].encode()).decode()]}}
    assert build_mod.resolved_base(definition, built) == job_ref
    assert DIGEST_REF.match(job_ref)


# ---------------------------------------------------------------------- a missing module, said plainly


def test_a_missing_module_names_the_module_and_the_field() -> None:
    log = ["Traceback (most recent call last):", "  File \"lm/train.py\", line 1, in <module>",
           "ModuleNotFoundError: No module named 'optax'"]
    assert failures.missing_module(log) == "optax"
    said = failures.failed_valid(log, "workloads[3]", has_requirements=False)
    assert "optax" in said and "workloads[3].requirements" in said and "driver log" not in said
    assert "workloads[3].requirements" in failures.failed_valid(log, "workloads[3]", has_requirements=True)
    assert failures.failed_problem("pretrain-r1: Ray job ended FAILED", log).endswith("No module named 'optax'")
    assert failures.failed_valid(["KeyError: 'x'"], "workloads[3]", has_requirements=False) == \
        "see its driver log above"


def test_an_included_file_is_resolved_with_the_file_and_keys_the_lock(tmp_path: Path) -> None:
    """Issue 71 item 2: ``-r base.txt`` is honoured (its packages in the lock, both sides install the lock) and the
    lock's cache key follows the included file, not only the file the config names."""
    (tmp_path / "requirements.txt").write_text("-r base.txt\n")
    (tmp_path / "base.txt").write_text("inflection==0.5.1\n")
    cache = tmp_path / "cache"
    first = requirements.resolve("requirements", tmp_path, "requirements.txt", image=JOB_LOCK, cache=cache)
    assert first.extras == {"inflection": "0.5.1"}
    (tmp_path / "base.txt").write_text("inflection==0.5.0\n")
    again = requirements.resolve("requirements", tmp_path, "requirements.txt", image=JOB_LOCK, cache=cache)
    assert again.extras == {"inflection": "0.5.0"}


def test_validate_reads_files_only_and_resolves_on_asking(tmp_path: Path) -> None:
    """Issue 71 item 13: loading a config runs no uv (offline it called a good file unresolvable after 13 s);
    ``validate --resolve`` resolves, and an unreachable index reads as one (exit 1), not as a bad file."""
    import subprocess
    import sys

    project(tmp_path)
    (tmp_path / "raytpu.yaml").write_text(CONFIG)
    # UV_HTTP_RETRIES=0: uv retries a refused connection 3 times with backoff (6 s); one refusal tells the same.
    env = {**os.environ, "XDG_CACHE_HOME": str(tmp_path / "cache"), "UV_INDEX_URL": "http://127.0.0.1:9/simple",
           "UV_OFFLINE": "0", "UV_NO_CACHE": "1", "UV_HTTP_RETRIES": "0"}
    plain = subprocess.run([sys.executable, "-m", "raytpu", "validate", str(tmp_path / "raytpu.yaml")], env=env,
                           capture_output=True, text=True, timeout=120)
    assert plain.returncode == 0, plain.stderr
    assert not (tmp_path / "cache" / "raytpu").exists()  # nothing resolved
    asked = subprocess.run([sys.executable, "-m", "raytpu", "validate", str(tmp_path / "raytpu.yaml"), "--resolve"],
                           env=env, capture_output=True, text=True, timeout=300)
    assert asked.returncode == 1, asked.stderr
    assert "cannot reach the package index" in asked.stderr and "a reachable package index" in asked.stderr
    assert "Traceback" not in asked.stderr


def test_a_uv_config_in_the_code_folder_does_not_move_the_index(tmp_path: Path) -> None:
    """The reviewer's finding: uv 0.13 reads a ``uv.toml`` (or ``[tool.uv]`` of ``pyproject.toml``) in its working
    folder, the team's code folder, so the lock would resolve against an index the image build never uses; the kit
    resolves with ``--no-config``."""
    (tmp_path / "requirements.txt").write_text("inflection==0.5.1\n")
    (tmp_path / "uv.toml").write_text('[pip]\nindex-url = "http://127.0.0.1:9/simple"\n')
    lock = requirements.resolve("requirements", tmp_path, "requirements.txt", image=JOB_LOCK, cache=tmp_path / "cache")
    assert lock.extras == {"inflection": "0.5.1"}
