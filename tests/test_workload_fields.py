"""Issue 50 item 3: which kind takes which workload field is one table (raytpu/core/specs/workload_fields.py); the
refusals, the YAML structure, the spec's JSON and the config reference follow it. A field and a kind are added in a
scratch copy of the package, touching only the files docs/CONTRIBUTING.md names."""

from __future__ import annotations

import dataclasses
import filecmp
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from raytpu.core.common.errors import InvalidInputs
from raytpu.core.specs import kinds, workload_fields
from raytpu.core.specs.kinds import KINDS, JobLimits, WorkloadKind
from raytpu.core.specs.spec import SliceSpec, WorkloadSpec

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[1]


def test_every_workload_field_has_one_row_and_every_row_a_field() -> None:
    assert list(workload_fields.FIELDS) == [f.name for f in dataclasses.fields(WorkloadSpec)]


def test_the_rows_name_real_kinds_and_agree_with_the_kinds_flags() -> None:
    named = {k for f in workload_fields.FIELDS.values() for k in (*(f.kinds or ()), *f.required)}
    assert named - {"*"} <= set(KINDS)
    assert set(workload_fields.SERVING) == {k.name for k in KINDS.values() if k.takes_model}
    assert set(workload_fields.taking("run_time_s")) == {k.name for k in KINDS.values() if k.is_job}
    assert set(workload_fields.taking("entrypoint")) == {k.name for k in KINDS.values() if k.runs_entrypoint}
    assert set(workload_fields.taking("train_loop")) == {k.name for k in KINDS.values() if k.code_entry == "train_loop"}
    assert set(workload_fields.taking("serve_app")) == {k.name for k in KINDS.values() if k.code_entry == "serve_app"}


def _refused(kind_name: str, **fields: object) -> list[str]:
    item = SliceSpec.create(name="s", generation="v6e", topology="2x2", zone="us-east5-b")
    try:
        WorkloadSpec(name="w", kind=kinds.kind(kind_name), slice=item, **fields)  # type: ignore[arg-type]
    except InvalidInputs as exc:
        return [str(p) for p in exc.problems]
    return []


def test_the_refusals_read_as_they_always_did() -> None:
    assert _refused("train", model="x") == ["model: 'x' is not allowed for kind train; valid: only with kinds serve, "
                                            "batch"]
    assert _refused("serve", compile_cache="c") == ["compile_cache: 'c' is not allowed for kind serve (vLLM keeps its "
                                                    "own XLA cache); valid: only with kinds that run JAX: train, job, "
                                                    "smoke"]
    assert _refused("serve", retries=1) == ["retries: 1 is not allowed for kind serve (a RayService has no "
                                            "backoffLimit); valid: only with kind job; remove it here"]


def test_a_kind_added_to_the_table_is_followed(monkeypatch: pytest.MonkeyPatch) -> None:
    """A new kind that trains: its entry in KINDS and its name in the rows it takes; validate follows."""
    finetune = WorkloadKind("finetune", "train", "RayJob", JobLimits(), trains=True)
    monkeypatch.setitem(KINDS, "finetune", finetune)
    monkeypatch.setattr(kinds, "NAMES", tuple(KINDS))
    row = workload_fields.FIELDS["dataset"]
    monkeypatch.setitem(workload_fields.FIELDS, "dataset", dataclasses.replace(row, kinds=("train", "finetune")))
    assert _refused("finetune", dataset="gs://my-bucket/d") == []
    assert _refused("serve", dataset="gs://my-bucket/d") == ["dataset: 'gs://my-bucket/d' is not allowed for kind "
                                                             "serve; valid: only with kinds that train (train, "
                                                             "finetune)"]
    assert _refused("finetune", model="x") == ["model: 'x' is not allowed for kind finetune; valid: only with kinds "
                                               "serve, batch"]


def test_a_field_added_to_the_table_is_refused_where_it_is_not_taken(monkeypatch: pytest.MonkeyPatch) -> None:
    row = workload_fields.Field(name="warmup_s", group="runtime", kinds=("train",), doc="x")
    monkeypatch.setitem(workload_fields.FIELDS, "warmup_s", row)
    assert [str(p) for p in workload_fields.refusals("serve", {"warmup_s": 5, "model": None})] == [
        "warmup_s: 5 is not allowed for kind serve; valid: only with kinds train"]
    assert workload_fields.refusals("train", {"warmup_s": 5}) == []


SCRATCH_FIELD = {
    "raytpu/core/specs/workload_spec.py": ("    secrets: Mapping[str, str | SecretKeyRef] | None = field(default=None, "
                                           "hash=False)\n",
                                           "    warmup_s: int | None = None\n"),
    "raytpu/core/specs/workload_fields.py": ('          "submitting shell\'s variable of that name"),\n',
                                             '    Field(name="warmup_s", group="runtime", kinds=("train",), doc="a '
                                             'warm-up"),\n'),
}
"""The field added in the scratch copy: (file -> after which line, the line added)."""

SCRATCH_KIND = {
    "raytpu/core/specs/kinds.py": ('    WorkloadKind("serve", "serve", "RayService", takes_model=True, '
                                   'code_entry="serve_app"),\n',
                                   '    WorkloadKind("finetune", "train", "RayJob", JobLimits(), trains=True),\n'),
    "raytpu/core/specs/workload_fields.py": ('    Field(name="dataset", group="train", kinds=("train",)',
                                             '    Field(name="dataset", group="train", kinds=("train", "finetune")'),
    "raytpu/images/job/versions.toml": ('kinds = ["smoke", "train", "job"]', 'kinds = ["smoke", "train", "job", '
                                                                         '"finetune"]'),
}
"""The kind added in the scratch copy (its program here is the kit's trainer; a new one adds workloads/<it>.py)."""

CHECK = """
import json
from raytpu.config import structure_of
from raytpu.core.common.errors import InvalidInputs
from raytpu.core.specs import kinds
from raytpu.core.specs.spec import SliceSpec, WorkloadSpec
from raytpu.images import for_kind
from raytpu.tools.gen_reference import config_reference

item = SliceSpec.create(name="s", generation="v6e", topology="2x2", zone="us-east5-b")
work = WorkloadSpec(name="w", kind=kinds.kind("train"), slice=item, warmup_s=5)
assert WorkloadSpec.from_json(json.loads(json.dumps(work.to_json()))) == work
assert WorkloadSpec.from_env(work.workload_env()).warmup_s == 5
tuned = WorkloadSpec(name="w", kind=kinds.kind("finetune"), slice=item, dataset="gs://my-bucket/d")
assert WorkloadSpec.from_env(tuned.workload_env()) == tuned
assert "warmup_s" in structure_of(WorkloadSpec).model_fields
assert for_kind("finetune").name == "job"
try:
    WorkloadSpec(name="w", kind=kinds.kind("serve"), slice=item, warmup_s=5)
except InvalidInputs as exc:
    print([str(p) for p in exc.problems])
reference = config_reference()
assert "| `warmup_s` |" in reference and "finetune" in reference, reference
print("followed")
"""


def test_a_field_and_a_kind_added_in_a_scratch_copy_touch_only_the_named_files(tmp_path: Path) -> None:
    """Adding ``warmup_s`` (a train field) and kind ``finetune`` edits only the files in SCRATCH_FIELD and
    SCRATCH_KIND; the YAML structure, the JSON both ways (and through RAYTPU_WORKLOAD), the refusals, the default image
    and the config reference follow."""
    copy = tmp_path / "raytpu"
    shutil.copytree(ROOT / "raytpu", copy, symlinks=False, ignore=shutil.ignore_patterns("__pycache__"))
    for edits in (SCRATCH_FIELD, SCRATCH_KIND):
        for name, (after, added) in edits.items():
            path = tmp_path / name
            text = path.read_text()
            assert after in text, (name, after)
            path.write_text(text.replace(after, after + added if after.endswith("\n") else added, 1))
    changed = _changed(ROOT / "raytpu", copy)
    assert changed == sorted({*SCRATCH_FIELD, *SCRATCH_KIND})
    done = subprocess.run([sys.executable, "-c", CHECK], cwd=tmp_path, capture_output=True, text=True, timeout=120,
                          env={"PYTHONPATH": str(tmp_path), "PATH": "/usr/bin:/bin"})
    assert done.returncode == 0, done.stderr[-3000:]
    assert "warmup_s: 5 is not allowed for kind serve; valid: only with kinds train" in done.stdout
    assert done.stdout.strip().endswith("followed")


def _changed(left: Path, right: Path, prefix: str = "raytpu") -> list[str]:
    """Files that differ between two trees (relative to the repository root, as the edits name them)."""
    found = []
    compared = filecmp.dircmp(left, right, ignore=["__pycache__"])
    found += [f"{prefix}/{n}" for n in compared.diff_files + compared.left_only + compared.right_only]
    for sub in compared.common_dirs:
        found += _changed(left / sub, right / sub, f"{prefix}/{sub}")
    return sorted(found)
