"""Issue 69: teams share the slices. A team's RayJob against the rules Kueue v0.19.2 enforces on a RayJob it manages
and KubeRay v1.7.0's CRD; the Kueue objects against the way Kueue assigns flavors; without ``teams`` nothing changes.

The cluster cannot be reached from here: the objects are checked at the boundary, as the API server and Kueue's
webhook and scheduler would read them (each rule's source beside it). The bad inputs are in tests/bad_inputs.py
(``TEAMS_CASES``); the stacks' side in tests/test_teams_stacks.py.
"""

from __future__ import annotations

import copy
from typing import Any

import crd
import pytest
import yaml
from bad_inputs import EXAMPLE, OUTPUTS

from raytpu import config as config_module
from raytpu.cluster.outputs import StackOutputs
from raytpu.cluster.submission import StackRun
from raytpu.core.manifests import kuberay, kueue
from raytpu.core.specs.cluster import teams
from raytpu.core.specs.spec import ClusterSpec
from raytpu.core.tpu.plan import TPU_RESOURCE
from raytpu.images import team

pytestmark = pytest.mark.unit

TEAMS = [{"name": "research", "quota": {"train": 16}, "can_borrow": True},
         {"name": "product", "quota": {"train": 16, "serve": 8}}]


def spec_of(**change: Any) -> ClusterSpec:
    data = copy.deepcopy(EXAMPLE)
    data["teams"] = copy.deepcopy(TEAMS)
    data["workloads"][1].update(team="research", priority="low")
    for path, value in change.items():
        node: Any = data
        *parents, last = path.split("__")
        for part in parents:
            node = node[int(part)] if part.isdigit() else node[part]
        node[int(last) if last.isdigit() else last] = value
    return config_module.parse(yaml.safe_dump(data))


def job_of(spec: ClusterSpec, workload: str = "train") -> dict[str, Any]:
    work = spec.workload(workload)
    run = StackRun.of(spec, work, StackOutputs(**OUTPUTS), "ray-tpu-cluster", "abc123", team.prepare(spec, work))
    return run.manifest({}, None, preview=True)


def pod_sets(job: dict[str, Any]) -> list[tuple[str, int, dict[str, Any]]]:
    """(name, count, pod template) of each pod set Kueue builds from a RayJob: the head, each worker group counted
    ``replicas x numOfHosts``, the submitter in K8sJobMode. Source: Kueue v0.19.2 pkg/controller/jobs/raycluster
    ``BuildPodSets``, ``effectiveWorkerCount``; pkg/controller/jobs/rayjob ``RayJob.PodSets`` (addSubmitterPodSet)."""
    cluster = job["spec"]["rayClusterSpec"]
    found = [("head", 1, cluster["headGroupSpec"]["template"])]
    for group in cluster["workerGroupSpecs"]:
        hosts = group.get("numOfHosts", 1)
        found.append((group["groupName"], group.get("replicas", 1) * (hosts if hosts > 1 else 1), group["template"]))
    if job["spec"].get("submissionMode", "K8sJobMode") == "K8sJobMode":
        found.append(("submitter", 1, job["spec"]["submitterPodTemplate"]))
    return found


def requests_of(template: dict[str, Any]) -> dict[str, str]:
    found: dict[str, str] = {}
    for container in template["spec"]["containers"]:
        found |= container.get("resources", {}).get("requests", {})
    return found


def kueue_webhook_errors(job: dict[str, Any]) -> list[str]:
    """What Kueue v0.19.2's RayJob webhook refuses on a queued RayJob.
    Source: Kueue v0.19.2 pkg/controller/jobs/rayjob/rayjob_webhook.go ``validateCreate``;
    pkg/controller/jobs/raycluster/common.go ``ValidateCreate``; jobframework ``MaxPodSets`` (8)."""
    spec, found = job["spec"], []
    if spec.get("clusterSelector"):
        found.append("a kueue managed job should not use an existing cluster")
    if "rayClusterSpec" not in spec:
        found.append("rayClusterSpec is required")
    if spec.get("shutdownAfterJobFinishes") is not True:
        found.append("a kueue managed job should delete the cluster after finishing")
    if spec["rayClusterSpec"].get("enableInTreeAutoscaling"):
        found.append("a kueue managed job should only use autoscaling when workload slicing is enabled")
    if len(pod_sets(job)) > 8:
        found.append("too many pod sets")
    found += [f"worker group {g['groupName']!r} is reserved" for g in spec["rayClusterSpec"]["workerGroupSpecs"]
              if g["groupName"] == "head"]
    return found


@pytest.mark.parametrize("workload", ["train"])
def test_a_team_run_is_queued_in_its_namespace_at_its_priority(workload: str) -> None:
    spec = spec_of()
    job = job_of(spec, workload)
    assert job["metadata"]["namespace"] == "raytpu-research"
    assert job["metadata"]["labels"][kueue.QUEUE_LABEL] == "raytpu-research"
    assert job["metadata"]["labels"][kueue.PRIORITY_LABEL] == "raytpu-low"
    assert job["spec"]["suspend"] is True  # Kueue unsuspends it once admitted
    assert kueue_webhook_errors(job) == []
    assert crd.schema_errors(job) == []
    # what Kueue charges the team's queue: every host of every slice copy the RayJob asks for
    charged = sum(count * int(requests_of(t).get(TPU_RESOURCE, 0)) for _, count, t in pod_sets(job))
    assert charged == teams.chips_of(spec.workload(workload)) == 16


def test_a_team_run_writes_in_its_team_folders_only() -> None:
    job = job_of(spec_of())
    entry = job["spec"]["entrypoint"]
    assert "--storage-path /mnt/gcs/checkpoints/research " in entry, entry
    env = yaml.safe_load(job["spec"]["runtimeEnvYAML"])["env_vars"]
    assert env["JAX_COMPILATION_CACHE_DIR"].startswith("/mnt/gcs/compile-cache/research/")
    team = spec_of().teams[0]
    assert team.write_folders == ("checkpoints/research", "outputs/research", "compile-cache/research")


def test_a_multislice_team_run_is_charged_every_host_of_every_slice() -> None:
    spec = spec_of(slices__0__count=2, workloads__1__slices=2, teams__0__quota={"train": 32})
    job = job_of(spec)
    assert [(n, count) for n, count, _ in pod_sets(job)] == [("head", 1), (kuberay.WORKER_GROUP, 8), ("submitter", 1)]
    assert teams.chips_of(spec.workload("train")) == 32
    assert kueue_webhook_errors(job) == []


def test_without_teams_a_run_is_as_before() -> None:
    data = copy.deepcopy(EXAMPLE)
    spec = config_module.parse(yaml.safe_dump(data))
    job = job_of(spec)
    assert kueue.QUEUE_LABEL not in job["metadata"]["labels"] and "suspend" not in job["spec"]
    assert job["metadata"]["namespace"] == "ray"
    assert "--storage-path /mnt/gcs/checkpoints " in job["spec"]["entrypoint"]
    assert kueue.objects(spec) == []


def _flavor_fits(flavor: dict[str, Any], template: dict[str, Any]) -> bool:
    """Whether Kueue may assign ``flavor`` to a pod set: its node labels do not contradict the pods' node selector,
    and the pods tolerate its taints. Source: Kueue v0.19.2 pkg/scheduler/flavorassigner ``flavorSelector`` and
    ``checkFlavorForPodSets`` (untolerated taints)."""
    selector = template["spec"].get("nodeSelector", {})
    labels = flavor["spec"].get("nodeLabels", {})
    if any(key in selector and selector[key] != value for key, value in labels.items()):
        return False
    tolerations = template["spec"].get("tolerations", [])
    return all(any(t.get("key") == taint["key"] and (t.get("operator") == "Exists" or t.get("value") == taint["value"])
                   and t.get("effect") in (None, taint["effect"]) for t in tolerations)
               for taint in flavor["spec"].get("nodeTaints", []))


@pytest.mark.parametrize("mode", ["standard", "autopilot"])
def test_every_pod_set_of_a_team_run_finds_its_flavors(mode: str) -> None:
    """Each pod set's TPU request fits its own slice's flavor only, and every other resource any pod asks for is
    covered by the CPU side: Kueue keeps a pod set with an uncovered resource queued forever."""
    change: dict[str, Any] = {"cluster__mode": mode}
    if mode == "autopilot":
        change["slices__0__provisioning"] = "on-demand"
    spec = spec_of(**change)
    objects = kueue.objects(spec)
    flavors = {o["metadata"]["name"]: o for o in objects if o["kind"] == "ResourceFlavor"}
    queue = next(o for o in objects if o["kind"] == "ClusterQueue" and o["metadata"]["name"] == "raytpu-research")
    groups = queue["spec"]["resourceGroups"]
    covered = {r for g in groups for r in g["coveredResources"]}
    for group in groups:  # Source: the ClusterQueue CRD's CEL rule on resourceGroups items
        assert all(len(f["resources"]) == len(group["coveredResources"]) for f in group["flavors"])
    for name, _, template in pod_sets(job_of(spec)):
        asked = requests_of(template)
        assert set(asked) <= covered, (name, asked)
        if TPU_RESOURCE in asked:
            fitting = [f for f in groups[0]["flavors"] if _flavor_fits(flavors[f["name"]], template)]
            assert [f["name"] for f in fitting] == ["raytpu-train"], name


def test_the_queues_follow_the_config() -> None:
    spec = spec_of()
    objects = kueue.objects(spec)
    queues = {o["metadata"]["name"]: o["spec"] for o in objects if o["kind"] == "ClusterQueue"}
    research, product = queues["raytpu-research"], queues["raytpu-product"]
    quota = {f["name"]: f["resources"][0] for f in research["resourceGroups"][0]["flavors"]}
    assert quota["raytpu-train"] == {"name": TPU_RESOURCE, "nominalQuota": 16}  # can_borrow: no limit
    assert quota["raytpu-serve"] == {"name": TPU_RESOURCE, "nominalQuota": 0}
    product_quota = {f["name"]: f["resources"][0] for f in product["resourceGroups"][0]["flavors"]}
    assert product_quota["raytpu-serve"] == {"name": TPU_RESOURCE, "nominalQuota": 8, "borrowingLimit": 0}
    assert {q["cohortName"] for q in queues.values()} == {kueue.COHORT}
    assert research["namespaceSelector"] == {"matchLabels": {"kubernetes.io/metadata.name": "raytpu-research"}}
    local = [o for o in objects if o["kind"] == "LocalQueue"]
    assert [(o["metadata"]["namespace"], o["spec"]["clusterQueue"]) for o in local] == [
        ("raytpu-research", "raytpu-research"), ("raytpu-product", "raytpu-product")]
    priorities = {o["metadata"]["name"]: o["value"] for o in objects if o["kind"] == "WorkloadPriorityClass"}
    assert priorities["raytpu-high"] > priorities["raytpu-normal"] > priorities["raytpu-low"]
    # Source: the ClusterQueue CRD's CEL rule on preemption
    assert not (research["preemption"]["reclaimWithinCohort"] == "Never"
                and research["preemption"]["borrowWithinCohort"]["policy"] != "Never")


def test_a_team_service_account_id_is_valid_and_unique() -> None:
    """Source: IAM CreateServiceAccount ``accountId``: ``[a-z]([-a-z0-9]*[a-z0-9])``, 6-30 characters."""
    ids = {teams.service_account_id(cluster, team) for cluster in ("ray-tpu", "ray-tpu-2", "c" * 30)
           for team in ("research", "product", "t" * 30, "a")}
    assert len(ids) == 12
    assert all(6 <= len(i) <= 30 and i[0].isalpha() and i[-1].isalnum() for i in ids), ids


def test_queued_slices_get_queued_provisioning() -> None:
    """A queued (flex-start) slice is a team's to use: Kueue's ProvisioningRequest admission check asks GKE for the
    TPU pod set alone (GKE takes one pod set per request; the CPU head and submitter schedule as usual).
    Source: https://cloud.google.com/kubernetes-engine/docs/how-to/provisioningrequest (Kueue);
    Kueue v0.19.2 pkg/controller/admissionchecks/provisioning (ProvisioningRequestConfig.managedResources)."""
    assert kueue.queued_provisioning(spec_of()) == []
    spec = spec_of(slices__0__provisioning="queued", workloads__0__slice="serve")
    objects = kueue.objects(spec)
    config, check = kueue.queued_provisioning(spec)
    assert config["spec"] == {"provisioningClassName": "queued-provisioning.gke.io", "managedResources": [TPU_RESOURCE]}
    assert check["spec"]["controllerName"] == "kueue.x-k8s.io/provisioning-request"
    assert check["spec"]["parameters"]["name"] == config["metadata"]["name"]
    for queue in (o for o in objects if o["kind"] == "ClusterQueue"):
        assert queue["spec"]["admissionChecksStrategy"] == {
            "admissionChecks": [{"name": check["metadata"]["name"], "onFlavors": ["raytpu-train"]}]}
    job = job_of(spec)
    tpu_pods = [t for _, _, t in pod_sets(job) if TPU_RESOURCE in requests_of(t)]
    assert [t["spec"]["nodeSelector"]["cloud.google.com/gke-queued"] for t in tpu_pods] == ["true"]
    assert kueue_webhook_errors(job) == [] and crd.schema_errors(job) == []


def test_a_queued_slice_stays_refused_outside_the_teams() -> None:
    data = copy.deepcopy(EXAMPLE)
    data["slices"][0]["provisioning"] = "queued"
    with pytest.raises(Exception, match=r"workloads\[0\]\.slice.*team's run"):
        config_module.parse(yaml.safe_dump(data))


def test_a_team_run_on_the_emulated_slice_keeps_its_checkpoints_in_its_teams_folder() -> None:
    """Issue 69 item 6: ``submit --local`` runs in the team's name (the run folder stands in for the bucket's mount);
    the emulated slice has no Kueue (docs/guides/teams.md)."""
    from raytpu.core.common import names

    work = spec_of().workload("train")
    assert work.kind.run_args("train-r1", "/runs/here", team=work.team) == [
        "--storage-path", "/runs/here/checkpoints/research", "--name", "train-r1"]
    assert names.run_storage("train-r1", "/runs/here", work.team) == "/runs/here/checkpoints/research/train-r1"
    assert names.checkpoint_uri("b", "train-r1", work.team) == "gs://b/checkpoints/research/train-r1"


def test_the_queued_provisioning_check_is_on_the_queues_that_may_use_the_queued_slice_alone() -> None:
    """A ClusterQueue with an inactive admission check admits nothing, so the check sits only on the queues of teams
    that may run there (a quota on the queued slice, or borrowing one). Source: Kueue v0.19.2
    pkg/cache/scheduler/clusterqueue.go ``updateQueueStatus``."""
    spec = spec_of(slices__0__provisioning="queued", workloads__0__slice="serve",
                   teams__1__quota={"serve": 8})  # product: no chips of the queued slice, no borrowing
    queues = {o["metadata"]["name"]: o["spec"] for o in kueue.objects(spec) if o["kind"] == "ClusterQueue"}
    assert "admissionChecksStrategy" in queues["raytpu-research"]
    assert "admissionChecksStrategy" not in queues["raytpu-product"]


def test_a_team_runs_ray_cluster_goes_as_soon_as_it_ends() -> None:
    """Kueue hands its chips to the next run when it finishes; its pods must not hold them for KubeRay's TTL."""
    assert job_of(spec_of())["spec"]["ttlSecondsAfterFinished"] == 0
    assert job_of(config_module.parse(yaml.safe_dump(EXAMPLE)))["spec"]["ttlSecondsAfterFinished"] > 0
