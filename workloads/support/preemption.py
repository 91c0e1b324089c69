"""Training that checkpoints at the preemption notice: what :mod:`raytpu.workloads.train` adds for spot and flex-start
slices. At the notice every rank writes a just-in-time checkpoint and stops stepping; Ray Train restarts on a whole
slice and charges ``max_preemption_failures``, not ``max_failures``.

Source: Ray 2.60 ``ray.train.v2._internal.execution.preemption.PreemptionWatcher``; the chain:
docs/FACTS.md#preemption-workloads. Standard library at import (Ray inside the functions): the emulated-slice drill
reads :func:`read_progress`.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from collections.abc import Callable
from typing import Any

from raytpu.core.manifests.preemption import MAX_PREEMPTIONS

PREEMPTION_POLL_ENV = "RAY_TRAIN_PREEMPTION_POLL_INTERVAL_S"
PREEMPTION_POLL_S = 1.0
"""How often Ray Train looks for draining nodes in the kit's runs: Ray 2.60's default of 5 s
(``ray.train.v2._internal.constants.DEFAULT_PREEMPTION_POLL_INTERVAL_S``) spends a sixth of a 30 s notice unseen."""

UNKNOWN_DEADLINE_S = 120.0
"""The controller's wait when a drain reports no deadline: Ray 2.60 ``DEFAULT_PREEMPTION_DEADLINE_S``."""
RECLAIM_MARGIN_S = 60.0
"""How long past the controller's own deadline a worker that checkpointed at the notice waits to be stopped before
it gives up and fails (a restart from the same checkpoint)."""


def add_preemption_arguments(parser: argparse.ArgumentParser) -> None:
    """The train program's preemption flags."""
    parser.add_argument("--max-preemption-failures", type=int, default=MAX_PREEMPTIONS,
                        help="preemptions to resume from, apart from --max-failures (-1: no limit)")
    parser.add_argument("--preemption-grace-s", type=float, default=0.0,
                        help="how long the workers may run past the drain deadline to finish a checkpoint")
    parser.add_argument("--progress-file", default=None,
                        help="rank 0 appends every finished step here as a JSON line (drills: steps lost)")


def failure_config(args: argparse.Namespace, *, relax_collectives: bool = True) -> Any:
    """The run's FailureConfig: worker failures, slice retries and preemptions, each with its own budget.

    ``relax_collectives_on_preemption`` lets the ranks off a preempted slice commit the checkpoint without it in a
    multi-slice run; Ray ignores it when rank 0 is preempted (``TrainController._relax_collectives_during_
    preemption``), as on a single slice, where every rank is. Only the kit's own trainer sets it (its checkpoint is
    rank 0's alone): a team's loop may shard its checkpoint per rank, and the narrowed gate would register as latest
    a checkpoint missing the preempted slice's shards (``relax_collectives=False``, issue 49).
    Source: Ray 2.60 ``TrainController._relax_collectives_during_preemption`` (``ReportCallbackHandler.
    set_required_ranks(surviving)``)."""
    from ray.train.v2.api.config import FailureConfig

    return FailureConfig(max_failures=args.max_failures, controller_failure_limit=args.slice_retries,
                         max_preemption_failures=args.max_preemption_failures,
                         relax_collectives_on_preemption=relax_collectives, preemption_grace_s=args.preemption_grace_s)


def preemption_notice(step: int) -> dict[str, Any] | None:
    """The notice as the run records it, or None while no node of the run is draining. A collective (Ray 2.60
    ``ray.train.get_preemption_info`` broadcasts rank 0's view): every rank calls it after every step."""
    import ray.train

    info = ray.train.get_preemption_info()
    if info is None:
        return None
    return {"step": step, "seen_wall": round(time.time(), 3), "deadline_ms": info.deadline_ms,
            "preempted_ranks": list(info.preempted_ranks), "nodes": list(info.preempted_node_ids)}


def wait_for_reclaim(notice: dict[str, Any], grace_s: float) -> None:
    """After the checkpoint at the notice: no more steps (each would be lost), until Ray Train stops the workers
    for the restart; past the controller's deadline plus :data:`RECLAIM_MARGIN_S`, a failure instead (the run
    restarts from the same checkpoint, charged to ``max_failures``)."""
    deadline_s = (notice["deadline_ms"] / 1000 if notice.get("deadline_ms")
                  else notice["seen_wall"] + UNKNOWN_DEADLINE_S)
    give_up = deadline_s + grace_s + RECLAIM_MARGIN_S
    while time.time() < give_up:
        time.sleep(0.5)
    raise RuntimeError(f"checkpointed at the preemption notice (step {notice['step']}) but not stopped by "
                       f"{give_up - notice['seen_wall']:.0f}s after it")


def checkpoint_at_notice(step: int, save: Callable[[], Any], grace_s: float = 0.0) -> None:
    """A team's ``train_loop`` may call this after every step, on every rank (optional; it is a collective): when a
    node of the run is draining for a preemption, ``save()`` (which reports a checkpoint with ``ray.train.report``)
    runs at once and the worker then waits for Ray Train to stop it, as a step after the notice would be lost.
    Returns at once while no notice is out."""
    notice = preemption_notice(step)
    if notice is None:
        return
    save()
    wait_for_reclaim(notice, grace_s)


def record_progress(config: dict[str, Any], rank: int, step: int, restarts: int) -> None:
    """Rank 0 appends ``step`` (finished by every rank: the step all-reduces) to ``--progress-file``, if given."""
    path = config.get("progress_file")
    if rank != 0 or not path:
        return
    line = json.dumps({"step": step, "wall": round(time.time(), 3), "restarts": restarts,
                       "launch": config.get("launch")})
    with open(path, "a", encoding="utf-8") as f:  # one short line per write: O_APPEND keeps lines whole
        f.write(line + "\n")


def read_progress(path: str | os.PathLike[str]) -> list[dict[str, Any]]:
    """The steps :func:`record_progress` wrote, in order (a torn last line skipped)."""
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except FileNotFoundError:
        return []
    found = []
    for line in text.splitlines():
        try:
            found.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    return found
