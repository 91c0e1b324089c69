"""raytpu.local.slice.diagnose: a failed ``ray start`` told by its real cause, from the lines Ray 2.60.0 really writes.

Each log line below was captured from Ray 2.60.0 on this kind of machine (the emulator's own failures: a port held
by another process, an agent held back past the raylet's wait, a host whose GCS was gone). The agent case is also
produced for real, end to end, in ``tests/test_local.py``.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from raytpu.local.slice import state
from raytpu.local.slice.diagnose import AGENT_PORT_WAIT_S, Cause, agent_abort, diagnose

pytestmark = pytest.mark.unit

DASHBOARD_PORT_TAKEN = ("ValueError: Failed to bind to 127.0.0.1:45555 because it's already occupied. You can "
                        "use `ray start --dashboard-port ...` or `ray.init(dashboard_port=...)` to select a different "
                        "port.")
GCS_PORT_TAKEN = ("RuntimeError: Failed to start GCS.  Last 1 lines of error files:\n[2026-12-02 06:42:24,854 C 9462 "
                  "9462] (gcs_server) grpc_server.cc:134:  An unexpected system state has occurred. Check failed: "
                  "server_ Failed to start the grpc server. The specified port is 45555.")
NOT_REGISTERED = ("Exception: The current node timed out during startup. This could happen because some of the "
                  "raylet failed to startup or the GCS has become overloaded.")
AGENT_ABORT = ("[2026-12-02 06:28:54,022 C 8071 8071] (raylet) node_manager.cc:3576:  An unexpected system state has "
               "occurred. Check failed: statussetor3576.has_value() Timed out waiting for file /tmp/raytpu-exp1/"
               "session_2026-12-02_06-28-28_118079_7872/metrics_agent_port_20990f309ad8ac6cab56218bb753424994e91c7a")
GCS_GONE = ("[2026-12-02 06:40:49,076 W 8389 8389] rpc_client.h:153: Failed to connect to GCS at address "
            "192.0.2.2:36379 within 5 seconds.")


def _node(tmp_path: Path, raylet_out: str = "") -> str:
    """A node temp dir as Ray lays it out: ``session_<name>/logs/raylet.out``."""
    logs = tmp_path / "session_2026-12-02_06-28-28_118079_7872" / "logs"
    logs.mkdir(parents=True)
    (logs / "raylet.out").write_text(raylet_out)
    return str(tmp_path)


@pytest.mark.parametrize("start_log", [DASHBOARD_PORT_TAKEN, GCS_PORT_TAKEN])
def test_a_port_held_by_another_process_is_a_port_clash_retried_on_new_ports(start_log: str, tmp_path: Path) -> None:
    failure = diagnose(start_log, _node(tmp_path))
    assert failure.cause is Cause.PORT and failure.retry == "new ports"
    assert "45555" in failure.detail


def test_the_raylets_agent_abort_is_an_agent_too_slow_retried_alone_even_when_ray_start_says_startup(
        tmp_path: Path) -> None:
    node = _node(tmp_path, AGENT_ABORT)
    failure = diagnose(NOT_REGISTERED, node)  # `ray start` only says "timed out during startup" 30 s later
    assert failure.cause is Cause.AGENT and failure.retry == "alone"
    assert "metrics_agent" in failure.detail and f"{AGENT_PORT_WAIT_S} s" in failure.detail
    assert agent_abort(node) == failure  # what the emulator sees while `ray start` still waits


def test_a_node_that_never_registered_without_an_agent_abort_is_retried_alone(tmp_path: Path) -> None:
    failure = diagnose(NOT_REGISTERED, _node(tmp_path, "raylet started\n"))
    assert failure.cause is Cause.REGISTER and failure.retry == "alone"


def test_an_unreachable_gcs_is_not_retried_and_says_what_to_do(tmp_path: Path) -> None:
    failure = diagnose("", _node(tmp_path, GCS_GONE))
    assert failure.cause is Cause.GCS and not failure.retry
    assert "192.0.2.2:36379" in failure.detail and "raytpu local down" in failure.remedy


@pytest.mark.parametrize("line", ["OSError: [Errno 12] Cannot allocate memory",
                                  "MemoryError", "OSError: [Errno 28] No space left on device: '/dev/shm/plasma'"])
def test_memory_is_not_retried(line: str, tmp_path: Path) -> None:
    failure = diagnose(f"Traceback (most recent call last):\n{line}\n", _node(tmp_path))
    assert failure.cause is Cause.MEMORY and not failure.retry and "free memory" in failure.remedy


def test_anything_else_is_unknown_with_the_last_line_and_no_retry(tmp_path: Path) -> None:
    failure = diagnose("starting\nKeyError: 'surprise'\n\n", _node(tmp_path))
    assert failure.cause is Cause.UNKNOWN and failure.detail == "KeyError: 'surprise'" and not failure.retry
    assert failure.message("s-0 worker 1").startswith("s-0 worker 1: unknown: KeyError")


def test_no_raylet_log_yet_is_no_abort(tmp_path: Path) -> None:
    assert agent_abort(str(tmp_path)) is None


def test_hosts_are_listed_by_slice_and_worker_id_whatever_order_they_started_in(tmp_path: Path) -> None:
    """Restarts append nodes in any order (seen: 0, 2, 3, 1); every listing reads the saved order."""
    cluster = state.LocalCluster(run_dir=str(tmp_path), temp_dir="/tmp/raytpu-x", address="127.0.0.1:1", plan={},
                                 slices=["s-0", "s-1"])
    for slice_name, worker in [("s-1", 0), ("s-0", 2), ("s-0", 3), ("", -1), ("s-0", 1), ("s-1", 1), ("s-0", 0)]:
        role = "head" if worker < 0 else "host"
        cluster.nodes.append(state.NodeProc(role=role, pid=1, log="", slice_name=slice_name, worker_id=worker))
    cluster.save()
    order = [(n.slice_name, n.worker_id) for n in state.LocalCluster.load(tmp_path).nodes]  # type: ignore[union-attr]
    assert order == [("", -1), ("s-0", 0), ("s-0", 1), ("s-0", 2), ("s-0", 3), ("s-1", 0), ("s-1", 1)]
