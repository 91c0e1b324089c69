"""raytpu: Ray on Cloud TPU, as code.

``raytpu.catalog`` and ``raytpu.plan`` describe TPU slices; ``raytpu.config`` reads ``raytpu.yaml``;
``raytpu.stacks``/``raytpu.modules`` are the CDK Terrain stacks and constructs; ``raytpu.workloads`` are
the Ray programs. Importing this package imports nothing heavy.
"""

__version__ = "0.1.0"
