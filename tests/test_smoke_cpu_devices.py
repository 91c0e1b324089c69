"""The smoke check's real measuring code (workloads/smoke/measure.py) on JAX CPU devices, each probe in a fresh
process (the device count is fixed when JAX starts): the heavy tier."""

from __future__ import annotations

import pytest

from raytpu.workloads.smoke.faults import ENV_INJECT_SLOW_AXIS

pytestmark = pytest.mark.heavy

AXIS_PROBE = """
import json, os
import jax
from raytpu.workloads.smoke import faults, measure
given = faults.Faults.from_env().for_host(0)
devices = jax.devices()
print(json.dumps(measure.axis_allreduces(devices, devices, "2x4", measure.CPU_SIZES, given.get("slow_axis"))))
"""


def test_the_per_axis_all_reduces_run_on_cpu_devices_and_a_slowed_axis_shows() -> None:
    """The real per-axis code on 8 JAX CPU devices shaped 2x4 (one process, a few MiB), with axis y slowed by the
    program's own fault injection (``RAYTPU_SMOKE_INJECT_SLOW_AXIS``)."""
    import json
    import os
    import subprocess
    import sys

    env = {**os.environ, "JAX_PLATFORMS": "cpu", "XLA_FLAGS": "--xla_force_host_platform_device_count=8",
           ENV_INJECT_SLOW_AXIS: "y:50"}
    out = subprocess.run([sys.executable, "-c", AXIS_PROBE], env=env, capture_output=True, text=True, timeout=120,
                         check=True)
    axes = json.loads(out.stdout.strip().splitlines()[-1])
    assert [(a["axis"], a["size"]) for a in axes] == [("x", 2), ("y", 4)]
    x, y = (a["gbps"] for a in axes)
    assert x > 0 and 0 < y < x / 5, axes


PER_DEVICE_PROBE = """
import json
import jax
from raytpu.workloads.support.compile_watch import CompileWatch
from raytpu.workloads.smoke import measure
with CompileWatch() as watch:
    tflops, gbps = measure._per_device(jax.local_devices(), measure.CPU_SIZES, lambda: None, {2: 4.0}, (0, 1))
print(json.dumps({"tflops": tflops, "gbps": gbps, "compiles": watch.summary()["compiles"]}))
"""


def test_every_local_device_is_timed_alone_by_two_programs_for_the_host() -> None:
    """The real per-device code on 4 JAX CPU devices (one process): two compiles for the host, not two per device (a
    host past the first on a TPU slice misses the compile cache: docs/FACTS.md#compile-cache-jax), and device 2,
    slowed x4 by the program's fault injection, is the one that shows it in both rates.
    Source: JAX 0.10.2 ``jax._src.cache_key._hash_serialized_compile_options`` (keeps the device assignment except on
    GPU), ``jax._src.compiler._cache_write`` (process 0 writes only)."""
    import json
    import os
    import subprocess
    import sys

    env = {**os.environ, "JAX_PLATFORMS": "cpu", "XLA_FLAGS": "--xla_force_host_platform_device_count=4"}
    out = subprocess.run([sys.executable, "-c", PER_DEVICE_PROBE], env=env, capture_output=True, text=True,
                         timeout=120, check=True)
    measured = json.loads(out.stdout.strip().splitlines()[-1])
    assert measured["compiles"] == 2
    for rates in (measured["tflops"], measured["gbps"]):
        others = [r for i, r in enumerate(rates) if i != 2]
        assert len(rates) == 4 and min(others) > 0 and rates[2] < min(others) / 2, rates
