"""Reports of emulated v6e 4x4 slices for the HTML page's tests (issue 42): healthy, one chip slow, one host
missing, each verdict made by the smoke workload's own judge and driver from made-up host results (the helpers of
tests/test_smoke_unit.py), with a timeline as the recorder writes it; and the page in headless Chromium (Debian's
package; ``make setup`` installs it as root, else the browser tests skip, saying so)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
from test_smoke_unit import args, judged, node, result

from raytpu.console import report_html
from raytpu.core.common import report, timeline
from raytpu.core.tpu.plan import SlicePlan, plan_slice
from raytpu.workloads.smoke import driver
from raytpu.workloads.support import slices

SLOW = (2, 1)
"""The slow chip: host 2's device 1 (chip 9 of the map)."""
MISSING = 2
"""The worker id of the missing host."""


def the_plan() -> SlicePlan:
    return plan_slice("v6e", "4x4")


def healthy(name: str = "slice-ok") -> report.Verdict:
    plan = the_plan()
    verdict = judged(plan, {w: result(plan, w) for w in range(plan.hosts)})
    verdict["slice"] = name
    return verdict


def slow_chip(name: str = "slice-slow") -> report.Verdict:
    plan = the_plan()
    results = {w: result(plan, w) for w in range(plan.hosts)}
    results[SLOW[0]]["matmul_tflops"][SLOW[1]] *= 0.5
    verdict = judged(plan, results)
    verdict["slice"] = name
    return verdict


BIG_SLOW = (37, 2)
"""The slow chip of the v6e 16x16 slice (64 hosts of 4 chips): host 37's device 2, chip 150."""


def big_slow_chip(name: str = "v6e-256") -> report.Verdict:
    """A v6e 16x16 (256 chips) with one chip at 0.6 of its peers: the nightly's big slice."""
    plan = plan_slice("v6e", "16x16")
    results = {w: result(plan, w) for w in range(plan.hosts)}
    results[BIG_SLOW[0]]["matmul_tflops"][BIG_SLOW[1]] *= 0.6
    verdict = judged(plan, results)
    verdict["slice"] = name
    return verdict


def missing_host(name: str = "slice-gone") -> report.Verdict:
    plan = the_plan()
    present = [w for w in range(plan.hosts) if w != MISSING]
    inventory = slices.SliceInventory(name, {w: node(plan, name, w) for w in present}, plan.hosts)
    return driver.check_slice(plan, inventory, args())


def a_timeline() -> timeline.Timeline:
    clock = iter([0.0, 0.5, 2.0, 9.5, 31.0, 40.0])
    recorder = timeline.Recorder(monotonic=lambda: next(clock), wall=lambda: 1.7e9)
    recorder.mark("applied", "RayJob applied")
    recorder.mark("scheduled", "every pod bound")
    recorder.absent("nodes_ready", "no nodes on the emulated slice")
    recorder.mark("ray_joined", "4 hosts joined", timeline.EMULATED)
    recorder.mark("reserved", "slice reserved")
    return recorder.finish("verdicts read")


def smoke_document(*verdicts: report.Verdict) -> dict[str, Any]:
    """What ``report.write_reports`` writes to smoke.json for ``verdicts``."""
    return {"format": report.FORMAT, "healthy": report.all_healthy(verdicts), "slices": list(verdicts),
            "stack": "ray-tpu-cluster", "timelines": {"smoke-a": a_timeline()}}


CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
SHOTS = Path(__file__).resolve().parents[1] / "reports" / "report-html"
"""Where the screenshots are left for a reviewer (reports/ is ignored by git)."""
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


def in_chromium(folder: Path, name: str, document: Mapping[str, Any]) -> str:
    """Renders ``document``'s page into ``folder``, loads it in Chromium (no console error allowed), saves its
    screenshot as ``SHOTS/<name>.png`` and returns the DOM the browser built."""
    page = folder / f"{name}.html"
    report_html.write(page, report_html.render(document, f"{name}.json"))
    dom = browse(page, "--dump-dom")
    assert not console_errors(dom.stderr), console_errors(dom.stderr)
    SHOTS.mkdir(parents=True, exist_ok=True)
    shot = SHOTS / f"{name}.png"
    shot.unlink(missing_ok=True)
    browse(page, f"--screenshot={shot}", "--window-size=1400,1000", "--hide-scrollbars")
    assert shot.stat().st_size > 10_000 and shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    return dom.stdout


def marked(dom: str) -> tuple[list[int], list[int]]:
    """The chips the page marks as failing (✗) and as on a host that gave no figures (?), by number."""
    failed = re.findall(r'class="chip c-fail" data-failed="1"[^>]*><b>✗ (\d+)</b>', dom)
    gone = re.findall(r'class="chip c-missing" data-missing="1"[^>]*><b>\? (\d+)</b>', dom)
    return [int(n) for n in failed], [int(n) for n in gone]
