"""Slows Ray Serve LLM's engine start in every Ray process of the twin (``bench/serve_start.py`` puts this folder on
``PYTHONPATH``): ``VLLMEngine._start_async_llm_engine`` first blocks its thread ``RAYTPU_BENCH_ENGINE_START_S``, as
vLLM's ``AsyncLLM()`` does on TPU while weights load and XLA compiles (docs/FACTS.md#ray-serve-start-bench). Inert
without it.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import os
import sys
import time
import types
from collections.abc import Sequence
from typing import Any

TARGET = "ray.llm._internal.serve.engines.vllm.vllm_engine"
ENV = "RAYTPU_BENCH_ENGINE_START_S"


class _SlowStart(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Loads :data:`TARGET` as usual, then wraps its engine start with the blocking wait."""

    def __init__(self) -> None:
        self._inner: importlib.abc.Loader | None = None

    def find_spec(self, fullname: str, path: Sequence[str] | None,
                  target: types.ModuleType | None = None) -> importlib.machinery.ModuleSpec | None:
        if fullname != TARGET:
            return None
        sys.meta_path.remove(self)
        try:
            spec = importlib.machinery.PathFinder.find_spec(fullname, path)
        finally:
            sys.meta_path.insert(0, self)
        if spec is None or spec.loader is None:
            return None
        self._inner = spec.loader
        spec.loader = self
        return spec

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType | None:
        assert self._inner is not None
        return self._inner.create_module(spec)

    def exec_module(self, module: types.ModuleType) -> None:
        assert self._inner is not None
        self._inner.exec_module(module)
        original = module.VLLMEngine._start_async_llm_engine
        delay = float(os.environ[ENV])

        def slow(self: Any, *args: Any, **kwargs: Any) -> Any:
            print(f"raytpu bench: engine start blocks this thread for {delay:g}s", file=sys.stderr, flush=True)
            time.sleep(delay)
            return original(self, *args, **kwargs)

        module.VLLMEngine._start_async_llm_engine = slow


if os.environ.get(ENV):
    sys.meta_path.insert(0, _SlowStart())
