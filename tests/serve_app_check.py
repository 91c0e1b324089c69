"""Builds a RayService's Serve application the way Ray Serve deploys it, in the Python that runs this file.

``python serve_app_check.py APP_JSON RAY_TEMP_DIR`` takes one application of a ``serveConfigV2`` (what
:func:`raytpu.core.manifests.serving.serve_config` emits), builds each of its ``llm_configs`` as
``ray.serve.llm.LLMConfig``, calls the builder its ``import_path`` names with its ``args``
(``ray.serve.llm:build_openai_app``), builds the application (``ray.serve._private.build_app.build_app``, what
``serve.run`` and the controller's config deploy call) and round-trips every deployment's config through protobuf bytes,
as Serve does on every deploy (``ray.serve._private.deploy_utils.get_deploy_args`` sends
``DeploymentConfig.to_proto_bytes()``; the controller reads it with ``DeploymentConfig.from_proto_bytes``, whose
``_proto_to_dict`` reads ``FieldDescriptor.label`` in Ray 2.56, which protobuf 7 removed). Prints the Ray and protobuf
versions, the HAProxy binary this Ray resolves and one line per deployment; exits non-zero on the first failure. The
builder needs a running Ray (Ray 2.56 ``LLMServer.get_deployment_options`` reads the job's runtime env), as it has
inside a RayService: a one-CPU Ray node is started under RAY_TEMP_DIR and shut down at the end. Run by
``tests/test_images.py`` inside the serving image's CPU twin, with the kit's core zip on ``PYTHONPATH`` (the app's
``py_modules``).
"""

from __future__ import annotations

import importlib
import json
import sys


def main(app_json: str, ray_temp_dir: str) -> int:
    import google.protobuf  # type: ignore[import-untyped]
    import ray
    from ray.serve._private.build_app import build_app
    from ray.serve._private.config import DeploymentConfig
    from ray.serve.llm import LLMConfig

    app = json.loads(app_json)
    print(f"ray {ray.__version__} protobuf {google.protobuf.__version__}", flush=True)
    from ray.serve._private import haproxy  # the binary Serve's HAProxy mode would run, resolved as this Ray does

    try:
        binary = haproxy._resolve_haproxy_binary()
    except FileNotFoundError as exc:  # reported, and the build goes on: the base alone has no HAProxy
        binary = f"none ({exc})"
    print(f"haproxy binary: {binary}", flush=True)
    if app["import_path"].startswith("raytpu."):  # serve.ingress awaits an ingress __init__ only if it is async
        import inspect

        from raytpu.workloads.openai_ingress import LLMServer

        print(f"LLMServer.__init__ is a coroutine function: {inspect.iscoroutinefunction(LLMServer.__init__)}")
    for config in app["args"]["llm_configs"]:
        LLMConfig(**config)
    ray.init(num_cpus=1, include_dashboard=False, object_store_memory=80 * 2**20, _temp_dir=ray_temp_dir)
    try:
        module, _, name = app["import_path"].partition(":")
        built = build_app(getattr(importlib.import_module(module), name)(app["args"]), name=app["name"])
        for deployment in built.deployments:
            config = deployment._deployment_config
            assert DeploymentConfig.from_proto_bytes(config.to_proto_bytes()) == config, deployment.name
            print(f"deployment {deployment.name}: ok")
    finally:
        ray.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2]))
