"""The app ``cdktf.json`` runs (``cdktf synth``/``deploy``): the one place a config meets the stacks. Compiles
``$RAYTPU_CONFIG`` (else ``raytpu.yaml``), builds both stacks and synthesizes into ``CDKTF_OUTDIR``, marked as a synth
output (:mod:`raytpu.stacks.synth_out`) that a later ``raytpu synth --out`` may replace."""

from __future__ import annotations

import sys

from raytpu.core.common.errors import RaytpuError, report


def main() -> int:
    """Synthesizes both stacks of the default config; exit 2 with the config's problems when it is invalid."""
    from raytpu.config import default_path, load
    from raytpu.images.record import load_refs
    from raytpu.stacks.app import build
    from raytpu.stacks.synth_out import write_marker

    try:
        app, *_ = build(load(), load_refs(default_path()))
        app.synth()
        write_marker(app.outdir)
    except RaytpuError as exc:
        report(exc)
        return exc.exit_code
    return 0


if __name__ == "__main__":
    sys.exit(main())
