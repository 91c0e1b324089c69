"""Shared fixtures: emulated-slice clusters, and the session check that no Ray process outlives the run.

Every local cluster the suite starts gets a private Ray temp dir under ``/tmp/raytpu-t<pid>-`` and every
one of its processes (nodes, their Ray workers, workload drivers) carries
``RAYTPU_LOCAL_CLUSTER=<that dir>`` in its environment. The session fixture compares those processes
before and after the run, kills any leftover by PID and fails the run when there was one. Nothing
here signals a process it did not start (no ``ray stop``, no pkill).
"""

from __future__ import annotations

import atexit
import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from raytpu.core.tpu.plan import SlicePlan
from raytpu.local.slice import procs, startup, state

SESSION_PREFIX = f"{state.TMP_PREFIX}t{os.getpid()}-"

# pytest keeps each test module's assertion-rewritten code in __pycache__ only where bytecode is written: a shell's
# PYTHONDONTWRITEBYTECODE made every pytest process rewrite the whole suite again (collection 9 s, not 3.7; the
# Makefile unexports it for the same reason). Source: pytest 9.2 AssertionRewritingHook.exec_module
sys.dont_write_bytecode = False


@pytest.fixture(scope="session", autouse=True)
def no_ray_process_outlives_the_run(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """Fails the session when a process of a cluster started by this run is still alive at the end.

    Every cluster of the run uses Ray's token authentication, as on GKE, with one token for the session: Ray
    caches the token once per process, and this process drives every cluster."""
    os.environ[state.ENV_TMP_PREFIX] = SESSION_PREFIX
    token = tmp_path_factory.mktemp("ray-auth") / "auth_token"
    token.write_text(os.urandom(32).hex())
    token.chmod(0o600)
    os.environ.update({"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN_PATH": str(token)})
    before = set(procs.tagged_processes(SESSION_PREFIX))
    yield
    deadline = time.monotonic() + 10
    leaked = {}
    while time.monotonic() < deadline:  # killed workers may take a moment to exit
        leaked = {p: t for p, t in procs.tagged_processes(SESSION_PREFIX).items() if p not in before}
        if not leaked:
            break
        time.sleep(0.5)
    for pid in leaked:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)
    assert not leaked, f"Ray processes outlived the test run (killed now): {sorted(leaked)}"


REPO = Path(__file__).resolve().parents[1]
GENERATED = ("cdktf.out",)
"""What the kit writes by default into the working folder: tests write it elsewhere (a test's CDK ``App()`` with no
outdir made ``cdktf.out/stacks`` here, and then `make run`'s demo refused that folder)."""


@pytest.fixture(scope="session", autouse=True)
def nothing_written_into_the_repo() -> Iterator[None]:
    """Fails the session when a test left one of :data:`GENERATED` in the repo that was not there before."""
    before = {name for name in GENERATED if (REPO / name).exists()}
    yield
    left = {name for name in GENERATED if (REPO / name).exists()} - before
    assert not left, f"tests wrote {sorted(left)} into the repo; give CDK Terrain's App() an outdir"


@pytest.fixture(scope="session")
def tls(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """A CA and a server certificate for the loopback Kubernetes API server (tests/kube_server.py)."""
    from kube_server import make_tls

    return make_tls(tmp_path_factory.mktemp("tls"))


@pytest.fixture(scope="session")
def sa_key() -> Any:
    """A service-account key pair whose JWT assertions the loopback token endpoint checks."""
    from kube_server import ServiceAccountKey

    return ServiceAccountKey.generate()


@pytest.fixture(scope="session")
def start_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Callable[..., state.LocalCluster]]:
    """Starts local clusters (each in its own run dir); stops every one at the end of the session at the latest.
    A module's own cluster stops when its module ends (its fixture yields, then ``procs.stop``): idle Ray nodes
    left running take CPU from the timed checks of later modules."""
    started: list[Path] = []

    def start(plan: SlicePlan, num_slices: int = 1) -> state.LocalCluster:
        directory = tmp_path_factory.mktemp("local")
        started.append(directory)
        return startup.start(plan, num_slices, directory, timeout_s=240)

    yield start
    for directory in started:
        procs.stop(directory)



@pytest.fixture(scope="session")
def two_slices(start_cluster: Callable[..., state.LocalCluster]) -> state.LocalCluster:
    """Two emulated v6e 2x4 slices of two 4-chip hosts each (xpk's shape, the smallest multi-host slice), shared
    by ``test_smoke_slice`` (which kills a host and replaces it, leaving both slices whole) and then every slice
    test of ``test_train`` (a run reserves one whole slice of the two). Started once per session."""
    from raytpu.core.tpu.catalog import generation
    from raytpu.core.tpu.plan import plan_slice

    return start_cluster(plan_slice("v6e", "2x4", generation("v6e").multi_host_machine_type.name), 2)


# Serve's system actors live in namespace "serve" (ray.serve._private.constants.SERVE_NAMESPACE, Ray 2.60); its
# client gives the controller 30 s and returns while proxies may still be dying (ServeControllerClient.shutdown).
_STOP_SERVE = """
import time, ray
from ray import serve
from ray.util.state import list_actors
ray.init()
serve.shutdown()
deadline = time.monotonic() + 120
while True:
    alive = [a.class_name for a in list_actors(filters=[("state", "!=", "DEAD")], limit=10000)
             if a.ray_namespace == "serve"]
    if not alive:
        break
    if time.monotonic() > deadline:
        raise SystemExit(f"Serve actors still alive after 120 s: {alive}")
    time.sleep(1)
"""


@pytest.fixture
def serve_stopped_after(two_slices: state.LocalCluster) -> Iterator[None]:
    """Shut Serve down after a test and wait until its controller and proxies are dead, so the next test's
    ``serve.start`` never meets a proxy still being killed (the flake between two serve_app test files)."""
    yield
    done = subprocess.run([sys.executable, "-c", _STOP_SERVE], env=two_slices.driver_env(), timeout=300,
                          capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr[-2000:]


LONGEST_FIRST = ("test_multislice.py", "test_every_host.py", "test_train_data.py", "test_local.py",
                 "test_team_example.py", "test_serve_app_slice.py", "test_readme_small_try.py",
                 "test_smoke_slice.py", "test_train.py", "test_preempt.py", "test_team_slice.py",
                 "test_team_example_serve.py", "test_images.py")
"""The slice tier's files over about 90 s each, longest first (``--durations`` of a whole run, 2026-12-08): two
workers taking whole files (xdist's ``--dist loadfile``) end together when the long files start first."""


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Orders files by :data:`LONGEST_FIRST` (others keep their order after them); a file's tests keep theirs."""
    rank = {name: i for i, name in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))


def pytest_sessionstart(session: pytest.Session) -> None:
    atexit.register(_exit_before_native_teardown, session)


NATIVE_TEARDOWN = ("torch", "ray", "jax", "grpc")
"""Modules whose native threads may still run while the interpreter finalizes."""


def _exit_before_native_teardown(session: pytest.Session) -> None:
    """A tier's process that loaded one of :data:`NATIVE_TEARDOWN` (the serve tier's vLLM and torch; the slice tier's
    Ray, gRPC and JAX) ends after Python's exit hooks (pytest's own, registered later, run first) with the run's own
    status, skipping the interpreter's finalization: a native library's teardown there killed the serve tier with
    SIGSEGV after all its tests had passed (CI of stop 60; 21 reruns did not repeat it) and the slice tier after "69
    passed, 3 skipped" (issue 72), the class of crash https://github.com/NVIDIA-NeMo/Megatron-Bridge/pull/2818 ends the
    same way. The Makefile sets PYTHONFAULTHANDLER, so a crash that still comes prints every thread's stack. An xdist
    worker exits as xdist says."""
    if not any(name in sys.modules for name in NATIVE_TEARDOWN) or hasattr(session.config, "workerinput"):
        return
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(int(session.exitstatus))
