"""Unit tests of raytpu.config: the example compiles to a ClusterSpec, and every problem carries its config path."""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Callable
from pathlib import Path
from typing import Any

import kind_fields
import pytest
import yaml
from pydantic import ValidationError

from raytpu.config import Config, compile_config, load, parse
from raytpu.core.common.errors import EXIT_INVALID, InvalidInput, InvalidInputs, problems_of
from raytpu.core.specs import field_rules, kinds
from raytpu.core.specs.cluster import cluster_parts
from raytpu.core.specs.slices import provisioning
from raytpu.core.specs.spec import ClusterSpec
from raytpu.core.tpu.catalog import RAY_VERSION

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "raytpu.example.yaml"


def example() -> dict[str, Any]:
    data: dict[str, Any] = yaml.safe_load(EXAMPLE.read_text())
    return data


def test_example_config_compiles_to_a_cluster_spec_planning_both_slices() -> None:
    config = load(EXAMPLE)
    assert isinstance(config, ClusterSpec)
    plans = config.plans
    assert (plans["train"].topology, plans["train"].hosts) == ("4x4", 4)
    assert (plans["serve"].topology, plans["serve"].hosts, plans["serve"].machine_type) == (
        "2x4", 1, "ct6e-standard-8t")
    assert config.bucket == "my-ml-project-ray-tpu-ray"
    assert [w.name for w in config.workloads] == ["smoke", "train", "serve"]
    assert config.workload("serve").slice is config.slice_named("serve")


def test_example_config_takes_the_spec_defaults_for_unset_fields() -> None:
    config = load(EXAMPLE)
    assert config.cluster.head_pool == cluster_parts.HeadPoolSpec()
    assert config.network == cluster_parts.NetworkSpec()
    assert config.storage == cluster_parts.StorageSpec()
    assert config.slice_named("train").disk_gib == field_rules.DEFAULT_DISK_SIZE_GIB
    assert config.slice_named("serve").provisioning is provisioning.MODES["spot"]
    assert config.workload("train").kind is kinds.KINDS["train"]


def test_compiled_spec_and_parsed_model_are_frozen() -> None:
    config = load(EXAMPLE)
    with pytest.raises(dataclasses.FrozenInstanceError):
        config.project = "other"  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        config.slices[0].count = 2  # type: ignore[misc]
    model = Config.model_validate(example())
    with pytest.raises(ValidationError, match="frozen"):
        model.project = "other"
    assert compile_config(model) == config


def problems_of_config(data: dict[str, Any]) -> list[InvalidInput]:
    with pytest.raises((InvalidInput, InvalidInputs)) as exc:
        parse(yaml.safe_dump(data))
    assert isinstance(exc.value, InvalidInput | InvalidInputs)
    assert exc.value.exit_code == EXIT_INVALID
    return problems_of(exc.value)


def edited(path: str, value: object) -> dict[str, Any]:
    """The example with one field set (``slices.0.topology``); ``None`` value deletes it."""
    data = example()
    *parents, last = path.split(".")
    node: Any = data
    for part in parents:
        node = node[int(part)] if part.isdigit() else node.setdefault(part, {})
    if value is None:
        del node[int(last) if last.isdigit() else last]
    elif last.isdigit():
        node[int(last)] = value
    else:
        node[last] = value
    return data


# The default bucket is `<project>-<cluster>-ray`: a 30-character project id and a 30-character cluster name
# make 65 characters, over GCS's 63 (https://cloud.google.com/storage/docs/buckets#naming).
LONG_PROJECT, LONG_CLUSTER = "p" * 30, "c" * 30

CASES = [
    # (path edited, value, field reported, words of the problem, words of valid)
    ("project", "My_Project", "project", "not a GCP project id", "6-30 characters"),
    ("project", "abc", "project", "not a GCP project id", "6-30 characters"),
    ("project", "project-", "project", "not a GCP project id", "does not end with a hyphen"),
    ("region", "useast5", "region", "not a GCP region", "us-east5"),
    ("region", "US-East5", "region", "not a GCP region", "us-east5"),
    ("region", "us-east5-b", "region", "not a GCP region", "us-east5"),
    ("cluster.name", "Ray_TPU", "cluster.name", "not a GKE cluster name", "1-40 characters"),
    ("cluster.name", "r" * 41, "cluster.name", "not a GKE cluster name", "1-40 characters"),
    ("cluster.labels", {"Team": "ml"}, "cluster.labels['Team']", "not a valid label key", "starting with a letter"),
    ("cluster.labels", {"team": "ML Ops"}, "cluster.labels['team']", "not a valid label value", "lowercase"),
    ("cluster.head_pool", {"min_nodes": 4, "max_nodes": 2}, "cluster.head_pool.min_nodes",
     "4 is above max_nodes (2)", "0 to 2"),
    ("cluster.head_pool", {"max_nodes": 0}, "cluster.head_pool.max_nodes", "out of range", "1 to 1000"),
    ("cluster.head_pool", {"min_nodes": -1}, "cluster.head_pool.min_nodes", "out of range", "0 to 1000"),
    ("cluster.master_authorized_networks", [{"name": "office", "cidr": "10.0.0.300/32"}],
     "cluster.master_authorized_networks[0].cidr", "not a CIDR range", "10.10.0.0/20"),
    ("cluster.master_authorized_networks", [{"name": "vpn", "cidr": "10.0.0.0/8"}, {"name": "x", "cidr": "nope"}],
     "cluster.master_authorized_networks[1].cidr", "not a CIDR range", "an IPv4 range"),
    ("cluster.master_authorized_networks", [{"name": "office"}], "cluster.master_authorized_networks[0].cidr",
     "is required", "name, cidr"),
    ("cluster.nodes", 3, "cluster.nodes", "not a known key", "name, mode, release_channel"),
    ("extra", 1, "extra", "not a known key", "project, region, cluster"),
    ("region", None, "region", "is required", "project, region, cluster"),
    ("slices.0.generation", "v9", "slices[0].generation", "'v9'", "v4, v5e, v5p, v6e, tpu7x"),
    ("slices.0.topology", "2x2x2", "slices[0].topology", "is 3D but v6e is a 2D torus", "4x4"),
    ("slices.0.topology", "5x5", "slices[0].topology", "not a v6e slice shape", "4x4"),
    ("slices.0.machine_type", "ct6e-standard-8t", "slices[0].machine_type", "cannot form v6e 4x4",
     "ct6e-standard-4t"),
    ("slices.0.zone", "us-west1-a", "slices[0].zone", "not a zone of region 'us-east5'", "us-east5-a"),
    ("slices.0.zone", "us-east5", "slices[0].zone", "not a GCP zone", "us-east5-b"),
    ("slices.0.count", 0, "slices[0].count", "0 is out of range", "1 to 1000"),
    ("slices.0.count", "two", "slices[0].count", "'two'", "a whole number"),
    ("slices.0.name", "Train_Slice", "slices[0].name", "not DNS-safe", "lowercase letters"),
    ("slices.0.name", "t" * 31, "slices[0].name", "not DNS-safe", "1-30 characters"),
    ("slices.1.name", "train", "slices[1].name", "used by an earlier slice", "unique"),
    ("slices.1.provisioning", "reservation", "slices[1].reservation", "is required with provisioning: reservation",
     "the name of a specific reservation"),
    ("slices.0.reservation", "res-1", "slices[0].reservation", "not allowed with provisioning: on-demand",
     "set provisioning: reservation"),
    ("slices.1.reservation", "res-1", "slices[1].reservation", "spot VMs never consume reservations",
     "remove reservation"),
    ("slices.0.max_run_duration_s", 200 * 86400, "slices[0].max_run_duration_s", "is out of range",
     "600 to 10368000 seconds (provisioning: on-demand)"),
    ("slices.0.disk_size_gib", 5, "slices[0].disk_size_gib", "5 is out of range", "10 to 65536 GiB"),
    ("slices.0.disk_size_gib", 65537, "slices[0].disk_size_gib", "65537 is out of range", "10 to 65536 GiB"),
    ("slices.0.fallback", ["spot"], "slices[0].fallback", "with cluster.mode: standard", "mode: autopilot"),
    ("slices.0.colour", "red", "slices[0].colour", "not a known key", "name, generation, topology"),
    ("workloads.0.slice", "nope", "workloads[0].slice", "'nope'", "train, serve"),
    ("workloads.1.name", "smoke", "workloads[1].name", "used by an earlier workload", "unique"),
    ("workloads.0.name", "Smoke", "workloads[0].name", "not DNS-safe", "lowercase letters"),
    ("workloads.1.model", "org/model", "workloads[1].model", "not allowed for kind train", "serve"),
    ("network.pods_cidr", "10.10.0.0/16", "network.pods_cidr", "overlaps subnet_cidr (10.10.0.0/20)", "disjoint"),
    ("network.services_cidr", "10.16.0.0/20", "network.services_cidr", "overlaps pods_cidr", "disjoint"),
    ("network.subnet_cidr", "10.0.0.0/33", "network.subnet_cidr", "not a CIDR range", "10.10.0.0/20"),
    ("network.master_cidr", "172.16.0.0/24", "network.master_cidr", "not a /28", "/28"),
    ("storage", {"bucket": "Bad Bucket"}, "storage.bucket", "not a bucket name", "3-63 characters"),
    ("storage", {"state_bucket": "b" * 64}, "storage.state_bucket", "not a bucket name", "3-63 characters"),
    ("cluster.deletion_protection", "maybe", "cluster.deletion_protection", "'maybe'", "true or false"),
    ("slices", [], "slices", "is required", "a list of slices"),
]


@pytest.mark.parametrize(("path", "value", "field", "problem", "valid"), CASES, ids=[f"{c[0]}={c[1]!r}"[:60]
                                                                                      for c in CASES])
def test_bad_config_names_the_field_and_lists_valid_values(path: str, value: object, field: str, problem: str,
                                                           valid: str) -> None:
    found = {p.field: p for p in problems_of_config(edited(path, value))}
    assert field in found, f"fields reported: {sorted(found)}"
    assert problem in found[field].problem
    assert valid in found[field].valid


Edit = Callable[[dict[str, Any]], object]

PATH_CASES: list[tuple[str, Edit, str, str]] = [
    # (case, edit of the example, the one field reported, words of the problem)
    ("bad-label-key", lambda d: d["cluster"].update(labels={"Team": "ml"}), "cluster.labels['Team']",
     "label key"),
    ("head-pool-min-above-max", lambda d: d["cluster"].update(head_pool={"min_nodes": 5, "max_nodes": 3}),
     "cluster.head_pool.min_nodes", "above max_nodes"),
    ("spot-with-reservation", lambda d: d["slices"][1].update(reservation="res-1"), "slices[1].reservation",
     "spot VMs never consume reservations"),
    ("reservation-missing", lambda d: d["slices"][1].update(provisioning="reservation"), "slices[1].reservation",
     "is required"),
    ("disk-too-small", lambda d: d["slices"][0].update(disk_size_gib=9), "slices[0].disk_size_gib", "out of range"),
    ("disk-too-large", lambda d: d["slices"][0].update(disk_size_gib=70000), "slices[0].disk_size_gib",
     "out of range"),
    ("cidr-overlap", lambda d: d.update(network={"pods_cidr": "10.10.0.0/16"}), "network.pods_cidr", "overlaps"),
    ("master-not-28", lambda d: d.update(network={"master_cidr": "172.16.0.0/27"}), "network.master_cidr",
     "not a /28"),
    ("region-regex", lambda d: d.update(region="us_east5"), "region", "not a GCP region"),
    ("authorized-network-cidr", lambda d: d["cluster"].update(
        master_authorized_networks=[{"name": "office", "cidr": "office"}]),
     "cluster.master_authorized_networks[0].cidr", "not a CIDR range"),
    ("head-pool-on-autopilot", lambda d: d["cluster"].update(mode="autopilot", head_pool={"max_nodes": 2}),
     "cluster.head_pool", "with mode: autopilot"),
    ("disk-on-autopilot", lambda d: (d["cluster"].update(mode="autopilot"), d["slices"][0].update(disk_size_gib=200)),
     "slices[0].disk_size_gib", "with cluster.mode: autopilot"),
    ("fallback-on-standard", lambda d: d["slices"][1].update(fallback=["on-demand"]), "slices[1].fallback",
     "with cluster.mode: standard"),
    ("fallback-repeats-provisioning", lambda d: (d["cluster"].update(mode="autopilot"),
                                                 d["slices"][1].update(fallback=["spot"])),
     "slices[1].fallback", "repeats a mode"),
    ("fallback-not-offered", lambda d: (d["cluster"].update(mode="autopilot"),
                                        d["slices"][1].update(fallback=["queued"])),
     "slices[1].fallback[0]", "'queued' is not allowed"),
    ("fallback-unknown", lambda d: (d["cluster"].update(mode="autopilot"),
                                    d["slices"][1].update(fallback=["preemptible"])),
     "slices[1].fallback[0]", "'preemptible' is not allowed"),
    ("zone-outside-region", lambda d: d["slices"][1].update(zone="europe-west4-a"), "slices[1].zone",
     "not a zone of region 'us-east5'"),
    ("duplicate-slice", lambda d: d["slices"].append({**d["slices"][1], "topology": "2x2"}), "slices[2].name",
     "used by an earlier slice"),
    ("duplicate-workload", lambda d: d["workloads"].append({"name": "train", "kind": "smoke", "slice": "serve"}),
     "workloads[3].name", "used by an earlier workload"),
    ("unknown-workload-slice", lambda d: d["workloads"][2].update(slice="inference"), "workloads[2].slice",
     "'inference' is not allowed"),
    ("queued-slice-with-workload", lambda d: d["slices"][1].update(provisioning="queued"), "workloads[2].slice",
     "the kit makes none"),
    ("default-bucket-too-long", lambda d: (d.update(project=LONG_PROJECT), d["cluster"].update(name=LONG_CLUSTER)),
     "storage.bucket", f"'{LONG_PROJECT}-{LONG_CLUSTER}-ray' is not a bucket name"),
    ("max-run-duration-too-short", lambda d: d["slices"][0].update(provisioning="flex-start", max_run_duration_s=60),
     "slices[0].max_run_duration_s", "out of range"),
    ("flex-start-with-reservation", lambda d: d["slices"][0].update(provisioning="flex-start", reservation="r"),
     "slices[0].reservation", "exclusive with reservations"),
    ("model-on-a-job", lambda d: d["workloads"][0].update(model="org/model"), "workloads[0].model",
     "for kind smoke"),
]


@pytest.mark.parametrize(("case", "edit", "field", "problem"), PATH_CASES, ids=[c[0] for c in PATH_CASES])
def test_each_rule_reports_exactly_its_config_path(case: str, edit: Edit, field: str, problem: str) -> None:
    data = example()
    edit(data)
    found = problems_of_config(data)
    assert [p.field for p in found] == [field], [str(p) for p in found]
    assert problem in found[0].problem
    assert found[0].valid, "every problem says what would be valid"


def test_explicit_bucket_lifts_the_default_bucket_length_rule() -> None:
    data = edited("project", LONG_PROJECT)
    data["cluster"]["name"] = LONG_CLUSTER
    data["storage"] = {"bucket": "my-checkpoints"}
    assert parse(yaml.safe_dump(data)).bucket == "my-checkpoints"


def test_the_same_shape_is_provisionable_without_workloads_and_rejected_with_one() -> None:
    """GKE provisions v5p 4x4x28 (v5p-896; https://cloud.google.com/kubernetes-engine/docs/concepts/plan-tpus);
    Ray 2.60 cannot reserve it (Ray 2.60 ``ray._private.accelerators.tpu.VALID_TPU_TOPOLOGY`` has no dimension above
    24 for v5p)."""
    data = example()
    data["slices"][0].update(generation="v5p", topology="4x4x28", zone="us-east5-a")
    only_serve = copy.deepcopy(data)
    only_serve["workloads"] = [w for w in data["workloads"] if w["slice"] != "train"]
    config = parse(yaml.safe_dump(only_serve))
    assert not config.slice_named("train").plan.ray_reservable
    assert (config.slice_named("train").plan.hosts, config.slice_named("train").plan.ray_pod_type) == (112, "v5p-896")

    found = problems_of_config(data)
    assert [p.field for p in found] == ["workloads[0].slice", "workloads[1].slice"]
    assert f"Ray {RAY_VERSION} cannot reserve" in found[0].problem
    assert "nearest: 4x8x12, 8x8x8, 4x4x20" in found[0].valid


@pytest.mark.parametrize(("path", "value", "field", "registry"), [
    ("slices.0.provisioning", "preemptible", "slices[0].provisioning", provisioning.NAMES),
    ("workloads.0.kind", "stream", "workloads[0].kind", kinds.NAMES),
    ("cluster.mode", "serverless", "cluster.mode", cluster_parts.CLUSTER_MODES),
    ("cluster.release_channel", "FAST", "cluster.release_channel", cluster_parts.RELEASE_CHANNELS),
])
def test_bad_names_list_exactly_the_registrys_values(path: str, value: str, field: str,
                                                     registry: tuple[str, ...]) -> None:
    found = {p.field: p for p in problems_of_config(edited(path, value))}
    assert found[field].problem == f"{value!r} is not allowed"
    assert found[field].valid == ", ".join(registry)


def _slice_with(mode: provisioning.Provisioning) -> dict[str, Any]:
    return {"name": f"s-{mode.name}", "generation": "v6e", "topology": "2x2", "zone": "us-east5-b",
            "provisioning": mode.name, **({"reservation": "res-1"} if mode.needs_reservation else {})}


@pytest.mark.parametrize("cluster_mode", cluster_parts.CLUSTER_MODES)
@pytest.mark.parametrize("mode", provisioning.MODES.values(), ids=lambda m: m.name)
def test_every_registered_provisioning_mode_is_accepted(mode: provisioning.Provisioning, cluster_mode: str) -> None:
    data = edited("cluster.mode", cluster_mode)
    data["slices"].append(_slice_with(mode))
    if mode.runs_ray:
        data["workloads"].append({"name": "extra", "kind": "smoke", "slice": f"s-{mode.name}"})
    if cluster_mode == "autopilot" and mode.priority is None:
        # no ComputeClass offers it and Autopilot has no node pools: refused, not silently empty (issue 18, item 9)
        found = {p.field: p for p in problems_of_config(data)}
        assert f"slices[{len(data['slices']) - 1}].provisioning" in found
        return
    config = parse(yaml.safe_dump(data))
    assert config.slice_named(f"s-{mode.name}").provisioning is mode


@pytest.mark.parametrize("kind", kinds.KINDS.values(), ids=lambda k: k.name)
def test_every_registered_workload_kind_is_accepted(kind: kinds.WorkloadKind) -> None:
    data = example()
    data["workloads"] = [{"name": "w", "kind": kind.name, "slice": "serve" if kind.name == "batch" else "train",
                          **({"model": "org/model"} if kind.takes_model else {}), **kind_fields.fields(kind.name)}]
    assert parse(yaml.safe_dump(data)).workload("w").kind is kind


def test_every_problem_is_reported_at_once() -> None:
    """Problems of the parts and of the cluster-wide rules are reported together, each at its path."""
    data = edited("project", "X")
    data["slices"][0]["zone"] = "eu-west1-a"
    data["slices"][1]["topology"] = "3x3"
    data["cluster"]["labels"] = {"Team": "ml"}
    data["workloads"][1]["name"] = "smoke"
    fields = [p.field for p in problems_of_config(data)]
    assert sorted(fields) == sorted(["project", "slices[0].zone", "slices[1].topology", "cluster.labels['Team']",
                                     "workloads[1].name"])


def test_cluster_wide_rules_keep_config_indices_when_an_earlier_part_fails() -> None:
    data = example()
    data["slices"][0]["topology"] = "3x3"  # slices[0] fails on its own
    data["slices"].append({**data["slices"][1], "zone": "us-west1-a"})  # slices[2]: duplicate name, wrong region
    data["workloads"] = []
    found = {p.field: p for p in problems_of_config(data)}
    assert set(found) == {"slices[0].topology", "slices[2].name", "slices[2].zone"}


def test_an_invalid_region_is_reported_once_not_against_every_zone() -> None:
    fields = [p.field for p in problems_of_config(edited("region", "useast5"))]
    assert fields == ["region"]


def test_an_invalid_project_is_not_reported_again_as_the_default_bucket() -> None:
    fields = [p.field for p in problems_of_config(edited("project", "My_Project"))]
    assert fields == ["project"]


def test_workload_on_an_unknown_slice_of_a_config_without_slices_says_so() -> None:
    found = {p.field: p for p in problems_of_config(edited("slices", []))}
    assert "slices" in found
    assert "no slices" in found["workloads[0].slice"].valid


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


def test_default_path_reads_the_environment() -> None:
    from raytpu.config import CONFIG_ENV, DEFAULT_CONFIG, default_path

    assert default_path({}) == DEFAULT_CONFIG
    assert default_path({CONFIG_ENV: "other.yaml"}) == "other.yaml"


CHOICES = [  # (raytpu.yaml here, $RAYTPU_CONFIG, --config, local command) -> (path read, the note on stderr)
    (True, None, None, False, "raytpu.yaml", ""),
    (True, None, None, True, "raytpu.yaml", "raytpu: config raytpu.yaml (the default)"),
    (False, None, None, False, "raytpu.yaml", ""),  # GCP commands: no fallback; the read error names it
    (False, None, None, True, "raytpu.example.yaml",
     "raytpu: config raytpu.example.yaml (no raytpu.yaml here: the example; `cp raytpu.example.yaml raytpu.yaml` "
     "to make your own)"),
    (True, "team.yaml", None, False, "team.yaml", "raytpu: config team.yaml ($RAYTPU_CONFIG)"),
    (False, "team.yaml", None, True, "team.yaml", "raytpu: config team.yaml ($RAYTPU_CONFIG)"),
    (False, "absent.yaml", None, True, "absent.yaml", ""),  # named by the environment: never the example instead
    (True, "team.yaml", "mine.yaml", True, "mine.yaml", ""),  # named on the command line: said by the user
    (False, None, "mine.yaml", False, "mine.yaml", ""),
]


@pytest.mark.parametrize(("here", "env", "given", "local", "path", "note"), CHOICES)
def test_one_rule_chooses_the_config_of_every_command_and_says_which(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], here: bool,
        env: str | None, given: str | None, local: bool, path: str, note: str) -> None:
    from raytpu.config import CONFIG_ENV, choose

    monkeypatch.chdir(tmp_path)
    for name in ("raytpu.example.yaml", "team.yaml", "mine.yaml") + (("raytpu.yaml",) if here else ()):
        (tmp_path / name).write_text(EXAMPLE.read_text())
    monkeypatch.delenv(CONFIG_ENV, raising=False)
    if env:
        monkeypatch.setenv(CONFIG_ENV, env)
    assert choose(given, local=local) == path
    assert capsys.readouterr().err == (note + "\n" if note else "")


def test_every_command_chooses_its_config_through_the_one_rule() -> None:
    """No command picks a default config of its own (``local``/``demo`` once read the example even beside a
    ``raytpu.yaml``, ignoring a user's edits)."""
    import raytpu.commands

    sources = {p.name: p.read_text() for p in Path(raytpu.commands.__file__).parent.glob("*.py")}
    readers = sorted(n for n, text in sources.items() if "args.config" in text)
    assert readers == ["demo.py", "doctor.py", "images.py", "local.py", "smoke.py", "submit.py", "synth.py",
                       "validate.py"]
    root = Path(raytpu.commands.__file__).parents[1]
    handed = {"doctor.py": "cluster/side.py", "local.py": "local/slice/chosen_plan.py"}  # the side or plan chooses it
    for name in readers:
        text = sources[name]
        chooser = (root / handed[name]).read_text() if name in handed else text
        assert "choose(" in chooser and "default_path" not in text and "\"raytpu.example.yaml\"" not in text, name


def test_local_up_takes_its_slice_from_the_users_raytpu_yaml(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    import argparse

    from raytpu.commands.local import plan_from_args
    from raytpu.config import CONFIG_ENV

    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv(CONFIG_ENV, raising=False)
    args = argparse.Namespace(generation=None, topology=None, machine_type=None, config=None, slice_name=None)
    (tmp_path / "raytpu.example.yaml").write_text(EXAMPLE.read_text())
    assert plan_from_args(args).topology == "4x4"  # a fresh clone: the example's train slice
    assert "raytpu.example.yaml (no raytpu.yaml here" in capsys.readouterr().err
    (tmp_path / "raytpu.yaml").write_text(EXAMPLE.read_text().replace("topology: 4x4", "topology: 2x2"))
    assert plan_from_args(args).topology == "2x2"  # the user's edit is what runs locally
    assert capsys.readouterr().err == "raytpu: config raytpu.yaml (the default)\n"


def test_workloads_cannot_run_on_queued_slices() -> None:
    data = edited("slices.0.provisioning", "queued")
    found = {p.field: p for p in problems_of_config(data)}
    assert "the kit makes none" in found["workloads[0].slice"].problem
    assert "on-demand" in found["workloads[0].slice"].valid


@pytest.mark.parametrize(("mode", "provisioning_name", "fallback", "problem"), [
    ("standard", "reservation", ["spot"], "with cluster.mode: standard"),
    ("autopilot", "queued", ["spot"], "with provisioning: queued"),
    ("autopilot", "spot", ["spot"], "repeats a mode"),
    ("autopilot", "reservation", ["spot", "spot"], "repeats a mode"),
])
def test_fallback_is_autopilot_only_and_distinct(mode: str, provisioning_name: str, fallback: list[str],
                                                 problem: str) -> None:
    data = edited("cluster.mode", mode)
    data["workloads"] = []
    data["slices"][0].update(provisioning=provisioning_name, fallback=fallback,
                             **({"reservation": "r1"} if provisioning_name == "reservation" else {}))
    found = {p.field: p for p in problems_of_config(data)}
    assert problem in found["slices[0].fallback"].problem


@pytest.mark.parametrize("fallback", ["reservation", "queued", "preemptible"])
def test_fallback_lists_only_the_modes_offered_as_fallback(fallback: str) -> None:
    """Fallbacks are ComputeClass priorities without a reservation of their own: the registry decides which."""
    data = edited("cluster.mode", "autopilot")
    data["slices"][0]["fallback"] = [fallback]
    found = {p.field: p for p in problems_of_config(data)}
    offered = [m.name for m in provisioning.MODES.values() if m.priority is not None and not m.needs_reservation]
    assert offered == ["on-demand", "spot", "flex-start"]
    assert found["slices[0].fallback[0]"].valid == ", ".join(offered)


def test_flex_start_excludes_reservations() -> None:
    data = edited("slices.0.provisioning", "flex-start")
    data["slices"][0]["reservation"] = "res-1"
    found = {p.field: p for p in problems_of_config(data)}
    assert "exclusive with reservations" in found["slices[0].reservation"].problem


def test_queued_excludes_reservations() -> None:
    data = edited("slices.0.provisioning", "queued")
    data["slices"][0]["reservation"] = "res-1"
    found = {p.field: p for p in problems_of_config(data)}
    assert "queued provisioning (DWS) is exclusive with reservations" in found["slices[0].reservation"].problem


@pytest.mark.parametrize(("path", "value", "field"), [
    ("cluster.head_pool", {"machine_type": "n2-standard-8"}, "cluster.head_pool"),
    ("slices.0.disk_size_gib", 200, "slices[0].disk_size_gib"),
])
def test_autopilot_rejects_standard_only_settings(path: str, value: object, field: str) -> None:
    data = edited(path, value)
    data["cluster"]["mode"] = "autopilot"
    found = {p.field: p for p in problems_of_config(data)}
    assert "autopilot" in found[field].problem
    assert "mode: standard" in found[field].valid
