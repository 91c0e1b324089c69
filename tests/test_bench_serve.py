"""bench/serve.py's window and agreement rules (issue 40 item 13): a level is measured until every bound is met, and
a Ray/vLLM ratio is quoted only where its interleaved pairs agree."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[1]


def _bench() -> ModuleType:
    spec = importlib.util.spec_from_file_location("bench_serve", ROOT / "bench" / "serve.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("bench_serve", module)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize(("batches", "busy_s", "tokens", "full"), [
    (3, 20.0, 2048, True), (2, 60.0, 9000, False), (9, 19.9, 9000, False), (9, 60.0, 2047, False),
    (0, 0.0, 0, False)])
def test_a_window_is_full_only_when_every_bound_is_met(batches: int, busy_s: float, tokens: int, full: bool) -> None:
    window = _bench().Window(max_tokens=64, min_batches=3, min_s=20.0, min_tokens=2048)
    assert window.full(batches, busy_s, tokens) is full


def _run(ttft: float, rate: float) -> dict[str, Any]:
    return {"by_concurrency": {"4": {"ttft_p50_s": ttft, "ttft_p95_s": ttft, "output_tokens_per_s": rate}}}


@pytest.mark.parametrize(("ray_rates", "agree", "holds"), [
    ((90.0, 95.0, 100.0), 0.15, True),   # 0.90x-1.00x: spread 11%
    ((90.0, 95.0, 110.0), 0.15, False),  # 0.90x-1.10x: spread 22%
    ((90.0, 95.0, 110.0), 0.25, True)])
def test_a_ratio_holds_only_when_every_pair_agrees(ray_rates: tuple[float, ...], agree: float, holds: bool) -> None:
    bench = _bench()
    pairs = [(_run(0.1, 100.0), _run(0.1, rate)) for rate in ray_rates]
    median, spread = bench.ratios(pairs, [4])
    assert median["4"]["output_tokens_per_s"] == pytest.approx(0.95)
    assert spread["4"]["output_tokens_per_s"]["spread"] == pytest.approx(max(ray_rates) / min(ray_rates) - 1)
    assert ("output_tokens_per_s" in bench.holds(spread, agree)["4"]) is holds
    assert "ttft_p50" in bench.holds(spread, agree)["4"]  # equal TTFTs: spread 0


@pytest.mark.parametrize(("argv", "named"), [
    (["--window-s", "-1"], "--window-s"), (["--window-tokens", "-5"], "--window-tokens"), (["--agree", "0"], "--agree"),
    (["--rounds", "0"], "--rounds"), (["--alt-ray-env", "NOEQUALS"], "--alt-ray-env")])
def test_bad_bench_arguments_exit_2_naming_the_flag_before_any_server_starts(
        argv: list[str], named: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(sys, "argv", ["bench/serve.py", *argv])
    assert _bench().main() == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and named in err and "valid:" in err
