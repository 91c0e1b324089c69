"""The CLI contract of docs/DESIGN.md: names, exit codes, JSON keys, error format, import boundaries."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import kind_fields
import pytest
import yaml

from raytpu.cli import build_parser, main
from raytpu.core.specs import kinds
from raytpu.core.specs.cluster import cluster_parts
from raytpu.core.specs.slices import provisioning
from raytpu.core.tpu.catalog import GENERATIONS, RAY_VERSION

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "raytpu.example.yaml"
DESCRIBE_KEYS = {"generation", "topology", "machine_type", "gke_accelerator", "hosts", "chips_per_host", "chips",
                 "single_host", "placement", "ray_accelerator_type", "ray_pod_type", "ray_reservable",
                 "hbm_gib_per_chip", "peak_bf16_tflops_per_chip", "node_selector"}
"""docs/DESIGN.md's describe keys plus ``ray_reservable`` (issue 7: the catalog's two truths, shown side by side)."""


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
    assert data["ray_reservable"] is True
    assert data["node_selector"] == {"cloud.google.com/gke-tpu-accelerator": "tpu-v6e-slice",
                                     "cloud.google.com/gke-tpu-topology": "4x4"}


def test_describe_draws_hosts_as_rows_and_chips_as_cells(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run_cli(capsys, "describe", "v6e", "2x4", "--machine-type", "ct6e-standard-4t")
    assert code == 0
    rows = [line for line in out.splitlines() if line.strip().startswith("host ")]
    assert len(rows) == 2
    assert all(row.count("[") == 4 for row in rows)
    assert "TPU-v6e-8-head" in rows[0]


@pytest.mark.parametrize(("generation", "topology", "more"), [("v4", "8x16x16", 496), ("v5p", "16x20x28", 2224)])
def test_describe_elides_rows_of_huge_slices(capsys: pytest.CaptureFixture[str], generation: str, topology: str,
                                             more: int) -> None:
    code, out, _ = run_cli(capsys, "describe", generation, topology)
    assert code == 0
    assert f"{more} more hosts of 4 chips" in out


# GKE provisions v5p 4x4x28 (v5p-896, 448 chips, 112 hosts:
# https://cloud.google.com/kubernetes-engine/docs/concepts/plan-tpus); Ray 2.60's VALID_TPU_TOPOLOGY
# (ray._private.accelerators.tpu.VALID_TPU_TOPOLOGY) has no v5p dimension above 24, so Ray cannot reserve it.
REACHABLE_BY_GKE_ONLY = ("v5p", "4x4x28")


def test_describe_json_shows_a_gke_only_shape_as_not_ray_reservable(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run_cli(capsys, "describe", *REACHABLE_BY_GKE_ONLY, "--json")
    assert code == 0, err
    data = json.loads(out)
    assert (data["chips"], data["hosts"], data["ray_pod_type"], data["ray_reservable"]) == (448, 112, "v5p-896",
                                                                                           False)


@pytest.mark.parametrize(("generation", "topology", "says"), [
    ("v5p", "4x4x28", f"NO: GKE provisions it, but Ray {RAY_VERSION} cannot reserve it as one slice (nearest it "
                      "can: 4x8x12, 8x8x8, 4x4x20)"),
    ("tpu7x", "16x24x24", f"NO: GKE provisions it, but Ray {RAY_VERSION} cannot reserve it"),
    ("v6e", "4x4", f"yes (Ray {RAY_VERSION} slice_placement_group)"),
    ("v5p", "16x16x24", "yes"),
])
def test_describe_text_shows_whether_ray_can_reserve_the_slice(capsys: pytest.CaptureFixture[str], generation: str,
                                                               topology: str, says: str) -> None:
    code, out, _ = run_cli(capsys, "describe", generation, topology)
    assert code == 0
    line = next(line for line in out.splitlines() if line.strip().startswith("ray reservable"))
    assert says in line


def test_catalog_json_lists_every_generation_and_topology(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run_cli(capsys, "catalog", "--json")
    assert code == 0
    data = json.loads(out)
    assert list(data) == ["v4", "v5e", "v5p", "v6e", "tpu7x"]
    assert "4x4" in data["v6e"]["topologies"] and "8x16x16" in data["v4"]["topologies"]
    for name, gen in GENERATIONS.items():
        assert data[name]["topologies"] == list(gen.topologies)
        assert data[name]["ray_reservable_topologies"] == [t for t in gen.topologies if t in gen.ray_topologies]
    assert "4x4x28" in data["v5p"]["topologies"] and "4x4x28" not in data["v5p"]["ray_reservable_topologies"]
    assert len(data["tpu7x"]["ray_reservable_topologies"]) == 10


def test_catalog_table_shows_host_counts(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run_cli(capsys, "catalog")
    assert code == 0
    assert "4x4(4h)" in out and "2x4(1h)" in out
    assert "4x4x28(112h)*" in out, "GKE-only shapes are starred"
    assert "8x8x8(128h) " in out
    assert f"* = GKE only: Ray {RAY_VERSION} cannot reserve it" in out


def test_validate_accepts_the_example(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run_cli(capsys, "validate", str(EXAMPLE))
    assert code == 0
    assert "train: 1 x v6e 4x4 = 4 host(s)" in out
    assert "cannot reserve" not in out


def _write(tmp_path: Path, data: dict[str, Any]) -> str:
    path = tmp_path / "raytpu.yaml"
    path.write_text(yaml.safe_dump(data))
    return str(path)


def _example() -> dict[str, Any]:
    data: dict[str, Any] = yaml.safe_load(EXAMPLE.read_text())
    return data


def _gke_only_train_slice(data: dict[str, Any]) -> dict[str, Any]:
    generation, topology = REACHABLE_BY_GKE_ONLY
    data["slices"][0].update(generation=generation, topology=topology, zone="us-east5-a")
    return data


def test_validate_accepts_a_ray_unsupported_slice_without_workloads(capsys: pytest.CaptureFixture[str],
                                                                    tmp_path: Path) -> None:
    data = _gke_only_train_slice(_example())
    data["workloads"] = [w for w in data["workloads"] if w["slice"] != "train"]
    code, out, err = run_cli(capsys, "validate", _write(tmp_path, data))
    assert code == 0, err
    line = next(line for line in out.splitlines() if line.strip().startswith("train:"))
    assert "1 x v5p 4x4x28 = 112 host(s)" in line
    assert f"Ray {RAY_VERSION} cannot reserve it (no workloads)" in line


def test_validate_rejects_a_workload_on_a_ray_unsupported_slice(capsys: pytest.CaptureFixture[str],
                                                                tmp_path: Path) -> None:
    data = _gke_only_train_slice(_example())
    data["workloads"] = [{"name": "train", "kind": "train", "slice": "train"}]
    code, out, err = run_cli(capsys, "validate", _write(tmp_path, data))
    assert code == 2
    assert out == "" and "Traceback" not in err
    lines = err.splitlines()
    assert len(lines) == 1
    assert lines[0].startswith("error: workloads[0].slice: 'train' is v5p 4x4x28")
    assert f"Ray {RAY_VERSION} cannot reserve" in lines[0]
    assert "; valid: " in lines[0] and "nearest: 4x8x12, 8x8x8, 4x4x20" in lines[0]


@pytest.mark.parametrize("mode", provisioning.MODES.values(), ids=lambda m: m.name)
def test_validate_accepts_every_registered_provisioning_mode(capsys: pytest.CaptureFixture[str], tmp_path: Path,
                                                             mode: provisioning.Provisioning) -> None:
    data = _example()
    data["slices"].append({"name": "extra", "generation": "v6e", "topology": "2x2", "zone": "us-east5-b",
                           "provisioning": mode.name, **({"reservation": "res-1"} if mode.needs_reservation else {})})
    code, out, err = run_cli(capsys, "validate", _write(tmp_path, data))
    assert code == 0, err
    assert f"extra: 1 x v6e 2x2 = 1 host(s) x 4 chips (ct6e-standard-4t), {mode.name}, us-east5-b" in out


@pytest.mark.parametrize("kind", kinds.KINDS.values(), ids=lambda k: k.name)
def test_validate_accepts_every_registered_workload_kind(capsys: pytest.CaptureFixture[str], tmp_path: Path,
                                                         kind: kinds.WorkloadKind) -> None:
    data = _example()
    data["workloads"] = [{"name": "w", "kind": kind.name, "slice": "train" if kind.name != "batch" else "serve",
                          **kind_fields.fields(kind.name)}]
    code, out, err = run_cli(capsys, "validate", _write(tmp_path, data))
    assert code == 0, err
    assert "1 workload(s)" in out


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
    ("v4-beyond-8x16x16", None, "slices[0].topology", "up to 8x16x16"),
    ("bad-dims", None, "slices[0].topology", "4x4x8"),
    ("wrong-machine", None, "slices[0].machine_type", "ct6e-standard-4t"),
    ("bad-slice-name", None, "slices[0].name", "lowercase letters"),
    ("spot-with-reservation", None, "slices[1].reservation", "set provisioning: reservation"),
    ("autopilot-head-pool", None, "cluster.head_pool", "mode: standard"),
    ("bad-project", None, "project", "6-30 characters"),
    ("bad-cluster-name", None, "cluster.name", "1-40 characters"),
    ("zone-outside-region", None, "slices[0].zone", "us-east5-a"),
    ("bad-label-key", None, "cluster.labels['Team']", "starting with a letter"),
    ("head-pool-min-above-max", None, "cluster.head_pool.min_nodes", "0 to 2"),
    ("reservation-missing", None, "slices[1].reservation", "specific reservation"),
    ("disk-too-small", None, "slices[0].disk_size_gib", "10 to 65536 GiB"),
    ("cidr-overlap", None, "network.pods_cidr", "disjoint"),
    ("master-not-28", None, "network.master_cidr", "/28"),
    ("bad-region", None, "region", "us-east5"),
    ("authorized-network-cidr", None, "cluster.master_authorized_networks[0].cidr", "IPv4"),
    ("fallback-on-standard", None, "slices[1].fallback", "mode: autopilot"),
    ("bad-provisioning", None, "slices[0].provisioning", ", ".join(provisioning.NAMES)),
    ("bad-kind", None, "workloads[0].kind", ", ".join(kinds.NAMES)),
    ("bad-mode", None, "cluster.mode", ", ".join(cluster_parts.CLUSTER_MODES)),
    ("bad-release-channel", None, "cluster.release_channel", ", ".join(cluster_parts.RELEASE_CHANNELS)),
    ("duplicate-slice", None, "slices[1].name", "unique"),
    ("duplicate-workload", None, "workloads[1].name", "unique"),
    ("unknown-workload-slice", None, "workloads[2].slice", "train, serve"),
    ("queued-slice-with-workload", None, "workloads[2].slice", "on-demand, spot, reservation, flex-start"),
    # issue 18 item 9: no ComputeClass offers queued and Autopilot has no node pools; refused, not silently empty
    ("queued-on-autopilot", None, "slices[1].provisioning", "on-demand, spot, reservation, flex-start; or cluster"),
    ("default-bucket-too-long", None, "storage.bucket", "3-63 characters"),
    ("wrong-type", None, "slices[0].count", "a whole number"),
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
        "v4-beyond-8x16x16": lambda: first.update(generation="v4", topology="16x16x16"),
        "bad-label-key": lambda: data["cluster"].update(labels={"Team": "ml"}),
        "head-pool-min-above-max": lambda: data["cluster"].update(head_pool={"min_nodes": 3, "max_nodes": 2}),
        "reservation-missing": lambda: second.update(provisioning="reservation"),
        "disk-too-small": lambda: first.update(disk_size_gib=1),
        "cidr-overlap": lambda: data.update(network={"pods_cidr": "10.8.0.0/14"}),
        "master-not-28": lambda: data.update(network={"master_cidr": "172.16.0.0/26"}),
        "bad-region": lambda: data.update(region="us-east-5"),
        "authorized-network-cidr": lambda: data["cluster"].update(
            master_authorized_networks=[{"name": "office", "cidr": "1.2.3.4/40"}]),
        "fallback-on-standard": lambda: second.update(fallback=["on-demand"]),
        "bad-provisioning": lambda: first.update(provisioning="preemptible"),
        "bad-kind": lambda: data["workloads"][0].update(kind="notebook"),
        "bad-mode": lambda: data["cluster"].update(mode="serverless"),
        "bad-release-channel": lambda: data["cluster"].update(release_channel="FAST"),
        "duplicate-slice": lambda: second.update(name="train"),
        "duplicate-workload": lambda: data["workloads"][1].update(name="smoke"),
        "unknown-workload-slice": lambda: data["workloads"][2].update(slice="inference"),
        "queued-slice-with-workload": lambda: second.update(provisioning="queued"),
        "queued-on-autopilot": lambda: (data["cluster"].update(mode="autopilot"), second.update(provisioning="queued")),
        "default-bucket-too-long": lambda: (data.update(project="p" * 30), data["cluster"].update(name="c" * 30)),
        "wrong-type": lambda: first.update(count="many"),
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
    assert valid in matching[0].split("; valid: ", 1)[1]
    assert "Traceback" not in err and out == ""


def test_validate_prints_one_line_per_problem(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """Several problems at once: exactly one `error: <path>: ...; valid: ...` line each, in one run."""
    data = _example()
    data["cluster"]["labels"] = {"Team": "ml"}
    data["cluster"]["head_pool"] = {"min_nodes": 5, "max_nodes": 1}
    data["slices"][1]["disk_size_gib"] = 5
    data["slices"][1]["reservation"] = "res-1"
    data["network"] = {"master_cidr": "172.16.0.0/24"}
    data["workloads"][1]["name"] = "smoke"
    code, out, err = run_cli(capsys, "validate", _write(tmp_path, data))
    assert code == 2 and out == ""
    lines = err.splitlines()
    assert sorted(line.split(": ", 2)[1] for line in lines) == sorted([
        "cluster.labels['Team']", "cluster.head_pool.min_nodes", "slices[1].disk_size_gib", "slices[1].reservation",
        "network.master_cidr", "workloads[1].name"])
    assert all(line.startswith("error: ") and line.count("; valid: ") == 1 for line in lines)


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


def test_raytpu_debug_shows_the_cause_behind_the_one_line_error(tmp_path: Path) -> None:
    """``RAYTPU_DEBUG=1`` keeps the contract's line first and adds the traceback of its cause (here the OSError
    behind an unreadable config); without it, the one line alone."""
    missing = str(tmp_path / "nope.yaml")
    plain = _subprocess("-m", "raytpu", "validate", missing)
    debug = subprocess.run([sys.executable, "-m", "raytpu", "validate", missing], capture_output=True, text=True,
                           cwd=ROOT, timeout=120, env=os.environ | {"RAYTPU_DEBUG": "1"})
    assert plain.returncode == debug.returncode == 2
    assert plain.stderr.splitlines() == [debug.stderr.splitlines()[0]]
    assert debug.stderr.splitlines()[0].startswith("error: config: cannot read")
    assert "FileNotFoundError" in debug.stderr and "direct cause" in debug.stderr


def test_validate_errors_have_no_traceback_end_to_end(tmp_path: Path) -> None:
    data = _example()
    data["cluster"]["labels"] = {"Team": "ml"}
    data["slices"][1]["reservation"] = "res-1"
    proc = _subprocess("-m", "raytpu", "validate", _write(tmp_path, data))
    assert proc.returncode == 2, proc.stderr
    assert proc.stdout == "" and "Traceback" not in proc.stderr
    assert proc.stderr.splitlines() == [
        "error: cluster.labels['Team']: 'Team' is not a valid label key; valid: lowercase letters, digits, '_' and "
        "'-', starting with a letter; at most 63 characters",
        "error: slices[1].reservation: 'res-1' is not allowed with provisioning: spot (spot VMs never consume "
        "reservations); valid: remove reservation, or set provisioning: reservation",
    ]


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


@pytest.mark.parametrize("module", ["raytpu.core.tpu.catalog", "raytpu.core.tpu.plan", "raytpu.config",
                                    "raytpu.core.common.errors", "raytpu.core.specs.spec",
                                    "raytpu.core.specs.slices.provisioning", "raytpu.core.specs.kinds"])
def test_core_modules_import_no_cdktn_ray_or_jax(module: str) -> None:
    proc = _subprocess("-c", (
        f"import sys, {module}\n"
        "heavy = {'cdktn', 'cdktn_provider_google', 'constructs', 'jsii', 'ray', 'jax'}\n"
        "print(sorted({m.split('.')[0] for m in sys.modules} & heavy))\n"))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "[]"


PARSE_TIME_CASES = [
    # (argv, first stderr line): issue 28 item 9, refused while parsing, before a config, credentials or cluster
    (["images", "build", "--stack", "s", "--poll-s", "-1"],
     "error: --poll-s: -1 is out of range; valid: a number of seconds above 0 and at most 600"),
    (["images", "build", "--stack", "s", "--poll-s", "nan"], "error: --poll-s: nan is out of range"),
    (["images", "build", "--stack", "s", "--timeout-s", "5"],
     "error: --timeout-s: 5 is outside Cloud Build's build timeout range; valid: 60 to 86400 seconds"),
    (["images", "build", "--stack", "s", "--timeout-s", "1h"], "error: --timeout-s: '1h' is not a whole number"),
    (["submit", "train", "--wait", "--timeout-s", "-5"], "error: --timeout-s: -5 is out of range"),
    (["submit", "train", "--timeout-s", "inf"], "error: --timeout-s: inf is out of range"),
    (["submit", "train", "--report", ""], "error: --report: '' is not a path; valid: a file or directory path"),
    (["submit", "train", "--config", ""], "error: --config: '' is not a path"),
    (["smoke", "--stack", "s", "--timeout-s", "0"], "error: --timeout-s: 0 is out of range"),
    (["smoke", "--stack", "s", "--report", ""], "error: --report: '' is not a path"),
    (["local", "smoke", "--dcn-slices", "0"], "error: --dcn-slices: 0 is out of range; valid: 1 to 1000000"),
    (["local", "smoke", "--dcn-slices", "two"], "error: --dcn-slices: 'two' is not a whole number"),
    (["local", "smoke", "--timeout-s", "-1"], "error: --timeout-s: -1 is out of range"),
    (["local", "up", "--slices", "0"], "error: --slices: 0 is out of range"),
    (["local", "up", "--timeout-s", "nan"], "error: --timeout-s: nan is out of range"),
    (["local", "serve", "--timeout-s", "0"], "error: --timeout-s: 0 is out of range"),
    (["local", "--dir", "", "status"], "error: --dir: '' is not a path"),
    (["local", "status", "--dir", ""], "error: --dir: '' is not a path"),
    (["demo", "--steps", "-3"], "error: --steps: -3 is out of range"),
    (["demo", "--config", ""], "error: --config: '' is not a path"),
    (["validate", ""], "error: CONFIG: '' is not a path"),
    (["synth", "raytpu.example.yaml", "--out", ""], "error: --out: '' is not a path"),
    (["plan", "--model", "llama-3.1-8b", "--prices", ""], "error: --prices: '' is not a path"),
    # run ids end DNS-1035 RayJob names (IsDNS1035Label), at most as long as the one validate counted (6)
    (["submit", "train", "--run-id", "Run_1"], "error: --run-id: 'Run_1' is not a run id; valid: 1 to 6 lowercase"),
    (["submit", "train", "--run-id", "r" * 7], "error: --run-id: 'rrrrrrr' is not a run id"),
    (["smoke", "--stack", "s", "--run-id", "r1-"], "error: --run-id: 'r1-' is not a run id"),
    # ray 2.60 ProtocolsProvider.get_remote_protocols: the schemes a py_modules URI may use
    (["submit", "train", "--py-modules", "ftp://host/raytpu.zip"],
     "error: --py-modules: 'ftp://host/raytpu.zip' is not a zip URI Ray fetches; valid: SCHEME://PATH/raytpu.zip"),
    (["smoke", "--stack", "s", "--py-modules", "gs://b/raytpu"], "error: --py-modules: 'gs://b/raytpu' is not a zip"),
    (["submit", "train", "--py-modules", "/tmp/raytpu.zip"], "error: --py-modules: '/tmp/raytpu.zip' is not a zip"),
]


@pytest.mark.parametrize(("argv", "first_line"), PARSE_TIME_CASES, ids=[" ".join(c[0]) for c in PARSE_TIME_CASES])
def test_bad_numbers_and_paths_are_refused_while_parsing(capsys: pytest.CaptureFixture[str],
                                                         monkeypatch: pytest.MonkeyPatch, argv: list[str],
                                                         first_line: str) -> None:
    """Exit 2 naming the option before the command's ``run`` (which reads configs, credentials, clusters) starts."""
    import importlib

    def reached(_args: object) -> int:
        raise AssertionError(f"{argv[0]}.run reached")

    monkeypatch.setattr(importlib.import_module(f"raytpu.commands.{argv[0]}"), "run", reached)
    code, out, err = run_cli(capsys, *argv)
    assert (code, out) == (2, "")
    assert err.splitlines()[0].startswith(first_line), err
    assert len(err.splitlines()) == 1 and "; valid: " in err


MISTYPED_CASES = [
    # (argv, first stderr line): issue 28 item 11, a close command, action or option suggested
    (["descirbe", "v6e", "4x4"], "error: COMMAND: invalid choice: 'descirbe' (did you mean describe?); valid: catalog"),
    (["local", "stauts"], "error: ACTION: invalid choice: 'stauts' (did you mean status?); valid: up, status"),
    (["images", "biuld"], "error: ACTION: invalid choice: 'biuld' (did you mean build?); valid: build"),
    (["describe", "v6e", "4x4", "--jsn"], "error: --jsn: is not a known option (did you mean --json?); valid: "),
    (["submit", "train", "--wiat"], "error: --wiat: is not a known option (did you mean --wait?)"),
    (["plan", "--model", "x", "--mdoe=serve"], "error: --mdoe=serve: is not a known option (did you mean --mode?)"),
    (["plan", "--model", "x", "--dtype", "bf61"], "error: --dtype: invalid choice: 'bf61' (did you mean bf16?)"),
    (["catalog", "--yaml"], "error: --yaml: is not a known option; valid: "),  # nothing close: no guess
    (["zzz"], "error: COMMAND: invalid choice: 'zzz'; valid: "),
]


@pytest.mark.parametrize(("argv", "first_line"), MISTYPED_CASES, ids=[" ".join(c[0]) for c in MISTYPED_CASES])
def test_a_mistyped_name_gets_a_did_you_mean(capsys: pytest.CaptureFixture[str], argv: list[str],
                                              first_line: str) -> None:
    code, out, err = run_cli(capsys, *argv)
    assert (code, out) == (2, "")
    assert err.startswith(first_line), err


def test_version_prints_the_package_version(capsys: pytest.CaptureFixture[str]) -> None:
    import raytpu

    code, out, err = run_cli(capsys, "--version")
    assert (code, out.strip(), err) == (0, f"raytpu {raytpu.__version__}", "")


@pytest.mark.parametrize(("argv", "absent"), [
    (["smoke", "--help"], "--local"),  # issue 28 item 14: smoke has no --local, so its help names none
])
def test_help_names_only_options_the_command_has(capsys: pytest.CaptureFixture[str], argv: list[str],
                                                 absent: str) -> None:
    code, out, _ = run_cli(capsys, *argv)
    assert code == 0 and "--stack" in out
    assert absent not in out


@pytest.mark.parametrize("argv", [["local", "--dir", "{d}", "status"], ["local", "status", "--dir", "{d}"],
                                  ["local", "down", "--dir", "{d}"], ["local", "smoke", "--dir", "{d}"]])
def test_local_dir_is_taken_before_or_after_the_action(capsys: pytest.CaptureFixture[str], tmp_path: Path,
                                                       argv: list[str]) -> None:
    """Issue 28 item 14: `local status --dir X` said --dir was unknown while listing it as valid."""
    code, _, err = run_cli(capsys, *(a.format(d=tmp_path / "none") for a in argv))
    assert "is not a known option" not in err
    assert code == (0 if "down" in argv else 1), err
    if "down" not in argv:
        assert f"no local cluster recorded in {tmp_path / 'none'}" in err


DESCRIBE_BY_NAME = [
    # (argv, exit code, first line): issue 28 item 11, accelerator type names wherever a generation and topology are
    (["describe", "v6e-16"], 0, "v6e 4x4: 16 chips on 4 hosts x 4 chips (ct6e-standard-4t)"),
    (["describe", "v5litepod-16"], 0, "v5e 4x4: 16 chips"),
    (["describe", "v5p-128"], 0, "v5p 4x4x4: 64 chips on 16 hosts"),
    (["describe", "tpu7x-128"], 0, "tpu7x 4x4x4: 64 chips on 16 hosts"),
    (["describe", "v6e-12"], 2, "error: generation: 'v6e-12' names 12 chips, which no v6e slice has; valid: v6e "
                                "accelerator types: v6e-1, v6e-4, v6e-8, v6e-16"),
    (["describe", "v9-16"], 2, "error: generation: 'v9-16' is not an accelerator type of the catalog; valid: "),
    (["describe", "v6e-16", "4x4"], 2, "error: TOPOLOGY: '4x4' is not allowed with the accelerator type 'v6e-16'"),
    (["describe", "v6e"], 2, "error: TOPOLOGY: is required after the generation 'v6e'"),
]


@pytest.mark.parametrize(("argv", "code", "first_line"), DESCRIBE_BY_NAME,
                         ids=[" ".join(c[0]) for c in DESCRIBE_BY_NAME])
def test_describe_takes_an_accelerator_type_name(capsys: pytest.CaptureFixture[str], argv: list[str], code: int,
                                                 first_line: str) -> None:
    got, out, err = run_cli(capsys, *argv)
    assert got == code
    assert (out if code == 0 else err).splitlines()[0].startswith(first_line), (out, err)


def test_describe_by_name_is_the_same_plan_as_by_generation_and_topology(capsys: pytest.CaptureFixture[str]) -> None:
    assert run_cli(capsys, "describe", "v5p-128", "--json")[1] == run_cli(capsys, "describe", "v5p", "4x4x4",
                                                                          "--json")[1]


@pytest.mark.parametrize(("argv", "expected"), [
    # issue 28 item 11: `local up --generation v6e-16` plans the same slice as --generation v6e --topology 4x4
    (["--generation", "v6e-8"], ("v6e", "2x4", 1)),
    (["--generation", "v5p-16"], ("v5p", "2x2x2", 2)),
    (["--generation", "v6e", "--topology", "2x2"], ("v6e", "2x2", 1)),
])
def test_local_up_takes_an_accelerator_type_as_its_generation(argv: list[str], expected: tuple[str, str, int]) -> None:
    from raytpu.commands import local

    args = build_parser().parse_args(["local", "up", *argv])
    plan = local.plan_from_args(args)
    assert (plan.generation, plan.topology, plan.hosts) == expected


def test_local_up_refuses_an_accelerator_type_of_no_slice(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run_cli(capsys, "local", "up", "--generation", "v6e-12")
    assert code == 2 and err.startswith("error: --generation: 'v6e-12' names 12 chips, which no v6e slice has")
