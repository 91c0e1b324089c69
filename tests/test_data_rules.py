"""raytpu/core/specs/runtime/data.py: the Ray Data paths, the batch kind's rules and its processor config (issue 31)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from raytpu.core.common.errors import InvalidInputs
from raytpu.core.specs import kinds
from raytpu.core.specs.runtime import data
from raytpu.core.specs.spec import SliceSpec, WorkloadSpec

pytestmark = pytest.mark.unit

ONE_HOST = SliceSpec.create(name="one", generation="v6e", topology="2x4", zone="us-east5-b")
FOUR_HOSTS = SliceSpec.create(name="four", generation="v6e", topology="4x4", zone="us-east5-b")
IO = {"input": "gs://my-data/prompts.jsonl", "output": "gs://my-data/answers"}


def _batch(item: SliceSpec = ONE_HOST, **fields: object) -> WorkloadSpec:
    return WorkloadSpec(name="b", kind=kinds.kind("batch"), slice=item, **{**IO, **fields})  # type: ignore[arg-type]


@pytest.mark.parametrize(("path", "fmt"), [("gs://b/x.jsonl", "jsonl"), ("data/x.JSON", "jsonl"),
                                           ("gs://b/dir/", "parquet"), ("/d/x.parquet", "parquet")])
def test_the_format_comes_from_the_suffix(path: str, fmt: str) -> None:
    assert data.data_format(path) == fmt


@pytest.mark.parametrize(("value", "words"), [
    (42, "is not a path"), ("", "blank"), (" a", "padded"), ("a\nb", "control"), ("s3://b/x", "scheme"),
    ("gs://", "no object path"), ("gs://bucket", "no object path"), ("gs://bucket/", "no object path")])
def test_a_value_that_is_not_a_data_path_is_named(value: object, words: str) -> None:
    (problem,) = data.path_problems("dataset", value)
    assert problem.field == "dataset" and words in problem.problem


@pytest.mark.parametrize("value", ["gs://my-data/x.parquet", "relative/dir", "/abs/x.jsonl"])
def test_data_paths_are_accepted(value: str) -> None:
    assert data.path_problems("dataset", value) == []


def test_a_multi_host_slice_is_refused_for_batch_listing_the_single_host_shapes() -> None:
    with pytest.raises(InvalidInputs) as info:
        _batch(FOUR_HOSTS)
    (problem,) = info.value.problems
    assert problem.field == "slice" and "65422" in problem.problem
    assert "v6e 2x4 (ct6e-standard-8t)" in problem.valid and "4x4" not in problem.valid


@pytest.mark.parametrize(("image", "ray"), [(None, "2.56.0"), ("example.com/team/llm:1.0", "2.60.0")])
def test_the_multi_host_refusal_cites_the_ray_the_batch_job_runs(image: str | None, ray: str) -> None:
    """The serving image carries Ray 2.56; a team's own image carries the kit's Ray (issue 40 item 12)."""
    with pytest.raises(InvalidInputs) as info:
        _batch(FOUR_HOSTS, image=image)
    (problem,) = info.value.problems
    assert f"Ray {ray}'s Data LLM" in problem.problem


def test_input_and_output_are_required_and_distinct() -> None:
    with pytest.raises(InvalidInputs) as info:
        _batch(input=None, output=None)
    assert [p.field for p in info.value.problems] == ["input", "output"]
    with pytest.raises(InvalidInputs) as info:
        _batch(output="gs://my-data/prompts.jsonl/")
    assert [p.field for p in info.value.problems] == ["output"]


def test_the_processor_holds_the_whole_host_and_shards_over_its_devices() -> None:
    config = data.processor_config(_batch(), "Qwen/Qwen3-0.6B")
    assert config["accelerator_type"] == "TPU-V6E"
    assert config["placement_group_config"]["bundles"] == [{"TPU": 8, "CPU": 1}]
    assert config["engine_kwargs"]["tensor_parallel_size"] == 8
    assert config["engine_kwargs"]["distributed_executor_backend"] == "uni"
    assert config["concurrency"] == 1


def test_the_workloads_own_engine_kwargs_win_and_are_checked() -> None:
    config = data.processor_config(_batch(engine_kwargs={"max_num_seqs": 8}, max_model_len=2048), "m")
    assert config["engine_kwargs"]["max_num_seqs"] == 8 and config["engine_kwargs"]["max_model_len"] == 2048
    with pytest.raises(InvalidInputs) as info:
        _batch(engine_kwargs={"tensor_parallel_size": 3})
    assert [p.field for p in info.value.problems] == ["engine_kwargs.tensor_parallel_size"]


def test_the_cpu_twin_holds_no_tpu() -> None:
    twin = data.cpu_twin(data.processor_config(_batch(), "m"), "/models/tiny")
    assert "accelerator_type" not in twin and twin["model_source"] == "/models/tiny"
    assert twin["placement_group_config"] == {"bundles": [{"CPU": 1}]}
    assert twin["engine_kwargs"]["tensor_parallel_size"] == 1


def test_an_output_that_holds_something_is_refused_unless_overwrite(tmp_path: Path) -> None:
    out = tmp_path / "out"
    assert data.output_problems("output", str(out), False) == []
    out.mkdir()
    assert data.output_problems("output", str(out), False) == []  # an empty folder is nothing to lose
    (out / "part-0.parquet").write_text("mine")
    (problem,) = data.output_problems("output", str(out), False)
    assert problem.field == "output" and "--overwrite" in problem.valid
    assert data.output_problems("output", str(out), True) == []


def test_the_spec_round_trips_its_data_fields() -> None:
    work = _batch()
    assert WorkloadSpec.from_json(work.to_json()) == work


def test_the_batch_row_functions_ship_by_value_and_keep_every_column(tmp_path: Path) -> None:
    """The processor's preprocess and postprocess, pickled as Ray Data pickles them (cloudpickle), run in a Python
    that cannot import the kit: its map workers need nothing of it, as with a hand-written pipeline's lambdas."""
    import subprocess
    import sys

    from ray import cloudpickle

    from raytpu.workloads import batch

    params = {"max_tokens": 16, "temperature": 0.0}
    preprocess, postprocess = batch.row_functions(("id", "prompt", "lang"), params, False)
    assert preprocess({"id": 1, "prompt": "hi", "lang": "en"}) == {"prompt": "hi", "__raytpu_prompt": "hi",
                                                                    "sampling_params": params}
    answered = {"id": 1, "prompt": "hi", "__raytpu_prompt": "hi", "lang": "en", "generated_text": "yo",
                "num_input_tokens": 2, "num_generated_tokens": 16, "sampling_params": {}, "prompt_token_ids": [1, 2],
                "__inference_error__": ""}
    expected = {"id": 1, "prompt": "hi", "lang": "en", "generated_text": "yo", "num_input_tokens": 2,
                "num_generated_tokens": 16, "__inference_error__": ""}
    assert postprocess(answered) == expected
    (tmp_path / "fns.pkl").write_bytes(cloudpickle.dumps((preprocess, postprocess, answered, expected)))
    script = ("import pickle, sys; pre, post, row, want = pickle.load(open(sys.argv[1], 'rb')); "
              "assert post(row) == want and pre(row)['prompt'] == 'hi'; "
              "assert not [m for m in sys.modules if m.startswith('raytpu')], 'the kit was imported'")
    done = subprocess.run([sys.executable, "-I", "-c", script, str(tmp_path / "fns.pkl")], capture_output=True,
                          text=True, timeout=60, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]


# ------------------------------------------------------------------------------------------- issue 39.3: paths


@pytest.mark.parametrize(("input", "output", "how"), [
    ("a", "./a/", "is"), ("data/prompts.jsonl", "data", "holds"), ("data", "data/out", "sits inside"),
    ("gs://my-data/x", "gs://my-data/x/", "is"), ("gs://my-data/x", "gs://my-data/./x/y", "sits inside"),
    ("/d/in", "/d/../d", "holds"), ("a", "ab", None), ("gs://my-data/a", "gs://other-data/a", None),
    ("gs://my-data/a", "my-data/a", None)])
def test_an_output_overlapping_its_input_is_seen_whatever_its_spelling(input: str, output: str,
                                                                      how: str | None) -> None:
    assert data.overlap(input, output) == how


def test_local_paths_are_also_compared_as_this_machine_resolves_them(tmp_path: Path, monkeypatch: Any) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "prompts.jsonl").write_text('{"prompt": "mine"}\n')
    (tmp_path / "link").symlink_to(tmp_path / "data")
    assert data.overlap_problems("data/prompts.jsonl", str(tmp_path / "data")) == []  # textually apart
    (problem,) = data.overlap_problems("data/prompts.jsonl", str(tmp_path / "data"), resolve=True)
    assert problem.field == "output" and "holds the input" in problem.problem
    (problem,) = data.overlap_problems("link/prompts.jsonl", "data", resolve=True)
    assert "holds the input" in problem.problem


def test_where_a_batch_runs_its_input_must_exist_and_its_output_stand_apart(tmp_path: Path,
                                                                           monkeypatch: Any) -> None:
    monkeypatch.chdir(tmp_path)
    assert [p.field for p in data.run_problems("nope.jsonl", "out", False, "workloads[3]")] == ["workloads[3].input"]
    (tmp_path / "in.jsonl").write_text('{"prompt": "mine"}\n')
    assert data.run_problems("in.jsonl", "out", False) == []
    assert data.run_problems("gs://my-data/in.jsonl", "out", False) == []  # gs:// is the program's to read
    (problem,) = data.run_problems("in.jsonl", ".", True)
    assert problem.field == "output" and "holds the input" in problem.problem


@pytest.mark.parametrize(("input", "output", "field"), [
    ("missing.jsonl", "answers", "input"), ("prompts.jsonl", "{CWD}", "output")])
def test_the_batch_program_checks_its_paths_before_ray(input: str, output: str, field: str, tmp_path: Path,
                                                      monkeypatch: Any, capsys: Any) -> None:
    """Exit 2 naming the field, before ``ray.init`` (which would start or reach a cluster)."""
    import ray

    from raytpu.workloads import batch

    monkeypatch.chdir(tmp_path)
    (tmp_path / "prompts.jsonl").write_text('{"prompt": "mine"}\n')
    work = _batch(input=input, output=output.replace("{CWD}", str(tmp_path)))  # apart until resolved
    monkeypatch.setenv("RAYTPU_WORKLOAD", json.dumps(work.to_json()))
    monkeypatch.setattr(ray, "init", lambda *a, **k: pytest.fail("ray.init was reached"))
    assert batch.main(["--overwrite"]) == 2
    assert capsys.readouterr().err.startswith(f"error: {field}: ")
    assert (tmp_path / "prompts.jsonl").read_text() == '{"prompt": "mine"}\n'


def test_the_train_program_checks_its_dataset_before_ray(tmp_path: Path, monkeypatch: Any, capsys: Any) -> None:
    import ray

    from raytpu.workloads import train

    monkeypatch.chdir(tmp_path)
    work = WorkloadSpec(name="t", kind=kinds.kind("train"), slice=FOUR_HOSTS, dataset="missing.parquet")
    monkeypatch.setenv("RAYTPU_WORKLOAD", json.dumps(work.to_json()))
    monkeypatch.setattr(ray, "init", lambda *a, **k: pytest.fail("ray.init was reached"))
    assert train.main(["--steps", "1", "--storage-path", str(tmp_path / "ckpt")]) == 2
    assert capsys.readouterr().err.startswith("error: dataset: ")


@pytest.mark.parametrize("fields", [
    {"engine_kwargs": {"tensor_parallel_size": 3}}, {"model": "meta-llama/Llama-3.1-8B-Instruct"}])
def test_a_batch_jobs_problems_speak_of_its_job_not_a_rayservice(fields: dict[str, Any]) -> None:
    """Issue 39.5: the serving rules' messages, said of a batch RayJob, named a RayService and its replica."""
    with pytest.raises(InvalidInputs) as info:
        _batch(**fields)
    (problem,) = info.value.problems
    said = f"{problem.problem} {problem.valid}"
    assert "RayService" not in said and "replica" not in said and "batch" in said, said


def test_a_batch_model_from_another_bucket_and_a_gs_copy_of_a_known_model_are_warned_as_for_serving() -> None:
    from raytpu.config import parse
    from raytpu.core.specs.cluster.grants import path_warnings
    from raytpu.sizing.serving_fit import fit_warnings

    example = (Path(__file__).resolve().parents[1] / "raytpu.example.yaml").read_text()
    spec = parse(example + "  - {name: b, kind: batch, slice: serve, model: meta-llama/Llama-3.1-405B-Instruct, "
                           "model_source: gs://other-models/llama, input: gs://my-data/in.jsonl, "
                           "output: gs://my-data/out}\n")
    work = spec.workloads[-1]
    assert any(w.startswith("workloads.b.model_source: 'gs://other-models/llama' is in gs://other-models, which no "
                            "grant covers") for w in path_warnings(spec))
    (fit,) = fit_warnings(work)
    assert "llama-3.1-405b needs" in fit  # the known model's shape, not "not in the built-in table"
