"""The serving workload's spec and its Ray Serve LLM config (no Ray, no vLLM: the serve tier runs those).

Ray's rules cited here are Ray 2.60's (``ray/llm/_internal/serve``): ``accelerator_config`` with a TPU topology
makes each replica one ``slice_placement_group`` with one bundle per host (``configs/accelerators.py``
``TPUAccelerator``), and ``accelerator_type`` must be absent with ``kind: cpu`` (``engines/vllm/vllm_models.py``).
The serve tier (``tests/test_serve.py``) parses these configs with Ray's own models and vLLM's own parser.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

import pytest
import yaml
from test_cli import EXAMPLE, run_cli

from raytpu.core.common.errors import InvalidInputs
from raytpu.core.manifests import serving
from raytpu.core.specs import kinds
from raytpu.core.specs.runtime import xla_cache
from raytpu.core.specs.serving import vllm_rules
from raytpu.core.specs.spec import SERVING_FIELDS, SecretKeyRef, SliceSpec, WorkloadSpec

pytestmark = pytest.mark.unit

ZONE = "us-east5-b"


def _slice(topology: str = "4x4", count: int = 2, machine: str | None = None) -> SliceSpec:
    return SliceSpec.create(name="serve", generation="v6e", topology=topology, zone=ZONE, machine_type=machine,
                            count=count)


def _work(item: SliceSpec | None = None, kind: str = "serve", **extra: Any) -> WorkloadSpec:
    return WorkloadSpec(name="llm", kind=kinds.kind(kind), slice=item or _slice(), **extra)


def _problems(**extra: Any) -> dict[str, str]:
    with pytest.raises(InvalidInputs) as info:
        _work(**extra)
    return {p.field: f"{p.problem}; valid: {p.valid}" for p in info.value.problems}


def test_a_multi_host_replica_reserves_one_whole_slice_and_shards_over_all_its_chips() -> None:
    work = _work(_slice("4x4", count=2), model="org/m", max_model_len=8192, engine_kwargs={"max_num_seqs": 64})
    llm = serving.llm_config(work)
    assert llm["accelerator_type"] == "TPU-V6E"
    assert llm["accelerator_config"] == {"kind": "tpu", "topology": "4x4"}
    assert llm["engine_kwargs"] == {"tensor_parallel_size": 16, "max_model_len": 8192,
                                    "distributed_executor_backend": "ray", "max_num_seqs": 64}
    assert llm["deployment_config"] == {"autoscaling_config": {"min_replicas": 2, "max_replicas": 2}}
    assert llm["model_loading_config"] == {"model_id": "org/m", "model_source": "org/m"}
    assert llm["runtime_env"]["env_vars"] == {
        "VLLM_XLA_CACHE_PATH": xla_cache.cache_dir("org/m", work.plan, vllm_rules.IMAGE_VLLM_VERSION),
        "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS": "0", "JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES": "-1",
        "TPU_MULTIHOST_BACKEND": "ray"}


def test_a_single_host_slice_serves_the_default_model_on_one_engine_process() -> None:
    llm = serving.llm_config(_work(_slice("2x4", count=3), slices=1))
    assert llm["model_loading_config"]["model_id"] == vllm_rules.DEFAULT_MODEL
    assert llm["engine_kwargs"] == {"tensor_parallel_size": 8, "max_model_len": vllm_rules.DEFAULT_MAX_MODEL_LEN}
    assert "TPU_MULTIHOST_BACKEND" not in llm["runtime_env"]["env_vars"]
    assert llm["deployment_config"]["autoscaling_config"] == {"min_replicas": 1, "max_replicas": 1}  # slices: 1


def test_pipeline_parallel_splits_the_slice_without_leaving_chips_idle() -> None:
    """One stage per host: tpu-inference (6af3d12) ``TPUWorker.init_device`` asserts a stage's TP fits one host's
    devices ("we can only do pp:4, tp:4, but not pp:2, tp:8" on 4 hosts of 4). This test asked for pp 2 (tp 8) on
    a v6e 4x4 of 4-chip hosts before issue 18, a layout that engine refuses; it now asks for pp 4 and
    test_bad_serving_fields_name_the_field_and_what_is_valid refuses pp 2."""
    llm = serving.llm_config(_work(engine_kwargs={"pipeline_parallel_size": 4}))
    assert (llm["engine_kwargs"]["tensor_parallel_size"], llm["engine_kwargs"]["pipeline_parallel_size"]) == (4, 4)


ZONES = {"v5p": "us-east5-a", "v6e": ZONE, "tpu7x": "us-central1-c"}


def _gen_slice(gen: str, topology: str, count: int = 1) -> SliceSpec:
    return SliceSpec.create(name="serve", generation=gen, topology=topology, zone=ZONES[gen], count=count)


@pytest.mark.parametrize(("gen", "topology", "tp"), [
    # tpu-inference's worker shards over jax.devices()[:TP] (tpu_inference/worker/tpu_worker.py
    # TPUWorker.init_device); an Ironwood chip is 2 JAX devices (jax/_src/mesh_utils.py _get_physical_tpu_mesh), and
    # tpu-inference's GKE multi-host example serves a tpu7x 2x2x2 (8 chips) with --tensor-parallel-size 16
    # (examples/offload/gke/benchmarks/multi-host/deploy-baseline.yaml)
    ("tpu7x", "2x2x2", 16),
    ("tpu7x", "2x2x1", 8),
    ("v6e", "4x4", 16),
    ("v5p", "2x2x4", 16),  # v5p: one megacore device per chip ("requires one device per chip (megacore mode)")
])
def test_a_replica_shards_over_every_jax_device_of_its_slice(gen: str, topology: str, tp: int) -> None:
    item = _gen_slice(gen, topology)
    assert vllm_rules.jax_devices(item.plan) == tp
    assert serving.llm_config(_work(item))["engine_kwargs"]["tensor_parallel_size"] == tp


def test_a_tpu7x_layout_that_uses_chips_not_devices_is_refused() -> None:
    """TP = chips on a tpu7x 2x2x2 leaves 8 of its 16 JAX devices idle (issue 18, item 3)."""
    problems = _problems(item=_gen_slice("tpu7x", "2x2x2"), engine_kwargs={"tensor_parallel_size": 8})
    assert problems["engine_kwargs.tensor_parallel_size"] == (
        "8 x pipeline_parallel_size 1 does not use the 8 chips (16 JAX devices) of the slice a replica reserves; "
        "valid: tensor_parallel_size x pipeline_parallel_size = 16 (vLLM on TPU shards over JAX devices: 2 per tpu7x "
        "chip)")
    _work(_gen_slice("tpu7x", "2x2x2"), engine_kwargs={"tensor_parallel_size": 8, "pipeline_parallel_size": 2})


HEADS = "has 16 attention heads, which tensor_parallel_size"
"""vLLM 0.29.0 vllm/config/model.py ModelConfig.verify_with_parallel_config: heads % TP == 0, else ValueError when the
engine starts; Qwen/Qwen3-0.6B has 16 attention heads (https://huggingface.co/Qwen/Qwen3-0.6B config.json)."""
REFUSED = (f"does not divide (vLLM {vllm_rules.VLLM_VERSION} refuses it when the engine starts: "
           "verify_with_parallel_config)")


@pytest.mark.parametrize(("gen", "topology", "extra", "field", "says"), [
    # the field named is what the workload set: the TP itself, else the weights (their TP is the slice's devices)
    ("v6e", "4x8", {}, "model", f"'Qwen/Qwen3-0.6B' {HEADS} 32 (the 32 JAX devices of this slice) {REFUSED}"),
    ("v6e", "8x8", {"model": vllm_rules.DEFAULT_MODEL}, "model", f"'Qwen/Qwen3-0.6B' {HEADS} 64 (the 64 JAX devices"),
    ("v6e", "4x8", {"model": "chat", "model_source": vllm_rules.DEFAULT_MODEL}, "model_source",
     f"'Qwen/Qwen3-0.6B' {HEADS} 32 (the 32 JAX devices"),
    ("tpu7x", "2x2x4", {}, "model", f"'Qwen/Qwen3-0.6B' {HEADS} 32 (the 32 JAX devices of this slice)"),
    ("v5p", "4x4x4", {"engine_kwargs": {"tensor_parallel_size": 64}}, "engine_kwargs.tensor_parallel_size",
     "64 does not divide the 16 attention heads of Qwen/Qwen3-0.6B (vLLM"),
])
def test_a_tp_that_does_not_divide_the_default_models_heads_is_refused_with_the_layouts_that_fit(
        gen: str, topology: str, extra: dict[str, Any], field: str, says: str) -> None:
    problems = _problems(item=_gen_slice(gen, topology), **extra)
    assert list(problems) == [field], problems
    problem, valid = problems[field].split("; valid: ")
    assert problem.startswith(says) and problem.endswith("verify_with_parallel_config)")
    plan = _gen_slice(gen, topology).plan
    per_host = vllm_rules.jax_devices(plan) // plan.hosts
    assert valid.startswith(f"pipeline_parallel_size {plan.hosts} (one stage per host, tensor_parallel_size "
                            f"{per_host}), or a {gen} slice of at most 16 JAX devices (")
    assert valid.endswith("or another model (model / model_source; vLLM checks its heads when the engine starts)")


@pytest.mark.parametrize(("gen", "topology", "extra"), [
    ("v6e", "4x8", {"engine_kwargs": {"pipeline_parallel_size": 8}}),  # TP 4 per host-stage divides 16
    ("tpu7x", "2x2x4", {"engine_kwargs": {"pipeline_parallel_size": 4}}),  # TP 8
    ("v6e", "4x8", {"model": "org/m"}),  # a model the kit does not know: vLLM checks it when the engine starts
    ("v6e", "4x8", {"model": "org/m", "model_source": "gs://my-data/models/big"}),  # an unknown model's weights
    ("v6e", "4x4", {}),
    ("tpu7x", "2x2x2", {}),
])
def test_layouts_that_fit_the_models_heads_are_accepted(gen: str, topology: str, extra: dict[str, Any]) -> None:
    _work(_gen_slice(gen, topology), **extra)


def test_a_known_models_weights_on_a_bucket_keep_its_heads_rule() -> None:
    """Issue 39.5: ``model_source: gs://...`` holds ``model``'s weights (it was not checked: no Hugging Face id to
    look up), so a TP that does not divide the known model's heads is refused, naming ``model``."""
    with pytest.raises(InvalidInputs) as info:
        _work(_gen_slice("v6e", "4x8"), model=vllm_rules.DEFAULT_MODEL, model_source="gs://my-data/models/qwen")
    assert [p.field for p in info.value.problems] == ["model"]
    assert "16 attention heads" in info.value.problems[0].problem


def test_validate_refuses_the_default_model_on_a_32_device_slice_in_one_line_with_exit_2(
        capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    data = yaml.safe_load(EXAMPLE.read_text())
    serve_slice = next(s for s in data["slices"] if s["name"] == "serve")
    serve_slice["topology"] = "4x8"
    path = tmp_path / "raytpu.yaml"
    path.write_text(yaml.safe_dump(data))
    code, out, err = run_cli(capsys, "validate", str(path))
    index = next(i for i, w in enumerate(data["workloads"]) if w["kind"] == "serve")
    assert (code, out) == (2, "")
    assert err.splitlines() == [
        f"error: workloads[{index}].model: 'Qwen/Qwen3-0.6B' {HEADS} 32 (the 32 JAX devices of this slice) {REFUSED}; "
        "valid: pipeline_parallel_size 8 (one stage per host, tensor_parallel_size 4), or a v6e slice of at most 16 "
        "JAX devices (1x1, 2x2, 2x4, 4x4), or another model (model / model_source; vLLM checks its heads when the "
        "engine starts)"]


def test_a_model_on_the_kits_bucket_is_read_through_the_gcs_fuse_mount() -> None:
    work = _work(model="llama", model_source="gs://kit-bucket/models/llama/")
    assert serving.llm_config(work, mounted_bucket="kit-bucket")["model_loading_config"] == {
        "model_id": "llama", "model_source": f"{serving.GCS_MOUNT_PATH}/models/llama"}
    other = serving.llm_config(work, mounted_bucket="another")["model_loading_config"]
    assert other["model_source"] == "gs://kit-bucket/models/llama/"  # Ray Serve LLM downloads it first


@pytest.mark.parametrize(("extra", "field", "says"), [
    ({"engine_kwargs": {"max_num_seq": 4}}, "engine_kwargs.max_num_seq", "valid: max_num_seqs"),
    ({"engine_kwargs": {"max_model_length": 4}}, "engine_kwargs.max_model_length",
     "max_model_len (set the workload's max_model_len)"),
    ({"engine_kwargs": {"served_model_name": "x"}}, "engine_kwargs.served_model_name", "the workload's model"),
    ({"engine_kwargs": {"model": "x"}}, "engine_kwargs.model", "the workload's model_source instead"),
    ({"engine_kwargs": {"tensor_parallel_size": 4}}, "engine_kwargs.tensor_parallel_size",
     "does not use the 16 chips"),
    ({"engine_kwargs": {"tensor_parallel_size": True}}, "engine_kwargs.tensor_parallel_size", "= 16"),
    ({"engine_kwargs": {"pipeline_parallel_size": 3}}, "engine_kwargs.tensor_parallel_size", "= 16"),
    # a pipeline stage is one host (tpu-inference TPUWorker.init_device, RayDistributedExecutor._initialize_ray_cluster)
    ({"engine_kwargs": {"pipeline_parallel_size": 2}}, "engine_kwargs.pipeline_parallel_size",
     "valid: 1, or 4 (one stage per host, tensor_parallel_size 4)"),
    ({"engine_kwargs": {"distributed_executor_backend": "mp"}}, "engine_kwargs.distributed_executor_backend",
     "valid: ray"),
    ({"engine_kwargs": ["max_num_seqs"]}, "engine_kwargs", "is not a mapping"),
    ({"model_source": "gs://bucket"}, "model_source", "names no object path"),
    ({"model_source": "s3://bucket/m"}, "model_source", "scheme"),
    ({"model_source": " org/m"}, "model_source", "padded"),
    ({"max_model_len": 8}, "max_model_len", "16 to"),
    ({"max_model_len": "long"}, "max_model_len", "out of range"),
])
def test_bad_serving_fields_name_the_field_and_what_is_valid(extra: dict[str, Any], field: str, says: str) -> None:
    problems = _problems(**extra)
    assert field in problems, problems
    assert says in problems[field]


def test_a_single_host_engine_may_use_vllms_own_executor() -> None:
    _work(_slice("2x4", count=1), engine_kwargs={"distributed_executor_backend": "mp"})


@pytest.mark.parametrize("field", ["model_source", "max_model_len", "engine_kwargs", "model"])
@pytest.mark.parametrize("kind", ["smoke", "train"])
def test_serving_fields_are_refused_on_kinds_that_take_no_model(kind: str, field: str) -> None:
    value = {"model_source": "org/m", "max_model_len": 512, "engine_kwargs": {"max_num_seqs": 4}, "model": "m"}[field]
    problems = _problems(kind=kind, **{field: value})
    assert problems[field].endswith("valid: only with kinds serve, batch")


def test_the_spec_travels_with_its_serving_fields() -> None:
    work = _work(model="m", model_source="gs://b/m", max_model_len=2048, engine_kwargs={"max_num_seqs": 8})
    assert WorkloadSpec.from_json(work.to_json()) == work


def test_the_cpu_twin_changes_only_what_cpu_twin_lists() -> None:
    work = _work(_slice("2x4", count=1), engine_kwargs={"max_num_seqs": 8})
    tpu = serving.serve_config(work)["applications"][0]["args"]["llm_configs"][0]
    cpu = serving.serve_config(work, cpu_model=("tiny", "/models/tiny"))["applications"][0]["args"]["llm_configs"][0]
    assert {k for k in tpu.keys() | cpu.keys() if tpu.get(k) != cpu.get(k)} == {
        "model_loading_config", "accelerator_type", "accelerator_config", "engine_kwargs", "runtime_env"}
    assert "accelerator_type" not in cpu and cpu["accelerator_config"] == {"kind": "cpu"}
    changed = {k for k in tpu["engine_kwargs"].keys() | cpu["engine_kwargs"].keys()
               if tpu["engine_kwargs"].get(k) != cpu["engine_kwargs"].get(k)}
    assert changed <= set(serving.CPU_TWIN["engine_kwargs"])
    assert cpu["engine_kwargs"]["max_num_seqs"] == 8  # the workload's own engine args travel to the twin
    assert cpu["deployment_config"] == tpu["deployment_config"]


def test_engine_cli_args_spell_vllms_flags() -> None:
    assert serving.engine_cli_args({"max_model_len": 512, "enforce_eager": True, "enable_prefix_caching": False,
                                    "hf_overrides": {"a": 1}, "seed": None}) == [
        "--max-model-len", "512", "--enforce-eager", "--no-enable-prefix-caching", "--hf-overrides", '{"a": 1}']


def test_validate_reports_every_bad_engine_arg_with_exit_2(capsys: pytest.CaptureFixture[str],
                                                         tmp_path: Path) -> None:
    data = yaml.safe_load(EXAMPLE.read_text())
    serve = next(w for w in data["workloads"] if w["kind"] == "serve")
    serve.update(engine_kwargs={"max_num_seq": 4, "tensor_parallel_size": 3}, max_model_len=4, model_source="ftp://x")
    data["workloads"].append({"name": "smoke2", "kind": "smoke", "slice": "train", "engine_kwargs": {}})
    path = tmp_path / "raytpu.yaml"
    path.write_text(yaml.safe_dump(data))
    code, out, err = run_cli(capsys, "validate", str(path))
    assert code == 2 and out == ""
    index = data["workloads"].index(serve)
    fields = [line.split(": ", 2)[1] for line in err.splitlines()]
    assert fields == [f"workloads[{index}].model_source", f"workloads[{index}].max_model_len",
                      f"workloads[{index}].engine_kwargs.max_num_seq", "workloads[3].engine_kwargs"], err
    assert "Traceback" not in err


def test_a_2x4_of_two_4_chip_hosts_cannot_be_served_and_validate_says_which_machine_can() -> None:
    """Ray Serve LLM 2.60 reserves a v5e/v6e 2x4 as one 8-chip host (Ray 2.60
    ``ray._private.accelerators.tpu.get_chips_per_host``; its ``TPUAccelerator`` passes no ``chips_per_vm``)."""
    problems = _problems(item=_slice("2x4", count=1, machine="ct6e-standard-4t"))
    assert "hosts of 8 chips" in problems["slice"] and problems["slice"].endswith(
        "valid: machine_type ct6e-standard-8t (one host of 8 chips)")
    _work(_slice("2x4", count=1, machine="ct6e-standard-8t"))
    assert vllm_rules.ray_serve_chips_per_host(_slice("4x4").plan) == 4


def _recorded_cluster(tmp_path: Path, topology: str) -> str:
    """A local cluster's state file only (no process): what `raytpu local serve` reads before it deploys."""
    from raytpu.core.tpu.plan import plan_slice
    from raytpu.local.slice import state

    run_dir = tmp_path / "run"
    run_dir.mkdir()
    state.LocalCluster(run_dir=str(run_dir), temp_dir=str(tmp_path / "tmp"), address="127.0.0.1:1",
                       plan=plan_slice("v6e", topology).to_json(), slices=["s0"]).save()
    return str(run_dir)


@pytest.mark.parametrize(("topology", "argv", "code", "says"), [
    ("4x4", (), 2, "error: workload: 'serve' runs on a v6e 2x4 slice; the local cluster emulates v6e 4x4; "
                   "valid: `raytpu local down` then `raytpu local up --slice serve`"),
    ("2x4", ("--workload", "chat"), 2, "error: workload: 'chat' is not allowed; valid: serve\n"),
    ("2x4", (), 1, "error: local.serve: vLLM is not installed in"),
])
def test_local_serve_refuses_before_deploying(capsys: pytest.CaptureFixture[str], tmp_path: Path, topology: str,
                                               argv: tuple[str, ...], code: int, says: str) -> None:
    """The last case is the hint to use the serve environment, where vLLM is missing (the core venv)."""
    if code == 1 and importlib.util.find_spec("vllm") is not None:
        pytest.skip("vLLM is installed here: `raytpu local serve` would deploy")
    run_dir = _recorded_cluster(tmp_path, topology)
    got, out, err = run_cli(capsys, "local", "--dir", run_dir, "serve", "--config", str(EXAMPLE), *argv)
    assert (got, out) == (code, "")
    assert err.startswith(says), err


# ---------------------------------------------------------------------- the vLLM the pods run (issue 27, item 9)

OWN_IMAGE = "example.com/serve:1"


@pytest.mark.parametrize(("image", "arg", "refused_as"), [
    # vLLM 0.29.0 has it, the serving image's vLLM (commit 9969466, names of v0.24.0) does not yet
    (None, "max_num_scheduled_tokens", "is not an engine argument of vLLM commit 9969466, the vLLM the workload's "
     "pods run (vLLM 0.29.0 has it)"),
    (None, "max_num_partial_prefills", None),  # the image's vLLM has it; 0.29.0 dropped it
    # a team's own image carries the kit's Ray 2.60, whose ray[llm] pins vLLM 0.29.0
    (OWN_IMAGE, "max_num_partial_prefills", "is not an engine argument of vLLM 0.29.0, the vLLM the workload's pods "
     "run (vLLM commit 9969466 has it)"),
    (OWN_IMAGE, "max_num_scheduled_tokens", None),
])
def test_engine_arg_names_are_checked_against_the_vllm_the_pods_run(image: str | None, arg: str,
                                                                    refused_as: str | None) -> None:
    _assert_engine_args(image, {arg: 2}, refused_as)


def _assert_engine_args(image: str | None, kwargs: dict[str, Any], refused_as: str | None) -> None:
    """A serving workload on ``image`` with ``kwargs`` is valid (``refused_as`` None), or its first key's problem
    says ``refused_as``."""
    if refused_as is None:
        _work(image=image, engine_kwargs=kwargs)
        return
    problems = _problems(image=image, engine_kwargs=kwargs)
    assert refused_as in problems[f"engine_kwargs.{next(iter(kwargs))}"], problems


@pytest.mark.parametrize(("image", "kwargs", "refused_as"), [
    # Source: vllm 0.29.0 vllm/config/scheduler.py SchedulerConfig.stream_interval Field(ge=1)
    (None, {"stream_interval": 0}, "0 is not >= 1: vLLM commit 9969466 refuses it at the engine's start; valid: an "
     "integer >= 1"),
    # Source: vllm 0.29.0 vllm/config/cache.py CacheConfig.gpu_memory_utilization Field(gt=0, le=1)
    (OWN_IMAGE, {"gpu_memory_utilization": 0}, "0 is not > 0: vLLM 0.29.0 refuses it at the engine's start; valid: "
     "a number > 0 and <= 1"),
    # a string: vLLM compares some args raw before pydantic reads them ("8" as max_num_seqs alone, "1" as
    # pipeline_parallel_size: a TypeError at the engine's start, EngineArgs.create_engine_config)
    (OWN_IMAGE, {"max_num_seqs": "4"}, "'4' is a string, not a number"),
    (OWN_IMAGE, {"max_num_seqs": 4.5}, "4.5 is not a whole number"),
    (OWN_IMAGE, {"max_num_seqs": 10**400}, None),  # a whole number, however long
    (OWN_IMAGE, {"max_num_seqs": True}, None),  # pydantic's lax mode: 1
    # Source: vllm 0.29.0 vllm/engine/arg_utils.py EngineArgs.max_num_seqs: int | None (vLLM sets its default)
    (OWN_IMAGE, {"max_num_seqs": None}, None),
    (OWN_IMAGE, {"stream_interval": None}, "null is not a number"),
    # Source: vllm 0.29.0 vllm/config/model.py ModelConfig.max_logprobs Field(ge=-1); v0.24.0's has no bound
    (OWN_IMAGE, {"max_logprobs": -2}, "-2 is not >= -1"),
    (None, {"max_logprobs": -2}, None),
    # Source: vLLM v0.24.0 vllm/config/scheduler.py SchedulerConfig.max_num_partial_prefills Field(ge=1)
    (None, {"max_num_partial_prefills": 0}, "0 is not >= 1"),
    # Source: vllm 0.29.0 EngineArgs.create_engine_config: a LoRAConfig (max_loras ge=1) only with enable_lora
    (OWN_IMAGE, {"max_loras": 0}, None),
    (OWN_IMAGE, {"max_loras": 0, "enable_lora": True}, "0 is not >= 1"),
    # Source: vllm 0.29.0 ModelConfig.__post_init__: a MultiModalConfig only for a multimodal model
    (OWN_IMAGE, {"mm_processor_cache_gb": -1}, None),
])
def test_engine_arg_values_are_checked_against_the_bounds_of_the_vllm_the_pods_run(
        image: str | None, kwargs: dict[str, Any], refused_as: str | None) -> None:
    _assert_engine_args(image, kwargs, refused_as)


def test_the_serving_images_vllm_is_the_one_its_versions_toml_records_and_its_names_are_recorded() -> None:
    import tomllib

    from raytpu.images.definitions import HERE

    recorded = tomllib.loads((HERE / "serve" / "versions.toml").read_text())["versions"]["vllm"]
    assert _work().vllm_version == recorded
    assert _work(image=OWN_IMAGE).vllm_version == vllm_rules.VLLM_VERSION
    assert _work(kind="train").vllm_version is None
    assert set(vllm_rules.ENGINE_ARG_NAMES) == {recorded, vllm_rules.VLLM_VERSION}
    image_names = vllm_rules.ENGINE_ARG_NAMES[recorded]
    assert len(image_names) == 267  # v0.24.0: 215 EngineArgs/AsyncEngineArgs + 53 frontend fields, tokens_only twice
    assert not set(vllm_rules.IMAGE_VLLM_NOT_YET) & image_names
    assert set(vllm_rules.IMAGE_VLLM_ONLY) <= image_names
    assert not set(vllm_rules.IMAGE_VLLM_ONLY) & vllm_rules.ENGINE_ARG_NAMES[vllm_rules.VLLM_VERSION]


def test_the_serving_images_ray_is_the_one_its_versions_toml_records() -> None:
    import tomllib

    from raytpu.core.tpu.catalog import RAY_VERSION
    from raytpu.images.definitions import HERE

    recorded = tomllib.loads((HERE / "serve" / "versions.toml").read_text())["versions"]["ray"]
    assert vllm_rules.IMAGE_RAY_VERSION == _work().ray_version == recorded
    assert _work(image=OWN_IMAGE).ray_version == _work(kind="train").ray_version == RAY_VERSION


# ---------------------------------------------------------------------- gated models (issue 27, item 3)

TOKEN = SecretKeyRef(name="hf-secret", key="hf_api_token")


@pytest.mark.parametrize(("model", "model_source", "secret", "refused"), [
    ("meta-llama/Llama-3.1-8B-Instruct", None, None, True),
    ("llama", "meta-llama/Llama-3.3-70B-Instruct", None, True),
    ("google/gemma-3-12b-it", None, None, True),
    ("meta-llama/Llama-3.1-8B-Instruct", None, TOKEN, False),
    ("llama", "gs://bucket/models/llama-3.1-8b", None, False),  # the weights on GCS: nothing from Hugging Face
    ("llama", "/models/llama-3.1-8b", None, False),  # in the image
    ("Qwen/Qwen3-8B-Base", None, None, False),  # Qwen is not gated
    (None, None, None, False),  # the default model (Qwen/Qwen3-0.6B)
    ("org/unknown", None, None, False),  # not in the table: nothing known
])
def test_a_gated_model_downloaded_from_hugging_face_needs_a_token_secret(
        model: str | None, model_source: str | None, secret: SecretKeyRef | None, refused: bool) -> None:
    extra: dict[str, Any] = {"model": model, "model_source": model_source, "hf_token_secret": secret}
    if not refused:
        _work(**extra)
        return
    problems = _problems(**extra)
    assert list(problems) == ["hf_token_secret"], problems
    assert "repository is gated" in problems["hf_token_secret"]
    assert "valid: hf_token_secret: {name: SECRET, key: KEY}" in problems["hf_token_secret"]
    assert "model_source: gs://BUCKET/PATH" in problems["hf_token_secret"]


def test_the_model_table_records_which_repositories_are_gated() -> None:
    from raytpu.core.tpu.models import MODELS

    gated = {m.hf_id for m in MODELS.values() if m.gated and m.hf_id}
    assert gated == {m.hf_id for m in MODELS.values() if m.hf_id and m.hf_id.startswith(("meta-llama/",
                                                                                        "google/gemma-"))}
    assert gated and not {m for m in gated if m and m.startswith("Qwen/")}


@pytest.mark.parametrize(("name", "key", "field", "says"), [
    ("HF_Secret", "token", "name", "is not a Secret name"),
    ("hf-secret-", "token", "name", "is not a Secret name"),
    ("hf-secret", "a/b", "key", "is not a Secret key"),
    ("hf-secret", "..", "key", "is not a Secret key"),
    ("hf-secret", "", "key", "is not a Secret key"),
])
def test_a_token_secret_names_a_secret_and_a_key_kubernetes_accepts(name: str, key: str, field: str,
                                                                    says: str) -> None:
    with pytest.raises(InvalidInputs) as info:
        SecretKeyRef(name=name, key=key)
    assert [p.field for p in info.value.problems] == [field]
    assert says in info.value.problems[0].problem


def test_the_token_secret_is_a_serving_field_and_travels_with_the_spec() -> None:
    work = _work(model="meta-llama/Llama-3.1-8B-Instruct", hf_token_secret=TOKEN)
    assert WorkloadSpec.from_json(work.to_json()) == work
    assert "hf_token_secret" in SERVING_FIELDS
    assert _problems(kind="train", hf_token_secret=TOKEN)["hf_token_secret"].endswith(
        "valid: only with kinds serve, batch")


def test_validate_refuses_a_gated_model_without_a_token_with_exit_2(capsys: pytest.CaptureFixture[str],
                                                                    tmp_path: Path) -> None:
    data = yaml.safe_load(EXAMPLE.read_text())
    serve = next(w for w in data["workloads"] if w["kind"] == "serve")
    serve["model"] = "meta-llama/Llama-3.1-8B-Instruct"
    path = tmp_path / "raytpu.yaml"
    path.write_text(yaml.safe_dump(data))
    code, out, err = run_cli(capsys, "validate", str(path))
    index = data["workloads"].index(serve)
    assert code == 2 and out == ""
    assert err.startswith(f"error: workloads[{index}].hf_token_secret: is required for "
                          "meta-llama/Llama-3.1-8B-Instruct: its Hugging Face repository is gated"), err
    serve["hf_token_secret"] = {"name": "hf-secret", "key": "hf_api_token"}
    path.write_text(yaml.safe_dump(data))
    code, out, err = run_cli(capsys, "validate", str(path))
    assert code == 0, err


def _spec(slice_fields: str, workload_fields: str) -> Any:
    from raytpu.config import parse

    return parse(f"""
project: my-ml-project
region: us-east5
cluster: {{name: ray-tpu, mode: standard}}
slices:
  - {{name: serve, generation: v6e, topology: 2x4, zone: us-east5-b{slice_fields}}}
workloads:
  - {{name: llm, kind: serve, slice: serve{workload_fields}}}
""")


@pytest.mark.parametrize(("slice_fields", "workload_fields", "says"), [
    ("", "", []),
    ("", ", model_source: gs://my-ml-project-ray-tpu-ray/models/qwen", []),  # the kit's own bucket
    # Source: https://cloud.google.com/kubernetes-engine/docs/concepts/dws (flex-start nodes end at their run duration)
    (", provisioning: flex-start", "", ["workloads.llm: serves from slice serve, which may run on flex-start "
                                        "capacity: GKE deletes flex-start nodes when their run duration ends "
                                        "(604800 s)"]),
    (", provisioning: flex-start, max_run_duration_s: 3600", "", ["(3600 s)"]),
    # any mode's run duration ends the nodes too (compute-class-api Priority.MaxRunDurationSeconds)
    (", max_run_duration_s: 86400", "", ["workloads.llm: serves from slice serve, whose nodes end at its "
                                         "max_run_duration_s (86400 s)"]),
    # weights in a bucket no grant covers: tests/test_grants.py (raytpu.core.specs.cluster.grants.path_warnings)
])
def test_validate_warns_where_a_rayservice_would_go_down_or_never_load(slice_fields: str, workload_fields: str,
                                                                        says: list[str]) -> None:
    """Reviewer findings (issue 27): serving on flex-start is torn down at the run duration; weights in another
    bucket are unreadable by the pods' identity. Warnings, as the config may be right (a bucket granted by hand)."""
    from raytpu.core.specs.spec_warnings import serving_warnings

    spec = _spec(slice_fields, workload_fields)
    found = serving_warnings(spec, spec.workloads[0])
    assert len(found) == len(says) and all(s in f for s, f in zip(says, found, strict=True)), found
