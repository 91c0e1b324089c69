"""Runs on the emulated slice: workloads submitted, followed, served and checked there (``--local``). Imports
:mod:`raytpu.local.slice`, never :mod:`raytpu.local.demos`."""
