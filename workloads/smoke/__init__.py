"""Smoke check of TPU slices: reserve each whole slice, then prove its hosts, devices and interconnect work.

Runs unchanged as a GKE RayJob entrypoint and on the local emulated slice::

    RAYTPU_WORKLOAD='<WorkloadSpec JSON>' python -m raytpu.workloads.smoke [--slice-name NAME]

The slice's shape and how many slices to expect come from the workload spec (``RAYTPU_WORKLOAD``, set by
the RayJob's runtime env or ``raytpu local``); the job never re-plans its slice from flags.
For every slice of the plan's pod type it finds (at least the spec's slice count), it prints one line
``RAYTPU_SMOKE_VERDICT {json}`` (format: :mod:`raytpu.core.common.report`) and exits 1 when any slice is unhealthy.
Every failure inside the check (a refused reservation, a host whose check raises or hangs, a bug) ends in such a line,
its check naming the cause, never in a traceback with no verdict.

Checks, per host and per slice:

- ``hosts_present``: every worker id 0..hosts-1 is alive (a missing host names its worker id); a host that joins
  late is waited for until the check's time limit, not failed at the first look;
- ``labels``: each host's ``ray.io/tpu-topology``, ``ray.io/tpu-pod-type`` and ``ray.io/accelerator-type`` (Ray
  derives them from the ``TPU_TOPOLOGY``/``TPU_ACCELERATOR_TYPE`` GKE sets: Ray 2.60
  ``ray._private.accelerators.tpu.TPUAcceleratorManager.get_current_node_tpu_topology`` and
  ``.get_current_node_tpu_pod_type``) and its ``TPU`` resource match the plan. Slice name and worker id are not
  compared with the ``TPU_*`` env: Ray's labels are copies of that env (``.get_current_node_tpu_name``,
  ``.get_current_node_tpu_worker_id``), so agreeing proves nothing;
- ``reservation``: the whole slice is reserved with ``ray.util.tpu.slice_placement_group`` within
  ``--reserve-timeout-s`` (checked complete first, then pinned to the slice by its ``ray.io/tpu-slice-name``
  label, and bundle i to the host labelled ``ray.io/tpu-worker-id=i``, so JAX process i is TPU worker i);
- ``host_checks``: each host's check returned in time (a host that raised or hung is named; the others stop);
- ``devices_per_host`` / ``devices_total``: ``jax.local_devices()`` on each host, ``jax.device_count()``;
- ``psum``: a cross-host all-reduce (multi-process JAX) of known answer ``n(n+1)/2``;
- ``device_kind``: the hardware libtpu reports (``jax.Device.device_kind``) is the plan's generation;
- ``worker_hostnames`` (multi-host, GKE): each pod's hostname is its ``TPU_WORKER_HOSTNAMES`` entry and its
  neighbour's entry resolves to the neighbour's Ray node IP: the names the KubeRay TPU webhook gives the pods
  (ai-on-gke kuberay-tpu-webhook 1.2.4: ``mutatePod`` sets the hostname, ``genDNSHostnames`` and
  ``injectHostnames`` the names and the subdomain) and the headless Service behind them, which libtpu dials;
- ``matmul_tflops_ratio`` / ``matmul_tflops_peer_ratio``: bf16 TFLOP/s of every device (a chain of matmuls of
  random data in one compiled loop), the slowest against the catalog's per-device peak and against the slice's
  median; ``hbm_bandwidth_ratio`` / ``hbm_bandwidth_peer_ratio``: the same for a large streaming copy against the
  catalog's HBM GB/s; ``hbm_ratio``: memory of every device against the catalog's HBM;
- ``allreduce_bandwidth_gbps``: bus bandwidth per chip of an all-reduce of hundreds of MiB per device (timed
  inside one compiled loop) against the bus bandwidth the slice's topology should reach
  (:func:`raytpu.core.tpu.catalog.expected_busbw`: the links' one-way rate, the mesh axes and their wraparound);
  ``allreduce_axis_<x|y|z>_gbps``: the same all-reduce
  over each mesh axis alone (the devices in a mesh shaped by their physical coordinates, a ``psum`` over one axis
  name), each against that axis's expected figure, so a weak axis is named; ``allreduce_latency_us``: a 4-byte
  all-reduce.

With ``--dcn-slices N`` (a multi-slice run spans N slices), the first N slices also get a cross-slice all-reduce
over DCN, one process per host with the ``MEGASCALE_*`` env it would see, reported in each verdict's ``dcn``
section apart from the ICI rows, a slice that cannot reach the others named (:mod:`.dcn`).

Every device's figures are also in the verdict's ``perf`` rows (:mod:`raytpu.core.common.report` renders them), each
with its threshold and whether it gates here. Thresholds (``--perf-thresholds``): ``auto`` (default) applies the catalog
floors (:class:`raytpu.core.tpu.catalog.SmokeFloors`) only on real TPU outside an emulated slice (``RAYTPU_EMULATED=1``,
which ``raytpu local`` sets on every host); on an emulated slice (JAX CPU devices) they are reported and marked
informational. The peer ratios gate everywhere: a device at less than ``--min-peer-ratio`` of its slice's median
is a fault on any hardware. Every wait is bounded: ``--reserve-timeout-s``, ``--check-timeout-s`` (default
:func:`check_limit_s`, which grows with the slice's hosts).

Fault injection (tests and drills; named in the verdict's ``injected`` key when used), read by the driver:
``RAYTPU_SMOKE_INJECT_*`` (:mod:`.faults`).

Modules: :mod:`.cli` (flags, the run over every slice, exit code), :mod:`.options` (the typed options),
:mod:`.driver` (one slice: labels, reservation, host tasks within the limit), :mod:`.measure` (the host task: JAX
measurements), :mod:`.judge` (results against thresholds), :mod:`.verdict` (checks and the verdict,
:class:`raytpu.core.common.report.Verdict`), :mod:`.faults`; slice inventory and reservation are
:mod:`raytpu.workloads.slices`.
"""
