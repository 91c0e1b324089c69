"""The TPU catalog and slice planning: generations, machine types and topologies (``catalog``), ICI figures
(``ici``), the built-in model shapes (``models``) and the one planner of a slice (``plan``).
It imports the standard library and :mod:`raytpu.core.common` only."""
