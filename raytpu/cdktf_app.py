"""The app ``cdktf.json`` runs (``cdktf synth``/``deploy``): compile the config, build both stacks, synthesize.

The config is ``$RAYTPU_CONFIG``, else ``raytpu.yaml`` (:func:`raytpu.config.default_path`); the output
directory is the one the CLI names (``CDKTF_OUTDIR``), marked as a synth output (``.raytpu-synth``: a later
``raytpu synth --out`` may replace it, :mod:`raytpu.synth_out`). This is the one place a config meets the stacks,
which themselves only read specs.
"""

from __future__ import annotations

import sys

from raytpu.core.errors import RaytpuError, report


def main() -> int:
    """Synthesizes both stacks of the default config; exit 2 with the config's problems when it is invalid."""
    from raytpu.config import default_path, load
    from raytpu.images.record import load_refs
    from raytpu.stacks.app import build
    from raytpu.synth_out import write_marker

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
