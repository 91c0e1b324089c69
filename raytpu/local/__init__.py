"""An emulated TPU slice on this machine: real Ray processes that Ray takes for GKE TPU hosts.

A Ray head plus one ``ray start`` per host with the GKE TPU webhook's ``TPU_*`` environment and
``{"TPU": chips_per_host}``, so Ray derives resources and labels as on GKE (docs/FACTS.md#ray-tpu-basics); chips are JAX
CPU devices. Each process leads its own process group, recorded by PID in a run directory: ``raytpu local
up|status|down`` work across invocations and :func:`stop` never touches Ray processes it did not start. This package
re-exports what callers use as ``local.X`` (tests patch the module that reads a name). Standard library and psutil at
import; ``ray`` inside."""

from __future__ import annotations

from raytpu.local.emulation import host_env, slice_names
from raytpu.local.jobs import RunIdTaken, free_run_id, run_workload, submit_job, workload_command
from raytpu.local.memory import PeakMemory, tree_processes
from raytpu.local.procs import kill_host, stop, tagged_processes
from raytpu.local.startup import add_host, start, start_slots
from raytpu.local.state import ENV_CLUSTER, ENV_TMP_PREFIX, TMP_PREFIX, LocalCluster, NodeProc, run_dir, temp_prefix
from raytpu.local.status_table import render_status, status

__all__ = ["ENV_CLUSTER", "ENV_TMP_PREFIX", "TMP_PREFIX", "LocalCluster", "NodeProc", "PeakMemory", "RunIdTaken",
           "add_host", "free_run_id", "host_env", "kill_host", "render_status", "run_dir", "run_workload",
           "slice_names", "start", "start_slots", "status", "stop", "submit_job", "tagged_processes", "temp_prefix",
           "tree_processes", "workload_command"]
