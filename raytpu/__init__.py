"""raytpu: Ray on Cloud TPU, as code. ``core`` describes slices and holds the validated specs every layer reads;
``config`` compiles ``raytpu.yaml`` into a spec; ``stacks``/``modules`` are the CDK Terrain stacks and constructs;
``workloads`` the Ray programs.

The face: what an outside app needs (``examples/platform_app/app.py``) is importable from here, ``from raytpu import
ClusterStack, load``; each name is marked public API in its docstring (``App`` is CDK Terrain's, re-exported).
Anything else is imported from its module. Importing this package imports nothing heavy: a name loads its module
on first use (PEP 562 ``__getattr__``); ``__init__.pyi`` gives type checkers the same names."""

from __future__ import annotations

__version__ = "0.1.0"

_PUBLIC = {
    "load": "raytpu.config",
    "kind": "raytpu.core.specs.kinds",
    "SliceSpec": "raytpu.core.specs.slices.slice_spec",
    "WorkloadSpec": "raytpu.core.specs.workload_spec",
    "load_refs": "raytpu.images.record",
    "App": "raytpu.modules.parts.cdk",
    "Bucket": "raytpu.modules.bucket",
    "BucketProps": "raytpu.modules.bucket",
    "ClusterStack": "raytpu.stacks.cluster",
    "ClusterStackProps": "raytpu.stacks.cluster",
    "WorkloadsStack": "raytpu.stacks.workloads",
    "WorkloadsStackProps": "raytpu.stacks.workloads",
}
"""Public name -> the module that defines it."""

__all__ = ["__version__", *_PUBLIC]


def __getattr__(name: str) -> object:
    """Loads a public name's module on first use (PEP 562), so ``import raytpu`` stays cheap."""
    import importlib

    if name not in _PUBLIC:
        raise AttributeError(f"module 'raytpu' has no attribute {name!r}")
    value = getattr(importlib.import_module(_PUBLIC[name]), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_PUBLIC})
