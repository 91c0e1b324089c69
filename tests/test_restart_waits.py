"""Issue 40 item 8: one attempt's whole wait for its slices is bounded by ``--start-timeout-s``, and the RayJob says it.

Ray 2.60 reserves a multi-host slice's head per slice, in turn, then waits for the placement group, each wait with
the whole ``RAY_TRAIN_WORKER_GROUP_START_TIMEOUT_S``: N multi-host slices could wait N + 1 times it in one attempt.
The train program gives each wait an equal share of its bound; the kit's run arguments state the bound.
"""

from __future__ import annotations

import inspect
import json
import math
from typing import Any

import pytest
from image_refs import FIXTURE_IMAGES

from raytpu.core.common.errors import InvalidInput
from raytpu.core.manifests import kuberay, preemption
from raytpu.core.specs import kinds
from raytpu.core.specs.cluster.cluster_parts import GkeSpec
from raytpu.core.specs.slices import multislice
from raytpu.core.specs.spec import ClusterSpec, SliceSpec, WorkloadSpec
from raytpu.core.tpu.catalog import GENERATIONS
from raytpu.core.tpu.plan import plan_slice
from raytpu.workloads import train

pytestmark = pytest.mark.unit


def test_reservation_waits_agree_with_rays_own_single_host_rule_for_every_reservable_shape() -> None:
    """``SlicePlacementGroup._reserve_slice`` reserves a head per slice only when the topology's chips exceed
    ``get_chips_per_host`` (Ray 2.60, no ``chips_per_vm`` from JaxTrainer); the placement group's wait is always one."""
    from ray._private.accelerators.tpu import get_chips_per_host, get_num_chips_from_topology

    checked = multi = 0
    for gen in GENERATIONS.values():
        for topology in gen.ray_topologies:
            if topology not in gen.topologies:
                continue
            plan = plan_slice(gen.name, topology)
            rays_multi_host = get_num_chips_from_topology(topology) > get_chips_per_host(topology, gen.ray_pod_prefix)
            for slices in (1, 2, 4):
                assert multislice.reservation_waits(plan, slices) == (slices + 1 if rays_multi_host else 1), (
                    gen.name, topology, slices)
            checked += 1
            multi += rays_multi_host
    assert checked > 20 and 0 < multi < checked


class _Recorder:
    """Stands in for Ray's head reservation and placement group: records each head wait's timeout."""

    def __init__(self) -> None:
        self.head_timeouts: list[float | None] = []

    def reserve(self, topology: str, accelerator_type: str, timeout_s: float | None = None,
                slice_name: str | None = None) -> tuple[str, Any]:
        self.head_timeouts.append(timeout_s)
        return f"slice-{len(self.head_timeouts)}", object()


@pytest.mark.parametrize("slices", [1, 2, 3])
def test_rays_slice_reservation_waits_for_each_head_in_turn_with_the_whole_timeout(
        monkeypatch: pytest.MonkeyPatch, slices: int) -> None:
    """The wheel's own ``SlicePlacementGroup`` (Ray 2.60) calls ``reserve_tpu_slice`` once per slice, each with the
    full ``head_reservation_timeout_s``; JaxTrainer's ``WorkerGroup`` passes its one start timeout there and to the
    placement group's wait. So an attempt may wait ``slices + 1`` timeouts: the reason the kit divides its bound."""
    import ray.util.tpu as ray_tpu
    from ray.train.v2._internal.execution.worker_group import worker_group

    recorder = _Recorder()
    monkeypatch.setattr(ray_tpu, "reserve_tpu_slice", recorder.reserve)
    monkeypatch.setattr(ray_tpu, "placement_group", lambda **kwargs: object())
    ray_tpu.SlicePlacementGroup(topology="4x4", accelerator_version="v6e", num_slices=slices,
                                head_reservation_timeout_s=600.0)
    assert recorder.head_timeouts == [600.0] * slices
    assert multislice.reservation_waits(plan_slice("v6e", "4x4"), slices) == slices + 1
    source = inspect.getsource(worker_group.WorkerGroup)
    assert "head_reservation_timeout_s=self._worker_group_start_timeout_s" in source
    assert "pg_handle.wait(self._worker_group_start_timeout_s)" in source


@pytest.mark.parametrize(("topology", "slices", "waits"), [("2x4", 1, 1), ("4x4", 1, 2), ("4x4", 2, 3),
                                                           ("4x4", 4, 5), ("2x2", 1, 1)])
def test_each_wait_gets_an_equal_share_so_the_attempt_stays_within_its_bound(topology: str, slices: int,
                                                                             waits: int) -> None:
    plan = plan_slice("v6e", topology)
    found = train.attempt_wait(plan, slices, 1800.0)
    assert found == {"attempt_s": 1800.0, "waits": waits, "per_wait_s": round(1800.0 / waits, 3)}
    assert found["per_wait_s"] * found["waits"] <= 1800.0 + 0.01


@pytest.mark.parametrize(("topology", "slices", "waits"), [("2x4", 1, 1), ("4x4", 1, 2), ("4x4", 2, 3)])
def test_without_a_bound_each_wait_keeps_rays_own_default(topology: str, slices: int, waits: int) -> None:
    """The program's default (no ``--start-timeout-s``: local runs, drills) keeps Ray 2.60's 60 s per wait
    (``DEFAULT_WORKER_GROUP_START_TIMEOUT_S``), as before the bound, and says the sum."""
    from ray.train.v2._internal.constants import DEFAULT_WORKER_GROUP_START_TIMEOUT_S

    assert train.build_parser().parse_args(["--storage-path", "/s"]).start_timeout_s is None
    found = train.attempt_wait(plan_slice("v6e", topology), slices, None)
    assert found == {"attempt_s": waits * train.WAIT_S, "waits": waits, "per_wait_s": train.WAIT_S}
    assert train.WAIT_S == DEFAULT_WORKER_GROUP_START_TIMEOUT_S


@pytest.mark.parametrize("value", [0.0, -5.0, math.nan, math.inf, -math.inf])
def test_a_bound_that_is_not_a_positive_number_is_refused_naming_the_flag(value: float) -> None:
    with pytest.raises(InvalidInput) as info:
        train.attempt_wait(plan_slice("v6e", "4x4"), 1, value)
    problem = info.value
    assert problem.field == "--start-timeout-s" and "positive" in problem.problem and "seconds > 0" in problem.valid


@pytest.mark.parametrize("value", ["0", "-1", "nan", "inf"])
def test_the_train_program_exits_2_on_a_bad_bound_before_ray_is_reached(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Any, value: str) -> None:
    work = WorkloadSpec(name="train", kind=kinds.kind("train"),
                        slice=SliceSpec.create(name="t", generation="v6e", topology="4x4", zone="us-east5-b"))
    for key, text in work.workload_env().items():
        monkeypatch.setenv(key, text)
    monkeypatch.setenv("RAY_ADDRESS", "127.0.0.1:1")  # never reached
    assert train.main(["--storage-path", str(tmp_path), "--start-timeout-s", value]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: --start-timeout-s:") and "Traceback" not in err


def _train_job(provisioning: str, topology: str, slices: int) -> dict[str, Any]:
    extra: dict[str, Any] = {"reservation": "my-res"} if provisioning == "reservation" else {}
    item = SliceSpec.create(name="t", generation="v6e", topology=topology, zone="us-east5-b", count=slices,
                            provisioning=provisioning, **extra)
    work = WorkloadSpec(name="train", kind=kinds.kind("train"), slice=item, slices=slices)
    spec = ClusterSpec(project="my-ml-project", region="us-east5", cluster=GkeSpec(name="ray-tpu"), slices=(item,),
                       workloads=(work,))
    return kuberay.workload_manifest(spec, work, images=FIXTURE_IMAGES, service_account="ksa", bucket="b")


@pytest.mark.parametrize("provisioning", ["on-demand", "spot", "reservation", "flex-start"])
@pytest.mark.parametrize(("topology", "slices", "waits"), [("2x4", 1, 1), ("4x4", 1, 2), ("4x4", 2, 3),
                                                           ("4x4", 4, 5)])
def test_the_rayjob_states_the_attempts_bound_and_each_wait_still_covers_a_re_created_slice(
        provisioning: str, topology: str, slices: int, waits: int) -> None:
    """What the kit emits parses to ``--start-timeout-s`` = waits x :data:`preemption.RESTART_WAIT_S`: the program then
    gives Ray 1800 s per wait (a slice's re-creation, issue 40 item 3), and no attempt waits longer than the
    arguments say; the run's whole restart wait is ``--slice-retries`` such attempts."""
    job = _train_job(provisioning, topology, slices)
    argv = job["spec"]["entrypoint"].split()[3:]
    parsed = train.build_parser().parse_args([*kinds.kind("train").run_args("train-r1"), *argv])
    assert parsed.start_timeout_s == waits * preemption.RESTART_WAIT_S, job["spec"]["entrypoint"]
    carried = WorkloadSpec.from_env(json.loads(job["spec"]["runtimeEnvYAML"])["env_vars"])
    shares = train.attempt_wait(carried.plan, carried.slices_per_run, parsed.start_timeout_s)
    assert shares["per_wait_s"] == preemption.RESTART_WAIT_S and shares["waits"] == waits
    assert parsed.slice_retries == preemption.MAX_PREEMPTIONS
