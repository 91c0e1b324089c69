"""The kit's demos on emulated slices: ``raytpu demo`` (``--serve``, ``--data``, ``--preempt``) and the preemption
drill, built on :mod:`raytpu.local.slice` and :mod:`raytpu.local.running`."""
