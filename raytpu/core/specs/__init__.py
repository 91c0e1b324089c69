"""The config's validated specs and their rules: ``ClusterSpec`` and its parts, the field rules, the registries of
provisioning modes and workload kinds, and the rules a workload's fields follow (data, multi-slice, sampling, vLLM
serving, team code, bucket grants).

It imports the standard library, :mod:`raytpu.core.common` and :mod:`raytpu.core.tpu` only.
"""
