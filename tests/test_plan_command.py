"""``raytpu plan``: the minimal slice for held-out published cases, checked against the HBM arithmetic written out
here and the recipe that runs it; dated, cited prices; the plot; ``validate``'s fit warning; bad input (exit 2)."""

from __future__ import annotations

import datetime
import json
import os
import struct
from pathlib import Path
from typing import Any

import pytest
import yaml

from raytpu.cli import main
from raytpu.core.common.errors import InvalidInputs
from raytpu.core.manifests import serving
from raytpu.core.specs import kinds
from raytpu.core.specs.spec import SecretKeyRef, SliceSpec, WorkloadSpec
from raytpu.core.tpu import models
from raytpu.core.tpu.catalog import GENERATIONS, generation
from raytpu.core.tpu.plan import plan_slice
from raytpu.sizing import candidates, hf_config, prices

HF_TOKEN = SecretKeyRef(name="hf-secret", key="hf_api_token")  # gated models need one (spec.gated_model_problems)

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[1]
GIB = 1024**3


def run_cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    try:
        code = main(list(argv))
    except SystemExit as exc:
        code = int(exc.code or 0)
    out, err = capsys.readouterr()
    return code, out, err


def plan_json(capsys: pytest.CaptureFixture[str], *argv: str) -> dict[str, Any]:
    code, out, err = run_cli(capsys, "plan", *argv, "--json")
    assert code == 0, err
    data: dict[str, Any] = json.loads(out)
    return data


# ------------------------------------------------------------------------------------------- the models


@pytest.mark.parametrize(("name", "published"), [
    ("llama-3.1-8b", 8.03e9), ("llama-3.1-70b", 70.6e9), ("llama-3.1-405b", 405.9e9), ("llama-3.3-70b", 70.6e9),
    ("qwen3-0.6b", 0.6e9), ("qwen3-8b-base", 8.2e9), ("mixtral-8x7b", 46.7e9), ("gemma-3-12b", 12e9)])
def test_parameter_counts_from_the_shapes_match_the_published_sizes(name: str, published: float) -> None:
    """Counted from config.json shapes, within 2% of the size each model is published as (the model cards:
    Llama 3.1 8B/70B/405B, Qwen3-0.6B "0.6B", Qwen3-8B-Base "8.2B", Mixtral 8x7B "46.7B total", Gemma 3 "12B", its
    language model only)."""
    assert models.MODELS[name].params() == pytest.approx(published, rel=0.02)


def test_every_built_in_model_cites_its_config_json() -> None:
    for shape in models.MODELS.values():
        assert shape.hf_id and shape.source == f"https://huggingface.co/{shape.hf_id}/blob/main/config.json"


def test_a_hugging_face_config_json_gives_the_same_shape_as_the_table(tmp_path: Path) -> None:
    # Llama 3.1 8B's config.json keys (huggingface.co/meta-llama/Llama-3.1-8B-Instruct)
    config = {"num_hidden_layers": 32, "hidden_size": 4096, "num_attention_heads": 32, "num_key_value_heads": 8,
              "intermediate_size": 14336, "vocab_size": 128256, "max_position_embeddings": 131072,
              "tie_word_embeddings": False, "model_type": "llama"}
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    assert hf_config.load_hf_config(str(path)).params() == models.MODELS["llama-3.1-8b"].params()


def test_sliding_window_layers_hold_at_most_their_window(capsys: pytest.CaptureFixture[str]) -> None:
    """Gemma 3 12B: 8 full-attention layers hold the whole 32768-token context, 40 sliding ones 1024 tokens:
    2 x (8 x 32768 + 40 x 1024) x 8 KV heads x 256 x 2 bytes = 2.3125 GiB (48 x 32768 would be 12 GiB)."""
    data = plan_json(capsys, "--model", "gemma-3-12b", "--context", "32768")
    assert data["need"]["gib"]["kv_cache"] == pytest.approx(2.3125, abs=0.001)


@pytest.mark.parametrize(("extra", "sliding"), [
    ({"sliding_window": 1024, "sliding_window_pattern": 6}, 40),
    ({"sliding_window": 1024, "layer_types": ["sliding_attention"] * 47 + ["full_attention"]}, 47),
    ({"sliding_window": 131072, "use_sliding_window": False}, 0),
    ({"sliding_window": 4096}, 0),  # which layers slide is not said: all counted at full context
])
def test_the_config_reader_counts_sliding_layers_only_where_the_config_says_which(
        tmp_path: Path, extra: dict[str, Any], sliding: int) -> None:
    config = {"num_hidden_layers": 48, "hidden_size": 3840, "num_attention_heads": 16, "num_key_value_heads": 8,
              "head_dim": 256, "intermediate_size": 15360, "vocab_size": 262208, "max_position_embeddings": 131072,
              **extra}
    path = tmp_path / "config.json"
    path.write_text(json.dumps({"architectures": ["Gemma3ForConditionalGeneration"], "text_config": config}))
    assert hf_config.load_hf_config(str(path)).sliding_layers == sliding


# ---------------------------------------------------------------------------------- published config.json files


CONFIGS = ROOT / "tests" / "data" / "model_configs"
"""Verbatim published config.json files (their README names where each was copied from)."""


@pytest.mark.parametrize(("name", "published", "kv_per_token_layer", "full_layers", "tied"), [
    # meta-llama/Llama-3.1-8B-Instruct: "8B" (8.03B); 2 x 8 KV heads x 128
    ("llama-3.1-8b-instruct", 8.03e9, 2 * 8 * 128, 32, False),
    # google/gemma-3-4b-it: 4.3B with its ~0.42B SigLIP vision tower (not counted); transformers' Gemma3TextConfig
    # defaults fill in 8 heads, 4 KV heads, head_dim 256, vocab 262208, tied embeddings, 1 full layer in 6
    ("gemma-3-4b-it", 3.88e9, 2 * 4 * 256, 34 // 6, True),
    # google/gemma-3-27b-it: 27.4B with the vision tower; 16 KV heads x head_dim 128; 10 of 62 layers full
    ("gemma-3-27b-it", 27.0e9, 2 * 16 * 128, 62 // 6, True),
    # DeepSeek-V3 architecture: "Total parameters: 671B" for the main model, the MTP module's 11.5B apart
    # (deepseek-ai/DeepSeek-V3 README_WEIGHTS.md); MLA caches one 512 + 64 latent per token and layer
    ("deepseek-r1-0528", 671e9, 512 + 64, 61, False),
])
def test_published_config_json_files_read_as_transformers_reads_them(
        name: str, published: float, kv_per_token_layer: int, full_layers: int, tied: bool) -> None:
    """Before: Gemma 3 was refused (no vocab_size / num_attention_heads) and, patched, counted every layer at full
    attention and its embedding twice (27B: 28.4B, KV 5.3x at 32k); DeepSeek-V3 was refused (no num_experts) and,
    patched, counted 702B with a KV cache of 2 x 128 heads x 56 per layer (24.9x MLA's latent)."""
    shape = hf_config.load_hf_config(str(CONFIGS / f"{name}.config.json"))
    assert shape.params() == pytest.approx(published, rel=0.01)
    assert shape.kv_elements_per_token_layer() == kv_per_token_layer
    assert shape.layers - shape.sliding_layers == full_layers
    assert shape.tied_embeddings is tied


def test_deepseek_v3_is_dense_then_experts_with_a_shared_expert_and_a_latent_kv_cache(
        capsys: pytest.CaptureFixture[str]) -> None:
    """3 dense layers (intermediate 18432), 58 expert layers of 256 routed + 1 shared expert (2048 wide each);
    KV for one 4096-token sequence: 61 layers x 576 x 4096 x 2 bytes = 0.268 GiB (70,272 bytes per token); vLLM keeps
    the whole latent on every tensor-parallel rank (get_num_kv_heads is 1 with MLA)."""
    shape = hf_config.load_hf_config(str(CONFIGS / "deepseek-r1-0528.config.json"))
    assert (shape.dense_layers, shape.dense_intermediate, shape.intermediate, shape.shared_intermediate,
            shape.experts, shape.experts_per_token) == (3, 18432, 2048, 2048, 256, 8)
    data = plan_json(capsys, "--model-config", str(CONFIGS / "deepseek-r1-0528.config.json"), "--context", "4096",
                     "--all")
    assert data["need"]["gib"]["kv_cache"] == pytest.approx(61 * 576 * 4096 * 2 / GIB, abs=0.001)
    assert data["model"]["mla"]["kv_lora_rank"] == 512
    row = next(c for c in data["candidates"] if c["servable"] and c["generation"] == "v5p")
    tp = int(row["servable_note"].split()[1])  # "TP 64" or "TP 4 x PP 16": the KV cache is held tp times over
    weights = data["need"]["gib"]["weights"]
    assert row["need_gib"] == pytest.approx(weights + tp * 61 * 576 * 4096 * 2 / GIB, abs=0.01)


def test_a_gemma_3_config_without_a_sliding_pattern_takes_transformers_default(tmp_path: Path) -> None:
    """google/gemma-3-27b-it's text_config gives sliding_window 1024 but no pattern: Gemma3TextConfig's default 6."""
    shape = hf_config.load_hf_config(str(CONFIGS / "gemma-3-27b-it.config.json"))
    assert (shape.sliding_layers, shape.sliding_window, shape.vocab, shape.max_positions) == (52, 1024, 262208,
                                                                                              131072)
    kv_32k = shape.kv_token_layers(32768) * shape.kv_elements_per_token_layer() * 2
    assert kv_32k == (10 * 32768 + 52 * 1024) * 2 * 16 * 128 * 2


# ------------------------------------------------------------------------------------------- training dtypes


@pytest.mark.parametrize(("argv", "per_param"), [
    ((), 16),  # fp32 weights + fp32 gradients + AdamW's two fp32 moments: MaxText base.yml's defaults
    (("--dtype", "bf16"), 12),  # bf16 weights and gradients, fp32 moments
    (("--dtype", "bf16", "--grad-dtype", "fp32"), 14),
])
def test_training_defaults_to_fp32_weights_and_gradients(capsys: pytest.CaptureFixture[str], argv: tuple[str, ...],
                                                         per_param: int) -> None:
    code, out, err = run_cli(capsys, "plan", "--model", "llama-3.1-8b", "--mode", "train", *argv)
    assert code == 0, err
    assert f"; {per_param} bytes per parameter in all before activations" in out
    data = plan_json(capsys, "--model", "llama-3.1-8b", "--mode", "train", *argv)
    terms = data["need"]["gib"]
    assert terms["weights"] + terms["gradients"] + terms["optimizer"] == pytest.approx(
        8_030_261_248 * per_param / GIB, abs=0.01)


def test_serving_still_defaults_to_bf16_weights(capsys: pytest.CaptureFixture[str]) -> None:
    data = plan_json(capsys, "--model", "llama-3.1-8b")
    assert data["dtype"] == "bf16" and "grad_dtype" not in data


# ------------------------------------------------------------------------------- held-out published cases


LLAMA_VLLM_RECIPE = ("AI-Hypercomputer/tpu-recipes inference/trillium/vLLM/Llama3.1/README.md (51a4773b): \"For "
                     "Llama3.1-8B, 1 chip is sufficient and for the 70B model, at least 8 chips are required\"; "
                     "MAX_MODEL_LEN=4096, TP=8 (number of chips)")


def test_llama_3_1_70b_serves_on_v6e_2x4_with_tp_8(capsys: pytest.CaptureFixture[str]) -> None:
    """The vLLM TPU recipe (:data:`LLAMA_VLLM_RECIPE`) serves Llama 3.1 70B on v6e-8 with TP 8 and a 4096-token
    context; GKE's "Serve an LLM using TPU Trillium on GKE with vLLM" (cloud.google.com/kubernetes-engine/docs/
    tutorials/serve-vllm-tpu) serves it on one ct6e-standard-8t (v6e 2x4, one host).

    Arithmetic: 70,553,706,496 parameters x 2 bytes = 131.42 GiB; KV for one 4096-token sequence:
    2 x 80 x 8 x 128 x 4096 x 2 bytes = 1.25 GiB; 132.67 GiB in all. v6e 2x2: 4 x 32 GiB x 0.9 = 115.2 < 132.67;
    v6e 2x4: 8 x 32 x 0.9 = 230.4 >= 132.67."""
    data = plan_json(capsys, "--model", "llama-3.1-70b", "--mode", "serve", "--context", "4096")
    assert data["model"]["params"] == 70_553_706_496
    assert data["need"]["total_gib"] == pytest.approx(131.42 + 1.25, abs=0.01)
    assert data["minimal"]["v6e"] == "2x4"
    row = next(c for c in data["candidates"] if (c["generation"], c["topology"]) == ("v6e", "2x4"))
    assert row["servable"] and row["servable_note"] == "TP 8" and row["hosts"] == 1
    assert not any((c["generation"], c["topology"]) == ("v6e", "2x2") for c in data["candidates"])


def test_llama_3_1_8b_fits_one_v6e_chip_and_four_v5e_chips(capsys: pytest.CaptureFixture[str]) -> None:
    """The vLLM TPU recipe (:data:`LLAMA_VLLM_RECIPE`) serves Llama 3.1 8B on v6e-1 (one chip).

    Arithmetic: 8,030,261,248 parameters x 2 bytes = 14.96 GiB; KV for 4096 tokens: 2 x 32 x 8 x 128 x 4096 x 2
    = 0.5 GiB; 15.46 GiB. v6e 1x1: 32 x 0.9 = 28.8 (fits); v5e 1x1: 16 x 0.9 = 14.4 (does not); v5e 2x2: 57.6."""
    data = plan_json(capsys, "--model", "llama-3.1-8b", "--context", "4096")
    assert data["model"]["params"] == 8_030_261_248
    assert data["need"]["total_gib"] == pytest.approx(14.96 + 0.5, abs=0.01)
    assert data["minimal"]["v6e"] == "1x1" and data["minimal"]["v5e"] == "2x2"
    assert data["cheapest"]["generation"] == "v6e" and data["cheapest"]["topology"] == "1x1"


def test_llama_3_1_70b_trains_on_v6e_32_as_the_maxtext_recipe(capsys: pytest.CaptureFixture[str]) -> None:
    """AI-Hypercomputer/tpu-recipes ``training/trillium/Llama3.1-70B-MaxText/v6e-32/README.md`` (3596002a) trains
    Llama 3.1 70B on v6e-32 (4x8) with ``weight_dtype: bfloat16``, ``per_device_batch_size: 2`` (64 sequences on 32
    chips), ``max_target_length: 8192`` and the decoder layers' inputs offloaded to the host.

    Arithmetic: weights, gradients and AdamW's two moments in bf16 (optax keeps them in the parameters' dtype):
    70,553,706,496 x 8 bytes = 525.67 GiB; activations of one layer, 34 x (64 x 8192) tokens x 8192 hidden x 1 byte
    = 136.0 GiB; 661.67 GiB. v6e 4x4: 16 x 32 x 0.9 = 460.8 < 661.67; v6e 4x8: 921.6 >= 661.67."""
    data = plan_json(capsys, "--model", "llama-3.1-70b", "--mode", "train", "--dtype", "bf16",
                     "--optimizer", "adamw", "--optimizer-dtype", "bf16", "--batch", "64", "--context", "8192",
                     "--remat", "offload")
    assert data["need"]["total_gib"] == pytest.approx(525.67 + 136.0, abs=0.02)
    assert data["minimal"]["v6e"] == "4x8"
    assert all(c["servable"] is None for c in data["candidates"]), "training has no serving rules"


def test_mixtral_serves_with_every_expert_resident(capsys: pytest.CaptureFixture[str]) -> None:
    """All 8 experts' weights are held (46.7B parameters), though 2 run per token: 46,702,792,704 x 2 bytes =
    86.99 GiB; KV for 4096 tokens: 2 x 32 x 8 x 128 x 4096 x 2 = 0.5 GiB. v6e 1x1: 28.8 usable; v6e 2x2: 115.2."""
    data = plan_json(capsys, "--model", "mixtral-8x7b", "--context", "4096")
    assert data["model"]["experts"] == 8 and data["need"]["total_gib"] == pytest.approx(86.99 + 0.5, abs=0.02)
    assert data["minimal"]["v6e"] == "2x2"
    assert any("all 8 experts" in line for line in data["need"]["assumptions"])


def test_kv_heads_are_replicated_when_tp_exceeds_them(capsys: pytest.CaptureFixture[str]) -> None:
    """Qwen3-0.6B has 8 KV heads: on 16 JAX devices vLLM holds 16 copies' worth (one KV head per rank)."""
    data = plan_json(capsys, "--model", "qwen3-0.6b", "--context", "4096", "--all")
    one = next(c for c in data["candidates"] if (c["generation"], c["topology"]) == ("v6e", "2x4"))
    two = next(c for c in data["candidates"] if (c["generation"], c["topology"]) == ("v6e", "4x4"))
    kv = 2 * 28 * 8 * 128 * 4096 * 2 / GIB
    assert two["need_gib"] - one["need_gib"] == pytest.approx(kv, abs=0.01)


def test_a_tp_that_does_not_divide_the_heads_is_not_servable(capsys: pytest.CaptureFixture[str]) -> None:
    """Qwen3-0.6B's 16 heads: v6e 4x8 (32 devices, 8 hosts of 4) is servable only as 8 stages of TP 4."""
    data = plan_json(capsys, "--model", "qwen3-0.6b", "--all")
    row = next(c for c in data["candidates"] if (c["generation"], c["topology"]) == ("v6e", "4x8"))
    assert row["servable"] and row["servable_note"] == "TP 4 x PP 8"


# -------------------------------------------------------------------------------------------- prices


def test_the_default_prices_carry_a_date_a_source_and_every_generation() -> None:
    table = prices.default_table()
    assert datetime.date.fromisoformat(table.read_on) <= datetime.date.today()
    assert "cloud.google.com/tpu/pricing" in table.source and "skypilot-catalog" in table.source
    assert set(table.per_chip_hour) == set(GENERATIONS)
    assert table.chip_hour("v6e", "on_demand") == 2.70 and table.chip_hour("v5e", "on_demand") == 1.20
    assert all(table.chip_hour(g, "flex_start") is None for g in GENERATIONS), "unpublished: never guessed"


CLUSTER_AUTOSCALER_VM_PRICES = {"v4": (12.88, 4), "v5e": (9.6, 8), "v5p": (16.8, 4), "v6e": (21.6, 8)}
"""A second source for on-demand prices, recorded: GoogleCloudPlatform/cluster-autoscaler
``pkg/cloudprovider/gke/machinetypes/deprecated_machine_types_config.go`` (a181d5ac), ``withInstancePriceOverride``
of ct4p-hightpu-4t, ct5lp-hightpu-8t, ct5p-hightpu-4t and ct6e-standard-8t, with each VM's chips."""


def test_a_price_table_as_plan_json_writes_it_reads_back_unchanged() -> None:
    """Every key ``to_json`` writes (``regions`` too) is one ``--prices`` takes: `plan --json`'s prices round-trip,
    while a key of no table (``curency``) is refused (tests/bad_inputs.py)."""
    table = prices.default_table()
    assert prices.parse(json.loads(json.dumps(table.to_json()))) == table


def test_default_on_demand_prices_agree_with_the_cluster_autoscaler() -> None:
    table = prices.default_table()
    for gen, (per_vm, chips) in CLUSTER_AUTOSCALER_VM_PRICES.items():
        assert table.chip_hour(gen, "on_demand") == pytest.approx(per_vm / chips), gen
    assert table.chip_hour("tpu7x", "on_demand") is None, "neither source prices tpu7x"


def test_prices_file_overrides_and_tokens_give_dollars_per_million(capsys: pytest.CaptureFixture[str],
                                                                   tmp_path: Path) -> None:
    path = tmp_path / "prices.json"
    path.write_text(json.dumps({"source": "our contract", "read_on": "2026-11-30", "region": "us-east5",
                                "per_chip_hour": {"v6e": {"on_demand": 2.0, "spot": 1.0, "flex_start": 1.5}}}))
    data = plan_json(capsys, "--model", "llama-3.1-8b", "--prices", str(path), "--tokens-per-s", "1000")
    row = next(c for c in data["candidates"] if (c["generation"], c["topology"]) == ("v6e", "1x1"))
    assert row["price_per_hour"] == {"on_demand": 2.0, "spot": 1.0, "flex_start": 1.5}
    assert row["usd_per_million_tokens"]["on_demand"] == pytest.approx(2.0 / 3.6, abs=1e-4)
    assert data["prices"]["source"] == "our contract" and data["prices"]["read_on"] == "2026-11-30"


# ------------------------------------------------------------------------------------------ output


def test_the_table_marks_the_cheapest_and_states_the_headroom(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run_cli(capsys, "plan", "--model", "llama-3.1-70b", "--context", "8192", "--batch", "16")
    assert code == 0, err
    assert "headroom: 10% of HBM kept free" in out and "read 2026-12-02" in out
    assert any(line.startswith("v5p") and "2x2x1 *" in line for line in out.splitlines())


def test_plot_is_a_valid_png(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    target = tmp_path / "plan.png"
    code, _, err = run_cli(capsys, "plan", "--model", "llama-3.1-8b", "--plot", str(target))
    assert code == 0, err
    data = target.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and data[12:16] == b"IHDR"
    width, height = struct.unpack(">II", data[16:24])
    assert width > 100 and height > 100
    assert [p.name for p in tmp_path.iterdir()] == ["plan.png"], "no temporary file left behind"
    umask = os.umask(0)
    os.umask(umask)
    assert target.stat().st_mode & 0o777 == 0o666 & ~umask


@pytest.mark.parametrize(("name", "magic"), [("plan.svg", (b"<?xml", b"<svg")), ("plan.pdf", (b"%PDF",)),
                                             ("PLAN.PNG", (b"\x89PNG",))])
def test_plot_writes_svg_and_pdf_with_the_umask_mode(capsys: pytest.CaptureFixture[str], tmp_path: Path, name: str,
                                                     magic: tuple[bytes, ...]) -> None:
    target = tmp_path / name
    old = os.umask(0o022)
    try:
        code, _, err = run_cli(capsys, "plan", "--model", "llama-3.1-8b", "--plot", str(target))
    finally:
        os.umask(old)
    assert code == 0, err
    assert target.read_bytes().startswith(magic)
    assert target.stat().st_mode & 0o777 == 0o644, "a new plot gets the umask's mode, not mkstemp's 0600"
    assert [p.name for p in tmp_path.iterdir()] == [name], "no temporary file left behind"


def test_plot_replacing_a_file_keeps_its_mode(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    target = tmp_path / "plan.svg"
    target.write_text("old")
    target.chmod(0o640)
    code, _, err = run_cli(capsys, "plan", "--model", "llama-3.1-8b", "--plot", str(target))
    assert code == 0, err
    assert target.read_text().startswith("<?xml") and target.stat().st_mode & 0o777 == 0o640
    assert [p.name for p in tmp_path.iterdir()] == ["plan.svg"]


def _fifo(t: Path) -> Path:
    os.mkfifo(t / "plan.png")
    return t / "plan.png"


PLOT_REFUSED = [
    # (name, the --plot path in tmp_path, what the error says): refused before any sizing, nothing written
    ("a folder", lambda t: (t / "chart.png").mkdir() or t / "chart.png", "is a folder"),
    ("a missing parent", lambda t: t / "no" / "plan.png", "is in a directory that does not exist"),
    ("a file as parent", lambda t: (t / "f").write_text("x") and t / "f" / "plan.png", "is under a file"),
    ("a fifo", _fifo, "is not a regular file"),
]


@pytest.mark.parametrize(("path", "says"), [c[1:] for c in PLOT_REFUSED], ids=[c[0] for c in PLOT_REFUSED])
def test_plot_to_a_path_it_cannot_write_is_refused_before_sizing(capsys: pytest.CaptureFixture[str], tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch, path: Any,
                                                                 says: str) -> None:
    target = path(tmp_path)
    before = sorted(p.name for p in tmp_path.rglob("*"))
    monkeypatch.setattr(candidates, "candidates", lambda *a, **k: pytest.fail("sized before the path was checked"))
    code, out, err = run_cli(capsys, "plan", "--model", "llama-3.1-8b", "--plot", str(target))
    assert (code, out) == (2, "") and err.startswith("error: --plot: ") and says in err and "; valid: " in err, err
    assert len(err.splitlines()) == 1 and "Traceback" not in err
    assert sorted(p.name for p in tmp_path.rglob("*")) == before


def test_plot_in_a_folder_without_write_access_is_refused(capsys: pytest.CaptureFixture[str], tmp_path: Path,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    real = os.access
    monkeypatch.setattr(os, "access", lambda p, m, *a, **k: False if Path(p) == tmp_path else real(p, m, *a, **k))
    code, _, err = run_cli(capsys, "plan", "--model", "llama-3.1-8b", "--plot", str(tmp_path / "plan.png"))
    assert code == 2 and "--plot: " in err and "is in a folder you cannot write" in err
    assert list(tmp_path.iterdir()) == []


@pytest.mark.skipif(not Path("/proc/self").is_dir(), reason="needs Linux /proc")
def test_plot_in_a_folder_no_file_can_be_made_in_is_refused_before_sizing(capsys: pytest.CaptureFixture[str]) -> None:
    """/proc passes ``os.access`` as root: a probe file finds it out before any sizing or drawing."""
    code, out, err = run_cli(capsys, "plan", "--model", "llama-3.1-8b", "--json", "--plot", "/proc/plan.png")
    assert (code, out) == (2, "") and err.startswith("error: --plot: '/proc/plan.png' is in a folder you cannot "
                                                     "write"), err
    assert "Traceback" not in err and not Path("/proc/plan.png").exists()


def test_a_failed_write_leaves_the_old_file_and_no_temporary(capsys: pytest.CaptureFixture[str], tmp_path: Path,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    from matplotlib.figure import Figure

    target = tmp_path / "plan.pdf"
    target.write_text("mine")

    def full(self: Figure, out: Any, **kwargs: Any) -> None:
        out.write(b"%PDF half")
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(Figure, "savefig", full)
    code, _, err = run_cli(capsys, "plan", "--model", "llama-3.1-8b", "--plot", str(target))
    assert code == 2 and "--plot: " in err and "cannot be written (No space left on device)" in err, err
    assert target.read_text() == "mine" and [p.name for p in tmp_path.iterdir()] == ["plan.pdf"]


@pytest.mark.parametrize(("argv", "says"), [
    (["--params", "1e14", "--mode", "train"], "fits only slices Ray cannot reserve as one (tpu7x)"),
    (["--model", "llama-3.1-8b", "--prices", "NO_ON_DEMAND"], "fits only slices with no on-demand price in"),
], ids=["unreservable", "unpriced"])
def test_plot_with_nothing_to_draw_exits_2_naming_the_model_and_writes_nothing(
        capsys: pytest.CaptureFixture[str], tmp_path: Path, argv: list[str], says: str) -> None:
    if "NO_ON_DEMAND" in argv:
        table = prices.default_table().to_json()
        for row in table["per_chip_hour"].values():
            row["on_demand"] = None
        (tmp_path / "prices.json").write_text(json.dumps(table))
        argv = [str(tmp_path / "prices.json") if a == "NO_ON_DEMAND" else a for a in argv]
    code, out, err = run_cli(capsys, "plan", *argv, "--plot", str(tmp_path / "plan.png"))
    assert (code, out) == (2, ""), err
    assert err.startswith(f"error: {argv[0]}: ") and says in err and "so --plot has nothing to draw" in err, err
    assert "no --plot" in err and not (tmp_path / "plan.png").exists()
    code, _, err = run_cli(capsys, "plan", *argv)
    assert code == 0, "without --plot the table still lists the slices that fit"


# ------------------------------------------------------------------------------------------ bad input


def _config(tmp_path: Path, **change: Any) -> str:
    config: dict[str, Any] = {"num_hidden_layers": 32, "hidden_size": 4096, "num_attention_heads": 32,
                              "num_key_value_heads": 8, "intermediate_size": 14336, "vocab_size": 128256,
                              "max_position_embeddings": 131072}
    config.update(change)
    config = {k: v for k, v in config.items() if v is not None}
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    return str(path)


def _prices(tmp_path: Path, text: str) -> str:
    path = tmp_path / "prices.json"
    path.write_text(text)
    return str(path)


BAD: list[tuple[str, Any, str]] = [
    ("unknown model", lambda t: ["--model", "llama-9"], "--model: 'llama-9' is not allowed"),
    ("no model", lambda t: [], "--model: is required"),
    ("two models", lambda t: ["--model", "llama-3.1-8b", "--params", "8e9"], "--model: was given with --params"),
    ("params not a number", lambda t: ["--params", "eight"], "--params: 'eight' is not a number"),
    ("params negative", lambda t: ["--params=-8e9"], "--params: '-8e9' is out of range"),
    ("params absurd", lambda t: ["--params", "1e20"], "--params: '1e20' is out of range"),
    ("params nan", lambda t: ["--params", "nan"], "--params: 'nan' is out of range"),
    ("context beyond the model", lambda t: ["--model", "qwen3-0.6b", "--context", "50000"],
     "max_position_embeddings (40960)"),
    ("context zero", lambda t: ["--model", "llama-3.1-8b", "--context", "0"], "--context: 0 is out of range"),
    ("context negative", lambda t: ["--model", "llama-3.1-8b", "--context", "-5"], "--context: -5 is out of range"),
    ("context not an int", lambda t: ["--model", "llama-3.1-8b", "--context", "8k"], "--context: invalid int"),
    ("batch zero", lambda t: ["--model", "llama-3.1-8b", "--batch", "0"], "--batch: 0 is out of range"),
    ("batch absurd", lambda t: ["--model", "llama-3.1-8b", "--batch", "10000000"], "--batch: 10000000 is out"),
    ("unknown dtype", lambda t: ["--model", "llama-3.1-8b", "--dtype", "fp16"], "--dtype: invalid choice"),
    ("unknown mode", lambda t: ["--model", "llama-3.1-8b", "--mode", "tune"], "--mode: invalid choice"),
    ("unknown optimizer", lambda t: ["--model", "llama-3.1-8b", "--mode", "train", "--optimizer", "rmsprop"],
     "--optimizer: invalid choice"),
    ("unknown remat", lambda t: ["--model", "llama-3.1-8b", "--mode", "train", "--remat", "some"],
     "--remat: invalid choice"),
    ("headroom too large", lambda t: ["--model", "llama-3.1-8b", "--headroom", "0.95"], "--headroom: 0.95 is out"),
    ("headroom negative", lambda t: ["--model", "llama-3.1-8b", "--headroom", "-0.1"], "--headroom: -0.1 is out"),
    ("tokens per s negative", lambda t: ["--model", "llama-3.1-8b", "--tokens-per-s", "-3"], "--tokens-per-s: -3.0"),
    ("tokens per s for training", lambda t: ["--model", "llama-3.1-8b", "--mode", "train", "--tokens-per-s", "9"],
     "--tokens-per-s: 9.0 is not allowed with --mode train"),
    ("plot not png", lambda t: ["--model", "llama-3.1-8b", "--plot", str(t / "plan.jpg")],
     "is not a .png, .svg or .pdf path"),
    ("plot in a missing directory", lambda t: ["--model", "llama-3.1-8b", "--plot", str(t / "no" / "p.png")],
     "is in a directory that does not exist"),
    ("config missing file", lambda t: ["--model-config", str(t / "none.json")], "cannot be read"),
    ("config not json", lambda t: ["--model-config", _prices(t, "{not json")], "is not JSON"),
    ("config not an object", lambda t: ["--model-config", _prices(t, "[1, 2]")], "'list' is not a JSON object"),
    ("config missing layers", lambda t: ["--model-config", _config(t, num_hidden_layers=None)],
     "--model-config.num_hidden_layers: is required"),
    ("config negative hidden", lambda t: ["--model-config", _config(t, hidden_size=-4096)],
     "--model-config.hidden_size: -4096 is not a whole number"),
    ("config string heads", lambda t: ["--model-config", _config(t, num_attention_heads="32")],
     "--model-config.num_attention_heads: '32' is not a whole number"),
    ("config kv heads not dividing", lambda t: ["--model-config", _config(t, num_key_value_heads=5)],
     "--model-config.num_key_value_heads: 5 does not divide"),
    ("config heads not dividing hidden", lambda t: ["--model-config", _config(t, num_attention_heads=3,
                                                                              num_key_value_heads=1)],
     "is not divisible by num_attention_heads 3"),
    ("config bad tie", lambda t: ["--model-config", _config(t, tie_word_embeddings="yes")],
     "--model-config.tie_word_embeddings: 'yes' is not a boolean"),
    ("config too many experts per token", lambda t: ["--model-config", _config(t, num_local_experts=8,
                                                                               num_experts_per_tok=9)],
     "num_experts_per_tok: 9 is more than the 8 experts"),
    ("config bad sliding pattern", lambda t: ["--model-config", _config(t, sliding_window=1024,
                                                                        sliding_window_pattern=0)],
     "--model-config.sliding_window_pattern: 0 is not a positive whole number"),
    ("config short layer types", lambda t: ["--model-config", _config(t, sliding_window=1024,
                                                                      layer_types=["full_attention"])],
     "--model-config.layer_types: [full_attention] is not a list of 32 layer types"),
    # architectures plan does not model are refused by the key that says so, not miscounted
    ("config gemma 3n shared kv", lambda t: ["--model-config", _config(t, num_kv_shared_layers=15)],
     "--model-config.num_kv_shared_layers: 15 means layers that reuse another layer's KV cache (Gemma 3n), which "
     "`raytpu plan` does not model; valid: a config of what it models (decoder-only transformers"),
    ("config qwen3-next hybrid", lambda t: ["--model-config", _config(t, full_attention_interval=4)],
     "--model-config.full_attention_interval: 4 means linear-attention layers"),
    ("config sparse moe step", lambda t: ["--model-config", _config(t, num_experts=8, num_experts_per_tok=2,
                                                                    decoder_sparse_step=2)],
     "--model-config.decoder_sparse_step: 2 means experts on only every Nth layer"),
    ("config deepseek v3.2 indexer", lambda t: ["--model-config", _config(t, index_topk=2048)],
     "--model-config.index_topk: 2048 means DeepSeek sparse attention"),
    ("config dense layers beyond the model", lambda t: ["--model-config", _config(
        t, num_experts=8, num_experts_per_tok=2, first_k_dense_replace=33)],
     "--model-config.first_k_dense_replace: 33 is not a whole number in range; valid: an integer 0..32"),
    ("grad dtype when serving", lambda t: ["--model", "llama-3.1-8b", "--grad-dtype", "bf16"],
     "--grad-dtype: 'bf16' is not allowed with --mode serve"),
    ("prices missing file", lambda t: ["--model", "llama-3.1-8b", "--prices", str(t / "none.json")], "cannot be read"),
    ("prices not json", lambda t: ["--model", "llama-3.1-8b", "--prices", _prices(t, "nope")], "is not JSON"),
    ("prices no date", lambda t: ["--model", "llama-3.1-8b", "--prices", _prices(t, json.dumps(
        {"source": "x", "region": "r", "per_chip_hour": {"v6e": {"on_demand": 1}}}))], "--prices.read_on: is required"),
    ("prices bad date", lambda t: ["--model", "llama-3.1-8b", "--prices", _prices(t, json.dumps(
        {"source": "x", "read_on": "last week", "region": "r", "per_chip_hour": {"v6e": {"on_demand": 1}}}))],
     "--prices.read_on: 'last week' is not a date"),
    ("prices unknown generation", lambda t: ["--model", "llama-3.1-8b", "--prices", _prices(t, json.dumps(
        {"source": "x", "read_on": "2026-01-01", "region": "r", "per_chip_hour": {"v9": {"on_demand": 1}}}))],
     "--prices.per_chip_hour: 'v9' is not allowed"),
    ("prices negative", lambda t: ["--model", "llama-3.1-8b", "--prices", _prices(t, json.dumps(
        {"source": "x", "read_on": "2026-01-01", "region": "r", "per_chip_hour": {"v6e": {"spot": -1}}}))],
     "--prices.per_chip_hour.v6e.spot: -1 is not a price"),
    ("prices unknown kind", lambda t: ["--model", "llama-3.1-8b", "--prices", _prices(t, json.dumps(
        {"source": "x", "read_on": "2026-01-01", "region": "r", "per_chip_hour": {"v6e": {"reserved": 1}}}))],
     "--prices.per_chip_hour.v6e: 'reserved' is not allowed"),
    ("prices misspelt currency", lambda t: ["--model", "llama-3.1-8b", "--prices", _prices(t, json.dumps(
        {"source": "x", "read_on": "2026-01-01", "region": "r", "curency": "EUR",
         "per_chip_hour": {"v6e": {"on_demand": 1}}}))],
     "--prices: 'curency' is not allowed as a price table's key; valid: source, read_on, region, currency, "
     "per_chip_hour, regions"),
    ("prices regions of an unknown generation", lambda t: ["--model", "llama-3.1-8b", "--prices", _prices(t, json.dumps(
        {"source": "x", "read_on": "2026-01-01", "region": "r", "regions": {"v9": "us-east5"},
         "per_chip_hour": {"v6e": {"on_demand": 1}}}))], "--prices.regions: 'v9' is not allowed"),
    ("prices empty table", lambda t: ["--model", "llama-3.1-8b", "--prices", _prices(t, json.dumps(
        {"source": "x", "read_on": "2026-01-01", "region": "r", "per_chip_hour": {}}))],
     "--prices.per_chip_hour: is required"),
]


@pytest.mark.parametrize(("case", "argv", "expected"), BAD, ids=[b[0] for b in BAD])
def test_bad_input_exits_2_naming_the_field_and_what_is_valid(capsys: pytest.CaptureFixture[str], tmp_path: Path,
                                                               case: str, argv: Any, expected: str) -> None:
    code, out, err = run_cli(capsys, "plan", *argv(tmp_path))
    assert code == 2, (case, out, err)
    assert out == "" and "Traceback" not in err
    assert err.startswith("error: ") and expected in err and "; valid: " in err, err
    assert not (tmp_path / "plan.jpg").exists() and not (tmp_path / "plan.png").exists()


def test_plot_without_matplotlib_is_bad_input_before_anything_is_written(capsys: pytest.CaptureFixture[str],
                                                                           tmp_path: Path,
                                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "matplotlib" else real(name, *a))
    code, out, err = run_cli(capsys, "plan", "--model", "llama-3.1-8b", "--plot", str(tmp_path / "plan.png"))
    assert code == 2 and out == "" and "--plot: " in err and "needs matplotlib" in err and "; valid: " in err
    assert list(tmp_path.iterdir()) == []


def test_unknown_model_lists_the_built_in_ones(capsys: pytest.CaptureFixture[str]) -> None:
    _, _, err = run_cli(capsys, "plan", "--model", "gpt-5")
    assert all(name in err for name in models.MODELS)


# ------------------------------------------------------------------------------------------ validate


def _serving_config(tmp_path: Path, model: str) -> str:
    data: dict[str, Any] = yaml.safe_load((ROOT / "raytpu.example.yaml").read_text())
    serve = next(w for w in data["workloads"] if w["kind"] == "serve")
    serve["model"] = model
    serve["hf_token_secret"] = {"name": "hf-secret", "key": "hf_api_token"}  # the gated models need one
    path = tmp_path / "raytpu.yaml"
    path.write_text(yaml.safe_dump(data))
    return str(path)


def test_validate_warns_when_the_model_cannot_fit_its_slice(capsys: pytest.CaptureFixture[str],
                                                            tmp_path: Path) -> None:
    """Llama 3.1 405B in bf16 (756 GiB of weights) on the example's v6e 2x4 (230.4 GiB usable): a warning, exit 0."""
    code, _, err = run_cli(capsys, "validate", _serving_config(tmp_path, "meta-llama/Llama-3.1-405B-Instruct"))
    assert code == 0, err
    line = next(line for line in err.splitlines() if "workloads.serve" in line)
    assert line.startswith("warning: ") and "llama-3.1-405b needs" in line and "230.4 GiB usable" in line


def test_validate_says_when_it_cannot_know_the_model(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    code, _, err = run_cli(capsys, "validate", _serving_config(tmp_path, "someorg/some-model"))
    assert code == 0, err
    assert "not in `raytpu plan`'s built-in table" in err and "was not checked" in err


def test_validate_is_quiet_when_the_model_fits(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    code, _, err = run_cli(capsys, "validate", _serving_config(tmp_path, "meta-llama/Llama-3.1-70B-Instruct"))
    assert code == 0, err
    assert "workloads.serve" not in err


# -------------------------------------------------------------------------------- one heads rule: plan = validate


def _catalog_slices() -> list[tuple[str, str]]:
    return [(g.name, t) for g in GENERATIONS.values() for t in g.topologies]


@pytest.mark.parametrize("name", sorted(models.MODELS))
def test_validate_plan_and_the_builder_agree_on_every_catalog_slice(name: str) -> None:
    """For each built-in model on each Ray-reservable catalog slice: a serving workload with the engine_kwargs plan
    names is valid exactly where plan says servable, and the builder emits plan's TP; with no engine_kwargs it is
    valid exactly where plan's layout needs none. (Before: validate knew only Qwen3-0.6B's heads, so Qwen3-8B on
    v6e 8x8 validated with tensor_parallel_size 64 and Llama-3.1-70B on v6e 16x16 with 256.)"""
    shape = models.MODELS[name]
    checked = 0
    for gen, topology in _catalog_slices():
        plan = plan_slice(gen, topology)
        if not plan.ray_reservable:
            continue
        laid = candidates.layout(plan, shape)
        item = SliceSpec.create(name="serve", generation=gen, topology=topology, zone=generation(gen).zones[0])
        for kwargs, expect in ((laid.engine_kwargs, bool(laid.servable)),
                               ({}, bool(laid.servable) and not laid.engine_kwargs)):
            try:
                work = WorkloadSpec(name="llm", kind=kinds.kind("serve"), slice=item, model=shape.hf_id,
                                    engine_kwargs=kwargs or None, hf_token_secret=HF_TOKEN)
            except InvalidInputs as exc:
                assert not expect, (gen, topology, kwargs, [str(p) for p in exc.problems])
                continue
            assert expect, (gen, topology, kwargs, laid)
            assert serving.llm_config(work)["engine_kwargs"]["tensor_parallel_size"] == laid.tensor_parallel
            checked += 1
    assert checked


@pytest.mark.parametrize(("hf_id", "gen", "topology", "kwargs", "says"), [
    # 32 heads, 64 JAX devices: vLLM would refuse TP 64 when the engine starts
    ("Qwen/Qwen3-8B", "v6e", "8x8", None, "'Qwen/Qwen3-8B' has 32 attention heads, which tensor_parallel_size 64"),
    ("meta-llama/Llama-3.1-70B-Instruct", "v6e", "16x16", None, "has 64 attention heads, which tensor_parallel_size "
     "256"),
    # Qwen3-0.6B has 28 layers: 64 one-host stages would leave stages with none
    ("Qwen/Qwen3-0.6B", "v6e", "16x16", {"pipeline_parallel_size": 64}, "64 is more pipeline stages than the 28 "
     "layers of Qwen/Qwen3-0.6B"),
])
def test_validate_checks_every_built_in_models_heads_and_layers(hf_id: str, gen: str, topology: str,
                                                               kwargs: dict[str, Any] | None, says: str) -> None:
    item = SliceSpec.create(name="serve", generation=gen, topology=topology, zone=generation(gen).zones[0])
    with pytest.raises(InvalidInputs) as info:
        WorkloadSpec(name="llm", kind=kinds.kind("serve"), slice=item, model=hf_id, engine_kwargs=kwargs)
    assert any(says in str(p) for p in info.value.problems), [str(p) for p in info.value.problems]


def test_llama_70b_on_v6e_16x16_validates_with_the_layout_plan_names() -> None:
    """plan: TP 4 x PP 64 (64 heads, 64 hosts of 4 chips, 80 layers); the builder emits TP 4."""
    plan = plan_slice("v6e", "16x16")
    laid = candidates.layout(plan, models.MODELS["llama-3.1-70b"])
    assert (laid.servable, laid.tensor_parallel, laid.engine_kwargs) == (True, 4, {"pipeline_parallel_size": 64})
    item = SliceSpec.create(name="serve", generation="v6e", topology="16x16", zone=generation("v6e").zones[0])
    work = WorkloadSpec(name="llm", kind=kinds.kind("serve"), slice=item, model="meta-llama/Llama-3.1-70B-Instruct",
                        engine_kwargs=laid.engine_kwargs, hf_token_secret=HF_TOKEN)
    assert serving.llm_config(work)["engine_kwargs"]["tensor_parallel_size"] == 4


NOTHING_FITS = [
    # (argv, field, what helps): issue 28 item 14, an impossible request is invalid input (exit 2), not exit 0
    (["--model", "llama-3.1-405b", "--context", "131072", "--batch", "100000"], "--model", "a shorter --context"),
    (["--model", "llama-3.1-405b", "--mode", "train", "--context", "131072", "--batch", "100000", "--remat", "off"],
     "--model", "--remat full, a bf16 --optimizer-dtype"),
    (["--model", "llama-3.1-70b", "--batch", "1000000", "--context", "131072"], "--model", "a smaller --batch"),
]


@pytest.mark.parametrize(("argv", "field", "helps"), NOTHING_FITS, ids=[" ".join(c[0]) for c in NOTHING_FITS])
def test_no_slice_fits_exits_2_saying_what_would_help(capsys: pytest.CaptureFixture[str], tmp_path: Path,
                                                      argv: list[str], field: str, helps: str) -> None:
    for extra in ([], ["--json"], ["--plot", str(tmp_path / "p.png")]):
        code, out, err = run_cli(capsys, "plan", *argv, *extra)
        assert (code, out) == (2, ""), (extra, out, err)
        assert len(err.splitlines()) == 1 and err.startswith(f"error: {field}: needs "), err
        assert "more than any slice of the catalog holds" in err and helps in err and "Traceback" not in err
    assert not (tmp_path / "p.png").exists()


REGION_PRICES = [
    # (region, generation, on-demand, spot per chip-hour): issue 28 item 14, plan prices the config's region
    ("us-east5", "v6e", 2.70, 1.215),  # spot 2.2x us-central1's
    ("europe-west4", "v6e", 2.97, 1.03748),
    ("us-east5", "v5p", 4.20, 1.68),
    ("asia-east1", "v5e", 1.38948, 0.55579),
    ("asia-east1", "v6e", None, None),  # not offered there: n/p, never guessed
    ("us-central1", "v6e", 2.70, 0.54421),
]


@pytest.mark.parametrize(("region", "gen", "on_demand", "spot"), REGION_PRICES,
                         ids=[f"{c[0]}-{c[1]}" for c in REGION_PRICES])
def test_region_prices_that_region(capsys: pytest.CaptureFixture[str], region: str, gen: str,
                                   on_demand: float | None, spot: float | None) -> None:
    data = plan_json(capsys, "--model", "llama-3.1-8b", "--region", region, "--all")
    assert data["prices"]["region"] == region
    assert data["prices"]["per_chip_hour"][gen] == {"on_demand": on_demand, "spot": spot, "flex_start": None}
    rows = [c for c in data["candidates"] if c["generation"] == gen]
    assert rows and all(c["price_per_hour"]["on_demand"] == (None if on_demand is None else
                                                             round(on_demand * c["chips"], 4)) for c in rows)


def test_us_central1_regional_rows_are_the_default_tables() -> None:
    from raytpu.sizing import prices

    default, central = prices.default_table(), prices.regional_table("us-central1")
    assert all(default.per_chip_hour[g] == central.per_chip_hour[g] for g in ("v5e", "v5p", "v6e", "tpu7x"))


@pytest.mark.parametrize(("argv", "expected"), [
    (["--region", "us-east9"], "error: --region: 'us-east9' has no recorded TPU prices; valid: one of asia-east1, "),
    (["--region", "us-east5", "--prices", "p.json"], "error: --region: 'us-east5' is not allowed with --prices"),
])
def test_a_region_without_prices_exits_2_listing_the_regions(capsys: pytest.CaptureFixture[str], argv: list[str],
                                                             expected: str) -> None:
    code, out, err = run_cli(capsys, "plan", "--model", "llama-3.1-8b", *argv)
    assert (code, out) == (2, "") and err.startswith(expected), err
    assert "us-east5" in err and "Traceback" not in err


# ------------------------------------------------------------------------------------------- preemption budget


def test_train_states_whether_a_just_in_time_checkpoint_fits_the_notice(capsys: pytest.CaptureFixture[str]) -> None:
    """Issue 30 item 3. Checkpoint = weights + optimizer state as ``train_need`` counts them: Llama 3.1 8B, fp32
    weights and AdamW's two fp32 moments, 8,030,261,248 x 12 bytes = 89.745 GiB. At 4 GB/s per host, every host its
    shard: 2 hosts write 96.36e9 / 8e9 = 12.05 s, over the 10 s window (GKE's 15 s non-system share of the 30 s spot
    notice less Ray's 5 s stop: https://cloud.google.com/kubernetes-engine/docs/how-to/preemptible-vms), so every
    12.05 / 0.05 = 241 s (ceil), losing at most 241 + 12.05 = 254 s (ceil); 4 hosts write 6.02 s: fits."""
    data = plan_json(capsys, "--model", "llama-3.1-8b", "--mode", "train", "--write-gb-s", "4")
    budget = data["preemption"]
    assert budget["checkpoint_gib"] == pytest.approx(89.745, abs=0.001)
    assert budget["write_gb_s_per_host"] == 4 and budget["write_rate"] == "given"
    assert budget["notice_window_s"] == 10 and budget["notice_s"] == 30 and budget["pod_grace_s"] == 15
    by = {(s["generation"], s["topology"]): s for s in budget["slices"]}
    assert by["v4", "2x2x2"] == {"generation": "v4", "topology": "2x2x2", "hosts": 2, "host_write_gib": 44.873,
                                  "write_s": 12.05, "fits_notice": False, "interval_s": 241, "max_loss_s": 254}
    assert by["v4", "2x2x4"]["fits_notice"] is True and by["v4", "2x2x4"]["interval_s"] is None
    assert {(c["generation"], c["topology"]) for c in data["candidates"]} == set(by)


def test_the_write_window_is_the_drain_less_the_poll_the_step_in_flight_and_the_report_barrier(
        capsys: pytest.CaptureFixture[str]) -> None:
    """Issue 40 item 4. The 10 s drain of GKE's 30 s notice less Ray Train's 1 s poll (the kit's
    RAY_TRAIN_PREEMPTION_POLL_INTERVAL_S), the assumed 1 s step in flight and the assumed 1 s report barrier leaves
    7 s: v4 2x2x4 (4 hosts, 96.36e9 / 4 bytes each at 4 GB/s = 6.02 s) fits; with a 2 s step, 6 s left, it does
    not. A spot slice's 120 s notice gives pods 105 s and Ray 100 s: 95 s with a 3 s step."""
    budget = plan_json(capsys, "--model", "llama-3.1-8b", "--mode", "train", "--write-gb-s", "4")["preemption"]
    assert (budget["poll_s"], budget["step_s"], budget["step"], budget["report_barrier_s"]) == (1.0, 1.0, "assumed",
                                                                                               1.0)
    assert budget["write_window_s"] == 7 and budget["checkpoint_writers"] == "all"
    by = {(s["generation"], s["topology"]): s for s in budget["slices"]}
    assert by["v4", "2x2x4"]["write_s"] == 6.02 and by["v4", "2x2x4"]["fits_notice"] is True
    slow = plan_json(capsys, "--model", "llama-3.1-8b", "--mode", "train", "--write-gb-s", "4", "--step-s", "2")
    assert slow["preemption"]["step"] == "given" and slow["preemption"]["write_window_s"] == 6
    slow_by = {(s["generation"], s["topology"]): s["fits_notice"] for s in slow["preemption"]["slices"]}
    assert slow_by["v4", "2x2x2"] is False and slow_by["v4", "2x2x4"] is False
    long = plan_json(capsys, "--model", "llama-3.1-8b", "--mode", "train", "--write-gb-s", "4", "--notice-s",
                     "120", "--step-s", "3")["preemption"]
    assert (long["notice_s"], long["pod_grace_s"], long["notice_window_s"], long["write_window_s"]) == (120, 105,
                                                                                                      100, 95)
    assert all(s["fits_notice"] for s in long["slices"])


def test_one_writer_writes_the_whole_checkpoint(capsys: pytest.CaptureFixture[str]) -> None:
    """The kit's own trainer writes the whole state from rank 0 (workloads/train.py): with ``--checkpoint-writers one``
    the busiest host writes all 89.745 GiB whatever the hosts, 96.36e9 / 4e9 = 24.09 s on every slice."""
    budget = plan_json(capsys, "--model", "llama-3.1-8b", "--mode", "train", "--write-gb-s", "4",
                       "--checkpoint-writers", "one")["preemption"]
    assert budget["checkpoint_writers"] == "one"
    assert {(s["host_write_gib"], s["write_s"]) for s in budget["slices"]} == {(89.745, 24.09)}
    code, out, _ = run_cli(capsys, "plan", "--model", "llama-3.1-8b", "--mode", "train", "--checkpoint-writers",
                           "one", "--notice-s", "120")
    assert code == 0 and "one host all of it (--checkpoint-writers one)" in out
    assert "window 100 s (GKE's 105 s pod share of the 120 s notice" in out and "report barrier = 97 s" in out


def test_the_write_rate_is_labelled_assumed_unless_given(capsys: pytest.CaptureFixture[str]) -> None:
    """Without ``--write-gb-s`` the rate is the kit's stated assumption (1 GB/s per host), said so in the JSON and the
    text; the existing keys keep their names (the CLI contract adds, never renames)."""
    data = plan_json(capsys, "--model", "llama-3.1-8b", "--mode", "train")
    assert data["preemption"]["write_rate"] == "assumed" and data["preemption"]["write_gb_s_per_host"] == 1.0
    assert {"model", "mode", "need", "minimal", "cheapest", "candidates"} <= data.keys()
    code, out, _ = run_cli(capsys, "plan", "--model", "llama-3.1-8b", "--mode", "train")
    assert code == 0
    assert "preemption: a just-in-time checkpoint (weights + optimizer state) is 89.7 GiB" in out
    assert "an assumed 1 GB/s per host (not measured; --write-gb-s sets yours)" in out
    assert "checkpoint every" in out or "fits the notice" in out


def test_serving_has_no_preemption_budget(capsys: pytest.CaptureFixture[str]) -> None:
    """A served model writes no checkpoint: the section is train-only."""
    assert "preemption" not in plan_json(capsys, "--model", "llama-3.1-8b")


@pytest.mark.parametrize(("argv", "expected"), [
    (["--mode", "train", "--write-gb-s", "0"], "--write-gb-s: 0.0 is out of range"),
    (["--mode", "train", "--write-gb-s", "-3"], "--write-gb-s: -3.0 is out of range"),
    (["--mode", "train", "--write-gb-s", "nan"], "--write-gb-s: nan is out of range"),
    (["--mode", "train", "--write-gb-s", "inf"], "--write-gb-s: inf is out of range"),
    (["--write-gb-s", "2"], "--write-gb-s: 2.0 is not allowed with --mode serve"),
    (["--mode", "train", "--notice-s", "60"], "--notice-s: 60 is not allowed (GKE's node shutdown window"),
    (["--mode", "train", "--notice-s", "0"], "--notice-s: 0 is not allowed"),
    (["--notice-s", "120"], "--notice-s: 120 is not allowed with --mode serve"),
    (["--mode", "train", "--step-s", "0"], "--step-s: 0.0 is out of range"),
    (["--mode", "train", "--step-s", "inf"], "--step-s: inf is out of range"),
    (["--step-s", "2"], "--step-s: 2.0 is not allowed with --mode serve"),
    (["--mode", "train", "--checkpoint-writers", "rank0"], "--checkpoint-writers: 'rank0' is not allowed"),
    (["--checkpoint-writers", "one"], "--checkpoint-writers: 'one' is not allowed with --mode serve"),
])
def test_a_bad_write_rate_exits_2_naming_the_flag(capsys: pytest.CaptureFixture[str], argv: list[str],
                                                  expected: str) -> None:
    code, out, err = run_cli(capsys, "plan", "--model", "llama-3.1-8b", *argv)
    assert code == 2 and out == "" and "Traceback" not in err
    assert err.startswith("error: ") and expected in err and "; valid: " in err, err


# ------------------------------------------------------------------------------------------- the host's disk


@pytest.mark.parametrize(("argv", "weights_gib", "disk_size_gib"), [
    (("--model", "llama-3.3-70b"), 131.4, 290),  # 142Gi + the GCS FUSE sidecar's 5Gi + 2 GiB margin; 280 holds 144.3
    (("--model", "llama-3.3-70b", "--dtype", "fp8"), 65.7, 180),
    (("--model", "qwen3-0.6b"), 1.1, 100),
    (("--params", "1e14"), 186264.5, None),                     # no disk GKE offers holds it
])
def test_serve_says_the_boot_disk_that_holds_the_weights_each_host_downloads(
        capsys: pytest.CaptureFixture[str], argv: tuple[str, ...], weights_gib: float,
        disk_size_gib: int | None) -> None:
    """Issue 40 item 1: the weights in the plan's dtype + 10 GiB for Ray's files against GKE's allocatable ephemeral
    storage (raytpu.core.specs.serving.node_disk); the same figure a config's slice gets when it leaves disk_size_gib
    out."""
    data = plan_json(capsys, *argv)
    disk = data["disk"]
    assert disk["weights_gib"] == pytest.approx(weights_gib, abs=0.05)
    assert disk["need_gib"] == pytest.approx(weights_gib + 10, abs=0.05)
    assert disk["sidecar_gib"] == 5  # Source: gcs-fuse-csi-driver cmd/webhook/main.go sidecar-ephemeral-storage-request
    assert disk["disk_size_gib"] == disk_size_gib
    assert "disk" not in plan_json(capsys, *argv[:2], "--mode", "train")
