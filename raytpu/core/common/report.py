"""Smoke verdicts: find them in logs, render them as a table, write them as JSON and JUnit XML.

One ``RAYTPU_SMOKE_VERDICT {json}`` line per slice checked, a :class:`Verdict` (keys: the CLI contract); readers
default missing keys, since another version may have printed the line. Standard library only.
"""

# No ``from __future__ import annotations`` here: Python 3.11's TypedDict reads NotRequired only from evaluated
# annotations (stringified ones leave every key in __required_keys__).
import json
import math
import os
import re
import xml.etree.ElementTree as ET
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, NotRequired, TypedDict, cast

from raytpu.core.common import timeline
from raytpu.core.common.table import text_table
from raytpu.core.common.timeline import Stamp

MARKER = "RAYTPU_SMOKE_VERDICT"
OK_MARK = "✓"
FAIL_MARK = "✗"
JSON_NAME = "smoke.json"
JUNIT_NAME = "smoke.junit.xml"
MARKDOWN_NAME = "smoke.md"
HTML_NAME = "report.html"
FORMAT = 1
"""The ``format`` of every JSON report the kit writes; a reader refuses a newer one, none means 1."""

_LINE = re.compile(rf"{MARKER}\s+(\{{.*\}})\s*$")


class Check(TypedDict):
    """One check of a slice: ``ok`` False fails the slice unless ``informational``."""

    name: str
    ok: bool
    detail: str
    value: float | None
    expected: float | None
    informational: NotRequired[bool]  # reported, does not gate on this hardware (ok is then true)


class HostRow(TypedDict):
    """One host of a slice (by TPU worker id) and what is wrong with it."""

    worker_id: int
    node_id: str
    ip: str
    devices: int
    ok: bool
    problems: list[str]


class PerfRow(TypedDict):
    """One figure, per device and metric or slice-wide, its ``ratio`` to the reference and ``peer_ratio`` to the median.
    Keys and gating: docs/FACTS.md#spec-common."""

    metric: str
    unit: str
    worker_id: int | None
    device: int | None
    value: float | None
    reference: float | None
    ratio: float | None
    min_ratio: float | None
    gates: bool
    peer_ratio: float | None
    min_peer_ratio: float | None
    ok: bool


class DcnSection(TypedDict):
    """The DCN check of a multi-slice run, apart from the slice's ICI rows: slices, checks, per-host ``perf``, env."""

    slices: list[str]
    checks: list[Check]
    perf: list[PerfRow]
    source: str
    megascale: NotRequired[dict[str, str]]


class Verdict(TypedDict):
    """What the smoke check found on one slice: the JSON object of a verdict line (keys: docs/FACTS.md#spec-common)."""

    slice: str
    healthy: bool
    generation: str
    topology: str
    pod_type: str
    hosts_expected: int
    hosts_found: int
    duration_s: float
    checks: list[Check]
    hosts: list[HostRow]
    perf: NotRequired[list[PerfRow]]
    injected: NotRequired[list[str]]
    state: NotRequired[str]
    job: NotRequired[str]
    stamps: NotRequired[list[Stamp]]  # timeline phases the check reached (core.common.timeline): reserved, first_step
    dcn: NotRequired[DcnSection]


def format_verdict_line(verdict: Mapping[str, Any]) -> str:
    """The one line the smoke workload prints for ``verdict`` (inverse of :func:`parse_verdict_line`)."""
    return f"{MARKER} {json.dumps(dict(verdict), sort_keys=True, separators=(',', ':'))}"


LOG_KEY = "raytpu_smoke"
"""The key of the smoke result in its structured log line (Cloud Logging: ``jsonPayload.raytpu_smoke``)."""


def headline(verdict: Mapping[str, Any]) -> str:
    """What on-call reads first: ``slice X unhealthy: host 2: <problem>`` or ``slice X healthy: 4/4 hosts``."""
    state = state_of(verdict)
    head = f"slice {verdict.get('slice', '?')} {state}"
    if state == "healthy":
        return f"{head}: {verdict.get('hosts_found', '?')}/{verdict.get('hosts_expected', '?')} hosts"
    causes = [f"host {h.get('worker_id', '?')}: {'; '.join(str(p) for p in h.get('problems') or []) or 'not ok'}"
              for h in verdict.get("hosts") or [] if not h.get("ok", True)]
    found, expected = verdict.get("hosts_found"), verdict.get("hosts_expected")
    if isinstance(found, int) and isinstance(expected, int) and found < expected:
        causes.insert(0, f"{expected - found} of {expected} host(s) missing")
    causes += [f"{c.get('name', '?')}: {c.get('detail', '')}".rstrip(": ")
               for c in [*(verdict.get("checks") or []), *((verdict.get("dcn") or {}).get("checks") or [])]
               if not c.get("ok", True)]
    return f"{head}: {causes[0]}" if causes else head


def log_entry(verdict: Mapping[str, Any]) -> dict[str, Any]:
    """The verdict as one structured log line (the log-based metric counts these by state).
    Source: https://cloud.google.com/logging/docs/structured-logging (``jsonPayload``, ``severity``, ``message``)."""
    state = state_of(verdict)
    return {"severity": "ERROR" if state == "unhealthy" else "INFO", "message": headline(verdict),
            LOG_KEY: {"slice": verdict.get("slice"), "state": state, "pod_type": verdict.get("pod_type"),
                      "hosts_found": verdict.get("hosts_found"), "hosts_expected": verdict.get("hosts_expected")}}


def parse_verdict_lines(text: str) -> list[Verdict]:
    """Every verdict in a whole log, in order, after any log prefix; unparsable lines are skipped.
    An object with ``slice`` and ``healthy`` counts (the readers default the rest)."""
    found: list[Verdict] = []
    for line in text.splitlines():
        if MARKER not in line:
            continue
        match = _LINE.search(line.rstrip("\r"))
        if not match:
            continue
        try:
            data = json.loads(match.group(1))
        except json.JSONDecodeError:
            continue
        if isinstance(data, dict) and "slice" in data and "healthy" in data:
            found.append(cast(Verdict, data))
    return found


def parse_verdict_line(text: str) -> Verdict | None:
    """The last verdict in ``text`` (one line or a whole log), or None when there is none."""
    found = parse_verdict_lines(text)
    return found[-1] if found else None


def _number(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if math.isnan(value) or math.isinf(value):
            return str(value)
        return f"{value:.4g}"
    return str(value)


def _mark(ok: Any) -> str:
    return OK_MARK if ok else FAIL_MARK


def render_table(verdicts: Iterable[Mapping[str, Any]]) -> str:
    """A readable report: one summary row per slice, then one row per check (✓/✗), then bad hosts."""
    verdicts = list(verdicts)
    if not verdicts:
        return "no smoke verdicts"
    rows = [["", "slice", "pod type", "topology", "hosts", "duration"]]
    for v in verdicts:
        rows.append([_mark(v.get("healthy")), str(v.get("slice", "?")), str(v.get("pod_type", "")),
                     str(v.get("topology", "")), f"{v.get('hosts_found', '?')}/{v.get('hosts_expected', '?')}",
                     f"{float(v.get('duration_s') or 0.0):.1f}s"])
    lines = text_table(rows)
    for v in verdicts:
        lines.append("")
        state = state_of(v).replace("unhealthy", "UNHEALTHY")
        lines.append(f"{_mark(v.get('healthy'))} {v.get('slice', '?')} ({v.get('generation', '')} "
                     f"{v.get('topology', '')}): {state}")
        checks = v.get("checks") or []
        if checks:
            check_rows = [["", "check", "value", "expected", "detail"]]
            for c in checks:
                check_rows.append([_mark(c.get("ok")), str(c.get("name", "?")), _number(c.get("value")),
                                   _number(c.get("expected")), str(c.get("detail", ""))])
            lines.extend("  " + line for line in text_table(check_rows))
        perf, hidden = perf_rows(v)
        if perf:
            lines.extend("  " + line for line in text_table(perf))
            if hidden:
                lines.append(f"  ({hidden} more device rows within their thresholds; the JSON report has every row)")
        for h in v.get("hosts") or []:
            if not h.get("ok", True):
                problems = "; ".join(str(p) for p in h.get("problems") or []) or "not ok"
                lines.append(f"  {FAIL_MARK} host {h.get('worker_id', '?')} ({h.get('ip') or 'no ip'}): {problems}")
        lines.extend("  " + line for line in dcn_lines(v))
        for line in v.get("injected") or []:
            lines.append(f"  fault injection: {line}")
    healthy = sum(1 for v in verdicts if v.get("healthy"))
    lines.append("")
    lines.append(f"{healthy}/{len(verdicts)} slices healthy")
    return "\n".join(lines)


def dcn_lines(verdict: Mapping[str, Any]) -> list[str]:
    """The verdict's DCN section as its own table (empty without one), each host against the per-host figure."""
    dcn = verdict.get("dcn")
    if not dcn:
        return []
    lines = [f"DCN (cross-slice all-reduce over {', '.join(dcn.get('slices') or [])}; reference: "
             f"{dcn.get('source', '')})"]
    rows = [["", "dcn check", "value", "expected", "detail"]]
    for c in dcn.get("checks") or []:
        rows.append([_mark(c.get("ok")), str(c.get("name", "?")), _number(c.get("value")),
                     _number(c.get("expected")), str(c.get("detail", ""))])
    lines += text_table(rows)
    perf = [["", "dcn perf", "host", "value", "vs DCN per host"]]
    for r in dcn.get("perf") or []:
        perf.append([_mark(r.get("ok", True)), str(r.get("metric", "?")), str(r.get("worker_id")),
                     f"{_number(r.get('value'))} {r.get('unit', '')}".strip(),
                     _against(r.get("ratio"), r.get("min_ratio"), bool(r.get("gates")),
                              f" of {_number(r.get('reference'))}")])
    if len(perf) > 1:
        lines += text_table(perf)
    return lines


PERF_ROWS_SHOWN = 32
"""Past this many device rows, tables show only the rows that miss a threshold and the slowest device per metric."""


def _against(ratio: Any, floor: Any, gates: bool, what: str) -> str:
    if ratio is None:
        return "-"
    if floor is None:
        return f"{_number(ratio)}{what} (no threshold)"
    return f"{_number(ratio)}{what} (min {_number(floor)}, gates here: {'yes' if gates else 'no'})"


def perf_rows(verdict: Mapping[str, Any], limit: int = PERF_ROWS_SHOWN) -> tuple[list[list[str]], int]:
    """The ``perf`` rows as a table with thresholds, and how many healthy rows past ``limit`` were left out."""
    rows = list(verdict.get("perf") or [])
    if not rows:
        return [], 0
    devices = [r for r in rows if r.get("device") is not None]
    shown = rows
    if len(devices) > limit:
        slowest = {id(min((d for d in devices if d.get("metric") == m), key=lambda d: d.get("value") or 0.0))
                   for m in {d.get("metric") for d in devices}}
        shown = [r for r in rows if r.get("device") is None or not r.get("ok", True) or id(r) in slowest]
    table = [["", "perf", "host", "device", "value", "vs catalog", "vs slice median"]]
    for r in shown:
        worker = r.get("worker_id")
        table.append([_mark(r.get("ok", True)), str(r.get("metric", "?")), "slice" if worker is None else str(worker),
                      "-" if r.get("device") is None else str(r["device"]),
                      f"{_number(r.get('value'))} {r.get('unit', '')}".strip(),
                      _against(r.get("ratio"), r.get("min_ratio"), bool(r.get("gates")),
                               f" of {_number(r.get('reference'))}" if r.get("reference") is not None else ""),
                      _against(r.get("peer_ratio"), r.get("min_peer_ratio"), True, "x")])
    return table, len(rows) - len(shown)


STATES = ("healthy", "busy", "unschedulable", "unhealthy")
"""What a slice can be found in: only ``unhealthy`` means broken (a busy or capacity-starved slice is not)."""


def state_of(verdict: Mapping[str, Any]) -> str:
    """The verdict's state: its ``state`` key, else ``healthy``/``unhealthy`` from ``healthy``."""
    return str(verdict.get("state") or ("healthy" if verdict.get("healthy") else "unhealthy"))


def all_healthy(verdicts: Iterable[Mapping[str, Any]]) -> bool:
    """True when there is at least one verdict and every one is healthy."""
    verdicts = list(verdicts)
    return bool(verdicts) and all(bool(v.get("healthy")) for v in verdicts)


def junit_xml(verdicts: Iterable[Mapping[str, Any]], suite_name: str = "raytpu.smoke") -> str:
    """JUnit XML: a ``<testsuite>`` per slice, a ``<testcase>`` per check, ``<failure>`` with the detail.

    An unhealthy slice never reads green; a busy or unschedulable one is ``<skipped>`` (docs/FACTS.md#spec-common).
    """
    root = ET.Element("testsuites", name=suite_name)
    total_tests = total_failures = 0
    total_time = 0.0
    for v in verdicts:
        name = str(v.get("slice", "?"))
        cases: list[tuple[str, bool, str]] = []
        for c in [*(v.get("checks") or []), *((v.get("dcn") or {}).get("checks") or [])]:
            detail = str(c.get("detail", ""))
            if c.get("value") is not None or c.get("expected") is not None:
                detail = f"{detail} (value {_number(c.get('value'))}, expected {_number(c.get('expected'))})".strip()
            cases.append((str(c.get("name", "?")), bool(c.get("ok")), detail))
        for h in v.get("hosts") or []:
            if not h.get("ok", True):
                cases.append((f"host-{h.get('worker_id', '?')}", False,
                              "; ".join(str(p) for p in h.get("problems") or []) or "host not ok"))
        if not v.get("healthy") and all(ok for _, ok, _ in cases):
            cases.append(("slice-healthy", False, "the smoke check marked this slice unhealthy"))
        duration = float(v.get("duration_s") or 0.0)
        not_checked = state_of(v) in ("busy", "unschedulable")
        failures = 0 if not_checked else sum(1 for _, ok, _ in cases if not ok)
        suite = ET.SubElement(root, "testsuite", name=name, tests=str(len(cases)), failures=str(failures),
                              errors="0", time=f"{duration:.3f}")
        props = ET.SubElement(suite, "properties")
        for key in ("generation", "topology", "pod_type", "hosts_expected", "hosts_found"):
            ET.SubElement(props, "property", name=key, value=str(v.get(key, "")))
        for case_name, ok, detail in cases:
            case = ET.SubElement(suite, "testcase", classname=f"{suite_name}.{name}", name=case_name, time="0")
            if not ok and not_checked:
                ET.SubElement(case, "skipped", message=f"{state_of(v)}: {detail}")
            elif not ok:
                failure = ET.SubElement(case, "failure", message=detail or "failed", type="SmokeCheckFailed")
                failure.text = detail
        total_tests += len(cases)
        total_failures += failures
        total_time += duration
    root.set("tests", str(total_tests))
    root.set("failures", str(total_failures))
    root.set("errors", "0")
    root.set("time", f"{total_time:.3f}")
    ET.indent(root)
    return ET.tostring(root, encoding="unicode", xml_declaration=True) + "\n"


def render_markdown(verdicts: Iterable[Mapping[str, Any]]) -> str:
    """The smoke result as Markdown (a CI job summary): a headline row per slice, then what failed."""
    verdicts = list(verdicts)
    marks = {"healthy": OK_MARK, "busy": "⏸", "unschedulable": "⏳", "unhealthy": FAIL_MARK}
    unhealthy = sum(1 for v in verdicts if state_of(v) == "unhealthy")
    lines = [f"## TPU smoke: {len(verdicts) - unhealthy}/{len(verdicts)} slices not unhealthy", "",
             "| | slice | pod type | hosts | state |", "|---|---|---|---|---|"]
    for v in verdicts:
        lines.append(f"| {marks.get(state_of(v), '?')} | `{v.get('slice', '?')}` | {v.get('pod_type', '')} | "
                     f"{v.get('hosts_found', '?')}/{v.get('hosts_expected', '?')} | {headline(v)} |")
    failed = [(v, c) for v in verdicts for c in [*(v.get("checks") or []), *((v.get("dcn") or {}).get("checks") or [])]
              if not c.get("ok", True)]
    if failed:
        lines += ["", "| slice | failed check | value | expected | detail |", "|---|---|---|---|---|"]
        lines += [f"| `{v.get('slice', '?')}` | {c.get('name', '?')} | {_number(c.get('value'))} | "
                  f"{_number(c.get('expected'))} | {c.get('detail', '')} |" for v, c in failed]
    for v in verdicts:
        perf, hidden = perf_rows(v)
        if perf:
            lines += ["", f"`{v.get('slice', '?')}` per device and interconnect:", "",
                      "| " + " | ".join(perf[0]) + " |", "|" + "---|" * len(perf[0])]
            lines += ["| " + " | ".join(row) + " |" for row in perf[1:]]
            if hidden:
                lines += ["", f"{hidden} more device rows within their thresholds (smoke.json has every row)."]
        lines += _dcn_markdown(v)
        for line in v.get("injected") or []:
            lines += ["", f"Fault injection in `{v.get('slice', '?')}`: {line}"]
    return "\n".join(lines) + "\n"


def _dcn_markdown(verdict: Mapping[str, Any]) -> list[str]:
    """The verdict's DCN section in Markdown (none without one): its host rows against the DCN figure per host."""
    dcn = verdict.get("dcn")
    if not dcn:
        return []
    lines = ["", f"`{verdict.get('slice', '?')}` over DCN (cross-slice all-reduce over "
                 f"{', '.join(dcn.get('slices') or [])}; reference: {dcn.get('source', '')}):", "",
             "| | dcn perf | host | value | vs DCN per host |", "|---|---|---|---|---|"]
    for r in dcn.get("perf") or []:
        against = _against(r.get("ratio"), r.get("min_ratio"), bool(r.get("gates")),
                           f" of {_number(r.get('reference'))}")
        lines.append(f"| {_mark(r.get('ok', True))} | {r.get('metric', '?')} | {r.get('worker_id')} | "
                     f"{_number(r.get('value'))} {r.get('unit', '')} | {against} |")
    return lines


def write_reports(verdicts: Iterable[Mapping[str, Any]], directory: str | os.PathLike[str],
                  extra: Mapping[str, Any] | None = None,
                  timelines: Mapping[str, Mapping[str, Any]] | None = None) -> tuple[Path, Path]:
    """Writes ``smoke.json``, ``smoke.junit.xml`` and ``smoke.md`` into ``directory``; returns the JSON and JUnit paths.
    The JSON's shape: docs/FACTS.md#spec-common."""
    verdicts = [dict(v) for v in verdicts]
    out = Path(directory)
    out.mkdir(parents=True, exist_ok=True)
    json_path = out / JSON_NAME
    junit_path = out / JUNIT_NAME
    document = {"format": FORMAT, "healthy": all_healthy(verdicts), "slices": verdicts, **(extra or {}),
                **({"timelines": dict(timelines)} if timelines else {})}
    json_path.write_text(json.dumps(document, indent=2, sort_keys=True) + "\n")
    junit_path.write_text(junit_xml(verdicts))
    (out / MARKDOWN_NAME).write_text(render_markdown(verdicts) + timeline.render_markdown(timelines or {}))
    return json_path, junit_path
