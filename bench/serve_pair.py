"""Paired windows for ``bench/serve.py``: both servers up at once, their batches alternating over one wall-clock span,
so a change in the shared machine's load falls on both arms of a pair (issue 40 item 13). Pure logic: no clock, no
server; ``bench/serve.py`` feeds it batches."""

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
    """How long each arm of a pair is measured: at least ``min_batches`` batches, ``min_s`` seconds of batches and
    ``min_tokens`` completion tokens, whichever ends last."""

    max_tokens: int
    min_batches: int = 3
    min_s: float = 8.0
    min_tokens: int = 1024

    def full(self, batches: int, busy_s: float, tokens: int) -> bool:
        return batches >= self.min_batches and busy_s >= self.min_s and tokens >= self.min_tokens


@dataclass
class Arm:
    """One arm's share of a pair: its batches' streams, tokens and busy time, and the other server's CPU seconds
    spent meanwhile (what the idle arm takes from the measured one)."""

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


def batch_order(pair: int, batches: int) -> list[str]:
    """The arms of one pair's batches, alternating; each pair starts with the arm the previous one did not, so
    neither arm always goes first."""
    first = pair % 2
    return [ARMS[(first + i) % 2] for i in range(batches)]


def next_arm(pair: int, arms: dict[str, Arm], window: Window) -> str | None:
    """The arm of the pair's next batch (alternating as :func:`batch_order`, an arm whose window is full giving way
    to the other), or None when both are full."""
    open_arms = [a for a in ARMS if not window.full(arms[a].batches, arms[a].busy_s, arms[a].tokens)]
    if not open_arms:
        return None
    turn = batch_order(pair, sum(arm.batches for arm in arms.values()) + 1)[-1]
    return turn if turn in open_arms else open_arms[0]


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
