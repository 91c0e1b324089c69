"""The serving workload on the local emulated slice: the CPU twin of the slice's Ray Serve LLM app, deployed.

The same :func:`raytpu.core.manifests.serving.serve_config` app with vLLM's CPU build and the tiny offline model;
it prints ``endpoint:`` and ``model:`` once the app answers and exits, the app running until ``raytpu local down``.
Progress goes to stderr. Needs ``ray[serve,llm]`` and vLLM (``.venv-serve``). Details: docs/FACTS.md#ray-serve-cpu-twin.
"""

from __future__ import annotations

import importlib
import json
import logging
import os
import socket
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass

from raytpu.core.common import errors
from raytpu.core.common.errors import RuntimeFailure, missing
from raytpu.core.common.timeline import EMULATED, Stamp, stamp, stamp_line
from raytpu.core.manifests import serving
from raytpu.core.specs.spec import WorkloadSpec
from raytpu.workloads import tiny_llm
from raytpu.workloads.support._entry import Parser, guarded


@dataclass(frozen=True)
class Endpoint:
    """A deployed app: its OpenAI base URL (``http://127.0.0.1:PORT/v1``) and served model name; ``running_wall``:
    when Serve first reported it ``RUNNING`` (``time.time()``), for the run's timeline."""

    url: str
    model: str
    running_wall: float | None = None


def free_port() -> int:
    """A free TCP port on 127.0.0.1."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _say(line: str) -> None:
    sys.stderr.write(f"raytpu serve: {line}\n")
    sys.stderr.flush()


def deploy_local(address: str, work: WorkloadSpec, *, port: int | None = None, cache_dir: str | None = None,
                 timeout_s: float = 300.0, progress: Callable[[str], None] = _say,
                 api_key_file: str | None = None) -> Endpoint:
    """Deploys the CPU twin of ``work``'s app onto the Ray cluster at ``address``; returns once it answers.

    InvalidInput when vLLM's parser rejects the engine kwargs; RuntimeFailure when the app fails to deploy or does
    not answer within ``timeout_s``. Proxy and port: docs/FACTS.md#ray-serve-cpu-twin.
    """
    tiny = tiny_llm.ensure(cache_dir)
    config = serving.serve_config(work, cpu_model=(tiny.name, str(tiny.path)),
                                  api_key_file=os.path.abspath(api_key_file) if api_key_file else None)
    app = config["applications"][0]
    serving.parse_with_vllm(app["args"]["llm_configs"][0]["engine_kwargs"])

    import ray
    from ray import serve
    from ray.serve.context import _get_global_client

    ray.init(address=address, log_to_driver=False, logging_level=logging.ERROR, configure_logging=False)
    try:
        serve.start(proxy_location="HeadOnly", http_options={"host": "127.0.0.1", "port": port or free_port()})
        client = _get_global_client()
        bound = client.http_config.port if client is not None else port
        progress(f"deploying {tiny.name} ({tiny.path}) as app {app['name']!r}, Serve HTTP on 127.0.0.1:{bound}")
        t0 = time.monotonic()
        module, _, builder = app["import_path"].partition(":")
        built = getattr(importlib.import_module(module), builder)(app["args"])
        serve._run(built, name=app["name"], route_prefix=app["route_prefix"], _blocking=False)
        _wait_running(app["name"], t0 + timeout_s, progress)
        endpoint = Endpoint(f"http://127.0.0.1:{bound}/v1", tiny.name, time.time())
        wait_answering(endpoint, t0 + timeout_s)
        progress(f"app {app['name']!r} answers after {time.monotonic() - t0:.1f}s")
        return endpoint
    finally:
        ray.shutdown()


def _wait_running(app_name: str, deadline: float, progress: Callable[[str], None]) -> None:
    from ray import serve

    last = ""
    while True:
        app = serve.status().applications.get(app_name)
        state = str(getattr(app, "status", "NOT_STARTED")).rsplit(".", 1)[-1]
        if state != last:
            progress(f"app {app_name!r}: {state}")
            last = state
        if state == "RUNNING":
            return
        if state in ("DEPLOY_FAILED", "UNHEALTHY"):
            said = [errors.exception_line(app.message if app else "")] + [
                f"deployment {name}: {errors.exception_line(d.message)}"
                for name, d in (app.deployments.items() if app else []) if d.message]
            raise RuntimeFailure(f"serve: app {app_name!r} is {state}: " + "; ".join(s for s in said if s)[:600],
                                 "fix what it names (the app's import, its requirements, what a deployment asks of "
                                 "a host), then deploy again")
        if time.monotonic() > deadline:
            raise RuntimeFailure(f"serve: app {app_name!r} still {state} at the deploy timeout",
                                 "a larger --deploy-timeout-s")
        time.sleep(1.0)


def wait_answering(endpoint: Endpoint, deadline: float) -> None:
    """Returns once ``endpoint``'s ``/v1/models`` lists its model; RuntimeFailure at ``deadline``."""
    while True:
        try:
            with urllib.request.urlopen(f"{endpoint.url}/models", timeout=5) as resp:
                if any(m.get("id") == endpoint.model for m in json.loads(resp.read()).get("data", [])):
                    return
        except (OSError, urllib.error.URLError, ValueError):
            pass
        if time.monotonic() > deadline:
            raise RuntimeFailure(f"serve: {endpoint.url}/models does not list {endpoint.model} at the deploy timeout")
        time.sleep(0.5)


def reserved_stamp(running_wall: float) -> Stamp:
    """The ``reserved`` phase of a local serving run (:mod:`raytpu.core.common.timeline`): the app ``RUNNING``, so its
    replica is placed and its engine loaded. Emulated: the CPU twin's replica takes ``{"CPU": 1}`` bundles
    (:data:`raytpu.core.manifests.serving.CPU_TWIN`) where on GKE Ray Serve LLM reserves the slice's TPU bundles."""
    return stamp("reserved", "app RUNNING: its replica placed in {\"CPU\": 1} bundle(s) (the CPU twin, "
                 "raytpu.core.manifests.serving.CPU_TWIN; on GKE a whole slice's TPU bundles) and vLLM's engine loaded",
                 EMULATED, wall=running_wall)


def main(argv: list[str] | None = None) -> int:
    parser = Parser(prog="python -m raytpu.workloads.serve", description=__doc__.split("\n")[0])
    parser.add_argument("--address", default=None, help="Ray GCS address (default $RAY_ADDRESS)")
    parser.add_argument("--port", type=int, default=None, help="Serve HTTP port (default: a free one)")
    parser.add_argument("--cache-dir", default=None, help=f"tiny model cache (default ${tiny_llm.ENV_CACHE_DIR} "
                        f"or {tiny_llm.DEFAULT_CACHE_DIR})")
    parser.add_argument("--deploy-timeout-s", type=float, default=300.0)
    parser.add_argument("--api-key-file", default=None, help="require the API key in this file on every request")
    args = parser.parse_args(argv)

    def body() -> int:
        work = WorkloadSpec.from_env()
        address = args.address or os.environ.get("RAY_ADDRESS")
        if not address:
            raise missing("address", "to deploy onto a running cluster",
                          "--address or RAY_ADDRESS of a running cluster (`raytpu local up`)")
        endpoint = deploy_local(address, work, port=args.port, cache_dir=args.cache_dir,
                                timeout_s=args.deploy_timeout_s, api_key_file=args.api_key_file)
        print(f"endpoint: {endpoint.url}")
        print(f"model: {endpoint.model}")
        if endpoint.running_wall is not None:
            print(stamp_line(reserved_stamp(endpoint.running_wall)), flush=True)
        return 0

    return guarded(body)


if __name__ == "__main__":
    raise SystemExit(main())
