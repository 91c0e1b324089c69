"""Where a vLLM engine keeps its XLA compilation cache: in the kit's bucket, so a new pod finds it.

The serving image's vLLM (tpu-inference) hands ``VLLM_XLA_CACHE_PATH`` to JAX as its persistent compilation cache
(``jax_compilation_cache_dir``). The folder is per model, slice shape and vLLM version, under the bucket's GCS FUSE
mount; JAX's own key (computation, compile options, JAX and libtpu versions) tells entries apart within it. Why a
shared bucket folder is safe where GKE's sample keeps the cache on local disk: docs/FACTS.md section 24.x.
Standard library only.
"""

from __future__ import annotations

import hashlib
import re

from raytpu.core.common.names import GCS_MOUNT_PATH
from raytpu.core.tpu.plan import SlicePlan

ENV = "VLLM_XLA_CACHE_PATH"
PREFIX = "xla-cache/vllm"
"""The cache's folder in the kit's bucket (``gs://<bucket>/xla-cache/vllm/...``)."""
_UNSAFE = re.compile(r"[^a-z0-9._-]+|\.\.+")


def _part(text: str, limit: int = 60) -> str:
    """``text`` as one readable path segment; a short hash keeps two sources that read alike apart."""
    readable = _UNSAFE.sub("-", text.lower()).strip("-.")[:limit] or "x"
    return f"{readable}-{hashlib.sha256(text.encode()).hexdigest()[:8]}"


def cache_dir(model_source: str, plan: SlicePlan, vllm_version: str, mount_path: str = GCS_MOUNT_PATH) -> str:
    """The engine's cache folder as its pods see it: ``<mount>/xla-cache/vllm/<vLLM>/<generation>-<topology>/<model>``
    (one folder per model, slice shape and vLLM version: what the issue keys a warm start by)."""
    return "/".join((mount_path.rstrip("/"), PREFIX, _part(vllm_version, 40), f"{plan.generation}-{plan.topology}",
                     _part(model_source)))
