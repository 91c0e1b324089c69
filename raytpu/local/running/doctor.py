"""``raytpu doctor --local``: the emulated slice checked as the cluster is (:mod:`raytpu.cluster.doctor`): the Ray
version against the kit's pin, each slice's hosts alive against its plan, their ``ray.io/*`` labels and TPU
resources as Ray's TPU detection would give them on GKE. Read-only: it asks the GCS, starts and stops nothing."""

from __future__ import annotations

from raytpu.core.common.checkup import Check, fail, ok
from raytpu.core.tpu.catalog import RAY_VERSION
from raytpu.local.slice.state import LocalCluster
from raytpu.local.slice.status_table import HostStatus, status


def diagnose(cluster: LocalCluster) -> list[Check]:
    """The rows: Ray version, then per slice its hosts, labels and resources. The GCS is asked first: it gives this
    process the cluster's token before Ray loads (importing Ray earlier leaves it without, and every call fails)."""
    hosts = status(cluster)
    import ray

    rows = [ok("ray version", ray.__version__, RAY_VERSION) if ray.__version__ == RAY_VERSION else
            fail("ray version", ray.__version__, RAY_VERSION, f"install the kit's lock (ray=={RAY_VERSION}): "
                 "make .venv/.installed")]
    plan = cluster.slice_plan
    for name in cluster.slices:
        mine = [h for h in hosts if h.slice_name == name]
        rows.append(_alive(name, mine, plan.hosts))
        rows.append(_labels(name, mine))
        rows.append(_resources(name, mine, plan.chips_per_host, plan.head_resource))
    return rows


def _alive(name: str, hosts: list[HostStatus], planned: int) -> Check:
    alive = [h for h in hosts if h.alive]
    expected = f"{planned} hosts alive"
    if len(alive) != planned:
        down = [str(h.worker_id) for h in hosts if not h.alive]
        return fail(f"slice {name} hosts", f"{len(alive)} of {planned} alive" + (f" (down: {', '.join(down)})"
                    if down else ""), expected, "raytpu local down, then raytpu local up")
    return ok(f"slice {name} hosts", f"{len(alive)} alive", expected)


def _labels(name: str, hosts: list[HostStatus]) -> Check:
    wrong = [str(h.worker_id) for h in hosts if h.alive and not h.labels_ok]
    expected = "ray.io/* TPU labels as Ray's TPU detection sets them"
    if wrong:
        return fail(f"slice {name} labels", f"hosts {', '.join(wrong)} differ", expected,
                    "raytpu local down, then raytpu local up (the labels are set at start)")
    return ok(f"slice {name} labels", "as planned", expected)


def _resources(name: str, hosts: list[HostStatus], chips: int, head: str) -> Check:
    expected = f"TPU={chips} per host, {head}=1 on host 0"
    problems = []
    for host in (h for h in hosts if h.alive):
        resources = dict(item.split("=", 1) for item in host.resources.split(", ") if "=" in item)
        if float(resources.get("TPU", 0)) != chips:
            problems.append(f"host {host.worker_id}: TPU={resources.get('TPU', 0)}")
        if (host.worker_id == 0) != (head in resources):
            problems.append(f"host {host.worker_id}: {head} {'missing' if host.worker_id == 0 else 'extra'}")
    if problems:
        return fail(f"slice {name} resources", "; ".join(problems), expected,
                    "raytpu local down, then raytpu local up")
    return ok(f"slice {name} resources", f"TPU={chips} per host, {head} on host 0", expected)
