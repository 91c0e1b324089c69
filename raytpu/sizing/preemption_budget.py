"""A preemption budget for ``raytpu plan --mode train``: does a just-in-time checkpoint fit the notice window?

The checkpoint (weights and optimizer state) is written by every host at once in ``bytes / (rate x hosts)`` seconds,
within the drain Ray gets (:data:`raytpu.core.preemption.DRAIN_S`). When it does not fit, checkpointing every
``write_s / CHECKPOINT_SHARE`` s bounds the loss. Source: docs/FACTS.md 25.13 and section 18."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from raytpu.core import preemption
from raytpu.core.plan import SlicePlan
from raytpu.sizing.memory import GIB, Need

ASSUMED_WRITE_GB_S = 1.0
"""GCS write throughput per TPU host, decimal GB/s: an ASSUMPTION (neither measured nor published for a TPU host), an
order below the hosts' links; ``--write-gb-s`` states a measured rate."""
WRITE_GB_S_RANGE = (0.001, 1000.0)
CHECKPOINT_SHARE = 0.05
"""The share of a run's time periodic checkpoints may take (a chosen bound, not a measurement)."""
CHECKPOINTED = ("weights", "optimizer")
"""The terms of :class:`Need` a checkpoint holds."""


@dataclass(frozen=True)
class Budget:
    """A model's checkpoint (``checkpoint_bytes``: weights + optimizer state) against the notice window (``window_s``:
    seconds Ray has to write it), at ``write_gb_s`` per host (``assumed``: :data:`ASSUMED_WRITE_GB_S`, not given)."""

    checkpoint_bytes: float
    write_gb_s: float
    assumed: bool
    window_s: float = preemption.DRAIN_S

    def write_s(self, hosts: int) -> float:
        """Seconds a slice of ``hosts`` hosts takes to write the checkpoint, every host its shard."""
        return self.checkpoint_bytes / (self.write_gb_s * 1e9 * hosts)

    def for_slice(self, plan: SlicePlan) -> dict[str, Any]:
        """The budget of one slice: write time, whether it fits the window, and else the periodic interval."""
        write = self.write_s(plan.hosts)
        fits = write <= self.window_s
        interval = None if fits else math.ceil(write / CHECKPOINT_SHARE)
        return {"generation": plan.generation, "topology": plan.topology, "hosts": plan.hosts,
                "write_s": round(write, 2), "fits_notice": fits, "interval_s": interval,
                "max_loss_s": None if interval is None else math.ceil(interval + write)}

    def to_json(self, plans: list[SlicePlan]) -> dict[str, Any]:
        """The ``preemption`` section of ``raytpu plan --json``."""
        return {"checkpoint_gib": round(self.checkpoint_bytes / GIB, 3), "checkpoint_terms": list(CHECKPOINTED),
                "write_gb_s_per_host": self.write_gb_s, "write_rate": "assumed" if self.assumed else "given",
                "notice_window_s": self.window_s, "notice_s": preemption.NOTICE_S,
                "pod_grace_s": preemption.POD_GRACE_S, "checkpoint_share": CHECKPOINT_SHARE,
                "interval_formula": "interval_s = write_s / checkpoint_share; max_loss_s = interval_s + write_s",
                "slices": [self.for_slice(p) for p in plans]}

    def lines(self, plans: list[SlicePlan]) -> list[str]:
        """The text summary: the checkpoint, the rate, the window, then one line per slice in ``plans``."""
        rate = (f"an assumed {self.write_gb_s:g} GB/s per host (not measured; --write-gb-s sets yours)"
                if self.assumed else f"{self.write_gb_s:g} GB/s per host (--write-gb-s)")
        out = [f"preemption: a just-in-time checkpoint (weights + optimizer state) is "
               f"{self.checkpoint_bytes / GIB:,.1f} GiB, written to GCS at {rate}, every host its shard; window "
               f"{self.window_s:g} s (GKE's {preemption.POD_GRACE_S} s pod share of the {preemption.NOTICE_S} s "
               f"notice, less {preemption.TEARDOWN_S} s for Ray's stop)"]
        for plan in plans:
            got = self.for_slice(plan)
            hosts = f"{plan.hosts} host{'s' if plan.hosts > 1 else ''}"
            head = f"  {plan.generation} {plan.topology} ({hosts}): {got['write_s']:g} s"
            out.append(f"{head}: fits the notice" if got["fits_notice"] else
                       f"{head}: does not fit; checkpoint every {got['interval_s']} s (write time / "
                       f"{CHECKPOINT_SHARE:g}), losing at most {got['max_loss_s']} s")
        return out


def budget(need: Need, write_gb_s: float | None) -> Budget:
    """The budget of a training ``need`` at ``write_gb_s`` (None: :data:`ASSUMED_WRITE_GB_S`)."""
    size = sum(need.terms.get(term, 0.0) for term in CHECKPOINTED)
    return Budget(size, ASSUMED_WRITE_GB_S if write_gb_s is None else write_gb_s, write_gb_s is None)
