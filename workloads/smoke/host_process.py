"""One Ray actor per host bundle runs that host's check in a worker process of its own (as a ``max_calls=1`` task
had); host 0's first names the ``jax.distributed`` coordinator's address. Tasks cost each host a second worker process
that never ran anything, and the driver's node a third: a raylet starts one more worker for every task lease with a
backlog (Ray 2.60 ``WorkerPool::PrestartWorkers``); an actor gets just its own (docs/FACTS.md#smoke-host-processes)."""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import Any

from raytpu.workloads.smoke.measure import coordinator_address


class HostProcess:
    """The actor: serves the coordinator's address, then runs one check in this process."""

    def address(self) -> tuple[str, int]:
        return coordinator_address()

    def run(self, check: Callable[..., Any], *args: Any) -> Any:
        return check(*args)


def start_hosts(bundles: list[tuple[Any, int]], chips_per_host: int,
                runtime_env: dict[str, Any] | None = None) -> list[Any]:
    """One :class:`HostProcess` in each (placement group, bundle index), holding its TPU chips and one CPU; no
    restart, no retry (a host that dies is a finding, not something to hide)."""
    import ray
    from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

    actor = ray.remote(num_cpus=1, max_restarts=0, max_task_retries=0)(HostProcess)
    options: dict[str, Any] = {"resources": {"TPU": chips_per_host}}
    if runtime_env:
        options["runtime_env"] = runtime_env
    return [actor.options(scheduling_strategy=PlacementGroupSchedulingStrategy(placement_group=pg,
                                                                            placement_group_bundle_index=index),
                          **options).remote() for pg, index in bundles]


def stop_hosts(actors: list[Any], graceful: bool) -> None:
    """Ends every host's process, so its chips are free again: ``graceful`` after its check returned (Ray's
    ``__ray_terminate__`` queues a normal exit, as a ``max_calls=1`` task's worker exited), else killed (a host that
    raised, hung or was left waiting for one). Source: Ray 2.60 ``ray.actor`` (``__ray_terminate__``), ``ray.kill``."""
    import ray

    for actor in actors:
        with contextlib.suppress(Exception):  # one actor already gone must not keep the others alive
            if graceful:
                actor.__ray_terminate__.remote()
            else:
                ray.kill(actor, no_restart=True)
