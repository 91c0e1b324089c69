"""bench/serve.py's window, pairing and agreement rules (issue 40 item 13): an arm's window is full only when every
bound is met, a pair's batches alternate between the two servers, pairs repeat until the last ones agree, and a
Ray/vLLM ratio is quoted only where they do."""

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
    if str(ROOT / "bench") not in sys.path:  # bench/serve.py imports its sibling serve_pair, as when run as a script
        sys.path.insert(0, str(ROOT / "bench"))
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


def _figures(ttft: float, rate: float) -> dict[str, Any]:
    return {"ttft_p50_s": ttft, "ttft_p95_s": ttft, "output_tokens_per_s": rate}


@pytest.mark.parametrize(("ray_rates", "agree", "holds"), [
    ((90.0, 95.0, 100.0), 0.15, True),   # 0.90x-1.00x: spread 11%
    ((90.0, 95.0, 110.0), 0.15, False),  # 0.90x-1.10x: spread 22%
    ((90.0, 95.0, 110.0), 0.25, True)])
def test_a_ratio_holds_only_when_every_pair_agrees(ray_rates: tuple[float, ...], agree: float, holds: bool) -> None:
    pair = _pair()
    ratios = [pair.pair_ratios(_figures(0.1, 100.0), _figures(0.1, rate)) for rate in ray_rates]
    out = pair.summary(ratios, 3, agree)
    assert out["output_tokens_per_s"]["median"] == pytest.approx(0.95)
    assert out["output_tokens_per_s"]["spread"] == pytest.approx(max(ray_rates) / min(ray_rates) - 1)
    assert ("output_tokens_per_s" in out["holds"]) is holds
    assert out["settled"] is holds
    assert "ttft_p50" in out["holds"]  # equal TTFTs: spread 0


def _pair() -> ModuleType:
    _bench()
    return sys.modules["serve_pair"]


def test_a_pair_ratio_divides_ray_by_vllm() -> None:
    ratio = _pair().pair_ratios(_figures(0.2, 400.0), _figures(0.3, 300.0))
    assert ratio == pytest.approx({"ttft_p50": 1.5, "ttft_p95": 1.5, "output_tokens_per_s": 0.75})


@pytest.mark.parametrize(("index", "first"), [(0, "vllm"), (1, "ray"), (2, "vllm"), (7, "ray")])
def test_each_pair_starts_with_the_arm_the_previous_one_did_not(index: int, first: str) -> None:
    assert _pair().first_arm(index) == first


def _schedule(index: int, window: Any, block_s: float, batch_s: dict[str, float]) -> tuple[list[str], Any]:
    pair = _pair().Pair(index, window, block_s)
    seen = []
    while (name := pair.next_arm()) is not None:
        seen.append(name)
        pair.add(name, [0.1], 64, batch_s[name])
    return seen, pair


def test_blocks_of_each_arm_alternate_until_both_windows_are_full() -> None:
    window = _pair().Window(max_tokens=64, min_batches=1, min_s=4.0, min_tokens=0)
    seen, pair = _schedule(1, window, 2.0, {"vllm": 1.0, "ray": 1.0})
    assert seen == ["ray", "ray", "vllm", "vllm", "ray", "ray", "vllm", "vllm"]
    assert pair.blocks == ["ray", "vllm", "ray", "vllm"]


def test_a_block_ends_only_after_block_s_of_batches() -> None:
    window = _pair().Window(max_tokens=64, min_batches=3, min_s=0.0, min_tokens=0)
    seen, pair = _schedule(0, window, 0.0, {"vllm": 3.0, "ray": 1.0})  # block_s 0: one batch per block
    assert seen == ["vllm", "ray", "vllm", "ray", "vllm", "ray"]
    assert pair.blocks == seen


def test_a_slow_arm_keeps_measuring_after_the_fast_one_is_full() -> None:
    window = _pair().Window(max_tokens=64, min_batches=1, min_s=4.0, min_tokens=0)
    seen, pair = _schedule(0, window, 2.0, {"vllm": 2.0, "ray": 1.0})
    assert seen == ["vllm", "ray", "ray", "vllm", "ray", "ray"]
    assert pair.arms["vllm"].busy_s == 4.0 and pair.arms["ray"].busy_s == 4.0
    assert pair.next_arm() is None


def test_an_arms_figures_are_its_window_totals() -> None:
    arm = _pair().Arm()
    arm.add([0.1, 0.3, 0.2], 192, 2.0, other_cpu_s=0.2)
    arm.add([0.9, 0.5], 64, 2.0, other_cpu_s=0.2)
    fig = arm.figures()
    assert fig["output_tokens_per_s"] == pytest.approx(64.0)
    assert fig["ttft_p50_s"] == pytest.approx(0.3) and fig["ttft_p95_s"] == pytest.approx(0.9)
    assert fig["other_server_cpu_share"] == pytest.approx(0.1)
    assert (fig["streams"], fig["batches"], fig["tokens"]) == (5, 2, 256)


def _ratios(*rates: float, ttft: float = 1.0) -> list[dict[str, float]]:
    return [{"ttft_p50": ttft, "ttft_p95": 9.0 * i + 1, "output_tokens_per_s": r} for i, r in enumerate(rates)]


@pytest.mark.parametrize(("ratios", "last", "agree", "settled"), [
    (_ratios(0.9, 1.0), 3, 0.15, False),              # too few pairs
    (_ratios(0.9, 1.0, 0.95), 3, 0.15, True),         # 11%; p95 far apart but not a stopping rule
    (_ratios(0.5, 0.9, 1.0, 0.95), 3, 0.15, True),    # a disturbed first pair is left behind
    (_ratios(0.9, 1.0, 0.95, 0.5), 3, 0.15, False),   # ... but not a disturbed last one
    (_ratios(0.9, 1.0, 1.2), 3, 0.15, False),         # 33%
    (_ratios(0.9, 1.0, 1.2), 2, 0.25, True),          # the last 2: 20%
    (_ratios(1.0, 1.0, 1.0, ttft=2.0), 3, 0.15, True)])
def test_pairs_settle_when_the_last_ones_agree_on_ttft_p50_and_tokens_per_s(
        ratios: list[dict[str, float]], last: int, agree: float, settled: bool) -> None:
    assert _pair().settled(ratios, last, agree) is settled


def test_settling_needs_ttft_p50_to_agree_too() -> None:
    ratios = _ratios(1.0, 1.0, 1.0)
    ratios[1]["ttft_p50"] = 1.5
    assert not _pair().settled(ratios, 3, 0.15)
    assert _pair().summary(ratios, 3, 0.15)["holds"] == ["output_tokens_per_s"]


@pytest.mark.parametrize(("argv", "named"), [
    (["--window-s", "-1"], "--window-s"), (["--window-tokens", "-5"], "--window-tokens"), (["--agree", "0"], "--agree"),
    (["--agree", "-0.1"], "--agree"), (["--rounds", "0"], "--rounds"), (["--max-tokens", "0"], "--max-tokens"),
    (["--concurrency", "4", "0"], "--concurrency"), (["--pairs", "0"], "--pairs"), (["--pairs", "1"], "--pairs"),
    (["--max-pairs", "0"], "--max-pairs"), (["--block-s", "-2"], "--block-s"),
    (["--pairs", "4", "--max-pairs", "3"], "--max-pairs"),
    (["--alt-ray-env", "NOEQUALS"], "--alt-ray-env"), (["--alt-ray-env", "A=1", "B"], "--alt-ray-env"),
    (["--vllm-niceness", "-1"], "--vllm-niceness"), (["--vllm-niceness", "20"], "--vllm-niceness"),
    (["--set", "bogus=4"], "--set"), (["--set", "NOEQUALS"], "--set"),
    (["--set", "engine_kwargs.stream_intervl=4"], "--set")])
def test_bad_bench_arguments_exit_2_naming_the_flag_before_any_server_starts(
        argv: list[str], named: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(sys, "argv", ["bench/serve.py", *argv])
    assert _bench().main() == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and named in err and "valid:" in err
    assert "Traceback" not in err and len(err) < 300
