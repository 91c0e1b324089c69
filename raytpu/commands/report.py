"""``raytpu report FILE.json [--out FILE.html]``: a saved smoke, demo or submit report as one self-contained page.

The output path is checked before the report is read (exit 2 naming ``--out``); a report that is not JSON, not a
report, or from a newer kit (its ``format``) exits 2 naming ``FILE``. The page is written atomically and never
replaces a file the kit did not write (:data:`raytpu.console.report_html.GENERATOR`).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

HELP = "render a saved smoke, demo or submit JSON report as one self-contained HTML page"

MAX_REPORT_BYTES = 64 << 20
"""The largest report read (64 MiB): a v6e 16x16 smoke.json with every chip's figures is under 1 MiB."""

VALID = "a report the kit wrote: smoke.json, `local smoke --json`, demo.json or `submit --wait --report`"
MAX_REPORT_DEPTH = 32
"""The deepest nesting of lists and objects read (the kit's reports nest 6 levels): deeper is no report, and Python's
JSON reader and ``str`` would recurse through it."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Adds ``FILE`` and ``--out``."""
    from raytpu.console import argtypes

    parser.add_argument("file", metavar="FILE", type=argtypes.path, help="the JSON report")
    parser.add_argument("--out", default=None, type=argtypes.path,
                        help="the page to write (default: FILE with .html in place of .json)")


def run(args: argparse.Namespace) -> int:
    """Checks ``--out``, reads the report, renders and writes the page."""
    from raytpu.console import report_html
    from raytpu.core.common.errors import InvalidInput, excerpt

    source = Path(args.file)
    out = out_path(source, args.out)
    document = read(source)
    try:
        page = report_html.render(document, str(source), report_html.doctor_beside(source))
    except (TypeError, AttributeError, KeyError, IndexError, ValueError, RecursionError) as exc:
        # read() refuses the shapes the page cannot draw; a value of a shape it did not foresee still names the file
        raise InvalidInput("FILE", f"{excerpt(str(source), 200, tail=True)} is not a report this kit can render "
                           f"({type(exc).__name__}: {excerpt(str(exc), 120)})", VALID) from exc
    report_html.write(out, page)
    print(f"wrote {out}", file=sys.stderr)
    return 0


def out_path(source: Path, given: str | None) -> Path:
    """Where the page goes; InvalidInput naming ``--out`` when it cannot be written there or would replace the
    report itself or a file the kit did not write."""
    from raytpu.console import report_html
    from raytpu.core.common.errors import InvalidInput, excerpt

    out = Path(given) if given else source.with_suffix(".html")
    shown = excerpt(str(out), 200, tail=True)
    valid = "an .html path in a folder you can write, new or a page `raytpu report` wrote"
    if out.suffix.lower() not in (".html", ".htm"):
        raise InvalidInput("--out", f"{shown} does not end in .html", valid)
    if out.exists() and source.exists() and out.resolve() == source.resolve():
        raise InvalidInput("--out", f"{shown} is the report itself", valid)
    if not out.parent.is_dir():
        raise InvalidInput("--out", f"{shown} is in a directory that does not exist", valid)
    if out.is_symlink() or (out.exists() and not out.is_file()):
        raise InvalidInput("--out", f"{shown} is not a regular file", valid)
    if out.exists():
        try:
            with out.open("rb") as handle:
                head = handle.read(4096)
        except OSError as exc:
            raise InvalidInput("--out", f"{shown} cannot be read ({exc.strerror})", valid) from exc
        if f'content="{report_html.GENERATOR}"'.encode() not in head:
            raise InvalidInput("--out", f"{shown} exists and is not a page raytpu wrote", valid)
    _probe(out.parent, shown, valid)
    return out


def read(source: Path) -> Mapping[str, Any]:
    """The report in ``source``; InvalidInput naming ``FILE`` when it is not JSON, not a report, or newer."""
    from raytpu.config.reading import read_text
    from raytpu.core.common import report
    from raytpu.core.common.errors import InvalidInput, excerpt, invalid_value, nesting

    shown = excerpt(str(source), 200, tail=True)
    text = read_text(source, "FILE", VALID, limit=MAX_REPORT_BYTES)
    deep = InvalidInput("FILE", f"{shown} nests lists and objects deeper than {MAX_REPORT_DEPTH} levels, which no "
                        "report does", VALID)
    try:
        document = json.loads(text)
    except json.JSONDecodeError as exc:
        ends = exc.pos >= len(text.rstrip()) or exc.msg.startswith("Unterminated string")
        truncated = ": it ends early (truncated?)" if ends else ""
        raise InvalidInput("FILE", f"{shown} is not JSON{truncated}: {exc.msg} (line {exc.lineno}, column "
                           f"{exc.colno})", VALID) from exc
    except RecursionError as exc:  # Python's JSON reader recurses once per level
        raise deep from exc
    if nesting(document, MAX_REPORT_DEPTH) > MAX_REPORT_DEPTH:
        raise deep
    made = document.get("format", report.FORMAT) if isinstance(document, dict) else report.FORMAT
    if isinstance(made, bool) or not isinstance(made, int) or made < 1:
        raise invalid_value("FILE", made, f"is not a report format (in {shown})", f"1..{report.FORMAT}")
    if made > report.FORMAT:
        raise InvalidInput("FILE", f"{shown} is format {made}, newer than this kit reads",
                           f"format 1..{report.FORMAT}: render it with the kit that wrote it, or upgrade raytpu")
    problem = _not_a_report(document)
    if problem:
        raise InvalidInput("FILE", f"{shown} is not a report: {problem}", VALID)
    return document


def _not_a_report(document: Any) -> str:
    """Why ``document`` is not one of the kit's reports (empty when it is)."""
    if not isinstance(document, dict):
        return f"its top level is a {type(document).__name__}, not an object"
    verdicts = document.get("slices", document.get("smoke", []))
    if not ({"slices", "steps", "timeline", "timelines"} & set(document)):
        return "it has none of the keys slices, steps, timeline, timelines"
    if not isinstance(verdicts, list) or not all(isinstance(v, dict) and "slice" in v for v in verdicts):
        return "its slices are not a list of verdicts"
    key = "slices" if "slices" in document else "smoke"
    for i, verdict in enumerate(verdicts):
        if wrong := _verdict_shape(verdict, f"{key}[{i}]"):
            return wrong
    timelines = [document.get("timeline"), *(document.get("timelines") or {}).values()] \
        if isinstance(document.get("timelines") or {}, dict) else [None, "not an object"]
    if not all(t is None or (isinstance(t, dict) and isinstance(t.get("phases", []), list)) for t in timelines):
        return "a timeline is not an object with a list of phases"
    return ""


_OBJECT_LISTS = ("checks", "hosts", "perf")
"""A verdict's lists of objects (:class:`raytpu.core.common.report.Verdict`; its ``dcn`` holds ``checks`` and
``perf``): the page reads each item's keys."""


def _verdict_shape(verdict: Mapping[str, Any], where: str) -> str:
    """Where a verdict is not shaped as the kit writes one (empty when it is): each of its lists of objects a list
    of objects, its ``dcn`` an object, a host's ``problems`` and ``injected`` lists."""
    dcn = verdict.get("dcn")
    if dcn is not None and not isinstance(dcn, dict):
        return f"{where}.dcn is {_json_type(dcn)}, not an object"
    parts = [(f"{where}.{k}", verdict.get(k)) for k in _OBJECT_LISTS]
    parts += [(f"{where}.dcn.{k}", dcn.get(k)) for k in ("checks", "perf")] if dcn else []
    for path, items in parts:
        if items is None:
            continue
        if not isinstance(items, list):
            return f"{path} is {_json_type(items)}, not a list of objects"
        for j, item in enumerate(items):
            if not isinstance(item, dict):
                return f"{path}[{j}] is {_json_type(item)}, not an object"
    lists = [(f"{where}.injected", verdict.get("injected"))]
    lists += [(f"{where}.hosts[{j}].problems", h.get("problems")) for j, h in enumerate(verdict.get("hosts") or [])]
    return next((f"{path} is {_json_type(value)}, not a list" for path, value in lists
                 if value is not None and not isinstance(value, list)), "")


def _json_type(value: Any) -> str:
    """``value``'s JSON type, with its article (``a string``)."""
    return {bool: "a boolean", int: "a number", float: "a number", str: "a string", list: "a list",
            dict: "an object"}.get(type(value), "null")


def _probe(folder: Path, shown: str, valid: str) -> None:
    """Creates and removes a file in ``folder``: as root ``os.access`` says yes even where a write fails."""
    import tempfile

    from raytpu.core.common.errors import InvalidInput

    try:
        fd, probe = tempfile.mkstemp(prefix=".raytpu-report-", dir=folder)
    except OSError as exc:
        raise InvalidInput("--out", f"{shown} is in a folder you cannot write ({exc.strerror})", valid) from exc
    os.close(fd)
    os.unlink(probe)
