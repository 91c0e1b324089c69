"""The CLI contract of DESIGN.md: names, exit codes, JSON keys, error format, import boundaries."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from raytpu.cli import main

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "raytpu.example.yaml"
DESCRIBE_KEYS = {"generation", "topology", "machine_type", "gke_accelerator", "hosts", "chips_per_host", "chips",
                 "single_host", "placement", "ray_accelerator_type", "ray_pod_type", "hbm_gib_per_chip",
                 "peak_bf16_tflops_per_chip", "node_selector"}


def run_cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    try:
        code = main(list(argv))
    except SystemExit as exc:  # argparse's own exits (--help, usage errors)
        code = int(exc.code or 0)
    out, err = capsys.readouterr()
    return code, out, err


def test_describe_json_has_exactly_the_contract_keys(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run_cli(capsys, "describe", "v6e", "4x4", "--json")
    assert code == 0, err
    data = json.loads(out)
    assert set(data) == DESCRIBE_KEYS
    assert (data["hosts"], data["chips_per_host"], data["chips"], data["placement"]) == (4, 4, 16, "compact")
    assert data["node_selector"] == {"cloud.google.com/gke-tpu-accelerator": "tpu-v6e-slice",
                                     "cloud.google.com/gke-tpu-topology": "4x4"}


def test_describe_draws_hosts_as_rows_and_chips_as_cells(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run_cli(capsys, "describe", "v6e", "2x4", "--machine-type", "ct6e-standard-4t")
    assert code == 0
    rows = [line for line in out.splitlines() if line.strip().startswith("host ")]
    assert len(rows) == 2
    assert all(row.count("[") == 4 for row in rows)
    assert "TPU-v6e-8-head" in rows[0]


def test_describe_elides_rows_of_huge_slices(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run_cli(capsys, "describe", "v4", "16x16x16")
    assert code == 0
    assert "1008 more hosts of 4 chips" in out


def test_catalog_json_lists_every_generation_and_topology(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run_cli(capsys, "catalog", "--json")
    assert code == 0
    data = json.loads(out)
    assert list(data) == ["v4", "v5e", "v5p", "v6e", "tpu7x"]
    assert "4x4" in data["v6e"]["topologies"] and "16x16x16" in data["v4"]["topologies"]


def test_catalog_table_shows_host_counts(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run_cli(capsys, "catalog")
    assert code == 0
    assert "4x4(4h)" in out and "2x4(1h)" in out


def test_validate_accepts_the_example(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run_cli(capsys, "validate", str(EXAMPLE))
    assert code == 0
    assert "train: 1 x v6e 4x4 = 4 host(s)" in out


ARG_CASES = [
    # (argv, field named, words in valid)
    (["describe", "v9", "4x4"], "generation", "v4, v5e, v5p, v6e, tpu7x"),
    (["describe", "tpu7", "2x2x1"], "generation", "tpu7x"),
    (["describe", "v6e", "2x2x2"], "topology", "4x4"),
    (["describe", "v5p", "4x4"], "topology", "2x2x1"),
    (["describe", "v4", "4x4x6"], "topology", "4x4x8"),
    (["describe", "tpu7x", "8x4x4"], "topology", "4x4x8"),
    (["describe", "v5e", "64x64"], "topology", "16x16"),
    (["describe", "v6e", "4x4", "--machine-type", "ct6e-standard-8t"], "machine_type", "ct6e-standard-4t"),
    (["describe", "v6e", "4x4", "--machine-type", "n2-standard-8"], "machine_type", "ct6e-standard-4t"),
    (["describe", "v5e", "1x1", "--machine-type", "ct5lp-hightpu-8t"], "machine_type", "ct5lp-hightpu-1t"),
    (["describe", "v6e"], "TOPOLOGY", "raytpu describe --help"),
    (["describe", "v6e", "4x4", "--colour"], "--colour", "--machine-type, --json"),
    (["describe", "v6e", "4x4", "--machine-type"], "--machine-type", "raytpu describe --help"),
    (["nosuchcommand"], "COMMAND", "catalog, describe, validate"),
    (["catalog", "--yaml"], "--yaml", "--json"),
    ([], "COMMAND", "raytpu --help"),
]


@pytest.mark.parametrize(("argv", "field", "valid"), ARG_CASES, ids=[" ".join(c[0]) for c in ARG_CASES])
def test_bad_arguments_exit_2_with_field_and_valid_values(capsys: pytest.CaptureFixture[str], argv: list[str],
                                                          field: str, valid: str) -> None:
    code, out, err = run_cli(capsys, *argv)
    assert code == 2
    assert err.startswith(f"error: {field}: ")
    assert "; valid: " in err and valid in err
    assert "Traceback" not in err and out == ""


CONFIG_CASES = [
    # (name, config text, field named, words in valid)
    ("empty", "", "config", "project, region, cluster"),
    ("yaml-syntax", "project: [a\nregion: x\n", "config", "YAML mapping"),
    ("not-a-mapping", "- 1\n", "config", "project, region, cluster"),
    ("unknown-top-key", None, "colour", "project, region, cluster"),
    ("3d-on-2d", None, "slices[0].topology", "4x4"),
    ("2d-on-3d", None, "slices[0].topology", "2x2x1"),
    ("bad-dims", None, "slices[0].topology", "4x4x8"),
    ("wrong-machine", None, "slices[0].machine_type", "ct6e-standard-4t"),
    ("bad-slice-name", None, "slices[0].name", "lowercase letters"),
    ("spot-with-reservation", None, "slices[1].reservation", "set provisioning: reservation"),
    ("autopilot-head-pool", None, "cluster.head_pool", "mode: standard"),
    ("bad-project", None, "project", "6-30 characters"),
    ("bad-cluster-name", None, "cluster.name", "1-40 characters"),
    ("zone-outside-region", None, "slices[0].zone", "us-east5-a"),
]


def _config_text(case: str) -> str:
    data = yaml.safe_load(EXAMPLE.read_text())
    first, second = data["slices"]
    edits = {
        "unknown-top-key": lambda: data.update(colour="blue"),
        "3d-on-2d": lambda: first.update(topology="2x2x2"),
        "2d-on-3d": lambda: first.update(generation="v5p"),
        "bad-dims": lambda: first.update(generation="v4", topology="4x4x5"),
        "wrong-machine": lambda: first.update(machine_type="ct6e-standard-8t"),
        "bad-slice-name": lambda: first.update(name="-train"),
        "spot-with-reservation": lambda: second.update(reservation="r1"),
        "autopilot-head-pool": lambda: data["cluster"].update(mode="autopilot", head_pool={}),
        "bad-project": lambda: data.update(project="1project"),
        "bad-cluster-name": lambda: data["cluster"].update(name="ray-"),
        "zone-outside-region": lambda: first.update(zone="us-central1-b"),
    }
    edits[case]()
    return yaml.safe_dump(data)


@pytest.mark.parametrize(("case", "text", "field", "valid"), CONFIG_CASES, ids=[c[0] for c in CONFIG_CASES])
def test_validate_bad_config_exits_2_with_field_and_valid_values(capsys: pytest.CaptureFixture[str],
                                                                 tmp_path: Path, case: str, text: str | None,
                                                                 field: str, valid: str) -> None:
    path = tmp_path / "raytpu.yaml"
    path.write_text(_config_text(case) if text is None else text)
    code, out, err = run_cli(capsys, "validate", str(path))
    assert code == 2
    lines = err.splitlines()
    assert all(line.startswith("error: ") and "; valid: " in line for line in lines)
    matching = [line for line in lines if line.startswith(f"error: {field}: ")]
    assert matching, err
    assert valid in matching[0]
    assert "Traceback" not in err and out == ""


def test_validate_missing_file_exits_2(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    code, _, err = run_cli(capsys, "validate", str(tmp_path / "nope.yaml"))
    assert code == 2
    assert err.startswith("error: config: cannot read")


def _subprocess(*code_or_args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, *code_or_args], capture_output=True, text=True, cwd=ROOT, timeout=120)


def test_console_errors_have_no_traceback_end_to_end() -> None:
    proc = _subprocess("-m", "raytpu", "describe", "v6e", "9x9")
    assert proc.returncode == 2
    assert proc.stderr.startswith("error: topology: '9x9'")
    assert "Traceback" not in proc.stderr


def test_describe_imports_no_cdktn_ray_jax_or_pydantic() -> None:
    """The fast path: describe must not load the CDK framework, Ray, JAX, nor even pydantic/yaml."""
    proc = _subprocess("-c", (
        "import sys, raytpu.cli\n"
        "code = raytpu.cli.main(['describe', 'v6e', '4x4', '--json'])\n"
        "heavy = {'cdktn', 'cdktn_provider_google', 'constructs', 'jsii', 'ray', 'jax', 'pydantic', 'yaml'}\n"
        "print(sorted({m.split('.')[0] for m in sys.modules} & heavy), file=sys.stderr)\n"
        "sys.exit(code)\n"))
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr.strip() == "[]"


@pytest.mark.parametrize("module", ["raytpu.catalog", "raytpu.plan", "raytpu.config", "raytpu.errors"])
def test_core_modules_import_no_cdktn_ray_or_jax(module: str) -> None:
    proc = _subprocess("-c", (
        f"import sys, {module}\n"
        "heavy = {'cdktn', 'cdktn_provider_google', 'constructs', 'jsii', 'ray', 'jax'}\n"
        "print(sorted({m.split('.')[0] for m in sys.modules} & heavy))\n"))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "[]"
