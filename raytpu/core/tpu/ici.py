"""The ICI all-reduce bus bandwidth a healthy TPU slice should reach, per topology and per mesh axis (smoke gate).
Per axis a chip moves the one-way link rate, doubled where the axis wraps; axes add (when each wraps:
docs/FACTS.md#tpu-catalog-fields).
Source: jax-ml/scaling-book ``tpus.md`` (TPU Networking); evidence in docs/FACTS.md#tpu-catalog-ici. Standard library
only.
"""

from __future__ import annotations

from dataclasses import dataclass

ICI_AXIS_NAMES = ("x", "y", "z")
"""Mesh axes in topology order: ``4x8`` is x=4, y=8."""
ICI_FULL_2D_AXIS = 16
"""v5e/v6e: an axis wraps around only at the pod's full 16 chips."""
ICI_CUBE_EDGE = 4
"""v4/v5p/tpu7x: wraparounds come with whole 4x4x4 cubes."""


@dataclass(frozen=True)
class AxisICI:
    """One mesh axis of a slice: its size, whether it wraps, and its own all-reduce bus bandwidth per chip (GB/s)."""

    name: str
    size: int
    wraparound: bool
    busbw_gbps: float

    def describe(self, link_gbps: float) -> str:
        """``size 4, no wraparound: 1 x 90 GB/s one-way per link``."""
        if self.size < 2:
            return f"size {self.size}: no links"
        return (f"size {self.size}, {'wraparound' if self.wraparound else 'no wraparound'}: "
                f"{2 if self.wraparound else 1} x {link_gbps:g} GB/s one-way per link")


@dataclass(frozen=True)
class SliceICI:
    """A topology's expected all-reduce bus bandwidth per chip: the sum over its axes (GB/s), and each axis."""

    topology: str
    link_gbps: float
    axes: tuple[AxisICI, ...]

    @property
    def busbw_gbps(self) -> float:
        """Bus bandwidth per chip of an all-reduce over the whole slice (every axis at once)."""
        return sum(a.busbw_gbps for a in self.axes)

    def axis(self, name: str) -> AxisICI | None:
        """The axis called ``name``, if the topology has it."""
        return next((a for a in self.axes if a.name == name), None)

    def describe(self) -> str:
        """``x 90 + y 90 (4x4: no wraparound, 90 GB/s one-way per link)``."""
        parts = " + ".join(f"{a.name} {a.busbw_gbps:g}" for a in self.axes if a.size > 1) or "no links"
        wraps = [a.name for a in self.axes if a.wraparound]
        return (f"{parts} ({self.topology}: {'wraparound on ' + ', '.join(wraps) if wraps else 'no wraparound'}, "
                f"{self.link_gbps:g} GB/s one-way per link)")


def ici_wraparound(mesh_dims: int, dims: tuple[int, ...]) -> tuple[bool, ...]:
    """Which axes of a slice of shape ``dims`` wrap around, for a ``mesh_dims``-D generation (see module doc)."""
    if mesh_dims == 2:
        return tuple(d >= ICI_FULL_2D_AXIS for d in dims)
    whole_cubes = all(d % ICI_CUBE_EDGE == 0 for d in dims)
    return tuple(whole_cubes and d > 1 for d in dims)


def ici_axis_busbw(link_gbps: float, size: int, wraps: bool) -> float:
    """Bus bandwidth per chip over one axis: 0 for size 1, else the link rate, doubled by a wraparound."""
    if size < 2:
        return 0.0
    return link_gbps * (2 if wraps else 1)


def ici_expected(link_gbps: float, mesh_dims: int, topology: str) -> SliceICI:
    """The expected bus bandwidth of ``topology`` at ``link_gbps`` per link: each axis's figure and their sum."""
    return ici_for_dims(link_gbps, mesh_dims, tuple(int(d) for d in topology.split("x")))


def ici_for_dims(link_gbps: float, mesh_dims: int, dims: tuple[int, ...],
             names: tuple[str, ...] = ICI_AXIS_NAMES) -> SliceICI:
    """:func:`ici_expected` for axis sizes ``dims`` named ``names`` (a host's mesh, in its own axis order)."""
    wraps = ici_wraparound(mesh_dims, dims)
    return SliceICI("x".join(map(str, dims)), link_gbps,
                    tuple(AxisICI(names[i], d, w, ici_axis_busbw(link_gbps, d, w))
                          for i, (d, w) in enumerate(zip(dims, wraps, strict=True))))
