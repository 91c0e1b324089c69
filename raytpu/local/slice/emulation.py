"""What GKE gives a TPU host, emulated: the webhook's ``TPU_*`` environment and the slice names, from which Ray's
``TPUAcceleratorManager`` derives resources and labels as on GKE (docs/FACTS.md#ray-tpu-basics). Standard library
only."""

from __future__ import annotations

from raytpu.core.tpu.plan import SlicePlan

ENV_EMULATED = "RAYTPU_EMULATED"
"""Set to ``1`` in every emulated host's environment; the smoke check reads it (perf checks informational)."""

WEBHOOK_ENV = ("TPU_NAME", "TPU_WORKER_ID", "TPU_WORKER_HOSTNAMES", "TPU_ACCELERATOR_TYPE", "TPU_TOPOLOGY",
               "TPU_PROCESS_ADDRESSES", "TPU_PROCESS_PORT", "TPU_VISIBLE_CHIPS", "JAX_PLATFORMS",
               "JAX_NUM_CPU_DEVICES")
"""A host's TPU environment: never inherited by the head or a driver from the shell that starts them."""


def slice_names(plan: SlicePlan, count: int, prefix: str = "raytpu-local") -> list[str]:
    """Names of ``count`` emulated slices of ``plan`` (the ``TPU_NAME`` GKE would give each)."""
    return [f"{prefix}-{plan.ray_pod_type}-{i}" for i in range(count)]


def host_env(plan: SlicePlan, slice_name: str, worker_id: int) -> dict[str, str]:
    """What the GKE TPU webhook and the KubeRay worker group put in one TPU host's environment, plus the chips as JAX
    CPU devices (``JAX_PLATFORMS=cpu``, ``JAX_NUM_CPU_DEVICES=chips_per_host``) and ``RAYTPU_EMULATED=1``."""
    env = {
        "TPU_NAME": slice_name,
        "TPU_WORKER_ID": str(worker_id),
        "TPU_ACCELERATOR_TYPE": plan.gke_accelerator_type,
        "TPU_TOPOLOGY": plan.topology,
        "JAX_PLATFORMS": "cpu",
        "JAX_NUM_CPU_DEVICES": str(plan.chips_per_host),
        ENV_EMULATED: "1",
    }
    if not plan.single_host:
        env["TPU_WORKER_HOSTNAMES"] = ",".join(f"{slice_name}-w{i}" for i in range(plan.hosts))
    return env
