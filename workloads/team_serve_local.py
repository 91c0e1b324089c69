"""A team's own Serve app (``serve_app``) on the local emulated slice, as a RayService's serveConfigV2 deploys it on
GKE: the same config (:func:`raytpu.core.manifests.team_serving.serve_config`) through Serve's declarative API, so
the app is built in its own runtime env (the team's code zip as ``working_dir``), never imported here. It prints
``endpoint:`` once the app answers and exits, the app running until ``raytpu local down``. Progress on stderr.

Reads the serveConfigV2 app as JSON in ``$RAYTPU_SERVE_CONFIG`` (``raytpu local serve`` sets it).
Source: Ray 2.60 ``ray.serve._private.client.ServeControllerClient.deploy_apps`` (what the dashboard's
``PUT /api/serve/applications/`` calls with KubeRay's serveConfigV2).
"""

from __future__ import annotations

import json
import logging
import os
import sys
import time
import urllib.error
import urllib.request

from raytpu.core.common.errors import RuntimeFailure, missing
from raytpu.workloads.serve import _wait_running, free_port
from raytpu.workloads.support._entry import Parser, guarded

CONFIG_ENV = "RAYTPU_SERVE_CONFIG"


def _say(line: str) -> None:
    sys.stderr.write(f"raytpu serve: {line}\n")
    sys.stderr.flush()


def deploy(address: str, config: dict[str, object], timeout_s: float, port: int | None = None) -> str:
    """Deploys ``config`` (a ServeDeploySchema's dict) onto the cluster at ``address``; its URL once it answers."""
    import ray
    from ray import serve
    from ray.serve.context import _get_global_client
    from ray.serve.schema import ServeDeploySchema

    schema = ServeDeploySchema.model_validate(config)
    [app] = schema.applications
    ray.init(address=address, log_to_driver=False, logging_level=logging.ERROR, configure_logging=False)
    try:
        serve.start(proxy_location="HeadOnly", http_options={"host": "127.0.0.1", "port": port or free_port()})
        client = _get_global_client()
        assert client is not None
        bound = client.http_config.port
        _say(f"deploying {app.name!r} ({app.args.get('serve_app')}), Serve HTTP on 127.0.0.1:{bound}")
        t0 = time.monotonic()
        client.deploy_apps(schema)
        _wait_running(app.name, t0 + timeout_s, _say)
        url = f"http://127.0.0.1:{bound}{app.route_prefix or '/'}"
        _wait_answering(url, t0 + timeout_s)
        _say(f"app {app.name!r} answers after {time.monotonic() - t0:.1f}s")
        return url
    finally:
        ray.shutdown()


def _wait_answering(url: str, deadline: float) -> None:
    """Returns once Serve's proxy routes ``url`` to the app (any answer but 404/503: those are the proxy's own)."""
    while True:
        try:
            with urllib.request.urlopen(url, timeout=5):
                return
        except urllib.error.HTTPError as exc:
            if exc.code not in (404, 503):
                return
        except (OSError, ValueError):
            pass
        if time.monotonic() > deadline:
            raise RuntimeFailure(f"serve: {url} does not answer at the deploy timeout")
        time.sleep(0.5)


def main(argv: list[str] | None = None) -> int:
    parser = Parser(prog="python -m raytpu.workloads.team_serve_local",
                                     description=__doc__.split("\n")[0])
    parser.add_argument("--address", default=None, help="Ray GCS address (default $RAY_ADDRESS)")
    parser.add_argument("--port", type=int, default=None, help="Serve HTTP port (default: a free one)")
    parser.add_argument("--deploy-timeout-s", type=float, default=300.0)
    args = parser.parse_args(argv)

    def body() -> int:
        address = args.address or os.environ.get("RAY_ADDRESS")
        if not address:
            raise missing("address", "to deploy onto a running cluster",
                          "--address or RAY_ADDRESS of a running cluster (`raytpu local up`)")
        config = json.loads(os.environ[CONFIG_ENV])
        print(f"endpoint: {deploy(address, config, args.deploy_timeout_s, args.port)}", flush=True)
        return 0

    return guarded(body)


if __name__ == "__main__":
    raise SystemExit(main())
