"""Unit tests of what a vLLM engine writes to its host's disk (raytpu.core.specs.serving.node_disk) and where its XLA
cache lives (raytpu.core.specs.runtime.xla_cache): GKE's allocatable ephemeral storage, the sized boot disk, the
refusal, the pods' request, the cache folder of serving and batch (issue 40 items 1 and 12, issue 41 item 2;
docs/FACTS.md#disk-vllm-xla-cache)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from raytpu.core.common.errors import InvalidInputs
from raytpu.core.common.names import GCS_MOUNT_PATH
from raytpu.core.manifests import engine_pods, serving
from raytpu.core.specs import kinds
from raytpu.core.specs.runtime import data, xla_cache
from raytpu.core.specs.serving import node_disk
from raytpu.core.specs.spec import ClusterSpec, SecretKeyRef, SliceSpec, WorkloadSpec

pytestmark = pytest.mark.unit

BUCKET = "kit-ckpt"
LLAMA_70B = "meta-llama/Llama-3.3-70B-Instruct"
GIB = 2**30


def _slice(**fields: Any) -> SliceSpec:
    base: dict[str, Any] = {"name": "serve", "generation": "v6e", "topology": "2x4", "zone": "us-east5-b"}
    return SliceSpec.create(**{**base, **fields})


def _work(item: SliceSpec | None = None, kind: str = "serve", **fields: Any) -> WorkloadSpec:
    if kinds.KINDS[kind].takes_model:  # Llama is gated: a token, or the refusal would come first
        fields = {"hf_token_secret": SecretKeyRef(name="hf", key="token"), **fields}
    if kind == "batch":
        fields = {"input": "gs://team-data/in.jsonl", "output": "gs://team-data/out", **fields}
    return WorkloadSpec(name=kind, kind=kinds.KINDS[kind], slice=item or _slice(), **fields)


@pytest.mark.parametrize(("disk", "allocatable"), [
    # GKE's plan-node-sizes example node: a 100 GB boot disk, allocatable 47060071478 bytes (43.83 GiB)
    # Source: https://cloud.google.com/kubernetes-engine/docs/concepts/plan-node-sizes (local ephemeral storage)
    (100, 47060071478 / GIB),
    (10, 0.09), (200, 97.42), (280, 144.30), (300, 162.02), (1000, 782.18),
])
def test_allocatable_ephemeral_storage_follows_gkes_reservation(disk: int, allocatable: float) -> None:
    assert node_disk.allocatable_gib(disk) == pytest.approx(allocatable, abs=0.01)


@pytest.mark.parametrize("need", [0.0, 11.1, 43.8, 43.9, 141.4, 500.0, 50_000.0])
def test_the_sized_disk_is_the_smallest_step_that_holds_the_need(need: float) -> None:
    size = node_disk.disk_for(need)
    assert size is not None and size >= 100 and size % 10 == 0
    assert node_disk.allocatable_gib(size) >= need
    assert size == 100 or node_disk.allocatable_gib(size - 10) < need


def test_no_disk_holds_more_than_the_largest_gke_takes() -> None:
    assert node_disk.disk_for(10**6) is None


@pytest.mark.parametrize(("kind", "fields", "weights_gib"), [
    ("serve", {"model": LLAMA_70B}, 131.4),                                      # Hugging Face: downloaded
    ("serve", {"model": LLAMA_70B, "model_source": f"gs://{BUCKET}/m"}, 0.0),    # the kit's bucket: read in place
    ("serve", {"model": LLAMA_70B, "model_source": "gs://other/m"}, 131.4),      # another bucket: downloaded
    ("batch", {"model": LLAMA_70B, "model_source": f"gs://{BUCKET}/m"}, 131.4),  # Ray Data LLM downloads it
    ("serve", {"model": LLAMA_70B, "model_source": "/models/llama"}, 0.0),       # in the image
    ("serve", {}, 1.1),                                                          # the default model
])
def test_what_an_engine_writes_per_host(kind: str, fields: dict[str, Any], weights_gib: float) -> None:
    found = node_disk.engine_disk(_work(kind=kind, **fields), BUCKET)
    assert found is not None
    assert found.weights_gib == pytest.approx(weights_gib, abs=0.05)
    assert found.need_gib == pytest.approx(weights_gib + node_disk.SCRATCH_GIB, abs=0.05)


@pytest.mark.parametrize("work", [
    _work(model="org/unknown"),     # not in the built-in table: its size is unknown before it downloads
    _work(kind="train"),            # no engine
], ids=["unknown-model", "train"])
def test_no_estimate_without_an_engine_of_a_known_model(work: WorkloadSpec) -> None:
    assert node_disk.engine_disk(work, BUCKET) is None


def test_a_pool_without_disk_size_gib_gets_room_for_its_largest_engine_and_a_given_disk_is_kept() -> None:
    item = _slice()
    big, small = _work(item, model=LLAMA_70B), _work(item, kind="batch", model="Qwen/Qwen3-0.6B")
    assert node_disk.boot_disk_gib(item, (big, small), BUCKET) == 290  # 142Gi + the sidecar's 5Gi > 280's 144.3
    assert node_disk.boot_disk_gib(item, (small,), BUCKET) == 100
    assert node_disk.boot_disk_gib(item, (), BUCKET) == 100
    given = _slice(disk_size_gib=500)
    assert node_disk.boot_disk_gib(given, (_work(given, model=LLAMA_70B),), BUCKET) == 500


def _cluster(item: SliceSpec, *works: WorkloadSpec, mode: str = "standard") -> ClusterSpec:
    from raytpu.core.specs.cluster.cluster_parts import GkeSpec, StorageSpec

    return ClusterSpec(project="my-ml-project", region="us-east5", cluster=GkeSpec(name="ray-tpu", mode=mode),
                       storage=StorageSpec(bucket=BUCKET), slices=(item,), workloads=works)


@pytest.mark.parametrize(("kind", "fields", "disk", "valid"), [
    ("serve", {"model": LLAMA_70B}, 100, f"disk_size_gib: 290 or more, or leave disk_size_gib out (the kit sizes "
     f"the boot disk from the slice's engine workloads), or model_source: gs://{BUCKET}/PATH"),
    ("serve", {"model": LLAMA_70B, "model_source": "gs://other/m"}, 270, "disk_size_gib: 290 or more"),
    ("serve", {"model": LLAMA_70B}, 280, "disk_size_gib: 290 or more"),  # 144.3 GiB < 142Gi + the sidecar's 5Gi
    ("batch", {"model": LLAMA_70B}, 200, "disk_size_gib: 290 or more, or leave disk_size_gib out"),
    ("serve", {"model": "Qwen/Qwen3-8B"}, 40, "disk_size_gib: 100 or more"),
    ("serve", {}, 10, "disk_size_gib: 100 or more"),
])
def test_a_given_disk_too_small_for_the_engine_is_refused_naming_it(kind: str, fields: dict[str, Any], disk: int,
                                                                    valid: str) -> None:
    item = _slice(disk_size_gib=disk)
    with pytest.raises(InvalidInputs) as info:
        _cluster(item, _work(item, kind=kind, **fields))
    [problem] = info.value.problems
    assert problem.field == "slices[0].disk_size_gib"
    assert problem.problem.startswith(f"{disk} GiB leaves ")
    assert valid in problem.valid
    if kind == "batch":  # Ray Data LLM downloads a gs:// source too: no bucket advice
        assert "model_source" not in problem.valid


@pytest.mark.parametrize(("fields", "disk"), [
    ({"model": LLAMA_70B}, 290),
    ({"model": LLAMA_70B, "model_source": f"gs://{BUCKET}/models/llama"}, 100),  # read in place
    ({"model": "org/unknown"}, 10),                                               # not checked
])
def test_a_disk_that_holds_the_engine_is_accepted(fields: dict[str, Any], disk: int) -> None:
    item = _slice(disk_size_gib=disk)
    assert _cluster(item, _work(item, **fields)).slices == (item,)


def _worker_pod(work: WorkloadSpec, bucket: str | None) -> dict[str, Any]:
    worker: dict[str, Any] = {"template": {"spec": {"containers": [{"resources": {"requests": {}}}]}}}
    cluster: dict[str, Any] = {"headGroupSpec": {"template": {"spec": {"containers": [{}]}}},
                               "workerGroupSpecs": [worker]}
    engine_pods.add_engine_needs(cluster, work, bucket)
    return dict(cluster["workerGroupSpecs"][0]["template"]["spec"])


def test_the_tpu_pods_request_what_the_engine_writes_and_set_no_limit() -> None:
    pod = _worker_pod(_work(model=LLAMA_70B), BUCKET)
    resources = pod["containers"][0]["resources"]
    assert resources["requests"]["ephemeral-storage"] == "142Gi"
    assert "limits" not in resources  # an estimate must not evict the pod
    assert not [v for v in pod["volumes"] if v["name"] == engine_pods.XLA_CACHE_VOLUME]  # in the mounted bucket
    assert "ephemeral-storage" not in _worker_pod(_work(model="org/unknown"), BUCKET)["containers"][0]["resources"][
        "requests"]


def test_without_the_bucket_the_xla_cache_falls_back_to_an_empty_dir_where_its_folders_lie() -> None:
    work = _work(model=LLAMA_70B)
    pod = _worker_pod(work, None)
    assert {"name": engine_pods.XLA_CACHE_VOLUME, "emptyDir": {}} in pod["volumes"]
    mounts = pod["containers"][0]["volumeMounts"]
    [mount] = [m["mountPath"] for m in mounts if m["name"] == engine_pods.XLA_CACHE_VOLUME]
    env = serving.llm_config(work)["runtime_env"]["env_vars"][xla_cache.ENV]
    assert env.startswith(mount + "/")


def test_the_xla_cache_folder_is_one_per_model_slice_shape_and_vllm_version() -> None:
    two_by_four, four_by_four = _slice().plan, _slice(topology="4x4").plan
    base = xla_cache.cache_dir(LLAMA_70B, two_by_four, "0.29.0")
    assert base.startswith(f"{GCS_MOUNT_PATH}/{xla_cache.PREFIX}/0.29.0-")
    assert "/v6e-2x4/meta-llama-llama-3.3-70b-instruct-" in base
    assert base == xla_cache.cache_dir(LLAMA_70B, two_by_four, "0.29.0")  # a new pod finds the same folder
    others = {xla_cache.cache_dir("Qwen/Qwen3-8B", two_by_four, "0.29.0"),
              xla_cache.cache_dir(LLAMA_70B, four_by_four, "0.29.0"),
              xla_cache.cache_dir(LLAMA_70B, two_by_four, "9969466a"),
              xla_cache.cache_dir("meta-llama/llama-3.3-70b-instruct", two_by_four, "0.29.0")}  # reads alike
    assert base not in others and len(others) == 4
    weird = xla_cache.cache_dir("gs://b/a b/../../x" + "y" * 500, two_by_four, "v")
    assert ".." not in weird and " " not in weird and len(weird) < 200


def test_serving_and_batch_engines_share_the_cache_folder_of_their_model_and_slice() -> None:
    """Issue 40 item 12: the batch engine had no VLLM_XLA_CACHE_PATH (its emptyDir went unused). Both keep programs
    under 1 s too: vLLM's TPU backend lowers JAX's floors only with VLLM_XLA_CHECK_RECOMPILATION (tpu-inference v0.27.0
    ``CompilationManager.__init__``)."""
    item = _slice()
    serve = serving.llm_config(_work(item, model="Qwen/Qwen3-8B"))["runtime_env"]["env_vars"][xla_cache.ENV]
    batch = data.processor_config(_work(item, kind="batch", model="Qwen/Qwen3-8B"), "Qwen/Qwen3-8B")
    assert batch["runtime_env"] == {"env_vars": {xla_cache.ENV: serve,
                                                 "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS": "0",
                                                 "JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES": "-1"}}
    twin = data.cpu_twin(batch, "/models/tiny")  # locally the CPU twin's env replaces it: no TPU, no XLA cache
    assert xla_cache.ENV not in twin["runtime_env"]["env_vars"]


@pytest.mark.parametrize(("mode", "kind", "fields", "says"), [
    ("autopilot", "serve", {"model": LLAMA_70B}, "request 142Gi of ephemeral storage (llama-3.3-70b's 131.4 GiB"),
    ("autopilot", "batch", {"model": LLAMA_70B}, "run the workload on a Standard cluster, whose boot disk"),
    ("autopilot", "serve", {"model": "Qwen/Qwen3-8B"}, None),                       # 25.3 GiB: a default node holds it
    ("autopilot", "serve", {"model": LLAMA_70B, "model_source": f"gs://{BUCKET}/m"}, None),  # read in place
    ("standard", "serve", {"model": LLAMA_70B}, None),                              # the kit sizes the disk
])
def test_validate_warns_on_autopilot_where_the_request_may_pass_its_unstated_maximum(
        mode: str, kind: str, fields: dict[str, Any], says: str | None) -> None:
    from raytpu.core.specs.spec_warnings import disk_warnings

    item = _slice()
    work = _work(item, kind=kind, **fields)
    found = disk_warnings(_cluster(item, work, mode=mode), work)
    if says is None:
        assert found == []
        return
    [line] = found
    assert line.startswith(f"workloads.{kind}: its TPU pods request") and says in line
    assert (f"gs://{BUCKET}/PATH" in line) is (kind == "serve")  # Ray Data LLM downloads the bucket too


def test_validate_names_the_boot_disk_it_sized() -> None:
    from raytpu.commands.validate import disk_note

    item = _slice()
    assert disk_note(_cluster(item, _work(item, model=LLAMA_70B)), item) == (
        ", boot disk 290 GiB per host (room for llama-3.3-70b's 131.4 GiB of weights, which workload serve downloads "
        "to every host)")
    assert disk_note(_cluster(item, _work(item)), item) == ""  # the default disk holds the default model


def test_a_service_applied_by_terraform_reads_the_kit_bucket_in_place_though_its_bucket_is_a_token() -> None:
    """The workloads stack hands the builders the bucket as a Terraform token; the model_source is compared with the
    config's bucket name, so the weights are read through the mount (no download, no room asked for them)."""
    from raytpu.core.manifests import kuberay

    item = _slice()
    work = _work(item, model=LLAMA_70B, model_source=f"gs://{BUCKET}/models/llama")
    token = "${google_storage_bucket.storage_bucket_0123.name}"
    image = "r/i@sha256:" + "a" * 64
    service = kuberay.workload_manifest(_cluster(item, work), work, images=lambda w: (image, "2.56.0"),
                                        service_account="ray", bucket=token)
    config = json.loads(service["spec"]["serveConfigV2"])
    llm = config["applications"][0]["args"]["llm_configs"][0]
    assert llm["model_loading_config"]["model_source"] == f"{GCS_MOUNT_PATH}/models/llama"
    [group] = service["spec"]["rayClusterConfig"]["workerGroupSpecs"]
    pod = group["template"]["spec"]
    assert pod["containers"][0]["resources"]["requests"]["ephemeral-storage"] == "10Gi"
    assert any(v.get("csi", {}).get("volumeAttributes", {}).get("bucketName") == token for v in pod["volumes"])


@pytest.mark.parametrize("model", [LLAMA_70B, "Qwen/Qwen3-8B", "Qwen/Qwen3-0.6B", None])
@pytest.mark.parametrize("kind", ["serve", "batch"])
def test_the_sized_disk_holds_the_pods_requests_with_the_gcsfuse_sidecar_and_a_margin(kind: str,
                                                                                      model: str | None) -> None:
    """The GCS FUSE sidecar requests 5Gi of ephemeral storage by default (gcs-fuse-csi-driver webhook flag
    sidecar-ephemeral-storage-request): the engine's request plus it must fit the sized disk's allocatable."""
    item = _slice()
    work = _work(item, kind=kind, **({"model": model} if model else {}))
    need = node_disk.engine_disk(work, BUCKET)
    assert need is not None
    requests = int(need.request.removesuffix("Gi")) + node_disk.GCSFUSE_SIDECAR_GIB
    disk = node_disk.boot_disk_gib(item, (work,), BUCKET)
    assert requests + node_disk.MARGIN_GIB <= node_disk.allocatable_gib(disk)
