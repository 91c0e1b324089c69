"""Serve tier: the ``batch`` kind's program end to end: Ray Data reads 64 prompts, Ray Data LLM's vLLM engine processor
(vLLM's CPU build, the tiny offline model) answers them on an emulated single-host slice, Ray Data writes the results.

Runs in ``.venv-serve`` (vLLM, Ray Data LLM); skipped elsewhere with the reason. The program runs as the RayJob's
entrypoint runs it (``python -m raytpu.workloads.batch``, its spec in ``RAYTPU_WORKLOAD``), against the emulated
slice's Ray cluster, with ``--cpu-model`` for the CPU twin (:func:`raytpu.core.specs.runtime.data.cpu_twin`).
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from raytpu.core.specs import kinds
from raytpu.core.specs.spec import WORKLOAD_ENV, SliceSpec, WorkloadSpec
from raytpu.local.slice import procs, startup, state

pytestmark = pytest.mark.serve

_MISSING = [m for m in ("vllm", "transformers", "pyarrow") if importlib.util.find_spec(m) is None]
if _MISSING:
    pytest.skip(f"batch tier needs {', '.join(_MISSING)} (vLLM's CPU build): run it in .venv-serve",
                allow_module_level=True)

from raytpu.workloads import tiny_llm  # noqa: E402
from raytpu.workloads.batch import REPORT_PREFIX  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
ROWS = 64
MAX_TOKENS = 8
TOO_LONG = "word " * 3000
"""A prompt longer than the CPU twin's context (1024 tokens): vLLM refuses that row alone, the run goes on."""
SLICE = SliceSpec.create(name="batch", generation="v6e", topology="2x4", zone="us-east5-b")


def _work(source: Path, output: Path, **sampling: Any) -> WorkloadSpec:
    return WorkloadSpec(name="batch", kind=kinds.kind("batch"), slice=SLICE, input=str(source), output=str(output),
                        max_tokens=MAX_TOKENS, **sampling)


def _prompts(folder: Path, failing: int = 0) -> Path:
    """ROWS questions, then ``failing`` rows the engine refuses (ids ROWS, ROWS + 1, ...)."""
    path = folder / "prompts.jsonl"
    path.write_text("".join(json.dumps({"id": i, "prompt": f"question {i}: what is {i} plus {i}?" if i < ROWS
                                        else TOO_LONG}) + "\n" for i in range(ROWS + failing)))
    return path


class Cluster:
    def __init__(self, cluster: state.LocalCluster, model: Path, cache: Path) -> None:
        self.cluster, self.model, self.cache = cluster, model, cache

    def run(self, work: WorkloadSpec, *flags: str) -> subprocess.CompletedProcess[str]:
        env = {**os.environ, **self.cluster.auth_env(), "RAY_ADDRESS": self.cluster.address, "HF_HUB_OFFLINE": "1",
               tiny_llm.ENV_CACHE_DIR: str(self.cache), WORKLOAD_ENV: work.workload_env()[WORKLOAD_ENV]}
        return subprocess.run([sys.executable, "-m", "raytpu.workloads.batch", "--cpu-model", str(self.model),
                               *flags], cwd=ROOT, env=env, capture_output=True,
                              text=True, timeout=900)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    """An emulated single-host v6e 2x4 slice (real Ray) and the tiny model."""
    run_dir = tmp_path_factory.mktemp("batch-local")
    cache = tmp_path_factory.mktemp("tiny-llm")
    model = tiny_llm.ensure(cache)
    try:
        started = startup.start(SLICE.plan, 1, run_dir, timeout_s=240)
        yield Cluster(started, model.path, cache)
    finally:
        procs.stop(run_dir)


def _report(done: subprocess.CompletedProcess[str]) -> dict[str, Any]:
    assert done.returncode == 0, done.stderr[-4000:]
    lines = [line for line in done.stdout.splitlines() if line.startswith(REPORT_PREFIX)]
    assert len(lines) == 1, done.stdout[-2000:]
    report: dict[str, Any] = json.loads(lines[0][len(REPORT_PREFIX):])
    return report


def _digest(folder: Path) -> str:
    return hashlib.sha256(b"".join(p.name.encode() + p.read_bytes() for p in sorted(folder.rglob("*"))
                                   if p.is_file())).hexdigest()


def test_a_batch_of_64_prompts_is_answered_row_for_row_and_a_failed_row_is_kept(cluster: Cluster,
                                                                                 tmp_path: Path) -> None:
    import pyarrow.parquet as pq

    source, output = _prompts(tmp_path, failing=1), tmp_path / "results"
    done = cluster.run(_work(source, output))
    report = _report(done)
    assert report["rows_in"] == report["rows_out"] == ROWS + 1 and report["rows_failed"] == 1
    assert report["chat_template"] is True  # the tiny model's tokenizer has one: applied by default
    assert report["sampling"] == {"max_tokens": MAX_TOKENS, "temperature": 0.0}
    assert "warning: 1 of 65 rows failed" in done.stderr
    assert report["rows_per_s"] > 0 and report["tokens_per_s"] > 0
    table = pq.read_table(output).to_pylist()
    assert sorted(r["id"] for r in table) == list(range(ROWS + 1))  # every row once, with its own columns
    answered = [r for r in table if r["id"] < ROWS]
    assert all(r["prompt"] == f"question {r['id']}: what is {r['id']} plus {r['id']}?" for r in answered)
    assert all(1 <= r["num_generated_tokens"] <= MAX_TOKENS and r["__inference_error__"] == "" for r in answered)
    assert sum(r["num_generated_tokens"] for r in table) == report["generated_tokens"]
    assert sum(r["num_input_tokens"] for r in table) == report["prompt_tokens"] >= ROWS
    (failed,) = [r for r in table if r["id"] == ROWS]
    assert failed["prompt"] == TOO_LONG and "maximum context length is 1024" in failed["__inference_error__"]
    assert failed["generated_text"] == "" and failed["num_generated_tokens"] == 0
    print(f"batch tier: {ROWS + 1} rows (1 failed) in {report['wall_s']:.1f}s: {report['rows_per_s']:.1f} rows/s, "
          f"{report['tokens_per_s']:.1f} tokens/s")


def test_the_workloads_sampling_reaches_the_engine(cluster: Cluster, tmp_path: Path) -> None:
    """Raw prompts (no chat template), a stop string and top_p from the spec, written as JSON lines: each answer
    ends before the stop string (vLLM cuts it; Ray's detokenize stage, which would decode it back, is off)."""
    source, output = _prompts(tmp_path), tmp_path / "results.jsonl"
    first = _report(cluster.run(_work(source, tmp_path / "plain.jsonl", chat_template=False)))
    assert first["chat_template"] is False and first["rows_failed"] == 0
    answers = [json.loads(line) for f in sorted((tmp_path / "plain.jsonl").glob("*.json*"))
               for line in f.read_text().splitlines()]
    stop = next(r["generated_text"][1:3] for r in answers if len(r["generated_text"].strip()) >= 3)
    report = _report(cluster.run(_work(source, output, chat_template=False, stop=(stop,), top_p=0.5)))
    assert report["sampling"] == {"max_tokens": MAX_TOKENS, "temperature": 0.0, "top_p": 0.5, "stop": [stop]}
    rows = [json.loads(line) for f in sorted(output.glob("*.json*")) for line in f.read_text().splitlines()]
    assert len(rows) == ROWS and all(stop not in r["generated_text"] for r in rows)
    assert report["generated_tokens"] < first["generated_tokens"]  # at least one answer stopped early


def test_an_output_that_exists_is_refused_untouched_unless_overwrite(cluster: Cluster, tmp_path: Path) -> None:
    source, output = _prompts(tmp_path), tmp_path / "results"
    output.mkdir()
    (output / "mine.parquet").write_bytes(b"the user's")
    before = _digest(output)
    done = cluster.run(_work(source, output))
    assert done.returncode == 2, done.stderr[-2000:]
    assert done.stderr.startswith("error: output: "), done.stderr[-2000:]
    assert "Traceback" not in done.stderr
    assert _digest(output) == before


def test_the_kits_tpu_processor_config_is_one_ray_data_llm_accepts() -> None:
    """The TPU config (not only its CPU twin) parses with Ray Data LLM's own pydantic config and stage builder."""
    from ray.data.llm import vLLMEngineProcessorConfig
    from ray.llm._internal.batch.stages.vllm_engine_stage import vLLMEngineStage

    from raytpu.core.specs.runtime import data

    config = data.processor_config(_work(Path("/in.jsonl"), Path("/out")), "Qwen/Qwen3-0.6B")
    parsed = vLLMEngineProcessorConfig(**config, chat_template_stage=False)
    assert parsed.accelerator_type == "TPU-V6E"
    stage = vLLMEngineStage(fn_constructor_kwargs={"engine_kwargs": dict(parsed.engine_kwargs),
                                                   "placement_group_config": parsed.placement_group_config},
                            map_batches_kwargs={"accelerator_type": parsed.accelerator_type})
    kwargs = stage.map_batches_kwargs
    assert kwargs["resources"] == {"TPU": 8} and kwargs["num_cpus"] == 1  # the engine actor holds the whole host
    assert kwargs["accelerator_type"] == "TPU-V6E" and "ray_remote_args_fn" not in kwargs
