"""``run_on: every_host`` end to end on the emulated slice (issue 67): a plain JAX program nobody wrote for the kit
(``jax.distributed.initialize()`` with no argument, a ``psum`` over every device of the run) runs once on every host
of two emulated v6e 2x4 slices through ``raytpu submit NAME --local`` (real Ray placement groups, real JAX on CPU
devices joined by JAX's own distributed runtime); a failing host ends the others with its exit code; Ctrl-C leaves no
process; a one-host slice runs it on its one host."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import psutil
import pytest
from _terminal import as_from_a_terminal

from raytpu.local.slice import procs, state

pytestmark = [pytest.mark.slice, pytest.mark.timeout(900)]

PROGRAM = '''\
import os, sys, time
import jax
import jax.numpy as jnp
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

jax.distributed.initialize()
rank, count = jax.process_index(), jax.process_count()
print(f"rank {rank} of {count}: {jax.local_device_count()} local devices, {jax.device_count()} in all; "
      f"host rank {os.environ['RAYTPU_HOST_RANK']} slice {os.environ['RAYTPU_SLICE_INDEX']}", flush=True)
mesh = Mesh(jax.devices(), ("d",))
ones = jax.make_array_from_callback((jax.device_count(),), NamedSharding(mesh, P("d")),
                                    lambda index: jnp.ones((1,)) * (jax.process_index() + 1))
total = jax.jit(jnp.sum, out_shardings=NamedSharding(mesh, P()))(ones)
print(f"rank {rank} psum {float(total)}", flush=True)
if "--fail-rank" in sys.argv and rank == int(sys.argv[sys.argv.index("--fail-rank") + 1]):
    os._exit(7)  # a crash; an exception would first wait in JAX's shutdown barrier for the others (FACTS)
if "--sleep" in sys.argv:
    time.sleep(float(sys.argv[sys.argv.index("--sleep") + 1]))
'''

CONFIG = """\
project: my-ml-project
region: us-east5
cluster: {{name: ray-tpu}}
slices:
  - {{name: train, generation: {generation}, topology: {topology}, machine_type: {machine}, zone: us-east5-b, \
count: {count}}}
workloads:
  - name: plain
    kind: job
    slice: train
    slices: {slices}
    code: ./src
    entrypoint: python train.py {args}
    run_on: every_host
"""


def project(folder: Path, args: str = "", *, generation: str = "v6e", topology: str = "2x4",
            machine: str = "ct6e-standard-4t", count: int = 2, slices: int = 2) -> Path:
    (folder / "src").mkdir(parents=True, exist_ok=True)
    (folder / "src" / "train.py").write_text(PROGRAM)
    config = folder / "raytpu.yaml"
    config.write_text(CONFIG.format(generation=generation, topology=topology, machine=machine, count=count,
                                    slices=slices, args=args))
    return config


def command(config: Path, cluster: state.LocalCluster, *extra: str) -> list[str]:
    return [sys.executable, "-m", "raytpu", "submit", "plain", "--local", "--config", str(config), "--dir",
            cluster.run_dir, *extra]


def env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith("RAY_AUTH")}


def programs(marker: str) -> list[psutil.Process]:
    """The team program's processes still alive (their command line holds ``marker``)."""
    found = []
    for proc in psutil.process_iter(["cmdline"]):
        try:
            if any(marker in part for part in proc.info["cmdline"] or ()):
                found.append(proc)
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
    return found


def gone(marker: str, within_s: float = 30.0) -> bool:
    deadline = time.monotonic() + within_s
    while programs(marker):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.5)
    return True


def test_a_plain_jax_program_runs_once_on_every_host_of_two_slices(two_slices: state.LocalCluster,
                                                                     tmp_path: Path) -> None:
    config = project(tmp_path)
    report = tmp_path / "report.json"
    ran = subprocess.run(command(config, two_slices, "--run-id", "e1", "--report", str(report)), env=env(),
                         capture_output=True, text=True, timeout=600, cwd=tmp_path)
    assert ran.returncode == 0, ran.stderr[-3000:] + ran.stdout[-3000:]
    for rank in range(4):  # 2 slices x 2 hosts, 4 CPU devices each: 16 devices joined by JAX itself
        assert f"[host {rank}] rank {rank} of 4: 4 local devices, 16 in all; host rank {rank} slice {rank // 2}" \
            in ran.stdout, ran.stdout[-3000:]
        # every device holds its process's rank + 1: 4 devices x (1 + 2 + 3 + 4)
        assert f"[host {rank}] rank {rank} psum 40.0" in ran.stdout
    assert "every_host: every host exited 0 (4 host(s))" in ran.stdout
    phases = {row["phase"]: row for row in json.loads(report.read_text())["timeline"]["phases"]}
    assert phases["reserved"]["status"] == phases["trainer_started"]["status"] == "measured"
    assert phases["compiled"]["status"] == phases["first_step"]["status"] == "not measured"
    assert "every host as a process of its own" in phases["first_step"]["detail"]


def test_a_failing_host_ends_the_others_with_its_exit_code(two_slices: state.LocalCluster, tmp_path: Path) -> None:
    marker = f"--marker={uuid.uuid4().hex}"
    config = project(tmp_path, f"--fail-rank 1 --sleep 300 {marker}")
    started = time.monotonic()
    ran = subprocess.run(command(config, two_slices, "--run-id", "e2"), env=env(), capture_output=True, text=True,
                         timeout=600, cwd=tmp_path)
    took = time.monotonic() - started
    # the Ray job (the RayJob's driver) exits with the host's code; `submit` keeps the CLI's 1 and names the host
    assert ran.returncode == 1, ran.stderr[-3000:]
    assert "every_host: host 1 exited with code 7; stopping the other 3 host(s)" in ran.stdout
    assert "error: plain-e2: Ray job ended FAILED: host 1 (raytpu-local-v6e-8-0 worker 1) exited with code 7, the " \
           "other hosts stopped" in ran.stderr
    assert took < 240, f"the others slept on for {took:.0f}s"  # not their 300 s
    assert "Traceback" not in ran.stderr
    assert gone(marker), [p.info for p in programs(marker)]


def test_ctrl_c_stops_every_host_and_leaves_nothing(two_slices: state.LocalCluster, tmp_path: Path) -> None:
    marker = f"--marker={uuid.uuid4().hex}"
    config = project(tmp_path, f"--sleep 300 {marker}")
    submit = subprocess.Popen(command(config, two_slices, "--run-id", "e3"), env=env(), stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True, cwd=tmp_path, preexec_fn=as_from_a_terminal)
    try:
        deadline = time.monotonic() + 300
        while len(programs(marker)) < 4 and time.monotonic() < deadline:
            time.sleep(0.5)
        assert len(programs(marker)) >= 4, "the program never started on every host"
        submit.send_signal(signal.SIGINT)
        try:
            _, err = submit.communicate(timeout=200)
        except subprocess.TimeoutExpired:
            submit.kill()
            _, err = submit.communicate()
            pytest.fail(f"submit still running 200 s after its Ctrl-C; its stderr:\n{err[-4000:]}")
    finally:
        if submit.poll() is None:
            submit.kill()
            submit.communicate()
    assert submit.returncode == 130, err[-3000:]
    assert gone(marker), [p.info for p in programs(marker)]
    # the slices are free again: the next run reserves both at once
    again = subprocess.run(command(project(tmp_path / "again"), two_slices, "--run-id", "e4"), env=env(),
                           capture_output=True, text=True, timeout=600, cwd=tmp_path)
    assert again.returncode == 0, again.stderr[-3000:]


@pytest.fixture(scope="module")
def one_host(start_cluster: Callable[..., state.LocalCluster]) -> Iterator[state.LocalCluster]:
    """One emulated single-host v5e 2x2 slice (4 chips on one host)."""
    from raytpu.core.tpu.plan import plan_slice

    cluster = start_cluster(plan_slice("v5e", "2x2"))
    yield cluster
    procs.stop(cluster.run_dir)


def test_a_one_host_slice_runs_the_program_on_its_host(one_host: state.LocalCluster, tmp_path: Path) -> None:
    config = project(tmp_path, generation="v5e", topology="2x2", machine="ct5lp-hightpu-4t", count=1, slices=1)
    ran = subprocess.run(command(config, one_host, "--run-id", "e5"), env=env(), capture_output=True, text=True,
                         timeout=600, cwd=tmp_path)
    assert ran.returncode == 0, ran.stderr[-3000:] + ran.stdout[-3000:]
    assert "[host 0] rank 0 of 1: 4 local devices, 4 in all; host rank 0 slice 0" in ran.stdout
    assert "[host 0] rank 0 psum 4.0" in ran.stdout
