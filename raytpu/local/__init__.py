"""An emulated TPU slice on the local machine: real Ray processes that look to Ray like GKE TPU hosts.

One Ray head (no TPU) plus one ``ray start --block`` process per emulated host. Each host process
gets the environment the GKE TPU webhook injects (``TPU_NAME``, ``TPU_WORKER_ID``,
``TPU_WORKER_HOSTNAMES``, ``TPU_ACCELERATOR_TYPE``, ``TPU_TOPOLOGY``) and ``{"TPU": chips_per_host}``;
Ray's own TPU accelerator manager then derives, exactly as on GKE, the resources
``accelerator_type:TPU-V6E``, ``<TPU_NAME>`` and ``TPU-v6e-16-head`` (worker 0) and the labels
``ray.io/accelerator-type``, ``ray.io/tpu-slice-name``, ``ray.io/tpu-worker-id``,
``ray.io/tpu-topology`` and ``ray.io/tpu-pod-type``. The "chips" are JAX CPU devices:
``JAX_PLATFORMS=cpu`` and ``JAX_NUM_CPU_DEVICES=<chips_per_host>`` in each host's environment.

Every process is its own process group (``ray start`` makes itself a group leader), recorded by PID
in a run directory (``$RAYTPU_LOCAL_DIR``, default ``.raytpu/local`` under the working directory),
so ``raytpu local up|status|down`` work across invocations and :func:`stop` always cleans up: it
signals each recorded group, then any leftover process whose command line names this cluster's
private Ray temp dir. It never touches Ray processes it did not start.

The modules, one job each:

- :mod:`~raytpu.local.emulation`: the webhook's ``TPU_*`` environment of a host, the slice names;
- :mod:`~raytpu.local.state`: the run directory and its state file (:class:`LocalCluster`);
- :mod:`~raytpu.local.procs`: finding the cluster's processes, :func:`stop`, :func:`kill_host`;
- :mod:`~raytpu.local.launch`: one ``ray start`` (its arguments, environment, ports, log);
- :mod:`~raytpu.local.diagnose`: why a ``ray start`` failed, from its logs, and whether to retry;
- :mod:`~raytpu.local.startup`: :func:`start` and :func:`add_host`, a few hosts at a time within a deadline;
- :mod:`~raytpu.local.connection`: this process's Ray connection, with the cluster's token;
- :mod:`~raytpu.local.status_table`: ``raytpu local status``;
- :mod:`~raytpu.local.jobs`: workloads as drivers or through Ray's Job Submission API;
- :mod:`~raytpu.local.memory`: the memory a cluster's processes hold;
- :mod:`~raytpu.local.from_config`: what a config's slices and workloads become here (slice, DCN span, specs);
- :mod:`~raytpu.local.phases`: the timeline phases the emulated slice lacks or imitates;
- :mod:`~raytpu.local.deploy`: a serving workload deployed here (vLLM's CPU build);
- :mod:`~raytpu.local.submission`: ``raytpu submit --local``, a job workload run and followed here;
- :mod:`~raytpu.local.preempt`: one host preempted as GKE preempts one (notice, kill, replacement);
- :mod:`~raytpu.local.drill`: a training run with a host preempted mid-run, and what it cost.

This package re-exports what callers use as ``local.X``; the rest lives in its module. A test that replaces a
function replaces it in the module that reads it (``raytpu.local.launch.free_port``), not here.

Standard library and psutil at import; ``ray`` is imported inside the functions that talk to the cluster.
"""

from __future__ import annotations

from raytpu.local.emulation import host_env, slice_names
from raytpu.local.jobs import run_workload, submit_job, workload_command
from raytpu.local.memory import PeakMemory, tree_processes
from raytpu.local.procs import kill_host, stop, tagged_processes
from raytpu.local.startup import add_host, start, start_slots
from raytpu.local.state import ENV_CLUSTER, ENV_TMP_PREFIX, TMP_PREFIX, LocalCluster, NodeProc, run_dir, temp_prefix
from raytpu.local.status_table import render_status, status

__all__ = ["ENV_CLUSTER", "ENV_TMP_PREFIX", "TMP_PREFIX", "LocalCluster", "NodeProc", "PeakMemory", "add_host",
           "host_env", "kill_host", "render_status", "run_dir", "run_workload", "slice_names", "start", "start_slots",
           "status", "stop", "submit_job", "tagged_processes", "temp_prefix", "tree_processes", "workload_command"]
