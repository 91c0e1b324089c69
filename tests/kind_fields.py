"""What a workload of each kind needs besides its name, kind and slice, for the tests' kind matrices: ``batch`` reads
an input and writes an output, and runs on one host only (raytpu/core/specs/runtime/data.py: multi-host is refused at
validate); ``job`` runs its entrypoint."""

from __future__ import annotations

from typing import Any

from raytpu.core.tpu.plan import SlicePlan

BATCH_IO = {"input": "gs://my-bucket/prompts.jsonl", "output": "gs://my-bucket/results"}
JOB_ENTRYPOINT = {"entrypoint": "ray status"}
"""A ``job`` needs its team's driver; one that needs no code folder (the kit's image has Ray's CLI)."""


def fields(kind: str) -> dict[str, Any]:
    """The fields a ``kind`` workload requires (beyond a model, which the serving kinds' tests name themselves)."""
    return dict(BATCH_IO) if kind == "batch" else dict(JOB_ENTRYPOINT) if kind == "job" else {}


def runs_on(kind: str, plan: SlicePlan) -> bool:
    """Whether a ``kind`` workload is valid on a slice of ``plan`` as far as the kind's own shape rule goes."""
    return kind != "batch" or plan.single_host
