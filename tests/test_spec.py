"""Unit tests of raytpu.core.specs.spec: frozen specs, rules raised on direct construction with relative field names
(the same rules the config compiler places under config paths), JSON round trips, and the registries they read."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import kind_fields
import pytest
import yaml
from image_refs import FIXTURE_IMAGES

from raytpu.config import parse
from raytpu.core.common.errors import EXIT_INVALID, InvalidInput, InvalidInputs, problems_of
from raytpu.core.specs import kinds
from raytpu.core.specs.cluster.cluster_parts import (
    CLUSTER_MODES,
    RELEASE_CHANNELS,
    AlertingSpec,
    AuthorizedNetwork,
    GkeSpec,
    HeadPoolSpec,
    MaintenanceWindowSpec,
    NetworkSpec,
    StorageSpec,
)
from raytpu.core.specs.field_rules import DEFAULT_DISK_SIZE_GIB
from raytpu.core.specs.slices import provisioning
from raytpu.core.specs.spec import WORKLOAD_ENV, ClusterSpec, SliceSpec, WorkloadSpec
from raytpu.core.tpu.catalog import RAY_VERSION
from raytpu.core.tpu.plan import plan_slice

pytestmark = pytest.mark.unit

ZONE = "us-east5-b"
EXAMPLE = Path(__file__).resolve().parents[1] / "raytpu.example.yaml"


def a_slice(name: str = "train", topology: str = "4x4", generation: str = "v6e", **rest: Any) -> SliceSpec:
    return SliceSpec.create(name=name, generation=generation, topology=topology, zone=rest.pop("zone", ZONE), **rest)


def a_workload(item: SliceSpec | None = None, kind: str = "train", name: str = "w", **rest: Any) -> WorkloadSpec:
    return WorkloadSpec(name=name, kind=kinds.kind(kind), slice=item or a_slice(), **rest)


def a_cluster(*slices: SliceSpec, workloads: tuple[WorkloadSpec, ...] = (), mode: str = "standard",
              **rest: Any) -> ClusterSpec:
    return ClusterSpec(project=rest.pop("project", "my-ml-project"), region=rest.pop("region", "us-east5"),
                       cluster=GkeSpec(name=rest.pop("name", "ray-tpu"), mode=mode),
                       slices=slices or (a_slice(),), workloads=workloads, **rest)


def problems(build: Callable[[], object]) -> list[InvalidInput]:
    with pytest.raises((InvalidInput, InvalidInputs)) as exc:
        build()
    assert isinstance(exc.value, InvalidInput | InvalidInputs)
    assert exc.value.exit_code == EXIT_INVALID
    return problems_of(exc.value)


# ---------------------------------------------------------------------------------------------- frozen

FROZEN: list[tuple[str, Callable[[], object], str]] = [
    ("HeadPoolSpec", HeadPoolSpec, "min_nodes"),
    ("AuthorizedNetwork", lambda: AuthorizedNetwork(name="office", cidr="10.0.0.0/8"), "cidr"),
    ("GkeSpec", lambda: GkeSpec(name="ray-tpu"), "mode"),
    ("NetworkSpec", NetworkSpec, "pods_cidr"),
    ("StorageSpec", StorageSpec, "bucket"),
    ("SliceSpec", a_slice, "count"),
    ("WorkloadSpec", a_workload, "slice"),
    ("ClusterSpec", a_cluster, "region"),
    ("SlicePlan", lambda: plan_slice("v6e", "4x4"), "hosts"),
    ("Provisioning", lambda: provisioning.MODES["spot"], "runs_ray"),
    ("WorkloadKind", lambda: kinds.KINDS["train"], "object_kind"),
    ("JobLimits", kinds.JobLimits, "ttl_s"),
]


@pytest.mark.parametrize(("name", "make", "attribute"), FROZEN, ids=[c[0] for c in FROZEN])
def test_specs_are_frozen(name: str, make: Callable[[], object], attribute: str) -> None:
    value = make()
    with pytest.raises(dataclasses.FrozenInstanceError):
        setattr(value, attribute, getattr(value, attribute))


# ---------------------------------------------------------------------------------------------- direct construction

DIRECT: list[tuple[str, Callable[[], object], str, str, str]] = [
    # (case, construction, field (relative to the spec), words of the problem, words of valid)
    ("head-min-above-max", lambda: HeadPoolSpec(min_nodes=4, max_nodes=2), "min_nodes", "above max_nodes (2)",
     "0 to 2"),
    ("head-max-zero", lambda: HeadPoolSpec(max_nodes=0), "max_nodes", "out of range", "1 to 1000"),
    ("authorized-network-cidr", lambda: AuthorizedNetwork(name="x", cidr="10.0.0.0/33"), "cidr",
     "not a CIDR range", "IPv4"),
    ("gke-name", lambda: GkeSpec(name="Ray"), "name", "not a GKE cluster name", "1-40 characters"),
    ("gke-label-key", lambda: GkeSpec(name="ray", labels={"Team": "ml"}), "labels['Team']", "not a valid label key",
     "starting with a letter"),
    ("gke-label-value", lambda: GkeSpec(name="ray", labels={"team": "ML"}), "labels['team']",
     "not a valid label value", "lowercase"),
    ("gke-mode", lambda: GkeSpec(name="ray", mode="serverless"), "mode", "'serverless' is not allowed",
     ", ".join(CLUSTER_MODES)),
    ("gke-release-channel", lambda: GkeSpec(name="ray", release_channel="FAST"), "release_channel",
     "'FAST' is not allowed", ", ".join(RELEASE_CHANNELS)),
    ("gke-head-pool-on-autopilot", lambda: GkeSpec(name="ray", mode="autopilot", head_pool=HeadPoolSpec()),
     "head_pool", "with mode: autopilot", "mode: standard"),
    ("network-overlap", lambda: NetworkSpec(services_cidr="10.10.0.0/24"), "services_cidr",
     "overlaps subnet_cidr", "disjoint"),
    ("network-master-not-28", lambda: NetworkSpec(master_cidr="172.16.0.0/29"), "master_cidr", "not a /28",
     "/28"),
    ("network-not-cidr", lambda: NetworkSpec(pods_cidr="pods"), "pods_cidr", "not a CIDR range", "IPv4"),
    ("storage-bucket", lambda: StorageSpec(bucket="Bad_Bucket"), "bucket", "not a bucket name", "3-63"),
    ("storage-state-bucket", lambda: StorageSpec(state_bucket="ab"), "state_bucket", "not a bucket name", "3-63"),
    ("slice-name", lambda: a_slice(name="Train"), "name", "not DNS-safe", "lowercase"),
    ("slice-zone", lambda: a_slice(zone="us-east5"), "zone", "not a GCP zone", "us-east5-b"),
    ("slice-count", lambda: a_slice(count=0), "count", "out of range", "1 to 1000"),
    ("slice-generation", lambda: a_slice(generation="v9"), "generation", "'v9'", "v4, v5e, v5p, v6e, tpu7x"),
    ("slice-topology", lambda: a_slice(topology="3x3"), "topology", "not a v6e slice shape", "4x4"),
    ("slice-machine-type", lambda: a_slice(machine_type="ct6e-standard-8t"), "machine_type", "cannot form",
     "ct6e-standard-4t"),
    ("slice-provisioning", lambda: a_slice(provisioning="preemptible"), "provisioning", "'preemptible'",
     ", ".join(provisioning.NAMES)),
    ("slice-reservation-missing", lambda: a_slice(provisioning="reservation"), "reservation", "is required",
     "specific reservation"),
    ("slice-reservation-with-spot", lambda: a_slice(provisioning="spot", reservation="r"), "reservation",
     "spot VMs never consume reservations", "remove reservation"),
    ("slice-disk-small", lambda: a_slice(disk_size_gib=9), "disk_size_gib", "out of range", "10 to 65536 GiB"),
    ("slice-disk-large", lambda: a_slice(disk_size_gib=65537), "disk_size_gib", "out of range", "10 to 65536 GiB"),
    ("slice-max-run-on-demand-too-long", lambda: a_slice(max_run_duration_s=121 * 86400), "max_run_duration_s",
     "out of range", "600 to 10368000 seconds (provisioning: on-demand)"),
    ("slice-max-run-too-short", lambda: a_slice(provisioning="spot", max_run_duration_s=599), "max_run_duration_s",
     "out of range", "600 to 10368000 seconds (provisioning: spot)"),
    ("slice-max-run-past-a-flex-start-fallback", lambda: a_slice(provisioning="spot", fallback=("flex-start",),
                                                                  max_run_duration_s=8 * 86400),
     "max_run_duration_s", "out of range", "600 to 604800 seconds (provisioning: flex-start)"),
    ("slice-fallback-from-queued", lambda: a_slice(provisioning="queued", fallback=("spot",)), "fallback",
     "with provisioning: queued", "remove fallback"),
    ("slice-fallback-unknown", lambda: a_slice(provisioning="spot", fallback=("bogus",)), "fallback[0]",
     "'bogus' is not allowed", "on-demand, spot, flex-start"),
    ("slice-fallback-repeats", lambda: a_slice(provisioning="spot", fallback=("spot",)), "fallback",
     "repeats a mode", "distinct"),
    ("workload-name", lambda: a_workload(name="W"), "name", "not DNS-safe", "lowercase"),
    ("workload-on-queued", lambda: a_workload(a_slice(provisioning="queued")), "slice", "the kit makes none",
     "on-demand, spot, reservation, flex-start"),
    ("workload-model-on-job", lambda: a_workload(model="org/model"), "model", "for kind train",
     "only with kinds serve"),
    ("workload-too-many-slices", lambda: a_workload(slices=3), "slices", "out of range", "1 to 1"),
    ("workload-on-ray-unsupported", lambda: a_workload(a_slice(generation="v5p", topology="4x4x28")), "slice",
     f"Ray {RAY_VERSION} cannot reserve", "nearest: 4x8x12, 8x8x8, 4x4x20"),
    ("job-limits-mode", lambda: kinds.JobLimits(submission_mode="Batch"), "submission_mode", "'Batch'",
     ", ".join(kinds.SUBMISSION_MODES)),
    ("job-limits-deadline", lambda: kinds.JobLimits(active_deadline_s=0), "active_deadline_s", "below 1", ">= 1"),
    ("cluster-project", lambda: a_cluster(project="X"), "project", "not a GCP project id", "6-30"),
    ("cluster-region", lambda: a_cluster(region="us_east5"), "region", "not a GCP region", "us-east5"),
    ("cluster-zone-outside-region", lambda: a_cluster(a_slice(zone="europe-west4-a")), "slices[0].zone",
     "not a zone of region 'us-east5'", "us-east5-a"),
    ("cluster-duplicate-slice", lambda: a_cluster(a_slice(), a_slice(topology="2x2")), "slices[1].name",
     "used by an earlier slice", "unique"),
    ("cluster-no-slices", lambda: ClusterSpec(project="my-ml-project", region="us-east5",
                                              cluster=GkeSpec(name="ray"), slices=()),
     "slices", "is required", "a list of slices"),
    ("cluster-foreign-workload-slice", lambda: a_cluster(a_slice(), workloads=(a_workload(a_slice(name="other")),)),
     "workloads[0].slice", "'other' is not allowed", "train"),
    ("cluster-duplicate-workload", lambda: a_cluster(a_slice(), workloads=(a_workload(), a_workload())),
     "workloads[1].name", "used by an earlier workload", "unique"),
    ("cluster-disk-on-autopilot", lambda: a_cluster(a_slice(disk_size_gib=200), mode="autopilot"),
     "slices[0].disk_size_gib", "autopilot", "mode: standard"),
    ("cluster-fallback-on-standard", lambda: a_cluster(a_slice(provisioning="spot", fallback=("on-demand",))),
     "slices[0].fallback", "with cluster.mode: standard", "mode: autopilot"),
    # Issue 18 item 9: queued provisioning is a node-pool flag (`--flex-start --enable-queued-provisioning`,
    # https://cloud.google.com/kubernetes-engine/docs/how-to/provisioningrequest), Autopilot has no node pools, and
    # a ComputeClass priority offers spot, flexStart and reservations only (https://cloud.google.com/
    # kubernetes-engine/docs/concepts/about-custom-compute-classes): the slice used to yield nothing, silently.
    ("cluster-queued-on-autopilot", lambda: a_cluster(a_slice(provisioning="queued"), mode="autopilot"),
     "slices[0].provisioning", "'queued' is not allowed with cluster.mode: autopilot",
     "on-demand, spot, reservation, flex-start; or cluster.mode: standard"),
    ("cluster-default-bucket-too-long", lambda: a_cluster(project="p" * 30, name="c" * 30), "storage.bucket",
     "not a bucket name", "3-63"),
    # docs/FACTS.md#networking-private-endpoint: with no authorized network and public CIDR access off, the IP endpoint
    # accepts no one
    ("control-plane-ip-alone", lambda: GkeSpec(name="ray", control_plane="ip"), "control_plane",
     "reachable from nowhere", "control_plane: dns (the default), or master_authorized_networks"),
    ("control-plane-choice", lambda: GkeSpec(name="ray", control_plane="public"), "control_plane", "'public'",
     "dns, ip"),
    ("alerting-channel", lambda: AlertingSpec(notification_channels=("pagerduty",)), "notification_channels[0]",
     "not a notification channel name", "projects/PROJECT/notificationChannels/NUMBER"),
    ("alerting-no-channel", lambda: AlertingSpec(notification_channels=()), "notification_channels",
     "is required to alert anyone", "one or more"),
    # GKE: at least 48 h of maintenance availability in any 32 days, windows of 4 h or more
    # (https://cloud.google.com/kubernetes-engine/docs/maintenance-window)
    ("window-too-short", lambda: MaintenanceWindowSpec(hours=3), "hours", "out of range", "4 to 24"),
    ("window-under-48h", lambda: MaintenanceWindowSpec(days=("SU",), hours=8), "hours",
     "allows 32 hours in some 32-day span; GKE requires at least 48", "at least 12 hours, or more days"),
    ("window-day", lambda: MaintenanceWindowSpec(days=("SAT",)), "days[0]", "'SAT'", "MO, TU, WE, TH, FR, SA, SU"),
    ("window-no-days", lambda: MaintenanceWindowSpec(days=()), "days", "is empty or repeats", "distinct weekdays"),
    ("window-repeated-day", lambda: MaintenanceWindowSpec(days=("SA", "SA", "SU")), "days", "repeats", "distinct"),
    ("window-start", lambda: MaintenanceWindowSpec(start_utc="25:00"), "start_utc", "not a time of day", "HH:MM"),
]


@pytest.mark.parametrize(("case", "build", "field", "problem", "valid"), DIRECT, ids=[c[0] for c in DIRECT])
def test_direct_construction_raises_the_rule_with_a_relative_field(case: str, build: Callable[[], object],
                                                                    field: str, problem: str, valid: str) -> None:
    found = {p.field: p for p in problems(build)}
    assert field in found, f"fields reported: {sorted(found)}"
    assert problem in found[field].problem
    assert valid in found[field].valid


def test_slice_create_reports_every_problem_at_once() -> None:
    fields = {p.field for p in problems(lambda: a_slice(topology="3x3", name="Bad", disk_size_gib=1,
                                                        provisioning="spot", reservation="r"))}
    assert fields == {"topology", "name", "disk_size_gib", "reservation"}


def test_slice_create_with_an_unknown_mode_skips_that_modes_rules() -> None:
    fields = {p.field for p in problems(lambda: a_slice(provisioning="nope", reservation="r", count=0))}
    assert fields == {"provisioning", "count"}


SAME_RULE: list[tuple[str, Callable[[dict[str, Any]], object], Callable[[], object], str]] = [
    # (case, edit of the example config, the same value built directly, config prefix of the relative field)
    ("label-key", lambda d: d["cluster"].update(labels={"Team": "ml"}),
     lambda: GkeSpec(name="ray-tpu", labels={"Team": "ml"}), "cluster"),
    ("head-pool", lambda d: d["cluster"].update(head_pool={"min_nodes": 4, "max_nodes": 2}),
     lambda: HeadPoolSpec(min_nodes=4, max_nodes=2), "cluster.head_pool"),
    ("spot-reservation", lambda d: d["slices"][1].update(reservation="res-1"),
     lambda: SliceSpec.create(name="serve", generation="v6e", topology="2x4", zone=ZONE, provisioning="spot",
                              reservation="res-1"), "slices[1]"),
    ("network-overlap", lambda d: d.update(network={"pods_cidr": "10.10.0.0/16"}),
     lambda: NetworkSpec(pods_cidr="10.10.0.0/16"), "network"),
    ("alerting", lambda d: d.update(alerting={"notification_channels": ["pager"]}),
     lambda: AlertingSpec(notification_channels=("pager",)), "alerting"),
    ("maintenance-window", lambda d: d["cluster"].update(maintenance_window={"days": ["SA"], "hours": 4}),
     lambda: MaintenanceWindowSpec(days=("SA",), hours=4), "cluster.maintenance_window"),
    ("disk-size", lambda d: d["slices"][0].update(disk_size_gib=5),
     lambda: SliceSpec.create(name="train", generation="v6e", topology="4x4", zone=ZONE, disk_size_gib=5),
     "slices[0]"),
]


@pytest.mark.parametrize(("case", "edit", "build", "prefix"), SAME_RULE, ids=[c[0] for c in SAME_RULE])
def test_config_and_direct_construction_raise_the_same_rule(case: str, edit: Callable[[dict[str, Any]], object],
                                                            build: Callable[[], object], prefix: str) -> None:
    """One rule, one home: the config reports the spec's own problem, placed under its config path."""
    data = yaml.safe_load(EXAMPLE.read_text())
    edit(data)
    from_config = problems(lambda: parse(yaml.safe_dump(data)))
    direct = problems(build)
    assert [str(p) for p in from_config] == [str(p.at(prefix)) for p in direct]


def test_invalid_input_at_joins_paths() -> None:
    problem = InvalidInput("labels['Team']", "bad", "good")
    assert problem.at("cluster").field == "cluster.labels['Team']"
    assert InvalidInput("[0]", "bad", "good").at("slices").field == "slices[0]"
    assert InvalidInput("zone", "bad", "good").at("").field == "zone"


# ---------------------------------------------------------------------------------------------- defaults and lookups


def test_gke_spec_defaults_a_head_pool_on_standard_and_none_on_autopilot() -> None:
    assert GkeSpec(name="ray").head_pool == HeadPoolSpec()
    assert GkeSpec(name="ray", mode="autopilot").head_pool is None
    assert GkeSpec(name="ray", mode="autopilot").autopilot


def test_slice_spec_derived_values() -> None:
    item = a_slice(count=3)
    assert (item.region, item.disk_gib, item.pool_names) == ("us-east5", DEFAULT_DISK_SIZE_GIB,
                                                             ["train-0", "train-1", "train-2"])
    assert a_slice(disk_size_gib=500).disk_gib == 500
    assert item.plan == plan_slice("v6e", "4x4")


def test_cluster_spec_lookups_list_the_known_names() -> None:
    cluster = a_cluster(a_slice(), a_slice(name="serve", topology="2x4"), workloads=(a_workload(),))
    assert cluster.slice_named("serve").plan.topology == "2x4"
    assert cluster.plans == {"train": plan_slice("v6e", "4x4"), "serve": plan_slice("v6e", "2x4")}
    assert cluster.bucket == "my-ml-project-ray-tpu-ray"
    with pytest.raises(InvalidInput) as exc:
        cluster.slice_named("nope")
    assert (exc.value.field, exc.value.valid) == ("slice", "train, serve")
    with pytest.raises(InvalidInput) as exc:
        cluster.workload("nope")
    assert (exc.value.field, exc.value.valid) == ("WORKLOAD", "w")
    with pytest.raises(InvalidInput) as exc:
        a_cluster().workload("nope")
    assert "none" in exc.value.valid


def test_with_slice_and_with_workload_check_the_cluster_rules() -> None:
    cluster = a_cluster()
    bigger = cluster.with_slice(a_slice(name="serve", topology="2x4"))
    assert [s.name for s in bigger.slices] == ["train", "serve"]
    serve = bigger.slice_named("serve")
    assert bigger.with_workload(a_workload(serve, kind="serve")).workloads[0].slice.name == "serve"
    assert [p.field for p in problems(lambda: cluster.with_slice(a_slice(topology="2x2")))] == ["slices[1].name"]
    assert [p.field for p in problems(lambda: cluster.with_workload(a_workload(a_slice(name="x"))))] == [
        "workloads[0].slice"]


# ---------------------------------------------------------------------------------------------- JSON


WORKLOADS: list[tuple[str, Callable[[], WorkloadSpec]]] = [
    ("train-multi-host", lambda: a_workload(a_slice(count=2), slices=1)),
    ("serve-with-model", lambda: a_workload(a_slice(name="serve", topology="2x4", provisioning="spot"), kind="serve",
                                            name="serve", model="org/model", image="example/ray:tpu")),
    ("smoke-on-reservation", lambda: a_workload(a_slice(generation="v5p", topology="2x2x4", provisioning="reservation",
                                                        reservation="res-1", disk_size_gib=200), kind="smoke")),
    ("flex-start-tpu7x", lambda: a_workload(a_slice(generation="tpu7x", topology="4x4x4", zone="us-central1-c",
                                                    provisioning="flex-start", max_run_duration_s=3600))),
    ("autopilot-fallback", lambda: a_workload(a_slice(provisioning="reservation", reservation="r",
                                                      fallback=("spot", "on-demand")))),
]


@pytest.mark.parametrize(("case", "make"), WORKLOADS, ids=[c[0] for c in WORKLOADS])
def test_workload_spec_round_trips_through_json_and_the_environment(case: str,
                                                                    make: Callable[[], WorkloadSpec]) -> None:
    work = make()
    assert WorkloadSpec.from_json(json.loads(json.dumps(work.to_json()))) == work
    env = work.workload_env()
    assert list(env) == [WORKLOAD_ENV]
    assert json.loads(env[WORKLOAD_ENV]) == work.to_json()
    assert WorkloadSpec.from_env(env) == work
    assert SliceSpec.from_json(work.slice.to_json()) == work.slice


def test_from_env_reads_the_process_environment_by_default(monkeypatch: pytest.MonkeyPatch) -> None:
    work = a_workload()
    monkeypatch.setenv(WORKLOAD_ENV, work.workload_env()[WORKLOAD_ENV])
    assert WorkloadSpec.from_env() == work
    monkeypatch.delenv(WORKLOAD_ENV)
    with pytest.raises(InvalidInput) as exc:
        WorkloadSpec.from_env()
    assert exc.value.field == WORKLOAD_ENV


GARBLED = [
    ("missing", None),
    ("empty", ""),
    ("not-json", "{name: w"),
    ("json-list", "[1, 2]"),
    ("json-string", '"train"'),
    ("missing-keys", '{"name": "w"}'),
    ("unknown-key", json.dumps({**a_workload().to_json(), "colour": "red"})),
    ("plan-garbled", json.dumps({**a_workload().to_json(), "slice": {**a_slice().to_json(), "plan": {"x": 1}}})),
]


@pytest.mark.parametrize(("case", "text"), GARBLED, ids=[c[0] for c in GARBLED])
def test_from_env_with_a_missing_or_garbled_spec_is_invalid_input(case: str, text: str | None) -> None:
    environ = {} if text is None else {WORKLOAD_ENV: text}
    with pytest.raises(InvalidInput) as exc:
        WorkloadSpec.from_env(environ)
    assert exc.value.exit_code == EXIT_INVALID
    assert exc.value.field == WORKLOAD_ENV
    assert "WorkloadSpec.to_json()" in exc.value.valid


@pytest.mark.parametrize(("case", "edit", "field"), [
    ("unknown-kind", lambda d: d.update(kind="stream"), "kind"),
    ("unknown-provisioning", lambda d: d["slice"].update(provisioning="preemptible"), "provisioning"),
    ("invalid-name", lambda d: d.update(name="W"), "name"),
])
def test_from_env_with_a_spec_that_breaks_a_rule_names_the_field(case: str, edit: Callable[[dict[str, Any]], object],
                                                                 field: str) -> None:
    data = a_workload().to_json()
    edit(data)
    found = problems(lambda: WorkloadSpec.from_env({WORKLOAD_ENV: json.dumps(data)}))
    assert [p.field for p in found] == [field]


# ---------------------------------------------------------------------------------------------- registries


@pytest.mark.parametrize("mode", provisioning.MODES.values(), ids=lambda m: m.name)
def test_every_provisioning_mode_builds_a_slice_and_knows_its_reservation_rule(
        mode: provisioning.Provisioning) -> None:
    reservation = "res-1" if mode.needs_reservation else None
    item = a_slice(provisioning=mode.name, reservation=reservation)
    assert item.provisioning is mode
    assert provisioning.mode(mode.name) is mode
    wrong = None if mode.needs_reservation else "res-1"
    assert [p.field for p in mode.problems(wrong, None)] == ["reservation"]


@pytest.mark.parametrize("kind", kinds.KINDS.values(), ids=lambda k: k.name)
def test_every_workload_kind_builds_a_workload(kind: kinds.WorkloadKind) -> None:
    item = a_slice(topology="4x4" if kind_fields.runs_on(kind.name, plan_slice("v6e", "4x4")) else "2x4")
    work = a_workload(item, kind=kind.name, model="org/model" if kind.takes_model else None,
                      **kind_fields.fields(kind.name))
    assert work.kind is kind
    if kind.runs_entrypoint:  # the team's own driver: no program of the kit
        assert kind.program is None and work.entrypoint
    else:
        assert kind.module == f"raytpu.workloads.{kind.program}"
    assert (kind.limits is not None) == kind.is_job == (kind.object_kind == "RayJob")


@pytest.mark.parametrize(("lookup", "registry"), [(provisioning.mode, provisioning.NAMES), (kinds.kind, kinds.NAMES)])
def test_registry_lookups_list_their_names(lookup: Callable[[str], object], registry: tuple[str, ...]) -> None:
    with pytest.raises(InvalidInput) as exc:
        lookup("nope")
    assert exc.value.valid == ", ".join(registry)


def test_registry_names_are_their_keys_in_order() -> None:
    assert provisioning.NAMES == ("on-demand", "spot", "reservation", "flex-start", "queued")
    assert all(name == mode.name for name, mode in provisioning.MODES.items())
    assert kinds.NAMES == ("smoke", "train", "job", "serve", "batch")
    assert all(name == kind.name for name, kind in kinds.KINDS.items())


# ------------------------------------------------------------------ names GKE's TPU webhook would truncate

NAME_CAP_CONFIG = """\
project: my-ml-project
region: us-east5
cluster: {{name: ray-tpu}}
slices:
  - {{name: {slice}, generation: v6e, topology: {topology}, zone: us-east5-b}}
workloads:
  - {{name: {work}, kind: {kind}, slice: {slice}}}
"""


@pytest.mark.parametrize(("slice_name", "topology", "work", "kind", "field", "limit"), [
    # multi-host (v6e 4x4 = 4 hosts): smoke-<slice>-0-<6-char run id> must fit 35 characters
    ("s" * 21, "4x4", "train", "train", "slices[0].name", 20),
    # a RayJob is <name>-<run id>: 35 - 7 = 28 characters
    ("train", "4x4", "t" * 29, "train", "workloads[0].name", 28),
])
def test_names_the_tpu_webhook_would_truncate_are_rejected_on_multi_host_slices(
        slice_name: str, topology: str, work: str, kind: str, field: str, limit: int) -> None:
    """ai-on-gke kuberay-tpu-webhook ``CheckName`` keeps the last 50 characters of ``<cluster>-headless`` while
    KubeRay names the Service uncut: RayJob/RayService names over 35 characters break multi-host slices."""
    text = NAME_CAP_CONFIG.format(slice=slice_name, topology=topology, work=work, kind=kind)
    with pytest.raises((InvalidInput, InvalidInputs)) as caught:
        parse(text)
    assert isinstance(caught.value, InvalidInput | InvalidInputs)
    found = [p for p in problems_of(caught.value) if p.field == field]
    assert found and "truncat" in found[0].problem and found[0].valid.startswith(f"at most {limit} characters")


DCN_NAME_CONFIG = """
project: my-ml-project
region: us-east5
cluster: {{name: ray-tpu}}
slices:
  - {{name: {slice}, generation: v6e, topology: {topology}, zone: us-east5-b, count: 2}}
workloads:
  - {{name: train, kind: train, slice: {slice}, slices: {slices}}}
"""


@pytest.mark.parametrize(("slice_name", "topology", "slices", "field", "longest"), [
    # issue 28 item 10: a workload spanning 2 copies makes `raytpu smoke` run smoke-<slice>-dcn-<run id> (the longest)
    ("s" * 18, "4x4", 2, None, "smoke-" + "s" * 18 + "-dcn-xxxxxx"),  # 35: fits
    ("s" * 19, "4x4", 2, "workloads[0].slice", "smoke-" + "s" * 19 + "-dcn-xxxxxx"),  # 36: the DCN job overflows
    ("s" * 20, "4x4", 1, None, "smoke-" + "s" * 20 + "-1-xxxxxx"),  # no DCN job: the per-copy jobs bound it
    ("s" * 21, "4x4", 1, "slices[0].name", "smoke-" + "s" * 21 + "-1-xxxxxx"),
    ("s" * 24, "2x4", 1, None, "smoke-" + "s" * 24 + "-1-xxxxxx"),  # single host: no webhook truncation to fear
    ("s" * 25, "2x4", 1, "slices[0].name", "smoke-" + "s" * 25),  # smoke-<slice> is a workload name: a DNS label
])
def test_validate_bounds_the_longest_name_each_slice_derives(slice_name: str, topology: str, slices: int,
                                                             field: str | None, longest: str) -> None:
    """validate counts the DCN smoke job ``raytpu smoke`` derives, so a config it passes never makes smoke refuse."""
    from raytpu.core.manifests import kuberay
    text = DCN_NAME_CONFIG.format(slice=slice_name, topology=topology, slices=slices)
    if field is None:
        spec = parse(text)
        jobs = (kuberay.smoke_jobs(spec, images=FIXTURE_IMAGES, service_account="k", bucket="b", suffix="x" * 6)
                + kuberay.dcn_smoke_jobs(spec, images=FIXTURE_IMAGES, service_account="k", bucket="b",
                                         suffix="x" * 6))
        assert max(len(j["metadata"]["name"]) for j in jobs) == len(longest)
        return
    with pytest.raises((InvalidInput, InvalidInputs)) as caught:
        parse(text)
    assert isinstance(caught.value, InvalidInput | InvalidInputs)
    found = [p for p in problems_of(caught.value) if p.field == field]
    assert found and f"({longest})" in found[0].problem and found[0].valid.startswith("at most "), found


def test_derived_names_have_one_home() -> None:
    """The builders name smoke jobs with raytpu.core.common.names, the functions validate bounds (issue 29.2)."""
    from raytpu.core.common import names
    from raytpu.core.manifests import smoke_runs
    spec = parse(DCN_NAME_CONFIG.format(slice="pool", topology="4x4", slices=2))
    assert [run.base for run in smoke_runs.smoke_workloads(spec)] == [names.smoke_job("pool", i) for i in (0, 1)]
    assert [b for b, _ in smoke_runs.dcn_smoke_workloads(spec)] == [names.dcn_smoke_job("pool")] == ["smoke-pool-dcn"]
    assert names.longest_smoke_job("pool", 2, True) == "smoke-pool-dcn"
    assert names.longest_smoke_job("pool", 200, False) == "smoke-pool-199"
    assert names.run_name("train", "abc123") == "train-abc123" and names.run_name("train", "") == "train"


def test_long_names_are_fine_on_single_host_slices() -> None:
    """One host needs no headless-service hostnames: only the DNS-label rules apply."""
    spec = parse(NAME_CAP_CONFIG.format(slice="s" * 24, topology="2x4", work="t" * 30, kind="train"))
    assert spec.workloads[0].plan.single_host


def test_a_manual_run_id_that_makes_a_multi_host_job_name_too_long_is_rejected() -> None:
    from raytpu.core.manifests import kuberay
    spec = parse(NAME_CAP_CONFIG.format(slice="train", topology="4x4", work="train", kind="train"))
    with pytest.raises(InvalidInput, match="longer than 35 characters"):
        kuberay.workload_manifest(spec, spec.workloads[0], images=FIXTURE_IMAGES, service_account="ray", bucket="b",
                                  name="train-" + "r" * 30)
