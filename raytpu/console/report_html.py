"""The smoke, demo and submit reports as one self-contained HTML page on-call reads at a glance (issue 42): verdict and
failed checks first, then each slice worst first (chips as ``raytpu describe`` draws them, colored by their worst
figure; ICI and DCN bars against gates; each run's timeline). No script, font or URL: it opens with no network."""

from __future__ import annotations

import contextlib
import html
import json
import math
import os
import tempfile
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from raytpu.core.common import report

GENERATOR = "raytpu report"
"""The page's ``<meta name="generator">``: an existing file without it is not the kit's to replace."""

RANK = {"unhealthy": 0, "unschedulable": 1, "busy": 2, "healthy": 3}
COMPACT_CHIPS = 64
"""Past this many chips a chip shows only its mark and number (its figures stay in its tooltip): a v6e 16x16's 256
chips then fit one screen."""
NEAR = 1.1
"""A passing figure within 10% of its floor is drawn as near (amber): the next to fail."""

_CSS = """
body{font:15px/1.4 system-ui,sans-serif;margin:16px 24px;color:#111;background:#fff}
h1{font-size:22px;margin:0 0 8px}h2{font-size:19px;margin:28px 0 6px;border-top:2px solid #ccc;padding-top:10px}
h3{font-size:16px;margin:16px 0 6px}
.banner{padding:10px 14px;border-radius:6px;font-size:18px;font-weight:600;margin-bottom:10px}
.bad{background:#fde2e1;border:2px solid #b3261e}.good{background:#e3f4e6;border:2px solid #1e7b34}
.other{background:#fff4d6;border:2px solid #8a6100}
table{border-collapse:collapse;margin:4px 0}td,th{border:1px solid #bbb;padding:3px 8px;text-align:left;
vertical-align:top}th{background:#eee;white-space:nowrap}
.hosts{display:flex;flex-wrap:wrap;gap:6px}
.host{border:1px solid #888;border-radius:4px;padding:3px 5px;background:#f7f7f7}
.host.down{border:2px dashed #b3261e;background:#fde2e1}.host.bad{outline:3px solid #b3261e;background:#fde2e1}
.compact .chip{width:48px;height:24px;line-height:20px}.compact .chip small{display:none}
.hl{font-size:12px;font-weight:600;white-space:nowrap}
.chips{display:flex;gap:3px;margin-top:2px}
.chip{width:54px;height:34px;border:1px solid #555;border-radius:3px;font-size:11px;text-align:center;
line-height:15px;cursor:default}
.chip b{font-size:14px}
.c-ok{background:#7fc98f}.c-near{background:#f2c14e}.c-fail{background:#e5534b;color:#fff;border:3px solid #000}
.c-missing{background:repeating-linear-gradient(45deg,#ddd 0 5px,#fff 5px 10px);border:2px dashed #b3261e}
.c-none{background:#e8e8e8}
.legend span{display:inline-block;margin-right:14px}.legend .chip{display:inline-block;width:30px;height:18px;
vertical-align:middle;line-height:16px}
.bar{position:relative;width:420px;height:20px;background:#eee;border:1px solid #999;display:inline-block;
vertical-align:middle}
.fill{height:100%}.gate{position:absolute;top:-3px;bottom:-3px;width:3px;background:#000}
.gate.off{background:repeating-linear-gradient(#777 0 3px,transparent 3px 6px)}.fill.info{background:#7a8a99}
.fill.ok{background:#3b8c4a}.fill.near{background:#d99a00}.fill.fail{background:#c0392b}
.row{margin:3px 0}.lab{display:inline-block;width:230px;font-family:monospace}
.val{margin-left:8px;font-family:monospace}
.tl{display:flex;width:100%;max-width:1100px;height:30px;border:1px solid #555;margin:4px 0}
.ph{height:100%;overflow:hidden;white-space:nowrap;font-size:12px;line-height:30px;padding-left:3px;
border-right:1px solid #fff;color:#fff}
.ph.emulated{background-image:repeating-linear-gradient(45deg,rgba(255,255,255,.25) 0 4px,transparent 4px 8px)}
.muted{color:#555}
"""
_PHASE_COLORS = ("#1f5f99", "#7a3e9d", "#2e7d6b", "#a34d1a", "#445", "#8c2f5c", "#5b6b12", "#2c4f7c")


def render(document: Mapping[str, Any], source: str, doctor: Mapping[str, Any] | None = None) -> str:
    """The page of a saved report ``document`` (smoke, demo or submit; :func:`parts` reads it); with ``doctor`` (the
    ``doctor.json`` of the same folder, :func:`doctor_beside`), its table after the verdict."""
    title, verdicts, timelines = parts(document)
    ordered = sorted(verdicts, key=lambda v: (RANK.get(report.state_of(v), 0), _worst_ratio(v)))
    body = [verdict_section(ordered, title, source)]
    body += [doctor_section(doctor)] if doctor else []
    body += [LEGEND] if ordered else []
    body += [slice_section(v) for v in ordered]
    body += [result] if (result := result_section(document)) else []
    body += [timeline_section(name, run) for name, run in timelines.items()]
    return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            f"<meta name=\"generator\" content=\"{GENERATOR}\"><title>{_e(title)}</title>"
            f"<style>{_CSS}</style></head><body>\n" + "\n".join(body) + "\n</body></html>\n")


def parts(document: Mapping[str, Any]) -> tuple[str, list[Mapping[str, Any]], dict[str, Mapping[str, Any]]]:
    """A report's title, slice verdicts and timelines by run, whichever command wrote it (``smoke.json``,
    ``local smoke --json``, ``demo.json``, a ``submit --report``)."""
    verdicts = document.get("slices") if "slices" in document else document.get("smoke")
    timelines = dict(document.get("timelines") or {})
    run = str(document.get("run") or ("demo" if "steps" in document else "smoke"))
    if isinstance(document.get("timeline"), Mapping):
        timelines[run] = document["timeline"]
    preemption = document.get("preemption")
    if isinstance(preemption, Mapping) and isinstance(preemption.get("timeline"), Mapping):
        timelines["preemption"] = preemption["timeline"]
    where = f" of stack {document['stack']}" if document.get("stack") else ""
    kind = "smoke" if "slices" in document else "demo" if "steps" in document else f"run {run}"
    return f"raytpu {kind}{where}", list(verdicts or []), timelines


def verdict_section(verdicts: list[Mapping[str, Any]], title: str, source: str) -> str:
    """The verdict first: a banner saying how many slices are unhealthy, each slice's headline, the failed checks."""
    bad = [v for v in verdicts if report.state_of(v) == "unhealthy"]
    other = [v for v in verdicts if report.state_of(v) not in ("unhealthy", "healthy")]
    if not verdicts:
        banner, cls = "no slice verdicts in this report", "other"
    elif bad:
        banner, cls = f"{report.FAIL_MARK} UNHEALTHY: {len(bad)} of {len(verdicts)} slice(s)", "bad"
    elif other:
        banner, cls = f"{len(other)} of {len(verdicts)} slice(s) not checked (busy or unschedulable)", "other"
    else:
        banner, cls = f"{report.OK_MARK} healthy: {len(verdicts)} slice(s)", "good"
    lines = [f"<h1>{_e(title)}</h1>", f"<div class=\"banner {cls}\">{_e(banner)}</div>",
             f"<p class=\"muted\">from {_e(source)}</p>"]
    if verdicts:
        lines.append("<ul>" + "".join(f"<li><a href=\"#{_anchor(v)}\">{_e(report.headline(v))}</a></li>"
                                      for v in verdicts) + "</ul>")
    failed = [(v, c) for v in verdicts for c in _checks(v) if not c.get("ok", True)]
    if failed:
        rows = "".join(f"<tr><td>{report.FAIL_MARK} {_e(v.get('slice', '?'))}</td><td>{_e(c.get('name', '?'))}</td>"
                       f"<td>{_e(_fmt(c.get('value')))}</td><td>{_e(_fmt(c.get('expected')))}</td>"
                       f"<td>{_e(c.get('detail', ''))}</td></tr>" for v, c in failed)
        lines.append("<h3>Failed checks</h3><table><tr><th>slice</th><th>check</th><th>value</th><th>expected</th>"
                     f"<th>detail</th></tr>{rows}</table>")
    return "<section>" + "\n".join(lines) + "</section>"


DOCTOR_NAME = "doctor.json"
"""What ``raytpu doctor --report DIR`` writes; a report page of the same folder shows it."""


def doctor_beside(report_path: Path) -> Mapping[str, Any] | None:
    """The ``doctor.json`` in ``report_path``'s folder, when there is one the page can show (else None: the page is the
    smoke report's, and a missing or unreadable doctor table only leaves its section out)."""
    import json

    try:
        document = json.loads((report_path.parent / DOCTOR_NAME).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError, RecursionError):  # RecursionError: nested thousands deep
        return None
    return document if isinstance(document, dict) and isinstance(document.get("checks"), list) else None


def doctor_section(document: Mapping[str, Any]) -> str:
    """``raytpu doctor``'s table: each check with its mark, found, expected and fix; failed and unread rows first."""
    from raytpu.core.common.checkup import rows_of

    checks = sorted(rows_of(document), key=lambda c: {"fail": 0, "unknown": 1}.get(c.state, 2))
    bad = sum(c.state == "fail" for c in checks)
    banner, cls = ((f"{report.FAIL_MARK} {bad} of {len(checks)} doctor check(s) failed", "bad") if bad else
                   (f"{report.OK_MARK} every doctor check holds ({len(checks)})", "good"))
    where = f" of stack {document['stack']}" if document.get("stack") else ""
    rows = "".join(f"<tr><td>{_e(c.mark)} {_e(c.check)}</td><td>{_e(c.found)}</td><td>{_e(c.expected)}</td>"
                   f"<td>{_e(c.fix)}</td></tr>" for c in checks)
    return (f"<section id=\"doctor\"><h2>raytpu doctor{_e(where)}</h2><div class=\"banner {cls}\">{_e(banner)}</div>"
            f"<table><tr><th>check</th><th>found</th><th>expected</th><th>fix</th></tr>{rows}</table></section>")


def slice_section(verdict: Mapping[str, Any]) -> str:
    """One slice: its headline, the chip map, the interconnect bars and fault injection that was active."""
    state = report.state_of(verdict)
    mark = report.OK_MARK if state == "healthy" else report.FAIL_MARK
    head = (f"<h2 id=\"{_anchor(verdict)}\">{mark} {_e(verdict.get('slice', '?'))}: {_e(state.upper())} "
            f"<span class=\"muted\">({_e(verdict.get('generation', ''))} {_e(verdict.get('topology', ''))}, "
            f"{_e(verdict.get('hosts_found', '?'))}/{_e(verdict.get('hosts_expected', '?'))} hosts)</span></h2>")
    head += f"<p><b>{_e(report.headline(verdict))}</b></p>" if state != "healthy" else ""
    injected = "".join(f"<p>fault injection: {_e(line)}</p>" for line in verdict.get("injected") or [])
    return "<section>" + head + chip_map(verdict) + ici_bars(verdict) + dcn_bars(verdict) + injected + "</section>"


def chip_map(verdict: Mapping[str, Any]) -> str:
    """Hosts and their chips, as ``raytpu describe`` draws them; a chip's color is its worst figure, a failing chip
    carries ✗ and a thick border, a missing host's chips are hatched and carry ?; the figures are in the tooltip."""
    per_host = _chips_per_host(verdict)
    hosts = {_int(h.get("worker_id")): h for h in verdict.get("hosts") or [] if isinstance(h, Mapping)}
    rows: dict[tuple[int, int], list[Mapping[str, Any]]] = {}
    for r in _device_rows(verdict):
        rows.setdefault((_int(r.get("worker_id")), _int(r.get("device"))), []).append(r)
    devices = max([per_host, *(d + 1 for _, d in rows)])
    count = max([_int(verdict.get("hosts_expected")), *(w + 1 for w in hosts), *(w + 1 for w, _ in rows)])
    boxes = []
    for worker in range(count):
        host = hosts.get(worker)
        has_rows = any((worker, d) in rows for d in range(devices))
        absent = (not (host or {}).get("node_id")  # no Ray node: the host never joined
                  and _int(verdict.get("hosts_found")) < _int(verdict.get("hosts_expected")))
        down = not has_rows and (absent or (host is not None and not host.get("ok", True)))
        problems = "; ".join(str(p) for p in (host or {}).get("problems") or []) or ("missing" if absent else "")
        label = f"host {worker}" + (f" {report.FAIL_MARK}" if down or (host and not host.get("ok", True)) else "")
        label += " missing" if absent else " no figures" if down else ""
        tip = f"host {worker} ({(host or {}).get('ip') or 'no ip'})" + (f": {problems}" if problems else "")
        cells = "".join(_chip(worker * devices + d, rows.get((worker, d), []), problems if down else "")
                        for d in range(devices))
        state = " down" if down else " bad" if host and not host.get("ok", True) else ""
        boxes.append(f"<div class=\"host{state}\" title=\"{_e(tip)}\"><div class=\"hl\">"
                     f"{_e(label)}</div><div class=\"chips\">{cells}</div></div>")
    compact = count * devices > COMPACT_CHIPS
    return (f"<h3>Slice map</h3>{_scale_note(verdict, compact)}<div class=\"hosts{' compact' if compact else ''}\">"
            f"{''.join(boxes)}</div>")


LEGEND = ("<p class=\"legend\"><b>Chips:</b> <span><span class=\"chip c-ok\"></span> within its gates</span>"
          f"<span><span class=\"chip c-near\"></span> within {round((NEAR - 1) * 100)}% of a gate</span>"
          f"<span><span class=\"chip c-fail\"><b>{report.FAIL_MARK}</b></span> fails a gate</span>"
          "<span><span class=\"chip c-missing\"><b>?</b></span> its host gave no figures (missing, or failed "
          "before measuring)</span><span><span class=\"chip c-none\"></span> not measured</span>"
          "<span class=\"muted\">hover a chip or host for every figure</span></p>")


def _scale_note(verdict: Mapping[str, Any], compact: bool) -> str:
    """What a chip's small number means in this slice (hidden on a big slice: hover): its worst share of the catalog
    figure where those gate, else of the slice median (the emulated slice's CPUs are not TPUs)."""
    rows = list(_device_rows(verdict))
    if not rows:
        return "<p class=\"muted\">no per-chip figures in this report (the check stopped before measuring)</p>"
    what = ("past 64 chips a chip shows its number only: hover it for its figures; gates" if compact
            else "small number under a chip: its worst figure as a share of")
    gated = sorted({(str(r.get("metric")), _fmt(r.get("min_ratio"))) for r in rows if r.get("gates")})
    if gated:
        gates = ", ".join(f"{metric} &ge; {floor}" for metric, floor in gated)
        return f"<p class=\"muted\">{what} the catalog's figure ({gates})</p>"
    peers = ", ".join(sorted({_fmt(r.get("min_peer_ratio")) for r in rows}))
    return (f"<p class=\"muted\">{what} the slice median (&ge; {peers}; the catalog's figures do not gate on this "
            "hardware)</p>")


def ici_bars(verdict: Mapping[str, Any]) -> str:
    """The slice-wide interconnect figures (all-reduce over the whole slice and over each ICI axis) as bars of
    their ratio to the topology's expected bus bandwidth, a black line at the gate."""
    rows = [r for r in verdict.get("perf") or [] if isinstance(r, Mapping) and r.get("device") is None
            and r.get("worker_id") is None]
    if not rows:
        return ""
    return "<h3>ICI (slice all-reduce, per axis)</h3>" + "".join(_bar(str(r.get("metric", "?")), r) for r in rows)


def dcn_bars(verdict: Mapping[str, Any]) -> str:
    """The cross-slice all-reduce of every host against the DCN figure per host (multi-slice runs only)."""
    dcn = verdict.get("dcn")
    if not isinstance(dcn, Mapping):
        return ""
    bars = "".join(_bar(f"host {r.get('worker_id')}", r) for r in dcn.get("perf") or [] if isinstance(r, Mapping))
    return (f"<h3>DCN over {_e(', '.join(str(s) for s in dcn.get('slices') or []))}</h3>"
            f"<p class=\"muted\">reference: {_e(dcn.get('source', ''))}</p>{bars}")


def result_section(document: Mapping[str, Any]) -> str:
    """A ``submit --report``'s own result: a team run's ``train`` (ok, its last metrics, checkpoint, reports,
    attempts, error) and the ``--set`` overrides the run had; "" when it has neither."""
    rows = []
    overrides = document.get("overrides")
    if isinstance(overrides, Mapping) and overrides:
        rows += [("--set " + _e(key), _e(_compact_json(value))) for key, value in overrides.items()]
    train = document.get("train")
    if isinstance(train, Mapping):
        for key in ("train_loop", "ok", "error", "metrics", "checkpoint", "reports"):
            if key in train:
                rows.append((_e(key), _e(_compact_json(train[key]))))
        attempts = train.get("attempts")
        if isinstance(attempts, list):
            rows.append(("attempts", _e(f"{len(attempts)} (" + ", ".join(
                "resumed" if isinstance(a, Mapping) and a.get("resumed") else "fresh" for a in attempts) + ")")))
    if not rows:
        return ""
    body = "".join(f"<tr><td>{key}</td><td>{value}</td></tr>" for key, value in rows)
    return f"<section><h2>the run's result</h2><table><tr><th>what</th><th>value</th></tr>{body}</table></section>"


def _compact_json(value: Any) -> str:
    """A value as compact JSON (a report's values are JSON already), at most 300 characters."""
    text = json.dumps(value, sort_keys=True, default=str)
    return text if len(text) <= 300 else text[:300] + "..."


def timeline_section(name: str, run: Mapping[str, Any]) -> str:
    """A run's timeline as one bar: each phase as wide as the minutes it added, then the table of phases."""
    phases = [p for p in run.get("phases") or [] if isinstance(p, Mapping)]
    wall = _float(run.get("wall_s")) or sum(_float(p.get("duration_s")) or 0.0 for p in phases) or 1.0
    segments, rows = [], []
    for index, p in enumerate(phases):
        took = _float(p.get("duration_s")) or 0.0
        status = str(p.get("status", ""))
        text = f"{p.get('phase', '?')} {took:.1f}s ({status}): {p.get('detail', '')}"
        if took > 0:
            color = _PHASE_COLORS[index % len(_PHASE_COLORS)]
            segments.append(f"<div class=\"ph {'emulated' if status == 'emulated' else ''}\" title=\"{_e(text)}\" "
                            f"style=\"width:{100 * took / wall:.2f}%;background-color:{color}\">"
                            f"{_e(p.get('phase', '?'))} {took:.0f}s</div>")
        rows.append(f"<tr><td>{_e(p.get('phase', '?'))}</td><td>{_e(status)}</td><td>{_e(_fmt(p.get('at_s')))}</td>"
                    f"<td>{took:.1f}</td><td>{_e(p.get('detail', ''))}</td></tr>")
    longest = max(phases, key=lambda p: _float(p.get("duration_s")) or 0.0, default=None)
    most = _float((longest or {}).get("duration_s")) or 0.0
    summary = (f"<p><b>longest: {_e(longest.get('phase', '?'))}, {most:.1f} s ({100 * most / wall:.0f}% of the run)"
               "</b></p>" if longest and most > 0 else "")
    return (f"<section><h2>{_e(name)}: where the minutes went "
            f"<span class=\"muted\">({wall:.1f} s from {_e(run.get('started_at', '?'))})</span></h2>"
            f"{summary}<div class=\"tl\">{''.join(segments)}</div><table><tr><th>phase</th><th>status</th><th>at s</th>"
            f"<th>took s</th><th>detail</th></tr>{''.join(rows)}</table></section>")


def write(path: Path, page: str) -> None:
    """Writes ``page`` to ``path`` atomically: a temporary file beside it, renamed into place (never half a page)."""
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            out.write(page)
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


def write_beside(json_path: Path) -> Path:
    """Renders the report just written at ``json_path`` as ``report.html`` in its folder; returns the page's path."""
    import json

    page = json_path.parent / report.HTML_NAME
    write(page, render(json.loads(json_path.read_text(encoding="utf-8")), json_path.name, doctor_beside(json_path)))
    return page


def _chip(number: int, rows: list[Mapping[str, Any]], down: str) -> str:
    """One chip's cell; ``down``: why its host gave no figures (empty when it is up)."""
    if down or not rows:
        cls, mark = ("missing", "?") if down else ("none", "")
        tip = f"chip {number}: " + (f"its host: {down}" if down else "no figures")
        return (f"<div class=\"chip c-{cls}\" data-missing=\"{'1' if down else '0'}\" title=\"{_e(tip)}\">"
                f"<b>{mark} {number}</b><small><br>{'no data' if down else ''}</small></div>")
    worst = min(_gate_ratio(r) for r in rows)
    failed = not all(r.get("ok", True) for r in rows)
    cls = "fail" if failed else "near" if worst < NEAR else "ok"
    tip = f"chip {number}" + "".join(f"\n{r.get('metric', '?')}: {_fmt(r.get('value'))} {r.get('unit', '')}, "
                                     f"{_fmt(r.get('ratio'))} of catalog {_fmt(r.get('reference'))} "
                                     f"(min {_fmt(r.get('min_ratio'))}, gates: {'yes' if r.get('gates') else 'no'}), "
                                     f"{_fmt(r.get('peer_ratio'))}x slice median (min {_fmt(r.get('min_peer_ratio'))})"
                                     f"{'' if r.get('ok', True) else ' FAILS'}" for r in rows)
    shown = f"{report.FAIL_MARK} " if failed else ""
    return (f"<div class=\"chip c-{cls}\" data-failed=\"{'1' if failed else '0'}\" title=\"{_e(tip)}\">"
            f"<b>{shown}{number}</b><small><br>{_ratio_text(rows)}</small></div>")


def _ratio_text(rows: list[Mapping[str, Any]]) -> str:
    gated = [_float(r.get("ratio")) for r in rows if r.get("gates")]
    peers = [_float(r.get("peer_ratio")) for r in rows]
    values = [v for v in gated if v is not None] or [v for v in peers if v is not None]
    return f"{min(values):.2f}" if values else ""


def _gate_ratio(row: Mapping[str, Any]) -> float:
    """How far a figure is above its nearest gate (1.0 on it): the catalog floor where it gates, the peer floor."""
    found = []
    for ratio, floor, applies in ((row.get("ratio"), row.get("min_ratio"), row.get("gates")),
                                  (row.get("peer_ratio"), row.get("min_peer_ratio"), True)):
        value, gate = _float(ratio), _float(floor)
        if applies and value is not None and gate:
            found.append(value / gate)
    return min(found) if found else math.inf


def _bar(label: str, row: Mapping[str, Any]) -> str:
    ratio, floor = _float(row.get("ratio")), _float(row.get("min_ratio"))
    value = f"{_fmt(row.get('value'))} {row.get('unit', '')}".strip()
    if ratio is None:
        return (f"<div class=\"row\"><span class=\"lab\">{_e(label)}</span><span class=\"val\">{_e(value)} (no "
                f"reference to compare)</span></div>")
    scale = max(1.2, ratio * 1.05, (floor or 0) * 1.2)
    ok = bool(row.get("ok", True))
    cls = "fail" if not ok else "info" if not row.get("gates") else "near" if floor and ratio < floor * NEAR else "ok"
    off = "" if row.get("gates") else " off"
    gate = (f"<div class=\"gate{off}\" style=\"left:{100 * floor / scale:.1f}%\" title=\"gate: {_fmt(floor)} of "
            f"{_fmt(row.get('reference'))}\"></div>" if floor else "")
    text = (f"{'' if ok else report.FAIL_MARK + ' '}{value}: {_fmt(ratio)} of {_fmt(row.get('reference'))} "
            f"(gate {_fmt(floor)}{'' if row.get('gates') else ', informational here'})")
    return (f"<div class=\"row\"><span class=\"lab\">{_e(label)}</span><span class=\"bar\" title=\"{_e(text)}\">"
            f"<div class=\"fill {cls}\" style=\"width:{min(100.0, 100 * ratio / scale):.1f}%\"></div>{gate}</span>"
            f"<span class=\"val\">{_e(text)}</span></div>")


def _chips_per_host(verdict: Mapping[str, Any]) -> int:
    """The slice's chips over the hosts it expects: the verdict names no machine type, and v5e/v6e 2x4 is one
    8-chip host or two 4-chip hosts by it; a slice the catalog does not know: the most devices a host reported."""
    from raytpu.core.tpu.plan import plan_slice

    hosts = _int(verdict.get("hosts_expected"))
    try:
        chips = plan_slice(str(verdict.get("generation")), str(verdict.get("topology"))).chips
    except (ValueError, KeyError, TypeError):
        chips = 0
    if hosts and chips and chips % hosts == 0:
        return chips // hosts
    return max([1, *(_int(h.get("devices")) for h in verdict.get("hosts") or [] if isinstance(h, Mapping))])


def _device_rows(verdict: Mapping[str, Any]) -> Iterable[Mapping[str, Any]]:
    return [r for r in verdict.get("perf") or [] if isinstance(r, Mapping) and r.get("device") is not None
            and r.get("worker_id") is not None]


def _worst_ratio(verdict: Mapping[str, Any]) -> float:
    return min([_gate_ratio(r) for r in _device_rows(verdict)] or [math.inf])


def _checks(verdict: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    dcn = verdict.get("dcn")
    found = [*(verdict.get("checks") or []), *((dcn.get("checks") or []) if isinstance(dcn, Mapping) else [])]
    return [c for c in found if isinstance(c, Mapping)]


def _anchor(verdict: Mapping[str, Any]) -> str:
    return "slice-" + "".join(ch if ch.isalnum() or ch in "-_" else "_" for ch in str(verdict.get("slice", "?")))


def _float(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        return None
    return float(value)


def _int(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and 0 <= value < 100_000 else 0


def _fmt(value: Any) -> str:
    number = _float(value)
    return "-" if value is None else f"{number:.4g}" if number is not None else str(value)


def _e(value: Any) -> str:
    return html.escape(str(value), quote=True)
