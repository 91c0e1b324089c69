"""The kit's container images: their definitions (:mod:`raytpu.images.definitions`), the digests a build recorded
(:mod:`raytpu.images.record`) and the Cloud Build client that builds them (:mod:`raytpu.images.build`)."""
