"""raytpu CDK Terrain constructs: one construct per concern, each ``(scope, id, props)``.

- :class:`~raytpu.modules.network.Network`: VPC, subnet with pod/service ranges, Cloud Router + NAT, flow logs.
- :class:`~raytpu.modules.gke_cluster.GkeCluster`: Standard or Autopilot GKE with the Ray Operator add-on.
- :class:`~raytpu.modules.tpu_slice_pool.TpuSlicePool`: one node pool per TPU slice, from a SlicePlan.
- :class:`~raytpu.modules.head_pool.HeadPool`: the small CPU pool Ray head pods run on.
- :class:`~raytpu.modules.compute_class.ComputeClass`: Autopilot TPU priorities (a ``kubernetes_manifest``).
- :class:`~raytpu.modules.workload_identity.WorkloadIdentity` / ``KubernetesServiceAccount`` /
  ``NodeServiceAccount``: Google and Kubernetes identities, least-privilege bucket access.
- :class:`~raytpu.modules.bucket.Bucket`: checkpoints and compile caches.
- :class:`~raytpu.modules.ray_workload.RayWorkload`: a KubeRay object applied with ``kubernetes_manifest``.
- :class:`~raytpu.modules.project_services.ProjectServices` / ``RequireApis``: the project's APIs, each resource
  waiting for its own.

The CDK framework is imported in exactly one place, :mod:`raytpu.modules.cdk`. Importing this package
imports nothing heavy; import the submodules.

Escape hatch: every props class has ``overrides``, a mapping of Terraform attribute paths of the
construct's main resource to raw values, applied last with ``add_override`` (e.g.
``{"node_config.disk_type": "hyperdisk-balanced"}``). It is the only way to reach provider fields
the props do not model; what it sets is not validated.
"""
