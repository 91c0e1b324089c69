"""The training config: defaults small enough for a few CPU steps in seconds, checked once at the start."""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields
from typing import Any

ATTENTION = ("auto", "einsum", "flash", "splash")
REMAT = ("none", "full", "dots")


@dataclass(frozen=True)
class Config:
    steps: int = 20
    lr: float = 3e-3
    batch_size: int = 8  # global: split over every device of the slice
    seq_len: int = 64
    d_model: int = 64
    n_layers: int = 2
    n_heads: int = 2
    vocab: int = 256
    d_ff: int = 0  # 0: 4 x d_model
    checkpoint_every: int = 10
    warmup: int = 5
    seed: int = 0
    weight_decay: float = 0.01
    fsdp: int = 1  # devices each parameter is sharded over (1: plain data parallel)
    attention: str = "auto"  # auto: flash on TPU, einsum elsewhere
    remat: str = "none"  # recompute in the backward pass: none, full, or all but the matmuls ("dots")

    @property
    def head_dim(self) -> int:
        return self.d_model // self.n_heads

    @property
    def ff(self) -> int:
        return self.d_ff or 4 * self.d_model


def resolve(given: dict[str, Any] | None) -> Config:
    """``given`` over the defaults; an unknown key or a bad value raises ValueError naming it."""
    given = dict(given or {})
    known = {f.name: f for f in fields(Config)}
    unknown = sorted(set(given) - set(known))
    if unknown:
        raise ValueError(f"train_config: unknown key(s) {unknown}; valid: {sorted(known)}")
    values: dict[str, Any] = {}
    for name, value in given.items():
        kind = type(getattr(Config, name))
        try:
            values[name] = kind(value)
        except (TypeError, ValueError):
            raise ValueError(f"train_config.{name}: {str(value)[:40]!r} is not a {kind.__name__}") from None
    config = Config(**values)
    _check(config)
    return config


def _check(c: Config) -> None:
    positive = ("steps", "batch_size", "seq_len", "d_model", "n_layers", "n_heads", "vocab", "checkpoint_every",
                "fsdp")
    for name in positive:
        if getattr(c, name) < 1:
            raise ValueError(f"train_config.{name}: {getattr(c, name)} must be at least 1")
    if c.lr <= 0 or c.warmup < 0 or c.weight_decay < 0:
        raise ValueError("train_config: lr must be > 0, warmup and weight_decay >= 0")
    if c.d_model % c.n_heads:
        raise ValueError(f"train_config.n_heads: {c.n_heads} does not divide d_model {c.d_model}")
    if c.attention not in ATTENTION:
        raise ValueError(f"train_config.attention: {c.attention!r}; valid: {list(ATTENTION)}")
    if c.remat not in REMAT:
        raise ValueError(f"train_config.remat: {c.remat!r}; valid: {list(REMAT)}")


def as_dict(c: Config) -> dict[str, Any]:
    return asdict(c)
