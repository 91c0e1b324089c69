"""Benchmark of ``raytpu demo``'s memory sampler (:class:`raytpu.local.slice.memory.PeakMemory`) over one real demo: PSS
read at every sample, the bounded sampler (PSS read only when it could be a new peak) and the demo's own (bounded, and
PSS at most every ``pss_gap_s``), all sampling the demo's processes at the same moments, in rotating order.

    .venv/bin/python bench/memory_sampler.py [--interval 0.5] [-- demo flags...]

Prints each sampler's CPU seconds (``time.thread_time`` around its samples), PSS reads, peak PSS and peak RSS sum,
and the ratios bounded/every. The demo runs in its own run directory (``.raytpu/bench-memory``).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time

from raytpu.local.slice.memory import PeakMemory
from raytpu.local.slice.state import TMP_PREFIX


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--interval", type=float, default=0.5, help="seconds between samples (the demo's: 0.5)")
    parser.add_argument("demo", nargs="*", help="extra `raytpu demo` flags (after --)")
    args = parser.parse_args(argv)
    raytpu = os.path.join(os.path.dirname(sys.executable), "raytpu")
    demo = subprocess.Popen([raytpu, "demo", "--dir", ".raytpu/bench-memory", "--report",
                             "reports/bench-memory.json", *args.demo], stdout=subprocess.DEVNULL)
    prefix = f"{TMP_PREFIX}d{demo.pid}-"  # the demo tags its cluster with its pid (raytpu.local.demos.demo.run_demo)
    samplers = {"every": PeakMemory(tag_prefix=prefix, root=demo.pid, recheck_s=0.0),
                "bounded": PeakMemory(tag_prefix=prefix, root=demo.pid, pss_gap_s=0.0),
                "gapped": PeakMemory(tag_prefix=prefix, root=demo.pid)}
    names = list(samplers)
    cpu = dict.fromkeys(samplers, 0.0)
    tick = 0
    while demo.poll() is None:
        for name in names[tick % 3:] + names[:tick % 3]:
            began = time.thread_time()
            samplers[name].sample()
            cpu[name] += time.thread_time() - began
        tick += 1
        time.sleep(args.interval)
    every = samplers["every"]
    print(f"demo exit {demo.returncode}; {tick} samples every {args.interval:g}s; load average "
          f"{[round(x, 1) for x in os.getloadavg()]}")
    print(f"{'sampler':9}  {'CPU s':>6}  {'PSS reads':>9}  {'peak PSS MiB':>12}  {'peak RSS sum MiB':>16}")
    for name, s in samplers.items():
        print(f"{name:9}  {cpu[name]:6.2f}  {s.pss_reads:9d}  {s.peak_pss_bytes / 2**20:12.0f}  "
              f"{s.peak_rss_bytes / 2**20:16.0f}")
    for name in names[1:]:
        s = samplers[name]
        print(f"{name}/every: CPU {cpu[name] / cpu['every']:.2f}x, peak PSS "
              f"{s.peak_pss_bytes / every.peak_pss_bytes:.4f}x, peak RSS sum "
              f"{s.peak_rss_bytes / every.peak_rss_bytes:.4f}x")
    return demo.returncode


if __name__ == "__main__":
    sys.exit(main())
