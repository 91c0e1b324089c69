"""Ray Serve LLM's OpenAI ingress with OpenAI's error shape for an unknown model.

Ray 2.60's ``OpenAiIngress._get_model_id`` raises FastAPI's ``HTTPException(404)`` for a model it does not
serve, so ``/v1/chat/completions`` and ``/v1/completions`` answer ``{"detail": ...}``, while ``/v1/models/{id}``
answers OpenAI's ``{"error": {"message", "type", "param", "code"}}`` (``ray/llm/_internal/serve/core/ingress/
ingress.py``). Clients written for OpenAI read ``error.message``; this subclass raises Ray's own
``OpenAIHTTPException`` instead, which its exception middleware renders in OpenAI's shape. Named in the app's
``ingress_cls_config`` by :func:`raytpu.serving.serve_config`; runs where ``ray[serve,llm]`` is installed.
"""

from __future__ import annotations

from fastapi import HTTPException
from ray.llm._internal.serve.core.configs.openai_api_models import OpenAIHTTPException
from ray.serve.llm.ingress import OpenAiIngress


class OpenAIErrorIngress(OpenAiIngress):
    """``OpenAiIngress`` whose unknown-model 404 has OpenAI's error shape."""

    async def _get_model_id(self, model: str | None) -> str:
        try:
            return str(await super()._get_model_id(model))
        except HTTPException as exc:
            raise OpenAIHTTPException(status_code=exc.status_code, message=str(exc.detail)) from None
