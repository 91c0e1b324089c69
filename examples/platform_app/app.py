"""An outside CDK app: a platform team reuses raytpu's stacks and modules in its own app.

It loads its base ``platform.yaml``, puts Ray objects in its own namespace, adds a TPU slice of its own that
the YAML does not list (a spot v5p 2x2x4 for research) and a serving workload on it, adds a bucket of its own
with raytpu's Bucket module, and synthesizes. Run it from anywhere: ``python examples/platform_app/app.py
[OUTDIR]`` (default ``cdktf.out`` here), or ``npx cdktf synth`` in this directory (its cdktf.json runs this file).
"""

from __future__ import annotations

import sys
from dataclasses import replace
from pathlib import Path

from raytpu import (  # App is cdktn.App; loading it through raytpu also quiets jsii's node banner
    App,
    Bucket,
    BucketProps,
    ClusterStack,
    ClusterStackProps,
    SliceSpec,
    WorkloadSpec,
    WorkloadsStack,
    WorkloadsStackProps,
    kind,
    load,
    load_refs,
)

HERE = Path(__file__).resolve().parent

RESEARCH = SliceSpec.create(name="research", generation="v5p", topology="2x2x4", zone="us-east5-a",
                            provisioning="spot")
"""The team's own slice: 16 v5p chips on 4 spot hosts."""


def build(outdir: str | None = None) -> App:
    """The platform app: raytpu's two stacks plus the team's slice, a RayService on it, and a bucket. (Its
    one-shot jobs are `raytpu submit`'s, not Terraform's.)"""
    spec = replace(load(HERE / "platform.yaml"), namespace="ml")
    app = App(outdir=outdir) if outdir else App()
    cluster = ClusterStack(app, "acme-cluster", ClusterStackProps(spec=spec))
    cluster.add_slice(RESEARCH)
    Bucket(cluster, "datasets", BucketProps(name="acme-ml-platform-datasets", project=spec.project,
                                            location=spec.region, labels={"team": "platform"}))
    workloads = WorkloadsStack(app, "acme-workloads",
                               WorkloadsStackProps(cluster=cluster, images=load_refs(HERE / "platform.yaml")))
    workloads.add_workload(WorkloadSpec(name="research-serve", kind=kind("serve"), slice=RESEARCH))
    return app


if __name__ == "__main__":
    build(sys.argv[1] if len(sys.argv) > 1 else None).synth()
