"""The kit's OpenAI front of Ray Serve LLM: OpenAI's error shapes and an optional API key (a Bearer token on model
requests; list and health stay open), for the direct layout (:class:`LLMServer`) and a multi-host slice's ingress
(:class:`OpenAIErrorIngress`). Source: Ray 2.60 ``OpenAiIngress._get_model_id``; docs/FACTS.md#ray-serve-openai-ingress.
Runs where ``ray[serve,llm]`` is installed.
"""

from __future__ import annotations

import os
from collections.abc import AsyncGenerator
from typing import Any

from fastapi import HTTPException
from ray import serve
from ray.llm._internal.serve.core.configs.openai_api_models import OpenAIHTTPException
from ray.serve.llm import LLMConfig, build_llm_deployment
from ray.serve.llm.deployment import LLMServer as RayLLMServer  # not ray.serve.llm's: see LLMServer
from ray.serve.llm.ingress import OpenAiIngress

from raytpu.core.manifests.serving import API_KEY_FILE_ENV
from raytpu.workloads.support.api_key import (  # noqa: F401 (re-exported: its callers and tests import them here)
    OPEN_PATHS,
    UNAUTHORIZED,
    ApiKeyMiddleware,
    authorized,
    read_api_key,
)


class LLMServer(RayLLMServer):
    """Ray's ``LLMServer`` serving vLLM's OpenAI app behind :class:`ApiKeyMiddleware` when
    ``$RAYTPU_SERVE_API_KEY_FILE`` names a key (read when the replica starts).

    Its base is ``ray.serve.llm.deployment.LLMServer``: Ray 2.56's ``ray.serve.llm.LLMServer`` is a deprecation
    wrapper whose ``__init__`` is no coroutine function, so ``serve.ingress`` would never await it (no engine).
    Source: Ray 2.56 ``ray/_common/deprecation.py`` ``Deprecated``; ``ray/serve/api.py`` ``ingress``."""

    async def __serve_build_asgi_app__(self) -> Any:
        app = await super().__serve_build_asgi_app__()
        key = read_api_key(os.environ.get(API_KEY_FILE_ENV))
        if key is not None:
            app.add_middleware(ApiKeyMiddleware, key=key)
        return app


class OpenAIErrorIngress(OpenAiIngress):
    """``OpenAiIngress`` whose unknown-model 404 has OpenAI's error shape, optionally behind an API key."""

    def __init__(self, *args: Any, api_key_file: str | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._api_key = read_api_key(api_key_file)

    async def _get_model_id(self, model: str | None) -> str:
        try:
            return str(await super()._get_model_id(model))
        except HTTPException as exc:
            raise OpenAIHTTPException(status_code=exc.status_code, message=str(exc.detail)) from exc

    def _authorize(self, request: Any) -> None:
        if self._api_key is None:
            return
        header = request.headers.get("authorization") if request is not None else None
        if not authorized(header, self._api_key):
            raise OpenAIHTTPException(status_code=401, message=UNAUTHORIZED, type="authentication_error")

    async def _get_response(self, *, body: Any, call_method: str,
                            raw_request: Any | None = None) -> AsyncGenerator[Any, None]:
        self._authorize(raw_request)
        async for item in super()._get_response(body=body, call_method=call_method, raw_request=raw_request):
            yield item


def build_direct_app(args: dict[str, Any]) -> Any:
    """The app of a cluster that streams direct: one ``LLMConfig`` whose :class:`LLMServer` is the ingress, which
    HAProxy balances itself (no ingress request router: Ray's ``build_openai_app`` adds one that HAProxy asks on
    every request, a Python hop before the first token). ``import_path`` of
    :func:`raytpu.core.manifests.serving.serve_config`."""
    (config,) = args["llm_configs"]
    return build_llm_deployment(LLMConfig(**config), deployment_cls=serve.ingress()(LLMServer))
