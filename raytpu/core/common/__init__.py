"""What every room of the core shares: errors (:class:`InvalidInput` and its wording), the names that cross layers,
the verdict and report types, the text table and the run timeline.

It imports the standard library and ``raytpu.__version__`` only, so any module of the kit may import it.
"""
