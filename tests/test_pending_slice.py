"""A run that cannot be placed says so (issue 67), on the emulated slice: a team's ``kind: job`` driver asks a
placement group no slice can hold (64 chips; each host has 4) and waits on it; ``submit --local`` says within 30 s
what it waits for and what each slice has free, and ``raytpu runs --local`` shows it while it waits. Before, nothing
was said for the 300-400 s the run sat there."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from raytpu.local.slice import state

pytestmark = [pytest.mark.slice, pytest.mark.timeout(600)]

STUCK = '''\
import sys
import ray

ray.init()
group = ray.util.placement_group([{"TPU": 64}])
ready, _ = ray.wait([group.ready()], timeout=45)
print("placed" if ready else "never placed", flush=True)
sys.exit(3)
'''

CONFIG = """\
project: my-ml-project
region: us-east5
cluster: {name: ray-tpu}
slices:
  - {name: train, generation: v6e, topology: 2x4, machine_type: ct6e-standard-4t, zone: us-east5-b, count: 2}
workloads:
  - name: stuck
    kind: job
    slice: train
    code: ./src
    entrypoint: python tools/stuck.py
"""


def user_env() -> dict[str, str]:
    """A user's environment: no Ray token or address of this process (the cluster's own is read from its dir)."""
    return {k: v for k, v in os.environ.items() if not k.startswith(("RAY_AUTH", "RAY_ADDRESS", "RAY_API_SERVER"))}


def listed(cluster: state.LocalCluster, folder: Path) -> dict[str, dict[str, object]]:
    shown = subprocess.run([sys.executable, "-m", "raytpu", "runs", "--local", "--dir", cluster.run_dir, "--json"],
                           env=user_env(), capture_output=True, text=True, timeout=120, cwd=folder)
    assert shown.returncode == 0, shown.stderr
    return {str(r["run"]): r for r in json.loads(shown.stdout)["runs"]}


def test_a_run_whose_placement_group_cannot_be_placed_says_what_it_waits_for_and_what_is_free(
        two_slices: state.LocalCluster, tmp_path: Path) -> None:
    (tmp_path / "src" / "tools").mkdir(parents=True)
    (tmp_path / "src" / "tools" / "stuck.py").write_text(STUCK)
    config = tmp_path / "raytpu.yaml"
    config.write_text(CONFIG)
    proc = subprocess.Popen([sys.executable, "-m", "raytpu", "submit", "stuck", "--local", "--config", str(config),
                             "--dir", two_slices.run_dir, "--run-id", "p1"], env=user_env(), cwd=tmp_path,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    err: list[str] = []
    out: list[str] = []
    readers = [threading.Thread(target=lambda pipe=pipe, into=into: into.extend(pipe), daemon=True)
               for pipe, into in ((proc.stderr, err), (proc.stdout, out))]
    for reader in readers:
        reader.start()
    try:
        shown: dict[str, object] = {}
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and proc.poll() is None:
            shown = listed(two_slices, tmp_path).get("stuck-p1", {})
            if shown.get("waiting_for"):
                break
            time.sleep(1)
        proc.wait(timeout=300)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, 15)
            proc.wait(timeout=60)
    for reader in readers:
        reader.join(timeout=30)
    text = "".join(err)
    assert proc.returncode == 1, text[-3000:] + "".join(out)[-2000:]  # the driver's exit 3: the job FAILED
    assert "never placed" in "".join(out)

    # runs --local, while it waited: the run's note names the group's bundle and the free hosts
    assert shown.get("state") == "RUNNING", shown
    note = str(shown.get("waiting_for"))
    assert "for placement group" in note and "(1 bundle x {TPU: 64}; Ray: INFEASIBLE)" in note, note
    free = "hosts 0,1: TPU 4/4, CPU 2/2 each"
    assert f"free: raytpu-local-v6e-8-0 {free}; raytpu-local-v6e-8-1 {free}" in note, note

    # submit --local said it through its stderr, within 30 s of the group's request and once (the wait is 45 s)
    said = [line for line in text.splitlines() if line.startswith("stuck-p1: waiting ")]
    assert len(said) == 1, text[-3000:]
    waited = re.match(r"stuck-p1: waiting (\d+)s for placement group \w+ of job \w+ \(1 bundle x \{TPU: 64\}; "
                      r"Ray: INFEASIBLE\): free: ", said[0])
    assert waited is not None and 20 <= int(waited.group(1)) <= 30, said[0]
    assert said[0].endswith(f"free: raytpu-local-v6e-8-0 {free}; raytpu-local-v6e-8-1 {free}"), said[0]
    assert len(said[0]) <= 300 + len("stuck-p1: ")
    assert "could not read its placement groups" not in text and "Traceback" not in text, text[-3000:]
