"""raytpu: Ray on Cloud TPU, as code. ``core`` describes slices and holds the validated specs every layer reads;
``config`` compiles ``raytpu.yaml`` into a spec; ``stacks``/``modules`` are the CDK Terrain stacks and constructs;
``workloads`` the Ray programs. Importing this package imports nothing heavy."""

__version__ = "0.1.0"
