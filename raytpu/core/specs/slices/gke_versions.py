"""GKE version rules: the version format, its order, the floor a cluster's slices need, and the Terraform
precondition that checks a live control plane against a floor. Read by the cluster construct and stack and by
``raytpu doctor``; a spec rule, so it lives with the specs (it imports no CDK)."""

from __future__ import annotations

import re
from collections.abc import Iterable

from raytpu.core.common import errors
from raytpu.core.common.errors import InvalidInput
from raytpu.core.specs.slices.multislice import MIN_GKE_VERSION as MULTISLICE_MIN_GKE_VERSION
from raytpu.core.specs.slices.notice import LONG_NOTICE_MIN_GKE_VERSION
from raytpu.core.specs.slices.provisioning import Provisioning
from raytpu.core.tpu.catalog import RAY_OPERATOR_MIN_GKE_VERSION, generation
from raytpu.core.tpu.plan import SlicePlan

COMPUTE_CLASS_MIN_GKE_VERSION = "1.32.1-gke.1729000"
"""The version a ComputeClass's ``nodeSystemConfig`` needs (Autopilot and Standard).
Source: https://cloud.google.com/kubernetes-engine/docs/how-to/node-system-config ("ComputeClass")."""
LONG_NOTICE = (LONG_NOTICE_MIN_GKE_VERSION, "a preemption notice above 30 s")
"""(the version, what needs it) of a shutdown window above GKE's default."""

_VERSION = re.compile(r"^(\d+)\.(\d+)(?:\.(\d+))?(?:-gke\.(\d+))?$")


def version_problems(field: str, version: str) -> list[InvalidInput]:
    """A GKE version such as ``1.31.2-gke.1115000``."""
    if _VERSION.match(version):
        return []
    return [errors.invalid_value(field, version, "is not a GKE version", "a version such as 1.31.2-gke.1115000")]


def version_key(version: str) -> tuple[int, int, int, int]:
    """Sort key of a GKE version such as ``1.31.2-gke.1115000``; raises InvalidInput for anything else."""
    errors.raise_found(version_problems("min_master_version", version))
    parts = _VERSION.match(version).groups()  # type: ignore[union-attr]  # it matched: no problem was raised
    return tuple(int(part or 0) for part in parts)  # type: ignore[return-value]


def version_floor(plans: Iterable[SlicePlan], mode: str = "standard", multislice: bool = False,
                  provisioning: Iterable[Provisioning] = (), long_notice: bool = False) -> tuple[str, str]:
    """(oldest GKE version the cluster may run, what needs it): the newest of the Ray Operator add-on's floor, every
    generation's in ``plans`` (catalog ``min_gke_version``; on Autopilot one may need newer, as tpu7x does), every
    provisioning mode's (flex-start: :data:`raytpu.core.tpu.catalog.FLEX_START_MIN_GKE_VERSION`), with ``multislice``
    GKE's Multislice floor (:data:`raytpu.core.specs.slices.multislice.MIN_GKE_VERSION`), on Autopilot the ComputeClass
    ``nodeSystemConfig`` floor, and with ``long_notice`` (``preemption_notice_s`` above 30) the shutdown window's."""
    floor = (RAY_OPERATOR_MIN_GKE_VERSION, "the Ray Operator add-on")
    wanted = [(MULTISLICE_MIN_GKE_VERSION[mode], f"Multislice on {mode.capitalize()}")] if multislice else []
    if mode == "autopilot":
        wanted.append((COMPUTE_CLASS_MIN_GKE_VERSION, "a ComputeClass's nodeSystemConfig"))
    if long_notice:
        wanted.append(LONG_NOTICE)
    for needed, why in wanted:
        if version_key(needed) > version_key(floor[0]):
            floor = (needed, why)
    for used in sorted({p.name: p for p in provisioning}.values(), key=lambda p: p.name):
        if used.min_gke_version and version_key(used.min_gke_version) > version_key(floor[0]):
            floor = (used.min_gke_version, f"{used.name} TPUs")
    for name in sorted({p.generation for p in plans}):
        needed = generation(name).min_gke_version_for(mode)
        if version_key(needed) > version_key(floor[0]):
            floor = (needed, f"{name} on {mode.capitalize()}")
    return floor


_HCL_VERSION = 'regex("^([0-9]+)[.]([0-9]+)[.]([0-9]+)-gke[.]([0-9]+)", {version})'


def hcl_version_at_least(version: str, floor: str) -> str:
    """A Terraform expression (no ``${}``): GKE version ``version`` (an expression) is ``floor`` or newer.

    Terraform has no version comparison; the four numbers of ``1.34.0-gke.2201000`` are compared in order.
    ``try`` makes an unparsable version false, so the precondition fails with its message instead of an error."""
    parts = [f"tonumber({_HCL_VERSION.format(version=version)}[{i}])" for i in range(4)]
    wanted = version_key(floor)
    condition = f"{parts[3]} >= {wanted[3]}"
    for i in (2, 1, 0):
        condition = f"({parts[i]} > {wanted[i]} || ({parts[i]} == {wanted[i]} && {condition}))"
    return f"try({condition}, false)"


def long_notice_check(master_version: str) -> dict[str, str]:
    """A precondition (``condition``, ``error_message``) that the cluster's own control plane, its computed
    ``master_version`` (a token), is new enough for a window above 30 s: the cluster's precondition judges the
    channel's default, not a cluster that lags it. Unknown at plan (a new cluster), Terraform checks it at apply.
    Source: hashicorp/google 8.7.0 ``google_container_cluster.master_version``
    (docs/FACTS.md#preemption-notice-window)."""
    floor, needed_by = LONG_NOTICE
    return {"condition": f"${{{hcl_version_at_least(master_version, floor)}}}",
            "error_message": f"The cluster's control plane runs a version older than {floor}, which {needed_by} "
                             f"needs; valid: upgrade the control plane to {floor} or newer (gcloud container "
                             "clusters upgrade --master), or remove the slice's preemption_notice_s."}
