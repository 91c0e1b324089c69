"""What one smoke run is told: its waits and thresholds (the CLI's flags, :mod:`raytpu.workloads.smoke.cli`).

Library code (:func:`raytpu.workloads.smoke.driver.check_slice`, :func:`raytpu.workloads.smoke.judge.judge`) takes
these typed options; only the CLI module knows argparse.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from raytpu.workloads.support.slices import RESERVE_TIMEOUT_S

PerfThresholds = Literal["auto", "on", "off"]
"""``auto``: the catalog floors gate on real TPU only (informational on an emulated slice); ``on``/``off``: always,
never."""

MIN_HBM_RATIO = 0.85
"""On real TPU: device-reported memory per chip over catalog HBM (allocator limits sit below the total)."""
MIN_PEER_RATIO = 0.5
"""Every device must reach half its slice's median matmul and copy rate. On TPU the devices of a slice are
identical, so one at half its peers' rate is broken; on an emulated slice the hosts share the CPU, so they are
measured one at a time and each device keeps its best of five rounds."""


@dataclass(frozen=True)
class SmokeOptions:
    """One run's options; None thresholds mean the generation's floor (:class:`raytpu.core.tpu.catalog.SmokeFloors`).

    The ``min_*`` ratios are the floors of the checks they name (docs/FACTS.md#measurements-smoke-checks);
    ``slice_name`` None checks every slice; ``check_timeout_s`` None grows with the hosts
    (:func:`raytpu.workloads.smoke.driver.check_limit_s`); ``bandwidth_mib`` None is 256 per device on TPU, 1 on CPU;
    ``address`` None is ``RAY_ADDRESS``, else auto; ``dcn_slices`` above 1 gives the first that many slices the DCN
    check (:mod:`raytpu.workloads.smoke.dcn`).
    """

    slice_name: str | None = None
    reserve_timeout_s: float = RESERVE_TIMEOUT_S
    check_timeout_s: float | None = None
    bandwidth_mib: int | None = None
    perf_thresholds: PerfThresholds = "auto"
    min_matmul_ratio: float | None = None
    min_hbm_bw_ratio: float | None = None
    min_busbw_ratio: float | None = None
    min_peer_ratio: float = MIN_PEER_RATIO
    min_hbm_ratio: float = MIN_HBM_RATIO
    address: str | None = None
    dcn_slices: int | None = None
