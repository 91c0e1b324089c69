"""The KubeRay and Kubernetes objects the kit emits and what they put on pods: the RayCluster, RayJob and RayService
builders, serving and engine pods, network policies, Ray ports, pod security, smoke runs, preemption handling, and
the table of kinds and their API paths.

It imports the standard library and the other rooms of :mod:`raytpu.core` (it builds from specs).
"""
