# The face's names for type checkers; raytpu/__init__.py loads them lazily (tests/test_face.py checks both agree).
from raytpu.config import load as load
from raytpu.core.specs.kinds import kind as kind
from raytpu.core.specs.slices.slice_spec import SliceSpec as SliceSpec
from raytpu.core.specs.workload_spec import WorkloadSpec as WorkloadSpec
from raytpu.images.record import load_refs as load_refs
from raytpu.modules.bucket import Bucket as Bucket
from raytpu.modules.bucket import BucketProps as BucketProps
from raytpu.modules.parts.cdk import App as App
from raytpu.stacks.cluster import ClusterStack as ClusterStack
from raytpu.stacks.cluster import ClusterStackProps as ClusterStackProps
from raytpu.stacks.workloads import WorkloadsStack as WorkloadsStack
from raytpu.stacks.workloads import WorkloadsStackProps as WorkloadsStackProps

__version__: str
__all__ = [
           "App",
           "Bucket",
           "BucketProps",
           "ClusterStack",
           "ClusterStackProps",
           "SliceSpec",
           "WorkloadSpec",
           "WorkloadsStack",
           "WorkloadsStackProps",
           "__version__",
           "kind",
           "load",
           "load_refs",
]
