"""A WorkloadSpec ships and is rebuilt whole: one serialization derived from its dataclass fields (issue 49, item 2:
``raytpu smoke`` dropped ``compile_cache``, ``compile_budget_s`` and ``ray_disk_gib``; ``submit --local`` dropped
``compile_budget_s``), so a field added later travels with no edit."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest
import yaml
from image_refs import FIXTURE_IMAGES

from raytpu.config import load, parse
from raytpu.core.manifests import kuberay, smoke_runs
from raytpu.core.specs.kinds import kind
from raytpu.core.specs.spec import ClusterSpec, SecretKeyRef, WorkloadSpec
from raytpu.local.slice.from_config import job_workload
from raytpu.local.slice.state import LocalCluster

pytestmark = pytest.mark.unit

EXAMPLE = Path(__file__).resolve().parent.parent / "raytpu.example.yaml"
IMAGE = "us-docker.pkg.dev/my-ml-project/team/trainer@sha256:" + "a" * 64
SMOKE_OWN = {"compile_cache": "teams/ml/jax-cache", "compile_budget_s": 42.5, "ray_disk_gib": 77, "run_time_s": 900}
"""The smoke workload's own settings the nightly run must honour (each differs from its default)."""


def example_spec() -> ClusterSpec:
    return load(EXAMPLE)


def samples(spec: ClusterSpec) -> list[WorkloadSpec]:
    """Specs that together set every WorkloadSpec field to a value other than its default."""
    train, serve = spec.slice_named("train"), spec.slice_named("serve")
    return [
        WorkloadSpec(name="serve-all", kind=kind("serve"), slice=serve, image=IMAGE, model="Qwen/Qwen3-0.6B",
                     model_source="gs://team-models/qwen3", max_model_len=2048,
                     engine_kwargs={"gpu_memory_utilization": 0.8}, hf_token_secret=SecretKeyRef(name="hf", key="t"),
                     chat_template_kwargs={"enable_thinking": False}),
        WorkloadSpec(name="batch-all", kind=kind("batch"), slice=serve, input="gs://team-data/in.jsonl",
                     output="gs://team-data/out", max_tokens=7, temperature=0.5, top_p=0.9, stop=("x", "y"),
                     chat_template=False),
        WorkloadSpec(name="train-all", kind=kind("train"), slice=train, slices=1, dataset="gs://team-data/tokens",
                     code="/abs/src", train_loop="lm.train:loop", train_config={"lr": 0.1, "dims": [1, 2]},
                     compile_cache="teams/ml/cache", compile_budget_s=42.5, run_time_s=1234, ray_disk_gib=77,
                     keep_checkpoints=5),
        WorkloadSpec(name="job-all", kind=kind("job"), slice=train, code="/abs/src", retries=2,
                     entrypoint="python tools/reserve.py --topology 4x4", run_time_s="unlimited", run_on="every_host",
                     requirements="requirements.txt", env={"WANDB_PROJECT": "lm"},
                     secrets={"WANDB_API_KEY": "wandb-key", "DB_PASS": SecretKeyRef(name="db", key="password")},
                     team="research", priority="high"),
        WorkloadSpec(name="app-all", kind=kind("serve"), slice=serve, code="/abs/src", serve_app="lm.serve:app"),
    ]


def test_every_field_has_a_sample_set_off_its_default() -> None:
    """A field added to WorkloadSpec needs a value in :func:`samples`, so the round trips below cover it."""
    spec = example_spec()
    unset = [f.name for f in dataclasses.fields(WorkloadSpec)
             if all(getattr(w, f.name) == f.default for w in samples(spec))]
    assert unset == []


def test_to_json_holds_every_field_and_round_trips_each_sample() -> None:
    spec = example_spec()
    for work in samples(spec):
        shipped = work.to_json()
        assert set(shipped) == {f.name for f in dataclasses.fields(WorkloadSpec)}
        assert WorkloadSpec.from_json(yaml.safe_load(yaml.safe_dump(shipped))) == work


def test_a_json_spec_with_an_unknown_field_is_refused() -> None:
    shipped = samples(example_spec())[2].to_json() | {"nonsense": 1}
    with pytest.raises(TypeError, match="nonsense"):
        WorkloadSpec.from_json(shipped)


def _smoke_config() -> ClusterSpec:
    data: dict[str, Any] = yaml.safe_load(EXAMPLE.read_text())
    smoke = next(w for w in data["workloads"] if w["kind"] == "smoke")
    smoke.update(SMOKE_OWN)
    data["cluster"]["mode"] = "autopilot"  # ray_disk_gib is an Autopilot pod's request
    return parse(yaml.safe_dump(data), str(EXAMPLE), EXAMPLE.parent)


def _apart(work: WorkloadSpec, *overridden: str) -> dict[str, Any]:
    return {k: v for k, v in work.to_json().items() if k not in overridden}


def test_the_nightly_smoke_jobs_carry_the_smoke_workloads_own_settings() -> None:
    """``raytpu smoke`` (the nightly run) rebuilt the spec by hand and dropped compile_cache, compile_budget_s and
    ray_disk_gib: a slow compile never failed it."""
    spec = _smoke_config()
    own = spec.workload("smoke")
    runs = [r.work for r in smoke_runs.smoke_workloads(spec)]
    assert runs and all(_apart(w, "name", "slices", "image") == _apart(own, "name", "slices", "image")
                        for w in runs if w.slice == own.slice)
    jobs = kuberay.smoke_jobs(spec, images=FIXTURE_IMAGES, service_account="k", bucket="b")
    carried = [WorkloadSpec.from_env(yaml.safe_load(j["spec"]["runtimeEnvYAML"])["env_vars"]) for j in jobs]
    on_own = [w for w in carried if w.slice == own.slice]
    assert on_own and all({k: getattr(w, k) for k in SMOKE_OWN} == SMOKE_OWN for w in on_own)


def test_submit_local_carries_every_field(tmp_path: Path) -> None:
    """``submit --local`` copied a field list and dropped compile_budget_s (and retries, run_time_s, ...)."""
    spec = example_spec()
    for work in samples(spec):
        if not work.kind.is_job:
            continue
        cluster = LocalCluster(run_dir=str(tmp_path), temp_dir="/tmp/raytpu-x", address="127.0.0.1:1",
                               plan=work.plan.to_json(), slices=["s0"])
        local = job_workload(cluster, work)
        assert _apart(local, "slice", "slices") == _apart(work, "slice", "slices")
