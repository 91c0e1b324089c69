"""Issue 42: the report pages in a real browser (Debian's headless Chromium): healthy and unhealthy emulated slices
(one chip slow, one host missing) render with no console error, the failing chip and the missing host are marked in
the DOM the browser built, and a screenshot of each is saved under reports/ for a reviewer.

Unit tier: ``make setup`` installs Chromium where apt-get can (root); elsewhere these tests skip, saying so.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from html_reports import MISSING, SLOW, healthy, missing_host, slow_chip, smoke_document, the_plan

from raytpu import report_html

pytestmark = pytest.mark.unit

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
SHOTS = Path(__file__).resolve().parents[1] / "reports" / "report-html"
PAGES = {"healthy": lambda: smoke_document(healthy()),
         "unhealthy": lambda: smoke_document(healthy(), slow_chip(), missing_host())}
needs_chromium = pytest.mark.skipif(CHROMIUM is None, reason="no chromium on PATH (Debian's `chromium` package: "
                                    "`make setup` installs it as root with apt-get; not root here, or no apt-get)")


def browse(page: Path, *flags: str) -> subprocess.CompletedProcess[str]:
    """Headless Chromium on ``page`` with its console logged to stderr (``--enable-logging=stderr --v=0``)."""
    assert CHROMIUM is not None
    sandbox = ["--no-sandbox"] if os.geteuid() == 0 else []  # Chromium refuses to run as root with its sandbox
    return subprocess.run([CHROMIUM, "--headless=new", *sandbox, "--disable-gpu", "--no-first-run",
                           "--enable-logging=stderr", "--v=0", f"--user-data-dir={page.parent / 'profile'}",
                           *flags, page.as_uri()], capture_output=True, text=True, timeout=60, check=True)


def console_errors(stderr: str) -> list[str]:
    """Console messages and page errors Chromium logged (``CONSOLE(...)`` lines; D-Bus noise is not the page's)."""
    return [line for line in stderr.splitlines() if "CONSOLE" in line or "Uncaught" in line]


@needs_chromium
@pytest.mark.parametrize("name", sorted(PAGES))
def test_the_page_renders_in_chromium_with_no_console_error_and_marks_what_failed(name: str, tmp_path: Path) -> None:
    page = tmp_path / f"{name}.html"
    report_html.write(page, report_html.render(PAGES[name](), f"{name}.json"))
    dom = browse(page, "--dump-dom")
    assert not console_errors(dom.stderr), console_errors(dom.stderr)
    failed = re.findall(r'class="chip c-fail" data-failed="1"[^>]*><b>✗ (\d+)</b>', dom.stdout)
    gone = re.findall(r'class="chip c-missing" data-missing="1"[^>]*><b>\? (\d+)</b>', dom.stdout)
    per_host = the_plan().chips_per_host
    if name == "healthy":
        assert (failed, gone) == ([], []) and "✓ healthy" in dom.stdout
    else:
        assert [int(n) for n in failed] == [SLOW[0] * per_host + SLOW[1]]
        assert [int(n) for n in gone] == list(range(MISSING * per_host, (MISSING + 1) * per_host))
    SHOTS.mkdir(parents=True, exist_ok=True)
    shot = SHOTS / f"{name}.png"
    shot.unlink(missing_ok=True)
    browse(page, f"--screenshot={shot}", "--window-size=1400,1000", "--hide-scrollbars")
    assert shot.stat().st_size > 10_000 and shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@needs_chromium
def test_the_console_check_sees_a_script_error(tmp_path: Path) -> None:
    """The check above is not vacuous: a page whose script fails is caught by it."""
    page = tmp_path / "broken.html"
    page.write_text("<html><body><script>console.error('boom'); nope();</script></body></html>")
    assert len(console_errors(browse(page, "--dump-dom").stderr)) == 2
