"""Shared synth helpers of the synth tiers: each app is synthesized once per pytest process."""

from __future__ import annotations

import atexit
import functools
import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
STANDARD_EXAMPLE = REPO / "raytpu.example.yaml"
AUTOPILOT_EXAMPLE = REPO / "examples" / "autopilot.yaml"
EXAMPLES = {"standard": STANDARD_EXAMPLE, "autopilot": AUTOPILOT_EXAMPLE}


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
    synth(load(path), outdir)
    return outdir, read_stacks(outdir)


def synth_text(text: str) -> dict[str, dict[str, Any]]:
    """Synthesizes the app of config text (cached by text)."""
    return _synth_text(text)


@functools.cache
def _synth_text(text: str) -> dict[str, dict[str, Any]]:
    from raytpu.config import parse
    from raytpu.stacks.app import synth

    outdir = _tmpdir()
    synth(parse(text), outdir)
    return read_stacks(outdir)


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


def checkov_bin() -> Path | None:
    """checkov: $RAYTPU_CHECKOV, else .venv-checkov/bin/checkov in the repo; None when absent."""
    named = os.environ.get("RAYTPU_CHECKOV")
    path = Path(named) if named else REPO / ".venv-checkov" / "bin" / "checkov"
    return path if path.exists() else None
