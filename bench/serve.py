"""Benchmark: Ray Serve LLM (the kit's app, CPU twin, on the emulated slice) vs vLLM's own OpenAI server.

    .venv-serve/bin/python bench/serve.py [--concurrency 1 4 16] [--rounds 3] [--window-s 12] [--window-tokens 1024]
        [--max-tokens 64] [--block-s 3] [--pairs 3] [--max-pairs 6] [--agree 0.15] [--set KEY=VALUE] [--json]

The example's serving workload (``raytpu.example.yaml``), same tiny model (:mod:`raytpu.workloads.tiny_llm`),
same engine arguments (the CPU twin's, via :func:`raytpu.core.manifests.serving.engine_cli_args`), same engine env,
same client (the official ``openai`` ``AsyncOpenAI``, streamed chat completions, ``ignore_eos`` so every answer is
``--max-tokens`` long).

Both servers are up at once and measured in pairs (:mod:`serve_pair`): per concurrency level ``c``, a pair is blocks
(``--block-s`` seconds) of batches of ``c`` simultaneous streams alternating between the two servers (vLLM, Ray,
vLLM, ...; the next pair starts with the other; a pause of ``SETTLE_S`` before each block lets the idle engine's
worker stop spinning) until each arm's window is full (at least ``--rounds`` batches, ``--window-s`` seconds and
``--window-tokens`` tokens), so both arms of a pair see the same machine load. Each pair gives Ray/vLLM ratios of
TTFT p50/p95 and output tokens/s (TTFT ratio > 1 and tokens/s ratio < 1 are Ray Serve's overhead); pairs repeat
until the last ``--pairs`` agree within ``--agree`` on TTFT p50 and tokens/s (max / min - 1), or ``--max-pairs``.
Reported per level: every pair, and over the last ``--pairs`` each ratio's median, spread and whether it holds;
only ratios that hold are figures to quote. Also each arm's ``other_server_cpu_share`` (the idle server's CPU seconds
per second of the measured one's batches), peak memory (vLLM's tree; everything: both servers and this client) and
the 1-minute load average at each pair's start and end.
No process is left behind: vLLM's server is its own process group, stopped by PID; the cluster by
:func:`raytpu.local.slice.procs.stop`.
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
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil
from serve_pair import ARMS, METRICS, SETTLE_S, Pair, Window, pair_ratios, settled, summary

from raytpu.config import load
from raytpu.core.common.errors import InvalidInputs
from raytpu.core.manifests import serving
from raytpu.core.specs.spec import WorkloadSpec
from raytpu.local.running.deploy import deploy_serve
from raytpu.local.running.llm_client import StreamResult, astream_chat
from raytpu.local.slice import memory, procs, startup, state
from raytpu.local.slice.from_config import serving_on_slice
from raytpu.local.slice.procs import processes_under
from raytpu.workloads import tiny_llm
from raytpu.workloads.serve import Endpoint, free_port, wait_answering

EXAMPLE = Path(__file__).resolve().parents[1] / "raytpu.example.yaml"
SERVING = next(w for w in load(EXAMPLE).workloads if w.kind.takes_model).name
"""The example's serving workload, which both servers serve (with ``--set``'s changes)."""


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


@dataclass
class Server:
    """One running server: its OpenAI base URL and model, and how to list its processes."""

    url: str
    model: str
    ready_s: float
    processes: Callable[[], set[int]]


def window(args: argparse.Namespace) -> Window:
    """The :class:`Window` the command line asks for."""
    return Window(args.max_tokens, args.rounds, args.window_s, args.window_tokens)


def _load() -> float:
    return round(os.getloadavg()[0], 2)


def cpu_seconds(pids: set[int]) -> float:
    """User + system CPU seconds so far of ``pids`` (those still alive)."""
    total = 0.0
    for pid in pids:
        with contextlib.suppress(psutil.Error):
            times = psutil.Process(pid).cpu_times()
            total += times.user + times.system
    return total


RAY_WORKER_NICENESS = 15
"""The niceness Ray starts every worker process at: the app's replica, the vLLM engine it spawns and HAProxy (the
raylet, GCS and dashboard stay at 0). Source: Ray 2.60 ``src/ray/common/ray_config_def.h`` ``worker_niceness``."""


@contextlib.contextmanager
def vllm_server(model: tiny_llm.TinyModel, work: WorkloadSpec, niceness: int | None = None
                ) -> Iterator[tuple[Server, int, str]]:
    """vLLM's own OpenAI server (``python -m vllm.entrypoints.openai.api_server``) with the twin's engine args, at
    ``niceness`` (None: this process's, as a plain start; its engine processes inherit it); yields it, its root pid
    and its log's path."""
    app = serving.serve_config(work, cpu_model=(model.name, str(model.path)))["applications"][0]
    twin = app["args"]["llm_configs"][0]
    port = free_port()
    cmd = [sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", str(model.path),
           "--served-model-name", model.name, "--host", "127.0.0.1", "--port", str(port),
           *serving.engine_cli_args(twin["engine_kwargs"])]
    env = os.environ | twin["runtime_env"]["env_vars"]
    log = tempfile.NamedTemporaryFile(prefix="raytpu-bench-vllm-", suffix=".log", delete=False)  # noqa: SIM115
    t0 = time.monotonic()
    nice = None if niceness is None else (lambda: os.setpriority(os.PRIO_PROCESS, 0, niceness))
    proc = subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
                            preexec_fn=nice)
    try:
        url = f"http://127.0.0.1:{port}/v1"
        wait_answering(Endpoint(url, model.name), time.monotonic() + 300)
        ready_s = time.monotonic() - t0
        print(f"vLLM OpenAI server ready in {ready_s:.0f}s", file=sys.stderr, flush=True)
        yield Server(url, model.name, ready_s, lambda: memory.tree_processes(proc.pid)), proc.pid, log.name
    finally:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(10)
        for pid in memory.tree_processes(proc.pid) - {proc.pid}:  # anything that left the group
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)


@contextlib.contextmanager
def ray_server(work: WorkloadSpec, env: dict[str, str]) -> Iterator[Server]:
    """The kit's app serving ``work`` on a fresh emulated slice, deployed by the serve workload (as ``raytpu local
    serve``), with ``env`` in the environment its processes start with."""
    with tempfile.TemporaryDirectory(prefix="raytpu-bench-serve-") as directory:
        try:
            t0 = time.monotonic()
            with _environ(env):
                cluster = startup.start(work.plan, 1, directory)
                url, served = deploy_serve(cluster, serving_on_slice(cluster, work), 600.0)
            ready_s = time.monotonic() - t0
            print(f"Ray Serve LLM ready in {ready_s:.0f}s (cluster {cluster.started_s:.0f}s)", file=sys.stderr,
                  flush=True)
            yield Server(url, served, ready_s, lambda: {p.pid for p in processes_under(cluster.temp_dir)})
        finally:
            procs.stop(directory)


@contextlib.contextmanager
def _environ(env: dict[str, str]) -> Iterator[None]:
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        yield
    finally:
        for k, old in saved.items():
            if old is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = old


def measure_pair(servers: dict[str, Server], index: int, c: int, args: argparse.Namespace) -> dict[str, Any]:
    """One pair at ``c`` streams: blocks of each arm's batches alternating until both windows are full."""
    pair = Pair(index, window(args), args.block_s)
    pids = {name: server.processes() for name, server in servers.items()}
    start, load0 = time.time(), _load()
    while (name := pair.next_arm()) is not None:
        if pair.block_batches == 0:
            time.sleep(SETTLE_S)  # the arm just measured stops spinning
        other = ARMS[1 - ARMS.index(name)]
        cpu0 = cpu_seconds(pids[other])
        results, wall = asyncio.run(_batch(servers[name].url, servers[name].model, c, args.max_tokens,
                                           100 * pair.arms[name].batches))
        assert all(res.completion_tokens == args.max_tokens for res in results), [res.completion_tokens
                                                                                  for res in results]
        pair.add(name, [res.ttft_s for res in results], sum(res.completion_tokens for res in results), wall,
                 cpu_seconds(pids[other]) - cpu0)
    figures = {name: arm.figures() for name, arm in pair.arms.items()}
    return {"blocks": pair.blocks, "load_avg": [load0, _load()], "wall": [start, time.time()],
            **figures, "ratio": pair_ratios(figures["vllm"], figures["ray"])}


def measure_level(servers: dict[str, Server], c: int, args: argparse.Namespace) -> dict[str, Any]:
    """Pairs at ``c`` streams until the last ``--pairs`` agree (:func:`serve_pair.settled`) or ``--max-pairs``."""
    pairs: list[dict[str, Any]] = []
    while len(pairs) < args.max_pairs and not settled([p["ratio"] for p in pairs], args.pairs, args.agree):
        pairs.append(measure_pair(servers, len(pairs), c, args))
        p = pairs[-1]
        print(f"  c={c} pair {len(pairs)}: tok/s vLLM {p['vllm']['output_tokens_per_s']:.0f}, Ray "
              f"{p['ray']['output_tokens_per_s']:.0f} ({p['ratio']['output_tokens_per_s']:.2f}x); TTFT p50 "
              f"{p['ratio']['ttft_p50']:.2f}x; {p['wall'][1] - p['wall'][0]:.0f}s, load {p['load_avg']}",
              file=sys.stderr, flush=True)
    used = pairs[-args.pairs:]
    medians = {name: {key: statistics.median(p[name][key] for p in used) for _, key in METRICS} for name in ARMS}
    return {"pairs": pairs, "vllm": medians["vllm"], "ray": medians["ray"],
            **summary([p["ratio"] for p in pairs], args.pairs, args.agree)}


def exit_on_sigterm() -> None:
    """A SIGTERM (a CI timeout, ``kill``) unwinds like Ctrl-C, so vLLM's server and the emulated slice are stopped on
    the way out (the slice's start keeps this handler: :func:`raytpu.local.slice.connection.connect`)."""
    signal.signal(signal.SIGTERM, lambda signum, _frame: sys.exit(128 + signum))


def session(model: tiny_llm.TinyModel, work: WorkloadSpec, env: dict[str, str], args: argparse.Namespace
            ) -> dict[str, Any]:
    """vLLM alone and the kit's app (with ``env``) up at once, both serving ``work``, every level measured in pairs."""
    load0 = _load()
    everything = memory.PeakMemory(tag_prefix=state.temp_prefix())
    with contextlib.ExitStack() as stack:
        stack.enter_context(everything)
        vllm, vllm_pid, log = stack.enter_context(vllm_server(model, work, args.vllm_niceness))
        vllm_mem = stack.enter_context(memory.PeakMemory(root=vllm_pid))
        ray = stack.enter_context(ray_server(work, env))
        servers = {"vllm": vllm, "ray": ray}
        pinned = pin(vllm.processes() | ray.processes()) if args.pin_engine else None
        stack.callback(unpin_self, ALL_CORES)
        for server in servers.values():
            asyncio.run(_batch(server.url, server.model, 2, 8, 10_000))  # warm-up
        levels = {str(c): measure_level(servers, c, args) for c in args.concurrency}
    return {"env": env, "vllm_niceness": args.vllm_niceness, "ready_s": {"vllm": vllm.ready_s, "ray": ray.ready_s},
            "vllm_log": log, "pinned": pinned,
            "peak_pss_gib": {"vllm": vllm_mem.peak_pss_bytes / 2**30, "all": everything.peak_pss_bytes / 2**30},
            "load_avg": [load0, _load()], "by_concurrency": levels}


def _print_table(name: str, result: dict[str, Any]) -> None:
    nice = "inherited" if result["vllm_niceness"] is None else result["vllm_niceness"]
    print(f"{name} (env {result['env'] or 'the kit'}; vLLM's niceness {nice}): "
          f"ready vLLM {result['ready_s']['vllm']:.0f}s, Ray "
          f"{result['ready_s']['ray']:.0f}s; peak PSS vLLM {result['peak_pss_gib']['vllm']:.2f} GiB, all "
          f"{result['peak_pss_gib']['all']:.2f} GiB; load {result['load_avg']}")
    print(f"{'c':>3} | {'pairs':>5} | {'vLLM tok/s':>10} | {'Ray tok/s':>9} | ratio (median; spread) of the last pairs")
    for c, lv in result["by_concurrency"].items():
        cells = ", ".join(f"{n} {lv[n]['median']:.2f}x ({lv[n]['spread']:.0%}{'' if n in lv['holds'] else ' no'})"
                          for n, _ in METRICS)
        print(f"{c:>3} | {len(lv['pairs']):>5} | {lv['vllm']['output_tokens_per_s']:10.0f} | "
              f"{lv['ray']['output_tokens_per_s']:9.0f} | {cells}{'' if lv['settled'] else '; NOT SETTLED'}")


def _bad(flag: str, value: object, rule: str, valid: str) -> int:
    print(f"error: {flag}: {str(value)[:60]!r} {rule}; valid: {valid}", file=sys.stderr)
    return 2


def check(args: argparse.Namespace) -> int:
    """0, or 2 after naming the first bad flag (before any server starts)."""
    for flag in ("rounds", "max_tokens", "pairs", "max_pairs"):
        if getattr(args, flag) < 1:
            return _bad(f"--{flag.replace('_', '-')}", getattr(args, flag), "must be at least 1", "1, 2, ...")
    if min(args.concurrency) < 1:
        return _bad("--concurrency", args.concurrency, "must each be at least 1", "e.g. 1 4 16")
    if args.pairs < 2 or args.max_pairs < args.pairs:
        return _bad("--pairs/--max-pairs", [args.pairs, args.max_pairs], "need 2 <= --pairs <= --max-pairs",
                    "e.g. 3 and 6")
    for flag in ("window_s", "window_tokens", "block_s"):
        if getattr(args, flag) < 0:
            return _bad(f"--{flag.replace('_', '-')}", getattr(args, flag), "must be at least 0", "e.g. 12, 1024, 3")
    if args.vllm_niceness is not None and not 0 <= args.vllm_niceness <= 19:
        return _bad("--vllm-niceness", args.vllm_niceness, "must be 0..19 (raising a process's priority needs "
                    "privileges)", f"{RAY_WORKER_NICENESS} (Ray's worker niceness) or 0")
    if args.agree <= 0:
        return _bad("--agree", args.agree, "must be above 0", "e.g. 0.15")
    bad_env = [kv for kv in args.alt_ray_env if "=" not in kv]
    if bad_env:
        return _bad("--alt-ray-env", bad_env[0], "is not KEY=VALUE", "e.g. RAY_SERVE_LOG_TO_STDERR=1")
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 4, 16])
    parser.add_argument("--rounds", type=int, default=3, help="batches per arm of a pair, at least (default 3)")
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--window-s", type=float, default=30.0,
                        help="seconds of batches per arm of a pair, at least (default 30; 12 did not hold)")
    parser.add_argument("--window-tokens", type=int, default=1024,
                        help="completion tokens per arm of a pair, at least (default 1024)")
    parser.add_argument("--block-s", type=float, default=5.0,
                        help="seconds of one arm's batches before the other's block, at least (default 5)")
    parser.add_argument("--pairs", type=int, default=3, help="pairs that must agree, the last ones (default 3)")
    parser.add_argument("--max-pairs", type=int, default=6, help="pairs per level at most (default 6)")
    parser.add_argument("--agree", type=float, default=0.15,
                        help="pairs agree when their ratios' max / min - 1 is at most this (default 0.15)")
    parser.add_argument("--alt-ray-env", nargs="+", default=[], metavar="KEY=VALUE",
                        help="a second session with these in the Ray slice's environment (ray_serve_alt; e.g. Ray's "
                        "defaults, for a before/after), measured against its own vLLM like the first")
    parser.add_argument("--pin-engine", action="store_true",
                        help="both vLLM engines' processes on one core, every other process and the client on the "
                        "others (a TPU host's engine does not compete with the serving path for cores)")
    parser.add_argument("--vllm-niceness", type=int, default=None,
                        help="vLLM's own server's niceness (default: this process's, as a plain start; "
                        f"{RAY_WORKER_NICENESS} is what Ray gives the app's replica and engine, so both servers stand "
                        "alike against the client and the machine)")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help="a field of the example's serving workload changed for both servers, as `raytpu submit "
                        "--set` (e.g. engine_kwargs.stream_interval=4); repeatable")
    parser.add_argument("--cache-dir", default=None)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    if check(args):
        return 2
    try:
        work = load(EXAMPLE, workload=SERVING, overrides=args.set).workload(SERVING)
    except InvalidInputs as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    alt_env = dict(kv.split("=", 1) for kv in args.alt_ray_env)
    exit_on_sigterm()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("RAY_AUTH_TOKEN", secrets.token_hex(32))  # token auth as on GKE; one token per process
    model = tiny_llm.ensure(args.cache_dir)
    os.environ[tiny_llm.ENV_CACHE_DIR] = str(model.path.parent)  # the Ray deployment serves this same model
    result: dict[str, Any] = {
        "model": model.name, "max_tokens": args.max_tokens, "window": vars(window(args)), "pairs": args.pairs,
        "max_pairs": args.max_pairs, "block_s": args.block_s, "settle_s": SETTLE_S, "agree": args.agree,
        "pin_engine": args.pin_engine, "cpus": os.cpu_count(),
        "set": args.set, "ray_serve": session(model, work, {}, args)}
    if alt_env:
        result["ray_serve_alt"] = session(model, work, alt_env, args)
    if args.json:
        print(json.dumps(result, indent=2))
        return 0
    for name in ("ray_serve", "ray_serve_alt"):
        if name in result:
            _print_table(name, result[name])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
