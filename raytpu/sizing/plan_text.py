"""What ``raytpu plan`` prints as text: the need and its assumptions, the disk and the prices it read, and the table of
fitting slices. The command prints these lines; its JSON carries the same numbers."""

from __future__ import annotations

from typing import TYPE_CHECKING

from raytpu.sizing.memory import GIB

if TYPE_CHECKING:
    from raytpu.sizing.candidates import Candidate
    from raytpu.sizing.memory import Need
    from raytpu.sizing.prices import PriceTable

SHOWN_PER_GENERATION = 3
"""Fitting slices listed per generation unless ``--all``."""


def need_lines(title: str, need: Need, headroom: float, disk: dict[str, float | int | None] | None, table: PriceTable,
               tp_note: bool) -> list[str]:
    """The title, the need's assumptions and terms, the disk a host needs for the weights (serve) and where the
    prices come from; ``tp_note``: the need is at tensor parallelism 1 (a known model served)."""
    out = [title, *(f"  {line}" for line in need.assumptions)]
    terms = " + ".join(f"{k.replace('_', ' ')} {v / GIB:,.1f}" for k, v in need.terms.items())
    note = " (at TP 1; a TP above the KV heads adds KV copies)" if tp_note else ""
    out.append(f"  need: {terms} = {need.total / GIB:,.1f} GiB{note}; "
               f"headroom: {headroom:.0%} of HBM kept free (XLA scratch buffers, runtime; vLLM leaves 8-10%)")
    if disk:
        out.append(f"  disk: every host that downloads the weights writes {disk['need_gib']:,} GiB (weights + "
                   f"{disk['scratch_gib']:g} GiB for Ray's files; the GCS FUSE sidecar requests "
                   f"{disk['sidecar_gib']:g} GiB more): a boot disk of "
                   + (f"{disk['disk_size_gib']} GiB ({disk['allocatable_gib']:,} GiB allocatable; "
                      "slices[].disk_size_gib, which the kit sizes itself when left out)" if disk["disk_size_gib"] else
                      "no size GKE offers: serve the weights from the kit's bucket (model_source: gs://)"))
    other = ", ".join(f"{g}: {r}" for g, r in table.regions.items() if r != table.region)
    out.append(f"  prices: {table.currency}/h per slice, {table.region}{f' ({other})' if other else ''}, read "
               f"{table.read_on} from {table.source}; n/p = not published there")
    return out


def money(value: float | None) -> str:
    """A price, or ``n/p`` where none is published."""
    return "n/p" if value is None else f"{value:,.2f}"


def candidate_table(found: list[Candidate], best: Candidate | None, minimal: dict[str, Candidate], show_all: bool,
           per_tokens: bool) -> list[str]:
    """The fitting candidates of each generation (the smallest few unless ``show_all``), ``*`` marking the cheapest
    and ``<`` each generation's smallest; ``per_tokens`` adds $ per million tokens."""
    head = ["GEN", "TOPOLOGY", "CHIPS", "HOSTS", "HBM GiB", "NEED GiB", "FREE", "RAY", "SERVABLE",
            "$/h OD", "$/h SPOT", "$/h FLEX"] + (["$/Mtok OD"] if per_tokens else [])
    rows, hidden = [], 0
    for gen in dict.fromkeys(c.plan.generation for c in found):
        fits = [c for c in found if c.plan.generation == gen and c.fits]
        shown = fits if show_all else fits[:SHOWN_PER_GENERATION]
        hidden += len(fits) - len(shown)
        for c in shown:
            mark = " *" if c is best else (" <" if minimal.get(gen) is c else "")
            serv = {True: "yes", False: "no", None: "-"}[c.servable] + (f" ({c.servable_note})" if c.servable_note
                                                                          and c.servable else "")
            rows.append([gen, c.plan.topology + mark, str(c.plan.chips), str(c.plan.hosts),
                         f"{c.hbm_bytes / GIB:,.0f}", f"{c.need.total / GIB:,.1f}", f"{100 * c.free_fraction:.0f}%",
                         "yes" if c.plan.ray_reservable else "no", serv,
                         *(money(c.price_per_hour[k]) for k in ("on_demand", "spot", "flex_start")),
                         *([money(c.usd_per_million_tokens["on_demand"])] if per_tokens else [])])
    widths = [max(len(r[i]) for r in [head, *rows]) for i in range(len(head))]
    lines = ["  ".join(v.ljust(w) for v, w in zip(r, widths, strict=True)).rstrip() for r in [head, *rows]]
    if hidden:
        lines.append(f"({hidden} larger fitting slices not shown; --all lists them)")
    return lines
