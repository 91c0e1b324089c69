"""The team's own Ray drivers (run as scripts: ``python tools/reserve.py``)."""
