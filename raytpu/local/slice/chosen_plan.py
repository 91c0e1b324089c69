"""Which slice ``raytpu local up`` emulates: an accelerator type or a generation and topology given on the command
line, else a slice of the config (the local commands' default: :func:`raytpu.config.choose`)."""

from __future__ import annotations

from pathlib import Path

from raytpu.core.common import errors
from raytpu.core.tpu.catalog import from_accelerator_type
from raytpu.core.tpu.plan import SlicePlan, plan_slice

MAX_START_S = 24 * 3600.0
"""The longest ``up --timeout-s``: a start that needs a day is not a start."""


def emulated_plan(generation: str | None, topology: str | None, machine_type: str | None, config: str | None,
                  slice_name: str | None) -> SlicePlan:
    """The SlicePlan to emulate: ``--generation/--topology`` (or ``--generation v6e-16`` alone), else slice
    ``slice_name`` of the config (default: its train workload's slice, else its first)."""
    from raytpu.config import choose, load
    from raytpu.local.slice.from_config import config_slice_plan

    named = from_accelerator_type(generation, "--generation") if generation and not topology else None
    if named is not None:  # --generation v6e-16: an accelerator type names both
        return plan_slice(*named, machine_type)
    if generation or topology:
        if not (generation and topology):
            raise errors.missing("topology" if generation else "generation", "with the other",
                                 "both --generation and --topology, or neither (use the config's slice)")
        return plan_slice(generation, topology, machine_type)
    path = choose(config, local=True)
    if not Path(path).exists():
        raise errors.invalid_value("config", path, "does not exist",
                                   "a raytpu.yaml path, or --generation and --topology")
    return config_slice_plan(load(path), slice_name)


def start_timeout_problems(timeout_s: float | None) -> list[errors.InvalidInput]:
    """``up --timeout-s``: seconds in (0, :data:`MAX_START_S`] (nan refused too), or none (the default bound)."""
    if timeout_s is None or 0 < timeout_s <= MAX_START_S:
        return []
    return [errors.invalid_value("--timeout-s", timeout_s, "is not a bound on the start",
                                 f"seconds in (0, {MAX_START_S:g}], or no --timeout-s (60 s plus 60 s per node)")]
