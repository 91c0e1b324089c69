"""An outside CDK app: a platform team reuses raytpu's stacks and modules in its own app.

It loads its base ``platform.yaml``, adds a TPU slice of its own that the YAML does not list (a spot
v5p 2x2x4 for research), adds a bucket of its own with raytpu's Bucket module, and synthesizes.
Run it from anywhere: ``python examples/platform_app/app.py [OUTDIR]`` (default ``cdktf.out`` here), or
``npx cdktf synth`` in this directory (its cdktf.json runs this file).
"""

from __future__ import annotations

import sys
from pathlib import Path

from raytpu.config import Slice, load
from raytpu.modules.bucket import Bucket, BucketProps
from raytpu.modules.cdk import App  # cdktn.App; importing it via raytpu also quiets jsii's node banner
from raytpu.stacks.cluster import ClusterStack, ClusterStackProps
from raytpu.stacks.workloads import WorkloadsStack, WorkloadsStackProps

HERE = Path(__file__).resolve().parent

RESEARCH = Slice(name="research", generation="v5p", topology="2x2x4", zone="us-east5-a",
                 count=1, provisioning="spot")
"""The team's own slice: 16 v5p chips on 4 spot hosts."""


def build(outdir: str | None = None) -> App:
    """The platform app: raytpu's two stacks plus the team's slice and bucket."""
    config = load(HERE / "platform.yaml")
    app = App(outdir=outdir) if outdir else App()
    cluster = ClusterStack(app, "acme-cluster", ClusterStackProps(config=config, namespace="ml"))
    cluster.add_slice(RESEARCH)
    Bucket(cluster, "datasets", BucketProps(name="acme-ml-platform-datasets", project=config.project,
                                            location=config.region, labels={"team": "platform"}))
    WorkloadsStack(app, "acme-workloads", WorkloadsStackProps(cluster=cluster))
    return app


if __name__ == "__main__":
    build(sys.argv[1] if len(sys.argv) > 1 else None).synth()
