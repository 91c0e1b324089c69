"""Sizing a model to a TPU slice before paying for it: what ``raytpu plan`` computes (the HBM need, dated prices, the
slices that fit, a plot). Not :mod:`raytpu.core.tpu.plan` (a slice's hosts and chips). Standard library but for the
plot."""
