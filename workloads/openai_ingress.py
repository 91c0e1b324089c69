"""Ray Serve LLM's OpenAI ingress with OpenAI's error shape for an unknown model, and an optional API key.

Ray 2.60's ``OpenAiIngress._get_model_id`` raises FastAPI's ``HTTPException(404)`` for a model it does not
serve, so ``/v1/chat/completions`` and ``/v1/completions`` answer ``{"detail": ...}``, while ``/v1/models/{id}``
answers OpenAI's ``{"error": {"message", "type", "param", "code"}}`` (``ray/llm/_internal/serve/core/ingress/
ingress.py``). Clients written for OpenAI read ``error.message``; this subclass raises Ray's own
``OpenAIHTTPException`` instead, which its exception middleware renders in OpenAI's shape.

With ``api_key_file`` (``ingress_extra_kwargs``; on GKE the mounted ``security.serve_api_key_secret``) every
request that reaches the model (completions, chat, embeddings, transcriptions, score, tokenize, detokenize: all go
through ``_get_response`` with the raw request) must carry ``Authorization: Bearer <key>``, as OpenAI's clients send
their ``api_key``; anything else is a 401 in OpenAI's shape. The model list (``/v1/models``) stays readable.
Named in the app's ``ingress_cls_config`` by :func:`raytpu.serving.serve_config`; runs where ``ray[serve,llm]`` is
installed.
"""

from __future__ import annotations

import hmac
from collections.abc import AsyncGenerator
from pathlib import Path
from typing import Any

from fastapi import HTTPException
from ray.llm._internal.serve.core.configs.openai_api_models import OpenAIHTTPException
from ray.serve.llm.ingress import OpenAiIngress

from raytpu.errors import RuntimeFailure


class OpenAIErrorIngress(OpenAiIngress):
    """``OpenAiIngress`` whose unknown-model 404 has OpenAI's error shape, optionally behind an API key."""

    def __init__(self, *args: Any, api_key_file: str | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._api_key = Path(api_key_file).read_text().strip().encode() if api_key_file else None
        if self._api_key == b"":
            raise RuntimeFailure(f"api_key_file {api_key_file}: the file is empty", "a file holding the API key")

    async def _get_model_id(self, model: str | None) -> str:
        try:
            return str(await super()._get_model_id(model))
        except HTTPException as exc:
            raise OpenAIHTTPException(status_code=exc.status_code, message=str(exc.detail)) from exc

    def _authorize(self, request: Any) -> None:
        if self._api_key is None:
            return
        given = (request.headers.get("authorization", "") if request is not None else "").encode()
        if not hmac.compare_digest(given, b"Bearer " + self._api_key):
            raise OpenAIHTTPException(status_code=401, message="missing or invalid API key (Authorization: Bearer "
                                      "<key>)", type="authentication_error")

    async def _get_response(self, *, body: Any, call_method: str,
                            raw_request: Any | None = None) -> AsyncGenerator[Any, None]:
        self._authorize(raw_request)
        async for item in super()._get_response(body=body, call_method=call_method, raw_request=raw_request):
            yield item
