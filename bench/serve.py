"""Benchmark: Ray Serve LLM (the kit's app, CPU twin, on the emulated slice) vs vLLM's own OpenAI server.

    .venv-serve/bin/python bench/serve.py [--concurrency 1 4 16] [--rounds 3] [--max-tokens 64] [--json]

The example's serving workload (``raytpu.example.yaml``), same tiny model (:mod:`raytpu.workloads.tiny_llm`),
same engine arguments (the CPU twin's, via
:func:`raytpu.serving.engine_cli_args`), same engine env, same client (the official ``openai``
``AsyncOpenAI``, streamed chat completions, ``ignore_eos`` so every answer is ``--max-tokens`` long). The
two servers run one after the other (never together: the machine has 2 cores), each measured at 1, 4 and 16
concurrent streams: ``--rounds`` batches of ``c`` simultaneous streams after a warm-up.

Reported per server and concurrency: p50/p95 time to first token, output tokens/s (all completion tokens
of a batch over its wall time, median over rounds), and peak memory of each server's process tree; then
the ratios Ray Serve LLM / vLLM (TTFT ratio > 1 and throughput ratio < 1 mean Ray Serve's overhead).
No process is left behind: vLLM's server is its own process group, stopped by PID; the cluster by
:func:`raytpu.local.stop`.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import secrets
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from raytpu import local, serving
from raytpu.config import load
from raytpu.llm_client import StreamResult, astream_chat
from raytpu.local.deploy import deploy_serve
from raytpu.local.from_config import serving_workload
from raytpu.workloads import tiny_llm
from raytpu.workloads.serve import Endpoint, free_port, wait_answering

EXAMPLE = Path(__file__).resolve().parents[1] / "raytpu.example.yaml"
WORK = next(w for w in load(EXAMPLE).workloads if w.kind.takes_model)


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))]


async def _batch(url: str, model: str, c: int, max_tokens: int, seed: int) -> tuple[list[StreamResult], float]:
    import openai

    client = openai.AsyncOpenAI(base_url=url, api_key="unused", max_retries=0, timeout=600)
    try:
        t0 = time.perf_counter()
        results = await asyncio.gather(*(astream_chat(
            client, model, f"Tell me about slice {seed + i}.", max_tokens=max_tokens, temperature=1.0,
            seed=seed + i, extra_body={"ignore_eos": True}) for i in range(c)))
        return list(results), time.perf_counter() - t0
    finally:
        await client.close()


def measure(url: str, model: str, concurrency: list[int], rounds: int, max_tokens: int) -> dict[str, Any]:
    """Warm-up, then ``rounds`` batches per concurrency: TTFT percentiles and output tokens/s."""
    asyncio.run(_batch(url, model, 2, 8, 10_000))
    out: dict[str, Any] = {}
    for c in concurrency:
        ttfts: list[float] = []
        rates: list[float] = []
        for r in range(rounds):
            results, wall = asyncio.run(_batch(url, model, c, max_tokens, 100 * r))
            assert all(res.completion_tokens == max_tokens for res in results), [res.completion_tokens
                                                                                 for res in results]
            ttfts += [res.ttft_s for res in results]
            rates.append(sum(res.completion_tokens for res in results) / wall)
        out[str(c)] = {"ttft_p50_s": _pct(ttfts, 0.5), "ttft_p95_s": _pct(ttfts, 0.95),
                       "output_tokens_per_s": statistics.median(rates), "streams": len(ttfts)}
        print(f"  c={c}: ttft p50 {out[str(c)]['ttft_p50_s'] * 1000:.0f} ms, p95 "
              f"{out[str(c)]['ttft_p95_s'] * 1000:.0f} ms, {out[str(c)]['output_tokens_per_s']:.0f} tokens/s",
              file=sys.stderr, flush=True)
    return out


def bench_vllm(model: tiny_llm.TinyModel, args: argparse.Namespace) -> dict[str, Any]:
    """vLLM's own OpenAI server (``python -m vllm.entrypoints.openai.api_server``) with the twin's engine args."""
    app = serving.serve_config(WORK, cpu_model=(model.name, str(model.path)))["applications"][0]
    twin = app["args"]["llm_configs"][0]
    port = free_port()
    cmd = [sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", str(model.path),
           "--served-model-name", model.name, "--host", "127.0.0.1", "--port", str(port),
           *serving.engine_cli_args(twin["engine_kwargs"])]
    env = os.environ | twin["runtime_env"]["env_vars"]
    log = tempfile.NamedTemporaryFile(prefix="raytpu-bench-vllm-", suffix=".log", delete=False)  # noqa: SIM115
    t0 = time.monotonic()
    proc = subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        with local.PeakMemory(root=proc.pid) as tree:
            wait_answering(Endpoint(f"http://127.0.0.1:{port}/v1", model.name), time.monotonic() + 300)
            ready_s = time.monotonic() - t0
            print(f"vLLM OpenAI server ready in {ready_s:.0f}s", file=sys.stderr, flush=True)
            figures = measure(f"http://127.0.0.1:{port}/v1", model.name, args.concurrency, args.rounds,
                              args.max_tokens)
        return {"ready_s": ready_s, "peak_pss_gib": tree.peak_pss_bytes / 2**30, "by_concurrency": figures,
                "log": log.name}
    finally:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(10)
        for pid in local.tree_processes(proc.pid) - {proc.pid}:  # anything that left the group
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)


def bench_ray(model: tiny_llm.TinyModel, args: argparse.Namespace) -> dict[str, Any]:
    """The kit's app on a fresh emulated slice, deployed by the serve workload (as ``raytpu local serve``)."""
    with tempfile.TemporaryDirectory(prefix="raytpu-bench-serve-") as directory:
        peak = local.PeakMemory(tag_prefix=local.temp_prefix())
        with peak:
            try:
                t0 = time.monotonic()
                cluster = local.start(WORK.plan, 1, directory)
                url, served = deploy_serve(cluster, serving_workload(cluster, str(EXAMPLE), WORK.name), 600.0)
                ready_s = time.monotonic() - t0
                print(f"Ray Serve LLM ready in {ready_s:.0f}s (cluster {cluster.started_s:.0f}s)",
                      file=sys.stderr, flush=True)
                figures = measure(url, served, args.concurrency, args.rounds, args.max_tokens)
            finally:
                local.stop(directory)
        return {"ready_s": ready_s, "peak_pss_gib": peak.peak_pss_bytes / 2**30, "by_concurrency": figures}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 4, 16])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--cache-dir", default=None)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("RAY_AUTH_TOKEN", secrets.token_hex(32))  # token auth as on GKE; one token per process
    model = tiny_llm.ensure(args.cache_dir)
    os.environ[tiny_llm.ENV_CACHE_DIR] = str(model.path.parent)  # the Ray deployment serves this same model
    print("vLLM's own OpenAI server:", file=sys.stderr, flush=True)
    vllm_fig = bench_vllm(model, args)
    print("Ray Serve LLM on the emulated slice:", file=sys.stderr, flush=True)
    ray_fig = bench_ray(model, args)
    ratios = {}
    for c in map(str, args.concurrency):
        r, v = ray_fig["by_concurrency"][c], vllm_fig["by_concurrency"][c]
        ratios[c] = {"ttft_p50": r["ttft_p50_s"] / v["ttft_p50_s"], "ttft_p95": r["ttft_p95_s"] / v["ttft_p95_s"],
                     "output_tokens_per_s": r["output_tokens_per_s"] / v["output_tokens_per_s"]}
    result = {"model": model.name, "max_tokens": args.max_tokens, "rounds": args.rounds,
              "vllm": vllm_fig, "ray_serve": ray_fig, "ratio_ray_over_vllm": ratios}
    if args.json:
        print(json.dumps(result, indent=2))
        return 0
    print(f"{'c':>3} | {'server':<13} | {'TTFT p50':>9} | {'TTFT p95':>9} | {'out tok/s':>9}")
    for c in map(str, args.concurrency):
        for name, fig in (("vLLM", vllm_fig), ("Ray Serve LLM", ray_fig)):
            f = fig["by_concurrency"][c]
            print(f"{c:>3} | {name:<13} | {f['ttft_p50_s'] * 1000:7.0f}ms | {f['ttft_p95_s'] * 1000:7.0f}ms | "
                  f"{f['output_tokens_per_s']:9.0f}")
        q = ratios[c]
        print(f"{c:>3} | {'ratio Ray/vLLM':<13} | {q['ttft_p50']:8.2f}x | {q['ttft_p95']:8.2f}x | "
              f"{q['output_tokens_per_s']:8.2f}x")
    print(f"ready: vLLM {vllm_fig['ready_s']:.0f}s, Ray Serve LLM {ray_fig['ready_s']:.0f}s (incl. slice start); "
          f"peak PSS: vLLM {vllm_fig['peak_pss_gib']:.2f} GiB, Ray Serve LLM {ray_fig['peak_pss_gib']:.2f} GiB")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
