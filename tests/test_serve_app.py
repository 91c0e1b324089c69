"""A team's own Ray Serve app (issue 47 item 2): its RayService against the vendored KubeRay CRDs and Ray 2.60's
``ServeDeploySchema``, carrying the team's code as team RayJobs do; the kit's builder refusing a deployment too large
for a host (naming it) and putting the API key in front of the app's ingress. Unit tier: Serve objects are built,
no cluster is started (the emulated slice's end-to-end test is tests/test_serve_app_slice.py)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from crd import schema_errors, webhook_errors
from image_refs import FIXTURE_IMAGES, FIXTURE_REFS
from starlette.requests import Request

from raytpu import images
from raytpu.config import parse
from raytpu.core.common import names
from raytpu.core.common.errors import RuntimeFailure
from raytpu.core.manifests import engine_pods, kuberay, team_serving
from raytpu.workloads import team_serve

pytestmark = pytest.mark.unit
REPO = Path(__file__).resolve().parents[1]
HEAD = (REPO / "raytpu.example.yaml").read_text().split("\nworkloads:")[0]
CONFIG = HEAD + """
security: {serve_api_key_secret: serve-key}
workloads:
  - name: scorer
    kind: serve
    slice: serve
    code: ./src
    serve_app: lm.serve:app
"""
SRC = {"lm/__init__.py": "", "lm/serve.py": "app = None\n"}


@pytest.fixture
def spec(tmp_path: Path) -> Any:
    for name, text in SRC.items():
        (tmp_path / "src" / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / "src" / name).write_text(text)
    return parse(CONFIG, str(tmp_path / "raytpu.yaml"), base=tmp_path)


def service(spec: Any) -> dict[str, Any]:
    return kuberay.workload_manifest(spec, spec.workload("scorer"), images=FIXTURE_IMAGES, service_account="ray",
                                     bucket="b", namespace="ray", code_zip="scorer-abc.zip")


def test_the_rayservice_passes_the_vendored_crds_and_rays_serve_schema(spec: Any) -> None:
    obj = service(spec)
    assert obj["kind"] == "RayService"
    assert schema_errors(obj) == [] and webhook_errors(obj) == []
    config = yaml.safe_load(obj["spec"]["serveConfigV2"])
    from ray.serve.schema import ServeDeploySchema  # Ray loads here, not at collection (tests/conftest.py: auth)

    ServeDeploySchema.model_validate(config)  # Ray 2.60's own schema of what the dashboard accepts
    [app] = config["applications"]
    assert app["import_path"] == team_serving.BUILDER == "raytpu.workloads.team_serve:build"
    assert app["args"] == {"serve_app": "lm.serve:app", "chips_per_host": 8,
                           "api_key_file": engine_pods.SERVE_API_KEY_FILE}


def test_a_team_apps_endpoint_keeps_kuberays_default_for_the_head(spec: Any) -> None:
    """A team's deployments may run anywhere, the head included; KubeRay v1.7.0 then labels the head for the serve
    Service when its proxy is healthy (``updateHeadPodServeLabel``), as without the kit."""
    assert "excludeHeadPodFromServeSvc" not in service(spec)["spec"]


def test_it_carries_the_teams_code_as_team_rayjobs_do(spec: Any) -> None:
    [app] = yaml.safe_load(service(spec)["spec"]["serveConfigV2"])["applications"]
    runtime = app["runtime_env"]
    assert runtime["working_dir"] == "file:///mnt/gcs/code/scorer-abc.zip"
    assert runtime["py_modules"] == [names.py_modules_uri()]
    env = runtime["env_vars"]
    assert (env["RAYTPU_STORAGE"], env["RAYTPU_RUN"], env["RAYTPU_CHIPS_PER_HOST"]) == (
        "/mnt/gcs/checkpoints", "scorer", "8")


def test_it_runs_on_the_slices_hosts_behind_the_api_key_on_the_job_image(spec: Any) -> None:
    obj = service(spec)
    cluster = obj["spec"]["rayClusterConfig"]
    [workers] = cluster["workerGroupSpecs"]
    assert workers["numOfHosts"] == 1 and workers["template"]["spec"]["nodeSelector"]
    for group in (cluster["headGroupSpec"], workers):
        mounts = group["template"]["spec"]["containers"][0]["volumeMounts"]
        assert any(m["name"] == engine_pods.SERVE_API_KEY_VOLUME for m in mounts)
        assert group["template"]["spec"]["containers"][0]["image"] == FIXTURE_REFS["job"]
    assert images.image_of(spec.workload("scorer")).name == "job"
    policy = kuberay.network_policy(obj, spec)
    assert policy["kind"] == "NetworkPolicy"


# ------------------------------------------------------------------------------------------- the kit's builder


class _Big:
    def __call__(self, request: Any) -> str:
        return "big"


class _Front:
    def __init__(self, inner: Any) -> None:
        self.inner = inner

    async def __call__(self, request: Any) -> str:
        return "front"


@pytest.fixture(name="apps")
def _apps() -> tuple[Any, Any]:
    """``(Big, Front)`` as Serve deployments: Ray imported by the test that needs it, never at collection (Ray 2.60
    reads its auth mode once, when ``ray._raylet`` loads: the slice tier's session sets it first)."""
    from ray import serve

    return (serve.deployment(name="Big", ray_actor_options={"resources": {"TPU": 8}})(_Big),
            serve.deployment(name="Front")(_Front))


def test_a_deployment_larger_than_a_host_is_refused_by_its_name(monkeypatch: pytest.MonkeyPatch,
                                                                apps: tuple[Any, Any]) -> None:
    Big, Front = apps
    monkeypatch.setattr(team_serve, "import_app", lambda *_: Front.bind(Big.bind()))
    with pytest.raises(RuntimeFailure, match=r"deployment Big asks for 8 TPU per replica.*\(4\)"):
        team_serve.build({"serve_app": "lm.serve:app", "chips_per_host": 4})
    assert team_serve.tpu_problems(Front.bind(Big.bind()), 8) == []


def test_placement_group_bundles_count_packed_on_one_host(apps: tuple[Any, Any]) -> None:
    Big, _ = apps
    packed = Big.options(ray_actor_options={}, placement_group_bundles=[{"CPU": 1, "TPU": 4}, {"TPU": 4}],
                         placement_group_strategy="STRICT_PACK").bind()
    spread = Big.options(ray_actor_options={}, placement_group_bundles=[{"CPU": 1, "TPU": 4}, {"TPU": 4}],
                         placement_group_strategy="SPREAD").bind()
    assert [team_serve.replica_tpu(next(team_serve.deployments(a))) for a in (packed, spread)] == [8, 4]


def _request(path: str, key: str | None) -> Request:
    headers = [(b"authorization", f"Bearer {key}".encode())] if key else []
    return Request({"type": "http", "method": "POST", "path": path, "headers": headers, "query_string": b""})


def test_the_ingress_answers_401_without_the_key(monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                                                 apps: tuple[Any, Any]) -> None:
    Big, Front = apps
    (tmp_path / "key").write_text("s3cret\n")
    monkeypatch.setattr(team_serve, "import_app", lambda *_: Front.bind(Big.options(ray_actor_options={}).bind()))
    app = team_serve.build({"serve_app": "x:y", "chips_per_host": 4, "api_key_file": str(tmp_path / "key")})
    dep = app._bound_deployment
    assert dep.name == "Front"
    replica = dep.func_or_class("inner")
    denied = asyncio.run(replica(_request("/", None)))
    assert denied.status_code == 401 and json.loads(denied.body)["error"]["type"] == "authentication_error"
    assert asyncio.run(replica(_request("/", "wrong"))).status_code == 401
    assert asyncio.run(replica(_request("/", "s3cret"))) == "front"


# ---------------------------------------------------------------------- locally: env and secrets (issue 47.3)


def _local(tmp_path: Path) -> Any:
    from raytpu.local.slice import state

    return state.LocalCluster(run_dir=str(tmp_path / "run"), temp_dir="/tmp/raytpu-x", address="127.0.0.1:1",
                              plan={}, slices=[])


def test_locally_the_app_gets_its_env_and_only_the_secrets_files_path(spec: Any, tmp_path: Path) -> None:
    """The values stay in a private file Ray's runtime env never carries (Ray logs its env_vars); every worker of
    the app loads it at its start through Ray's worker setup hook."""
    from dataclasses import replace

    from raytpu.local.running import team_app
    from raytpu.workloads import local_secrets

    work = replace(spec.workload("scorer"), env={"TEAM_MODE": "m"}, secrets={"TEAM_TOKEN": "team-token"})
    path = local_secrets.write({"TEAM_TOKEN": "v-47"})
    try:
        from raytpu.images import team

        config = team_app.local_config(_local(tmp_path), work, team.prepare(spec, work), None, path)
        env = config["applications"][0]["runtime_env"]["env_vars"]  # type: ignore[index]
        assert env["TEAM_MODE"] == "m" and env[local_secrets.ENV] == path
        assert env[local_secrets.SETUP_HOOK_ENV] == "raytpu.workloads.local_secrets.load"
        assert "v-47" not in json.dumps(config) and "TEAM_TOKEN" not in env
        from ray._private import ray_constants

        assert local_secrets.SETUP_HOOK_ENV == ray_constants.WORKER_PROCESS_SETUP_HOOK_ENV_VAR
    finally:
        local_secrets.remove(path)


def test_locally_an_unset_secret_is_refused_before_anything_deploys(spec: Any, tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    from dataclasses import replace

    from raytpu.core.common.errors import InvalidInput
    from raytpu.local.running import team_app
    from raytpu.teamcode.prepared import TeamCode

    monkeypatch.delenv("TEAM_TOKEN", raising=False)
    work = replace(spec.workload("scorer"), secrets={"TEAM_TOKEN": "team-token"})
    said: list[str] = []
    with pytest.raises(InvalidInput, match=r"workloads\[0\]\.secrets\.TEAM_TOKEN"):
        team_app.deploy_team_app(_local(tmp_path), work, TeamCode("workloads[0]"), 1.0, None, said.append)
    assert said == [] and not (tmp_path / "run").exists()


def test_a_served_apps_secrets_file_lasts_until_local_down(tmp_path: Path) -> None:
    from raytpu.workloads import local_secrets

    path = local_secrets.write({"A": "1"})
    local_secrets.keep(str(tmp_path), path)
    assert oct(Path(path).stat().st_mode & 0o777) == "0o600"
    assert local_secrets.remove_kept(str(tmp_path)) == 1
    assert not Path(path).exists() and not (tmp_path / local_secrets.KEPT).exists()
    assert local_secrets.remove_kept(str(tmp_path)) == 0
