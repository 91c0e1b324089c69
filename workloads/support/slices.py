"""Slices of the Ray cluster: which hosts of a plan's pod type are alive (inventory), and holding one whole slice.

The smoke check (:mod:`raytpu.workloads.smoke`) reserves each slice it checks; training
(:mod:`raytpu.workloads.train`) holds one to pin its workers to. Imports only the kit's core at module level; ray
is imported inside the functions.
"""

from __future__ import annotations

import contextlib
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from raytpu.core.tpu.plan import RAY_POD_TYPE_LABEL, RAY_SLICE_LABEL, RAY_WORKER_LABEL, SlicePlan

RESERVE_TIMEOUT_S = 60.0
"""How long :func:`reserve_slice` waits for a whole slice by default."""
FIRST_WAIT_NOTE_S, WAIT_NOTE_EVERY_S = 20.0, 60.0
"""A reservation still waiting after 20 s says what it waits for, then once a minute (issue 67 item 5)."""


@dataclass
class SliceInventory:
    """What the GCS knows about one slice of the plan's pod type: its name (``ray.io/tpu-slice-name``; the node id for
    an unnamed single host), worker id -> ``ray.nodes()`` entry of every alive host, and the hosts the plan expects.
    """

    name: str
    nodes: dict[int, dict[str, Any]] = field(default_factory=dict)
    hosts_expected: int = 1

    @property
    def missing(self) -> list[int]:
        """Worker ids with no alive host."""
        return [w for w in range(self.hosts_expected) if w not in self.nodes]

    @property
    def complete(self) -> bool:
        """Every host alive."""
        return not self.missing

    def describe(self) -> str:
        """``name (complete)`` or ``name (missing worker 2)``."""
        if self.complete:
            return f"{self.name} (complete)"
        ids = ", ".join(str(w) for w in self.missing)
        return f"{self.name} (missing worker{'s' if len(self.missing) > 1 else ''} {ids})"


def inventory(plan: SlicePlan, nodes: list[dict[str, Any]] | None = None) -> dict[str, SliceInventory]:
    """Slices of ``plan``'s pod type among alive nodes, by name (sorted)."""
    import ray
    from ray.util.tpu import get_tpu_nodes_for_slice, get_tpu_slice_name_from_node

    nodes = ray.nodes() if nodes is None else nodes
    ours = [n for n in nodes if (n.get("Labels") or {}).get(RAY_POD_TYPE_LABEL) == plan.ray_pod_type]
    found: dict[str, SliceInventory] = {}
    for name in sorted({get_tpu_slice_name_from_node(n) or str(n.get("NodeID")) for n in ours}):
        members = get_tpu_nodes_for_slice(name, ours) or [n for n in ours if str(n.get("NodeID")) == name and
                                                          n.get("Alive")]
        if members:
            found[name] = SliceInventory(name=name, hosts_expected=plan.hosts, nodes={
                int((n.get("Labels") or {}).get(RAY_WORKER_LABEL, "0")): n for n in members})
    return found


def wait_for_hosts(plan: SlicePlan, expected: int, slice_name: str | None, limit_s: float,
                   poll_s: float = 2.0) -> dict[str, SliceInventory]:
    """The slices to check, once every host of ``expected`` slices (or of ``slice_name``) is alive or ``limit_s``
    has passed: a host that joins late (a pod restarting, a raylet registering after the job started) is waited
    for, not failed at the first look."""
    deadline = time.monotonic() + limit_s
    said = 0.0
    while True:
        found = inventory(plan)
        if slice_name:
            found = {slice_name: found.get(slice_name, SliceInventory(slice_name, hosts_expected=plan.hosts))}
        waiting = [inv.describe() for inv in found.values() if not inv.complete]
        short = max((1 if slice_name else expected) - len(found), 0)
        left = deadline - time.monotonic()
        if (not waiting and not short) or left <= 0:
            return found
        if time.monotonic() - said >= 10:
            what = "; ".join(waiting + ([f"{short} more {plan.ray_pod_type} slice(s)"] if short else []))
            print(f"smoke: waiting up to {left:.0f}s for {what}", file=sys.stderr, flush=True)
            said = time.monotonic()
        time.sleep(min(poll_s, max(left, 0.0)))


@dataclass
class Reservation:
    """A whole slice held for this driver: the slice placement group (one bundle per host, in worker order), the
    placement group holding the slice's head resource (so Ray's unpinned reservations skip it) or None, and the
    seconds it took.
    """

    slice_name: str
    handle: Any
    head_pg: Any
    latency_s: float

    @property
    def placement_group(self) -> Any:
        """The slice's placement group."""
        return self.handle.placement_group

    def release(self) -> None:
        """Removes the placement groups (idempotent)."""
        from ray.util.placement_group import remove_placement_group

        with contextlib.suppress(Exception):  # release is best effort, after a failure too
            if self.handle is not None:
                self.handle.shutdown()
        if self.head_pg is not None:
            with contextlib.suppress(Exception):
                remove_placement_group(self.head_pg)
            self.head_pg = None


def _idle(inv: SliceInventory) -> bool:
    """Every host of the slice has all its TPU free; a missing TPU key means 0 free (Ray drops the key at 0, which
    ``ray.util.tpu.get_num_ready_tpu_slices`` misreads as idle). Source: Ray 2.60 ``ray._private.state
    .available_resources_per_node`` (docs/FACTS.md#ray-tpu-slices).
    """
    from ray._private.state import available_resources_per_node

    free = available_resources_per_node()
    return all(free.get(str(n.get("NodeID")), {}).get("TPU", 0) >= (n.get("Resources") or {}).get("TPU", 0)
               for n in inv.nodes.values())


def _claim_head(plan: SlicePlan, slice_name: str, timeout_s: float) -> Any:
    """Holds the slice's ``TPU-<pod>-head`` resource on worker 0 of exactly ``slice_name``."""
    import ray
    from ray.util.placement_group import placement_group, remove_placement_group

    pg = placement_group([{plan.head_resource: 1}],
                         bundle_label_selector=[{RAY_WORKER_LABEL: "0", RAY_SLICE_LABEL: slice_name}])
    ready, _ = ray.wait([pg.ready()], timeout=max(timeout_s, 0.1))
    if not ready:
        remove_placement_group(pg)
        return None
    return pg


def bundle_selectors(plan: SlicePlan, slice_name: str) -> list[dict[str, str]]:
    """One label selector per bundle: the slice, and bundle i on the host labelled ``ray.io/tpu-worker-id=i``.

    ``SlicePlacementGroup`` only pins bundles to the slice (Ray 2.60 ``ray.util.tpu.SlicePlacementGroup._reserve_slice``
    merges a caller's per-bundle selectors with the slice-name label), and its SPREAD strategy may put bundle 0 on any
    host; pinning the worker id makes bundle index, JAX process id and ``TPU_WORKER_ID`` the same number.
    """
    return [{RAY_SLICE_LABEL: slice_name, RAY_WORKER_LABEL: str(i)} for i in range(plan.hosts)]


def reserve_slice(plan: SlicePlan, slice_name: str | None = None, timeout_s: float = RESERVE_TIMEOUT_S,
                  poll_s: float = 0.5, progress: Callable[[str], None] | None = None) -> Reservation:
    """Reserves one whole slice of ``plan`` (all hosts, all chips) or raises TimeoutError naming each slice tried and
    what was wrong with it (missing worker ids, busy).

    Completeness is checked first, then the reservation is pinned by slice name and bundle by worker id
    (:func:`bundle_selectors`), so it never takes worker 0 of an incomplete slice and hangs. With ``slice_name`` None,
    any complete idle slice, waiting for one until ``timeout_s``; ``progress`` hears what it waits for after
    :data:`FIRST_WAIT_NOTE_S`, then every :data:`WAIT_NOTE_EVERY_S`. ValueError when Ray refuses the shape (outside
    ``VALID_TPU_TOPOLOGY``); nothing is left held.
    """
    import ray
    from ray.util.tpu import slice_placement_group

    t0 = time.monotonic()
    deadline = t0 + timeout_s
    last: dict[str, SliceInventory] = {}
    tried: set[str] = set()
    said = 0
    while True:
        last = inventory(plan)
        candidates = [inv for name, inv in last.items()
                      if inv.complete and (slice_name is None or name == slice_name)]
        if slice_name is None:
            candidates = [inv for inv in candidates if _idle(inv)]
        for inv in candidates:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                break
            head_pg = _claim_head(plan, inv.name, min(remaining, 2.0 if slice_name is None else remaining))
            if head_pg is None:
                tried.add(inv.name)
                continue
            reservation = Reservation(inv.name, None, head_pg, 0.0)
            try:
                reservation.handle = slice_placement_group(
                    topology=plan.topology, accelerator_version=plan.ray_accelerator_type,
                    chips_per_vm=plan.chips_per_host,
                    resources_per_bundle={"CPU": 1, "TPU": plan.chips_per_host},
                    bundle_label_selector=bundle_selectors(plan, inv.name),
                    head_reservation_timeout_s=max(deadline - time.monotonic(), 0.1))
            except BaseException:
                reservation.release()
                raise
            ready, _ = ray.wait([reservation.placement_group.ready()],
                                timeout=max(deadline - time.monotonic(), 0.1))
            if ready:
                reservation.latency_s = round(time.monotonic() - t0, 3)
                return reservation
            reservation.release()
            tried.add(inv.name)
        if time.monotonic() >= deadline:
            break
        waited = time.monotonic() - t0
        if progress is not None and waited >= FIRST_WAIT_NOTE_S + said * WAIT_NOTE_EVERY_S:
            said += 1
            progress(f"waiting {waited:.0f}s of {timeout_s:g}s for {_wanted(plan, slice_name)}; slices: "
                     f"{_states(plan, slice_name, last, tried)}")
        time.sleep(poll_s)
    raise TimeoutError(_timeout_message(plan, slice_name, timeout_s, last, tried))


def _wanted(plan: SlicePlan, slice_name: str | None) -> str:
    what = f"slice {slice_name!r}" if slice_name else f"a free {plan.ray_pod_type} slice"
    return f"{what} ({plan.generation} {plan.topology}, {plan.hosts} hosts x {plan.chips_per_host} chips)"


def _states(plan: SlicePlan, slice_name: str | None, seen: dict[str, SliceInventory], tried: set[str]) -> str:
    states = []
    for name, inv in seen.items():
        if slice_name and name != slice_name:
            continue
        states.append(inv.describe() if not inv.complete else f"{name} (busy)" if name in tried or
                      slice_name is None else f"{name} (not placed)")
    if slice_name and slice_name not in seen:
        states.append(f"{slice_name} (no alive host)")
    return "; ".join(states) or f"no {plan.ray_pod_type} hosts at all"


def _timeout_message(plan: SlicePlan, slice_name: str | None, timeout_s: float,
                     seen: dict[str, SliceInventory], tried: set[str]) -> str:
    return (f"could not reserve {_wanted(plan, slice_name)} within {timeout_s:g}s; nothing was placed. Slices: "
            f"{_states(plan, slice_name, seen, tried)}")
