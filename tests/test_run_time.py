"""``workloads[].run_time_s`` (review of held-out configs, item 4): a RayJob's run time, so a multi-day pretrain is not
ended at its kind's 24 h. Source: KubeRay v1.7.0 ``checkActiveDeadlineAndUpdateStatusIfNeeded`` (Failed, then the
cluster is deleted)."""

from __future__ import annotations

from pathlib import Path

import pytest
from crd import schema_errors

from raytpu import cli
from raytpu.core.manifests import kuberay
from raytpu.core.specs import kinds
from raytpu.core.specs.kinds import MAX_RUN_TIME_S
from raytpu.core.specs.spec import SliceSpec, WorkloadSpec
from raytpu.core.specs.spec_warnings import deadline_warnings

pytestmark = pytest.mark.unit

IMAGE = "us-docker.pkg.dev/p/r/ray-tpu:2.60.0"
CONFIG = (Path(__file__).parent.parent / "raytpu.example.yaml").read_text()


def _job(kind: str, run_time_s: object, provisioning: str = "on-demand") -> dict:
    item = SliceSpec.create(name="train", generation="v6e", topology="4x4", zone="us-east5-b",
                            provisioning=provisioning)
    job = kind == "job"
    work = WorkloadSpec(name="w", kind=kinds.kind(kind), slice=item, run_time_s=run_time_s,  # type: ignore[arg-type]
                        entrypoint="python x.py" if job else None, image=IMAGE if job else None)
    return kuberay.ray_job("w-r1", work, kuberay.Pods(image=IMAGE))


@pytest.mark.parametrize(("kind", "run_time_s", "provisioning", "active", "waits"), [
    ("train", None, "on-demand", 3600 + 24 * 3600, 3600),  # the kind's default, as before
    ("train", 3 * 86400, "on-demand", 3600 + 3 * 86400, 3600),
    ("job", 600, "on-demand", 3600 + 600, 3600),
    ("smoke", 600, "spot", 1200 + 600, 1200),  # a check keeps its own wait
    ("train", 3 * 86400, "spot", 2 * 3 * 86400, 3 * 86400),  # on spot it waits for capacity as long as it may run
    ("train", "unlimited", "on-demand", None, 3600),
    ("job", "unlimited", "spot", None, 24 * 3600),  # no deadline: waits the kind's default run time
])
def test_run_time_sets_the_rayjobs_deadline(kind: str, run_time_s: object, provisioning: str, active: int | None,
                                            waits: int) -> None:
    spec = _job(kind, run_time_s, provisioning)["spec"]
    assert spec.get("activeDeadlineSeconds") == active and spec["preRunningDeadlineSeconds"] == waits
    assert ("activeDeadlineSeconds" in spec) is (active is not None)


@pytest.mark.parametrize("run_time_s", [None, 60, MAX_RUN_TIME_S, "unlimited"])
def test_the_rayjob_stays_valid_against_kuberays_crd(run_time_s: object) -> None:
    job = _job("train", run_time_s)
    assert not schema_errors(job), schema_errors(job)
    assert job["spec"].get("activeDeadlineSeconds", 0) < 2**31  # int32 in KubeRay v1.7.0's CRD


def _config(run_time_s: str, kind: str = "train") -> str:
    work = {"train": "  - name: long\n    kind: train\n    slice: train\n",
            "job": "  - name: long\n    kind: job\n    slice: train\n    entrypoint: python x.py\n",
            "smoke": "  - name: long\n    kind: smoke\n    slice: train\n",
            "serve": "  - name: long\n    kind: serve\n    slice: serve\n    model: Qwen/Qwen3-0.6B\n"}[kind]
    return CONFIG.rstrip("\n") + "\n" + work + f"    run_time_s: {run_time_s}\n"


@pytest.mark.parametrize(("kind", "value", "says"), [
    ("train", "0", "seconds from 1 to 31536000 (default 86400), or unlimited"),
    ("train", "-5", "is not a whole number of seconds in range"),
    ("train", "1.5", "run_time_s"),
    ("train", "true", "run_time_s"),
    ("train", "forever", "or unlimited"),
    ("train", "'86400'", "run_time_s"),
    ("train", str(MAX_RUN_TIME_S + 1), "seconds from 1 to 31536000"),
    ("train", "9" * 300, "run_time_s"),
    ("smoke", "unlimited", "for kind smoke (an unattended smoke run stays bounded)"),
    ("smoke", "0", "(default 1800)"),
    ("serve", "3600", "for kind serve (a RayService has no deadline)"),
])
def test_a_bad_run_time_is_refused_naming_the_field(tmp_path: Path, capsys: pytest.CaptureFixture[str], kind: str,
                                                    value: str, says: str) -> None:
    path = tmp_path / "raytpu.yaml"
    path.write_text(_config(value, kind))
    assert cli.main(["validate", str(path)]) == 2
    err = capsys.readouterr().err
    assert "workloads[3].run_time_s" in err and says in err and "Traceback" not in err and len(err) < 3000, err


@pytest.mark.parametrize(("kind", "value"), [("train", "unlimited"), ("job", "unlimited"), ("train", "259200"),
                                             ("smoke", "600")])
def test_a_good_run_time_validates(tmp_path: Path, kind: str, value: str) -> None:
    path = tmp_path / "raytpu.yaml"
    path.write_text(_config(value, kind))
    if kind == "job":
        (tmp_path / "x.py").write_text("print('hi')\n")
    assert cli.main(["validate", str(path)]) == 0


@pytest.mark.parametrize(("run_time_s", "warned"), [(None, True), (3000, False), (7200, True), ("unlimited", True)])
def test_the_flex_start_run_duration_warning_reads_the_run_time(run_time_s: object, warned: bool) -> None:
    item = SliceSpec.create(name="train", generation="v6e", topology="4x4", zone="us-east5-b",
                            provisioning="flex-start", max_run_duration_s=3600)
    work = WorkloadSpec(name="w", kind=kinds.kind("train"), slice=item, run_time_s=run_time_s)  # type: ignore[arg-type]
    found = deadline_warnings(work)
    assert bool(found) is warned, found
    if run_time_s == "unlimited":
        assert "no deadline (run_time_s: unlimited)" in found[0]


def test_run_time_travels_to_the_job_in_its_workload_json() -> None:
    item = SliceSpec.create(name="train", generation="v6e", topology="4x4", zone="us-east5-b")
    for value in (None, 7200, "unlimited"):
        work = WorkloadSpec(name="w", kind=kinds.kind("train"), slice=item, run_time_s=value)
        assert WorkloadSpec.from_json(work.to_json()) == work
