"""Smoke check of TPU slices: reserve each whole slice, then prove its hosts, devices and interconnect work.

``RAYTPU_WORKLOAD='<WorkloadSpec JSON>' python -m raytpu.workloads.smoke [--slice-name NAME]`` runs as a GKE RayJob
entrypoint and on the emulated slice; it prints one ``RAYTPU_SMOKE_VERDICT {json}`` per slice (any failure ends in
one, naming its check) and exits 1 when any slice is unhealthy. Catalog floors gate only on real TPU; peer ratios
gate everywhere; every wait is bounded. The checks and modules: docs/FACTS.md#measurements-smoke-checks.
"""
