"""Property test: ``raytpu validate`` and the stacks agree on every config a seeded generator makes.

A deterministic generator (``random.Random(SEED)``) writes ``raytpu.yaml`` documents: half of them valid by
construction (random clusters, networks, buckets, slices of every generation, topology, machine type and
provisioning mode, workloads of every kind), half broken in one or two known places (bad names, labels,
CIDRs, overlaps, topologies, machine types, provisioning/reservation/fallback mixes, Autopilot-only and
Standard-only fields, zones outside the region, workloads on unknown, queued or Ray-unreservable slices,
duplicate names, out-of-range numbers, unknown keys, wrong types, missing keys). Invariants:

1. every config :func:`raytpu.config.parse` accepts builds both stacks (:func:`raytpu.stacks.app.build`) without
   an exception, with one node pool per slice copy (Standard), one KubeRay object per workload and one
   ComputeClass per Autopilot slice that offers a priority; a fixed sample of them is also synthesized and
   writes exactly the StackOutputs names;
2. a config it rejects raises InvalidInputs whose every problem names a config path of the generator's
   vocabulary (a ``raytpu.yaml`` key or a key the generator wrote, indexes in range);
3. a broken config reports every field the generator broke; a valid-by-construction config is accepted.

Building stacks is the expensive part (jsii): every accepted config is built; the counts and times are printed.
"""

from __future__ import annotations

import copy
import dataclasses
import ipaddress
import json
import random
import re
import shutil
import string
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import kind_fields
import pytest
import yaml
from image_refs import FIXTURE_REFS

from raytpu import config as config_module
from raytpu.core.common.errors import InvalidInput, InvalidInputs, problems_of
from raytpu.core.specs.cluster.cluster_parts import WEEKDAYS, NetworkSpec
from raytpu.core.specs.kinds import KINDS
from raytpu.core.specs.serving import node_disk, vllm_rules
from raytpu.core.specs.slices.notice import NOTICE_CHOICES
from raytpu.core.specs.slices.provisioning import MODES, generation_problems
from raytpu.core.specs.spec import ClusterSpec
from raytpu.core.tpu.catalog import GENERATIONS, generation
from raytpu.core.tpu.models import by_hf_id
from raytpu.core.tpu.plan import machine_types_for, plan_slice

pytestmark = [pytest.mark.synth, pytest.mark.timeout(600)]

SEED = 20261201
CONFIGS = 520
"""Configs per run: half valid, half broken (one in five broken ones in two places)."""
SYNTH_EVERY = 16
"""Every so many accepted configs, the built app is synthesized too (the rest are built, not synthesized)."""

REGIONS = ("us-east5", "us-central1", "us-east1", "us-west4", "us-south1", "europe-west4", "asia-northeast1")
LOWER = string.ascii_lowercase
NAME_CHARS = LOWER + string.digits + "-"
HEAD_MACHINES = ("n2-standard-4", "n2-standard-8", "e2-standard-8", "c3-standard-8")
# A Ray workload needs a slice whose provisioning runs a Ray cluster and whose shape Ray can reserve.
RAY_MODES = tuple(m.name for m in MODES.values() if m.runs_ray)
FALLBACK_MODES = tuple(m.name for m in MODES.values() if m.priority is not None and not m.needs_reservation)


# ------------------------------------------------------------------------------------------ valid configs


def _label(rng: random.Random, low: int, high: int, first: str = LOWER, chars: str = NAME_CHARS) -> str:
    """A DNS-style name of ``low..high`` characters: starts with ``first``, ends with a letter or digit."""
    size = rng.randint(low, high)
    if size == 1:
        return rng.choice(first)
    middle = "".join(rng.choice(chars) for _ in range(size - 2))
    return rng.choice(first) + middle + rng.choice(LOWER + string.digits)


def _unique(rng: random.Random, taken: set[str], low: int, high: int) -> str:
    while True:
        name = _label(rng, low, high)
        if name not in taken:
            taken.add(name)
            return name


def _network(rng: random.Random) -> dict[str, str]:
    """Four disjoint private ranges: subnet /20, pods /14, services /20, control plane /28."""
    pods = rng.choice(range(16, 60, 4))
    subnet, services = rng.sample([o for o in range(1, 250) if not pods <= o < pods + 4], 2)
    return {"subnet_cidr": f"10.{subnet}.0.0/20", "pods_cidr": f"10.{pods}.0.0/14",
            "services_cidr": f"10.{services}.0.0/20", "master_cidr": f"172.16.{rng.randint(0, 255)}."
                                                                      f"{16 * rng.randint(0, 15)}/28"}


def _slice(rng: random.Random, name: str, region: str, autopilot: bool, for_ray: bool = False) -> dict[str, Any]:
    gen_name = rng.choice(tuple(GENERATIONS))
    gen = generation(gen_name)
    pool = gen.ray_topologies if for_ray else gen.topologies
    topology = rng.choice([t for t in gen.topologies if t in pool])
    item: dict[str, Any] = {"name": name, "generation": gen_name, "topology": topology,
                            "zone": f"{region}-{rng.choice('abcdef')}"}
    if rng.random() < 0.4:
        item["machine_type"] = rng.choice(machine_types_for(gen, topology)).name
    if rng.random() < 0.5:
        item["count"] = rng.randint(1, 3)
    # Autopilot takes only modes a ComputeClass offers (queued is a node-pool flag:
    # raytpu.core.specs.spec._slice_problems)
    mode = rng.choice([m for m in (RAY_MODES if for_ray else tuple(MODES))
                       if not autopilot or MODES[m].priority is not None])
    if mode != "on-demand" or rng.random() < 0.5:
        item["provisioning"] = mode
    if MODES[mode].needs_reservation:
        item["reservation"] = _label(rng, 3, 20)
    if rng.random() < (0.5 if mode == "flex-start" else 0.15):  # any mode takes one, up to flex-start's 7 days
        item["max_run_duration_s"] = rng.randint(600, 7 * 24 * 3600)
    if autopilot and MODES[mode].priority is not None and rng.random() < 0.4:
        others = [m for m in FALLBACK_MODES if m != mode]
        item["fallback"] = rng.sample(others, rng.randint(1, len(others)))
    if not autopilot and rng.random() < 0.3:
        item["disk_size_gib"] = rng.randint(10, 65536)
    node = random.Random(f"{name}-{topology}")  # its own stream: the configs the main one draws stay as they were
    if mode == "spot" and "fallback" not in item and node.random() < 0.3:  # GKE: Spot VMs only, 30 or 120
        item["preemption_notice_s"] = node.choice(NOTICE_CHOICES)
    if node.random() < 0.2:
        item["transparent_hugepages"] = node.random() < 0.5
    return _offered(item)


def ray_ready(item: dict[str, Any]) -> bool:
    """The slice can host a Ray workload (its mode runs Ray, its shape is Ray-reservable)."""
    mode = MODES[item.get("provisioning", "on-demand")]
    plan = plan_slice(item["generation"], item["topology"], item.get("machine_type"))
    return mode.runs_ray and plan.ray_reservable


def servable(item: dict[str, Any]) -> bool:
    """Ray Serve LLM places a replica on the slice (raytpu.core.specs.serving.vllm_rules.slice_problems: not a 2x4 of
    4-chip hosts)."""
    return not vllm_rules.slice_problems(plan_slice(item["generation"], item["topology"], item.get("machine_type")))


def _one_host(item: dict[str, Any]) -> bool:
    return plan_slice(item["generation"], item["topology"], item.get("machine_type")).single_host


def _serving_fields(rng: random.Random, item: dict[str, Any]) -> dict[str, Any]:
    """Some of a serving workload's optional fields, valid for servable slice ``item``: a model the kit knows
    (raytpu.core.tpu.models.MODELS) only where the slice's JAX devices, its TP, divide the model's attention heads."""
    fields: dict[str, Any] = {}
    if rng.random() < 0.5:
        fields["model"] = rng.choice(("Qwen/Qwen3-0.6B", "meta-llama/Llama-3.1-8B", "/mnt/gcs/models/m"))
    if rng.random() < 0.3:
        fields["model_source"] = rng.choice(("gs://weights/models/qwen", "org/name", "/models/local"))
    if rng.random() < 0.3:
        fields["max_model_len"] = rng.choice((512, 4096, 32768))
    if rng.random() < 0.3:
        fields["engine_kwargs"] = {"max_num_seqs": rng.randint(1, 256), "enable_prefix_caching": rng.random() < 0.5}
    shape = by_hf_id(vllm_rules.sized_model(fields.get("model"), fields.get("model_source")))
    devices = vllm_rules.jax_devices(plan_slice(item["generation"], item["topology"], item.get("machine_type")))
    if shape is not None and shape.heads % devices:
        fields["model"] = "meta-llama/Llama-3.1-8B"  # no draw: the generator's sequence stays what it was
    return fields


def valid_config(rng: random.Random) -> dict[str, Any]:
    """A config every rule accepts."""
    region = rng.choice(REGIONS)
    project = _label(rng, 6, 30)
    autopilot = rng.random() < 0.4
    cluster: dict[str, Any] = {"name": _label(rng, 1, 40)}
    if autopilot or rng.random() < 0.5:
        cluster["mode"] = "autopilot" if autopilot else "standard"
    if rng.random() < 0.5:
        cluster["release_channel"] = rng.choice(("RAPID", "REGULAR", "STABLE", "EXTENDED"))
    if rng.random() < 0.3:
        cluster["deletion_protection"] = rng.random() < 0.5
    if rng.random() < 0.4:
        cluster["master_authorized_networks"] = [
            {"name": _label(rng, 1, 20), "cidr": f"{rng.randint(1, 223)}.{rng.randint(0, 255)}.{rng.randint(0, 255)}"
                                                  f".0/24"} for _ in range(rng.randint(1, 2))]
    if cluster.get("master_authorized_networks") and rng.random() < 0.5:
        cluster["control_plane"] = "ip"  # the IP endpoint needs a network to be reachable from
    if not autopilot and rng.random() < 0.4:
        low = rng.randint(0, 3)
        cluster["head_pool"] = {"machine_type": rng.choice(HEAD_MACHINES), "min_nodes": low,
                                "max_nodes": rng.randint(max(low, 1), 6)}
    if rng.random() < 0.3:
        days = sorted(rng.sample(WEEKDAYS, rng.randint(1, 7)), key=WEEKDAYS.index)
        start = f"{rng.randint(0, 23):02d}:{rng.choice((0, 30)):02d}"
        cluster["maintenance_window"] = {"days": days, "start_utc": start,  # >= 48 h in any 32 days:
                                         "hours": rng.randint(max(4, -(-12 // len(days))), 24)}
    if rng.random() < 0.5:
        cluster["labels"] = {_label(rng, 1, 20, chars=LOWER + string.digits + "_-"):
                             _label(rng, 1, 20, first=LOWER + string.digits, chars=LOWER + string.digits + "_-")
                             for _ in range(rng.randint(1, 3))}
    doc: dict[str, Any] = {"project": project, "region": region, "cluster": cluster}
    if rng.random() < 0.3:
        doc["network"] = _network(rng)
    storage = {}
    if len(project) + len(cluster["name"]) + 5 > 63 or rng.random() < 0.3:  # the default would be too long
        storage["bucket"] = _label(rng, 3, 63)
    if rng.random() < 0.3:
        storage["state_bucket"] = _label(rng, 3, 63)
    if storage:
        doc["storage"] = storage
    names: set[str] = set()
    # valid names stay short enough for GKE's TPU webhook on multi-host slices
    # (raytpu.core.specs.spec.MULTI_HOST_NAME_LIMIT: smoke-<slice>-<i>-<run id> and <job>-<run id> within 35 characters)
    doc["slices"] = [_slice(rng, _unique(rng, names, 1, 18), region, autopilot, for_ray=rng.random() < 0.5)
                     for _ in range(rng.randint(1, 4))]
    hosts = [s for s in doc["slices"] if ray_ready(s)]
    if hosts and rng.random() < 0.8:
        doc["workloads"] = []
        work_names: set[str] = set()
        for _ in range(rng.randint(1, 3)):
            item = rng.choice(hosts)
            kind = rng.choice(tuple(k for k in KINDS if (servable(item) or not KINDS[k].takes_model)
                                    and (k != "batch" or _one_host(item))))
            work: dict[str, Any] = {"name": _unique(rng, work_names, 1, 28), "kind": kind, "slice": item["name"]}
            if KINDS[kind].takes_model:
                work.update(_serving_fields(rng, item))
            # Ray Data LLM runs on one host (raytpu.core.specs.runtime.data); input and output required
            if kind == "batch":
                work.update(input="gs://my-data/prompts.jsonl", output=f"gs://my-data/answers-{work['name']}")
            work.update(kind_fields.JOB_ENTRYPOINT if kind == "job" else {})  # a team's driver
            if rng.random() < 0.3:
                work["image"] = "us-docker.pkg.dev/p/r/ray:2.60.0-tpu"
            doc["workloads"].append(work)
    _disks_for_engines(doc)
    return doc


def _disks_for_engines(doc: dict[str, Any]) -> None:
    """A given ``disk_size_gib`` raised (no draw) to hold what an engine on its slice writes per host: a built-in
    model's weights as if every host downloaded them, and Ray's files (core.specs.node_disk: what stays valid)."""
    for item in doc["slices"]:
        engines = [w for w in doc.get("workloads", []) if w["slice"] == item["name"] and KINDS[w["kind"]].takes_model]
        shapes = [by_hf_id(vllm_rules.sized_model(w.get("model"), w.get("model_source"))) for w in engines]
        needs = [(s.params() * node_disk.WEIGHT_BYTES / node_disk.GIB if s else 0) + node_disk.SCRATCH_GIB
                 for s in shapes]
        if "disk_size_gib" in item and needs:
            item["disk_size_gib"] = max(item["disk_size_gib"], node_disk.disk_for(max(needs)) or 0)


# ------------------------------------------------------------------------------------------ breakers
# Each breaker edits a valid config in place so one known field is wrong and returns that field's config path.
# `phase`: "structure" (pydantic: types, keys) masks every value rule; "part" faults (one part's own rules) are
# all reported together; "cross" faults (rules across parts) are judged once every part is valid.


@dataclass(frozen=True)
class Breaker:
    name: str
    phase: str
    group: str
    edit: Callable[[random.Random, dict[str, Any]], str]


def _any_slice(rng: random.Random, doc: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    i = rng.randrange(len(doc["slices"]))
    return i, doc["slices"][i]


def _autopilot(doc: dict[str, Any]) -> bool:
    return bool(doc["cluster"].get("mode") == "autopilot")


def _set_mode(doc: dict[str, Any], mode: str) -> None:
    """Switches a valid config's cluster mode, dropping what the other mode forbids."""
    doc["cluster"]["mode"] = mode
    for item in doc["slices"]:
        item.pop("fallback" if mode == "standard" else "disk_size_gib", None)
        if mode == "autopilot" and MODES[item.get("provisioning", "on-demand")].priority is None:
            _set_provisioning(item, "flex-start")  # no ComputeClass offers queued
    if mode == "autopilot":
        doc["cluster"].pop("head_pool", None)


def _slice_path(i: int, key: str) -> str:
    return f"slices[{i}].{key}"


def _add_workload(rng: random.Random, doc: dict[str, Any], item: dict[str, Any], **extra: Any) -> str:
    """Appends a workload on ``item`` and returns its path prefix."""
    works = doc.setdefault("workloads", [])
    taken = {w["name"] for w in works}
    try:
        plan = plan_slice(item["generation"], item["topology"], item.get("machine_type"))
    except (KeyError, InvalidInput):  # a slice a breaker made invalid: no kind bound to a shape
        plan = None
    kind = rng.choice([k for k in KINDS if (plan is not None and kind_fields.runs_on(k, plan)) or k != "batch"])
    works.append({"name": _unique(rng, taken, 1, 28), "kind": kind, "slice": item["name"],
                  **kind_fields.fields(kind), **extra})
    return f"workloads[{len(works) - 1}]"


def _new_slice(rng: random.Random, doc: dict[str, Any], **fields: Any) -> tuple[int, dict[str, Any]]:
    taken = {s["name"] for s in doc["slices"]}
    item = _slice(rng, _unique(rng, taken, 1, 18), doc["region"], _autopilot(doc))
    item.pop("machine_type", None)
    _set_provisioning(item, fields.pop("provisioning", "on-demand"))
    item.update(fields)
    doc["slices"].append(item)
    return len(doc["slices"]) - 1, item


def b_project(rng: random.Random, doc: dict[str, Any]) -> str:
    doc["project"] = rng.choice(("My_Project", "short", "9starts-with-digit", "ends-with-hyphen-", "x" * 31))
    return "project"


def b_region(rng: random.Random, doc: dict[str, Any]) -> str:
    doc["region"] = rng.choice(("useast5", "us-east5-b", "US-EAST5", "east"))
    return "region"


def b_cluster_name(rng: random.Random, doc: dict[str, Any]) -> str:
    doc["cluster"]["name"] = rng.choice(("Ray_TPU", "1ray", "ray-", "r" * 41, ""))
    return "cluster.name"


def b_cluster_mode(rng: random.Random, doc: dict[str, Any]) -> str:
    doc["cluster"]["mode"] = rng.choice(("serverless", "Standard", "auto"))
    return "cluster.mode"


def b_release_channel(rng: random.Random, doc: dict[str, Any]) -> str:
    doc["cluster"]["release_channel"] = rng.choice(("NIGHTLY", "rapid", "BETA"))
    return "cluster.release_channel"


def b_label_key(rng: random.Random, doc: dict[str, Any]) -> str:
    key = rng.choice(("Team", "1team", "team.name", "k" * 64))
    doc["cluster"].setdefault("labels", {})[key] = "x"
    return f"cluster.labels[{key!r}]"


def b_label_value(rng: random.Random, doc: dict[str, Any]) -> str:
    doc["cluster"].setdefault("labels", {})["team"] = rng.choice(("ML", "a b", "v" * 64, "a.b"))
    return "cluster.labels['team']"


def b_authorized_cidr(rng: random.Random, doc: dict[str, Any]) -> str:
    nets = doc["cluster"].setdefault("master_authorized_networks", [{"name": "office", "cidr": "203.0.113.0/24"}])
    j = rng.randrange(len(nets))
    nets[j]["cidr"] = rng.choice(("203.0.113.0/33", "office", "203.0.113.1/24", "300.1.1.0/24"))
    return f"cluster.master_authorized_networks[{j}].cidr"


def b_head_pool_on_autopilot(rng: random.Random, doc: dict[str, Any]) -> str:
    _set_mode(doc, "autopilot")
    doc["cluster"]["head_pool"] = {"min_nodes": 1}
    return "cluster.head_pool"


def b_head_pool_bounds(rng: random.Random, doc: dict[str, Any]) -> str:
    _set_mode(doc, "standard")
    case = rng.randrange(3)
    if case == 0:
        doc["cluster"]["head_pool"] = {"min_nodes": 5, "max_nodes": 2}
        return "cluster.head_pool.min_nodes"
    if case == 1:
        doc["cluster"]["head_pool"] = {"max_nodes": 0}
        return "cluster.head_pool.max_nodes"
    doc["cluster"]["head_pool"] = {"min_nodes": 1001, "max_nodes": 3}
    return "cluster.head_pool.min_nodes"


def b_maintenance_window(rng: random.Random, doc: dict[str, Any]) -> str:
    case = rng.randrange(3)
    if case == 0:
        doc["cluster"]["maintenance_window"] = {"days": ["SU"], "hours": rng.randint(4, 11)}  # under 48 h
        return "cluster.maintenance_window.hours"
    if case == 1:
        doc["cluster"]["maintenance_window"] = {"start_utc": rng.choice(("24:00", "2am", "02:60"))}
        return "cluster.maintenance_window.start_utc"
    doc["cluster"]["maintenance_window"] = {"days": ["SA", rng.choice(("Sunday", "sun", "SN"))]}
    return "cluster.maintenance_window.days[1]"


def b_control_plane(rng: random.Random, doc: dict[str, Any]) -> str:
    doc["cluster"].pop("master_authorized_networks", None)
    doc["cluster"]["control_plane"] = rng.choice(("ip", "public", "private"))
    return "cluster.control_plane"


def b_network_cidr(rng: random.Random, doc: dict[str, Any]) -> str:
    key = rng.choice(("subnet_cidr", "pods_cidr", "services_cidr", "master_cidr"))
    doc.setdefault("network", {})[key] = rng.choice(("10.0.0.0/33", "ten", "10.10.0.1/20", "2001:db8::/32"))
    return f"network.{key}"


def b_network_overlap(rng: random.Random, doc: dict[str, Any]) -> str:
    """A later range overlapping an earlier one (NetworkSpec reports the later field)."""
    nets = {**dataclasses.asdict(NetworkSpec()), **doc.get("network", {})}
    later = rng.choice(("pods_cidr", "services_cidr", "master_cidr"))
    order = list(nets)
    earlier = rng.choice(order[:order.index(later)])
    base = ipaddress.IPv4Network(nets[earlier])
    prefix = {"pods_cidr": 14, "services_cidr": 20, "master_cidr": 28}[later]
    clash = base.supernet(new_prefix=prefix) if base.prefixlen > prefix else next(base.subnets(new_prefix=prefix))
    doc.setdefault("network", {})[later] = str(clash)
    return f"network.{later}"


def b_master_not_28(rng: random.Random, doc: dict[str, Any]) -> str:
    doc.setdefault("network", {})["master_cidr"] = rng.choice(("172.16.0.0/24", "172.16.0.0/29"))
    return "network.master_cidr"


def b_bucket(rng: random.Random, doc: dict[str, Any]) -> str:
    key = rng.choice(("bucket", "state_bucket"))
    doc.setdefault("storage", {})[key] = rng.choice(("Bucket", "ab", "-bucket", "b" * 64, "bucket-"))
    return f"storage.{key}"


def b_default_bucket_too_long(rng: random.Random, doc: dict[str, Any]) -> str:
    """No bucket given and ``<project>-<cluster>-ray`` is longer than a bucket name may be."""
    doc["project"] = _label(rng, 30, 30)
    doc["cluster"]["name"] = _label(rng, 30, 40)
    doc.get("storage", {}).pop("bucket", None)
    return "storage.bucket"


def b_slice_name(rng: random.Random, doc: dict[str, Any]) -> str:
    i, item = _any_slice(rng, doc)
    old = item["name"]
    item["name"] = rng.choice(("Train", "train_1", "1train", "t" * 31, "train-"))
    for work in doc.get("workloads", []):  # keep the workloads on it pointing at it
        if work["slice"] == old:
            work["slice"] = item["name"]
    return _slice_path(i, "name")


def b_duplicate_slice(rng: random.Random, doc: dict[str, Any]) -> str:
    _, item = _any_slice(rng, doc)
    twin = copy.deepcopy(item)
    doc["slices"].append(twin)
    return _slice_path(len(doc["slices"]) - 1, "name")


def b_generation(rng: random.Random, doc: dict[str, Any]) -> str:
    i, item = _any_slice(rng, doc)
    item["generation"] = rng.choice(("v3", "v6", "trillium", "V6E"))
    return _slice_path(i, "generation")


def b_topology(rng: random.Random, doc: dict[str, Any]) -> str:
    i, item = _any_slice(rng, doc)
    gen = generation(item["generation"])
    item.pop("machine_type", None)
    wrong = ("4x5", "2x2x2x2", "axb", "16x16x16x16") if gen.mesh_dims == 2 else ("4x4", "3x4x4", "5x5x5", "4x4x2")
    item["topology"] = rng.choice(wrong)
    return _slice_path(i, "topology")


def b_machine_type(rng: random.Random, doc: dict[str, Any]) -> str:
    i, item = _any_slice(rng, doc)
    gen = generation(item["generation"])
    fits = {m.name for m in machine_types_for(gen, item["topology"])}
    others = [m.name for g in GENERATIONS.values() for m in g.machine_types if m.name not in fits]
    item["machine_type"] = rng.choice([*others, "n2-standard-8"])
    return _slice_path(i, "machine_type")


def b_zone_outside_region(rng: random.Random, doc: dict[str, Any]) -> str:
    i, item = _any_slice(rng, doc)
    item["zone"] = f"{rng.choice([r for r in REGIONS if r != doc['region']])}-{rng.choice('abc')}"
    return _slice_path(i, "zone")


def b_zone_malformed(rng: random.Random, doc: dict[str, Any]) -> str:
    i, item = _any_slice(rng, doc)
    item["zone"] = rng.choice((doc["region"], f"{doc['region']}-", f"{doc['region']}-bb", "zone-b"))
    return _slice_path(i, "zone")


def b_count(rng: random.Random, doc: dict[str, Any]) -> str:
    i, item = _any_slice(rng, doc)
    item["count"] = rng.choice((0, -1, 1001))
    return _slice_path(i, "count")


def b_disk(rng: random.Random, doc: dict[str, Any]) -> str:
    _set_mode(doc, "standard")
    i, item = _any_slice(rng, doc)
    item["disk_size_gib"] = rng.choice((0, 9, 65537))
    return _slice_path(i, "disk_size_gib")


def b_provisioning(rng: random.Random, doc: dict[str, Any]) -> str:
    i, item = _any_slice(rng, doc)
    item["provisioning"] = rng.choice(("preemptible", "Spot", "dws", "on_demand"))
    return _slice_path(i, "provisioning")


def _offered(item: dict[str, Any]) -> dict[str, Any]:
    """Keeps a slice's generation one its modes are offered for: flex-start (as provisioning or a fallback) on a
    generation GKE does not offer it for (v4) moves the slice to v6e 2x2 (tests/test_capacity.py tests the refusal)."""
    modes = tuple(MODES[m] for m in (item.get("provisioning", "on-demand"), *item.get("fallback", [])) if m in MODES)
    if "generation" in item and generation_problems(modes, item["generation"]):
        item.update(generation="v6e", topology="2x2")
        item.pop("machine_type", None)
    return item


def _set_provisioning(item: dict[str, Any], mode: str) -> None:
    """Switches a slice to ``mode`` and keeps its other provisioning fields consistent with it."""
    item["provisioning"] = mode
    if MODES[mode].needs_reservation:
        item.setdefault("reservation", "my-res")
    else:
        item.pop("reservation", None)
    if mode != "flex-start":
        item.pop("max_run_duration_s", None)
    fallback = [m for m in item.get("fallback", []) if m != mode]
    if MODES[mode].priority is None or not fallback:
        item.pop("fallback", None)
    else:
        item["fallback"] = fallback
    if mode != "spot" or "fallback" in item:
        item.pop("preemption_notice_s", None)
    _offered(item)


def b_reservation_missing(rng: random.Random, doc: dict[str, Any]) -> str:
    i, item = _any_slice(rng, doc)
    _set_provisioning(item, "reservation")
    item.pop("reservation")
    return _slice_path(i, "reservation")


def b_reservation_forbidden(rng: random.Random, doc: dict[str, Any]) -> str:
    i, item = _any_slice(rng, doc)
    _set_provisioning(item, rng.choice([m for m in MODES if not MODES[m].needs_reservation]))
    item["reservation"] = "my-res"
    return _slice_path(i, "reservation")


def b_max_run_duration(rng: random.Random, doc: dict[str, Any]) -> str:
    i, item = _any_slice(rng, doc)
    if rng.random() < 0.5:  # out of flex-start's range
        _set_provisioning(item, "flex-start")
        item["max_run_duration_s"] = rng.choice((0, 599, 7 * 24 * 3600 + 1))
    else:  # out of a VM's range, with any other mode
        _set_provisioning(item, rng.choice([m for m in MODES if m != "flex-start"]))
        item["max_run_duration_s"] = rng.choice((0, 599, 120 * 24 * 3600 + 1))
    return _slice_path(i, "max_run_duration_s")


def b_fallback_on_standard(rng: random.Random, doc: dict[str, Any]) -> str:
    _set_mode(doc, "standard")
    i, item = _any_slice(rng, doc)
    _set_provisioning(item, "spot")
    item["fallback"] = ["flex-start"]
    _offered(item)
    return _slice_path(i, "fallback")


def b_fallback_mode(rng: random.Random, doc: dict[str, Any]) -> str:
    _set_mode(doc, "autopilot")
    i, item = _any_slice(rng, doc)
    case = rng.randrange(4)
    mode, fallback, path = [
        ("spot", ["on-demand", "preemptible"], "fallback[1]"),  # a mode that does not exist
        ("spot", [rng.choice(("queued", "reservation"))], "fallback[0]"),  # not a ComputeClass fallback
        ("flex-start", ["spot", "flex-start"], "fallback"),  # repeats the slice's own mode
        ("queued", ["spot"], "fallback"),  # queued has no ComputeClass priority to fall back from
    ][case]
    _set_provisioning(item, mode)
    item["fallback"] = fallback
    return _slice_path(i, path)


def b_disk_on_autopilot(rng: random.Random, doc: dict[str, Any]) -> str:
    _set_mode(doc, "autopilot")
    i, item = _any_slice(rng, doc)
    item["disk_size_gib"] = rng.randint(10, 500)
    return _slice_path(i, "disk_size_gib")


def b_disk_too_small_for_engine(rng: random.Random, doc: dict[str, Any]) -> str:
    """A Standard slice whose given boot disk leaves less allocatable storage than its engine downloads per host
    (Qwen3-8B: 15.3 GiB of weights + 10 GiB; a 40 GiB disk leaves 11.7 GiB)."""
    _set_mode(doc, "standard")
    i, item = _new_slice(rng, doc, generation="v6e", topology="2x4")
    item["disk_size_gib"] = rng.randint(10, 40)
    works = doc.setdefault("workloads", [])
    works.append({"name": _unique(rng, {w["name"] for w in works}, 1, 28), "kind": "serve", "slice": item["name"],
                  "model": "Qwen/Qwen3-8B"})
    return _slice_path(i, "disk_size_gib")


def b_workload_unknown_slice(rng: random.Random, doc: dict[str, Any]) -> str:
    taken = {s["name"] for s in doc["slices"]}
    prefix = _add_workload(rng, doc, {"name": _unique(rng, taken, 1, 30)})
    return f"{prefix}.slice"


def b_long_multi_host_slice_name(rng: random.Random, doc: dict[str, Any]) -> str:
    """A multi-host slice whose smoke jobs' names GKE's TPU webhook would truncate (over 35 characters)."""
    i, item = _new_slice(rng, doc, generation="v6e", topology="4x4")
    item.pop("count", None)
    item["name"] = _unique(rng, {s["name"] for s in doc["slices"]}, 21, 30)
    return _slice_path(i, "name")


def b_long_multi_host_job_name(rng: random.Random, doc: dict[str, Any]) -> str:
    """A RayJob on a multi-host slice whose ``<name>-<run id>`` would pass 35 characters."""
    _, item = _new_slice(rng, doc, generation="v6e", topology="4x4")
    prefix = _add_workload(rng, doc, item, kind="train")
    doc["workloads"][-1]["name"] = _unique(rng, {w["name"] for w in doc["workloads"]}, 29, 30)
    return f"{prefix}.name"


def b_workload_on_queued(rng: random.Random, doc: dict[str, Any]) -> str:
    _, item = _new_slice(rng, doc, provisioning="queued")
    return f"{_add_workload(rng, doc, item)}.slice"


def b_workload_on_unreservable(rng: random.Random, doc: dict[str, Any]) -> str:
    gen_name = rng.choice(("v4", "v5p", "tpu7x"))
    gen = generation(gen_name)
    topology = rng.choice([t for t in gen.topologies if t not in gen.ray_topologies])
    _, item = _new_slice(rng, doc, generation=gen_name, topology=topology)
    return f"{_add_workload(rng, doc, item)}.slice"


def _a_workload(rng: random.Random, doc: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    if not doc.get("workloads"):
        _, item = _new_slice(rng, doc, generation="v6e", topology="2x4")
        _add_workload(rng, doc, item)
    k = rng.randrange(len(doc["workloads"]))
    return k, doc["workloads"][k]


def b_workload_name(rng: random.Random, doc: dict[str, Any]) -> str:
    k, work = _a_workload(rng, doc)
    work["name"] = rng.choice(("Train", "train_job", "w" * 31, "-w"))
    return f"workloads[{k}].name"


def b_duplicate_workload(rng: random.Random, doc: dict[str, Any]) -> str:
    _, work = _a_workload(rng, doc)
    doc["workloads"].append(copy.deepcopy(work))
    return f"workloads[{len(doc['workloads']) - 1}].name"


def b_workload_kind(rng: random.Random, doc: dict[str, Any]) -> str:
    k, work = _a_workload(rng, doc)
    work["kind"] = rng.choice(("training", "Serve", "bench"))
    work.pop("model", None)
    return f"workloads[{k}].kind"


def b_model_on_job(rng: random.Random, doc: dict[str, Any]) -> str:
    k, work = _a_workload(rng, doc)
    for name in ("model_source", "max_model_len", "engine_kwargs"):
        work.pop(name, None)
    work.update(kind=rng.choice([n for n, kind in KINDS.items() if not kind.takes_model]), model="Qwen/Qwen3-0.6B")
    work.update(kind_fields.JOB_ENTRYPOINT if work["kind"] == "job" else {})
    return f"workloads[{k}].model"


def b_engine_kwarg(rng: random.Random, doc: dict[str, Any]) -> str:
    _, item = _new_slice(rng, doc, generation="v6e", topology="2x4")  # one 8-chip host: servable
    typo = rng.choice(("max_num_seq", "tensor_parallel", "gpu_mem_utilization", "model"))
    return _add_workload(rng, doc, item, kind="serve", engine_kwargs={typo: 1}) + f".engine_kwargs.{typo}"


UNKNOWN_KEYS = [("", "zones"), ("cluster", "node_pools"), ("network", "vpc"), ("storage", "region"),
                ("slices", "chips"), ("workloads", "replicas"), ("cluster.head_pool", "disk_size_gib")]


def b_unknown_key(rng: random.Random, doc: dict[str, Any]) -> str:
    where, key = rng.choice(UNKNOWN_KEYS)
    if where == "":
        doc[key] = "x"
        return key
    if where == "slices":
        i, item = _any_slice(rng, doc)
        item[key] = 16
        return _slice_path(i, key)
    if where == "workloads":
        k, work = _a_workload(rng, doc)
        work[key] = 2
        return f"workloads[{k}].{key}"
    if where == "cluster.head_pool":
        _set_mode(doc, "standard")
        doc["cluster"].setdefault("head_pool", {})[key] = 200
        return f"{where}.{key}"
    doc.setdefault(where, {})[key] = "x"
    return f"{where}.{key}"


def b_wrong_type(rng: random.Random, doc: dict[str, Any]) -> str:
    case = rng.randrange(8)
    if case == 0:
        i, item = _any_slice(rng, doc)
        item["count"] = rng.choice(("two", 1.5, [1]))
        return _slice_path(i, "count")
    if case == 1:
        doc["cluster"]["deletion_protection"] = rng.choice(("maybe", 2, [True]))
        return "cluster.deletion_protection"
    if case == 2:
        doc["cluster"]["labels"] = ["team=ml"]
        return "cluster.labels"
    if case == 3:
        doc["slices"] = {"train": doc["slices"][0]}
        doc.pop("workloads", None)
        return "slices"
    if case == 4:
        i, item = _any_slice(rng, doc)
        item["zone"] = rng.choice((5, ["us-east5-a"], {"zone": "a"}))
        return _slice_path(i, "zone")
    if case == 5:
        doc["cluster"] = rng.choice(("ray-tpu", ["ray-tpu"]))
        return "cluster"
    if case == 6:
        i, item = _any_slice(rng, doc)
        item["fallback"] = "spot"
        return _slice_path(i, "fallback")
    doc["project"] = rng.choice((123456, ["p"], None))
    return "project"


def b_missing_key(rng: random.Random, doc: dict[str, Any]) -> str:
    case = rng.randrange(4)
    if case == 0:
        key = rng.choice(("project", "region", "cluster", "slices"))
        doc.pop(key)
        if key == "slices":
            doc.pop("workloads", None)
        return key
    if case == 1:
        i, item = _any_slice(rng, doc)
        key = rng.choice(("name", "generation", "topology", "zone"))
        item.pop(key)
        return _slice_path(i, key)
    if case == 2:
        k, work = _a_workload(rng, doc)
        key = rng.choice(("name", "kind", "slice"))
        work.pop(key)
        return f"workloads[{k}].{key}"
    doc["cluster"].pop("name")
    return "cluster.name"


def b_no_slices(rng: random.Random, doc: dict[str, Any]) -> str:
    doc["slices"] = []
    doc.pop("workloads", None)
    return "slices"


BREAKERS = [
    Breaker("project", "cross", "top", b_project),
    Breaker("region", "cross", "top", b_region),
    Breaker("cluster-name", "part", "cluster", b_cluster_name),
    Breaker("cluster-mode", "part", "cluster", b_cluster_mode),
    Breaker("release-channel", "part", "cluster", b_release_channel),
    Breaker("label-key", "part", "cluster", b_label_key),
    Breaker("label-value", "part", "cluster", b_label_value),
    Breaker("authorized-cidr", "part", "cluster", b_authorized_cidr),
    Breaker("head-pool-on-autopilot", "part", "cluster", b_head_pool_on_autopilot),
    Breaker("head-pool-bounds", "part", "cluster", b_head_pool_bounds),
    Breaker("maintenance-window", "part", "cluster", b_maintenance_window),
    Breaker("control-plane", "part", "cluster", b_control_plane),
    Breaker("network-cidr", "part", "network", b_network_cidr),
    Breaker("network-overlap", "part", "network", b_network_overlap),
    Breaker("master-not-28", "part", "network", b_master_not_28),
    Breaker("bucket", "part", "storage", b_bucket),
    Breaker("default-bucket-too-long", "cross", "top", b_default_bucket_too_long),
    Breaker("slice-name", "part", "slices", b_slice_name),
    Breaker("duplicate-slice", "cross", "slices", b_duplicate_slice),
    Breaker("generation", "part", "slices", b_generation),
    Breaker("topology", "part", "slices", b_topology),
    Breaker("machine-type", "part", "slices", b_machine_type),
    Breaker("zone-outside-region", "cross", "slices", b_zone_outside_region),
    Breaker("zone-malformed", "part", "slices", b_zone_malformed),
    Breaker("count", "part", "slices", b_count),
    Breaker("disk", "part", "slices", b_disk),
    Breaker("provisioning", "part", "slices", b_provisioning),
    Breaker("reservation-missing", "part", "slices", b_reservation_missing),
    Breaker("reservation-forbidden", "part", "slices", b_reservation_forbidden),
    Breaker("max-run-duration", "part", "slices", b_max_run_duration),
    Breaker("fallback-on-standard", "cross", "slices", b_fallback_on_standard),
    Breaker("fallback-mode", "part", "slices", b_fallback_mode),
    Breaker("disk-on-autopilot", "cross", "slices", b_disk_on_autopilot),
    Breaker("disk-too-small-for-engine", "cross", "slices", b_disk_too_small_for_engine),
    Breaker("workload-unknown-slice", "part", "workloads", b_workload_unknown_slice),
    Breaker("workload-on-queued", "part", "workloads", b_workload_on_queued),
    Breaker("long-multi-host-slice-name", "part", "slices", b_long_multi_host_slice_name),
    Breaker("long-multi-host-job-name", "part", "workloads", b_long_multi_host_job_name),
    Breaker("workload-on-unreservable", "part", "workloads", b_workload_on_unreservable),
    Breaker("workload-name", "part", "workloads", b_workload_name),
    Breaker("duplicate-workload", "cross", "workloads", b_duplicate_workload),
    Breaker("workload-kind", "part", "workloads", b_workload_kind),
    Breaker("model-on-job", "part", "workloads", b_model_on_job),
    Breaker("engine-kwarg", "part", "workloads", b_engine_kwarg),
    Breaker("unknown-key", "structure", "any", b_unknown_key),
    Breaker("wrong-type", "structure", "any", b_wrong_type),
    Breaker("missing-key", "structure", "any", b_missing_key),
    Breaker("no-slices", "cross", "top", b_no_slices),
]
# Two faults at once: one in the cluster, network or storage part and one in a slice or workload part; the
# compiler checks every part, so both are reported.
PAIRS = [(a, b) for a in BREAKERS for b in BREAKERS if a.phase == b.phase == "part"
         and a.group in ("cluster", "network", "storage") and b.group in ("slices", "workloads")
         and a.name not in ("head-pool-on-autopilot", "head-pool-bounds")  # they switch the cluster mode
         and b.name not in ("disk", "fallback-mode")]


@dataclass
class Case:
    index: int
    doc: dict[str, Any]
    broken: list[str] = field(default_factory=list)
    """Names of the breakers applied (empty: valid by construction)."""
    expected: list[str] = field(default_factory=list)
    """Config paths the generator broke."""


def generate(seed: int = SEED, count: int = CONFIGS) -> list[Case]:
    """The configs of one run: even indexes valid, odd ones broken (every tenth config in two places)."""
    rng = random.Random(seed)
    cases = []
    singles = 0  # single-breaker cases so far: they cycle through BREAKERS, so each is used
    for index in range(count):
        doc = valid_config(rng)
        case = Case(index, doc)
        if index % 2:
            if index % 10 == 9:
                chosen = list(rng.choice(PAIRS))
            else:
                chosen = [BREAKERS[singles % len(BREAKERS)]]
                singles += 1
            for breaker in chosen:
                case.broken.append(breaker.name)
                case.expected.append(breaker.edit(rng, doc))
        cases.append(case)
    return cases


# ------------------------------------------------------------------------------------------ paths

_SEGMENT = re.compile(r"\.?([A-Za-z_][A-Za-z0-9_]*)|\[(\d+)\]|\[('(?:[^'\\]|\\.)*'|\"(?:[^\"\\]|\\.)*\")\]")


def path_problems(path: str, doc: Any) -> str | None:
    """Why ``path`` is not a path of the generator's vocabulary over ``doc`` (None when it is): each name is a
    field of the config schema at that point or a key the generator wrote; each index is within its list;
    each quoted key is a key of its mapping."""
    from pydantic import BaseModel

    node: Any = doc
    model: Any = config_module.Config
    pos = 0
    first = True
    while pos < len(path):
        match = _SEGMENT.match(path, pos)
        if not match or (first and path[pos] == "."):
            return f"unparsable at {path[pos:]!r}"
        name, index, quoted = match.groups()
        pos = match.end()
        first = False
        if name is not None:
            fields = model.model_fields if isinstance(model, type) and issubclass(model, BaseModel) else {}
            if name not in fields and not (isinstance(node, dict) and name in node):
                return f"{name!r} is neither a config key here nor a key the generator wrote"
            model = config_module._unwrap(fields[name].annotation) if name in fields else None
            node = node.get(name) if isinstance(node, dict) else None
        elif index is not None:
            if not isinstance(node, list) or int(index) >= len(node):
                return f"index [{index}] is out of range"
            node = node[int(index)]
            model = config_module._unwrap(model, index=True) if model is not None else None
        else:
            key = yaml.safe_load(quoted)
            if not isinstance(node, dict) or key not in node:
                return f"key [{quoted}] is not in the mapping"
            node, model = node[key], None
    return None


def test_path_vocabulary_check() -> None:
    doc = {"cluster": {"labels": {"Team": "x"}}, "slices": [{"name": "a", "fallback": ["spot", "x"]}], "zones": "x"}
    for good in ("project", "cluster.labels['Team']", "slices[0].zone", "slices[0].fallback[1]", "zones",
                 "storage.bucket", "cluster.head_pool.min_nodes", "workloads"):
        assert path_problems(good, doc) is None, good
    for bad in ("slices[1].name", "cluster.labels['team']", "cluster.nodes", "Slices", "slices.0", "[0]",
                "slices[0].zone.x.y", ".project", "WORKLOAD", "config", "slices[0].fallback[2]"):
        assert path_problems(bad, doc) is not None, bad


# ------------------------------------------------------------------------------------------ the property


def _parse(doc: dict[str, Any]) -> ClusterSpec | InvalidInputs:
    try:
        return config_module.parse(yaml.safe_dump(doc, sort_keys=False))
    except InvalidInputs as exc:
        return exc
    except InvalidInput as exc:  # only for text that is not a YAML mapping, which the generator never writes
        pytest.fail(f"a single InvalidInput instead of InvalidInputs: {exc}")


def test_generator_is_deterministic_and_varied() -> None:
    first, again = generate(count=60), generate(count=60)
    assert [c.doc for c in first] == [c.doc for c in again]
    assert [c.expected for c in first] == [c.expected for c in again]
    every = {b.name for b in BREAKERS}
    used = {name for c in generate() for name in c.broken}
    assert used == every, f"breakers never used: {sorted(every - used)}"


def test_validate_and_the_stacks_agree_on_generated_configs(capsys: pytest.CaptureFixture[str]) -> None:
    from raytpu.cluster.outputs import StackOutputs
    from raytpu.stacks.app import build, synth

    started = time.monotonic()
    cases = generate()
    generated_s = time.monotonic() - started
    accepted: list[tuple[Case, ClusterSpec]] = []
    rejected = 0
    failures: list[str] = []
    parse_started = time.monotonic()
    for case in cases:
        result = _parse(case.doc)
        if isinstance(result, ClusterSpec):
            if case.broken:  # invariant 3: what the generator broke is reported
                failures.append(f"#{case.index} {case.broken}: accepted, expected {case.expected}")
            accepted.append((case, result))
            continue
        rejected += 1
        paths = [p.field for p in problems_of(result)]
        assert paths, f"#{case.index}: InvalidInputs without problems"
        for path in paths:  # invariant 2: every problem names a config path
            why = path_problems(path, case.doc)
            if why:
                failures.append(f"#{case.index} {case.broken}: reported {path!r}: {why}")
        if not case.broken:
            failures.append(f"#{case.index} valid by construction, rejected: {result}")
        missing = [p for p in case.expected if p not in paths]
        if missing:
            failures.append(f"#{case.index} {case.broken}: {missing} not among reported {paths}")
    parse_s = time.monotonic() - parse_started

    build_started = time.monotonic()
    synthesized = 0
    unsynthesized = Path(tempfile.mkdtemp(prefix="raytpu-property-"))  # an App makes its outdir: not the repo's
    outdirs = [unsynthesized]
    for n, (case, spec) in enumerate(accepted):  # invariant 1: every accepted config builds both stacks
        try:
            _, cluster, workloads = build(spec, FIXTURE_REFS, unsynthesized)
        except Exception as exc:  # any exception breaks the property; report them all
            failures.append(f"#{case.index}: accepted but build raised {type(exc).__name__}: {exc}")
            continue
        pools = sum(s.count for s in spec.slices) if not spec.cluster.autopilot else 0
        if sum(len(p) for p in cluster.pools.values()) != pools:
            failures.append(f"#{case.index}: {cluster.pools} pools for {pools} slice copies")
        for item in spec.slices:  # every engine's weights fit the allocatable storage of its pools' boot disk
            need = node_disk.slice_need(item, spec.workloads, spec.bucket)
            for pool in cluster.pools.get(item.name, []):
                disk = pool.props.disk_size_gib or item.disk_gib
                if need is not None and node_disk.allocatable_gib(disk) < need.need_gib:
                    failures.append(f"#{case.index}: pool {pool.props.name} has {disk} GiB for {need}")
                if item.disk_size_gib is not None and disk != item.disk_size_gib:
                    failures.append(f"#{case.index}: pool {pool.props.name} ignores disk_size_gib")
        if (cluster.head_pool is None) != spec.cluster.autopilot:
            failures.append(f"#{case.index}: head pool {cluster.head_pool} on {spec.cluster.mode}")
        if [w.props.name for w in workloads.workloads] != [w.name for w in spec.workloads if not w.kind.is_job]:
            failures.append(f"#{case.index}: KubeRay objects {[w.props.name for w in workloads.workloads]}")
        classes = [s.name for s in spec.slices if spec.cluster.autopilot and s.provisioning.priority is not None]
        if sorted(workloads.compute_classes) != sorted(classes):
            failures.append(f"#{case.index}: ComputeClasses {sorted(workloads.compute_classes)} for {classes}")
        if n % SYNTH_EVERY == 0:
            outdir = Path(tempfile.mkdtemp(prefix="raytpu-property-"))
            outdirs.append(outdir)
            try:
                written = synth(spec, FIXTURE_REFS, outdir)
            except Exception as exc:
                failures.append(f"#{case.index}: accepted but synth raised {type(exc).__name__}: {exc}")
                continue
            synthesized += 1
            outputs = json.loads(written[0].read_text())["output"]
            declared = sorted(n for n in outputs if not n.startswith("cross-stack-output-"))
            if declared != sorted(StackOutputs.names()):
                failures.append(f"#{case.index}: outputs {declared}")
    build_s = time.monotonic() - build_started
    for outdir in outdirs:
        shutil.rmtree(outdir, ignore_errors=True)

    broken = sum(1 for c in cases if c.broken)
    with capsys.disabled():  # the counts show in every run, captured or not
        print(f"\nproperty: {len(cases)} configs generated ({broken} broken, {len(cases) - broken} valid by "
              f"construction) in {generated_s:.1f}s; parse: {len(accepted)} accepted, {rejected} rejected in "
              f"{parse_s:.1f}s; {len(accepted)} apps built ({synthesized} synthesized) in {build_s:.1f}s")
    assert not failures, f"{len(failures)} disagreement(s):\n" + "\n".join(failures[:40])
    assert len(cases) >= 500 and 0.4 <= broken / len(cases) <= 0.6
    assert len(accepted) == len(cases) - broken
