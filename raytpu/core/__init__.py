"""The core: what every layer reads and what ships to pods (the jobs' core zip, :mod:`raytpu.core.core_zip`).

Four rooms, each importing only those before it: ``common`` (errors, names, reports, table, timeline), ``tpu``
(catalog, planner, models), ``specs`` (the validated specs, their rules and registries) and ``manifests`` (the KubeRay
objects and what they put on pods); beside them ``core_zip``, which packs this folder. Standard library only: no
pydantic, CDK, Ray or JAX (``tests/test_boundaries.py`` reads this folder).
"""
