"""Where one streamed request's time goes in the kit's Ray Serve LLM app: through the HTTP proxy and the ingress,
or straight to the LLM server replica (a Ray handle from this driver), one request at a time.

    PYTHONPATH=$PWD .venv-serve/bin/python bench/serve_hops.py [--requests 10] [--max-tokens 64] [--json]

Both paths end in the same replica and engine, so (proxy path - handle path) is what the proxy and the ingress
replica add (HTTP parse, two Ray streaming hops instead of one, SSE re-framing); the handle path against vLLM's own
server (``bench/serve.py`` at 1 stream) is the LLM server replica's own cost. Reported: median time to first
content token and to the last token.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import secrets
import statistics
import sys
import tempfile
import time
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from serve import EXAMPLE, WORK  # bench/serve.py

from raytpu import local
from raytpu.local.deploy import deploy_serve
from raytpu.local.from_config import serving_workload
from raytpu.workloads import tiny_llm


async def _proxy(url: str, model: str, max_tokens: int, seed: int) -> tuple[float, float]:
    import openai

    client = openai.AsyncOpenAI(base_url=url, api_key="unused", max_retries=0, timeout=600)
    try:
        t0 = time.perf_counter()
        first = 0.0
        stream = await client.chat.completions.create(
            model=model, messages=[{"role": "user", "content": f"Tell me about slice {seed}."}], stream=True,
            max_tokens=max_tokens, temperature=1.0, seed=seed, extra_body={"ignore_eos": True})
        async for chunk in stream:
            if not first and chunk.choices and chunk.choices[0].delta.content:
                first = time.perf_counter() - t0
        return first, time.perf_counter() - t0
    finally:
        await client.close()


async def _handle(handle: Any, model: str, max_tokens: int, seed: int) -> tuple[float, float]:
    from ray.llm._internal.serve.core.configs.openai_api_models import ChatCompletionRequest

    request = ChatCompletionRequest(model=model, messages=[{"role": "user", "content": f"Tell me about slice {seed}."}],
                                    stream=True, max_tokens=max_tokens, temperature=1.0, seed=seed, ignore_eos=True)
    t0 = time.perf_counter()
    first = 0.0
    async for batch in handle.options(stream=True).chat.remote(request):
        for item in batch if isinstance(batch, list) else [batch]:
            text = item if isinstance(item, str) else ""
            if not first and '"content":"' in text and '"content":""' not in text:
                first = time.perf_counter() - t0
    return first, time.perf_counter() - t0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--requests", type=int, default=10)
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("RAY_AUTH_TOKEN", secrets.token_hex(32))
    model = tiny_llm.ensure(None)
    os.environ[tiny_llm.ENV_CACHE_DIR] = str(model.path.parent)
    out: dict[str, Any] = {"requests": args.requests, "max_tokens": args.max_tokens, "load_avg": [os.getloadavg()[0]]}
    with tempfile.TemporaryDirectory(prefix="raytpu-bench-hops-") as directory:
        try:
            cluster = local.start(WORK.plan, 1, directory)
            url, served = deploy_serve(cluster, serving_workload(cluster, str(EXAMPLE), WORK.name), 600.0)
            import ray
            from ray import serve

            ray.init(address=cluster.address, log_to_driver=False)
            app = serve.status().applications["llm"]
            server = next(name for name in app.deployments if name.startswith("LLMServer"))
            handle = serve.get_deployment_handle(server, app_name="llm")

            async def run(path: str) -> dict[str, float]:
                firsts, totals = [], []
                for i in range(args.requests + 1):  # the first one warms the path up
                    first, total = await (_proxy(url, served, args.max_tokens, i) if path == "proxy"
                                          else _handle(handle, served, args.max_tokens, i))
                    if i:
                        firsts.append(first)
                        totals.append(total)
                return {"ttft_p50_s": statistics.median(firsts), "total_p50_s": statistics.median(totals)}

            async def interleaved() -> None:  # one event loop: a Serve handle stays on the loop it started on
                for path in ("proxy", "handle", "proxy", "handle"):
                    fig = await run(path)
                    for key, value in fig.items():
                        out.setdefault(path, {}).setdefault(key, []).append(value)

            asyncio.run(interleaved())
            ray.shutdown()
        finally:
            local.stop(directory)
    out["load_avg"].append(os.getloadavg()[0])
    for path in ("proxy", "handle"):
        out[path] = {k: statistics.median(v) for k, v in out[path].items()}
    out["proxy_and_ingress_add_s"] = {k: out["proxy"][k] - out["handle"][k] for k in out["proxy"]}
    print(json.dumps(out, indent=2) if args.json else
          "\n".join(f"{p:>28}: TTFT p50 {out[p]['ttft_p50_s'] * 1000:6.1f} ms, last token p50 "
                    f"{out[p]['total_p50_s'] * 1000:6.1f} ms" for p in ("proxy", "handle")) +
          f"\nproxy + ingress add: TTFT {out['proxy_and_ingress_add_s']['ttft_p50_s'] * 1000:.1f} ms, last token "
          f"{out['proxy_and_ingress_add_s']['total_p50_s'] * 1000:.1f} ms (load {out['load_avg']})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
