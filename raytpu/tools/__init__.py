"""Developer tools run as modules (``python -m raytpu.tools.<name>``), not commands of the ``raytpu`` CLI."""
