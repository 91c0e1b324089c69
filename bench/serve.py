"""Benchmark: Ray Serve LLM (the kit's app, CPU twin, on the emulated slice) vs vLLM's own OpenAI server.

    .venv-serve/bin/python bench/serve.py [--concurrency 1 4 16] [--rounds 3] [--window-s 20] [--window-tokens 2048]
        [--max-tokens 64] [--repeats 3] [--agree 0.15] [--json]

The example's serving workload (``raytpu.example.yaml``), same tiny model (:mod:`raytpu.workloads.tiny_llm`),
same engine arguments (the CPU twin's, via
:func:`raytpu.core.manifests.serving.engine_cli_args`), same engine env, same client (the official ``openai``
``AsyncOpenAI``, streamed chat completions, ``ignore_eos`` so every answer is ``--max-tokens`` long). The
two servers run one after the other (never together: the machine has 2 cores), interleaved ``--repeats`` times
(vLLM, Ray, vLLM, Ray, ...: each a fresh server, so drift in the machine's load falls on both), each measured at 1, 4
and 16 concurrent streams: batches of ``c`` simultaneous streams after a warm-up, until the level's window is full
(at least ``--rounds`` batches, ``--window-s`` seconds and ``--window-tokens`` tokens).

Reported per server and concurrency: p50/p95 time to first token, output tokens/s (all completion tokens
of the window over its wall time), and peak memory of each server's process tree; then
the ratios Ray Serve LLM / vLLM (TTFT ratio > 1 and throughput ratio < 1 mean Ray Serve's overhead). With
repeats, each pair (vLLM run i, Ray run i) gives one ratio; the ratio reported is their median and
``ratio_spread`` their min, max and ``spread`` (max / min - 1); a ratio ``holds`` when every pair agrees within
``--agree`` (spread at most 0.15 by default), and only such ratios are figures to quote. A server's figures are
medians over its runs. ``load_avg`` is the machine's
1-minute load average when each run starts and ends (``os.getloadavg``): the machine may be shared.
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
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from raytpu import local
from raytpu.config import load
from raytpu.core.manifests import serving
from raytpu.local.deploy import deploy_serve
from raytpu.local.from_config import serving_workload
from raytpu.local.llm_client import StreamResult, astream_chat
from raytpu.local.procs import processes_under
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


ALL_CORES = set(os.sched_getaffinity(0))
ENGINE_TITLES = ("EngineCore", "VLLM::Worker")
"""Process titles of vLLM's engine (its core and its one worker: vLLM's CPU build runs the ``mp`` executor)."""


def pin(pids: set[int]) -> dict[str, list[int]]:
    """``--pin-engine``: vLLM's engine processes on the last core, every other process of the server and this client
    on the rest, as on a TPU host, where the engine's work is on the chips and the host has cores to spare
    (``os.sched_setaffinity`` on every thread). Returns the pids pinned to each side."""
    cores = sorted(os.sched_getaffinity(0))
    engine_core, rest = {cores[-1]}, set(cores[:-1]) or {cores[-1]}
    done: dict[str, list[int]] = {"engine": [], "serving": []}
    for pid in sorted(pids | {os.getpid()}):
        try:
            title = Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace")
            side = "engine" if any(t in title for t in ENGINE_TITLES) else "serving"
            for task in Path(f"/proc/{pid}/task").iterdir():
                with contextlib.suppress(OSError):
                    os.sched_setaffinity(int(task.name), engine_core if side == "engine" else rest)
            done[side].append(pid)
        except OSError:
            continue
    return done


def unpin_self(cores: set[int]) -> None:
    """This process's threads back on ``cores`` (the next server starts with every core)."""
    for task in Path(f"/proc/{os.getpid()}/task").iterdir():
        with contextlib.suppress(OSError):
            os.sched_setaffinity(int(task.name), cores)


@dataclass(frozen=True)
class Window:
    """How long each concurrency level is measured: at least ``min_batches`` batches, ``min_s`` seconds of batches
    and ``min_tokens`` completion tokens, whichever ends last (one-batch windows of 0.5-4 s gave pair ratios from
    0.25x to 1.93x for one setting, issue 40 item 13)."""

    max_tokens: int
    min_batches: int = 3
    min_s: float = 20.0
    min_tokens: int = 2048

    def full(self, batches: int, busy_s: float, tokens: int) -> bool:
        return batches >= self.min_batches and busy_s >= self.min_s and tokens >= self.min_tokens


def window(args: argparse.Namespace) -> Window:
    """The :class:`Window` the command line asks for."""
    return Window(args.max_tokens, args.rounds, args.window_s, args.window_tokens)


def measure(url: str, model: str, concurrency: list[int], window: Window) -> dict[str, Any]:
    """Warm-up, then per concurrency batches of ``c`` streams until the :class:`Window` is full: TTFT percentiles over
    every stream and output tokens/s over the whole window (all its completion tokens over its wall time)."""
    asyncio.run(_batch(url, model, 2, 8, 10_000))
    out: dict[str, Any] = {}
    for c in concurrency:
        ttfts: list[float] = []
        tokens, busy_s, batches = 0, 0.0, 0
        start = time.time()
        while not window.full(batches, busy_s, tokens):
            results, wall = asyncio.run(_batch(url, model, c, window.max_tokens, 100 * batches))
            assert all(res.completion_tokens == window.max_tokens for res in results), [res.completion_tokens
                                                                                        for res in results]
            ttfts += [res.ttft_s for res in results]
            tokens += sum(res.completion_tokens for res in results)
            busy_s += wall
            batches += 1
        out[str(c)] = {"ttft_p50_s": _pct(ttfts, 0.5), "ttft_p95_s": _pct(ttfts, 0.95),
                       "output_tokens_per_s": tokens / busy_s, "streams": len(ttfts), "batches": batches,
                       "tokens": tokens, "window_s": busy_s, "window_wall": [start, time.time()]}
        print(f"  c={c}: ttft p50 {out[str(c)]['ttft_p50_s'] * 1000:.0f} ms, p95 "
              f"{out[str(c)]['ttft_p95_s'] * 1000:.0f} ms, {out[str(c)]['output_tokens_per_s']:.0f} tokens/s "
              f"({tokens} tokens, {batches} batches, {busy_s:.1f}s)", file=sys.stderr, flush=True)
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
            pinned = pin(local.tree_processes(proc.pid)) if args.pin_engine else None
            try:
                figures = measure(f"http://127.0.0.1:{port}/v1", model.name, args.concurrency, window(args))
            finally:
                unpin_self(ALL_CORES)
        return {"ready_s": ready_s, "peak_pss_gib": tree.peak_pss_bytes / 2**30, "by_concurrency": figures,
                "log": log.name, "pinned": pinned}
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
                pinned = (pin({p.pid for p in processes_under(cluster.temp_dir)}) if args.pin_engine else None)
                try:
                    figures = measure(url, served, args.concurrency, window(args))
                finally:
                    unpin_self(ALL_CORES)
            finally:
                local.stop(directory)
        return {"ready_s": ready_s, "peak_pss_gib": peak.peak_pss_bytes / 2**30, "by_concurrency": figures,
                "pinned": pinned}


METRICS = (("ttft_p50", "ttft_p50_s"), ("ttft_p95", "ttft_p95_s"), ("output_tokens_per_s", "output_tokens_per_s"))
"""(ratio key, figure key): what each Ray/vLLM ratio divides."""


def _load() -> float:
    return round(os.getloadavg()[0], 2)


def _loaded(run: Any, *args: Any) -> dict[str, Any]:
    """One server run with the machine's 1-minute load average before and after."""
    before = _load()
    fig = dict(run(*args))
    fig["load_avg"] = [before, _load()]
    return fig


def combine(runs: list[dict[str, Any]], concurrency: list[int]) -> dict[str, Any]:
    """Medians over ``runs`` of one server (each as :func:`measure` within a run's figures)."""
    out: dict[str, Any] = {"ready_s": statistics.median(r["ready_s"] for r in runs),
                           "peak_pss_gib": max(r["peak_pss_gib"] for r in runs), "by_concurrency": {},
                           "load_avg": [r["load_avg"] for r in runs]}
    for c in map(str, concurrency):
        figs = [r["by_concurrency"][c] for r in runs]
        out["by_concurrency"][c] = {key: statistics.median(f[key] for f in figs) for _, key in METRICS}
        out["by_concurrency"][c]["streams"] = sum(f["streams"] for f in figs)
    if "log" in runs[-1]:
        out["log"] = runs[-1]["log"]
    return out


def ratios(pairs: list[tuple[dict[str, Any], dict[str, Any]]], concurrency: list[int]
           ) -> tuple[dict[str, Any], dict[str, Any]]:
    """Per concurrency: the median of the pairs' Ray/vLLM ratios, and their spread (min, max, each pair's)."""
    median: dict[str, Any] = {}
    spread: dict[str, Any] = {}
    for c in map(str, concurrency):
        median[c], spread[c] = {}, {}
        for name, key in METRICS:
            values = [r["by_concurrency"][c][key] / v["by_concurrency"][c][key] for v, r in pairs]
            median[c][name] = statistics.median(values)
            spread[c][name] = {"min": min(values), "max": max(values), "spread": max(values) / min(values) - 1,
                               "values": values}
    return median, spread


def holds(spread: dict[str, Any], agree: float) -> dict[str, list[str]]:
    """Per concurrency, the ratios whose pairs all agree within ``agree`` (``spread`` from :func:`ratios`)."""
    return {c: [name for name, sp in by_name.items() if sp["spread"] <= agree] for c, by_name in spread.items()}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 4, 16])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=3, help="vLLM, Ray pairs, interleaved (default 3)")
    parser.add_argument("--window-s", type=float, default=20.0, help="seconds of batches per concurrency (default 20)")
    parser.add_argument("--window-tokens", type=int, default=2048,
                        help="completion tokens per concurrency, at least (default 2048)")
    parser.add_argument("--agree", type=float, default=0.15,
                        help="a ratio holds when its pairs' max / min - 1 is at most this (default 0.15)")
    parser.add_argument("--alt-ray-env", nargs="+", default=[], metavar="KEY=VALUE",
                        help="also run the Ray app with these in the slice's environment, as a third arm "
                        "(ray_serve_alt), interleaved with the others (e.g. Ray's defaults, for a before/after)")
    parser.add_argument("--pin-engine", action="store_true",
                        help="vLLM's engine processes on one core, each server's other processes and the client on "
                        "the others (a TPU host's engine does not compete with the serving path for cores)")
    parser.add_argument("--cache-dir", default=None)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    if any("=" not in kv for kv in args.alt_ray_env):
        print("error: --alt-ray-env: expected KEY=VALUE; valid: e.g. RAY_SERVE_LOG_TO_STDERR=1", file=sys.stderr)
        return 2
    alt_env = dict(kv.split("=", 1) for kv in args.alt_ray_env)
    if args.repeats < 1 or args.rounds < 1 or min(args.concurrency) < 1 or args.max_tokens < 1:
        print("error: --repeats/--rounds/--concurrency/--max-tokens: must be at least 1; valid: 1, 2, ...",
              file=sys.stderr)
        return 2
    if args.window_s < 0 or args.window_tokens < 0 or args.agree <= 0:
        print("error: --window-s/--window-tokens: must be at least 0, --agree above 0; valid: e.g. 20, 2048, 0.15",
              file=sys.stderr)
        return 2
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("RAY_AUTH_TOKEN", secrets.token_hex(32))  # token auth as on GKE; one token per process
    model = tiny_llm.ensure(args.cache_dir)
    os.environ[tiny_llm.ENV_CACHE_DIR] = str(model.path.parent)  # the Ray deployment serves this same model
    pairs: list[tuple[dict[str, Any], dict[str, Any]]] = []
    alts: list[tuple[dict[str, Any], dict[str, Any]]] = []
    for i in range(args.repeats):
        print(f"[{i + 1}/{args.repeats}] vLLM's own OpenAI server (load {_load()}):", file=sys.stderr, flush=True)
        v = _loaded(bench_vllm, model, args)
        arms = ["ray", "alt"] if alt_env else ["ray"]
        for arm in arms if i % 2 == 0 else arms[::-1]:  # the two Ray arms swap order each repeat
            extra = f" with {alt_env}" if arm == "alt" else ""
            print(f"[{i + 1}/{args.repeats}] Ray Serve LLM on the emulated slice{extra} (load {_load()}):",
                  file=sys.stderr, flush=True)
            if arm == "ray":
                pairs.append((v, _loaded(bench_ray, model, args)))
                continue
            saved = {k: os.environ.get(k) for k in alt_env}
            os.environ.update(alt_env)
            try:
                alts.append((v, _loaded(bench_ray, model, args)))
            finally:
                for k, old in saved.items():
                    if old is None:
                        os.environ.pop(k, None)
                    else:
                        os.environ[k] = old
    vllm_fig = combine([v for v, _ in pairs], args.concurrency)
    ray_fig = combine([r for _, r in pairs], args.concurrency)
    median, spread = ratios(pairs, args.concurrency)
    result = {"model": model.name, "max_tokens": args.max_tokens, "rounds": args.rounds, "repeats": args.repeats,
              "window_s": args.window_s, "window_tokens": args.window_tokens, "agree": args.agree,
              "pin_engine": args.pin_engine,
              "vllm": vllm_fig, "ray_serve": ray_fig, "ratio_ray_over_vllm": median, "ratio_spread": spread,
              "holds": holds(spread, args.agree),
              "runs": [{"vllm": v, "ray_serve": r} for v, r in pairs]}
    if alts:
        result["alt_ray_env"] = alt_env
        result["ray_serve_alt"] = combine([r for _, r in alts], args.concurrency)
        result["ratio_alt_over_vllm"], result["ratio_alt_spread"] = ratios(alts, args.concurrency)
        result["alt_holds"] = holds(result["ratio_alt_spread"], args.agree)
        for run, (_, r) in zip(result["runs"], alts, strict=True):
            run["ray_serve_alt"] = r
    if args.json:
        print(json.dumps(result, indent=2))
        return 0
    print(f"{'c':>3} | {'server':<13} | {'TTFT p50':>9} | {'TTFT p95':>9} | {'out tok/s':>9} | ratio spread")
    for c in map(str, args.concurrency):
        for name, fig in (("vLLM", vllm_fig), ("Ray Serve LLM", ray_fig)):
            f = fig["by_concurrency"][c]
            print(f"{c:>3} | {name:<13} | {f['ttft_p50_s'] * 1000:7.0f}ms | {f['ttft_p95_s'] * 1000:7.0f}ms | "
                  f"{f['output_tokens_per_s']:9.0f} |")
        q, sp = median[c], spread[c]
        print(f"{c:>3} | {'ratio Ray/vLLM':<13} | {q['ttft_p50']:8.2f}x | {q['ttft_p95']:8.2f}x | "
              f"{q['output_tokens_per_s']:8.2f}x | TTFT p50 {sp['ttft_p50']['min']:.2f}-{sp['ttft_p50']['max']:.2f}x, "
              f"tok/s {sp['output_tokens_per_s']['min']:.2f}-{sp['output_tokens_per_s']['max']:.2f}x; holds: "
              f"{', '.join(result['holds'][c]) or 'none'}")
    if alts:
        for c in map(str, args.concurrency):
            q, sp = result["ratio_alt_over_vllm"][c], result["ratio_alt_spread"][c]
            print(f"{c:>3} | {'alt Ray/vLLM':<13} | {q['ttft_p50']:8.2f}x | {q['ttft_p95']:8.2f}x | "
                  f"{q['output_tokens_per_s']:8.2f}x | TTFT p50 {sp['ttft_p50']['min']:.2f}-"
                  f"{sp['ttft_p50']['max']:.2f}x, tok/s {sp['output_tokens_per_s']['min']:.2f}-"
                  f"{sp['output_tokens_per_s']['max']:.2f}x   (alt: {alt_env})")
    print(f"ready: vLLM {vllm_fig['ready_s']:.0f}s, Ray Serve LLM {ray_fig['ready_s']:.0f}s (incl. slice start); "
          f"peak PSS: vLLM {vllm_fig['peak_pss_gib']:.2f} GiB, Ray Serve LLM {ray_fig['peak_pss_gib']:.2f} GiB; "
          f"load (1 min, start/end of each run): vLLM {vllm_fig['load_avg']}, Ray {ray_fig['load_avg']}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
