"""The CDK app: both stacks of one ClusterSpec (``<outdir>/stacks/<cluster>-cluster`` and ``-workloads``), built by
:func:`build` (``cdktf synth``, through :mod:`raytpu.cdktf_app`) or :func:`synth` (``raytpu synth``)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from raytpu.core.specs.spec import ClusterSpec
from raytpu.modules.parts.cdk import App
from raytpu.stacks.cluster import ClusterStack, ClusterStackProps
from raytpu.stacks.workloads import WorkloadsStack, WorkloadsStackProps


def stack_ids(spec: ClusterSpec) -> tuple[str, str]:
    """Ids of the cluster and workloads stacks (``<cluster>-cluster``, ``<cluster>-workloads``)."""
    return f"{spec.cluster.name}-cluster", f"{spec.cluster.name}-workloads"


def build(spec: ClusterSpec, images: Mapping[str, str],
          outdir: str | Path | None = None) -> tuple[App, ClusterStack, WorkloadsStack]:
    """An App holding both stacks of ``spec`` (not yet synthesized); ``images``: the kit's built images
    (:func:`raytpu.images.record.load_refs`)."""
    app = App(outdir=str(outdir)) if outdir is not None else App()
    cluster_id, workloads_id = stack_ids(spec)
    cluster = ClusterStack(app, cluster_id, ClusterStackProps(spec=spec))
    workloads = WorkloadsStack(app, workloads_id, WorkloadsStackProps(cluster=cluster, images=images))
    return app, cluster, workloads


def synth(spec: ClusterSpec, images: Mapping[str, str], outdir: str | Path) -> list[Path]:
    """Synthesizes both stacks into ``outdir``; returns the ``cdk.tf.json`` paths written."""
    app, *_ = build(spec, images, outdir)
    app.synth()
    return [Path(outdir) / "stacks" / sid / "cdk.tf.json" for sid in stack_ids(spec)]
