"""Serve tier: Ray Serve LLM on vLLM's CPU build, end to end on the emulated slice, through the official client.

Runs in ``.venv-serve`` (``requirements-serve.lock``, ``make test`` runs it after the main suite); in any
environment without vLLM, ``openai`` or ``transformers`` the whole module is skipped with the reason. One
deployment per module: the example's serving workload deployed by ``raytpu local serve`` (the CLI, in a child
process) onto an emulated slice; the replica-kill test runs last. Peak memory of the tier is printed at the end.
"""

from __future__ import annotations

import asyncio
import dataclasses
import importlib.util
import json
import os
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pydantic
import pytest

from raytpu.config import load
from raytpu.core.common.errors import InvalidInput
from raytpu.core.manifests import kuberay, serving
from raytpu.core.specs import kinds
from raytpu.core.specs.serving import vllm_rules
from raytpu.core.specs.spec import SliceSpec, WorkloadSpec
from raytpu.core.tpu.catalog import GENERATIONS
from raytpu.local.running.llm_client import StreamResult, astream_chat, stream_chat
from raytpu.local.slice import memory, procs, startup, state

pytestmark = pytest.mark.serve

_MISSING = [m for m in ("vllm", "openai", "transformers", "ray.serve.llm")
            if importlib.util.find_spec(m.split(".")[0]) is None]
if _MISSING:
    pytest.skip(f"serve tier needs {', '.join(_MISSING)} (vLLM's CPU build): run it in .venv-serve "
                "(`make test-serve`)", allow_module_level=True)

import openai  # noqa: E402
from image_refs import FIXTURE_IMAGES  # noqa: E402
from transformers import AutoTokenizer  # noqa: E402

from raytpu.workloads import tiny_llm  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = [ROOT / "raytpu.example.yaml", ROOT / "examples" / "autopilot.yaml"]
SERVE = next(w for w in load(EXAMPLES[0]).workloads if w.kind.takes_model)
API_KEY = "sk-raytpu-serve-tier"
"""The app runs behind an API key, as a RayService with ``security.serve_api_key_secret`` does."""
REPLICA_TAG = "ServeReplica:llm:LLMServer"
"""Process title of the LLM replica actor (``ray::ServeReplica:<app>:LLMServer:<model>``)."""


@dataclasses.dataclass
class Endpoint:
    url: str
    model: str


@dataclasses.dataclass
class Deployment:
    cluster: state.LocalCluster
    endpoint: Endpoint
    model_dir: Path
    deploy_s: float
    tokenizer: Any

    def client(self, api_key: str = API_KEY, **kw: Any) -> openai.OpenAI:
        return openai.OpenAI(base_url=self.endpoint.url, api_key=api_key, max_retries=0, timeout=120, **kw)


@pytest.fixture(scope="module")
def deployment(tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest) -> Iterator[Deployment]:
    """The example's serving slice, emulated, with its app (CPU twin) deployed by `raytpu local serve`."""
    run_dir = tmp_path_factory.mktemp("serve-local")
    cache = tmp_path_factory.mktemp("tiny-llm")
    key_file = run_dir / "api-key"
    key_file.write_text(API_KEY + "\n")
    env = {**os.environ, "HF_HUB_OFFLINE": "1", tiny_llm.ENV_CACHE_DIR: str(cache)}
    peak = memory.PeakMemory(tag_prefix=os.environ.get(state.ENV_TMP_PREFIX, state.TMP_PREFIX))
    peak.__enter__()
    timings = ""
    try:
        cluster = startup.start(SERVE.plan, 1, run_dir, timeout_s=240)
        t0 = time.monotonic()
        done = subprocess.run([sys.executable, "-m", "raytpu", "local", "--dir", str(run_dir), "serve",
                               "--config", str(EXAMPLES[0]), "--timeout-s", "400", "--api-key-file", str(key_file)],
                              cwd=ROOT, env=env,
                              capture_output=True, text=True, timeout=520)
        assert done.returncode == 0, done.stderr[-4000:]
        lines = dict(line.split(": ", 1) for line in done.stdout.splitlines())
        assert set(lines) == {"endpoint", "model"}, done.stdout
        assert lines["endpoint"].startswith("http://127.0.0.1:") and lines["endpoint"].endswith("/v1")
        model = tiny_llm.ensure(cache)
        assert lines["model"] == model.name
        deploy_s = time.monotonic() - t0
        timings = f"cluster up in {cluster.started_s:.1f}s, app deployed in {deploy_s:.1f}s; "
        yield Deployment(cluster, Endpoint(lines["endpoint"], lines["model"]), model.path,
                         deploy_s, AutoTokenizer.from_pretrained(model.path))
    finally:
        procs.stop(run_dir)
        peak.__exit__(None, None, None)
        reporter = request.config.pluginmanager.get_plugin("terminalreporter")
        capture = request.config.pluginmanager.get_plugin("capturemanager")
        if reporter is not None and capture is not None:
            with capture.global_and_fixture_disabled():
                reporter.write_line(f"serve tier: {timings}peak memory: {peak.peak_pss_bytes / 2**30:.2f} GiB PSS "
                                    f"({peak.peak_rss_bytes / 2**30:.2f} GiB RSS sum)")


# ------------------------------------------------------------------------------ configs and engine kwargs


def _llm_serving_args(args: dict[str, Any]) -> Any:
    from ray.llm._internal.serve.core.ingress.builder import LLMServingArgs

    return LLMServingArgs.model_validate(args)


def _parsed(config: dict[str, Any]) -> Any:
    """serveConfigV2 through Serve's deploy schema and Ray Serve LLM's models; the engine config of its LLM."""
    from ray.llm._internal.serve.engines.vllm.vllm_models import VLLMEngineConfig
    from ray.serve.schema import ServeDeploySchema

    ServeDeploySchema.model_validate(config)
    (app,) = config["applications"]
    assert app["import_path"] in (serving.BUILDER, serving.DIRECT_BUILDER)  # both take LLMServingArgs' shape
    (llm,) = _llm_serving_args(app["args"]).llm_configs
    return VLLMEngineConfig.from_llm_config(llm)


def _assert_one_bundle_per_host(engine: Any, plan: Any) -> None:
    """A replica reserves one worker bundle per host of its slice: Ray Serve LLM's ``TPUAccelerator`` hands the
    first of its bundles to ``slice_placement_group``, which counts workers from the topology (Ray 2.60
    ``ray/util/tpu.py`` ``get_tpu_worker_resources``). The bundle list itself has TP / chips-per-host entries
    (``default_bundles``): twice the hosts on tpu7x, whose TP counts 2 JAX devices per chip (issue 18)."""
    from ray.util.tpu import get_tpu_worker_resources

    bundle = {"TPU": plan.chips_per_host, f"accelerator_type:{plan.ray_accelerator_type}": 0.001}
    assert all(b == bundle for b in engine.placement_bundles), (plan.topology, engine.placement_bundles)
    workers, _ = get_tpu_worker_resources(plan.topology, plan.ray_accelerator_type, resources_per_worker=bundle)
    assert workers == plan.hosts, (plan.generation, plan.topology)


def test_every_rayservice_of_the_examples_is_parsed_by_ray_serve_llm_and_vllm() -> None:
    """The serveConfigV2 of every RayService the workloads stack emits (``kuberay.workload_manifest``, what
    ``WorkloadsStack`` applies), through Ray Serve LLM's models, and its engine args through vLLM's own parser."""
    checked = 0
    for path in EXAMPLES:
        spec = load(path)
        for work in spec.workloads:
            if not work.kind.takes_model:
                continue
            manifest = kuberay.workload_manifest(spec, work, images=FIXTURE_IMAGES,
                                                 service_account="ray", bucket=spec.bucket)
            config = json.loads(manifest["spec"]["serveConfigV2"])
            engine = _parsed(config)
            _assert_one_bundle_per_host(engine, work.plan)
            serving.parse_with_vllm(config["applications"][0]["args"]["llm_configs"][0]["engine_kwargs"])
            checked += 1
    assert checked >= 2


def test_every_slice_shape_gives_a_serve_config_ray_serve_llm_parses() -> None:
    """Each Ray-reservable shape: Serve's deploy schema, LLMServingArgs, one bundle per host, deferred slice PG."""
    checked = 0
    for gen in GENERATIONS.values():
        for topology in (t for t in gen.topologies if t in gen.ray_topologies):
            item = SliceSpec.create(name="s", generation=gen.name, topology=topology, zone=gen.zones[0], count=2)
            work = WorkloadSpec(name="llm", kind=kinds.kind("serve"), slice=item, model="org/model")
            engine = _parsed(serving.serve_config(work))
            _assert_one_bundle_per_host(engine, item.plan)
            assert engine.accelerator.requires_deferred_placement_group  # slice_placement_group per replica
            checked += 1
    assert checked > 20


def test_the_kits_record_of_rays_chips_per_host_is_rays() -> None:
    """vllm_rules.ray_serve_chips_per_host, which validate uses to refuse unservable slices, is Ray's own rule."""
    from ray._private.accelerators.tpu import get_chips_per_host

    for gen in GENERATIONS.values():
        for topology in (t for t in gen.topologies if t in gen.ray_topologies):
            plan = SliceSpec.create(name="s", generation=gen.name, topology=topology, zone=gen.zones[0]).plan
            assert vllm_rules.ray_serve_chips_per_host(plan) == get_chips_per_host(topology, gen.ray_pod_prefix), plan


def test_the_serving_programs_import_everything_from_the_core_zip_in_the_serve_environment(tmp_path: Path) -> None:
    """The serving kind's stand-in environment (this one: Ray Serve LLM + vLLM's CPU build) with the kit's core
    zip on ``PYTHONPATH`` as ``py_modules`` puts it: the RayService's ingress and the local serve program import."""
    from import_check import run_with_core_zip

    done = run_with_core_zip(sys.executable, tmp_path, "raytpu.workloads.openai_ingress", "raytpu.workloads.serve",
                             "raytpu.workloads.tiny_llm")
    assert done.returncode == 0, done.stdout + done.stderr[-2000:]


def test_the_cpu_twin_is_one_cpu_bundle() -> None:
    engine = _parsed(serving.serve_config(SERVE, cpu_model=("tiny", "/models/tiny")))
    assert engine.placement_bundles == [{"CPU": 1}]
    assert not engine.accelerator.requires_deferred_placement_group


def test_recorded_engine_args_are_vllms() -> None:
    """VLLM_ENGINE_ARGS / VLLM_FRONTEND_ARGS are vLLM's own fields; its CLI parser accepts nothing else."""
    from vllm.engine.arg_utils import AsyncEngineArgs
    from vllm.entrypoints.launchers.cli_args import FrontendArgs
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    assert set(vllm_rules.VLLM_ENGINE_ARGS) == {f.name for f in dataclasses.fields(AsyncEngineArgs)}
    assert set(vllm_rules.VLLM_FRONTEND_ARGS) == {f.name for f in dataclasses.fields(FrontendArgs)}
    parser = FrontendArgs.add_cli_args(AsyncEngineArgs.add_cli_args(FlexibleArgumentParser()))
    dests = {a.dest for a in parser._actions if a.dest != "help"}
    assert dests <= set(vllm_rules.VLLM_ENGINE_ARGS) | set(vllm_rules.VLLM_FRONTEND_ARGS)
    import vllm

    assert vllm.__version__.split("+")[0] == vllm_rules.VLLM_VERSION


def test_recorded_engine_arg_bounds_are_vllms() -> None:
    """Every numeric bound vLLM's config dataclasses put on an engine arg (pydantic ``Field`` ge/gt/le/lt, read as
    ``annotated_types`` metadata) is the kit's record, None allowed where ``EngineArgs`` takes it, and each config
    refuses a value just past it."""
    import inspect
    import pkgutil
    import types
    import typing

    import annotated_types
    import vllm.config
    from vllm.engine.arg_utils import AsyncEngineArgs

    takes_none = {f.name for f in dataclasses.fields(AsyncEngineArgs)
                  if isinstance(f.type, types.UnionType) and type(None) in typing.get_args(f.type)}
    read: dict[str, vllm_rules.Bound] = {}
    refusals = 0
    for info in pkgutil.iter_modules(vllm.config.__path__):
        module = importlib.import_module(f"vllm.config.{info.name}")
        for _, cls in inspect.getmembers(module, inspect.isclass):
            if cls.__module__ != module.__name__:
                continue
            for name, field in (getattr(cls, "__pydantic_fields__", None) or {}).items():
                limits = {type(m).__name__.lower(): getattr(m, type(m).__name__.lower()) for m in field.metadata
                          if isinstance(m, (annotated_types.Ge, annotated_types.Gt, annotated_types.Le,
                                            annotated_types.Lt))}
                if (not limits or name not in vllm_rules.VLLM_ENGINE_ARGS or name in vllm_rules.KIT_ENGINE_ARGS
                        or name in vllm_rules.MULTIMODAL_ENGINE_ARGS):
                    continue
                args = typing.get_args(field.annotation) if isinstance(field.annotation, types.UnionType) else ()
                number = next(a for a in args or (field.annotation,) if a is not type(None))
                read[name] = vllm_rules.Bound(number, **limits, optional=name in takes_none)
                past = limits.get("ge", limits.get("gt", 1)) - 1 if {"ge", "gt"} & set(limits) else \
                    limits.get("le", limits.get("lt", 0)) + 1
                assert read[name].problem(past) is not None, (name, past)
                adapter: pydantic.TypeAdapter[Any] = pydantic.TypeAdapter(
                    typing.Annotated[field.annotation, *field.metadata])  # type: ignore[arg-type]
                with pytest.raises(pydantic.ValidationError):
                    adapter.validate_python(past)
                refusals += 1
    assert read == {name: bound._replace(needs=None) for name, bound in vllm_rules.ENGINE_ARG_BOUNDS_0_29.items()}
    assert refusals == len(read) >= 40


def test_vllms_parser_rejects_bad_values_the_name_check_lets_through() -> None:
    with pytest.raises(InvalidInput, match=r"rejected by vLLM 0\.29\.0's argument parser: .*max-num-seqs"):
        serving.parse_with_vllm({"max_num_seqs": "lots"})
    assert serving.parse_with_vllm({"max_model_len": 512, "enforce_eager": True})["max_model_len"] == 512


# ------------------------------------------------------------------------------------- the OpenAI API


def test_models_lists_the_served_model(deployment: Deployment) -> None:
    ids = [m.id for m in deployment.client().models.list().data]
    assert ids == [deployment.endpoint.model]


def test_completion_usage_matches_the_tokenizer(deployment: Deployment) -> None:
    prompt = "A TPU slice is a group of chips"
    res = deployment.client().completions.create(model=deployment.endpoint.model, prompt=prompt, max_tokens=12,
                                                 temperature=0, logprobs=1)
    choice = res.choices[0]
    assert res.usage is not None
    assert res.usage.prompt_tokens == len(deployment.tokenizer(prompt).input_ids)  # BOS + BPE tokens
    assert choice.logprobs is not None and len(choice.logprobs.tokens or []) == res.usage.completion_tokens
    assert res.usage.completion_tokens == 12 or choice.finish_reason == "stop"
    assert res.usage.total_tokens == res.usage.prompt_tokens + res.usage.completion_tokens


def test_chat_usage_matches_the_chat_template(deployment: Deployment) -> None:
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "What is Ray?"}]
    res = deployment.client().chat.completions.create(model=deployment.endpoint.model, messages=messages,  # type: ignore[arg-type,unused-ignore]
                                                      max_tokens=10, temperature=0)
    templated = deployment.tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    expected = len(deployment.tokenizer(templated, add_special_tokens=False).input_ids)
    assert res.usage is not None and res.usage.prompt_tokens == expected
    assert res.choices[0].message.role == "assistant"
    assert res.usage.completion_tokens == 10 or res.choices[0].finish_reason == "stop"


def test_streaming_gives_the_same_answer_and_usage(deployment: Deployment) -> None:
    client = deployment.client()
    whole = client.chat.completions.create(model=deployment.endpoint.model, max_tokens=16, temperature=0,
                                           messages=[{"role": "user", "content": "Stream, please."}])
    streamed = stream_chat(client, deployment.endpoint.model, "Stream, please.", max_tokens=16, temperature=0)
    assert whole.usage is not None
    assert streamed.text == whole.choices[0].message.content
    assert (streamed.prompt_tokens, streamed.completion_tokens) == (whole.usage.prompt_tokens,
                                                                    whole.usage.completion_tokens)
    assert 0 < streamed.ttft_s <= streamed.duration_s
    chunks = list(client.completions.create(model=deployment.endpoint.model, prompt="Once", max_tokens=8,
                                            temperature=0, stream=True))
    assert sum(1 for c in chunks if c.choices and c.choices[0].text) >= 1


def _chat_with_unknown_model(deployment: Deployment) -> openai.NotFoundError:
    with pytest.raises(openai.NotFoundError) as exc:
        deployment.client().chat.completions.create(model="no-such-model", max_tokens=4,
                                                    messages=[{"role": "user", "content": "hi"}])
    return exc.value


def _completion_with_unknown_model(deployment: Deployment) -> openai.NotFoundError:
    with pytest.raises(openai.NotFoundError) as exc:
        deployment.client().completions.create(model="no-such-model", prompt="hi", max_tokens=4)
    return exc.value


def test_unknown_model_is_a_404(deployment: Deployment) -> None:
    """Chat, completions and model lookup of an unknown model: the official client raises NotFoundError (404)."""
    chat = _chat_with_unknown_model(deployment)
    assert chat.status_code == 404 and "no-such-model" in chat.response.text
    assert "no-such-model" in _completion_with_unknown_model(deployment).response.text
    with pytest.raises(openai.NotFoundError) as lookup:
        deployment.client().models.retrieve("no-such-model")
    error = lookup.value.response.json()["error"]  # OpenAI's shape here
    assert {"message", "type", "code"} <= error.keys() and error["code"] == 404
    assert "no-such-model" in lookup.value.message


def test_unknown_model_chat_and_completion_errors_have_openais_shape(deployment: Deployment) -> None:
    """Ray 2.60's own ingress answers ``{"detail": ...}`` here; the kit's app answers OpenAI's ``{"error": {message,
    type, param, code}}``, which the official client reads: vLLM's own OpenAI app does (direct streaming), and on a
    multi-host slice the kit's ingress (``raytpu.workloads.openai_ingress``). Its ``type`` is the answering
    server's own name for a 404 (vLLM 0.29 ``NotFoundError``; Ray's model lookup ``Not Found``)."""
    with pytest.raises(openai.NotFoundError) as lookup:
        deployment.client().models.retrieve("no-such-model")
    shape = lookup.value.response.json()["error"]  # Ray's own OpenAI-shaped error (/v1/models/{id})
    for error in (_chat_with_unknown_model(deployment), _completion_with_unknown_model(deployment)):
        body = error.response.json()
        assert isinstance(body.get("error"), dict), body
        assert body["error"].keys() == shape.keys() and body["error"]["code"] == 404, body
        assert isinstance(body["error"]["type"], str) and body["error"]["type"], body
        assert "no-such-model" in error.message


def test_a_request_without_an_authorization_header_is_a_401(deployment: Deployment) -> None:
    """(The official client refuses to send a request without a key, so this one is plain HTTP.)"""
    body = json.dumps({"model": deployment.endpoint.model, "prompt": "hi", "max_tokens": 4}).encode()
    request = urllib.request.Request(f"{deployment.endpoint.url}/completions", data=body,
                                     headers={"Content-Type": "application/json"})
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(request, timeout=60)
    assert refused.value.code == 401
    assert "API key" in json.loads(refused.value.read())["error"]["message"]


@pytest.mark.parametrize("key", ["sk-wrong", API_KEY + "x", API_KEY[:-1]])
def test_a_request_with_a_wrong_api_key_is_refused_in_openais_shape(deployment: Deployment, key: str) -> None:
    """Every request that reaches the model needs ``Authorization: Bearer <key>`` (the official client sends its
    ``api_key`` so); the answer is a 401 the client raises as ``AuthenticationError``, in OpenAI's error shape."""
    client = deployment.client(api_key=key)
    with pytest.raises(openai.AuthenticationError) as refused:
        client.chat.completions.create(model=deployment.endpoint.model, max_tokens=4,
                                       messages=[{"role": "user", "content": "hi"}])
    error = refused.value.response.json()["error"]
    assert error["code"] == 401 and "API key" in error["message"], error  # type: the exception's class (Ray's shape)
    with pytest.raises(openai.AuthenticationError):
        client.completions.create(model=deployment.endpoint.model, prompt="hi", max_tokens=4)
    assert [m.id for m in client.models.list().data] == [deployment.endpoint.model]  # the list stays readable


def test_sixteen_concurrent_streams_all_complete(deployment: Deployment) -> None:
    async def run() -> list[StreamResult]:
        client = openai.AsyncOpenAI(base_url=deployment.endpoint.url, api_key=API_KEY, max_retries=0, timeout=300)
        try:
            return await asyncio.gather(*(astream_chat(client, deployment.endpoint.model, f"Request {i}",
                                                             max_tokens=24, temperature=1.0, seed=i)
                                          for i in range(16)))
        finally:
            await client.close()

    results = asyncio.run(run())
    assert len(results) == 16
    for res in results:
        assert res.finish_reason in ("length", "stop")
        assert res.completion_tokens == 24 or res.finish_reason == "stop"


def _replica_pids(cluster: state.LocalCluster) -> set[int]:
    pids = set()
    for pid in procs.tagged_processes(cluster.temp_dir):
        try:
            title = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if REPLICA_TAG in title:
            pids.add(pid)
    return pids


def test_a_replica_killed_mid_stream_is_replaced(deployment: Deployment) -> None:
    """SIGKILL the LLM replica while 4 long streams run: they end early, Serve starts a new replica, serving resumes.

    Ray Serve LLM 2.60 ends a stream whose replica died without an error event: the client sees the stream
    stop before ``max_tokens`` with no ``finish_reason``. On a quiet machine the tiny model can generate every token
    before the kill lands (the engine runs ahead of the streaming path: all 4 streams were seen to deliver their 1000
    tokens after the kill); such a round tested nothing, so it is played again on the replacement replica, up to 3
    rounds, and one round must see every stream cut short.
    """
    client = deployment.client()
    streams = 4
    rounds: list[list[dict[str, Any]]] = []
    for _ in range(3):
        before = _replica_pids(deployment.cluster)
        assert len(before) == 1, before
        for _ in range(2):  # warm path: the first chunk must come long before the last token is generated
            client.completions.create(model=deployment.endpoint.model, prompt="warm", max_tokens=4)
        # the kill comes as soon as every stream is accepted and one has its first chunk: the engine keeps
        # generating whatever the client does, so waiting longer lets it reach max_tokens first
        accepted = [threading.Event() for _ in range(streams)]
        started = threading.Event()
        outcomes: list[dict[str, Any]] = [{} for _ in range(streams)]

        def long_stream(i: int, out: dict[str, Any], accepted: threading.Event, started: threading.Event) -> None:
            out["chunks"], out["finish"] = 0, None
            try:
                stream = client.completions.create(model=deployment.endpoint.model, prompt=f"Go {i}",
                                                   max_tokens=1000, temperature=1.0, seed=i, stream=True,
                                                   extra_body={"ignore_eos": True})
                accepted.set()
                for chunk in stream:
                    out["chunks"] += 1
                    started.set()
                    if chunk.choices and chunk.choices[0].finish_reason:
                        out["finish"] = chunk.choices[0].finish_reason
            except Exception as exc:  # a broken stream may also surface as an API or connection error
                out["error"] = repr(exc)
            finally:
                accepted.set()

        workers = [threading.Thread(target=long_stream, args=(i, outcomes[i], accepted[i], started), daemon=True)
                   for i in range(streams)]
        for worker in workers:
            worker.start()
        assert all(event.wait(120) for event in accepted) and started.wait(120), outcomes
        os.kill(next(iter(before)), signal.SIGKILL)
        for worker in workers:
            worker.join(120)
        rounds.append(outcomes)
        _wait_serving(client, deployment, before)
        if all(o.get("finish") != "length" for o in outcomes):  # none finished normally
            break
    assert all(o.get("finish") != "length" for o in rounds[-1]), rounds


def _wait_serving(client: Any, deployment: Deployment, before: set[int]) -> None:
    """Waits until a new replica (not one of ``before``) answers; prints how long it took."""
    t0 = time.monotonic()
    deadline = t0 + 300
    while True:
        try:
            res = client.chat.completions.create(model=deployment.endpoint.model, max_tokens=4,
                                                 messages=[{"role": "user", "content": "back?"}])
            if res.usage is not None and res.usage.completion_tokens > 0:
                break
        except (openai.APIError, openai.APIConnectionError):
            pass
        assert time.monotonic() < deadline, "serving did not resume within 300 s of the replica kill"
        time.sleep(2)
    after = _replica_pids(deployment.cluster)
    assert after and not (after & before), (before, after)
    print(json.dumps({"recovered_s": round(time.monotonic() - t0, 1)}))
