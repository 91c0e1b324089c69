"""The CDK app: both stacks of one ``raytpu.yaml``. ``cdktf synth`` runs :func:`main`; ``raytpu synth`` calls
:func:`synth`. Both produce ``<outdir>/stacks/<cluster>-cluster`` and ``<outdir>/stacks/<cluster>-workloads``.

``main`` reads :func:`raytpu.config.default_path` (``$RAYTPU_CONFIG``, else ``raytpu.yaml``).
"""

from __future__ import annotations

import sys
from pathlib import Path

from raytpu.cli import report
from raytpu.config import Config, load
from raytpu.errors import RaytpuError
from raytpu.modules.cdk import App
from raytpu.stacks.cluster import ClusterStack, ClusterStackProps
from raytpu.stacks.workloads import WorkloadsStack, WorkloadsStackProps


def stack_ids(config: Config) -> tuple[str, str]:
    """Ids of the cluster and workloads stacks (``<cluster>-cluster``, ``<cluster>-workloads``)."""
    return f"{config.cluster.name}-cluster", f"{config.cluster.name}-workloads"


def build(config: Config, outdir: str | Path | None = None) -> tuple[App, ClusterStack, WorkloadsStack]:
    """An App holding both stacks of ``config`` (not yet synthesized)."""
    app = App(outdir=str(outdir)) if outdir is not None else App()
    cluster_id, workloads_id = stack_ids(config)
    cluster = ClusterStack(app, cluster_id, ClusterStackProps(config=config))
    workloads = WorkloadsStack(app, workloads_id, WorkloadsStackProps(cluster=cluster))
    return app, cluster, workloads


def synth(config: Config, outdir: str | Path) -> list[Path]:
    """Synthesizes both stacks into ``outdir``; returns the ``cdk.tf.json`` paths written."""
    app, *_ = build(config, outdir)
    app.synth()
    return [Path(outdir) / "stacks" / sid / "cdk.tf.json" for sid in stack_ids(config)]


def main() -> int:
    """Entry point of ``cdktf.json``'s app: synthesizes into the CLI's outdir (``CDKTF_OUTDIR``)."""
    try:
        config = load()
        app, *_ = build(config)
        app.synth()
    except RaytpuError as exc:
        report(exc)
        return exc.exit_code
    return 0


if __name__ == "__main__":
    sys.exit(main())
