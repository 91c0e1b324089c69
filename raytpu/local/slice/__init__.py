"""The emulated slice's lifecycle: what a config makes of it, its hosts' environment, start, state, status, preemption
and teardown. Imports neither :mod:`raytpu.local.running` nor :mod:`raytpu.local.demos`."""
