"""On an emulated TPU host only: lets a team's unchanged ``jax.distributed.initialize()`` find the emulated slice.

On GKE, JAX's ``GkeTpuCluster`` reads the TPU webhook's ``TPU_WORKER_HOSTNAMES``/``TPU_WORKER_ID`` (and
``MEGASCALE_*``), but only once libtpu has found TPU chips, which CPU devices never are. So here, once JAX's cluster
module is imported, one more cluster environment registers: present where ``RAYTPU_EMULATED=1`` and the kit gave the
host its rank, it answers the process count and id the kit gave (:mod:`raytpu.workloads.every_host`);
``JAX_COORDINATOR_ADDRESS`` names the coordinator on both sides. Nothing is imported until the program imports JAX.
Source: JAX 0.10.2 ``jax._src.clusters.ClusterEnv`` (subclasses register themselves, ``auto_detect_unset_distributed_
params``) and ``jax._src.distributed.State.initialize`` (``JAX_COORDINATOR_ADDRESS``)."""

import importlib.abc
import importlib.machinery
import os
import sys
from collections.abc import Sequence
from types import ModuleType
from typing import Any

TARGET = "jax._src.clusters"


def _register(clusters: Any) -> type:
    base: type = clusters.ClusterEnv

    class RaytpuEmulatedSlice(base):
        name = "raytpu_emulated_slice"

        @classmethod
        def is_env_present(cls) -> bool:
            return os.environ.get("RAYTPU_EMULATED") == "1" and "RAYTPU_HOST_RANK" in os.environ

        @classmethod
        def get_coordinator_address(cls, timeout_secs: int | None, override_coordinator_port: str | None) -> str:
            return os.environ["JAX_COORDINATOR_ADDRESS"]

        @classmethod
        def get_process_count(cls) -> int:
            return int(os.environ["RAYTPU_HOST_COUNT"])

        @classmethod
        def get_process_id(cls) -> int:
            return int(os.environ["RAYTPU_HOST_RANK"])

    return RaytpuEmulatedSlice


class _AfterClusters(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Finds ``jax._src.clusters`` as usual, then registers the emulated slice once it has run."""

    inner: Any = None

    def find_spec(self, fullname: str, path: Sequence[str] | None,
                  target: ModuleType | None = None) -> importlib.machinery.ModuleSpec | None:
        if fullname != TARGET:
            return None
        sys.meta_path.remove(self)
        spec = importlib.machinery.PathFinder.find_spec(fullname, path)
        if spec is None or spec.loader is None:
            return spec
        self.inner = spec.loader
        spec.loader = self
        return spec

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType | None:
        return self.inner.create_module(spec)

    def exec_module(self, module: ModuleType) -> None:
        self.inner.exec_module(module)
        _register(module)


if os.environ.get("RAYTPU_EMULATED") == "1" and "RAYTPU_HOST_RANK" in os.environ:
    sys.meta_path.insert(0, _AfterClusters())
