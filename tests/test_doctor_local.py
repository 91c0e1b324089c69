"""``raytpu doctor --local`` on a real emulated slice (slice tier): every check holds on a fresh slice; a host killed
is the one failing row, named with the host."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator

import pytest

from raytpu import cli
from raytpu.core.tpu.catalog import RAY_VERSION, generation
from raytpu.core.tpu.plan import plan_slice
from raytpu.local.slice import procs, state
from raytpu.local.slice.procs import kill_host

pytestmark = pytest.mark.slice


@pytest.fixture(scope="module")
def one_slice(start_cluster: Callable[..., state.LocalCluster]) -> Iterator[state.LocalCluster]:
    cluster = start_cluster(plan_slice("v6e", "2x4", generation("v6e").multi_host_machine_type.name))
    yield cluster
    procs.stop(cluster.run_dir)


def test_doctor_local_as_a_user_runs_it_is_quick_and_quiet(one_slice: state.LocalCluster) -> None:
    """A fresh process, as a user types it (issue 71 item 9): it imported Ray before the cluster's token was set, so
    it printed Ray's auth warnings, then a traceback after 22 s."""
    import os
    import subprocess
    import sys
    import time

    env = {k: v for k, v in os.environ.items() if not k.startswith(("RAY_AUTH", "RAY_ADDRESS"))}
    started = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "raytpu", "doctor", "--local", "--dir", one_slice.run_dir], env=env,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    assert time.monotonic() - started < 15
    assert "Traceback" not in done.stderr and "token" not in done.stderr.lower(), done.stderr[-2000:]


def test_doctor_local_holds_then_names_a_dead_host(one_slice: state.LocalCluster,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["doctor", "--local", "--dir", one_slice.run_dir, "--json"]) == 0
    document = json.loads(capsys.readouterr().out)
    checks = {r["check"]: r for r in document["checks"]}
    name = one_slice.slices[0]
    assert document["doctor"] == "local" and document["ok"]
    assert checks["ray version"]["found"] == RAY_VERSION
    assert checks[f"slice {name} hosts"]["found"] == "2 alive"
    assert checks[f"slice {name} resources"]["state"] == "ok" and checks[f"slice {name} labels"]["state"] == "ok"

    kill_host(one_slice, name, 1)
    assert cli.main(["doctor", "--local", "--dir", one_slice.run_dir, "--json"]) == 1
    failed = [r for r in json.loads(capsys.readouterr().out)["checks"] if r["state"] == "fail"]
    assert [(r["check"], r["found"]) for r in failed] == [(f"slice {name} hosts", "1 of 2 alive (down: 1)")]
