"""The kit's Ray Serve builder around a team's own app (``serve_app: MODULE:APP``): serveConfigV2's ``import_path``
on GKE and ``raytpu local serve`` alike. When Serve deploys it (on the cluster, with the team's code as the app's
``working_dir``) it imports the app, refuses any deployment that asks for more TPU per replica than a host of the
slice has (naming it: such a replica would stay pending forever), and puts the API key in front of the app's ingress.

Why at deploy and not in ``validate``: a deployment's ``ray_actor_options`` may come from any Python (an app builder's
arguments, ``.options()`` calls), so only the built app knows them; ``validate`` reads the module without running it.
"""

from __future__ import annotations

import importlib
import inspect
import json
from collections.abc import Iterator
from typing import Any

from raytpu.core.common.errors import RuntimeFailure
from raytpu.workloads.support.api_key import UNAUTHORIZED, ApiKeyMiddleware, authorized, read_api_key


def import_app(serve_app: str, args: dict[str, Any] | None = None) -> Any:
    """The ``Application`` that ``MODULE:APP`` names: a bound deployment as it is, a builder called with ``args``.
    Source: Ray 2.60 ``ray.serve._private.api.call_user_app_builder_with_args_if_necessary`` (the same rule)."""
    from ray.serve._private.api import call_user_app_builder_with_args_if_necessary

    module, _, name = serve_app.partition(":")
    return call_user_app_builder_with_args_if_necessary(getattr(importlib.import_module(module), name), args or {})


def deployments(app: Any) -> Iterator[Any]:
    """Every deployment of ``app``: its ingress, then those bound into its arguments (a pipeline), each once.
    Source: Ray 2.60 ``ray.serve.deployment.Application._bound_deployment``, ``Deployment.init_args/init_kwargs``."""
    from ray.serve.deployment import Application

    seen: set[int] = set()
    todo = [app]
    while todo:
        item = todo.pop(0)
        if isinstance(item, Application):
            if id(item) in seen:
                continue
            seen.add(id(item))
            dep = item._bound_deployment
            yield dep
            todo += [*dep.init_args, *dict(dep.init_kwargs).values()]
        elif isinstance(item, list | tuple):
            todo += list(item)
        elif isinstance(item, dict):
            todo += list(item.values())


def replica_tpu(dep: Any) -> float:
    """TPU chips one replica of ``dep`` reserves on one host: its actor's ``resources.TPU``, or, with
    ``placement_group_bundles`` packed on one node (``STRICT_PACK``), the bundles' sum, else the largest bundle.
    Source: Ray 2.60 ``ray.serve.deployment.Deployment.options`` (``ray_actor_options``,
    ``placement_group_bundles``, ``placement_group_strategy``)."""
    actor = float(((dep.ray_actor_options or {}).get("resources") or {}).get("TPU", 0))
    config = getattr(dep, "_replica_config", None)
    bundles = [float((b or {}).get("TPU", 0)) for b in (getattr(config, "placement_group_bundles", None) or [])]
    if not bundles:
        return actor
    packed = getattr(config, "placement_group_strategy", None) == "STRICT_PACK"
    return max(actor, sum(bundles) if packed else max(bundles))


def tpu_problems(app: Any, chips_per_host: int) -> list[str]:
    """One line per deployment whose replica asks for more TPU than a host has (none fits anywhere)."""
    return [f"deployment {dep.name} asks for {replica_tpu(dep):g} TPU per replica, more than a host of the slice "
            f"has ({chips_per_host}); valid: at most {chips_per_host} (ray_actor_options={{'resources': "
            f"{{'TPU': {chips_per_host}}}}})" for dep in deployments(app) if replica_tpu(dep) > chips_per_host]


def _guarded_class(cls: type, key: bytes) -> type:
    """``cls`` whose HTTP entry answers 401 without the key: an ASGI ingress (``serve.ingress``) through
    :class:`ApiKeyMiddleware`, a ``__call__(request)`` deployment by reading the request's header first."""
    from ray.serve._private.http_util import ASGIAppReplicaWrapper

    if issubclass(cls, ASGIAppReplicaWrapper):
        class GuardedAsgi(cls):
            async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
                async def inner(s: Any, r: Any, se: Any) -> None:
                    await super(GuardedAsgi, self).__call__(s, r, se)
                await ApiKeyMiddleware(inner, key)(scope, receive, send)
        GuardedAsgi.__name__ = GuardedAsgi.__qualname__ = cls.__name__
        return GuardedAsgi

    class Guarded(cls):
        async def __call__(self, request: Any, *args: Any, **kwargs: Any) -> Any:
            if not _allowed(request, key):
                return _unauthorized()
            result = super().__call__(request, *args, **kwargs)
            return await result if inspect.isawaitable(result) else result
    Guarded.__name__ = Guarded.__qualname__ = cls.__name__
    return Guarded


def _allowed(request: Any, key: bytes) -> bool:
    headers = getattr(request, "headers", None)
    return headers is None or authorized(headers.get("authorization"), key)  # a handle call: not HTTP


def _unauthorized() -> Any:
    from starlette.responses import JSONResponse

    return JSONResponse({"error": {"message": UNAUTHORIZED, "type": "authentication_error", "param": None,
                                   "code": 401}}, status_code=401)


def guard(app: Any, key: bytes) -> Any:
    """``app`` with its ingress deployment behind the API key (the other deployments are reached by handle only)."""
    ingress = app._bound_deployment
    target = ingress.func_or_class
    if inspect.isclass(target):
        wrapped: Any = _guarded_class(target, key)
    else:
        async def wrapped(request: Any, *args: Any, **kwargs: Any) -> Any:
            if not _allowed(request, key):
                return _unauthorized()
            result = target(request, *args, **kwargs)
            return await result if inspect.isawaitable(result) else result
        wrapped.__name__ = getattr(target, "__name__", "ingress")
    return ingress.options(func_or_class=wrapped).bind(*ingress.init_args, **ingress.init_kwargs)


def build(args: dict[str, Any]) -> Any:
    """serveConfigV2's app builder: ``{"serve_app": "lm.serve:app", "chips_per_host": 4, "api_key_file": PATH,
    "app_args": {...}}``; RuntimeFailure naming every deployment too large for a host (the app is not deployed)."""
    app = import_app(args["serve_app"], args.get("app_args"))
    problems = tpu_problems(app, int(args["chips_per_host"]))
    if problems:
        raise RuntimeFailure(f"serve_app {args['serve_app']}: " + "; ".join(problems),
                             "deployments that fit one host of the slice")
    key = read_api_key(args.get("api_key_file"))
    return guard(app, key) if key is not None else app


def builder_args(serve_app: str, chips_per_host: int, api_key_file: str | None) -> dict[str, Any]:
    """The ``args`` of :func:`build` (JSON, as serveConfigV2 carries them)."""
    return json.loads(json.dumps({"serve_app": serve_app, "chips_per_host": chips_per_host,
                                  **({"api_key_file": api_key_file} if api_key_file else {})}))
