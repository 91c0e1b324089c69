"""Sizing a model to a TPU slice before paying for it: what ``raytpu plan`` computes.

- :mod:`raytpu.core.models`: the built-in table of public model configs and the Hugging Face ``config.json`` reader.
- :mod:`raytpu.sizing.memory`: the HBM a model needs to serve or train, with every assumption stated.
- :mod:`raytpu.sizing.prices`: the dated, cited per-chip-hour price table and the ``--prices`` file reader.
- :mod:`raytpu.sizing.candidates`: every catalog slice that fits, whether Ray reserves it and the kit serves it.
- :mod:`raytpu.sizing.plot`: cost against HBM headroom, the cheapest fit marked (matplotlib, imported lazily).

Not :mod:`raytpu.core.plan`, which is a slice's hosts and chips (``SlicePlan``). Standard library only, but for the
plot.
"""
