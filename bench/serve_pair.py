"""Paired windows for ``bench/serve.py`` (issue 40 item 13): both servers up, blocks of their batches alternating over
one span, so a change in the shared machine's load falls on both arms of a pair. Pure: no clock, no server."""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field
from typing import Any

ARMS = ("vllm", "ray")
METRICS = (("ttft_p50", "ttft_p50_s"), ("ttft_p95", "ttft_p95_s"), ("output_tokens_per_s", "output_tokens_per_s"))
"""(ratio key, figure key): what each Ray/vLLM ratio divides."""
SETTLE_ON = ("ttft_p50", "output_tokens_per_s")
"""The ratios that must agree before a level stops; p95 of a window's few streams is near its maximum, reported only."""


def pct(values: list[float], q: float) -> float:
    """The ``q`` quantile of ``values`` (nearest rank)."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))]


@dataclass(frozen=True)
class Window:
    """Each arm of a pair: at least ``min_batches`` batches, ``min_s`` busy seconds and ``min_tokens`` tokens."""

    max_tokens: int
    min_batches: int = 3
    min_s: float = 30.0
    min_tokens: int = 1024

    def full(self, batches: int, busy_s: float, tokens: int) -> bool:
        return batches >= self.min_batches and busy_s >= self.min_s and tokens >= self.min_tokens


@dataclass
class Arm:
    """One arm's share of a pair, and the other (idle) server's CPU seconds meanwhile."""

    ttfts: list[float] = field(default_factory=list)
    tokens: int = 0
    busy_s: float = 0.0
    batches: int = 0
    other_cpu_s: float = 0.0

    def add(self, ttfts: list[float], tokens: int, wall_s: float, other_cpu_s: float = 0.0) -> None:
        self.ttfts += ttfts
        self.tokens += tokens
        self.busy_s += wall_s
        self.batches += 1
        self.other_cpu_s += other_cpu_s

    def figures(self) -> dict[str, Any]:
        return {"ttft_p50_s": pct(self.ttfts, 0.5), "ttft_p95_s": pct(self.ttfts, 0.95),
                "output_tokens_per_s": self.tokens / self.busy_s, "streams": len(self.ttfts), "batches": self.batches,
                "tokens": self.tokens, "busy_s": self.busy_s,
                "other_server_cpu_share": self.other_cpu_s / self.busy_s}


SETTLE_S = 1.2
"""Pause before a block of the other arm: an idle vLLM worker keeps spinning (``sched_yield``) for 1 s after its last
read, taking CPU from the arm then measured. Source: vLLM 0.29.0 ``shm_broadcast.py`` ``SpinCondition.wait``
(``busy_loop_s=1``)."""


def first_arm(pair: int) -> str:
    """The arm a pair starts with: the one the previous pair did not, so neither always goes first."""
    return ARMS[pair % 2]


class Pair:
    """One pair's schedule: blocks of one arm's batches (at least one, and ``block_s`` seconds), alternating (from
    :func:`first_arm`) until both arms' windows are full; an arm whose window is full gives way to the other."""

    def __init__(self, index: int, window: Window, block_s: float) -> None:
        self.arms = {name: Arm() for name in ARMS}
        self.window, self.block_s = window, block_s
        self.current, self.block_busy_s, self.block_batches = first_arm(index), 0.0, 0
        self.blocks = [self.current]

    def _open(self, name: str) -> bool:
        arm = self.arms[name]
        return not self.window.full(arm.batches, arm.busy_s, arm.tokens)

    def next_arm(self) -> str | None:
        """The arm of the next batch, or None when both windows are full; a change of arm starts a new block."""
        other = ARMS[1 - ARMS.index(self.current)]
        if not self._open(self.current) and not self._open(other):
            return None
        block_done = self.block_batches > 0 and self.block_busy_s >= self.block_s
        if self._open(self.current) and (not block_done or not self._open(other)):
            return self.current
        self.current, self.block_busy_s, self.block_batches = other, 0.0, 0
        self.blocks.append(other)
        return other

    def add(self, name: str, ttfts: list[float], tokens: int, wall_s: float, other_cpu_s: float = 0.0) -> None:
        self.arms[name].add(ttfts, tokens, wall_s, other_cpu_s)
        self.block_busy_s += wall_s
        self.block_batches += 1


def pair_ratios(vllm: dict[str, Any], ray: dict[str, Any]) -> dict[str, float]:
    """Ray/vLLM of each metric in one pair (TTFT ratio > 1 and tokens/s ratio < 1 are Ray Serve's overhead)."""
    return {name: ray[key] / vllm[key] for name, key in METRICS}


def spread(values: list[float]) -> float:
    """max / min - 1: how far apart the pairs' ratios are."""
    return max(values) / min(values) - 1


def settled(ratios: list[dict[str, float]], last: int, agree: float, on: tuple[str, ...] = SETTLE_ON) -> bool:
    """Whether the ``last`` pairs' ratios of every metric in ``on`` agree within ``agree``."""
    return len(ratios) >= last and all(spread([r[name] for r in ratios[-last:]]) <= agree for name in on)


def summary(ratios: list[dict[str, float]], last: int, agree: float) -> dict[str, Any]:
    """Over the ``last`` pairs: each ratio's median, min, max and spread, and which hold (spread <= ``agree``)."""
    tail = ratios[-last:]
    out: dict[str, Any] = {"pairs_used": len(tail), "settled": settled(ratios, last, agree)}
    for name, _ in METRICS:
        values = [r[name] for r in tail]
        out[name] = {"median": statistics.median(values), "min": min(values), "max": max(values),
                     "spread": spread(values), "values": values}
    out["holds"] = [name for name, _ in METRICS if out[name]["spread"] <= agree]
    return out
