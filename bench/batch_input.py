"""A large JSON-lines input through ``workloads/batch.py``'s ``run``, this checkout's beside an earlier revision's
(default: the one that counted its input with ``Dataset.count()``, a whole read of a JSON input before the run's own
read), in pairs whose order alternates. The engine is a stand-in that answers every row with empty text (``--rows``
rows of ``--prompt-chars`` characters), so what is timed is the input's read, the streaming pass and the write,
not vLLM.
Per run: the call's wall time and the peak resident memory of this process and every process under it (the local Ray
it starts: raylet, workers), sampled every 50 ms, above the level before the call.
Run under the Ray lock (it starts a local Ray)::

    flock /tmp/raytpu-ray.lock .venv/bin/python bench/batch_input.py [--rows 200000] [--repeats 2] [--json]
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from types import ModuleType
from typing import Any

import psutil

from raytpu.core.specs import kinds
from raytpu.core.specs.spec import SliceSpec, WorkloadSpec
from raytpu.workloads import batch

BEFORE = "7d30642"
"""The revision whose ``batch.run`` counted its input with ``Dataset.count()``."""
SLICE = SliceSpec.create(name="batch", generation="v6e", topology="1x1", zone="us-east5-b")


def at_revision(rev: str, where: Path) -> ModuleType:
    """``workloads/batch.py`` as it was at ``rev``, loaded as a module of its own."""
    text = subprocess.run(["git", "show", f"{rev}:workloads/batch.py"], capture_output=True, text=True,
                          check=True).stdout
    path = where / f"batch_{rev}.py"
    path.write_text(text)
    spec = importlib.util.spec_from_file_location(f"batch_{rev}", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def stand_in_engine(config: dict[str, Any], columns: tuple[str, ...], params: dict[str, Any], chat: bool) -> Any:
    """``batch.build``'s place: every row answered with empty text, no tokens, no error."""

    def answer(table: Any) -> Any:
        import pyarrow as pa

        rows = table.num_rows
        return (table.append_column("generated_text", pa.array([""] * rows))
                .append_column("num_input_tokens", pa.array([0] * rows, pa.int64()))
                .append_column("num_generated_tokens", pa.array([0] * rows, pa.int64()))
                .append_column("__inference_error__", pa.array([""] * rows)))

    return lambda ds: ds.map_batches(answer, batch_format="pyarrow")


class PeakRss:
    """The peak summed RSS of this process and its descendants while running, sampled every 50 ms."""

    def __init__(self) -> None:
        self.peak, self._stop = 0, threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)

    @staticmethod
    def now() -> int:
        me = psutil.Process()
        total = 0
        for proc in [me, *me.children(recursive=True)]:
            try:
                total += proc.memory_info().rss
            except psutil.Error:
                continue
        return total

    def _sample(self) -> None:
        while not self._stop.wait(0.05):
            self.peak = max(self.peak, self.now())

    def __enter__(self) -> PeakRss:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


def one_run(module: ModuleType, source: Path, output: Path) -> dict[str, Any]:
    setattr(module, "build", stand_in_engine)  # noqa: B010 (the engine is what this bench leaves out)
    work = WorkloadSpec(name="batch", kind=kinds.kind("batch"), slice=SLICE, input=str(source), output=str(output),
                        chat_template=False)
    base = PeakRss.now()
    with PeakRss() as rss:
        t0 = time.monotonic()
        report = module.run(work)
        call_s = time.monotonic() - t0
    assert report["rows_in"] == report["rows_out"], report
    return {"call_s": round(call_s, 2), "peak_mib": round((rss.peak - base) / 2**20, 1), "rows": report["rows_in"]}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=200_000)
    parser.add_argument("--prompt-chars", type=int, default=300)
    parser.add_argument("--repeats", type=int, default=2, help="pairs")
    parser.add_argument("--before", default=BEFORE, help="the earlier revision (git)")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    import ray

    with tempfile.TemporaryDirectory(prefix="bench-batch-input-") as tmp:
        root = Path(tmp)
        source = root / "prompts.jsonl"
        filler = "x" * args.prompt_chars
        with source.open("w") as out:
            for i in range(args.rows):
                out.write(json.dumps({"id": i, "prompt": f"{i} {filler}"}) + "\n")
        sides = {"before": at_revision(args.before, root), "after": batch}
        ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
        runs: dict[str, list[dict[str, Any]]] = {"before": [], "after": []}
        try:
            for i in range(args.repeats):
                for side in (("before", "after"), ("after", "before"))[i % 2]:
                    runs[side].append(one_run(sides[side], source, root / f"out-{side}-{i}"))
        finally:
            ray.shutdown()
        result: dict[str, Any] = {"rows": args.rows, "input_mib": round(source.stat().st_size / 2**20, 1),
                                  "before_rev": args.before, **{side: runs[side] for side in runs}}
    for key in ("call_s", "peak_mib"):
        result[f"{key}_ratio"] = round(statistics.median(r[key] for r in runs["after"])
                                       / statistics.median(r[key] for r in runs["before"]), 3)
    print(json.dumps(result, sort_keys=True) if args.json else
          f"{result['rows']} rows ({result['input_mib']} MiB JSONL): before {runs['before']}, after {runs['after']}; "
          f"after/before call time {result['call_s_ratio']}x, peak memory {result['peak_mib_ratio']}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
