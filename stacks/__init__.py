"""raytpu CDK Terrain stacks: :class:`~raytpu.stacks.cluster.ClusterStack` (network, GKE, TPU pools,
identity, bucket) and :class:`~raytpu.stacks.workloads.WorkloadsStack` (KubeRay objects and Autopilot
ComputeClasses, applied through a kubernetes provider built from the cluster stack's outputs).
:mod:`raytpu.stacks.app` builds both from a ``raytpu.yaml`` (what ``cdktf synth`` and ``raytpu synth`` run).

Importing this package imports nothing heavy; import the submodules.
"""
