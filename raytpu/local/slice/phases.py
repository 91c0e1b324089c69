"""The timeline phases an emulated slice lacks or imitates, said in the timeline (never faked). Standard library
only."""

from __future__ import annotations

from raytpu.core.common import timeline


def emulated_phases(recorder: timeline.Recorder, hosts_started_wall: float | None = None) -> None:
    """No Kubernetes scheduler and no TPU nodes; the webhook's variables set by ``raytpu local`` on every host it
    launches (at ``hosts_started_wall``, wall clock; default now)."""
    recorder.absent("scheduled", "no Kubernetes scheduler on the emulated slice: its hosts are local Ray nodes")
    recorder.absent("nodes_ready", "no TPU nodes on the emulated slice (JAX CPU devices stand in for chips)")
    recorder.take([timeline.stamp(
        "webhook_env", "TPU_WORKER_ID, TPU_WORKER_HOSTNAMES, TPU_NAME given to each emulated host at launch by "
        "`raytpu local` (raytpu.local.slice.emulation.host_env), as the GKE TPU webhook gives them at pod admission",
        timeline.EMULATED, wall=hosts_started_wall)])
