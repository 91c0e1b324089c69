"""Shared synth helpers of the synth tiers: each app is synthesized once per pytest process."""

from __future__ import annotations

import atexit
import functools
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import pytest
from image_refs import FIXTURE_REFS, write_record

REPO = Path(__file__).resolve().parents[1]
STANDARD_EXAMPLE = REPO / "raytpu.example.yaml"
AUTOPILOT_EXAMPLE = REPO / "examples" / "autopilot.yaml"
EXAMPLES = {"standard": STANDARD_EXAMPLE, "autopilot": AUTOPILOT_EXAMPLE}
NOTICE_CONFIG = STANDARD_EXAMPLE.read_text().replace(
    "    provisioning: spot\n", "    provisioning: spot\n    preemption_notice_s: 120\n", 1).replace(
    "    provisioning: on-demand ", "    transparent_hugepages: false\n    provisioning: on-demand ", 1)
"""The Standard example with a 120 s notice on its spot slice and hugepages off on its on-demand one."""
AUTOPILOT_NOTICE_CONFIG = AUTOPILOT_EXAMPLE.read_text().replace(
    "    provisioning: spot\n", "    provisioning: spot\n    preemption_notice_s: 120\n", 1)
"""The Autopilot example with a 120 s notice on its spot-only slice (``batch``)."""
DEFAULT_NOTICE_CONFIGS = {mode: path.read_text().replace(
    "    provisioning: spot\n", "    provisioning: spot\n    preemption_notice_s: 30\n", 1)
    for mode, path in EXAMPLES.items()}
"""Each example with GKE's default notice (30 s) stated on its first spot-only slice."""


def _tmpdir() -> Path:
    """A temporary directory removed when the test process exits."""
    path = Path(tempfile.mkdtemp(prefix="raytpu-synth-"))
    atexit.register(shutil.rmtree, path, True)
    return path


def read_stacks(outdir: Path) -> dict[str, dict[str, Any]]:
    """Stack id -> parsed cdk.tf.json of a synthesized outdir."""
    return {p.parent.name: json.loads(p.read_text()) for p in sorted((outdir / "stacks").glob("*/cdk.tf.json"))}


@functools.cache
def synth_config(path: str) -> tuple[Path, dict[str, dict[str, Any]]]:
    """Synthesizes the app of a config file once; returns (outdir, stacks)."""
    from raytpu.config import load
    from raytpu.stacks.app import synth

    outdir = _tmpdir()
    synth(load(path), FIXTURE_REFS, outdir)
    return outdir, read_stacks(outdir)


def synth_text(text: str) -> dict[str, dict[str, Any]]:
    """Synthesizes the app of config text (cached by text)."""
    return synth_text_out(text)[1]


@functools.cache
def synth_text_out(text: str) -> tuple[Path, dict[str, dict[str, Any]]]:
    """Synthesizes the app of config text once; returns (outdir, stacks)."""
    from raytpu.config import parse
    from raytpu.stacks.app import synth

    outdir = _tmpdir()
    synth(parse(text), FIXTURE_REFS, outdir)
    return outdir, read_stacks(outdir)


EVERY_MODE = """
project: my-ml-project
region: us-central1
cluster: {name: modes}
storage:
  bucket: modes-ckpt
  data_buckets: [{name: team-data}, {name: team-results, access: read-write}]   # granted by the identity module
slices:
  - {name: od, generation: v5p, topology: 2x2x4, zone: us-central1-a, count: 2}
  - {name: sp, generation: v5e, topology: 2x4, machine_type: ct5lp-hightpu-4t, zone: us-central1-a,
     provisioning: spot}
  - {name: rs, generation: v6e, topology: 2x4, zone: us-central1-b, provisioning: reservation, reservation: r1,
     max_run_duration_s: 86400}
  - {name: fs, generation: tpu7x, topology: 4x4x4, zone: us-central1-c, provisioning: flex-start,
     max_run_duration_s: 7200, disk_size_gib: 200}
  - {name: qd, generation: v4, topology: 2x2x1, zone: us-central1-a, provisioning: queued}
"""
"""A Standard config with one slice per provisioning mode (and every placement)."""

PLATFORM_APP = REPO / "examples" / "platform_app" / "app.py"


@functools.cache
def synth_platform_app() -> tuple[Path, dict[str, dict[str, Any]]]:
    """Runs the outside-app example (``python examples/platform_app/app.py OUTDIR``) from a directory outside
    the repo, once: a copy of the example's folder with the fixture record of built images beside its
    ``platform.yaml`` (where the app reads it); returns (outdir, stacks)."""
    work = _tmpdir()
    app = work / "platform_app"
    shutil.copytree(PLATFORM_APP.parent, app)
    write_record(app)
    outdir = work / "cdktf.out"
    result = subprocess.run([sys.executable, str(app / PLATFORM_APP.name), str(outdir)], cwd=work,
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    return outdir, read_stacks(outdir)


RESEARCH: dict[str, Any] = dict(name="research", generation="v5p", topology="2x2x4", zone="us-east5-a",
                                provisioning="spot")
IRON: dict[str, Any] = dict(name="iron", generation="tpu7x", topology="2x2x2", zone="us-east5-c")
BURST: dict[str, Any] = dict(name="burst", generation="v6e", topology="2x4", zone="us-central1-b",
                             provisioning="flex-start")
LATE: dict[str, Any] = dict(name="late", generation="v5e", topology="2x2", zone="us-central1-a", provisioning="spot")
"""Slices added to the examples through ``ClusterStack.add_slice`` (:func:`synth_added_slices`); LATE after the
workloads stack exists."""


@functools.cache
def synth_added_slices() -> tuple[Path, dict[str, dict[str, Any]]]:
    """Both examples, each with slices added through ClusterStack.add_slice and workloads on them added through
    WorkloadsStack.add_workload (what an outside app does), in one app: stacks ``std-*`` and ``auto-*``."""
    from raytpu.config import load
    from raytpu.core.specs.kinds import kind
    from raytpu.core.specs.spec import SliceSpec, WorkloadSpec
    from raytpu.modules.parts.cdk import App
    from raytpu.stacks.cluster import ClusterStack, ClusterStackProps
    from raytpu.stacks.workloads import WorkloadsStack, WorkloadsStackProps

    outdir = _tmpdir()
    app = App(outdir=str(outdir))
    standard = ClusterStack(app, "std-cluster", ClusterStackProps(spec=load(STANDARD_EXAMPLE)))
    research, iron = SliceSpec.create(**RESEARCH), SliceSpec.create(**IRON)
    assert [len(standard.add_slice(s)) for s in (research, iron)] == [1, 1]  # one pool per copy on Standard
    std_work = WorkloadsStack(app, "std-workloads", WorkloadsStackProps(cluster=standard, images=FIXTURE_REFS))
    std_work.add_workload(WorkloadSpec(name="research-serve", kind=kind("serve"), slice=research))
    std_work.add_workload(WorkloadSpec(name="iron-serve", kind=kind("serve"), slice=iron))

    auto = ClusterStack(app, "auto-cluster", ClusterStackProps(spec=load(AUTOPILOT_EXAMPLE)))
    burst = SliceSpec.create(**BURST)
    assert auto.add_slice(burst) == []  # Autopilot: no node pools, a ComputeClass in the workloads stack
    auto_work = WorkloadsStack(app, "auto-workloads", WorkloadsStackProps(cluster=auto, images=FIXTURE_REFS))
    auto_work.add_workload(WorkloadSpec(name="burst-serve", kind=kind("serve"), slice=burst))
    late = SliceSpec.create(**LATE)
    auto.add_slice(late)  # after the workloads stack was built: its first workload brings its ComputeClass
    auto_work.add_workload(WorkloadSpec(name="late-serve", kind=kind("serve"), slice=late))
    app.synth()
    return outdir, read_stacks(outdir)


def resources(stack: dict[str, Any], rtype: str) -> dict[str, dict[str, Any]]:
    """Resources of one type in a stack, by logical id."""
    return stack.get("resource", {}).get(rtype, {})


def by_name(stack: dict[str, Any], rtype: str) -> dict[str, dict[str, Any]]:
    """Resources of one type keyed by their ``name`` attribute."""
    return {r["name"]: r for r in resources(stack, rtype).values()}


def only(stack: dict[str, Any], rtype: str) -> dict[str, Any]:
    """The single resource of a type (asserts there is exactly one)."""
    found = list(resources(stack, rtype).values())
    assert len(found) == 1, f"expected one {rtype}, found {len(found)}"
    return found[0]


def cdktf_cli() -> Path:
    """``node_modules/.bin/cdktf`` (what ``npx cdktf`` runs); its absence fails under CI (the Makefile runs ``npm ci``)
    and skips elsewhere, saying how to get it."""
    cdktf = REPO / "node_modules" / ".bin" / "cdktf"
    if not cdktf.exists():
        if os.environ.get("CI"):
            pytest.fail("node_modules/.bin/cdktf is missing: run `npm ci` (the Makefile does)")
        pytest.skip("node_modules/.bin/cdktf is missing: run `npm ci`")
    return cdktf


def checkov_bin() -> Path | None:
    """checkov: $RAYTPU_CHECKOV, else .venv-checkov/bin/checkov in the repo; None when absent."""
    named = os.environ.get("RAYTPU_CHECKOV")
    path = Path(named) if named else REPO / ".venv-checkov" / "bin" / "checkov"
    return path if path.exists() else None
