"""The KubeRay and Kubernetes objects the kit emits and what they put on pods (RayCluster/RayJob/RayService, serving,
policies, ports, security, smoke runs, preemption). It imports the stdlib and the other rooms of :mod:`raytpu.core`."""
