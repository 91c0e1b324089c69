"""Unit tests of raytpu.core.common.report: verdict lines in logs, the table, JSON and JUnit XML reports."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest

from raytpu.core.common import report

pytestmark = pytest.mark.unit


def verdict(name: str = "tpu-slice-a", healthy: bool = True, **extra: Any) -> dict[str, Any]:
    """A verdict as the smoke workload prints it; unhealthy ones miss host 3."""
    checks = [
        {"name": "hosts", "ok": healthy, "detail": "" if healthy else "host 3 missing", "value": 4 if healthy else 3,
         "expected": 4},
        {"name": "psum", "ok": True, "detail": "all-reduce of ones", "value": 16.0, "expected": 16.0},
        {"name": "matmul_tflops_ratio", "ok": True, "detail": "", "value": 0.61234, "expected": None},
    ]
    hosts = [{"worker_id": i, "node_id": f"n{i}", "ip": f"10.0.0.{i}", "devices": 4, "ok": True, "problems": []}
             for i in range(3)]
    hosts.append({"worker_id": 3, "node_id": "n3" if healthy else "", "ip": "10.0.0.3" if healthy else "",
                  "devices": 4 if healthy else 0, "ok": healthy, "problems": [] if healthy else ["host missing"]})
    return {"slice": name, "healthy": healthy, "generation": "v6e", "topology": "4x4", "pod_type": "v6e-16",
            "hosts_expected": 4, "hosts_found": 4 if healthy else 3, "duration_s": 21.5, "checks": checks,
            "hosts": hosts, **extra}


def test_the_verdict_keys_are_the_cli_contract() -> None:
    """Verdict lines and smoke.json carry exactly these keys (readers in CI and on-call depend on them)."""
    assert (report.Verdict.__required_keys__, report.Verdict.__optional_keys__) == (
        {"slice", "healthy", "generation", "topology", "pod_type", "hosts_expected", "hosts_found", "duration_s",
         "checks", "hosts"}, {"perf", "injected", "state", "job", "stamps", "dcn"})
    assert (report.DcnSection.__required_keys__, report.DcnSection.__optional_keys__) == (
        {"slices", "checks", "perf", "source"}, {"megascale"})
    assert (report.Check.__required_keys__, report.Check.__optional_keys__) == (
        {"name", "ok", "detail", "value", "expected"}, {"informational"})
    assert (report.HostRow.__required_keys__, report.HostRow.__optional_keys__) == (
        {"worker_id", "node_id", "ip", "devices", "ok", "problems"}, set())
    assert (report.PerfRow.__required_keys__, report.PerfRow.__optional_keys__) == (
        {"metric", "unit", "worker_id", "device", "value", "reference", "ratio", "min_ratio", "gates", "peer_ratio",
         "min_peer_ratio", "ok"}, set())


@pytest.mark.parametrize("prefix", ["", "(SmokeDriver pid=12) ", "2026-11-30 04:00:00,000 INFO ", "\t"])
def test_parse_verdict_line_finds_the_line_in_a_log(prefix: str) -> None:
    v = verdict()
    log = f"starting\nRAYTPU_SMOKE_VERDICT is coming\n{prefix}{report.format_verdict_line(v)}\ndone\n"
    assert report.parse_verdict_line(log) == v


@pytest.mark.parametrize("text", ["", "nothing here", "RAYTPU_SMOKE_VERDICT {not json}",
                                  'RAYTPU_SMOKE_VERDICT {"healthy": true}', "RAYTPU_SMOKE_VERDICT [1]"])
def test_parse_verdict_line_returns_none_without_a_valid_verdict(text: str) -> None:
    assert report.parse_verdict_line(text) is None


def test_parse_verdict_lines_keeps_every_slice_in_order_and_line_returns_last() -> None:
    a, b = verdict("a"), verdict("b", healthy=False)
    log = "\r\n".join([report.format_verdict_line(a), "noise", report.format_verdict_line(b)]) + "\r\n"
    assert report.parse_verdict_lines(log) == [a, b]
    assert report.parse_verdict_line(log) == b


def test_render_table_has_a_row_per_slice_and_check_with_marks() -> None:
    text = report.render_table([verdict("good"), verdict("bad", healthy=False)])
    lines = text.splitlines()
    assert any(line.startswith("✓") and "good" in line and "4/4" in line for line in lines)
    assert any(line.startswith("✗") and "bad" in line and "3/4" in line for line in lines)
    assert "✗ bad (v6e 4x4): UNHEALTHY" in text
    assert any("✗" in line and "hosts" in line and "host 3 missing" in line and " 3 " in line for line in lines)
    assert any("✓" in line and "psum" in line and "16" in line for line in lines)
    assert any(line.split()[1:] == ["matmul_tflops_ratio", "0.6123", "-"] for line in lines if "matmul" in line)
    assert "✗ host 3 (no ip): host missing" in text
    assert lines[-1] == "1/2 slices healthy"


def test_render_table_without_verdicts() -> None:
    assert report.render_table([]) == "no smoke verdicts"


def test_all_healthy_needs_at_least_one_verdict() -> None:
    assert report.all_healthy([verdict()])
    assert not report.all_healthy([verdict(), verdict(healthy=False)])
    assert not report.all_healthy([])


def test_write_reports_writes_json_and_valid_junit(tmp_path: Path) -> None:
    json_path, junit_path = report.write_reports([verdict("good"), verdict("bad", healthy=False)],
                                                 tmp_path / "out", extra={"stack": "s"})
    assert (json_path.name, junit_path.name) == ("smoke.json", "smoke.junit.xml")
    doc = json.loads(json_path.read_text())
    assert doc["healthy"] is False and doc["stack"] == "s"
    assert [v["slice"] for v in doc["slices"]] == ["good", "bad"]

    root = ET.parse(junit_path).getroot()
    assert root.tag == "testsuites"
    suites = root.findall("testsuite")
    assert [s.get("name") for s in suites] == ["good", "bad"]
    good, bad = suites
    assert [c.get("name") for c in good.findall("testcase")] == ["hosts", "psum", "matmul_tflops_ratio"]
    assert good.get("failures") == "0" and good.find("testcase/failure") is None
    failures = bad.findall("testcase/failure")
    assert bad.get("failures") == str(len(failures)) == "2"
    assert "host 3 missing" in (failures[0].text or "") and "value 3, expected 4" in failures[0].get("message", "")
    assert [c.get("name") for c in bad.findall("testcase") if c.find("failure") is not None] == ["hosts", "host-3"]
    assert root.get("tests") == "7" and root.get("failures") == "2"
    props = {p.get("name"): p.get("value") for p in bad.findall("properties/property")}
    assert props["pod_type"] == "v6e-16" and props["hosts_found"] == "3"


def test_unhealthy_verdict_without_failed_checks_still_fails_in_junit() -> None:
    v = verdict()
    v["healthy"] = False
    root = ET.fromstring(report.junit_xml([v]))
    assert [c.get("name") for c in root.iter("testcase") if c.find("failure") is not None] == ["slice-healthy"]


def test_junit_escapes_markup_in_details() -> None:
    v = verdict(healthy=False)
    v["checks"][0]["detail"] = "<host> & \"3\" missing ]]>"
    root = ET.fromstring(report.junit_xml([v]))
    assert root.find("testsuite/testcase/failure").text.startswith("<host> & \"3\" missing ]]>")  # type: ignore[union-attr]


def test_the_headline_names_the_first_cause_and_the_log_entry_is_cloud_loggings_shape() -> None:
    """Cloud Logging reads a JSON line of a container's stdout as jsonPayload, with ``severity`` and ``message``
    special (https://cloud.google.com/logging/docs/structured-logging)."""
    missing = verdict("s1", healthy=False, hosts_found=3, hosts_expected=4)
    assert report.headline(missing) == "slice s1 unhealthy: 1 of 4 host(s) missing"
    sick = verdict("s2", healthy=False, hosts_found=4,
                   hosts=[{"worker_id": 2, "ok": False, "problems": ["matmul 0.3x of peak"]}])
    assert report.headline(sick).startswith("slice s2 unhealthy: host 2: matmul 0.3x of peak")
    entry = report.log_entry(sick)
    assert (entry["severity"], entry["message"], entry[report.LOG_KEY]["state"]) == (
        "ERROR", report.headline(sick), "unhealthy")
    assert report.log_entry(verdict("s3"))["severity"] == "INFO"
    assert report.log_entry(verdict("s4", healthy=False, state="busy"))["severity"] == "INFO"  # busy is not broken
    line = json.dumps(entry)
    assert report.parse_verdict_lines(line) == []  # the structured line is not a verdict line


def test_markdown_summary_has_a_row_per_slice_and_the_failed_checks(tmp_path: Path) -> None:
    verdicts = [verdict("good"), verdict("bad", healthy=False), verdict("held", healthy=False, state="busy")]
    text = report.render_markdown(verdicts)
    assert text.startswith("## TPU smoke: 2/3 slices not unhealthy")
    assert "| ✗ | `bad` | v6e-16 | 3/4 | slice bad unhealthy: 1 of 4 host(s) missing |" in text
    assert "| `bad` | hosts | 3 | 4 | host 3 missing |" in text
    report.write_reports(verdicts, tmp_path)
    assert (tmp_path / report.MARKDOWN_NAME).read_text() == text


def perf_row(metric: str, worker: int | None, device: int | None, value: float, ok: bool = True,
             gates: bool = False) -> dict[str, Any]:
    """A ``perf`` row as the smoke check writes it (v6e: 918 TFLOP/s, 1638 GB/s per device, 800 GB/s ICI)."""
    unit, reference, floor = {"matmul_tflops": ("TFLOP/s", 918.0, 0.7), "hbm_bandwidth": ("GB/s", 1638.0, 0.6),
                              "allreduce_busbw": ("GB/s", 800.0, 0.05)}[metric]
    return {"metric": metric, "unit": unit, "worker_id": worker, "device": device, "value": value,
            "reference": reference, "ratio": value / reference, "min_ratio": floor, "gates": gates,
            "peer_ratio": None if device is None else 1.0, "min_peer_ratio": None if device is None else 0.5, "ok": ok}


def test_the_table_shows_every_device_and_the_ici_figure_with_thresholds_and_gating() -> None:
    rows = [perf_row(m, w, d, 0.02 if m == "matmul_tflops" else 30.0) for m in ("matmul_tflops", "hbm_bandwidth")
            for w in range(2) for d in range(4)]
    rows.append(perf_row("allreduce_busbw", None, None, 0.5))
    text = report.render_table([verdict(perf=rows, injected=["RAYTPU_SMOKE_INJECT_SLOW_DEVICE: host 1 device 2"])])
    lines = text.splitlines()
    header = next(line for line in lines if "perf" in line and "vs catalog" in line)
    assert header.split() == ["perf", "host", "device", "value", "vs", "catalog", "vs", "slice", "median"]
    matmul = [line for line in lines if " matmul_tflops " in line]
    assert len(matmul) == 8 and len([line for line in lines if " hbm_bandwidth " in line]) == 8
    assert "0.02 TFLOP/s" in matmul[0] and "2.179e-05 of 918 (min 0.7, gates here: no)" in matmul[0]
    assert "1x (min 0.5, gates here: yes)" in matmul[0]
    ici = next(line for line in lines if "allreduce_busbw" in line)
    assert ici.split()[1:5] == ["allreduce_busbw", "slice", "-", "0.5"] and "of 800 (min 0.05, gates here: no)" in ici
    assert "  fault injection: RAYTPU_SMOKE_INJECT_SLOW_DEVICE: host 1 device 2" in text


def test_past_32_devices_the_table_keeps_the_rows_that_matter() -> None:
    rows = [perf_row(m, w, d, 700.0 + w + d, gates=True) for m in ("matmul_tflops", "hbm_bandwidth")
            for w in range(10) for d in range(4)]
    rows[13] = perf_row("matmul_tflops", 3, 1, 300.0, ok=False, gates=True)
    rows.append(perf_row("allreduce_busbw", None, None, 90.0, gates=True))
    table, hidden = report.perf_rows(verdict(perf=rows))
    assert [(r[0], r[1], r[2], r[3]) for r in table[1:]] == [  # the failing device, the slowest healthy one, the ICI
        ("✗", "matmul_tflops", "3", "1"), ("✓", "hbm_bandwidth", "0", "0"), ("✓", "allreduce_busbw", "slice", "-")]
    assert hidden == 78
    assert "(78 more device rows within their thresholds; the JSON report has every row)" in report.render_table(
        [verdict(perf=rows)])


def test_markdown_summary_has_the_perf_table_per_slice() -> None:
    rows = [perf_row("matmul_tflops", 0, 0, 650.0, gates=True), perf_row("allreduce_busbw", None, None, 90.0)]
    text = report.render_markdown([verdict("s1", perf=rows), verdict("s2")])
    assert "`s1` per device and interconnect:" in text and "`s2` per device and interconnect" not in text
    assert "|  | perf | host | device | value | vs catalog | vs slice median |\n|---|---|---|---|---|---|---|" in text
    assert "| ✓ | matmul_tflops | 0 | 0 | 650 TFLOP/s | 0.7081 of 918 (min 0.7, gates here: yes) |" in text
