"""``raytpu plan --plot FILE``: on-demand $/h against the HBM left free, one point per usable slice, the cheapest
marked. matplotlib is imported here only, when a plot is asked for."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from raytpu.sizing.candidates import Candidate


def write(path: str, found: list[Candidate], best: Candidate | None, title: str, kind: str = "on_demand") -> int:
    """Writes the PNG atomically (a temporary file renamed into place); returns the number of points drawn."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    points = [c for c in found if c.usable and c.price_per_hour[kind] is not None]

    def price(c: Candidate) -> float:
        return c.price_per_hour[kind] or 0.0

    fig, ax = plt.subplots(figsize=(8, 5), dpi=110)
    for gen in sorted({c.plan.generation for c in points}):
        mine = [c for c in points if c.plan.generation == gen]
        ax.scatter([100 * c.free_fraction for c in mine], [price(c) for c in mine], label=gen, s=22)
    if best is not None and best.price_per_hour[kind] is not None:
        ax.scatter([100 * best.free_fraction], [price(best)], marker="*", s=320, facecolors="none",
                   edgecolors="black", linewidths=1.5, label=f"cheapest: {best.plan.generation} {best.plan.topology}")
    ax.set_xlabel("HBM left free (%)")
    ax.set_ylabel(f"{kind.replace('_', '-')} $/h")
    if points:
        ax.set_yscale("log")
    unpriced = sorted({c.plan.generation for c in found if c.usable and c.price_per_hour[kind] is None})
    ax.set_title(title + (f"\n(not drawn, no {kind.replace('_', '-')} price: {', '.join(unpriced)})"
                          if unpriced else ""), fontsize=10)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8)
    target = Path(path)
    fd, tmp = tempfile.mkstemp(suffix=".png", dir=target.parent if str(target.parent) else ".")
    os.close(fd)
    try:
        fig.savefig(tmp, format="png")
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)  # mkstemp's file is 0600; the picture gets a plain file's mode
        os.replace(tmp, target)
    finally:
        plt.close(fig)
        if os.path.exists(tmp):
            os.unlink(tmp)
    return len(points)
