"""Every slice of the catalog checked against a model's need: fit, Ray, the kit's serving rules, price. Whether one is
servable is decided by :mod:`raytpu.core.specs.serving.vllm_rules`, not restated here: ``plan`` and ``validate`` give
one verdict."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from raytpu.core.specs.serving import vllm_rules
from raytpu.core.tpu.catalog import GENERATIONS
from raytpu.core.tpu.models import ModelShape
from raytpu.core.tpu.plan import SlicePlan, plan_slice
from raytpu.sizing.memory import GIB, Need
from raytpu.sizing.prices import KINDS, PriceTable, per_million_tokens


@dataclass(frozen=True)
class Candidate:
    """One slice and how the model sits on it."""

    plan: SlicePlan
    jax_devices: int
    need: Need
    headroom: float
    servable: bool | None
    servable_note: str
    engine_kwargs: dict[str, int]
    price_per_hour: dict[str, float | None]
    usd_per_million_tokens: dict[str, float | None]

    @property
    def hbm_bytes(self) -> float:
        """HBM of the whole slice."""
        return self.plan.chips * self.plan.hbm_gib_per_chip * GIB

    @property
    def usable_bytes(self) -> float:
        """HBM the model may use: the slice's, less the headroom kept free."""
        return self.hbm_bytes * (1 - self.headroom)

    @property
    def fits(self) -> bool:
        """The need fits in the usable HBM."""
        return self.need.total <= self.usable_bytes

    @property
    def free_fraction(self) -> float:
        """The fraction of the slice's HBM left free by the need (negative: it does not fit at all)."""
        return 1 - self.need.total / self.hbm_bytes

    @property
    def usable(self) -> bool:
        """Fits, Ray reserves it, and (serving) the kit serves the model on it."""
        return self.fits and self.plan.ray_reservable and self.servable is not False

    def to_json(self) -> dict[str, Any]:
        """The candidate's row in ``raytpu plan --json``."""
        return {"generation": self.plan.generation, "topology": self.plan.topology, "chips": self.plan.chips,
                "hosts": self.plan.hosts, "machine_type": self.plan.machine_type, "jax_devices": self.jax_devices,
                "hbm_gib": round(self.hbm_bytes / GIB, 3), "need_gib": round(self.need.total / GIB, 3),
                "free_gib": round((self.hbm_bytes - self.need.total) / GIB, 3),
                "free_fraction": round(self.free_fraction, 4), "fits": self.fits,
                "ray_reservable": self.plan.ray_reservable, "servable": self.servable,
                "servable_note": self.servable_note, "engine_kwargs": self.engine_kwargs,
                "usable": self.usable, "price_per_hour": self.price_per_hour,
                "usd_per_million_tokens": self.usd_per_million_tokens}


@dataclass(frozen=True)
class Layout:
    """How the kit would serve a model on a slice: servable (None: heads unknown), the TP size (the KV cache's split), a
    note (``TP 4 x PP 8``, or why not), the ``engine_kwargs`` choosing it (``{}``: the default)."""

    servable: bool | None
    tensor_parallel: int
    note: str
    engine_kwargs: dict[str, int] = field(default_factory=dict)


def layout(plan: SlicePlan, shape: ModelShape | None) -> Layout:
    """The serving layout by the rules ``raytpu validate`` runs: TP over every JAX device first, then one pipeline stage
    per host; None for a model known only by ``--params`` (no heads to check)."""
    devices = vllm_rules.jax_devices(plan)
    problems = vllm_rules.slice_problems(plan)
    if problems:
        return Layout(False, devices, problems[0].problem)
    if shape is None:
        return Layout(None, devices, "heads unknown (--params): vLLM checks them when the engine starts")
    name = shape.hf_id or shape.name
    if not vllm_rules.engine_kwargs_problems({}, plan, model=name, shape=shape):
        return Layout(True, devices, f"TP {devices}")
    if plan.hosts > 1:
        staged = {"pipeline_parallel_size": plan.hosts}
        if not vllm_rules.engine_kwargs_problems(staged, plan, model=name, shape=shape):
            return Layout(True, devices // plan.hosts, f"TP {devices // plan.hosts} x PP {plan.hosts}", staged)
    return Layout(False, devices, f"TP {devices} does not divide {shape.heads} attention heads"
                  + (f", nor TP {devices // plan.hosts} x PP {plan.hosts} stages of {shape.layers} layers"
                     if plan.hosts > 1 else ""))


def candidates(shape: ModelShape | None, mode: str, need_for: Callable[[int], Need], headroom: float,
               prices: PriceTable, tokens_per_s: float | None = None) -> list[Candidate]:
    """Every (generation, topology) of the catalog with the need on it; ``need_for(tp)`` computes the need for a
    tensor-parallel size (the KV cache depends on it when serving)."""
    found = []
    for gen in GENERATIONS.values():
        for topology in gen.topologies:
            plan = plan_slice(gen.name, topology)
            served = layout(plan, shape) if mode == "serve" else Layout(None, 1, "")
            need = need_for(served.tensor_parallel)
            per_hour = {k: (None if (p := prices.chip_hour(gen.name, k)) is None else round(p * plan.chips, 4))
                        for k in KINDS}
            per_tokens = {k: (None if (v := per_million_tokens(per_hour[k], tokens_per_s)) is None else round(v, 4))
                          for k in KINDS}
            found.append(Candidate(plan, vllm_rules.jax_devices(plan), need, headroom, served.servable, served.note,
                                   served.engine_kwargs, per_hour, per_tokens))
    return found


def minimal_fits(found: list[Candidate]) -> dict[str, Candidate]:
    """Per generation, the smallest usable slice (fits, Ray reserves it, servable when serving)."""
    best: dict[str, Candidate] = {}
    for cand in found:
        gen = cand.plan.generation
        if cand.usable and (gen not in best or cand.plan.chips < best[gen].plan.chips):
            best[gen] = cand
    return best


def cheapest(found: list[Candidate], kind: str = "on_demand") -> Candidate | None:
    """The usable slice with the lowest ``kind`` price per hour (None: no usable slice has one)."""
    priced = [c for c in found if c.usable and c.price_per_hour[kind] is not None]
    return min(priced, key=lambda c: (c.price_per_hour[kind], c.plan.chips), default=None)
