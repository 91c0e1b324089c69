"""An emulated TPU slice on this machine: real Ray processes that Ray takes for GKE TPU hosts.

A Ray head plus one ``ray start`` per host with the GKE TPU webhook's ``TPU_*`` environment and
``{"TPU": chips_per_host}``, so Ray derives resources and labels as on GKE (docs/FACTS.md#ray-tpu-basics); chips are JAX
CPU devices. Each process leads its own process group, recorded by PID in a run directory: ``raytpu local
up|status|down`` work across invocations and :func:`raytpu.local.slice.procs.stop` never touches Ray processes it did
not start. Three packages, by concern: :mod:`raytpu.local.slice` (the slice's lifecycle), :mod:`raytpu.local.running`
(runs on it) and :mod:`raytpu.local.demos`; callers import what they use from the module that defines it."""
