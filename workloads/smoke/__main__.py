"""``python -m raytpu.workloads.smoke``: the KubeRay RayJob's entrypoint and ``raytpu local smoke``'s driver."""

import sys

from raytpu.workloads.smoke.cli import main

if __name__ == "__main__":
    sys.exit(main())
