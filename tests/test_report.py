"""Unit tests of raytpu.report: verdict lines in logs, the table, JSON and JUnit XML reports."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest

from raytpu import report

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
