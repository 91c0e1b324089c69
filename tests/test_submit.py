"""``raytpu submit`` and ``raytpu smoke`` against a recording ``kubectl``, and the stack outputs reader.

GKE cannot be reached from the test machine, so the boundary is ``kubectl``: each test puts a fake
``kubectl`` first on PATH that records its exact arguments and stdin and answers with canned RayJob
JSON (a sequence of states per job) and canned driver logs. The tests assert the exact manifests
applied (and that they pass the KubeRay CRD schema and the TPU webhook rules) and the exit codes.
"""

from __future__ import annotations

import json
import os
import stat
import sys
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest
import yaml
from crd import operator_errors, schema_errors, webhook_errors

from raytpu import cli, gke, kuberay, report
from raytpu.config import parse
from raytpu.spec import WORKLOAD_ENV, WorkloadSpec

pytestmark = pytest.mark.unit

CONFIG = """\
project: my-ml-project
region: us-east5
cluster: {name: ray-tpu}
slices:
  - {name: train, generation: v6e, topology: 4x4, zone: us-east5-b, count: 2}
  - {name: serve, generation: v6e, topology: 2x4, zone: us-east5-b, provisioning: spot}
  - {name: dws, generation: v6e, topology: 2x2, zone: us-east5-b, provisioning: queued}
workloads:
  - {name: smoke, kind: smoke, slice: train, image: example.com/ray-tpu:smoke}
  - {name: train, kind: train, slice: train}
  - {name: serve, kind: serve, slice: serve}
"""
STACK = "ray-tpu-cluster"
"""The cluster stack's id: ``<cluster name>-cluster``."""
OUTPUTS = {STACK: {"endpoint": "34.1.2.3", "ca_certificate": "LS0tLS1CRUdJTg==", "cluster_name": "ray-tpu",
                   "location": "us-east5", "project": "my-ml-project", "namespace": "ray",
                   "service_account": "ray-workloads", "bucket": "my-bucket"},
           "ray-tpu-workloads": {}}
"""What ``cdktf deploy --outputs-file`` writes for the two stacks (the workloads stack exports nothing)."""
CONTEXT = "gke_my-ml-project_us-east5_ray-tpu"

FAKE_KUBECTL = """\
#!{python}
import json, os, sys
d = os.environ["FAKE_KUBECTL_DIR"]
args = sys.argv[1:]
stdin = sys.stdin.read() if args[-2:] == ["-f", "-"] else ""
with open(os.path.join(d, "calls.jsonl"), "a") as f:
    f.write(json.dumps({{"args": args, "stdin": stdin}}) + "\\n")
rest = list(args)
for flag in ("--context", "-n"):
    if flag in rest:
        i = rest.index(flag)
        del rest[i:i + 2]
if rest[:2] == ["config", "get-contexts"]:
    print(open(os.path.join(d, "contexts")).read())
elif rest[0] == "apply":
    for item in json.loads(stdin)["items"]:
        print(item["kind"].lower() + ".ray.io/" + item["metadata"]["name"] + " created")
elif rest[0] == "get":
    path = os.path.join(d, rest[1] + "-" + rest[2] + ".json")
    if not os.path.exists(path):
        sys.stderr.write('Error from server (NotFound): ' + rest[1] + ' "' + rest[2] + '" not found\\n')
        sys.exit(1)
    states = json.load(open(path))
    count_path = path + ".count"
    n = int(open(count_path).read()) if os.path.exists(count_path) else 0
    open(count_path, "w").write(str(n + 1))
    print(json.dumps(states[min(n, len(states) - 1)]))
elif rest[0] == "logs":
    path = os.path.join(d, "logs-" + rest[1].split("/", 1)[1] + ".txt")
    if not os.path.exists(path):
        sys.stderr.write("error: not found\\n")
        sys.exit(1)
    sys.stdout.write(open(path).read())
else:
    sys.stderr.write("fake kubectl: unexpected " + " ".join(args) + "\\n")
    sys.exit(3)
"""


class FakeCluster:
    """The fake kubectl's directory: canned states and logs in, recorded calls out."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def job(self, name: str, *states: tuple[str, str], kind: str = "rayjob") -> None:
        objs = [{"apiVersion": "ray.io/v1", "kind": "RayJob", "metadata": {"name": name},
                 "status": {"jobDeploymentStatus": dep, "jobStatus": job}} for dep, job in states]
        (self.root / f"{kind}-{name}.json").write_text(json.dumps(objs))

    def service(self, name: str, *statuses: dict[str, Any]) -> None:
        objs = [{"kind": "RayService", "metadata": {"name": name}, "status": s} for s in statuses]
        (self.root / f"rayservice-{name}.json").write_text(json.dumps(objs))

    def logs(self, name: str, text: str) -> None:
        (self.root / f"logs-{name}.txt").write_text(text)

    def contexts(self, *names: str) -> None:
        (self.root / "contexts").write_text("\n".join(names) + "\n")

    @property
    def calls(self) -> list[dict[str, Any]]:
        path = self.root / "calls.jsonl"
        return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []

    def applied(self) -> list[dict[str, Any]]:
        """Every manifest piped to ``kubectl apply -f -``."""
        items = []
        for call in self.calls:
            if "apply" in call["args"]:
                doc = json.loads(call["stdin"])
                assert doc["kind"] == "List" and doc["apiVersion"] == "v1"
                items += doc["items"]
        return items


@pytest.fixture
def fake(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> FakeCluster:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    script = bin_dir / "kubectl"
    script.write_text(FAKE_KUBECTL.format(python=sys.executable))
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    state = tmp_path / "kube"
    state.mkdir()
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("FAKE_KUBECTL_DIR", str(state))
    (tmp_path / "raytpu.yaml").write_text(CONFIG)
    (tmp_path / "outputs.json").write_text(json.dumps(OUTPUTS))
    monkeypatch.chdir(tmp_path)
    cluster = FakeCluster(state)
    cluster.contexts("kind-local", CONTEXT)
    return cluster


def main(*argv: str) -> int:
    return cli.main(list(argv))


def verdict_line(name: str, healthy: bool = True) -> str:
    return report.format_verdict_line({
        "slice": name, "healthy": healthy, "generation": "v6e", "topology": "4x4", "pod_type": "v6e-16",
        "hosts_expected": 4, "hosts_found": 4 if healthy else 3, "duration_s": 12.0,
        "checks": [{"name": "hosts", "ok": healthy, "detail": "" if healthy else "host 3 missing",
                    "value": 4 if healthy else 3, "expected": 4}],
        "hosts": []})


def expected(workload: str, name: str) -> dict[str, Any]:
    """The object ``raytpu submit WORKLOAD`` should apply as ``name`` (train: checkpoints under its run name)."""
    spec = parse(CONFIG)
    args = ["--storage-path", f"gs://my-bucket/checkpoints/{name}", "--name", name] if workload == "train" else []
    return kuberay.workload_manifest(spec, spec.workload(workload), service_account="ray-workloads",
                                     bucket="my-bucket", namespace="ray", name=name, args=args)


def carried_spec(manifest: dict[str, Any]) -> WorkloadSpec:
    """The WorkloadSpec a RayJob hands its pod (``RAYTPU_WORKLOAD`` in the runtime env)."""
    return WorkloadSpec.from_env(yaml.safe_load(manifest["spec"]["runtimeEnvYAML"])["env_vars"])


# ---------------------------------------------------------------------- submit


def test_submit_smoke_waits_applies_exact_manifest_and_prints_verdicts(
        fake: FakeCluster, capsys: pytest.CaptureFixture[str]) -> None:
    fake.job("smoke-r1", ("Initializing", ""), ("Running", "RUNNING"), ("Complete", "SUCCEEDED"))
    fake.logs("smoke-r1", f"2026-11-30 job started\n{verdict_line('tpu-a')}\n{verdict_line('tpu-b')}\nbye\n")
    code = main("submit", "smoke", "--stack", STACK, "--wait", "--run-id", "r1", "--poll-s", "0.01")
    out, err = capsys.readouterr()
    assert code == 0, err
    assert fake.applied() == [expected("smoke", "smoke-r1")]
    manifest = fake.applied()[0]
    assert schema_errors(manifest) == [] and webhook_errors(manifest) == [] and operator_errors(manifest) == []
    assert manifest["spec"]["rayClusterSpec"]["workerGroupSpecs"][0]["replicas"] == 2
    assert "smoke-r1: Running/RUNNING" in err and "smoke-r1: Complete/SUCCEEDED" in err
    assert "✓  tpu-a" in out and "2/2 slices healthy" in out
    calls = [c["args"] for c in fake.calls]
    assert calls[0] == ["config", "get-contexts", "-o", "name"]
    assert calls[1] == ["--context", CONTEXT, "-n", "ray", "apply", "-f", "-"]
    assert calls[-1] == ["--context", CONTEXT, "-n", "ray", "logs", "job/smoke-r1", "--tail=-1"]


def test_submit_train_without_wait_applies_and_returns(fake: FakeCluster,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    code = main("submit", "train", "--stack", STACK, "--run-id", "r2")
    out, _ = capsys.readouterr()
    assert code == 0
    assert fake.applied() == [expected("train", "train-r2")]
    assert fake.applied()[0]["spec"]["entrypoint"] == (
        "python -m raytpu.workloads.train --storage-path gs://my-bucket/checkpoints/train-r2 --name train-r2")
    assert carried_spec(fake.applied()[0]) == parse(CONFIG).workload("train")
    assert "submitted RayJob train-r2" in out
    assert not any("get" in c["args"] for c in fake.calls)


def test_submit_failed_job_exits_1_with_error(fake: FakeCluster, capsys: pytest.CaptureFixture[str]) -> None:
    fake.job("train-r3", ("Running", "RUNNING"), ("Failed", "FAILED"))
    fake.logs("train-r3", "Traceback: boom\n")
    code = main("submit", "train", "--stack", STACK, "--wait", "--run-id", "r3", "--poll-s", "0.01")
    out, err = capsys.readouterr()
    assert code == 1
    assert "Traceback: boom" in out
    assert "error: train-r3: RayJob ended Failed/FAILED" in err


def test_submit_unhealthy_smoke_exits_1(fake: FakeCluster, capsys: pytest.CaptureFixture[str]) -> None:
    fake.job("smoke-r4", ("Complete", "SUCCEEDED"))
    fake.logs("smoke-r4", verdict_line("tpu-a", healthy=False) + "\n")
    assert main("submit", "smoke", "--stack", STACK, "--wait", "--run-id", "r4", "--poll-s", "0") == 1
    out, err = capsys.readouterr()
    assert "✗  tpu-a" in out and "unhealthy" in err


def test_submit_wait_times_out_with_exit_1(fake: FakeCluster, capsys: pytest.CaptureFixture[str]) -> None:
    fake.job("train-r5", ("Initializing", ""))
    code = main("submit", "train", "--stack", STACK, "--wait", "--run-id", "r5", "--poll-s", "0.01",
                "--timeout-s", "0.2")
    assert code == 1
    assert "still Initializing/- after 0.2s" in capsys.readouterr().err


def test_submit_serve_applies_rayservice_and_waits_until_ready(fake: FakeCluster,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    fake.service("serve", {"serviceStatus": ""}, {"conditions": [{"type": "Ready", "status": "True"}]})
    code = main("submit", "serve", "--stack", STACK, "--wait", "--poll-s", "0.01")
    out, _ = capsys.readouterr()
    assert code == 0
    assert fake.applied() == [expected("serve", "serve")]
    assert schema_errors(fake.applied()[0]) == [] and operator_errors(fake.applied()[0]) == []
    assert "RayService serve is ready" in out


def test_submit_dry_run_prints_yaml_and_runs_no_kubectl(fake: FakeCluster,
                                                        capsys: pytest.CaptureFixture[str]) -> None:
    assert main("submit", "train", "--stack", STACK, "--dry-run", "--run-id", "r6") == 0
    assert list(yaml.safe_load_all(capsys.readouterr().out)) == [expected("train", "train-r6")]
    assert fake.calls == []


def test_every_rayjob_submission_is_a_new_run_and_a_rayservice_keeps_its_name(
        fake: FakeCluster, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each RayJob submission is ``<workload>-<run id>`` (default run id: :func:`gke.run_id`), so it never updates
    an earlier job, and train checkpoints under its own run; re-applying a RayService updates it in place."""
    ids = iter(["k1", "k2", "k3", "k4", "k5"])
    monkeypatch.setattr(gke, "run_id", lambda now=None: next(ids))
    for workload in ("train", "train", "smoke", "serve", "serve"):
        assert main("submit", workload, "--stack", STACK) == 0
    applied = fake.applied()
    assert [m["metadata"]["name"] for m in applied] == ["train-k1", "train-k2", "smoke-k3", "serve", "serve"]
    assert applied == [expected("train", "train-k1"), expected("train", "train-k2"), expected("smoke", "smoke-k3"),
                       expected("serve", "serve"), expected("serve", "serve")]
    assert [m["spec"]["entrypoint"] for m in applied[:2]] == [
        f"python -m raytpu.workloads.train --storage-path gs://my-bucket/checkpoints/{run} --name {run}"
        for run in ("train-k1", "train-k2")]
    spec = parse(CONFIG)
    assert [carried_spec(m) for m in applied[:3]] == [spec.workload("train")] * 2 + [spec.workload("smoke")]


def test_default_run_id_names_the_job_workload_dash_run_id(fake: FakeCluster,
                                                           capsys: pytest.CaptureFixture[str]) -> None:
    before = gke.run_id()
    assert main("submit", "train", "--stack", STACK) == 0
    (job,) = fake.applied()
    name = job["metadata"]["name"]
    workload, _, run = name.partition("-")
    assert workload == "train" and run.isalnum() and run == run.lower() and before <= run <= gke.run_id()
    assert f"--storage-path gs://my-bucket/checkpoints/{name} --name {name}" in job["spec"]["entrypoint"]
    assert f"submitted RayJob {name}" in capsys.readouterr().out


@pytest.mark.parametrize(("argv", "message"), [
    (("submit", "nope", "--stack", STACK), "error: WORKLOAD: 'nope' is not allowed; valid: smoke, train, serve"),
    (("submit", "train", "--stack", STACK, "--outputs", "missing.json"),
     "error: --outputs: cannot read 'missing.json'"),
    (("submit", "train", "--stack", "other"),
     "error: --stack: 'other' is not allowed (cluster stacks in outputs.json); valid: ray-tpu-cluster\n"),
    (("submit", "train", "--stack", "ray-tpu"), "error: --stack: 'ray-tpu' is not allowed"),
    (("smoke", "--stack", "ray-tpu"), "error: --stack: 'ray-tpu' is not allowed"),
    (("smoke", "--stack", STACK, "--outputs", "missing.json"), "error: --outputs: cannot read"),
    (("smoke", "--stack", STACK, "--config", "nope.yaml"), "error: config: cannot read 'nope.yaml'"),
])
def test_bad_input_exits_2_with_a_clear_message_and_no_kubectl(
        fake: FakeCluster, capsys: pytest.CaptureFixture[str], argv: tuple[str, ...], message: str) -> None:
    assert main(*argv) == 2
    err = capsys.readouterr().err
    assert err.startswith(message) and "Traceback" not in err
    assert len(err.splitlines()) == 1, err
    assert fake.calls == []


def test_missing_kube_context_names_the_gcloud_command(fake: FakeCluster,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    fake.contexts("kind-local")
    assert main("submit", "train", "--stack", STACK, "--run-id", "r7") == 1
    err = capsys.readouterr().err
    assert ("run `gcloud container clusters get-credentials ray-tpu --location us-east5 --project my-ml-project`"
            in err)
    assert fake.applied() == []


def test_explicit_context_is_used_without_probing(fake: FakeCluster) -> None:
    assert main("submit", "train", "--stack", STACK, "--run-id", "r8", "--context", "mine") == 0
    assert [c["args"][:2] for c in fake.calls] == [["--context", "mine"]]


# ---------------------------------------------------------------------- smoke


def test_smoke_one_job_per_slice_copy_reports_and_exits_1_on_unhealthy(
        fake: FakeCluster, capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    names = ["smoke-train-0-n1", "smoke-train-1-n1", "smoke-serve-0-n1"]
    for name in names:
        fake.job(name, ("Running", "RUNNING"), ("Complete", "SUCCEEDED"))
    fake.logs(names[0], verdict_line("tpu-train-a") + "\n")
    fake.logs(names[1], verdict_line("tpu-train-b", healthy=False) + "\n")
    fake.logs(names[2], "driver died before printing a verdict\n")
    code = main("smoke", "--stack", STACK, "--run-id", "n1", "--poll-s", "0.01", "--report", "out")
    out, err = capsys.readouterr()
    assert code == 1
    applied = fake.applied()
    assert [m["metadata"]["name"] for m in applied] == names
    assert len([c for c in fake.calls if "apply" in c["args"]]) == 1
    config = parse(CONFIG)
    assert applied == kuberay.smoke_jobs(config, service_account="ray-workloads", bucket="my-bucket",
                                         namespace="ray", suffix="n1")
    for manifest in applied:
        assert schema_errors(manifest) == [] and webhook_errors(manifest) == [] and operator_errors(manifest) == []
        assert manifest["spec"]["rayClusterSpec"]["workerGroupSpecs"][0]["replicas"] == 1
    assert applied[0]["spec"]["rayClusterSpec"]["headGroupSpec"]["template"]["spec"]["containers"][0]["image"] == (
        "example.com/ray-tpu:smoke")
    assert "warning: slice dws: skipped (queued provisioning" in err
    assert "error: smoke: 2 of 3 slices unhealthy (smoke-train-1-n1, smoke-serve-0-n1)" in err
    assert "1/3 slices healthy" in out
    doc = json.loads((tmp_path / "out" / "smoke.json").read_text())
    assert doc["healthy"] is False and doc["skipped_slices"] == ["dws"] and doc["run_id"] == "n1"
    assert [v["job"] for v in doc["slices"]] == names
    assert doc["slices"][2]["checks"][0]["detail"].startswith("no RAYTPU_SMOKE_VERDICT line")
    serve = config.slice("serve").plan  # a job that gave no verdict is still described by its slice's plan
    assert {k: doc["slices"][2][k] for k in ("generation", "topology", "pod_type", "hosts_expected")} == {
        "generation": serve.generation, "topology": serve.topology, "pod_type": serve.ray_pod_type,
        "hosts_expected": serve.hosts}
    root = ET.parse(tmp_path / "out" / "smoke.junit.xml").getroot()
    assert [s.get("name") for s in root.findall("testsuite")] == ["tpu-train-a", "tpu-train-b", "smoke-serve-0-n1"]
    assert root.get("failures") == "2"


def test_smoke_all_healthy_exits_0(fake: FakeCluster, capsys: pytest.CaptureFixture[str]) -> None:
    for i, name in enumerate(["smoke-train-0-n2", "smoke-train-1-n2", "smoke-serve-0-n2"]):
        fake.job(name, ("Complete", "SUCCEEDED"))
        fake.logs(name, verdict_line(f"tpu-{i}") + "\n")
    assert main("smoke", "--stack", STACK, "--run-id", "n2", "--poll-s", "0") == 0
    assert "3/3 slices healthy" in capsys.readouterr().out
    assert Path("reports/smoke.junit.xml").is_file()


def test_smoke_failed_job_with_healthy_verdict_is_still_unhealthy(fake: FakeCluster,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    for name in ["smoke-train-0-n3", "smoke-train-1-n3", "smoke-serve-0-n3"]:
        fake.job(name, ("Complete", "SUCCEEDED"))
        fake.logs(name, verdict_line(name) + "\n")
    fake.job("smoke-serve-0-n3", ("Failed", "FAILED"))
    assert main("smoke", "--stack", STACK, "--run-id", "n3", "--poll-s", "0") == 1
    assert "RayJob ended Failed/FAILED" in capsys.readouterr().out


def test_smoke_timeout_counts_as_unhealthy(fake: FakeCluster, capsys: pytest.CaptureFixture[str]) -> None:
    code = main("smoke", "--stack", STACK, "--run-id", "n4", "--poll-s", "0.01", "--timeout-s", "0.1")
    out, _ = capsys.readouterr()
    assert code == 1
    assert "timed out after 0.1s; RayJob not found" in out


def test_smoke_jobs_carry_their_slices_spec_and_queued_slices_are_skipped_with_a_warning(
        fake: FakeCluster, capsys: pytest.CaptureFixture[str]) -> None:
    assert main("smoke", "--stack", STACK, "--run-id", "d1", "--dry-run") == 0
    out, err = capsys.readouterr()
    jobs = list(yaml.safe_load_all(out))
    assert [j["metadata"]["name"] for j in jobs] == ["smoke-train-0-d1", "smoke-train-1-d1", "smoke-serve-0-d1"]
    spec = parse(CONFIG)
    for job in jobs:
        carried = carried_spec(job)
        assert carried.kind.name == "smoke" and carried.slice_count == 1
        assert carried.slice == spec.slice(job["metadata"]["labels"][kuberay.SLICE_LABEL])
        assert job["spec"]["entrypoint"] == "python -m raytpu.workloads.smoke"
    assert err.splitlines() == ["warning: slice dws: skipped (queued provisioning cannot run a RayJob with workers)"]
    assert fake.calls == []


def test_smoke_with_only_queued_slices_exits_2(fake: FakeCluster, capsys: pytest.CaptureFixture[str]) -> None:
    Path("raytpu.yaml").write_text(CONFIG.split("slices:")[0] + "slices:\n"
                                   "  - {name: dws, generation: v6e, topology: 2x2, zone: us-east5-b, "
                                   "provisioning: queued}\n")
    assert main("smoke", "--stack", STACK, "--run-id", "q1") == 2
    err = capsys.readouterr().err
    assert err.splitlines()[-1] == ("error: slices: no slice can run a smoke RayJob; valid: at least one slice whose "
                                    "provisioning runs a Ray cluster")
    assert "warning: slice dws: skipped" in err and "Traceback" not in err
    assert fake.calls == []


# ---------------------------------------------------------------------- RayJob status and run ids


def test_job_state_reads_kuberay_status() -> None:
    state = gke.job_state("j", {"status": {"jobDeploymentStatus": "Failed", "jobStatus": "",
                                           "reason": "DeadlineExceeded", "message": "no capacity"}})
    assert state.done and not state.succeeded
    assert state.describe() == "Failed/- (DeadlineExceeded: no capacity)"
    assert not gke.job_state("j", {"status": {"jobDeploymentStatus": "Running"}}).done
    assert gke.job_state("j", None).describe() == "not found"


def test_run_id_is_short_dns_safe_and_time_ordered() -> None:
    rid = gke.run_id(1_800_000_000)
    assert rid.isalnum() and rid == rid.lower() and len(rid) == 6
    assert gke.run_id(1_800_000_000) < gke.run_id(1_800_000_001) < gke.run_id(1_800_003_600)


# ---------------------------------------------------------------------- the core zip


def test_core_zip_has_one_top_level_package_with_workloads_and_no_cdk(tmp_path: Path) -> None:
    import zipfile

    path = gke.build_core_zip(tmp_path / "raytpu.zip")
    names = zipfile.ZipFile(path).namelist()
    assert {n.split("/", 1)[0] for n in names} == {"raytpu"}
    assert {"raytpu/__init__.py", "raytpu/catalog.py", "raytpu/plan.py", "raytpu/kuberay.py", "raytpu/spec.py",
            "raytpu/kinds.py", "raytpu/provisioning.py", "raytpu/workloads/__init__.py"} <= set(names)
    assert not [n for n in names if n.startswith(("raytpu/stacks/", "raytpu/modules/")) or "__pycache__" in n]
    assert "raytpu/config.py" not in names  # jobs receive specs; they never parse YAML


def test_upload_core_copies_the_zip_to_the_py_modules_uri(fake: FakeCluster, tmp_path: Path,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    gcloud = tmp_path / "bin" / "gcloud"
    gcloud.write_text(f"#!{sys.executable}\nimport json, os, sys, zipfile\n"
                      "names = zipfile.ZipFile(sys.argv[3]).namelist()\n"
                      "open(os.path.join(os.environ['FAKE_KUBECTL_DIR'], 'gcloud.json'), 'w').write("
                      "json.dumps({'args': sys.argv[1:], 'names': names}))\n")
    gcloud.chmod(0o755)
    assert main("submit", "train", "--stack", STACK, "--run-id", "u1", "--upload-core") == 0
    record = json.loads((fake.root / "gcloud.json").read_text())
    uri = f"gs://my-bucket/raytpu/raytpu-{kuberay.__version__}.zip"
    assert record["args"][:2] == ["storage", "cp"] and record["args"][3] == uri
    assert {"raytpu/plan.py", "raytpu/spec.py"} <= set(record["names"]) and "raytpu/config.py" not in record["names"]
    runtime = yaml.safe_load(fake.applied()[0]["spec"]["runtimeEnvYAML"])
    assert runtime["py_modules"] == [f"file:///mnt/gcs/raytpu/raytpu-{kuberay.__version__}.zip"]
    assert set(runtime["env_vars"]) == {WORKLOAD_ENV}
