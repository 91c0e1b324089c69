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


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Adds ``FILE`` and ``--out``."""
    from raytpu.console import argtypes

    parser.add_argument("file", metavar="FILE", type=argtypes.path, help="the JSON report")
    parser.add_argument("--out", default=None, type=argtypes.path,
                        help="the page to write (default: FILE with .html in place of .json)")


def run(args: argparse.Namespace) -> int:
    """Checks ``--out``, reads the report, renders and writes the page."""
    from raytpu.console import report_html

    source = Path(args.file)
    out = out_path(source, args.out)
    document = read(source)
    report_html.write(out, report_html.render(document, str(source), report_html.doctor_beside(source)))
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
    from raytpu.core.common.errors import InvalidInput, excerpt, invalid_value

    shown = excerpt(str(source), 200, tail=True)
    text = read_text(source, "FILE", VALID, limit=MAX_REPORT_BYTES)
    try:
        document = json.loads(text)
    except json.JSONDecodeError as exc:
        ends = exc.pos >= len(text.rstrip()) or exc.msg.startswith("Unterminated string")
        truncated = ": it ends early (truncated?)" if ends else ""
        raise InvalidInput("FILE", f"{shown} is not JSON{truncated}: {exc.msg} (line {exc.lineno}, column "
                           f"{exc.colno})", VALID) from exc
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
    timelines = [document.get("timeline"), *(document.get("timelines") or {}).values()] \
        if isinstance(document.get("timelines") or {}, dict) else [None, "not an object"]
    if not all(t is None or (isinstance(t, dict) and isinstance(t.get("phases", []), list)) for t in timelines):
        return "a timeline is not an object with a list of phases"
    return ""


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
