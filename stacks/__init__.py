"""raytpu CDK Terrain stacks: :class:`~raytpu.stacks.cluster.ClusterStack` (everything below Kubernetes) and
:class:`~raytpu.stacks.workloads.WorkloadsStack` (KubeRay objects, ComputeClasses), built from a ``raytpu.yaml`` by
:mod:`raytpu.stacks.app`. Importing this package imports nothing heavy; import the submodules."""
