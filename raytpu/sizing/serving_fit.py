"""Whether a serving workload's model fits its slice: ``raytpu validate``'s warning, sized as ``raytpu plan`` sizes it
(:mod:`raytpu.sizing.memory`)."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from raytpu.core.specs.spec import WorkloadSpec


def fit_warnings(work: WorkloadSpec) -> list[str]:
    """A serving workload whose model cannot fit its slice (weights + KV cache for one sequence of its
    ``max_model_len``, bf16, 10% headroom: :mod:`raytpu.sizing.memory`); only models of ``raytpu plan``'s built-in
    table are known here, so another model gets a note saying it was not checked. A warning, not an error: a
    quantized checkpoint may fit where the estimate says no."""
    from raytpu.core.specs.serving import vllm_rules
    from raytpu.core.tpu import models
    from raytpu.sizing import candidates, memory

    if not work.runs_vllm:
        return []
    name, plan = work.name, work.plan
    source = vllm_rules.sized_model(work.model, work.model_source)
    shape = models.by_hf_id(source)
    if shape is None:
        return [f"workloads.{name}: model {source!r} is not in `raytpu plan`'s built-in table, so its fit on "
                f"{plan.generation} {plan.topology} was not checked (run `raytpu plan --model-config config.json`), "
                "nor the room its weights need on each host's disk (slices[].disk_size_gib; "
                "`raytpu plan --model-config config.json --mode serve` prints the disk that holds them)"]
    context = work.max_model_len or vllm_rules.DEFAULT_MAX_MODEL_LEN
    need = memory.serve_need(shape.params(), shape, dtype="bf16", kv_dtype="bf16", context=context, batch=1,
                             tensor_parallel=candidates.layout(plan, shape).tensor_parallel)
    usable = plan.chips * plan.hbm_gib_per_chip * memory.GIB * (1 - memory.DEFAULT_HEADROOM)
    if need.total <= usable:
        return []
    return [f"workloads.{name}: {shape.name} needs {need.total / memory.GIB:,.1f} GiB in bf16 (weights + KV cache "
            f"for one {context}-token sequence), more than the {usable / memory.GIB:,.1f} GiB usable on "
            f"{plan.generation} {plan.topology} ({plan.chips} x {plan.hbm_gib_per_chip:g} GiB, 10% kept free); "
            f"`raytpu plan --model {shape.name}` lists the slices that fit"]
