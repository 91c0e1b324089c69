"""A preemption budget for ``raytpu plan --mode train``: does a just-in-time checkpoint fit the notice window?

A checkpoint (weights and optimizer state) is written by every host its shard (``--checkpoint-writers all``) or by
one host whole (``one``: the kit's own trainer), within Ray's drain for the slice's notice
(:func:`raytpu.core.manifests.preemption.drain_s`) less the poll, the step in flight and the report barrier. When it
does not fit, checkpointing every ``write_s / CHECKPOINT_SHARE`` s bounds the loss. Source:
docs/FACTS.md#preemption-budget-arithmetic, docs/FACTS.md#preemption-notice-window and
docs/FACTS.md#preemption-notice-budget."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from raytpu.core.common import errors
from raytpu.core.common.errors import InvalidInput
from raytpu.core.manifests import preemption
from raytpu.core.specs.slices import notice
from raytpu.core.tpu.plan import SlicePlan
from raytpu.sizing.memory import GIB, Need

ASSUMED_WRITE_GB_S = 1.0
"""GCS write throughput per TPU host, decimal GB/s: an ASSUMPTION (neither measured nor published for a TPU host), an
order below the hosts' links; ``--write-gb-s`` states a measured rate."""
WRITE_GB_S_RANGE = (0.001, 1000.0)
POLL_S = 1.0
"""Ray Train's poll for draining nodes in the kit's runs (``RAY_TRAIN_PREEMPTION_POLL_INTERVAL_S``): a notice is seen
up to this late. Source: ``raytpu.workloads.support.preemption.PREEMPTION_POLL_S`` (Ray 2.60's default is 5 s)."""
ASSUMED_STEP_S = 1.0
"""One training step: an ASSUMPTION (a step runs to its end before the loop asks for the notice); ``--step-s`` states
your measured step."""
REPORT_BARRIER_S = 1.0
"""``ray.train.report``'s barrier before the upload (every rank agrees on the checkpoint's folder through Ray Train's
SynchronizationActor): an ASSUMPTION, not measured. Source: Ray 2.60 ``TrainContext.report``
(``_sync_checkpoint_dir_name_across_ranks``, then ``_upload_checkpoint`` in ``CheckpointUploadMode.SYNC``)."""
STEP_S_RANGE = (0.001, 3600.0)
WRITERS = ("all", "one")
"""``--checkpoint-writers``: every host its shard, or one host (rank 0) the whole checkpoint."""
CHECKPOINT_SHARE = 0.05
"""The share of a run's time periodic checkpoints may take (a chosen bound, not a measurement)."""
CHECKPOINTED = ("weights", "optimizer")
"""The terms of :class:`Need` a checkpoint holds."""


@dataclass(frozen=True)
class Budget:
    """A model's checkpoint (``checkpoint_bytes``) against the notice window (``notice_s``) at ``write_gb_s`` per
    host, with ``step_s`` in flight, written by ``writers`` (``all`` or ``one``); ``assumed``/``step_assumed``: not
    given, the module's assumptions."""

    checkpoint_bytes: float
    write_gb_s: float
    assumed: bool
    notice_s: int = notice.NOTICE_S
    step_s: float = ASSUMED_STEP_S
    step_assumed: bool = True
    writers: str = "all"

    @property
    def drain_s(self) -> int:
        """Ray's drain in the window (the pods' grace less Ray's own stop)."""
        return preemption.drain_s(self.notice_s)

    @property
    def window_s(self) -> float:
        """Seconds left for the write: the drain less the poll, the step in flight and the report's barrier."""
        return self.drain_s - POLL_S - self.step_s - REPORT_BARRIER_S

    def host_bytes(self, hosts: int) -> float:
        """What the busiest host writes: its shard, or the whole checkpoint when one host writes it."""
        return self.checkpoint_bytes / (hosts if self.writers == "all" else 1)

    def write_s(self, hosts: int) -> float:
        """Seconds a slice of ``hosts`` hosts takes to write the checkpoint (the busiest host's share)."""
        return self.host_bytes(hosts) / (self.write_gb_s * 1e9)

    def for_slice(self, plan: SlicePlan) -> dict[str, Any]:
        """The budget of one slice: write time, whether it fits the window, and else the periodic interval."""
        write = self.write_s(plan.hosts)
        fits = write <= self.window_s
        interval = None if fits else math.ceil(write / CHECKPOINT_SHARE)
        return {"generation": plan.generation, "topology": plan.topology, "hosts": plan.hosts,
                "host_write_gib": round(self.host_bytes(plan.hosts) / GIB, 3),
                "write_s": round(write, 2), "fits_notice": fits, "interval_s": interval,
                "max_loss_s": None if interval is None else math.ceil(interval + write)}

    def to_json(self, plans: list[SlicePlan]) -> dict[str, Any]:
        """The ``preemption`` section of ``raytpu plan --json``."""
        return {"checkpoint_gib": round(self.checkpoint_bytes / GIB, 3), "checkpoint_terms": list(CHECKPOINTED),
                "write_gb_s_per_host": self.write_gb_s, "write_rate": "assumed" if self.assumed else "given",
                "checkpoint_writers": self.writers,
                "notice_window_s": self.drain_s, "notice_s": self.notice_s,
                "pod_grace_s": preemption.pod_grace_s(self.notice_s), "poll_s": POLL_S, "step_s": self.step_s,
                "step": "assumed" if self.step_assumed else "given", "report_barrier_s": REPORT_BARRIER_S,
                "write_window_s": round(self.window_s, 3), "checkpoint_share": CHECKPOINT_SHARE,
                "window_formula": "write_window_s = notice_window_s - poll_s - step_s - report_barrier_s",
                "interval_formula": "interval_s = write_s / checkpoint_share; max_loss_s = interval_s + write_s",
                "slices": [self.for_slice(p) for p in plans]}

    def lines(self, plans: list[SlicePlan]) -> list[str]:
        """The text summary: the checkpoint, the rate, the window, then one line per slice in ``plans``."""
        rate = (f"an assumed {self.write_gb_s:g} GB/s per host (not measured; --write-gb-s sets yours)"
                if self.assumed else f"{self.write_gb_s:g} GB/s per host (--write-gb-s)")
        who = "every host its shard" if self.writers == "all" else "one host all of it (--checkpoint-writers one)"
        step = (f"an assumed {self.step_s:g} s step in flight (--step-s sets yours)" if self.step_assumed
                else f"the {self.step_s:g} s step in flight (--step-s)")
        out = [f"preemption: a just-in-time checkpoint (weights + optimizer state) is "
               f"{self.checkpoint_bytes / GIB:,.1f} GiB, written to GCS at {rate}, {who}; window "
               f"{self.drain_s:g} s (GKE's {preemption.pod_grace_s(self.notice_s)} s pod share of the "
               f"{self.notice_s} s notice, less {preemption.TEARDOWN_S} s for Ray's stop) less the {POLL_S:g} s "
               f"poll, {step} and an assumed {REPORT_BARRIER_S:g} s report barrier = {self.window_s:g} s to write"]
        for plan in plans:
            got = self.for_slice(plan)
            hosts = f"{plan.hosts} host{'s' if plan.hosts > 1 else ''}"
            head = (f"  {plan.generation} {plan.topology} ({hosts}, {got['host_write_gib']:g} GiB per writer): "
                    f"{got['write_s']:g} s")
            out.append(f"{head}: fits the notice" if got["fits_notice"] else
                       f"{head}: does not fit; checkpoint every {got['interval_s']} s (write time / "
                       f"{CHECKPOINT_SHARE:g}), losing at most {got['max_loss_s']} s")
        return out


def budget(need: Need, write_gb_s: float | None, notice_s: int = notice.NOTICE_S, step_s: float | None = None,
           writers: str = "all") -> Budget:
    """The budget of a training ``need`` at ``write_gb_s`` (None: :data:`ASSUMED_WRITE_GB_S`) in a ``notice_s``
    window, with a ``step_s`` step in flight (None: :data:`ASSUMED_STEP_S`), written by ``writers``."""
    size = sum(need.terms.get(term, 0.0) for term in CHECKPOINTED)
    return Budget(size, ASSUMED_WRITE_GB_S if write_gb_s is None else write_gb_s, write_gb_s is None,
                  notice_s, ASSUMED_STEP_S if step_s is None else step_s, step_s is None, writers)


def flag_problems(mode: str, write_gb_s: float | None, notice_s: int | None, step_s: float | None,
                  writers: str | None) -> list[InvalidInput]:
    """``raytpu plan``'s budget flags, in the order they are read: each train only (``mode``), each within its range
    (``--write-gb-s`` :data:`WRITE_GB_S_RANGE`, ``--notice-s`` GKE's windows, ``--step-s`` :data:`STEP_S_RANGE`,
    ``--checkpoint-writers`` :data:`WRITERS`)."""
    found = []
    if write_gb_s is not None:
        if mode != "train":
            found.append(errors.forbidden("--write-gb-s", write_gb_s, "with --mode serve", "--mode train"))
        elif not WRITE_GB_S_RANGE[0] <= write_gb_s <= WRITE_GB_S_RANGE[1]:
            found.append(errors.invalid_value("--write-gb-s", write_gb_s, "is out of range",
                                              f"a rate in [{WRITE_GB_S_RANGE[0]:g}, {WRITE_GB_S_RANGE[1]:g}] GB/s per "
                                              "host"))
    found += [errors.forbidden(flag, given, "with --mode serve", "--mode train")
              for flag, given in (("--notice-s", notice_s), ("--step-s", step_s), ("--checkpoint-writers", writers))
              if given is not None and mode != "train"]
    if notice_s is not None and notice_s not in notice.NOTICE_CHOICES:
        found.append(errors.invalid_choice("--notice-s", notice_s, notice.NOTICE_CHOICES,
                                           " (GKE's node shutdown window takes 30 or 120 seconds)"))
    if step_s is not None and not STEP_S_RANGE[0] <= step_s <= STEP_S_RANGE[1]:
        found.append(errors.invalid_value("--step-s", step_s, "is out of range",
                                          f"seconds in [{STEP_S_RANGE[0]:g}, {STEP_S_RANGE[1]:g}]"))
    if writers is not None and writers not in WRITERS:
        found.append(errors.invalid_choice("--checkpoint-writers", writers, WRITERS))
    return found
