"""``storage.data_buckets`` and the ``gs://`` paths no grant covers (issue 40 item 2): ``raytpu validate`` names each
such path, so a data team's bucket is granted before the slice is up rather than failing with PERMISSION_DENIED."""

from __future__ import annotations

from pathlib import Path

import pytest

from raytpu import cli
from raytpu.core.specs.cluster.grants import covered_buckets, uncovered_path

pytestmark = pytest.mark.unit

COVERED = {"kit-bucket": True, "team-data": False, "team-results": True}


@pytest.mark.parametrize(("path", "write", "says"), [
    ("gs://kit-bucket/checkpoints/x", True, None),
    ("gs://team-data/train.parquet", False, None),
    ("gs://team-results/answers", True, None),
    ("gs://team-results/prompts.jsonl", False, None),
    ("/data/prompts.jsonl", False, None),  # local: not a bucket
    ("Qwen/Qwen3-0.6B", False, None),  # a Hugging Face id
    (None, False, None),
    ("gs://team-data/answers", True, "grants gs://team-data read only, so the pods' account gets PERMISSION_DENIED "
                                     "writing there; set access: read-write on that entry"),
    ("gs://acme-models/llama-70b", False, "is in gs://acme-models, which no grant covers"),
    ("gs://acme-models/llama-70b", False, "add {name: acme-models, access: read} to storage.data_buckets"),
    ("gs://acme-out/answers", True, "add {name: acme-out, access: read-write} to storage.data_buckets"),
])
def test_uncovered_path_names_the_field_the_bucket_and_the_grant_that_would_cover_it(
        path: object, write: bool, says: str | None) -> None:
    line = uncovered_path(path, "workloads.w.f", COVERED, write=write, account="the pods' account")
    if says is None:
        assert line is None
    else:
        assert line is not None and line.startswith("workloads.w.f: ") and says in line, line


def test_a_long_path_is_shown_as_a_bounded_excerpt() -> None:
    line = uncovered_path("gs://other/" + "x" * 5000, "workloads.w.input", COVERED)
    assert line is not None and len(line) < 700 and "(5011 characters)" in line


CONFIG = """\
project: my-ml-project
region: us-east5
cluster: {{name: ray-tpu}}
storage: {{data_buckets: [{grants}]}}
slices:
  - {{name: train, generation: v6e, topology: 4x4, zone: us-east5-b}}
  - {{name: serve, generation: v6e, topology: 2x4, zone: us-east5-b}}
workloads:
  - {{name: train, kind: train, slice: train, dataset: gs://team-data/train.parquet}}
  - {{name: llm, kind: serve, slice: serve, model_source: gs://team-models/qwen}}
  - {{name: label, kind: batch, slice: serve, input: gs://team-data/prompts.jsonl, output: gs://team-data/answers}}
"""


@pytest.mark.parametrize(("grants", "warned"), [
    ("", ["workloads.train.dataset: 'gs://team-data/train.parquet' is in gs://team-data",
          "workloads.llm.model_source: 'gs://team-models/qwen' is in gs://team-models",
          "workloads.label.input: 'gs://team-data/prompts.jsonl' is in gs://team-data",
          "workloads.label.output: 'gs://team-data/answers' is in gs://team-data"]),
    ("{name: team-data, access: read-write}", ["workloads.llm.model_source: 'gs://team-models/qwen' is in "
                                               "gs://team-models, which no grant covers"]),
    ("{name: team-data, access: read-write}, {name: team-models, access: read}", []),
])
def test_validate_names_every_gs_path_no_grant_covers(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                       grants: str, warned: list[str]) -> None:
    path = tmp_path / "raytpu.yaml"
    path.write_text(CONFIG.format(grants=grants))
    assert cli.main(["validate", str(path)]) == 0
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if "storage.data_buckets" in line]
    assert len(lines) == len(warned), err
    for line, says in zip(lines, warned, strict=True):
        assert line.startswith(f"warning: {says}"), line


def test_the_kits_bucket_is_covered_read_write_and_data_buckets_by_their_access() -> None:
    from raytpu.config import parse

    config = CONFIG.format(grants="{name: team-data}, {name: team-results, access: read-write}")
    spec = parse(config.replace("output: gs://team-data/answers", "output: gs://team-results/answers"))
    assert covered_buckets(spec) == {"my-ml-project-ray-tpu-ray": True, "team-data": False, "team-results": True}


@pytest.mark.parametrize(("grants", "output", "says"), [
    ("{name: team-data}, {name: team-models}", "gs://team-data/answers", "storage.data_buckets[0] (team-data)"),
    ("{name: team-models}, {name: team-data, access: read}", "gs://team-data/a/b",
     "set access: read-write on storage.data_buckets[1]"),
    ("{name: team-models}, {name: team-out}", "gs://team-out/" + "x" * 400, "(414 characters)"),
])
def test_an_output_in_a_read_only_data_bucket_is_an_error_naming_the_entry_to_change(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], grants: str, output: str, says: str) -> None:
    """Read-only (roles/storage.objectViewer) has no storage.objects.create: the batch would run, then get 403."""
    path = tmp_path / "raytpu.yaml"
    path.write_text(CONFIG.format(grants=grants).replace("gs://team-data/answers", output))
    before = path.read_text()
    assert cli.main(["validate", str(path)]) == 2
    err = capsys.readouterr().err
    assert "workloads[2].output" in err and "access: read only" in err and says in err, err
    assert "Traceback" not in err and len(err) < 2000 and path.read_text() == before


@pytest.mark.parametrize(("grants", "output"), [
    ("{name: team-data, access: read-write}", "gs://team-data/answers"),  # granted read-write
    ("{name: team-data}", "gs://elsewhere/answers"),  # not listed: a warning (may be granted outside the kit)
    ("{name: team-data}", "/tmp/answers"),  # not a bucket
])
def test_an_output_the_kit_does_not_list_read_only_is_no_error(tmp_path: Path, grants: str, output: str) -> None:
    path = tmp_path / "raytpu.yaml"
    path.write_text(CONFIG.format(grants=grants).replace("gs://team-data/answers", output))
    assert cli.main(["validate", str(path)]) == 0
