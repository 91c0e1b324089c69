"""raytpu CDK Terrain constructs: one construct per concern (network, cluster, node pools, ComputeClass, identities,
bucket, registry, KubeRay objects, project APIs), each ``(scope, id, props)``.

The CDK framework is imported in :mod:`raytpu.modules.parts.cdk` only; importing this package imports nothing heavy.
Escape hatch: every props class has ``overrides`` (Terraform attribute paths of the construct's main resource to raw
values, applied last with ``add_override``, unvalidated), the only way to reach provider fields the props do not model.
"""
