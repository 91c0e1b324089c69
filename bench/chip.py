"""The smoke check's own measurements and judge on the chip this process sees: does a healthy chip pass its gates?

    PYTHONPATH=$PWD python bench/chip.py --generation v5e --topology 1x1 [--json]

Runs what one host of the nightly smoke job runs (``workloads/smoke/measure.py``: the psum with a known answer,
every local device's bf16 matmul and copy rates at the TPU sizes) in one process, without Ray or
``jax.distributed`` (a one-host slice needs neither), then judges it with ``workloads/smoke/judge.py`` against the
catalog, gates on. Prints each figure, the catalog's reference, the floor and the margin, and the checks' table.
On a CPU it measures at the CPU sizes and judges informationally, as the emulated slice does.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import sys
import time
from typing import Any


def measure(generation: str, topology: str) -> dict[str, Any]:
    """One host's results in ``host_check``'s shape, measured here (single process: no coordinator)."""
    import jax

    from raytpu.workloads.smoke.measure import CPU_SIZES, TPU_SIZES, device_checks

    local = jax.local_devices()
    started = time.perf_counter()
    checks = device_checks(local, local, TPU_SIZES if local[0].platform == "tpu" else CPU_SIZES, topology)
    return {"process_id": 0, "node_id": "local", "ip": "127.0.0.1", "hostname": socket.gethostname(), "peer": None,
            "env": {k: os.environ.get(k, "") for k in ("TPU_WORKER_ID", "TPU_ACCELERATOR_TYPE", "JAX_PLATFORMS")},
            "megascale_cleared": [], **checks, "measure_s": round(time.perf_counter() - started, 1),
            "generation": generation}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--generation", default="v5e")
    p.add_argument("--topology", default="1x1")
    p.add_argument("--json", action="store_true")
    args = p.parse_args(argv)

    from raytpu.core.common.report import Check, HostRow
    from raytpu.core.common.table import text_table
    from raytpu.core.tpu.plan import plan_slice
    from raytpu.workloads.smoke.judge import judge
    from raytpu.workloads.smoke.options import SmokeOptions

    plan = plan_slice(args.generation, args.topology)
    result = measure(args.generation, args.topology)
    checks: list[Check] = []
    hosts: dict[int, HostRow] = {0: {"worker_id": 0, "node_id": "local", "ip": "127.0.0.1",
                                      "devices": result["devices"], "ok": True, "problems": []}}
    perf = judge(plan, SmokeOptions(perf_thresholds="on" if result["platform"] == "tpu" else "auto"),
                 {0: result}, checks, hosts)
    healthy = all(c["ok"] for c in checks)
    if args.json:
        json.dump({"healthy": healthy, "result": result, "checks": checks, "perf": perf, "hosts": hosts},
                  sys.stdout, indent=2, default=str)
        print()
    else:
        print(f"{result['device_kind']} x{result['devices']} ({result['platform']}), measured in "
              f"{result['measure_s']} s at {result['sizes']}")
        rows = [["metric", "device", "value", "catalog", "ratio", "floor", "margin"]]
        rows += [[r["metric"], str(r["device"]), f"{r['value']} {r['unit']}", str(r["reference"]), str(r["ratio"]),
                  str(r["min_ratio"]), f"{r['ratio'] / r['min_ratio']:.2f}x" if r["ratio"] and r["min_ratio"]
                  else "-"] for r in perf]
        print("\n".join(text_table(rows)))
        print("\n".join(text_table([["check", "ok", "detail"]] +
                                   [[c["name"], "yes" if c["ok"] else "NO", str(c.get("detail", ""))]
                                    for c in checks])))
        print("healthy" if healthy else "UNHEALTHY: " + "; ".join(p for h in hosts.values() for p in h["problems"]))
    return 0 if healthy else 1


if __name__ == "__main__":
    sys.exit(main())
