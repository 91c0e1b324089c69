"""The API key in front of a Ray Serve app (a Bearer token on its requests): the kit's LLM app
(:mod:`raytpu.workloads.openai_ingress`) and a team's own (:mod:`raytpu.workloads.team_serve`). Needs no Ray Serve LLM.
"""

from __future__ import annotations

import hmac
import json
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from raytpu.core.common.errors import RuntimeFailure

UNAUTHORIZED = "missing or invalid API key (Authorization: Bearer <key>)"
OPEN_PATHS = ("/health", "/v1/models")
"""Readable without the key (GET): the model list and lookups, and vLLM's health check."""


def read_api_key(path: str | None) -> bytes | None:
    """The key in file ``path`` (stripped), or None without a path; an empty file is a deployment error."""
    if not path:
        return None
    key = Path(path).read_text().strip().encode()
    if not key:
        raise RuntimeFailure(f"api_key_file {path}: the file is empty", "a file holding the API key")
    return key


def authorized(header: str | None, key: bytes) -> bool:
    """Whether an ``Authorization`` header carries ``key`` (constant-time)."""
    return hmac.compare_digest((header or "").encode(), b"Bearer " + key)


class ApiKeyMiddleware:
    """ASGI middleware: a model request without the key is answered 401 in OpenAI's error shape."""

    def __init__(self, app: Callable[..., Awaitable[None]], key: bytes) -> None:
        self.app, self.key = app, key

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http" or scope.get("method") == "OPTIONS" or (
                scope.get("method") in ("GET", "HEAD") and scope["path"].startswith(OPEN_PATHS)):
            return await self.app(scope, receive, send)
        headers = dict(scope.get("headers") or ())
        header = headers.get(b"authorization")
        if authorized(header.decode("latin-1") if header is not None else None, self.key):
            return await self.app(scope, receive, send)
        body = json.dumps({"error": {"message": UNAUTHORIZED, "type": "authentication_error", "param": None,
                                     "code": 401}}).encode()
        await send({"type": "http.response.start", "status": 401,
                    "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]})
        await send({"type": "http.response.body", "body": body})
