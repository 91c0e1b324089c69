"""The core: what every layer reads and what ships to pods (the jobs' core zip, :mod:`raytpu.core.core_zip`).

The TPU catalog and slice plans, the validated specs and their registries (provisioning modes, workload kinds),
the names every layer shares, the manifest builders and the verdict types. Standard library only: no pydantic, CDK,
Ray or JAX (``tests/test_boundaries.py`` reads this folder).
"""
