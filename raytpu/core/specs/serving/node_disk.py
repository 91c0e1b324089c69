"""What a vLLM engine writes to its TPU host's boot disk, and the boot disk that holds it.

Every host of an engine (a RayService replica's slice, a ``batch`` job's host) writes the model's whole checkpoint
to its pod's scratch volume (``$HOME``, node-local) unless the pods read it in place from the kit's bucket: GKE
gives pods only the disk's allocatable ephemeral storage, far less than the disk (docs/FACTS.md#disk-vllm-xla-cache).
The kit's own pools get a boot disk that holds it; a ``disk_size_gib`` too small for it is refused. Standard library
only.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Protocol

from raytpu.core.common import errors
from raytpu.core.common.errors import InvalidInput
from raytpu.core.specs.field_rules import DEFAULT_DISK_SIZE_GIB, DISK_SIZE_GIB
from raytpu.core.specs.kinds import WorkloadKind
from raytpu.core.specs.serving.vllm_rules import DEFAULT_MODEL, sized_model
from raytpu.core.tpu.models import by_hf_id


class SliceSpec(Protocol):
    """The slice field the disk rules read (:class:`raytpu.core.specs.spec.SliceSpec` has it)."""

    @property
    def disk_size_gib(self) -> int | None: ...


class WorkloadSpec(Protocol):
    """The workload fields the disk rules read (:class:`raytpu.core.specs.spec.WorkloadSpec` has them)."""

    @property
    def name(self) -> str: ...
    @property
    def kind(self) -> WorkloadKind: ...
    @property
    def model(self) -> str | None: ...
    @property
    def model_source(self) -> str | None: ...
    @property
    def slice(self) -> object: ...
    @property
    def runs_vllm(self) -> bool: ...

GIB = 2**30
WEIGHT_BYTES = 2
"""Bytes per parameter of a built-in model's checkpoint: bf16 (``torch_dtype`` in each one's config.json)."""
SCRATCH_GIB = 10.0
"""The kit's allowance for the rest a Ray container writes there: Ray's session files and logs, runtime-env zips,
tokenizer files, GCS FUSE's staging of new cache entries. An allowance, not a measured figure."""

GCSFUSE_SIDECAR_GIB = 5
"""The GCS FUSE CSI sidecar's default ephemeral-storage request, in every pod that mounts the kit's bucket.
Source: GoogleCloudPlatform/gcs-fuse-csi-driver cmd/webhook/main.go flag sidecar-ephemeral-storage-request (5Gi)."""
AUTOPILOT_POD_MAX_GIB = 10
"""Autopilot's ceiling on a general-purpose Pod's ephemeral-storage requests, summed over its containers (the GCS FUSE
sidecar's included): a Pod that asks for more is rejected, not scaled down. The Ray head runs in that class.
Source: https://cloud.google.com/kubernetes-engine/docs/concepts/autopilot-resource-requests ("The ephemeral storage
request must be between 10 MiB and 10 GiB for all compute classes and hardware configurations", quoted in
GoogleCloudPlatform/gcs-fuse-csi-driver#21; #57 (2024) says the same 10Gi; docs/FACTS.md#autopilot-ephemeral-limit,
docs/FACTS.md#autopilot-pod-max)."""
AUTOPILOT_ACCELERATOR_POD_MAX_GIB = 56 * 1024
"""Autopilot's ceiling on an accelerator Pod's ephemeral-storage requests (56 TiB, GKE 1.29.3-gke.1038000 or later;
a TPU worker's container plus the GCS FUSE sidecar). Read second-hand: GKE's table itself was out of reach here,
and whether TPU Pods share the GPU figure is that paraphrase's wording, not GKE's
(docs/FACTS.md#autopilot-tpu-pod-ceiling).
Source: vladkol/harbor-gke-ext docs/troubleshooting.md, citing autopilot-resource-requests#min-max-requests."""
MARGIN_GIB = 2.0
"""Room left when the kit sizes a disk: GKE's allocatable is modelled, not published per size
(docs/FACTS.md#disk-allocatable-model)."""

# GKE's local ephemeral storage reservation on a boot disk of D GiB (COS_CONTAINERD; docs/FACTS.md#disk-vllm-xla-cache).
# Source: https://cloud.google.com/kubernetes-engine/docs/concepts/plan-node-sizes#local_ephemeral_storage_reservation
EVICTION_SHARE = 0.10
"""The kubelet's eviction threshold: 10% of the filesystem's capacity."""
COS_PARTITIONS_GIB = 4.184
EXT4_SHARE = 63 / 64
"""The filesystem's capacity: D x 63/64 - 4.184 GiB (COS's fixed partitions, ext4 metadata): this reproduces the
page's example node (100 GB disk: capacity 98831908Ki, allocatable 47060071478 bytes) to within 0.1%."""


def allocatable_gib(disk_gib: int) -> float:
    """Allocatable ephemeral storage of a node whose boot disk is ``disk_gib``: its filesystem's capacity less
    GKE's reservation, min(50% of D, 6 GiB + 35% of D, 100 GiB), and the 10% eviction threshold."""
    capacity = max(0.0, disk_gib * EXT4_SHARE - COS_PARTITIONS_GIB)
    reserved = min(0.5 * disk_gib, 6 + 0.35 * disk_gib, 100.0)
    return max(0.0, capacity - reserved - EVICTION_SHARE * capacity)


RAY_DISK_GIB = (1, min(math.floor(allocatable_gib(DISK_SIZE_GIB[1])),
                       AUTOPILOT_ACCELERATOR_POD_MAX_GIB) - GCSFUSE_SIDECAR_GIB)
"""``workloads[].ray_disk_gib`` (Autopilot only): GiB; a TPU worker's Pod, that plus the GCS FUSE sidecar's request,
within Autopilot's accelerator Pod maximum (Autopilot rejects a Pod over it) and what the largest boot disk GKE takes
leaves a pod."""
RAY_DISK_WHY = (f" GiB (a TPU worker's Pod, with the GCS FUSE sidecar's {GCSFUSE_SIDECAR_GIB} GiB, within Autopilot's "
                f"{AUTOPILOT_ACCELERATOR_POD_MAX_GIB // 1024} TiB per accelerator Pod)")
"""The unit of ``ray_disk_gib``'s range error: why its ceiling is there."""


def disk_for(need_gib: float) -> int | None:
    """The smallest boot disk (a multiple of 10 GiB, at least the default) whose allocatable storage holds
    ``need_gib``; None when even the largest disk GKE takes does not."""
    size = DEFAULT_DISK_SIZE_GIB
    while allocatable_gib(size) < need_gib:
        size += 10
        if size > DISK_SIZE_GIB[1]:
            return None
    return size


def pod_gib(need_gib: float) -> int:
    """A TPU pod's ephemeral-storage requests: its container's (``need_gib`` rounded up) plus the GCS FUSE sidecar's."""
    return math.ceil(need_gib) + GCSFUSE_SIDECAR_GIB


def host_disk(weights_gib: float) -> dict[str, float | int | None]:
    """``raytpu plan --mode serve``'s ``disk``: what a host that downloads ``weights_gib`` writes, the boot disk that
    holds it with the sidecar's request and a margin (None: none does) and that disk's allocatable storage."""
    need = weights_gib + SCRATCH_GIB
    size = disk_for(pod_gib(need) + MARGIN_GIB)
    return {"weights_gib": round(weights_gib, 1), "scratch_gib": SCRATCH_GIB, "need_gib": round(need, 1),
            "sidecar_gib": GCSFUSE_SIDECAR_GIB, "disk_size_gib": size,
            "allocatable_gib": round(allocatable_gib(size), 1) if size else None}


@dataclass(frozen=True)
class EngineDisk:
    """What one engine workload writes per host: the weights it downloads (0 when read in place) and the total."""

    workload: str
    model: str
    weights_gib: float
    batch: bool
    """A ``batch`` job's engine (Ray Data LLM downloads even the kit's bucket)."""

    @property
    def need_gib(self) -> float:
        """Weights plus :data:`SCRATCH_GIB`."""
        return self.weights_gib + SCRATCH_GIB

    @property
    def request(self) -> str:
        """The TPU container's ``ephemeral-storage`` request: the need, rounded up to a GiB."""
        return f"{math.ceil(self.need_gib)}Gi"


def downloads(work: WorkloadSpec, bucket: str | None) -> bool:
    """Whether ``work``'s engine copies its weights to each host: yes from Hugging Face and from ``gs://`` (Ray's
    LLM downloads a remote path to the node first), except a serving workload's source in the kit's mounted
    ``bucket``, which is read in place; never for a path in the image."""
    source = work.model_source or work.model or DEFAULT_MODEL
    if source.startswith("/"):
        return False
    in_bucket = bucket is not None and source.startswith(f"gs://{bucket}/")
    return not (in_bucket and not work.kind.batches)


def engine_disk(work: WorkloadSpec, bucket: str | None) -> EngineDisk | None:
    """What ``work`` writes per host, for an engine workload that reads its weights in place or whose model is in the
    built-in table; None otherwise (another model's size is unknown before it downloads)."""
    if not work.runs_vllm:
        return None
    name = sized_model(work.model, work.model_source)
    if not downloads(work, bucket):
        return EngineDisk(work.name, name, 0.0, work.kind.batches)
    shape = by_hf_id(name)
    if shape is None:
        return None
    return EngineDisk(work.name, shape.name, shape.params() * WEIGHT_BYTES / GIB, work.kind.batches)


def slice_need(item: SliceSpec, workloads: tuple[WorkloadSpec, ...], bucket: str | None) -> EngineDisk | None:
    """The engine workload on slice ``item`` that writes the most per host, if any."""
    found = [d for w in workloads if w.slice == item and (d := engine_disk(w, bucket)) is not None]
    return max(found, key=lambda d: d.need_gib, default=None)


def boot_disk_gib(item: SliceSpec, workloads: tuple[WorkloadSpec, ...], bucket: str | None) -> int:
    """The boot disk of slice ``item``'s hosts: its ``disk_size_gib``, else the default or, when an engine on it
    needs more, the disk that holds it (:func:`disk_for`)."""
    if item.disk_size_gib is not None:
        return item.disk_size_gib
    need = slice_need(item, workloads, bucket)
    sized = disk_for(pod_gib(need.need_gib) + MARGIN_GIB) if need is not None else None
    return max(DEFAULT_DISK_SIZE_GIB, sized or DEFAULT_DISK_SIZE_GIB)


def disk_problems(item: SliceSpec, workloads: tuple[WorkloadSpec, ...], bucket: str | None) -> list[InvalidInput]:
    """A slice whose given ``disk_size_gib`` leaves less allocatable storage than an engine on it writes per host:
    the download fails, KubeRay recreates the pod and the engine never starts. Refused, not warned: the outcome is
    certain and the fix is one field."""
    need = slice_need(item, workloads, bucket)
    if item.disk_size_gib is None or need is None:
        return []
    room = allocatable_gib(item.disk_size_gib)
    if pod_gib(need.need_gib) <= room:
        return []
    enough = disk_for(pod_gib(need.need_gib) + MARGIN_GIB)
    what = (f"{need.model}'s {need.weights_gib:,.1f} GiB of bf16 weights, which every host downloads, + "
            f"{SCRATCH_GIB:g} GiB for Ray's files" if need.weights_gib else f"{SCRATCH_GIB:g} GiB for Ray's files") + (
        f", + {GCSFUSE_SIDECAR_GIB} GiB the GCS FUSE sidecar requests")
    valid = [f"disk_size_gib: {enough} or more" if enough else "no disk GKE offers holds it",
             "or leave disk_size_gib out (the kit sizes the boot disk from the slice's engine workloads)"]
    if need.weights_gib and not need.batch and bucket:
        valid.append(f"or model_source: gs://{bucket}/PATH holding the weights (read in place through the pods' "
                     "GCS FUSE mount)")
    return [errors.invalid_value(
        "disk_size_gib", item.disk_size_gib, f"GiB leaves {room:,.1f} GiB of allocatable ephemeral storage per "
        f"host (GKE's local ephemeral storage reservation), less than the {pod_gib(need.need_gib)} GiB workload "
        f"{need.workload}'s pods request there ({what})", ", ".join(valid))]


def head_ray_files_gib(wanted_gib: float, mounts_bucket: bool) -> float:
    """The Ray head's own ephemeral-storage request on Autopilot: what the workload asks for Ray's files, at most
    :data:`AUTOPILOT_POD_MAX_GIB` less the GCS FUSE sidecar's request when the head mounts the bucket (the head runs
    in the general-purpose class; its TPU workers do not, so ``ray_disk_gib`` above it still reaches them)."""
    ceiling = AUTOPILOT_POD_MAX_GIB - (GCSFUSE_SIDECAR_GIB if mounts_bucket else 0)
    return min(wanted_gib, float(ceiling))
