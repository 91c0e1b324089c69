"""raytpu.cluster.outputs.StackOutputs: one schema of what the cluster stack exports, read from either JSON shape.

The two shapes are what the Terraform tools write:

- ``cdktf deploy --outputs-file FILE``: ``{"<stack id>": {"<output>": value}}``
  (https://developer.hashicorp.com/terraform/cdktf/cli-reference/commands#deploy, ``--outputs-file``);
- ``terraform output -json``: ``{"<output>": {"value": value, "type": type, "sensitive": bool}}``
  (https://developer.hashicorp.com/terraform/cli/commands/output#json).

``--stack`` names the cluster stack by its exact id (``<cluster name>-cluster``, ``raytpu.stacks.app.stack_ids``).
Bad input exits 2 with one line ``error: <field>: <problem>; valid: <...>`` and no traceback
(docs/DESIGN.md, "CLI contract").
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from image_refs import write_record

from raytpu import cli
from raytpu.cluster.outputs import DEFAULT_OUTPUTS, StackOutputs
from raytpu.core.common.errors import InvalidInput, InvalidInputs

REPO = Path(__file__).resolve().parents[1]

unit = pytest.mark.unit

STACK = "ray-tpu-cluster"
VALUES = {"endpoint": "34.1.2.3", "ca_certificate": "LS0tLS1CRUdJTiBDRVJUSUZJQ0FURS0tLS0t", "cluster_name": "ray-tpu",
          "location": "us-east5", "project": "my-ml-project", "namespace": "ray", "service_account": "ray-tpu-ray",
          "bucket": "my-ml-project-ray-tpu-ray", "registry": "us-east5-docker.pkg.dev/my-ml-project/ray-tpu-images",
          "builder_service_account": "raytpu-ray-tpu-img@my-ml-project.iam.gserviceaccount.com"}
REQUIRED = ("endpoint", "ca_certificate", "cluster_name", "location", "project", "namespace", "service_account",
            "bucket")  # spelled out: the schema the cluster stack and the readers agree on
NAMES = (*REQUIRED, "registry", "builder_service_account")
"""The image registry's outputs came later: a stack deployed before them still serves submit and smoke."""
EXPECTED = StackOutputs(**VALUES)


def cdktf_shape(values: dict[str, Any] | None = None, **stacks: dict[str, Any]) -> dict[str, Any]:
    """``cdktf deploy --outputs-file``: stacks by id; the workloads stack exports nothing."""
    return {STACK: dict(VALUES if values is None else values), "ray-tpu-workloads": {}, **stacks}


def terraform_shape(values: dict[str, Any] | None = None) -> dict[str, Any]:
    """``terraform output -json`` in the cluster stack's directory, cdktf's cross-stack outputs included."""
    out = {k: {"sensitive": False, "type": "string", "value": v}
           for k, v in (VALUES if values is None else values).items()}
    out["cross-stack-output-google_storage_bucketstorage_bucket_6AF501AEname"] = {
        "sensitive": True, "type": "string", "value": VALUES["bucket"]}
    return out


# ---------------------------------------------------------------------- the schema


@unit
def test_names_are_the_fields_in_order_and_each_is_described() -> None:
    assert StackOutputs.names() == NAMES
    descriptions = StackOutputs.descriptions()
    assert tuple(descriptions) == NAMES and all(descriptions.values())


@pytest.mark.synth
@pytest.mark.timeout(600)
def test_names_are_exactly_the_outputs_a_synthesized_cluster_stack_writes() -> None:
    from _synth import EXAMPLES, synth_config

    for path in EXAMPLES.values():
        _, stacks = synth_config(str(path))
        (cluster_id,) = [sid for sid in stacks if sid.endswith("-cluster")]
        outputs = stacks[cluster_id]["output"]
        # cdktf adds `cross-stack-output-*` (sensitive) for the workloads stack's references; they are its own
        declared = {k: v for k, v in outputs.items() if not k.startswith("cross-stack-output-")}
        assert sorted(declared) == sorted(StackOutputs.names()), path
        assert {k: v["description"] for k, v in declared.items()} == StackOutputs.descriptions()
        assert not any(v["sensitive"] for v in declared.values())
        other = [sid for sid in stacks if sid != cluster_id]
        assert all("output" not in stacks[sid] for sid in other)  # the cluster stack is the one to name


# ---------------------------------------------------------------------- both shapes, one result


@unit
@pytest.mark.parametrize("shape", [cdktf_shape, terraform_shape])
def test_both_json_shapes_parse_to_the_same_outputs(shape: Any) -> None:
    assert StackOutputs.parse(shape(), STACK) == EXPECTED


@unit
@pytest.mark.parametrize("shape", [cdktf_shape, terraform_shape])
def test_both_json_shapes_read_from_a_file_to_the_same_outputs(tmp_path: Path, shape: Any) -> None:
    path = tmp_path / "outputs.json"
    path.write_text(json.dumps(shape(), indent=2))
    assert StackOutputs.read(path, STACK) == EXPECTED


@unit
def test_extra_outputs_and_other_stacks_are_ignored() -> None:
    data = cdktf_shape({**VALUES, "extra": "x"}, **{"other-cluster": {**VALUES, "cluster_name": "other"}})
    assert StackOutputs.parse(data, STACK) == EXPECTED
    assert StackOutputs.parse(data, "other-cluster").cluster_name == "other"


# ---------------------------------------------------------------------- a missing output is named


@unit
def test_a_stack_deployed_before_the_image_registry_reads_with_empty_registry_outputs() -> None:
    old = {k: v for k, v in VALUES.items() if k in REQUIRED}
    outputs = StackOutputs.parse(cdktf_shape(old), STACK)
    assert (outputs.registry, outputs.builder_service_account) == ("", "")
    assert StackOutputs.required() == REQUIRED


@unit
@pytest.mark.parametrize("shape", [cdktf_shape, terraform_shape])
@pytest.mark.parametrize("name", REQUIRED)
def test_a_missing_output_is_named(shape: Any, name: str) -> None:
    values = {k: v for k, v in VALUES.items() if k != name}
    with pytest.raises(InvalidInput) as info:
        StackOutputs.parse(shape(values), STACK, "o.json")
    assert info.value.field == f"outputs.{name}"
    assert info.value.problem == f"is required in o.json for stack {STACK!r} (missing: {name})"
    assert ", ".join(NAMES) in info.value.valid


@unit
@pytest.mark.parametrize("found", [
    {"clusterName": "ray-tpu"}, {"cluster-name": "ray-tpu"}, {"gke_cluster_name": "ray-tpu"},
    {"CLUSTER_NAME": "ray-tpu"}, {"cluster": "ray-tpu"}, {"gke": {"cluster_name": "ray-tpu"}},
])
def test_output_names_are_exact_no_loose_matching(found: dict[str, Any]) -> None:
    values = {**{k: v for k, v in VALUES.items() if k != "cluster_name"}, **found}
    with pytest.raises(InvalidInput) as info:
        StackOutputs.parse(cdktf_shape(values), STACK)
    assert info.value.field == "outputs.cluster_name"


@unit
def test_outputs_of_an_older_kit_list_every_missing_name() -> None:
    old = {"cluster_name": "ray-tpu", "location": "us-east5", "bucket": "b", "ksa": "ray"}
    with pytest.raises(InvalidInput) as info:
        StackOutputs.parse(cdktf_shape(old), STACK)
    assert info.value.field == "outputs.endpoint"
    assert "(missing: endpoint, ca_certificate, project, namespace, service_account)" in info.value.problem


# ---------------------------------------------------------------------- --stack is the exact stack id


@unit
@pytest.mark.parametrize("stack", [
    "ray-tpu",                 # the cluster name: no alias
    "ray-tpu-clusters", "ray",  # no suffix guessing, no prefix matching
    "Ray-Tpu-Cluster", "ray_tpu_cluster", " ray-tpu-cluster",  # no loose matching
    "cluster",
])
def test_stack_must_be_the_exact_stack_id_and_the_valid_ids_are_listed(stack: str) -> None:
    data = cdktf_shape(**{"team-b-cluster": dict(VALUES)})
    with pytest.raises(InvalidInput) as info:
        StackOutputs.parse(data, stack, "outputs.json")
    assert str(info.value) == (f"--stack: {stack!r} is not allowed (cluster stacks in outputs.json); "
                               "valid: ray-tpu-cluster, team-b-cluster")


@unit
def test_unknown_stack_in_a_file_without_cluster_stacks_lists_every_stack() -> None:
    with pytest.raises(InvalidInput) as info:
        StackOutputs.parse({"a-workloads": {}, "b": {"x": 1}}, STACK, "o.json")
    assert str(info.value) == f"--stack: {STACK!r} is not allowed (stacks in o.json); valid: a-workloads, b"


@unit
def test_a_stack_that_holds_no_object_is_invalid() -> None:
    with pytest.raises(InvalidInput) as info:
        StackOutputs.parse({STACK: ["x"], "other": {}}, STACK, "o.json")
    assert (info.value.field, info.value.problem) == ("--outputs", f"o.json: stack {STACK!r} holds no outputs")


# ---------------------------------------------------------------------- unreadable files, through the CLI


CONFIG = """\
project: my-ml-project
region: us-east5
cluster: {name: ray-tpu}
slices:
  - {name: train, generation: v6e, topology: 4x4, zone: us-east5-b}
workloads:
  - {name: train, kind: train, slice: train}
"""


def _write(path: Path, content: str | bytes | None) -> None:
    if content is None:
        return
    if isinstance(content, bytes):
        path.write_bytes(content)
    elif content == "<dir>":
        path.mkdir()
    else:
        path.write_text(content)


@unit
@pytest.mark.parametrize(("content", "message"), [
    (None, "error: --outputs: cannot read 'outputs.json' (No such file or directory); valid: the file "
           f"`cdktf deploy --outputs-file FILE` wrote (default {DEFAULT_OUTPUTS}), or `terraform output -json > FILE`"),
    ("<dir>", "error: --outputs: cannot read 'outputs.json' (Is a directory)"),
    ("ray-tpu-cluster:\n  endpoint: x\n", "error: --outputs: 'outputs.json' is not JSON (Expecting value at line 1)"),
    ("", "error: --outputs: 'outputs.json' is not JSON (Expecting value at line 1)"),
    ('{"ray-tpu-cluster": {"endpoint": ', "error: --outputs: 'outputs.json' is not JSON (Expecting value at line 1)"),
    (b"\x1f\x8b\x08\x00\xff\xfe", "error: --outputs: 'outputs.json' is not JSON (not UTF-8 text: byte 1)"),
    ("[]", "error: --outputs: outputs.json holds no stack outputs"),
    ("{}", "error: --outputs: outputs.json holds no stack outputs"),
    ('"ray-tpu-cluster"', "error: --outputs: outputs.json holds no stack outputs"),
    (json.dumps(cdktf_shape({k: v for k, v in VALUES.items() if k != "bucket"})),
     f"error: outputs.bucket: is required in outputs.json for stack {STACK!r} (missing: bucket)"),
    (json.dumps({"ray-tpu-workloads": {}}),
     f"error: --stack: {STACK!r} is not allowed (stacks in outputs.json); valid: ray-tpu-workloads"),
])
@pytest.mark.parametrize("command", ["submit", "smoke"])
def test_bad_outputs_file_exits_2_with_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                capsys: pytest.CaptureFixture[str], content: str | bytes | None,
                                                message: str, command: str) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("PATH", str(tmp_path / "no-kubectl-here"))  # nothing may reach a cluster
    (tmp_path / "raytpu.yaml").write_text(CONFIG)
    _write(tmp_path / "outputs.json", content)
    argv = ["submit", "train"] if command == "submit" else ["smoke"]
    assert cli.main([*argv, "--stack", STACK, "--outputs", "outputs.json", "--run-id", "r1"]) == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert len(err.splitlines()) == 1, err
    assert err.startswith(message), err
    assert "Traceback" not in err


@unit
def test_default_outputs_file_is_the_documented_one(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    """``cdktf deploy --outputs-file outputs.json`` (the documented deploy) is what --outputs defaults to."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "raytpu.yaml").write_text(CONFIG)
    (tmp_path / DEFAULT_OUTPUTS).write_text(json.dumps(cdktf_shape()))
    write_record(tmp_path)
    assert cli.main(["submit", "train", "--stack", STACK, "--run-id", "r1", "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert f"bucketName: {VALUES['bucket']}" in out and "--storage-path /mnt/gcs/checkpoints --name train-r1" in out


# ---------------------------------------------------------------------- outputs are input: every value checked


BAD_VALUES = [  # (output, value, the problem's start): every type the JSON may hold, and strings that are no value
    ("namespace", None, "null is not DNS-safe"),
    ("namespace", "", "'' is not DNS-safe"),
    ("namespace", "Ray", "'Ray' is not DNS-safe"),
    ("bucket", ["b"], "[b] is not a bucket name"),
    ("bucket", "", "'' is not a bucket name"),
    ("bucket", 12345, "12345 is not a bucket name"),
    ("service_account", {"name": "ray"}, "{name: ray} is not a Kubernetes ServiceAccount name"),
    ("service_account", True, "true is not a Kubernetes ServiceAccount name"),
    ("service_account", "", "'' is not a Kubernetes ServiceAccount name"),
    ("service_account", "Ray", "'Ray' is not a Kubernetes ServiceAccount name"),
    ("service_account", "ray..workers", "'ray..workers' is not a Kubernetes ServiceAccount name"),
    ("service_account", "ray.-workers", "'ray.-workers' is not a Kubernetes ServiceAccount name"),
    ("service_account", "-ray", "'-ray' is not a Kubernetes ServiceAccount name"),
    ("service_account", "ray_workers", "'ray_workers' is not a Kubernetes ServiceAccount name"),
    ("service_account", "a" * 254, f"'{'a' * 79}... (254 characters) is not a Kubernetes ServiceAccount name"),
    ("endpoint", "", "'' is not an endpoint"),
    ("endpoint", "  ", "'  ' is not an endpoint"),
    ("endpoint", None, "null is not an endpoint"),
    ("endpoint", "http://34.1.2.3", "'http://34.1.2.3' is not an https URL"),
    ("ca_certificate", None, "null is not a CA certificate"),
    ("ca_certificate", "bm90IGEgY2VydA==", "'bm90IGEgY2VydA==...' is not a base64-encoded PEM certificate"),
    ("cluster_name", 42, "42 is not a GKE cluster name"),
    ("cluster_name", "Ray_TPU", "'Ray_TPU' is not a GKE cluster name"),
    ("location", "us-east5-b", "'us-east5-b' is not a GCP region"),
    ("location", None, "null is not a GCP region"),
    ("project", "My Project", "'My Project' is not a GCP project id"),
    ("project", 1.5, "1.5 is not a GCP project id"),
    ("registry", ["us-east5-docker.pkg.dev/p/r"], "[us-east5-docker.pkg.dev/p/r] is not an Artifact Registry"),
    ("registry", "gcr.io/my-ml-project", "'gcr.io/my-ml-project' is not an Artifact Registry"),
    ("registry", None, "null is not an Artifact Registry"),
    ("builder_service_account", "someone@gmail.com", "'someone@gmail.com' is not a service account email"),
    ("builder_service_account", 0, "0 is not a service account email"),
]


@unit
@pytest.mark.parametrize("name", ["ray-workloads", "team-a.ray", "inference-platform-prod-ray-worker-pods-serving",
                                  "0ray", "a" * 253, ".".join(["a" * 63] * 3) + ".b"])
def test_a_service_account_output_takes_any_kubernetes_serviceaccount_name(name: str) -> None:
    """An outside app's KSA name longer than a 30-character slice name, with dots or a leading digit, is a valid
    ServiceAccount name (a DNS-1123 subdomain), so it is read as it is."""
    assert StackOutputs.parse(cdktf_shape({**VALUES, "service_account": name}), STACK, "o.json").service_account == name


@unit
@pytest.mark.parametrize(("name", "value", "problem"), BAD_VALUES, ids=[f"{n}={v!r}" for n, v, _ in BAD_VALUES])
@pytest.mark.parametrize(("shape", "where"), [(cdktf_shape, f"o.json: {STACK}.{{}}"),
                                              (terraform_shape, "o.json: {}.value")], ids=["cdktf", "terraform"])
def test_an_output_of_the_wrong_type_or_form_is_named_where_it_sits(shape: Any, where: str, name: str, value: Any,
                                                                     problem: str) -> None:
    with pytest.raises(InvalidInput) as info:
        StackOutputs.parse(shape({**VALUES, name: value}), STACK, "o.json")
    assert info.value.field == where.format(name)
    assert info.value.problem.startswith(problem), info.value.problem


@unit
def test_every_bad_output_is_reported_at_once() -> None:
    with pytest.raises(InvalidInputs) as info:
        StackOutputs.parse(cdktf_shape({**VALUES, "namespace": None, "bucket": ["b"], "endpoint": ""}), STACK, "o")
    assert [p.field for p in info.value.problems] == [f"o: {STACK}.{n}" for n in ("endpoint", "namespace", "bucket")]


@unit
@pytest.mark.parametrize("values", [
    dict(VALUES),
    {**VALUES, "ca_certificate": ""},  # the DNS-based endpoint: publicly trusted, no CA
    {**VALUES, "endpoint": "https://gke-0123456789abcdef.us-east5.gke.goog"},
    {k: v for k, v in VALUES.items() if k not in ("registry", "builder_service_account")},  # an older stack
    {**VALUES, "registry": "", "builder_service_account": ""},
])
def test_valid_outputs_of_every_form_are_read_unchanged(values: dict[str, Any]) -> None:
    outputs = StackOutputs.parse(cdktf_shape(values), STACK)
    assert {n: getattr(outputs, n) for n in values} == values


# ---------------------------------------------------------------------- outputs belong to the config's stack


OTHER = [  # (output, value of another stack)
    ("project", "other-project"),
    ("cluster_name", "team-b"),
    ("location", "europe-west4"),
    ("registry", "us-east5-docker.pkg.dev/other-project/ray-tpu-images"),
    ("registry", "europe-west4-docker.pkg.dev/my-ml-project/ray-tpu-images"),
    ("builder_service_account", "raytpu-ray-tpu-img@other-project.iam.gserviceaccount.com"),
]


@unit
@pytest.mark.parametrize(("name", "value"), OTHER)
@pytest.mark.parametrize(("shape", "where"), [(cdktf_shape, f"o.json: {STACK}.{{}}"),
                                              (terraform_shape, "o.json: {}.value")], ids=["cdktf", "terraform"])
def test_outputs_of_another_project_cluster_or_region_are_refused(shape: Any, where: str, name: str,
                                                                  value: str) -> None:
    from raytpu.config import parse

    spec = parse(CONFIG)
    assert StackOutputs.parse(shape(), STACK, "o.json", spec, "raytpu.yaml") == EXPECTED
    with pytest.raises(InvalidInput) as info:
        StackOutputs.parse(shape({**VALUES, name: value}), STACK, "o.json", spec, "raytpu.yaml")
    if name == "cluster_name" and shape is terraform_shape:  # this shape names its stack only by its cluster
        assert info.value.field == "--stack" and "its cluster_name is 'team-b'" in info.value.problem
        return
    assert info.value.field == where.format(name)
    assert info.value.problem.startswith(f"{value!r} is not raytpu.yaml's "), info.value.problem
    assert info.value.valid.startswith(f"the outputs of the cluster stack deployed from raytpu.yaml ({STACK})")


@unit
@pytest.mark.parametrize("stack", ["team-b-cluster", "ray-tpu", "ray-tpu-workloads"])
def test_terraform_output_json_is_checked_against_stack(stack: str) -> None:
    """``terraform output -json`` names no stack: ``--stack`` must be the stack of the cluster it names."""
    with pytest.raises(InvalidInput) as info:
        StackOutputs.parse(terraform_shape(), stack, "o.json")
    assert str(info.value) == (f"--stack: {stack!r} is not the stack o.json is from (its cluster_name is 'ray-tpu': "
                               f"`terraform output -json` of stack {STACK}); valid: {STACK}, or the outputs of "
                               f"stack {stack}")


BAD_FILES = [  # (outputs.json's stack values, the first stderr line)
    ({**VALUES, "namespace": None},
     f"error: outputs.json: {STACK}.namespace: null is not DNS-safe; valid: 1-30 characters"),
    ({**VALUES, "bucket": ["b"]}, f"error: outputs.json: {STACK}.bucket: [b] is not a bucket name"),
    ({**VALUES, "service_account": {"name": "ray"}},
     f"error: outputs.json: {STACK}.service_account: {{name: ray}} is not a Kubernetes ServiceAccount name; "
     "valid: a DNS subdomain"),
    ({**VALUES, "endpoint": ""}, f"error: outputs.json: {STACK}.endpoint: '' is not an endpoint"),
    ({**VALUES, "bucket": ""}, f"error: outputs.json: {STACK}.bucket: '' is not a bucket name"),
    ({**VALUES, "project": "other-project"},
     f"error: outputs.json: {STACK}.project: 'other-project' is not raytpu.yaml's project ('my-ml-project')"),
    ({**VALUES, "cluster_name": "team-b"},
     f"error: outputs.json: {STACK}.cluster_name: 'team-b' is not raytpu.yaml's cluster_name ('ray-tpu')"),
    ({**VALUES, "location": "europe-west4"},
     f"error: outputs.json: {STACK}.location: 'europe-west4' is not raytpu.yaml's location ('us-east5')"),
]


@unit
@pytest.mark.parametrize(("values", "message"), BAD_FILES)
@pytest.mark.parametrize("command", ["submit", "smoke", "images"])
def test_bad_output_values_exit_2_naming_the_field_before_anything_is_written(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], values: dict[str, Any],
        message: str, command: str) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("PATH", str(tmp_path / "no-kubectl-here"))
    (tmp_path / "raytpu.yaml").write_text(CONFIG)
    (tmp_path / "outputs.json").write_text(json.dumps(cdktf_shape(values)))
    before = sorted(p.name for p in tmp_path.iterdir())
    argv = {"submit": ["submit", "train", "--dry-run", "--run-id", "r1"], "smoke": ["smoke", "--dry-run"],
            "images": ["images", "build"]}[command]
    assert cli.main([*argv, "--stack", STACK, "--config", "raytpu.yaml"]) == 2
    out, err = capsys.readouterr()
    assert out == "" and "Traceback" not in err
    assert err.splitlines()[0].startswith(message), err
    assert sorted(p.name for p in tmp_path.iterdir()) == before


@unit
def test_an_outputs_file_from_before_the_ksa_rename_is_refused_naming_the_output(tmp_path: Path) -> None:
    """The example outputs as the kit wrote them before the per-cluster KSA (commit fc74ab9: ``service_account``
    ``ray``): pods would name a KSA the stack no longer has and never be created; exit 2 naming FILE: STACK.OUTPUT.
    Source: stacks/cluster.py outputs ``service_account`` = ``ClusterSpec.ksa_name`` (``<cluster>-ray``)"""
    from raytpu import config
    old = json.loads((REPO / "examples" / "outputs.example.json").read_text())
    old[STACK]["service_account"] = "ray"  # `git show fc74ab9~1:examples/outputs.example.json`
    path = tmp_path / "outputs.json"
    path.write_text(json.dumps(old))
    spec = config.load(REPO / "raytpu.example.yaml")
    with pytest.raises(InvalidInput) as info:
        StackOutputs.read(path, STACK, spec, "raytpu.yaml")
    assert str(info.value).startswith(f"{path}: {STACK}.service_account: 'ray' is not the service_account the "
                                      "cluster stack of raytpu.yaml writes ('ray-tpu-ray')"), str(info.value)
    old[STACK] |= {"service_account": "ray-tpu-ray", "bucket": "my-ml-project-ray-tpu"}
    path.write_text(json.dumps(old))
    with pytest.raises(InvalidInput) as info:
        StackOutputs.read(path, STACK, spec, "raytpu.yaml")
    assert info.value.field == f"{path}: {STACK}.bucket", str(info.value)
    old[STACK]["bucket"] = "my-ml-project-ray-tpu-ray"
    path.write_text(json.dumps(old))
    assert StackOutputs.read(path, STACK, spec, "raytpu.yaml").service_account == "ray-tpu-ray"
