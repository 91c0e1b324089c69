"""Benchmark of a preemption on the emulated slice: steps lost and time to resume, with a notice and without (a crash),
side by side on one cluster.

    PYTHONPATH=$PWD .venv/bin/python bench/preempt.py [--slices 1] [--notice-s 10] [--steps 30] [--every 10]
        [--at-step 14] [--json]

One emulated v6e 2x4 slice (two hosts); with ``--slices 2``, two emulated v5p 2x2x2 slices (two hosts each, the
smallest shape Ray 2.60 reserves across slices) and a training run spanning both, a host of the second preempted.
Each case is one training run (:func:`raytpu.local.demos.drill.drill`): one host preempted once step ``--at-step`` is
done, replaced, the run resumed on whole slices (with two, on both: Ray Train restarts the whole worker group and
reserves both slices again; ``resumed_on_slices`` is what the resumed workers report). ``with notice``: the host's
node drains for a preemption (as its ``ray start --block`` does on SIGTERM) and is killed ``--notice-s`` later: the
run checkpoints at the notice. ``no notice``: the host is killed at once (a crash): the run resumes from its last
periodic checkpoint (every ``--every`` steps). Steps lost are measured (rank 0's progress file), ``resumed_after_s`` is
from the notice (or the kill) to the first step after the restart: it includes the notice itself, the replacement
host's start and the workers' restart (JAX import, compile) on this machine.
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from pathlib import Path
from typing import Any

from raytpu.core.tpu.catalog import generation
from raytpu.core.tpu.plan import plan_slice
from raytpu.local.demos.drill import drill
from raytpu.local.slice import procs, startup, state

FIELDS = ("host", "notice_s", "checkpoint_at_notice", "last_step_before_kill", "resumed_from_step", "steps_lost",
          "resumed_after_s", "resumed_on_whole_slice", "resumed_on_slices", "run_ok")


def run(notice_s: float, steps: int, every: int, at_step: int, slices: int = 1) -> dict[str, Any]:
    """Both cases on one fresh cluster of ``slices`` slices, torn down after."""
    os.environ.setdefault(state.ENV_TMP_PREFIX, f"{state.TMP_PREFIX}b{os.getpid()}-")
    plan = (plan_slice("v6e", "2x4", generation("v6e").multi_host_machine_type.name) if slices == 1
            else plan_slice("v5p", "2x2x2"))  # a v6e 2x4 is one host to Ray's reservation: one slice only
    with tempfile.TemporaryDirectory(prefix="raytpu-bench-") as directory:
        started = time.monotonic()
        cluster = startup.start(plan, slices, directory)
        out: dict[str, Any] = {"slice": f"{slices} x {plan.generation} {plan.topology}, {plan.hosts} hosts each",
                               "start_s": round(time.monotonic() - started, 1), "cases": {}}
        try:
            for name, notice in (("with notice", notice_s), ("no notice", 0.0)):
                done = drill(cluster, notice, Path(directory) / name.replace(" ", "-"), steps=steps, every=every,
                             at_step=at_step, slices=slices, slice_name=cluster.slices[-1])
                out["cases"][name] = {k: done["preemption"][k] for k in FIELDS} | {
                    "run_s": done["train"].get("duration_s")}
        finally:
            procs.stop(directory)
    return out


def render(out: dict[str, Any]) -> str:
    cases = out["cases"]
    rows = [["", *cases]] + [[field, *(str(c[field]) for c in cases.values())] for field in (*FIELDS, "run_s")]
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines = [f"preemption on an emulated {out['slice']} (cluster start {out['start_s']}s):"]
    lines += ["  " + "  ".join(c.ljust(widths[i]) for i, c in enumerate(r)) for r in rows]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--slices", type=int, choices=(1, 2), default=1,
                        help="slices the training run spans (2: two v5p 2x2x2, a host of the second preempted)")
    parser.add_argument("--notice-s", type=float, default=10.0)
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--every", type=int, default=10)
    parser.add_argument("--at-step", type=int, default=14)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    out = run(args.notice_s, args.steps, args.every, args.at_step, args.slices)
    print(json.dumps(out, indent=2) if args.json else render(out))


if __name__ == "__main__":
    main()
