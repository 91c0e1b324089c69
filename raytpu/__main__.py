"""``python -m raytpu`` runs the CLI."""

import sys

from raytpu.cli import main

sys.exit(main())
