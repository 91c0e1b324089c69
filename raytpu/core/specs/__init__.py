"""The config's validated specs and their rules: ``ClusterSpec`` and its parts, field rules, registries (provisioning,
kinds) and the workload rules (data, multi-slice, sampling, vLLM, team code, bucket grants). It imports the standard
library, :mod:`raytpu.core.common` and :mod:`raytpu.core.tpu` only."""
