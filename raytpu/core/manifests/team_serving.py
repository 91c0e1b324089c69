"""serveConfigV2 of a team's own Ray Serve app (``serve_app``): the kit's builder
(:mod:`raytpu.workloads.team_serve`) imports it from the shipped code, checks its deployments against a host of the
slice and puts the API key in front of it. Standard library only.

Every field, Ray 2.60 ``ray.serve.schema.ServeDeploySchema`` / ``ServeApplicationSchema`` (checked against the
installed Ray in tests/test_serve_app.py): ``proxy_location``; per app ``name``, ``route_prefix``, ``import_path``
(``module:attribute``, a builder called with ``args``), ``args``, ``runtime_env`` (the app's, with which Serve imports
it and runs every replica: ``working_dir`` the code zip, ``py_modules`` the kit's zip, ``env_vars``).
KubeRay v1.7.0 ``RayServiceSpec.ServeConfigV2`` carries it as a string, submitted as is to the dashboard's
``PUT /api/serve/applications/``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from raytpu.core.common import names
from raytpu.core.manifests.serving import PROXY_LOCATION
from raytpu.core.specs.runtime import user_code

if TYPE_CHECKING:
    from raytpu.core.specs.spec import WorkloadSpec

BUILDER = "raytpu.workloads.team_serve:build"
APP_NAME = "app"


def storage_root(mount_path: str) -> str:
    """Where every run's checkpoints lie (``<mount>/checkpoints``): a Serve app reads a training run's from there."""
    return names.run_storage("", mount_path).rstrip("/")


def team_env(work: WorkloadSpec, name: str, mount_path: str) -> dict[str, str]:
    """The ``RAYTPU_*`` variables of a serve app: the slice's shape, ``RAYTPU_STORAGE`` the checkpoints of every
    run (``<mount>/checkpoints``: ``<run>/checkpoint_*`` under it), ``RAYTPU_RUN`` the RayService's name."""
    return user_code.raytpu_env(work.plan, slices=work.slices_spanned, storage=storage_root(mount_path), run=name)


def builder_args(work: WorkloadSpec, api_key_file: str | None) -> dict[str, Any]:
    """The ``args`` :func:`raytpu.workloads.team_serve.build` reads."""
    assert work.serve_app is not None
    args: dict[str, Any] = {"serve_app": work.serve_app, "chips_per_host": work.plan.chips_per_host}
    if api_key_file:
        args["api_key_file"] = api_key_file
    return args


def serve_config(work: WorkloadSpec, runtime: Mapping[str, Any], api_key_file: str | None = None
                 ) -> dict[str, Any]:
    """serveConfigV2: one app, the kit's builder around ``work.serve_app``, in ``runtime`` (the team's code)."""
    app = {"name": APP_NAME, "route_prefix": "/", "import_path": BUILDER, "args": builder_args(work, api_key_file),
           "runtime_env": dict(runtime)}
    return {"proxy_location": PROXY_LOCATION, "applications": [app]}
