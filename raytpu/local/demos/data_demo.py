"""``make data`` (``raytpu demo --data``): Ray Data on emulated slices, for real, then torn down.

Each part has its own slice and Python (a cluster's workers use the interpreter that started it; vLLM's CPU build is in
``.venv-serve``, JAX in ``.venv``): ``batch`` runs ``workloads/batch.py`` over :data:`PROMPTS` prompts (CPU twin, tiny
model) on a v6e 2x4 host; ``train`` runs ``workloads/train.py`` for one epoch over :data:`ROWS` Parquet rows on two
4-chip hosts, each reading its shard. Writes ``reports/demo-data.json``."""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from raytpu.core.specs import kinds
from raytpu.core.specs.spec import WORKLOAD_ENV, SliceSpec, WorkloadSpec
from raytpu.core.tpu.catalog import generation
from raytpu.core.tpu.plan import plan_slice

PROMPTS = 64
MAX_TOKENS = 16
ROWS = 512
FEATURES = 32
BATCH = 64
"""Global batch of the training part: 8 steps are one epoch of :data:`ROWS` rows."""
DEFAULT_REPORT = "reports/demo-data.json"


def _say(line: str) -> None:
    print(f"data demo: {line}", file=sys.stderr, flush=True)


def batch_part(directory: Path) -> dict[str, Any]:
    """The batch part in this interpreter (it needs vLLM): slice up, 64 prompts answered, slice down."""
    from raytpu.local.slice import procs, startup
    from raytpu.workloads import tiny_llm
    from raytpu.workloads.batch import REPORT_PREFIX

    item = SliceSpec.create(name="batch", generation="v6e", topology="2x4", zone="us-east5-b")
    prompts = directory / "prompts.jsonl"
    directory.mkdir(parents=True, exist_ok=True)
    prompts.write_text("".join(json.dumps({"id": i, "prompt": f"question {i}: what is {i} plus {i}?"}) + "\n"
                               for i in range(PROMPTS)))
    work = WorkloadSpec(name="batch", kind=kinds.kind("batch"), slice=item, input=str(prompts),
                        output=str(directory / "answers"), max_tokens=MAX_TOKENS)
    model = tiny_llm.ensure()
    cluster = startup.start(item.plan, 1, directory / "cluster", progress=_say)
    try:
        env = {**cluster.driver_env(), "HF_HUB_OFFLINE": "1", WORKLOAD_ENV: work.workload_env()[WORKLOAD_ENV]}
        done = subprocess.run([sys.executable, "-m", "raytpu.workloads.batch", "--cpu-model", str(model.path),
                               "--overwrite"], env=env, capture_output=True,
                              text=True, timeout=1200)
    finally:
        procs.stop(directory / "cluster")
    lines = [line for line in done.stdout.splitlines() if line.startswith(REPORT_PREFIX)]
    if done.returncode != 0 or not lines:
        return {"ok": False, "error": (done.stderr.strip().splitlines() or ["no report"])[-1][:500]}
    report: dict[str, Any] = json.loads(lines[-1][len(REPORT_PREFIX):])
    return {**report, "ok": report["rows_out"] == report["rows_in"] == PROMPTS and not report["rows_failed"]}


def train_part(directory: Path) -> dict[str, Any]:
    """The training part in this interpreter (it needs JAX): two hosts, one epoch of a Parquet dataset."""
    from raytpu.local.running import jobs
    from raytpu.local.slice import procs, startup
    from raytpu.workloads import train
    from raytpu.workloads.support import train_data

    plan = plan_slice("v6e", "2x4", generation("v6e").multi_host_machine_type.name)
    directory.mkdir(parents=True, exist_ok=True)
    dataset = directory / "train.parquet"
    train_data.write_dataset(str(dataset), ROWS, FEATURES)
    cluster = startup.start(plan, 1, directory / "cluster", progress=_say)
    try:
        work = dataclasses.replace(cluster.workload("train"), dataset=str(dataset))
        steps = ROWS // BATCH
        done = jobs.run_workload(cluster, "train", "--storage-path", str(directory / "checkpoints"), "--steps",
                                 str(steps), "--checkpoint-every", str(steps), "--batch-size", str(BATCH),
                                 "--features", str(FEATURES), timeout_s=900, work=work)
    finally:
        procs.stop(directory / "cluster")
    summary = train.parse_result(done.stdout) or {}
    ledger = summary.get("train_data") or {}
    ok = bool(summary.get("ok")) and ledger.get("total_rows") == ledger.get("unique_rows") == ROWS
    return {"ok": ok, "train_data": ledger, "train": {k: summary.get(k) for k in (
        "steps_run", "first_loss", "final_loss", "step_time_s", "workers", "error") if summary.get(k) is not None}}


def run_demo(report_path: str, directory: str, serve_python: str) -> int:
    """Both parts, each in its own interpreter; writes the report (atomically) and returns 0 when both held."""
    t0 = time.monotonic()
    parts: dict[str, dict[str, Any]] = {}
    for part, python in (("batch", serve_python), ("train", sys.executable)):
        out = Path(directory) / f"{part}.json"
        _say(f"{part} part ({python})")
        done = subprocess.run([python, "-m", "raytpu.local.demos.data_demo", part, "--dir", str(Path(directory) / part),
                               "--out", str(out)], timeout=1800)
        parts[part] = json.loads(out.read_text()) if done.returncode == 0 and out.exists() else {
            "ok": False, "error": f"{part} part exited {done.returncode}"}
    batch, trained = parts["batch"], parts["train"]
    keys = ("rows_in", "rows_out", "rows_per_s", "tokens_per_s", "wall_s", "generated_tokens", "engine", "error")
    report = {"ok": bool(batch.get("ok") and trained.get("ok")),
              "batch": {k: batch[k] for k in keys if k in batch},
              "train_data": trained.get("train_data", {}), "train": trained.get("train", {}),
              "wall_s": round(time.monotonic() - t0, 1)}
    if "error" in trained:
        report["train"]["error"] = trained["error"]
    target = Path(report_path)
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.NamedTemporaryFile("w", dir=target.parent, delete=False, suffix=".tmp") as tmp:
        json.dump(report, tmp, indent=2, sort_keys=True)
    os.replace(tmp.name, target)
    print(json.dumps({k: report[k] for k in ("ok", "batch", "train_data")}, sort_keys=True))
    return 0 if report["ok"] else 1


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m raytpu.local.demos.data_demo")
    parser.add_argument("part", choices=("batch", "train"))
    parser.add_argument("--dir", required=True)
    parser.add_argument("--out", required=True)
    args = parser.parse_args(argv)
    result = (batch_part if args.part == "batch" else train_part)(Path(args.dir).resolve())
    Path(args.out).write_text(json.dumps(result, sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())
