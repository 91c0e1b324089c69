"""``raytpu plan --plot FILE``: on-demand $/h against the HBM left free per usable slice, the cheapest marked; the path
checked before sizing, written atomically; matplotlib imported only when drawing."""

from __future__ import annotations

import contextlib
import os
import secrets
import stat
from pathlib import Path

from raytpu.core.common import errors
from raytpu.sizing.candidates import Candidate

FORMATS = {".png": "png", ".svg": "svg", ".pdf": "pdf"}
"""The suffixes taken and the format each is written in (passed to savefig, never guessed from the name).
Source: matplotlib 3.x ``FigureCanvasBase.get_supported_filetypes`` (Agg writes these three with no extra package)."""

VALID = "a file path ending in .png, .svg or .pdf, in an existing folder you can write (e.g. plan.png)"
SHOWN = 200
"""The characters of a path an error line shows (a pasted megabyte stays one short line)."""


def _refuse(text: str, rule: str, valid: str = VALID) -> errors.InvalidInput:
    return errors.invalid_value("--plot", text, rule, valid)


def target(text: str) -> tuple[Path, str]:
    """The file ``--plot TEXT`` will write (a symbolic link followed) and its format; InvalidInput when it cannot be
    written there, so nothing is sized, drawn or left behind first."""
    fmt = FORMATS.get(Path(text).suffix.lower())
    if fmt is None:
        raise _refuse(text, "is not a .png, .svg or .pdf path")
    path = Path(os.path.realpath(text))
    if path.is_dir():
        raise _refuse(text, "is a folder", f"a file path in it (e.g. {os.path.join(text[:SHOWN], 'plan.png')})")
    if path.exists() and not path.is_file():
        raise _refuse(text, "is not a regular file (a device, pipe or socket)", VALID)
    if not path.parent.is_dir():
        rule = "is under a file, not a folder" if path.parent.exists() else "is in a directory that does not exist"
        raise _refuse(text, rule)
    if not os.access(path.parent, os.W_OK | os.X_OK):
        raise _refuse(text, "is in a folder you cannot write")
    _probe(path.parent, text)
    if path.exists() and not os.access(path, os.W_OK):
        raise _refuse(text, "is a read-only file", "a writable file or a new one, in a folder you can write")
    return path, fmt


def _probe(folder: Path, text: str) -> None:
    """Creates and removes a file in ``folder``: the only sure test (as root ``os.access`` says yes even under /proc),
    and a moment's work where sizing and drawing first would take seconds."""
    probe = folder / f".raytpu-plot-{secrets.token_hex(6)}"
    try:
        os.close(os.open(probe, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
    except OSError as exc:
        raise _refuse(text, f"is in a folder you cannot write ({exc.strerror or exc})") from exc
    with contextlib.suppress(OSError):
        probe.unlink()


def points(found: list[Candidate], kind: str = "on_demand") -> list[Candidate]:
    """The slices drawn: usable and priced (``kind``)."""
    return [c for c in found if c.usable and c.price_per_hour[kind] is not None]


def write(text: str, found: list[Candidate], best: Candidate | None, title: str, kind: str = "on_demand") -> int:
    """Draws ``points(found)`` to ``--plot TEXT`` atomically (a temporary file beside it, renamed: a replaced file keeps
    its mode); InvalidInput when the write fails. Returns the number of points drawn."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    path, fmt = target(text)
    drawn = points(found, kind)

    def price(c: Candidate) -> float:
        return c.price_per_hour[kind] or 0.0

    fig, ax = plt.subplots(figsize=(8, 5), dpi=110)
    for gen in sorted({c.plan.generation for c in drawn}):
        mine = [c for c in drawn if c.plan.generation == gen]
        ax.scatter([100 * c.free_fraction for c in mine], [price(c) for c in mine], label=gen, s=22)
    if best is not None and best.price_per_hour[kind] is not None:
        ax.scatter([100 * best.free_fraction], [price(best)], marker="*", s=320, facecolors="none",
                   edgecolors="black", linewidths=1.5, label=f"cheapest: {best.plan.generation} {best.plan.topology}")
    ax.set_xlabel("HBM left free (%)")
    ax.set_ylabel(f"{kind.replace('_', '-')} $/h")
    if drawn:
        ax.set_yscale("log")
        ax.legend(fontsize=8)
    unpriced = sorted({c.plan.generation for c in found if c.usable and c.price_per_hour[kind] is None})
    ax.set_title(title + (f"\n(not drawn, no {kind.replace('_', '-')} price: {', '.join(unpriced)})"
                          if unpriced else ""), fontsize=10)
    ax.grid(True, alpha=0.3)
    try:
        mode = stat.S_IMODE(path.stat().st_mode)
    except FileNotFoundError:
        mode = None
    tmp = path.parent / f".raytpu-plot-{secrets.token_hex(6)}{path.suffix}"
    created = False
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)  # the umask applies (mkstemp's is 0600)
        created = True
        with os.fdopen(fd, "wb") as out:
            fig.savefig(out, format=fmt)
            out.flush()
            os.fsync(out.fileno())
        if mode is not None:
            os.chmod(tmp, mode)
        os.replace(tmp, path)
    except OSError as exc:
        raise _refuse(text, f"cannot be written ({exc.strerror or exc})") from exc
    finally:
        plt.close(fig)
        if created:
            with contextlib.suppress(FileNotFoundError):
                tmp.unlink()
    return len(drawn)
