"""Each TPU worker group lands on its own slice's nodes only (issue 18, item 6), proven on the synthesized pools.

The matrix: a config of look-alike slices (same generation and topology; 8-chip vs 4-chip hosts; on-demand, spot,
reservation, flex-start; one and two copies), synthesized in Standard and Autopilot mode. The nodes each slice gets are
computed from the synthesized JSON (the pools' names, node config and placement on Standard; the ComputeClasses on
Autopilot) with the labels and taints GKE puts on them; every emitted worker group (the workloads stack's RayServices,
``raytpu submit``'s RayJobs, ``raytpu smoke``'s jobs) is matched against every slice's nodes with Kubernetes'
scheduling rules. A group may admit its own slice's nodes and no other slice's.
"""

from __future__ import annotations

from typing import Any

import pytest
from _synth import resources, synth_text
from emitted import objects_of

from raytpu import config
from raytpu.core.common import names
from raytpu.core.common.names import COMPUTE_CLASS_LABEL
from raytpu.core.manifests import kuberay
from raytpu.core.specs.slices.provisioning import FLEX_START_LABEL, QUEUED_LABEL, SPOT_LABEL
from raytpu.core.tpu.catalog import GENERATIONS
from raytpu.core.tpu.plan import ACCELERATOR_LABEL, TOPOLOGY_LABEL

pytestmark = [pytest.mark.synth, pytest.mark.timeout(600)]

LOOK_ALIKES = """
project: my-ml-project
region: us-east5
cluster: {name: pin, mode: MODE}
slices:
  - {name: big, generation: v6e, topology: 2x4, machine_type: ct6e-standard-8t, zone: us-east5-b}
  - {name: halves, generation: v6e, topology: 2x4, machine_type: ct6e-standard-4t, zone: us-east5-b, count: 2}
  - {name: big-spot, generation: v6e, topology: 2x4, machine_type: ct6e-standard-8t, zone: us-east5-b,
     provisioning: spot}
  - {name: big-res, generation: v6e, topology: 2x4, machine_type: ct6e-standard-8t, zone: us-east5-b,
     provisioning: reservation, reservation: r1}
  - {name: grid, generation: v6e, topology: 4x4, zone: us-east5-b}
  - {name: grid-spot, generation: v6e, topology: 4x4, zone: us-east5-b, provisioning: spot, count: 2}
  - {name: grid-flex, generation: v6e, topology: 4x4, zone: us-east5-b, provisioning: flex-start}
  - {name: grid-flex2, generation: v6e, topology: 4x4, zone: us-east5-b, provisioning: flex-start}
workloads:
  - {name: serve-big, kind: serve, slice: big}
  - {name: serve-spot, kind: serve, slice: big-spot}
  - {name: train-halves, kind: train, slice: halves}
  - {name: train-grid, kind: train, slice: grid}
"""
MODES = ("standard", "autopilot")
NODE_POOL_LABEL = "cloud.google.com/gke-nodepool"
"""GKE labels every node with its pool's name (https://cloud.google.com/kubernetes-engine/docs/how-to/node-pools)."""

Labels = dict[str, str]
Taint = tuple[str, str, str]


# ------------------------------------------------------------------ Kubernetes' scheduling rules

def _expression_holds(expr: dict[str, Any], labels: Labels) -> bool:
    """One ``matchExpressions`` entry (Kubernetes: https://kubernetes.io/docs/concepts/scheduling-eviction/
    assign-pod-node/#operators)."""
    key, op, values = expr["key"], expr["operator"], expr.get("values", [])
    return {"In": key in labels and labels[key] in values, "NotIn": labels.get(key) not in values,
            "Exists": key in labels, "DoesNotExist": key not in labels}[op]


def _tolerated(taint: Taint, tolerations: list[dict[str, Any]]) -> bool:
    """A toleration matches a taint when the keys match (an empty key with ``Exists`` matches every key), the value
    matches or the operator is ``Exists``, and the effects match (an empty effect matches every effect)
    (https://kubernetes.io/docs/concepts/scheduling-eviction/taint-and-toleration/)."""
    key, value, effect = taint
    for t in tolerations:
        op = t.get("operator", "Equal")
        if (t.get("key", "") in ("", key) if op == "Exists" else t.get("key") == key) \
                and (op == "Exists" or t.get("value", "") == value) and t.get("effect", "") in ("", effect):
            return True
    return False


def admits(pod: dict[str, Any], labels: Labels, taints: list[Taint]) -> bool:
    """A pod may land on a node only if every nodeSelector pair is among the node's labels, one of the required
    node-affinity terms holds (each term's expressions all hold), and every NoSchedule/NoExecute taint is tolerated
    (https://kubernetes.io/docs/concepts/scheduling-eviction/assign-pod-node/: "If you specify both nodeSelector and
    nodeAffinity, both must be satisfied"; terms are ORed, expressions ANDed)."""
    if any(labels.get(k) != v for k, v in pod.get("nodeSelector", {}).items()):
        return False
    required = pod.get("affinity", {}).get("nodeAffinity", {}).get("requiredDuringSchedulingIgnoredDuringExecution")
    if required and not any(all(_expression_holds(e, labels) for e in term.get("matchExpressions", []))
                            for term in required["nodeSelectorTerms"]):
        return False
    return all(_tolerated(t, pod.get("tolerations", [])) for t in taints if t[2] in ("NoSchedule", "NoExecute"))


# ------------------------------------------------------------------ the nodes, from the synthesized stacks

_EFFECT = {"NO_SCHEDULE": "NoSchedule", "NO_EXECUTE": "NoExecute", "PREFER_NO_SCHEDULE": "PreferNoSchedule"}


def _single_host_topology(machine_type: str) -> tuple[str, str]:
    """(accelerator label, topology label) GKE gives a host of ``machine_type`` in a pool without a TPU topology."""
    for gen in GENERATIONS.values():
        for topology, machine in gen.single_host_topologies.items():
            if machine.name == machine_type:
                return gen.gke_accelerator, topology
    raise KeyError(machine_type)


def standard_nodes(cluster: dict[str, Any]) -> dict[str, tuple[Labels, list[Taint]]]:
    """Pool name -> (labels, taints) of its nodes, from ``google_container_node_pool``.

    GKE labels every node with its pool (:data:`NODE_POOL_LABEL`), TPU nodes ``cloud.google.com/gke-tpu-accelerator``
    and ``-topology`` (https://cloud.google.com/kubernetes-engine/docs/concepts/tpus), Spot nodes
    ``cloud.google.com/gke-spot`` (https://cloud.google.com/kubernetes-engine/docs/concepts/spot-vms), flex-start and
    queued-provisioning nodes ``cloud.google.com/gke-flex-start`` / ``gke-queued``
    (https://cloud.google.com/kubernetes-engine/docs/concepts/dws); the node config adds its own ``labels`` and
    ``taint``s. Only those taints are modelled: any taint GKE adds itself refuses more pods, never fewer, so leaving
    one out only makes the proof stricter."""
    nodes = {}
    for pool in resources(cluster, "google_container_node_pool").values():
        config_ = pool["node_config"]
        labels = {NODE_POOL_LABEL: pool["name"], **config_.get("labels", {})}
        if config_.get("spot"):
            labels[SPOT_LABEL] = "true"
        if config_.get("flex_start"):
            labels[FLEX_START_LABEL] = "true"
        if (pool.get("queued_provisioning") or {}).get("enabled"):
            labels[QUEUED_LABEL] = "true"
        try:
            accelerator, topology = _single_host_topology(config_["machine_type"])
        except KeyError:  # not a TPU machine (the head pool)
            pass
        else:
            labels[ACCELERATOR_LABEL] = accelerator
            labels[TOPOLOGY_LABEL] = (pool.get("placement_policy") or {}).get("tpu_topology") or topology
        taints = [(t["key"], t["value"], _EFFECT[t["effect"]]) for t in config_.get("taint", [])]
        nodes[pool["name"]] = (labels, taints)
    return nodes


def autopilot_nodes(workloads: dict[str, Any]) -> dict[str, tuple[Labels, list[Taint]]]:
    """ComputeClass name -> (labels, taints) of the nodes Autopilot creates for it: labelled with the class
    (``cloud.google.com/compute-class``, the label pods select it by:
    https://cloud.google.com/kubernetes-engine/docs/concepts/about-custom-compute-classes) and with the TPU shape of its
    priorities. Taints are left out: with fewer taints a node admits more pods, so the proof only gets stricter."""
    nodes: dict[str, tuple[Labels, list[Taint]]] = {}
    for manifest in resources(workloads, "kubernetes_manifest").values():
        obj = manifest["manifest"]
        if obj["kind"] == "ComputeClass":
            (tpu,) = {(p["tpu"]["type"], p["tpu"]["topology"]) for p in obj["spec"]["priorities"]}
            nodes[obj["metadata"]["name"]] = ({COMPUTE_CLASS_LABEL: obj["metadata"]["name"],
                                               ACCELERATOR_LABEL: tpu[0], TOPOLOGY_LABEL: tpu[1]}, [])
    return nodes


def nodes_of_slice(mode: str, slice_name: str, node_group: str) -> bool:
    """Whether the nodes named ``node_group`` (a pool, or a ComputeClass) are slice ``slice_name``'s."""
    if mode == "autopilot":
        return node_group == names.compute_class_name(slice_name)
    return node_group.rsplit("-", 1)[0] == slice_name and node_group.rsplit("-", 1)[1].isdigit()


# ------------------------------------------------------------------ the worker groups, as emitted

def webhook_patched(group: dict[str, Any]) -> dict[str, Any]:
    """A worker group's pod spec as the GKE TPU webhook admits it: for a multi-host group (``numOfHosts > 1``) it
    adds ``/spec/affinity`` = its own per-replica pod affinity and anti-affinity keyed on the node pool
    (ai-on-gke/kuberay-tpu-webhook ``main.go`` ``injectAffinity``, ef658db: a JSON-patch ``add``, which replaces a
    member that exists, RFC 6902 section 4.1), so any node affinity of the template is gone."""
    pod = dict(group["template"]["spec"])
    if group.get("numOfHosts", 1) > 1:
        pod["affinity"] = {"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
            {"topologyKey": NODE_POOL_LABEL}]}}
    return pod


def worker_groups(mode: str, stacks: dict[str, dict[str, Any]]) -> list[tuple[str, str, dict[str, Any]]]:
    """(object, slice, pod spec as the webhook admits it) of every TPU worker group: the workloads stack's RayServices
    as synthesized, and the RayJobs ``raytpu submit``/``raytpu smoke`` apply for the same config."""
    workloads = next(s for sid, s in stacks.items() if sid.endswith("-workloads"))
    objects = [m["manifest"] for m in resources(workloads, "kubernetes_manifest").values()
               if m["manifest"]["kind"] == "RayService"]
    objects += [o for o in objects_of(config.parse(LOOK_ALIKES.replace("MODE", mode))) if o["kind"] == "RayJob"]
    return [(f"{o['kind']}/{o['metadata']['name']}", o["metadata"]["labels"][names.SLICE_LABEL],
             webhook_patched(g)) for o in objects for g in kuberay.ray_cluster_of(o)["workerGroupSpecs"]]


def _matrix(mode: str) -> tuple[str, dict[str, tuple[Labels, list[Taint]]], list[Any]]:
    stacks = synth_text(LOOK_ALIKES.replace("MODE", mode))
    cluster = next(s for sid, s in stacks.items() if sid.endswith("-cluster"))
    workloads = next(s for sid, s in stacks.items() if sid.endswith("-workloads"))
    nodes = standard_nodes(cluster) if mode == "standard" else autopilot_nodes(workloads)
    return mode, nodes, worker_groups(mode, stacks)


@pytest.fixture(scope="module", params=MODES)
def matrix(request: pytest.FixtureRequest) -> tuple[str, dict[str, tuple[Labels, list[Taint]]], list[Any]]:
    return _matrix(request.param)


def test_the_matrix_has_look_alikes_and_every_slice_has_a_group(matrix: Any) -> None:
    """Non-vacuous: slices that share accelerator and topology labels, and a worker group on every slice."""
    mode, nodes, groups = matrix
    shapes = [(labels[ACCELERATOR_LABEL], labels[TOPOLOGY_LABEL]) for labels, _ in nodes.values()
              if ACCELERATOR_LABEL in labels]
    assert len(shapes) > len(set(shapes)) >= 2
    spec = config.parse(LOOK_ALIKES.replace("MODE", mode))
    assert {slice_name for _, slice_name, _ in groups} == {s.name for s in spec.slices}
    if mode == "standard":
        assert sorted(nodes) == sorted(["ray-head", *(p for s in spec.slices for p in s.pool_names)])


def test_no_worker_group_admits_another_slices_nodes(matrix: Any) -> None:
    """Issue 18 item 6: every (group, nodes) pair of the matrix; a group admits exactly its own slice's nodes (every
    copy's pool on Standard, or the one copy's pool a per-copy smoke job checks; its ComputeClass's nodes on
    Autopilot)."""
    mode, nodes, groups = matrix
    wrong = []
    for name, slice_name, pod in groups:
        pinned = pod["nodeSelector"].get(NODE_POOL_LABEL)
        for node_group, (labels, taints) in nodes.items():
            own = nodes_of_slice(mode, slice_name, node_group) and pinned in (None, node_group)
            if admits(pod, labels, taints) != own:
                wrong.append(f"{name} (slice {slice_name}) {'admits' if admits(pod, labels, taints) else 'refuses'} "
                             f"the nodes of {node_group}")
    assert wrong == []


def test_on_autopilot_each_slice_selects_a_class_of_its_own() -> None:
    _, nodes, groups = _matrix("autopilot")
    chosen = {slice_name: pod["nodeSelector"][COMPUTE_CLASS_LABEL] for _, slice_name, pod in groups}
    assert len(set(chosen.values())) == len(chosen) and set(chosen.values()) <= set(nodes)


def test_the_scheduling_model_refuses_what_it_must() -> None:
    """The matcher itself, on the rules it transcribes (so the matrix cannot pass by a matcher that admits nothing or
    everything)."""
    pod = {"nodeSelector": {"a": "1"}, "tolerations": [{"key": "t", "operator": "Exists", "effect": "NoSchedule"}],
           "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
               {"matchExpressions": [{"key": "p", "operator": "In", "values": ["x", "y"]}]}]}}}}
    assert admits(pod, {"a": "1", "p": "y"}, [("t", "v", "NoSchedule")])
    assert not admits(pod, {"a": "1", "p": "z"}, [])  # affinity
    assert not admits(pod, {"a": "2", "p": "x"}, [])  # nodeSelector
    assert not admits(pod, {"a": "1", "p": "x"}, [("u", "true", "NoSchedule")])  # an untolerated taint
    assert admits(pod, {"a": "1", "p": "x"}, [("u", "true", "PreferNoSchedule")])  # a soft one does not refuse


def _without_slice_label(pod: dict[str, Any]) -> dict[str, Any]:
    pins = (names.SLICE_LABEL, NODE_POOL_LABEL)
    return {**pod, "nodeSelector": {k: v for k, v in pod["nodeSelector"].items() if k not in pins}}


def test_each_copy_of_a_slice_is_checked_by_one_smoke_job_of_its_own() -> None:
    """Reviewer finding (issue 27): the copies of a slice share its label, so per-copy smoke jobs pinned by it alone
    may all check one copy. Each ``smoke-<slice>-<i>`` admits copy ``i``'s pool and no other node."""
    stacks = synth_text(LOOK_ALIKES.replace("MODE", "standard"))
    nodes = standard_nodes(next(s for sid, s in stacks.items() if sid.endswith("-cluster")))
    checked: dict[str, list[str]] = {}
    for name, _, pod in worker_groups("standard", stacks):
        if name.startswith("RayJob/smoke-"):
            checked[name] = [g for g, (labels, taints) in nodes.items() if admits(pod, labels, taints)]
    spec = config.parse(LOOK_ALIKES.replace("MODE", "standard"))
    assert sorted(pool for admitted in checked.values() for pool in admitted) == sorted(
        p for s in spec.slices for p in s.pool_names)
    assert all(len(admitted) == 1 for admitted in checked.values()), checked


def test_the_proof_fails_on_the_groups_as_they_were() -> None:
    """Before: accelerator, topology and provisioning label only. The on-demand 8-chip group admits the 4-chip halves
    and the spot and reservation copies; the on-demand 4x4 group admits the spot 4x4 pools (no spot taint)."""
    stacks = synth_text(LOOK_ALIKES.replace("MODE", "standard"))
    nodes = standard_nodes(next(s for sid, s in stacks.items() if sid.endswith("-cluster")))
    before = {}
    for _, slice_name, pod in worker_groups("standard", stacks):
        pod = _without_slice_label(pod)
        before[slice_name] = {g for g, (labels, taints) in nodes.items() if admits(pod, labels, taints)}
    assert {"halves-0", "halves-1", "big-spot-0", "big-res-0"} <= before["big"]
    assert {"grid-spot-0", "grid-spot-1"} <= before["grid"]
    assert {"grid-flex2-0"} <= before["grid-flex"]


def test_a_node_affinity_to_the_pools_would_not_survive_the_webhook_on_a_multi_host_group() -> None:
    """Why the pin is a nodeSelector: the kit's earlier pin, a node affinity ``gke-nodepool In [<slice>-<i>]``, holds
    for a single-host group but the webhook replaces it on a multi-host one (:func:`webhook_patched`), so the
    flex-start 4x4 group would admit its look-alike's pool."""
    stacks = synth_text(LOOK_ALIKES.replace("MODE", "standard"))
    nodes = standard_nodes(next(s for sid, s in stacks.items() if sid.endswith("-cluster")))
    spec = config.parse(LOOK_ALIKES.replace("MODE", "standard"))
    job = next(o for o in objects_of(spec) if o["kind"] == "RayJob"
               and o["metadata"]["labels"][names.SLICE_LABEL] == "grid")
    (group,) = kuberay.ray_cluster_of(job)["workerGroupSpecs"]
    template = group["template"]["spec"]
    pinned = {**_without_slice_label(template), "affinity": {"nodeAffinity": {
        "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [{"matchExpressions": [
            {"key": NODE_POOL_LABEL, "operator": "In", "values": ["grid-0"]}]}]}}}}
    assert group["numOfHosts"] > 1
    assert {g for g, (labels, taints) in nodes.items() if admits(pinned, labels, taints)} == {"grid-0"}
    patched = webhook_patched({**group, "template": {**group["template"], "spec": pinned}})
    assert "grid-spot-0" in {g for g, (labels, taints) in nodes.items() if admits(patched, labels, taints)}
