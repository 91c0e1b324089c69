"""Unit tests of raytpu.config: the example loads, and every rule reports its field path."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from pydantic import ValidationError

from raytpu.config import Config, load, parse
from raytpu.errors import InvalidInput, InvalidInputs

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "raytpu.example.yaml"


def example() -> dict:
    return yaml.safe_load(EXAMPLE.read_text())


def test_example_config_is_valid_and_plans_both_slices() -> None:
    config = load(EXAMPLE)
    plans = config.plans()
    assert (plans["train"].topology, plans["train"].hosts) == ("4x4", 4)
    assert (plans["serve"].topology, plans["serve"].hosts, plans["serve"].machine_type) == (
        "2x4", 1, "ct6e-standard-8t")
    assert config.bucket == "my-ml-project-ray-tpu-ray"


def test_models_are_frozen() -> None:
    config = load(EXAMPLE)
    with pytest.raises(ValidationError, match="frozen"):
        config.project = "other"
    assert isinstance(config, Config)


def problems_of(data: dict) -> list[InvalidInput]:
    with pytest.raises((InvalidInput, InvalidInputs)) as exc:
        parse(yaml.safe_dump(data))
    err = exc.value
    if isinstance(err, InvalidInputs):
        return list(err.problems)
    assert isinstance(err, InvalidInput)
    return [err]


def edited(path: str, value: object) -> dict:
    """The example with one field set (``slices.0.topology``); ``None`` value deletes it."""
    data = example()
    *parents, last = path.split(".")
    node = data
    for part in parents:
        node = node[int(part)] if part.isdigit() else node.setdefault(part, {})
    if value is None:
        del node[int(last) if last.isdigit() else last]
    elif last.isdigit():
        node[int(last)] = value
    else:
        node[last] = value
    return data


CASES = [
    # (path edited, value, field reported, words of the problem, words of valid)
    ("project", "My_Project", "project", "not a GCP project id", "6-30 characters"),
    ("project", "abc", "project", "not a GCP project id", "6-30 characters"),
    ("project", "project-", "project", "not a GCP project id", "does not end with a hyphen"),
    ("region", "useast5", "region", "not a GCP region", "us-east5"),
    ("cluster.name", "Ray_TPU", "cluster.name", "not a GKE cluster name", "1-40 characters"),
    ("cluster.name", "r" * 41, "cluster.name", "not a GKE cluster name", "1-40 characters"),
    ("cluster.mode", "serverless", "cluster.mode", "'serverless'", "standard, autopilot"),
    ("cluster.release_channel", "FAST", "cluster.release_channel", "'FAST'", "RAPID, REGULAR, STABLE, EXTENDED"),
    ("cluster.nodes", 3, "cluster.nodes", "not a known key", "name, mode, release_channel"),
    ("extra", 1, "extra", "not a known key", "project, region, cluster"),
    ("region", None, "region", "is required", "project, region, cluster"),
    ("slices.0.generation", "v9", "slices[0].generation", "'v9'", "v4, v5e, v5p, v6e, tpu7x"),
    ("slices.0.topology", "2x2x2", "slices[0].topology", "is 3D but v6e is a 2D torus", "4x4"),
    ("slices.0.topology", "5x5", "slices[0].topology", "not a v6e slice shape", "4x4"),
    ("slices.0.machine_type", "ct6e-standard-8t", "slices[0].machine_type", "cannot form v6e 4x4",
     "ct6e-standard-4t"),
    ("slices.0.zone", "us-west1-a", "slices[0].zone", "not a zone of region 'us-east5'", "us-east5-a"),
    ("slices.0.zone", "us-east5", "slices[0].zone", "not a zone of region", "us-east5-b"),
    ("slices.0.count", 0, "slices[0].count", "below 1", ">= 1"),
    ("slices.0.count", "two", "slices[0].count", "'two'", "a whole number"),
    ("slices.0.name", "Train_Slice", "slices[0].name", "not DNS-safe", "lowercase letters"),
    ("slices.1.name", "train", "slices[1].name", "used by an earlier slice", "unique"),
    ("slices.0.provisioning", "preemptible", "slices[0].provisioning", "'preemptible'",
     "on-demand, spot, reservation, flex-start, queued"),
    ("slices.0.provisioning", "reservation", "slices[0].reservation", "is required with provisioning: reservation",
     "reservation"),
    ("slices.0.reservation", "res-1", "slices[0].reservation", "not allowed with provisioning: on-demand",
     "set provisioning: reservation"),
    ("slices.1.reservation", "res-1", "slices[1].reservation", "spot VMs never consume reservations",
     "remove reservation"),
    ("slices.0.max_run_duration_s", 3600, "slices[0].max_run_duration_s", "not allowed with provisioning: on-demand",
     "flex-start"),
    ("slices.0.disk_size_gib", 5, "slices[0].disk_size_gib", "out of range", "10 to 65536"),
    ("slices.0.colour", "red", "slices[0].colour", "not a known key", "name, generation, topology"),
    ("workloads.0.slice", "nope", "workloads[0].slice", "'nope'", "train, serve"),
    ("workloads.0.kind", "batch", "workloads[0].kind", "'batch'", "smoke, train, serve"),
    ("network.pods_cidr", "10.10.0.0/16", "network.pods_cidr", "overlaps", "disjoint"),
    ("network.subnet_cidr", "10.0.0.0/33", "network.subnet_cidr", "not a CIDR range", "10.10.0.0/20"),
    ("network.master_cidr", "172.16.0.0/24", "network.master_cidr", "not a /28", "/28"),
    ("storage", {"bucket": "Bad Bucket"}, "storage.bucket", "not a bucket name", "3-63 characters"),
    ("cluster.deletion_protection", "maybe", "cluster.deletion_protection", "'maybe'", "true or false"),
    ("slices", [], "slices", "is required", "a list of slices"),
]


@pytest.mark.parametrize(("path", "value", "field", "problem", "valid"), CASES, ids=[f"{c[0]}={c[1]!r}"[:60]
                                                                                      for c in CASES])
def test_bad_config_names_the_field_and_lists_valid_values(path: str, value: object, field: str, problem: str,
                                                           valid: str) -> None:
    found = {p.field: p for p in problems_of(edited(path, value))}
    assert field in found, f"fields reported: {sorted(found)}"
    assert problem in found[field].problem
    assert valid in found[field].valid


def test_workloads_cannot_run_on_queued_slices() -> None:
    data = edited("slices.0.provisioning", "queued")
    found = {p.field: p for p in problems_of(data)}
    assert "single PodSet" in found["workloads[0].slice"].problem
    assert "on-demand" in found["workloads[0].slice"].valid


@pytest.mark.parametrize(("mode", "provisioning", "fallback", "problem"), [
    ("standard", "reservation", ["spot"], "with cluster.mode: standard"),
    ("autopilot", "queued", ["spot"], "with provisioning: queued"),
    ("autopilot", "spot", ["spot"], "repeats a mode"),
    ("autopilot", "reservation", ["spot", "spot"], "repeats a mode"),
])
def test_fallback_is_autopilot_only_and_distinct(mode: str, provisioning: str, fallback: list[str],
                                                 problem: str) -> None:
    data = edited("cluster.mode", mode)
    data["workloads"] = []
    data["slices"][0].update(provisioning=provisioning, fallback=fallback,
                             **({"reservation": "r1"} if provisioning == "reservation" else {}))
    found = {p.field: p for p in problems_of(data)}
    assert problem in found["slices[0].fallback"].problem


def test_fallback_rejects_reservation_and_queued_as_fallback_modes() -> None:
    data = edited("cluster.mode", "autopilot")
    data["slices"][0]["fallback"] = ["reservation"]
    found = {p.field: p for p in problems_of(data)}
    assert "on-demand, spot, flex-start" in found["slices[0].fallback[0]"].valid


def test_flex_start_excludes_reservations() -> None:
    data = edited("slices.0.provisioning", "flex-start")
    data["slices"][0]["reservation"] = "res-1"
    found = {p.field: p for p in problems_of(data)}
    assert "exclusive with reservations" in found["slices[0].reservation"].problem


def test_queued_excludes_reservations() -> None:
    data = edited("slices.0.provisioning", "queued")
    data["slices"][0]["reservation"] = "res-1"
    found = {p.field: p for p in problems_of(data)}
    assert "queued provisioning (DWS) is exclusive with reservations" in found["slices[0].reservation"].problem


@pytest.mark.parametrize(("path", "value", "field"), [
    ("cluster.head_pool", {"machine_type": "n2-standard-8"}, "cluster.head_pool"),
    ("slices.0.disk_size_gib", 200, "slices[0].disk_size_gib"),
])
def test_autopilot_rejects_standard_only_settings(path: str, value: object, field: str) -> None:
    data = edited(path, value)
    data["cluster"]["mode"] = "autopilot"
    found = {p.field: p for p in problems_of(data)}
    assert "autopilot" in found[field].problem
    assert "mode: standard" in found[field].valid


def test_every_problem_is_reported_at_once() -> None:
    data = edited("project", "X")
    data["slices"][0]["zone"] = "eu-west1-a"
    data["slices"][1]["topology"] = "3x3"
    fields = {p.field for p in problems_of(data)}
    assert {"project", "slices[0].zone", "slices[1].topology"} <= fields


@pytest.mark.parametrize(("text", "problem"), [
    ("", "is empty"),
    ("# only a comment\n", "is empty"),
    ("project: [unclosed\n", "not valid YAML at line"),
    ("- a\n- b\n", "a list, not a mapping"),
    ("just a string", "a str, not a mapping"),
])
def test_unreadable_files_are_config_errors(text: str, problem: str) -> None:
    with pytest.raises(InvalidInput) as exc:
        parse(text, "raytpu.yaml")
    assert exc.value.field == "config"
    assert problem in exc.value.problem


def test_missing_file_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(InvalidInput) as exc:
        load(tmp_path / "absent.yaml")
    assert exc.value.field == "config"
    assert "cannot read" in exc.value.problem
