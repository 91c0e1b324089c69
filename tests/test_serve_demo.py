"""`raytpu demo --serve`, what `make serve` runs: the serving workload on an emulated slice, asked with the official
`openai` client, torn down; its timeline runs up to the first token (real Ray Serve LLM on vLLM's CPU build)."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from test_local import assert_emulated_timeline

from raytpu.local.slice import procs, state

pytestmark = pytest.mark.serve

_MISSING = [m for m in ("vllm", "openai", "transformers", "ray") if importlib.util.find_spec(m) is None]
if _MISSING:
    pytest.skip(f"the serving demo needs {', '.join(_MISSING)} (vLLM's CPU build): run it in .venv-serve "
                "(`make test-serve`)", allow_module_level=True)

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.timeout(900)
def test_serve_demo_answers_and_times_every_phase_up_to_the_first_token(tmp_path: Path) -> None:
    """As `make serve` runs it (a relative run directory, the demo's own temp prefix and Ray token): every phase of
    the timeline present, the ones the emulated slice lacks said so, times monotonic, adding up to the wall time,
    which is within 5% of the command's as measured here; the first token is the openai client's."""
    report_path = tmp_path / "reports" / "demo-serve.json"
    env = {k: v for k, v in os.environ.items()
           if k not in (state.ENV_TMP_PREFIX, "RAY_AUTH_MODE", "RAY_AUTH_TOKEN", "RAY_AUTH_TOKEN_PATH")}
    env["HF_HUB_OFFLINE"] = "1"
    began = time.monotonic()
    proc = subprocess.Popen(
        [sys.executable, "-m", "raytpu", "demo", "--serve", "--report", str(report_path),
         "--config", str(ROOT / "raytpu.example.yaml"), "--dir", "run"],
        cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    out, err = proc.communicate(timeout=840)
    took = time.monotonic() - began
    assert proc.returncode == 0, err[-3000:] + out[-3000:]
    report = json.loads(report_path.read_text())
    assert report["ok"] and report["answers"] and all(a["completion_tokens"] > 0 for a in report["answers"])
    assert not procs.tagged_processes(f"{state.TMP_PREFIX}s{proc.pid}-")
    assert_emulated_timeline(report["timeline"], took, reserved="emulated", compiled="not reached")  # vLLM's own
    rows = {r["phase"]: r for r in report["timeline"]["phases"]}
    assert rows["reserved"]["detail"].startswith("app RUNNING")
    assert rows["first_step"]["detail"].startswith("first token: the openai client's first streamed content")
    # the first token comes after the app answered /v1/models, and no later than the first answer's TTFT allows
    assert rows["first_step"]["at_s"] > rows["reserved"]["at_s"]
    assert "== where the minutes went" in out
