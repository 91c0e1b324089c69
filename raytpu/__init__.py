"""raytpu: Ray on Cloud TPU, as code.

``raytpu.core.catalog`` and ``raytpu.core.plan`` describe TPU slices; ``raytpu.core.spec`` holds the validated specs
every layer reads (``raytpu.core.provisioning`` and ``raytpu.core.kinds`` are its registries); ``raytpu.config``
compiles ``raytpu.yaml`` into a spec;
``raytpu.stacks``/``raytpu.modules`` are the CDK Terrain stacks and constructs; ``raytpu.workloads`` are
the Ray programs. Importing this package imports nothing heavy.
"""

__version__ = "0.1.0"
