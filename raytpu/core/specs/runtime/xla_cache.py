"""Where a vLLM engine keeps its XLA compilation cache: in the kit's bucket, so a new pod finds it.
One folder per model, slice shape and vLLM version; safe to share: docs/FACTS.md#disk-vllm-xla-cache,
docs/FACTS.md#compile-cache-xla. Stdlib only."""

from __future__ import annotations

import hashlib
import re

from raytpu.core.common.names import GCS_MOUNT_PATH
from raytpu.core.specs.runtime.compile_cache import KEEP_EVERY_ENTRY
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
    """The engine's cache folder as its pods see it, one per model, slice shape and vLLM version:
    ``<mount>/xla-cache/vllm/<vLLM>/<generation>-<topology>/<model>``."""
    return "/".join((mount_path.rstrip("/"), PREFIX, _part(vllm_version, 40), f"{plan.generation}-{plan.topology}",
                     _part(model_source)))


def engine_env(directory: str) -> dict[str, str]:
    """An engine's cache variables: the folder, and JAX's floors lowered so programs under 1 s are kept too (vLLM's
    TPU backend lowers them only with ``VLLM_XLA_CHECK_RECOMPILATION``).
    Source: vllm-project/tpu-inference v0.27.0 ``CompilationManager.__init__``; docs/FACTS.md#compile-cache-review."""
    return {ENV: directory, **KEEP_EVERY_ENTRY}
