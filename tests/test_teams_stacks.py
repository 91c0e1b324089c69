"""Issue 69, the stacks of ``teams``: the cluster stack installs Kueue 0.19.2 by Helm and gives each team a Google
service account writing its own folders only; the workloads stack makes each team's namespace and KSA and applies
every Kueue object, each valid against Kueue v0.19.2's CRDs. Without ``teams`` neither stack has any of it.

Configs: one team (Standard), five teams on every provisioning mode (Standard, a queued slice: GKE's queued
provisioning as an admission check), two teams on Autopilot (IP endpoint: the cluster CA). checkov scans the five."""

from __future__ import annotations

import json
import re
import subprocess
import tempfile
from pathlib import Path
from typing import Any

import checkov_skips
import pytest
import yaml
from _synth import (
    AUTOPILOT_EXAMPLE,
    STANDARD_EXAMPLE,
    checkov_bin,
    resources,
    synth_config,
    synth_text_out,
)
from image_refs import FIXTURE_REFS
from kueue_crd import crds, namespaced, rule_errors, schema_errors

from raytpu.config import parse
from raytpu.core.common.errors import InvalidInput, InvalidInputs
from raytpu.core.manifests import kueue
from raytpu.core.specs.cluster import teams
from raytpu.core.specs.runtime import compile_cache, xla_cache
from raytpu.core.specs.spec import ClusterSpec

pytestmark = [pytest.mark.synth, pytest.mark.timeout(900)]

ROOT = Path(__file__).resolve().parents[1]
CHART_VALUES = ROOT / "tests" / "data" / "kueue-chart" / "v0.19.2" / "values.yaml"

_TRAIN = "  - name: train\n    kind: train\n    slice: train\n"
ONE_TEAM = STANDARD_EXAMPLE.read_text().replace(_TRAIN, _TRAIN + "    team: alpha\n", 1) + """
teams:
  - {name: alpha, quota: {train: 16, serve: 8}}
"""
"""The Standard example, its training run alpha's."""
FIVE_TEAMS = """
project: my-ml-project
region: us-central1
cluster: {name: shared}
storage:
  bucket: shared-ckpt
  data_buckets: [{name: team-data}, {name: team-results, access: read-write}]
slices:
  - {name: od, generation: v5p, topology: 2x2x4, zone: us-central1-a, count: 2}
  - {name: sp, generation: v5e, topology: 2x4, machine_type: ct5lp-hightpu-4t, zone: us-central1-a,
     provisioning: spot}
  - {name: rs, generation: v6e, topology: 2x4, zone: us-central1-b, provisioning: reservation, reservation: r1,
     max_run_duration_s: 86400}
  - {name: fs, generation: tpu7x, topology: 4x4x4, zone: us-central1-c, provisioning: flex-start,
     max_run_duration_s: 7200, disk_size_gib: 200}
  - {name: qd, generation: v4, topology: 2x2x1, zone: us-central1-a, provisioning: queued}
teams:
  - {name: alpha, quota: {od: 32, qd: 4}}
  - {name: beta, quota: {sp: 8}, can_borrow: true}
  - {name: gamma, quota: {rs: 8, od: 16}}
  - {name: delta, quota: {fs: 64}}
  - {name: epsilon, can_borrow: true}
workloads:
  - {name: pretrain, kind: train, slice: od, team: alpha, priority: high}
  - {name: sweep, kind: train, slice: sp, team: beta, priority: low}
  - {name: probe, kind: train, slice: qd, team: epsilon}
"""
"""Five teams over one slice of each provisioning mode (a queued one among them), two of them borrowing."""
AUTOPILOT_TEAMS = AUTOPILOT_EXAMPLE.read_text().replace(
    "  release_channel: RAPID\n", "  release_channel: RAPID\n  control_plane: ip\n", 1).replace(
    _TRAIN, _TRAIN + "    team: research\n", 1) + """
teams:
  - {name: research, quota: {train: 16}}
  - {name: product, quota: {big: 8}, can_borrow: true}
"""
"""The Autopilot example on its IP endpoint (so Helm verifies the cluster CA), two teams."""
CONFIGS = {"one-team": ONE_TEAM, "five-teams": FIVE_TEAMS, "autopilot-teams": AUTOPILOT_TEAMS}


def _synth(name: str) -> tuple[Path, dict[str, dict[str, Any]]]:
    return synth_text_out(CONFIGS[name])


def _spec(name: str) -> ClusterSpec:
    return parse(CONFIGS[name])


def _stack(stacks: dict[str, dict[str, Any]], suffix: str) -> dict[str, Any]:
    (found,) = [s for sid, s in stacks.items() if sid.endswith(suffix)]
    return found


def _path(resource: dict[str, Any]) -> str:
    """The construct path of a synthesized resource, less its stack."""
    return str(resource["//"]["metadata"]["path"]).split("/", 1)[1]


def _kueue_manifests(stack: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Construct id -> manifest of every Kueue object the stack applies."""
    return {_path(r).split("/")[0]: r["manifest"] for r in resources(stack, "kubernetes_manifest").values()
            if str(r["manifest"].get("apiVersion", "")).startswith("kueue.x-k8s.io/")}


# ------------------------------------------------------------------------------------------ without teams


@pytest.mark.parametrize("example", [STANDARD_EXAMPLE, AUTOPILOT_EXAMPLE], ids=["standard", "autopilot"])
def test_without_teams_there_is_no_helm_release_and_no_kueue_object(example: Path) -> None:
    stacks = synth_config(str(example))[1]
    cluster, workloads = _stack(stacks, "-cluster"), _stack(stacks, "-workloads")
    text = json.dumps(stacks)
    assert "helm_release" not in text and "helm" not in cluster.get("provider", {})
    assert "helm" not in cluster["terraform"]["required_providers"]
    assert "ephemeral" not in cluster  # no token in the cluster stack: it targets Terraform as before
    assert _kueue_manifests(workloads) == {}
    assert "kueue" not in text
    assert not re.search(r'"team-[a-z0-9-]+-(identity|namespace|ksa)', text)


# ------------------------------------------------------------------------------------------ with teams


@pytest.mark.parametrize("name", list(CONFIGS))
def test_the_stacks_synthesize_a_namespace_ksa_and_identity_per_team(name: str) -> None:
    spec = _spec(name)
    stacks = _synth(name)[1]
    cluster, workloads = _stack(stacks, "-cluster"), _stack(stacks, "-workloads")
    gsas = {_path(r).split("/")[1] for r in resources(cluster, "google_service_account").values()}
    assert {f"team-{t.name}-identity" for t in spec.teams} <= gsas
    for team in spec.teams:
        (gsa,) = [r for r in resources(cluster, "google_service_account").values()
                  if _path(r) == f"gke/team-{team.name}-identity/gsa"]
        assert gsa["account_id"] == teams.service_account_id(spec.cluster.name, team.name)
        assert gsa["project"] == spec.project
    namespaces = {_path(r): r["metadata"][0]["name"] for r in resources(workloads, "kubernetes_namespace_v1").values()}
    assert {f"team-{t.name}-namespace/namespace": t.namespace for t in spec.teams}.items() <= namespaces.items()
    assert len(resources(cluster, "helm_release")) == 1
    assert len(resources(workloads, "kubernetes_service_account_v1")) == 1 + len(spec.teams)


def _release(name: str) -> dict[str, Any]:
    (release,) = resources(_stack(_synth(name)[1], "-cluster"), "helm_release").values()
    return release


def _manager_config(release: dict[str, Any]) -> dict[str, Any]:
    (values,) = release["values"]
    config: dict[str, Any] = yaml.safe_load(yaml.safe_load(values)["managerConfig"]["controllerManagerConfigYaml"])
    return config


@pytest.mark.parametrize("name", list(CONFIGS))
def test_the_helm_release_pins_kueue_0_19_2_from_its_oci_repository_with_the_ray_integrations(name: str) -> None:
    release = _release(name)
    assert (release["chart"], release["version"], release["repository"]) == (
        "kueue", "0.19.2", "oci://registry.k8s.io/kueue/charts")
    assert release["version"] == kueue.VERSION
    assert (release["name"], release["namespace"], release["create_namespace"]) == ("kueue", "kueue-system", True)
    (values,) = release["values"]
    assert set(yaml.safe_load(values)) == {"managerConfig"}  # no feature gate: ProvisioningACC is GA, its gate gone
    frameworks = _manager_config(release)["integrations"]["frameworks"]
    assert {"ray.io/rayjob", "ray.io/raycluster"} <= set(frameworks)


def test_the_manager_config_is_the_charts_own_for_the_teams_namespaces_and_ray_alone() -> None:
    """A value for controllerManagerConfigYaml replaces the chart's whole string: the kit's is the chart's default
    (vendored values.yaml at v0.19.2) with two changes. Its frameworks are the two Ray ones: the chart's list holds
    ``pod``, ``deployment`` and ``statefulset``, whose webhooks then fail closed (no pod is created anywhere Kueue
    manages while its controller is down). And Kueue manages the teams' namespaces alone (every webhook's
    namespaceSelector), so the stack's own serving and smoke never wait on it.
    Source: Kueue v0.19.2 charts/kueue/templates/webhook/manifests.yaml (``mpod.kb.io``, ``mrayjob.kb.io``)."""
    chart = yaml.safe_load(yaml.safe_load(CHART_VALUES.read_text())["managerConfig"]["controllerManagerConfigYaml"])
    assert "pod" in chart["integrations"]["frameworks"]  # the chart's own default: why the kit lists its own
    ours = _manager_config(_release("five-teams"))
    changed = ("integrations", "managedJobsNamespaceSelector")
    assert {k: v for k, v in ours.items() if k not in changed} == {k: v for k, v in chart.items() if k not in changed}
    assert ours["integrations"] == {"frameworks": ["ray.io/rayjob", "ray.io/raycluster"]}
    assert ours["managedJobsNamespaceSelector"] == {"matchLabels": {kueue.QUEUED_NAMESPACE_LABEL: "true"}}
    workloads = _stack(_synth("five-teams")[1], "-workloads")
    namespaces = [r["metadata"][0] for r in workloads["resource"]["kubernetes_namespace_v1"].values()
                  if r["metadata"][0]["name"].startswith("raytpu-")]
    assert len(namespaces) == 5
    assert all(n["labels"][kueue.QUEUED_NAMESPACE_LABEL] == "true" for n in namespaces), namespaces


def test_helm_installs_kueue_after_the_cluster_and_every_node_pool() -> None:
    cluster = _stack(_synth("five-teams")[1], "-cluster")
    pools = {f"google_container_node_pool.{lid}" for lid in resources(cluster, "google_container_node_pool")}
    (cluster_id,) = resources(cluster, "google_container_cluster")
    depends = set(_release("five-teams")["depends_on"])
    assert depends == {f"google_container_cluster.{cluster_id}", *pools}
    assert len(pools) == 2 + 1 + 1 + 1 + 1 + 1  # od x2, sp, rs, fs, qd, and the head pool
    auto = _stack(_synth("autopilot-teams")[1], "-cluster")
    (auto_id,) = resources(auto, "google_container_cluster")
    assert _release("autopilot-teams")["depends_on"] == [f"google_container_cluster.{auto_id}"]


@pytest.mark.parametrize(("name", "ca"), [("one-team", False), ("autopilot-teams", True)])
def test_the_helm_provider_reaches_the_cluster_with_an_ephemeral_token(name: str, ca: bool) -> None:
    """The workloads stack's kubernetes provider, in Helm 3.x's shape (``kubernetes`` an object): the cluster's
    endpoint, an ephemeral access token (never in state), the cluster CA on the IP endpoint only."""
    cluster = _stack(_synth(name)[1], "-cluster")
    (helm,) = cluster["provider"]["helm"]
    kube = helm["kubernetes"]
    assert kube["token"] == "${ephemeral.google_client_config.client.access_token}"
    assert "google_client_config" in cluster["ephemeral"]
    assert kube["host"].startswith("https://${google_container_cluster.")
    assert kube["host"].endswith(".endpoint}" if ca else ".dns_endpoint_config[0].endpoint}")
    if ca:
        assert re.fullmatch(r"\$\{base64decode\(google_container_cluster\.\S+\.master_auth\[0\]"
                            r"\.cluster_ca_certificate\)\}", kube["cluster_ca_certificate"])
    else:
        assert "cluster_ca_certificate" not in kube
    assert cluster["terraform"]["required_providers"]["helm"]["version"] == "3.3.0"


def test_the_cluster_stack_with_teams_synthesizes_in_an_app_that_targets_older_terraform() -> None:
    """Its Helm token is ephemeral (Terraform 1.10+): the stack targets 1.10 itself, like the workloads stack."""
    from raytpu.modules.parts.cdk import App
    from raytpu.stacks.cluster import ClusterStack, ClusterStackProps
    from raytpu.stacks.workloads import WorkloadsStack, WorkloadsStackProps

    app = App(outdir=tempfile.mkdtemp(prefix="raytpu-tf-"), context={"targetVersions": {"terraform": ">=1.5.7"}})
    cluster = ClusterStack(app, "c", ClusterStackProps(spec=_spec("one-team")))
    WorkloadsStack(app, "w", WorkloadsStackProps(cluster=cluster, images=FIXTURE_REFS))
    app.synth()


def test_a_slice_added_later_is_waited_for_too() -> None:
    """``ClusterStack.add_slice`` after the stack is built: Kueue installs after its pool as well."""
    from raytpu.core.specs.spec import SliceSpec
    from raytpu.modules.parts.cdk import App
    from raytpu.stacks.cluster import ClusterStack, ClusterStackProps

    outdir = Path(tempfile.mkdtemp(prefix="raytpu-teams-"))
    app = App(outdir=str(outdir))
    cluster = ClusterStack(app, "c", ClusterStackProps(spec=_spec("one-team")))
    (pool,) = cluster.add_slice(SliceSpec.create(name="late", generation="v5e", topology="2x2", zone="us-east5-a",
                                                 provisioning="spot"))
    app.synth()
    stack = json.loads((outdir / "stacks" / "c" / "cdk.tf.json").read_text())
    (release,) = resources(stack, "helm_release").values()
    assert f"google_container_node_pool.{pool.pool.friendly_unique_id}" in release["depends_on"]
    assert len(release["depends_on"]) == 1 + len(resources(stack, "google_container_node_pool"))


# ------------------------------------------------------------------------------------------ identities


_TERM = re.compile(r'^resource\.name(?:\.startsWith\("([^"]*)"\)| == "([^"]*)")$')


def _allows(expression: str, bucket_token: str, obj: str) -> bool:
    """Whether an IAM condition the kit writes holds for object ``obj`` of the bucket: an ``||`` of ``startsWith`` and
    ``==`` on ``resource.name``, parenthesized and followed by ``&& !resource.name.startsWith(...)`` exclusions where
    some folder inside is not to be written."""
    name = f"projects/_/buckets/B/objects/{obj}"
    either, *excluded = expression.replace(bucket_token, "B").split(" && ")
    if excluded:
        assert either.startswith("(") and either.endswith(")"), either
        either = either[1:-1]
    for term in excluded:
        match = _TERM.match(term.removeprefix("!"))
        assert term.startswith("!") and match and match[1] is not None, term
        if name.startswith(match[1]):
            return False
    for term in either.split(" || "):
        match = _TERM.match(term)
        assert match, term
        prefix, exact = match.groups()
        if (prefix is not None and name.startswith(prefix)) or (exact is not None and name == exact):
            return True
    return False


def _grants(cluster: dict[str, Any], owner: str) -> list[dict[str, Any]]:
    """The bucket grants of construct ``gke/<owner>``."""
    return [r for r in resources(cluster, "google_storage_bucket_iam_member").values()
            if _path(r).startswith(f"gke/{owner}/")]


@pytest.mark.parametrize("name", list(CONFIGS))
def test_each_team_writes_exactly_its_own_folders_and_reads_only_the_core_and_its_code(name: str) -> None:
    spec = _spec(name)
    cluster = _stack(_synth(name)[1], "-cluster")
    (bucket_id,) = resources(cluster, "google_storage_bucket")
    token = f"${{google_storage_bucket.{bucket_id}.name}}"
    kit_data = sorted((g["bucket"], g["role"]) for g in _grants(cluster, "workload-identity")
                      if g["bucket"] != token)
    for team in spec.teams:
        grants = _grants(cluster, f"team-{team.name}-identity")
        ours = [g for g in grants if g["bucket"] == token]
        writes = {g["condition"]["title"]: g["condition"]["expression"] for g in ours
                  if g["role"] == "roles/storage.objectUser"}
        reads = {g["condition"]["title"]: g["condition"]["expression"] for g in ours
                 if g["role"] == "roles/storage.objectViewer"}
        lookups = reads.pop("raytpu pods look up their folders' names")
        assert sorted(writes) == sorted(f"raytpu pods write {f}/" for f in team.write_folders)
        assert sorted(reads) == sorted(f"raytpu pods read {f}/" for f in team.read_folders)
        # nothing else on the kit's bucket but its metadata (Ray Train's storage.buckets.get), unconditioned
        assert sorted(g["role"] for g in ours if "condition" in g) == sorted(
            ["roles/storage.objectUser"] * len(team.write_folders) +
            ["roles/storage.objectViewer"] * (len(team.read_folders) + 1))
        # GCS FUSE looks up each name on the way to a folder as a file too (a 403 there fails the lookup): those exact
        # names are readable, nothing under another folder. Source: gcsfuse internal/fs/inode/dir.go LookUpChild
        for name in ("raytpu", "code", f"code/{team.name}", "checkpoints", f"checkpoints/{team.name}",
                     "compile-cache", f"compile-cache/{team.name}", "outputs", f"outputs/{team.name}"):
            assert _allows(lookups, token, name), name
        for obj in ("checkpoints/train", "checkpoints/x/y", "code/x", "raytpu/x", f"checkpoints/{team.name}/x"):
            assert not _allows(lookups, token, obj), obj
        assert [g["role"] for g in ours if "condition" not in g] == ["roles/storage.legacyBucketReader"]
        assert all(g["member"].startswith("serviceAccount:${google_service_account.gke_team-" + team.name)
                   for g in grants)
        # data buckets: what the kit's pods get
        assert sorted((g["bucket"], g["role"]) for g in grants if g["bucket"] != token) == kit_data

        def writable(obj: str, exprs: dict[str, str] = writes) -> bool:
            return any(_allows(e, token, obj) for e in exprs.values())

        for folder in team.write_folders:
            assert writable(f"{folder}/step-1/state.msgpack")
        others = [f for t in spec.teams if t.name != team.name for f in t.write_folders]
        for obj in [*(f"{f}/x" for f in others), f"{xla_cache.PREFIX}/v/v6e-2x4/m/cache.bin",
                    f"{compile_cache.DEFAULT_FOLDER}/jax_cache_entry", "checkpoints/train/x", "raytpu/raytpu.zip",
                    f"code/{team.name}/code.zip", f"{team.name}/x", "outputs/x"]:
            assert not writable(obj), (team.name, obj)
        readable = {**reads, **writes}
        assert writable("raytpu/raytpu-0.1.0-abc.zip", readable)
        assert writable(f"code/{team.name}/lm-1234.zip", readable)
        for obj in [*(f"code/{t.name}/lm.zip" for t in spec.teams if t.name != team.name), *(f"{f}/x" for f in others),
                    f"{xla_cache.PREFIX}/x", "checkpoints/train/x", "inputs/x"]:
            assert not writable(obj, readable), (team.name, obj)


@pytest.mark.parametrize("name", list(CONFIGS))
def test_each_team_ksa_is_bound_to_its_gsa_and_annotated_with_its_email(name: str) -> None:
    spec = _spec(name)
    stacks = _synth(name)[1]
    cluster, workloads = _stack(stacks, "-cluster"), _stack(stacks, "-workloads")
    for team in spec.teams:
        (gsa_id,) = [lid for lid, r in resources(cluster, "google_service_account").items()
                     if _path(r) == f"gke/team-{team.name}-identity/gsa"]
        (binding,) = [r for r in resources(cluster, "google_service_account_iam_member").values()
                      if _path(r) == f"gke/team-{team.name}-identity/workload-identity-user"]
        assert binding["member"] == f"serviceAccount:{spec.project}.svc.id.goog[{team.namespace}/{spec.ksa_name}]"
        assert binding["service_account_id"] == f"${{google_service_account.{gsa_id}.name}}"
        assert binding["role"] == "roles/iam.workloadIdentityUser"
        (ksa,) = [r for r in resources(workloads, "kubernetes_service_account_v1").values()
                  if _path(r) == f"team-{team.name}-ksa/ksa"]
        (ns_id,) = [lid for lid, r in resources(workloads, "kubernetes_namespace_v1").items()
                    if _path(r) == f"team-{team.name}-namespace/namespace"]
        assert ksa["metadata"]["name"] == spec.ksa_name
        assert ksa["metadata"]["namespace"] == f"${{kubernetes_namespace_v1.{ns_id}.metadata[0].name}}"
        annotation = ksa["metadata"]["annotations"]["iam.gke.io/gcp-service-account"]
        assert annotation.endswith(f"cross-stack-output-google_service_account{gsa_id}email}}"), annotation
        assert ksa["automount_service_account_token"] is False


# ------------------------------------------------------------------------------------------ Kueue objects


@pytest.mark.parametrize("name", list(CONFIGS))
def test_every_kueue_object_is_applied_and_valid_against_the_v0_19_2_crds(name: str) -> None:
    spec = _spec(name)
    applied = _kueue_manifests(_stack(_synth(name)[1], "-workloads"))
    expected = kueue.objects(spec)
    assert {f"kueue-{m['kind'].lower()}-{m['metadata']['name']}" for m in expected} == set(applied)
    canonical = {json.dumps(m, sort_keys=True) for m in expected}
    assert {json.dumps(m, sort_keys=True) for m in applied.values()} == canonical and len(canonical) == len(expected)
    problems = {cid: schema_errors(m) + rule_errors(m) for cid, m in applied.items()}
    assert {cid: p for cid, p in problems.items() if p} == {}
    kinds = {m["kind"] for m in applied.values()}
    assert {"ResourceFlavor", "Cohort", "WorkloadPriorityClass", "ClusterQueue", "LocalQueue"} <= kinds
    assert ("AdmissionCheck" in kinds) == ("ProvisioningRequestConfig" in kinds) == (name == "five-teams")


def test_the_queued_slice_is_admitted_through_gkes_queued_provisioning() -> None:
    applied = _kueue_manifests(_stack(_synth("five-teams")[1], "-workloads"))
    check = applied[f"kueue-admissioncheck-{kueue.PROVISIONING_CHECK}"]
    assert check["spec"]["controllerName"] == "kueue.x-k8s.io/provisioning-request"
    config = applied[f"kueue-provisioningrequestconfig-{kueue.PROVISIONING_CHECK}"]
    assert config["spec"]["provisioningClassName"] == "queued-provisioning.gke.io"
    # on the queues of the teams that may run on the queued slice alone: alpha (its quota), beta and epsilon
    # (borrowing it); a queue with an inactive check admits nothing (Kueue v0.19.2 pkg/cache/scheduler/clusterqueue.go)
    checked = {}
    for team in _spec("five-teams").teams:
        queue = applied[f"kueue-clusterqueue-{team.queue}"]
        checked[team.name] = queue["spec"].get("admissionChecksStrategy", {}).get("admissionChecks")
    want = [{"name": kueue.PROVISIONING_CHECK, "onFlavors": ["raytpu-qd"]}]
    assert checked == {"alpha": want, "beta": want, "gamma": None, "delta": None, "epsilon": want}


@pytest.mark.parametrize("name", list(CONFIGS))
def test_cluster_scoped_kueue_objects_go_first_and_each_local_queue_after_its_namespace(name: str) -> None:
    workloads = _stack(_synth(name)[1], "-workloads")
    by_id = {f"kubernetes_manifest.{lid}": (_path(r).split("/")[0], r) for lid, r in
             resources(workloads, "kubernetes_manifest").items()}
    namespaces = {f"kubernetes_namespace_v1.{lid}": _path(r).split("/")[0]
                  for lid, r in resources(workloads, "kubernetes_namespace_v1").items()}
    cluster_scoped = {addr for addr, (cid, r) in by_id.items()
                      if cid.startswith("kueue-") and not namespaced(r["manifest"]["kind"])}
    queues = {addr for addr in cluster_scoped if by_id[addr][0].startswith("kueue-clusterqueue-")}
    for cid, r in by_id.values():
        if not cid.startswith("kueue-"):
            continue
        kind, depends = r["manifest"]["kind"], set(r.get("depends_on", []))
        if kind == "LocalQueue":
            team = r["manifest"]["metadata"]["namespace"].removeprefix(teams.NAMESPACE_PREFIX)
            assert {namespaces[d] for d in depends if d in namespaces} == {f"team-{team}-namespace"}
            assert cluster_scoped <= depends
        elif kind == "ClusterQueue":
            assert depends == cluster_scoped - queues
        else:
            assert depends == set()
        assert namespaced(kind) == (kind == "LocalQueue")


def test_the_kit_knows_each_kinds_scope_as_the_crds_state_it() -> None:
    from raytpu.modules.kueue_object import CLUSTER_SCOPED, NAMESPACED

    assert {k for k in (*CLUSTER_SCOPED, *NAMESPACED) if namespaced(k)} == set(NAMESPACED)
    assert set(CLUSTER_SCOPED) | set(NAMESPACED) <= set(crds())


def test_the_crd_check_has_teeth() -> None:
    spec = _spec("five-teams")
    queue = next(m for m in kueue.objects(spec) if m["kind"] == "ClusterQueue")
    bad = json.loads(json.dumps(queue))
    bad["spec"]["queueingStrategy"] = "Sometimes"
    bad["spec"]["unknownField"] = 1
    assert len(schema_errors(bad)) == 2
    bad = json.loads(json.dumps(queue))
    bad["spec"].pop("cohortName")
    bad["spec"]["resourceGroups"][0]["flavors"][0]["resources"].append({"name": "cpu", "nominalQuota": 1})
    bad["spec"]["resourceGroups"][1]["coveredResources"].append("google.com/tpu")
    bad["spec"]["admissionChecksStrategy"]["admissionChecks"][0]["onFlavors"] = ["nowhere"]
    assert len(rule_errors(bad)) >= 4
    local = next(m for m in kueue.objects(spec) if m["kind"] == "LocalQueue")
    assert schema_errors({**local, "metadata": {"name": "q"}})  # a LocalQueue needs its namespace
    flavor = next(m for m in kueue.objects(spec) if m["kind"] == "ResourceFlavor" and m["spec"])
    tainted = json.loads(json.dumps(flavor))
    tainted["spec"]["nodeTaints"][0]["effect"] = "Sometimes"
    assert rule_errors(tainted)


# ------------------------------------------------------------------------------------------ construct rules


def test_the_kueue_install_and_object_props_refuse_what_would_not_work() -> None:
    from raytpu.modules.kueue_install import CHART_FRAMEWORKS, KueueInstallProps
    from raytpu.modules.kueue_object import KueueObjectProps

    assert KueueInstallProps().frameworks == ("ray.io/rayjob", "ray.io/raycluster")
    assert set(KueueInstallProps(frameworks=CHART_FRAMEWORKS).frameworks) >= {"ray.io/rayjob", "ray.io/raycluster"}
    with pytest.raises(InvalidInput, match="frameworks"):
        KueueInstallProps(frameworks=("batch/job", "ray.io/rayjob"))
    with pytest.raises(InvalidInput, match="version"):
        KueueInstallProps(version="latest")
    local = next(m for m in kueue.objects(_spec("one-team")) if m["kind"] == "LocalQueue")
    with pytest.raises(InvalidInput, match="namespace"):
        KueueObjectProps(manifest={**local, "metadata": {"name": "q"}})
    with pytest.raises(InvalidInput, match="not a Kueue object"):
        KueueObjectProps(manifest={"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x"}})


def test_read_folders_need_write_folders_and_stay_folders() -> None:
    from raytpu.modules.workload_identity import WorkloadIdentityProps

    def props(write: tuple[str, ...] | None, read: tuple[str, ...]) -> WorkloadIdentityProps:
        return WorkloadIdentityProps(project="my-ml-project", account_id="raytpu-team-abcde", namespace="raytpu-a",
                                     ksa_name="k", bucket="b", write_folders=write, read_folders=read)

    with pytest.raises(InvalidInput, match="read_folders"):
        props(None, ("raytpu",))
    with pytest.raises((InvalidInput, InvalidInputs), match="read_folders"):
        props(("outputs/a",), ("../raytpu",))
    assert props(("outputs/a",), ("raytpu",)).read_folders == ("raytpu",)


# ------------------------------------------------------------------------------------------ checkov


def test_checkov_finds_nothing_new_in_the_five_team_stacks() -> None:
    """checkov over both stacks of the five-team config (as tests/test_checkov.py scans the others): every failure
    is one ``checkov-skips.yaml`` already grants, for the same reason, to the kit's other Standard stacks."""
    checkov = checkov_bin()
    if checkov is None:
        pytest.fail("checkov not found: set RAYTPU_CHECKOV or install it in .venv-checkov")
    outdir, stacks = _synth("five-teams")
    files = {sid: (outdir / "stacks" / sid / "cdk.tf.json").resolve() for sid in stacks}
    args = [str(checkov), "--framework", "terraform_json", "-o", "json", "--compact", "--skip-download"]
    for path in files.values():
        args += ["-f", str(path)]
    result = subprocess.run(args, capture_output=True, text=True, timeout=500, cwd="/")
    assert result.stdout.strip(), result.stderr[-2000:]
    report = json.loads(result.stdout)
    left, passed = [], 0
    for item in report if isinstance(report, list) else [report]:
        found = item.get("results", {})
        assert found.get("parsing_errors", []) == []
        passed += len(found.get("passed_checks", []))
        for check in found.get("failed_checks", []):
            sid = next(s for s, p in files.items() if Path(check["file_abs_path"]).resolve() == p)
            logical = check["resource"].split(".", 1)[1]
            (resource,) = [r[logical] for r in stacks[sid]["resource"].values() if logical in r]
            if not any(checkov_skips.skipped(e, check["check_id"], resource)
                       for e in checkov_skips.for_mode("skips", "standard")):
                left.append(f"{sid}: {check['check_id']} {check['resource']}")
    assert left == []
    assert passed > 100


def test_the_control_plane_reaches_kueues_webhooks_through_the_private_clusters_firewall() -> None:
    """A private (VPC-peered) cluster's control plane reaches its nodes on 443 and 10250 only; Kueue's webhooks (9443,
    ``failurePolicy: Fail``) and visibility API (8082) need a rule from its range, else every team RayJob is refused.
    Source: https://cloud.google.com/kubernetes-engine/docs/how-to/private-clusters#add_firewall_rules; Kueue v0.19.2
    charts/kueue/templates/manager/manager.yaml (containerPorts)."""
    spec = _spec("one-team")
    firewalls = resources(_stack(_synth("one-team")[1], "-cluster"), "google_compute_firewall")
    (rule,) = [r for r in firewalls.values() if r["name"].endswith("-control-plane-webhooks")]
    assert rule["direction"] == "INGRESS" and rule["source_ranges"] == [spec.network.master_cidr]
    assert rule["allow"] == [{"protocol": "tcp", "ports": ["9443", "8082"]}]
    assert rule["priority"] < 65534  # above the kit's deny of all ingress
    plain = resources(_stack(synth_config(str(STANDARD_EXAMPLE))[1], "-cluster"), "google_compute_firewall")
    assert not [r for r in plain.values() if r["name"].endswith("-control-plane-webhooks")]


def test_the_kits_own_pods_write_no_teams_folder() -> None:
    """Serving (a team's own Serve app included) and the smoke run as the kit's Google SA: its writes stop at every
    team's folders, so no code outside a team's runs rewrites its checkpoints or the compile cache its hosts load."""
    spec = _spec("five-teams")
    cluster = _stack(_synth("five-teams")[1], "-cluster")
    (bucket_id,) = resources(cluster, "google_storage_bucket")
    token = f"${{google_storage_bucket.{bucket_id}.name}}"
    writes = [g["condition"]["expression"] for g in _grants(cluster, "workload-identity")
              if g["bucket"] == token and g["role"] == "roles/storage.objectUser"]
    assert writes
    for team in spec.teams:
        for folder in team.write_folders:
            assert not any(_allows(e, token, f"{folder}/x") for e in writes), folder
    assert any(_allows(e, token, "checkpoints/serve-r1/checkpoint_0/x") for e in writes)
    assert any(_allows(e, token, f"{compile_cache.DEFAULT_FOLDER}/img/v5p-2x2x4/entry") for e in writes)
