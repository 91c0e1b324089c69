"""``workloads[].keep_checkpoints``: how many of a training run's newest checkpoints stay in the bucket.

Ray keeps every checkpoint unless told (``CheckpointConfig.num_to_keep=None``); the kit keeps the newest
:data:`DEFAULT_KEEP` unless the workload says otherwise, and ``validate`` says which. Standard library only.
Source: Ray 2.60 ``ray.train.v2.api.config.CheckpointConfig`` (``num_to_keep: Optional[int] = None``, "all are kept";
a value below 1 raises ValueError).
"""

from __future__ import annotations

from raytpu.core.common import errors
from raytpu.core.common.errors import InvalidInput
from raytpu.core.specs import workload_fields
from raytpu.core.specs.kinds import WorkloadKind

FIELD = "keep_checkpoints"
DEFAULT_KEEP = 2
"""The newest two: the latest, and the one before it in case the latest was cut short."""
KEEP_ALL = "all"
"""``keep_checkpoints: all``: Ray's own default, every checkpoint stays."""
MAX_KEEP = 10_000
CHECKPOINTING_KINDS = workload_fields.taking(FIELD)
"""Kinds whose run the kit checkpoints through Ray Train (the kit's trainer and a team's ``train_loop``)."""
VALID = f"a whole number from 1 to {MAX_KEEP:,} (the newest kept; default {DEFAULT_KEEP}), or {KEEP_ALL}"


def problems(of: WorkloadKind, value: object) -> list[InvalidInput]:
    """``keep_checkpoints`` only where the kit checkpoints, and a count Ray takes (or ``all``)."""
    if value is None:
        return []
    if not workload_fields.takes(of.name, FIELD):
        return [workload_fields.refusal(FIELD, value, of.name)]
    if value == KEEP_ALL:
        return []
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_KEEP:
        return [errors.invalid_value(FIELD, value, "is not a number of checkpoints", VALID)]
    return []


def kept(value: int | str | None) -> int | None:
    """Ray's ``num_to_keep`` for a workload's ``keep_checkpoints`` (None: all)."""
    if value == KEEP_ALL:
        return None
    return DEFAULT_KEEP if value is None else int(value)


def described(value: int | str | None) -> str:
    """What ``validate`` says: how many checkpoints the run keeps, and whether it is the default."""
    count = kept(value)
    if count is None:
        return "keeps every checkpoint (keep_checkpoints: all)"
    return f"keeps the newest {count} checkpoint{'s' if count != 1 else ''}" + (
        " (default; keep_checkpoints sets it)" if value is None else " (keep_checkpoints)")
