"""The pods' writes to the kit's bucket are scoped by folder (issue 49 item 5; docs/FACTS.md#storage-pod-write-folders):
the pods' account reads the whole bucket, and writes only the folders its workloads write (checkpoints, compile caches,
a batch output in the kit's bucket), through IAM Conditions on the object's name; the core zip (``raytpu/``) and the
teams' code zips (``code/``) are read-only to them. Judged on the synthesized JSON (synth tier) and on the rules
(unit)."""

from __future__ import annotations

import re

import pytest

from raytpu.core.common import errors
from raytpu.core.specs.cluster import grants

BUCKET = "my-ml-project-ray-tpu-ray"


class _Work:
    def __init__(self, name: str, output: str | None = None) -> None:
        self.name, self.output = name, output


@pytest.mark.unit
def test_the_pods_write_checkpoints_the_caches_and_a_batch_output_in_the_kits_bucket_and_nothing_else() -> None:
    folders = grants.pod_write_folders(BUCKET, [
        _Work("b", f"gs://{BUCKET}/outputs/b/"), _Work("c", "gs://other/out"), _Work("d", None),
        _Work("e", f"gs://{BUCKET}/checkpoints/e")], ["compile-cache/", "xla-cache/vllm/", "teams/ml/jax-cache"])
    # a folder inside a listed one adds nothing (checkpoints/e); another bucket's output is not the kit's to scope
    assert folders == ("checkpoints", "compile-cache", "outputs/b", "teams/ml/jax-cache", "xla-cache/vllm")
    assert not any(f == g or f.startswith(g + "/") for f in folders for g in grants.POD_READ_ONLY_FOLDERS)


@pytest.mark.unit
@pytest.mark.parametrize("output", [f"gs://{BUCKET}/", f"gs://{BUCKET}", f"gs://{BUCKET}/code/x",
                                    f"gs://{BUCKET}/raytpu", f"gs://{BUCKET}/raytpu/out/"])
def test_an_output_the_pods_could_not_write_in_the_kits_bucket_is_refused_naming_the_field(output: str) -> None:
    (problem,) = grants.kit_folder_write_problems(BUCKET, [None, _Work("b", output)])
    assert problem.field == "workloads[1].output"
    assert "may only read there" in problem.problem
    assert grants.kit_folder_write_problems(BUCKET, [_Work("b", f"gs://{BUCKET}/codes/x")]) == []


@pytest.mark.heavy  # imports the construct, so the CDK bindings: jsii starts node (5 s)
def test_a_condition_covers_the_folder_and_the_folder_markers_above_it_only() -> None:
    """Source: https://cloud.google.com/iam/docs/conditions-resource-attributes (objects:
    ``projects/_/buckets/BUCKET/objects/OBJECT``)"""
    from raytpu.modules.workload_identity import folder_problems, write_condition

    expression = write_condition("b", "teams/ml/jax-cache")
    assert expression == ('resource.name.startsWith("projects/_/buckets/b/objects/teams/ml/jax-cache/")'
                          ' || resource.name == "projects/_/buckets/b/objects/teams/"'
                          ' || resource.name == "projects/_/buckets/b/objects/teams/ml/"')

    def holds(name: str) -> bool:  # the expression's own terms, evaluated on one object name
        full = f"projects/_/buckets/b/objects/{name}"
        starts = re.findall(r'startsWith\("([^"]*)"\)', expression)
        equals = re.findall(r'== "([^"]*)"', expression)
        return any(full.startswith(s) for s in starts) or full in equals
    assert holds("teams/ml/jax-cache/a/b") and holds("teams/") and holds("teams/ml/")
    assert not holds("teams/ml/jax-cachex") and not holds("teams/other") and not holds("raytpu/raytpu-0.1.0.zip")
    assert not holds("code/w-abc.zip") and not holds("teams/ml/jax-cache")  # the marker of the folder itself:
    assert holds("teams/ml/jax-cache/")  # GCS FUSE names a folder's marker with its slash
    for bad in ['a"b', "a/../b", "/a", "a/", "", "a\\b", "a\nb"]:
        assert folder_problems("write_folders", bad), bad


@pytest.mark.heavy  # imports the construct, so the CDK bindings: jsii starts node (5 s)
def test_props_refuse_a_folder_that_cannot_be_quoted_into_a_condition() -> None:
    from raytpu.modules.workload_identity import WorkloadIdentityProps

    with pytest.raises(errors.InvalidInput) as caught:
        WorkloadIdentityProps(project="p", account_id="raytpu-x-ray", namespace="ray", ksa_name="ray", bucket="b",
                              write_folders=("ok", 'x"y'))
    assert "write_folders" in str(caught.value)


def _holds(expression: str, name: str) -> bool:
    """Whether the condition's own terms (``startsWith`` and ``==``) hold for ``resource.name`` ``name``."""
    starts = re.findall(r'startsWith\("([^"]*)"\)', expression)
    equals = re.findall(r'== "([^"]*)"', expression)
    assert len(starts) + len(equals) == expression.count("||") + 1, expression  # nothing else in it
    return any(name.startswith(s) for s in starts) or name in equals


@pytest.mark.synth
@pytest.mark.timeout(600)
def test_the_synthesized_pods_account_reads_the_bucket_and_writes_only_its_folders() -> None:
    """Source: google provider 8.7.0 google_storage_bucket_iam_member ``condition`` {title, expression}; conditions
    need uniform bucket-level access (https://cloud.google.com/storage/docs/access-control/iam#conditions)."""
    from _synth import STANDARD_EXAMPLE, resources, synth_text

    stack = synth_text(STANDARD_EXAMPLE.read_text())["ray-tpu-cluster"]
    (bucket_id, bucket), = resources(stack, "google_storage_bucket").items()
    assert bucket["uniform_bucket_level_access"] is True
    ray = next(k for k, r in resources(stack, "google_service_account").items()
               if r["account_id"] == "raytpu-ray-tpu-ray")
    member = f"serviceAccount:${{google_service_account.{ray}.email}}"
    mine = {k: g for k, g in resources(stack, "google_storage_bucket_iam_member").items()
            if g["member"] == member and g["bucket"] == f"${{google_storage_bucket.{bucket_id}.name}}"}
    unconditioned = sorted(g["role"] for g in mine.values() if "condition" not in g)
    assert unconditioned == ["roles/storage.legacyBucketReader", "roles/storage.objectViewer"]  # nothing that writes
    writes = {k: g for k, g in mine.items() if "condition" in g}
    assert {g["role"] for g in writes.values()} == {"roles/storage.objectUser"}
    prefix = f"projects/_/buckets/${{google_storage_bucket.{bucket_id}.name}}/objects/"
    expressions = [g["condition"]["expression"] for g in writes.values()]
    for folder in ("checkpoints/run-1/checkpoint_000001/model.pkl", "compile-cache/jit_step-abc",
                   "xla-cache/vllm/0.29.0/x", "checkpoints/", "xla-cache/"):
        assert any(_holds(e, prefix + folder) for e in expressions), folder
    core = next(o["name"] for o in resources(stack, "google_storage_bucket_object").values())
    assert core.startswith("raytpu/raytpu-")
    for read_only in (core, "code/team-abc.zip", "raytpu/", "code/", "other/x", "checkpointsx/y"):
        assert not any(_holds(e, prefix + read_only) for e in expressions), read_only
    # a stack deployed before this change held roles/storage.objectUser, unconditioned, at `bucket-access`: the plan
    # replaces it (role is ForceNew), creating the reader first and after the writers, then removing the old grant
    (access_id,) = [k for k, g in mine.items() if g["role"] == "roles/storage.objectViewer"]
    access = mine[access_id]
    assert access["//"]["metadata"]["path"].endswith("/bucket-access")
    assert access["lifecycle"] == {"create_before_destroy": True}
    assert {f"google_storage_bucket_iam_member.{k}" for k in writes} <= set(access["depends_on"])
