"""Issue 42: the report page (raytpu/console/report_html.py) and ``raytpu report``: verdict first, chip map with the
failing chip marked, interconnect bars, timelines, self-contained; bad reports and outputs refused before anything is
written (the CLI contract's cases are in tests/bad_inputs.py)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from html_reports import (
    BIG_SLOW,
    MISSING,
    SLOW,
    a_timeline,
    big_slow_chip,
    healthy,
    missing_host,
    slow_chip,
    smoke_document,
    the_plan,
)

from raytpu.cli import main
from raytpu.console import report_html
from raytpu.core.common import report

pytestmark = pytest.mark.unit


def chips(page: str, name: str = "") -> dict[int, str]:
    """Every chip cell's class by chip number (of slice ``name``'s section: each slice numbers its chips from 0)."""
    if name:
        start = page.index(f'id="slice-{name}"')
        page = page[start:page.find("<section>", start)]
    return {int(number): cls for cls, number in
            re.findall(r'<div class="chip c-(\w+)"[^>]*><b>(?:[^<0-9]*)(\d+)</b>', page)}


def test_a_healthy_slice_is_green_and_every_section_is_there() -> None:
    page = report_html.render(smoke_document(healthy()), "smoke.json")
    assert "✓ healthy: 1 slice(s)" in page
    assert set(chips(page).values()) == {"ok"} and len(chips(page)) == the_plan().chips
    for heading in ("Slice map", "ICI (slice all-reduce, per axis)", "smoke-a: where the minutes went"):
        assert heading in page, heading
    assert "Failed checks" not in page and "data-failed=\"1\"" not in page


def test_the_slow_chip_is_marked_and_named_first() -> None:
    page = report_html.render(smoke_document(healthy(), slow_chip()), "smoke.json")
    number = SLOW[0] * the_plan().chips_per_host + SLOW[1]
    assert {n: c for n, c in chips(page, "slice-slow").items() if c != "ok"} == {number: "fail"}
    assert set(chips(page, "slice-ok").values()) == {"ok"}
    assert f"<b>✗ {number}</b>" in page  # a mark, not color alone
    assert "UNHEALTHY: 1 of 2 slice(s)" in page
    assert page.index('id="slice-slice-slow"') < page.index('id="slice-slice-ok"')  # worst first
    failed = page[page.index("Failed checks"):page.index('id="slice-slice-slow"')]
    assert "matmul_tflops_ratio" in failed and "host 2 device 1" in failed


def test_a_missing_hosts_chips_are_hatched_and_marked() -> None:
    page = report_html.render(smoke_document(missing_host()), "smoke.json")
    per_host = the_plan().chips_per_host
    missing = {n for n, c in chips(page).items() if c == "missing"}
    assert missing == set(range(MISSING * per_host, (MISSING + 1) * per_host))
    assert f"host {MISSING} ✗ missing" in page and f"<b>? {MISSING * per_host}</b>" in page
    assert "hosts_present" in page and "3/4 hosts" in page


def test_the_timeline_bar_is_as_wide_as_each_phase_and_lists_every_phase() -> None:
    page = report_html.render(smoke_document(healthy()), "smoke.json")
    widths = [float(w) for w in re.findall(r'class="ph[^"]*"[^>]*style="width:([\d.]+)%', page)]
    assert sum(widths) == pytest.approx(100, abs=0.1)
    assert all(f"<td>{phase}</td>" in page for phase in ("applied", "nodes_ready", "finished"))


def test_markup_in_a_report_is_escaped_and_nothing_is_fetched() -> None:
    verdict = slow_chip("<script>alert(1)</script>")
    verdict["checks"][0]["detail"] = '"><img src=https://evil.example/x>'
    page = report_html.render(smoke_document(verdict), "smoke.json")
    assert "<script" not in page and "<img" not in page
    assert not re.search(r'(src|href)\s*=\s*["\']?\s*(https?:)?//', page)
    assert "@import" not in page and "url(" not in page


@pytest.mark.parametrize("document,runs,slices", [
    ({"slices": [], "timeline": a_timeline()}, ["smoke"], 0),  # local smoke --json (format absent: format 1)
    ({"steps": [], "smoke": [healthy()], "timeline": a_timeline(), "preemption": {"timeline": a_timeline()}},
     ["demo", "preemption"], 1),
    ({"run": "train-7", "timeline": a_timeline(), "format": 1}, ["train-7"], 0),
])
def test_every_kind_of_report_renders(document: dict, runs: list[str], slices: int) -> None:
    _, verdicts, timelines = report_html.parts(document)
    assert list(timelines) == runs and len(verdicts) == slices
    page = report_html.render(document, "r.json")
    assert all(f"{run}: where the minutes went" in page for run in runs)


def test_raytpu_report_writes_the_page_beside_the_json(tmp_path: Path) -> None:
    source = tmp_path / "smoke.json"
    source.write_text(json.dumps(smoke_document(slow_chip())))
    assert main(["report", str(source)]) == 0
    page = (tmp_path / "smoke.html").read_text()
    assert page.startswith("<!DOCTYPE html>") and report_html.GENERATOR in page
    assert main(["report", str(source), "--out", str(tmp_path / "smoke.html")]) == 0  # its own page: replaced
    assert sorted(p.name for p in tmp_path.iterdir()) == ["smoke.html", "smoke.json"]  # no temporary left


def test_write_reports_and_write_beside_give_report_html(tmp_path: Path) -> None:
    json_path, _ = report.write_reports([missing_host()], tmp_path, timelines={"smoke": a_timeline()})
    assert json.loads(json_path.read_text())["format"] == report.FORMAT
    page = report_html.write_beside(json_path)
    assert page == tmp_path / "report.html" and "UNHEALTHY" in page.read_text()


@pytest.mark.parametrize("content,out,field,words", [
    ("{\"slices\": [", None, "FILE", "truncated"),
    ("[1, 2]", None, "FILE", "not a report"),
    ("{\"config\": \"x\"}", None, "FILE", "not a report"),
    ("{\"slices\": [1]}", None, "FILE", "not a list of verdicts"),
    ("{\"format\": 2, \"slices\": []}", None, "FILE", "newer than this kit reads"),
    ("{\"format\": \"one\", \"slices\": []}", None, "FILE", "not a report format"),
    ("{\"slices\": [], \"timelines\": {\"a\": 3}}", None, "FILE", "timeline"),
    # issue 68 item 5: hostile reports, exit 2 naming the file and where in it
    (json.dumps({"slices": [{"slice": "a", "healthy": False, "checks": ["hosts", "psum"]}]}), None, "FILE",
     "slices[0].checks[0] is a string, not an object"),
    (json.dumps({"slices": [{"slice": "a", "healthy": True, "checks": "all"}]}), None, "FILE",
     "slices[0].checks is a string, not a list of objects"),
    (json.dumps({"slices": [{"slice": "a", "healthy": False, "hosts": [3]}]}), None, "FILE",
     "slices[0].hosts[0] is a number"),
    (json.dumps({"slices": [{"slice": "a", "healthy": False, "perf": {"a": 1}}]}), None, "FILE",
     "slices[0].perf is an object"),
    (json.dumps({"slices": [{"slice": "a", "healthy": False, "dcn": ["x"]}]}), None, "FILE", "slices[0].dcn is a list"),
    (json.dumps({"slices": [{"slice": "a", "healthy": False, "dcn": {"checks": [None]}}]}), None, "FILE",
     "slices[0].dcn.checks[0] is null"),
    (json.dumps({"slices": [{"slice": "a", "healthy": False, "hosts": [{"ok": False, "problems": 7}]}]}), None,
     "FILE", "slices[0].hosts[0].problems is a number, not a list"),
    (json.dumps({"slices": [{"slice": "a", "healthy": True, "injected": "x"}]}), None, "FILE",
     "slices[0].injected is a string"),
    (json.dumps({"steps": [], "smoke": [{"slice": "a", "healthy": False, "checks": [1]}]}), None, "FILE",
     "smoke[0].checks[0] is a number"),
    ("[" * 5000 + "]" * 5000, None, "FILE", "deeper than 32 levels"),
    ("{\"slices\": [], \"timeline\": " + "{\"a\": " * 5000 + "1" + "}" * 5001, None, "FILE", "deeper than 32"),
    ("{\"slices\": [], \"timeline\": " + "{\"a\": " * 40 + "1" + "}" * 41, None, "FILE", "deeper than 32"),
    ("{\"slices\": []}", "page.txt", "--out", "does not end in .html"),
    ("{\"slices\": []}", "nope/page.html", "--out", "does not exist"),
    ("{\"slices\": []}", "mine.html", "--out", "not a page raytpu wrote"),
    ("{\"slices\": []}", "dir.html", "--out", "not a regular file"),
    ("{\"slices\": []}", "/proc/page.html", "--out", "cannot write"),
])
def test_a_bad_report_or_output_exits_2_naming_it_and_writes_nothing(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], content: str, out: str | None, field: str,
        words: str) -> None:
    source = tmp_path / "r.json"
    source.write_text(content)
    (tmp_path / "mine.html").write_text("<p>my notes</p>")
    (tmp_path / "dir.html").mkdir()
    before = {p.name: p.read_bytes() if p.is_file() else None for p in tmp_path.iterdir()}
    argv = ["report", str(source)] + (["--out", out if out.startswith("/") else str(tmp_path / out)] if out else [])
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: {field}: ") and words in err and "Traceback" not in err
    assert {p.name: p.read_bytes() if p.is_file() else None for p in tmp_path.iterdir()} == before


def test_a_doctor_json_nested_5000_deep_beside_a_report_only_leaves_its_section_out(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    source = tmp_path / "smoke.json"
    source.write_text(json.dumps(smoke_document(healthy())))
    (tmp_path / report_html.DOCTOR_NAME).write_text('{"checks": ' + "[" * 5000 + "]" * 5000 + "}")
    assert main(["report", str(source)]) == 0
    assert "Traceback" not in capsys.readouterr().err and 'id="doctor"' not in (tmp_path / "smoke.html").read_text()


@pytest.mark.parametrize("error", [TypeError("unsupported operand"), AttributeError("'str' object has no 'get'"),
                                   KeyError("x"), RecursionError("maximum recursion depth exceeded")])
def test_a_report_the_page_cannot_draw_is_exit_2_naming_it_and_writes_nothing(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
        error: Exception) -> None:
    """A value of a shape read() did not foresee: still one line naming FILE (RAYTPU_DEBUG=1 shows the cause)."""
    source = tmp_path / "smoke.json"
    source.write_text(json.dumps(smoke_document(healthy())))

    def render(*args: object) -> str:
        raise error

    monkeypatch.setattr(report_html, "render", render)
    assert main(["report", str(source)]) == 2
    err = capsys.readouterr().err
    (line,) = err.splitlines()
    assert line.startswith(f"error: FILE: '{source}' is not a report this kit can render ({type(error).__name__}")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["smoke.json"]


def test_a_v6e_16x16_map_is_compact_and_still_marks_its_slow_chip() -> None:
    """256 chips fit a screen: numbers only (figures in the tooltip), the failing chip and its host still marked."""
    page = report_html.render(smoke_document(big_slow_chip()), "smoke.json")
    number = BIG_SLOW[0] * 4 + BIG_SLOW[1]
    assert '<div class="hosts compact">' in page and len(chips(page)) == 256
    assert {n: c for n, c in chips(page).items() if c != "ok"} == {number: "fail"}
    assert f"<b>✗ {number}</b>" in page and f'<div class="host bad" title="host {BIG_SLOW[0]} ' in page


def test_a_v6e_2x4_on_two_4_chip_hosts_is_drawn_as_two_hosts_of_4() -> None:
    """The verdict names no machine type: v6e 2x4 is one 8-chip host by default, two 4-chip hosts on
    ct6e-standard-4t (the emulated slice found the map wrong when it took the default's chips per host)."""
    from test_smoke_unit import judged, result

    from raytpu.core.tpu.catalog import generation
    from raytpu.core.tpu.plan import plan_slice

    plan = plan_slice("v6e", "2x4", generation("v6e").multi_host_machine_type.name)
    results = {w: result(plan, w) for w in range(plan.hosts)}
    results[1]["matmul_tflops"][2] *= 0.5
    page = report_html.render(smoke_document(judged(plan, results)), "smoke.json")
    assert page.count('<div class="hl">') == 2 and len(chips(page)) == 8
    assert {n: c for n, c in chips(page).items() if c != "ok"} == {6: "fail"}


def test_a_team_runs_result_and_its_overrides_are_on_the_page() -> None:
    """Issue 68 item 6: a ``submit --report`` of a team's ``train_loop`` run with ``--set`` (as the example's README
    says the report shows them): the run's result and what was overridden, escaped."""
    document = {"format": 1, "run": "pretrain-r1", "overrides": {"train_config.steps": 20},
                "timeline": {"started_at": "2026-12-07T10:00:00+00:00", "wall_s": 10.0, "phases": []},
                "train": {"train_loop": "lm.train:train_loop", "ok": True, "metrics": {"loss": 1.5, "step": 20},
                          "checkpoint": "/run/checkpoints/pretrain-r1/checkpoint_x", "reports": 20,
                          "attempts": [{"resumed": False}, {"resumed": True}]}}
    page = report_html.render(document, "report.json")
    assert "the run&#x27;s result" in page or "the run's result" in page
    assert "--set train_config.steps</td><td>20" in page
    assert "lm.train:train_loop" in page and "&quot;loss&quot;: 1.5" in page and "2 (fresh, resumed)" in page
    assert report_html.result_section({"timeline": {}}) == ""
