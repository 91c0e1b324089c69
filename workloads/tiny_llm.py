"""A tiny random-weight Llama with a real tokenizer, generated offline, for the local serve tier.

vLLM needs a model directory and tests may not download one: :func:`ensure` builds it deterministically from this
file alone and caches it under a fingerprint of its inputs (how: docs/FACTS.md#local-tiny-llm).
``python -m raytpu.workloads.tiny_llm [--cache-dir D]`` prints ``path: ...`` and ``model: ...``.
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import shutil
import struct
import tempfile
from pathlib import Path
from typing import Any, NamedTuple

from raytpu.core.common.errors import RaytpuError, RuntimeFailure, excerpt, invalid_value
from raytpu.workloads.support._entry import Parser, guarded

MODEL_NAME = "raytpu-tiny-llm"
"""The served model name (``model_id`` of the LLMConfig, what ``/v1/models`` lists)."""

DEFAULT_CACHE_DIR = Path("~/.cache/raytpu/tiny-llm")
ENV_CACHE_DIR = "RAYTPU_TINY_LLM_DIR"
SEED = 20260717
VOCAB_TARGET = 640
"""BPE vocabulary the trainer aims at (bytes + special tokens + merges; the corpus may allow fewer)."""

DIMS: dict[str, int] = {
    "hidden_size": 128,
    "intermediate_size": 256,
    "num_hidden_layers": 2,
    "num_attention_heads": 2,
    "num_key_value_heads": 1,
    "head_dim": 64,
    "max_position_embeddings": 2048,
}
"""Llama shape: head_dim 64 is one vLLM's CPU attention supports; ~0.4 M parameters, < 1 MB of bf16."""

BOS, EOS, PAD = "<s>", "</s>", "<pad>"
ROLE_TOKENS = ("<|system|>", "<|user|>", "<|assistant|>")
SPECIAL_TOKENS = (PAD, BOS, EOS, *ROLE_TOKENS)

CHAT_TEMPLATE = (
    "{{ bos_token }}{% for message in messages %}"
    "{{ '<|' + message['role'] + '|>' }}\n{{ message['content'] }}{{ eos_token }}\n"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|assistant|>' }}\n{% endif %}"
)

CORPUS = """\
A TPU slice is a group of chips joined by a fast interconnect. Each host of a slice carries four chips,
or eight on a single-host machine, and every host must be present before a job can start. Ray reserves a
whole slice with one placement group: one bundle per host, pinned by the slice name label, so that a job
never lands on half of one slice and half of another. The head of the slice is worker zero; it carries a
resource that no other host has, and the reservation takes it first.

The model server runs on that slice. One replica holds the weights of one model, sharded over every chip
of the slice with tensor parallelism; a second replica needs a second slice. Requests arrive at the
OpenAI compatible endpoint: list the models, complete a prompt, chat with a list of messages, or stream
the answer token by token. Every answer reports how many tokens the prompt used and how many the model
wrote. When a replica dies, the controller starts a new one and the endpoint keeps answering.

Training works the same way. The trainer asks for one worker per host, each worker is a process that sees
the local chips, and the gradients are summed across all of them on every step. A checkpoint is written
to the bucket every few steps; when a host fails, the group restarts from the last checkpoint on a host
that replaced it, or on another slice that is free.

Numbers and names matter: v4, v5e, v5p, v6e and tpu7x; topologies such as 2x2, 2x4, 4x4, 4x8 and
2x2x4; 1, 2, 4, 8, 16, 32, 64, 128 and 256 chips. The quick brown fox jumps over the lazy dog. Pack my box
with five dozen liquor jugs! How vexingly quick daft zebras jump? "Hello," said the operator; 'hello'
said the cluster. Errors name the field, the problem and what would be valid: a bad key is exit code 2.
"""


class TinyModel(NamedTuple):
    """A generated model directory and the name it is served under."""

    path: Path
    name: str


def fingerprint() -> str:
    """Hash of every input of the generation (bumps the cache directory when any changes)."""
    inputs = json.dumps({"dims": DIMS, "seed": SEED, "vocab": VOCAB_TARGET, "special": SPECIAL_TOKENS,
                         "template": CHAT_TEMPLATE, "corpus": CORPUS, "format": 1}, sort_keys=True)
    return hashlib.sha256(inputs.encode()).hexdigest()[:12]


def cache_root(cache_dir: str | os.PathLike[str] | None = None) -> Path:
    """``cache_dir``, else ``$RAYTPU_TINY_LLM_DIR``, else ``~/.cache/raytpu/tiny-llm``."""
    chosen = cache_dir or os.environ.get(ENV_CACHE_DIR) or DEFAULT_CACHE_DIR
    return Path(chosen).expanduser().resolve()


def ensure(cache_dir: str | os.PathLike[str] | None = None) -> TinyModel:
    """The tiny model's directory under ``cache_dir`` (built now if missing) and its served name. A cache that cannot
    be written is one error line naming where it came from (:func:`_refused`), not a build elsewhere: the folder is
    handed to vLLM's replicas, which read it after this process ends, so it must last."""
    root = cache_root(cache_dir)
    target = root / f"{MODEL_NAME}-{fingerprint()}"
    if (target / "config.json").exists():
        return TinyModel(target, MODEL_NAME)
    try:
        root.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=".building-", dir=root))
    except OSError as exc:
        raise _refused(cache_dir, root, exc) from exc
    try:
        tmp.chmod(0o755)
        build(tmp)
        try:
            tmp.rename(target)
        except OSError:  # another process won the race: its copy is the same bytes
            if not (target / "config.json").exists():
                raise
    except OSError as exc:  # the disk filled up while it was written: nothing half-built is left
        raise _refused(cache_dir, root, exc) from exc
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return TinyModel(target, MODEL_NAME)


def _refused(cache_dir: object, root: Path, exc: OSError) -> RaytpuError:
    """The tiny model's cache ``root`` refused a write: RuntimeFailure (exit 1) for a full disk, else InvalidInput
    (exit 2) naming ``--cache-dir``, ``RAYTPU_TINY_LLM_DIR`` or ``HOME``, whichever chose it."""
    where = f"{excerpt(str(root), 120, tail=True)}: {exc.strerror or exc}"
    if exc.errno in (errno.ENOSPC, errno.EDQUOT):
        return RuntimeFailure(f"tiny_llm: cannot build the tiny model in its cache ({where})",
                              f"free space on that disk, or ${ENV_CACHE_DIR} naming a folder on another")
    field, value = (("--cache-dir", cache_dir) if cache_dir else (ENV_CACHE_DIR, os.environ[ENV_CACHE_DIR])
                    if os.environ.get(ENV_CACHE_DIR) else ("HOME", os.path.expanduser("~")))
    return invalid_value(field, str(value), f"cannot hold the tiny model's cache ({where})",
                         f"a folder you can write (made if missing; default {DEFAULT_CACHE_DIR})")


def build(directory: Path) -> None:
    """Writes tokenizer, config and weights into ``directory`` (which exists)."""
    vocab_size, ids = _write_tokenizer(directory)
    config = _config(vocab_size, ids)
    (directory / "config.json").write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")
    generation = {"bos_token_id": config["bos_token_id"], "eos_token_id": config["eos_token_id"],
                  "pad_token_id": config["pad_token_id"]}
    (directory / "generation_config.json").write_text(json.dumps(generation, indent=2, sort_keys=True) + "\n")
    _write_safetensors(directory / "model.safetensors", _weights(config))


def _write_tokenizer(directory: Path) -> tuple[int, dict[str, int]]:
    """Trains the byte-level BPE on CORPUS and saves it as a Hub tokenizer.

    Returns the model's vocab size (the tokenizer's, padded to a multiple of 64) and the special tokens' ids.
    """
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=VOCAB_TARGET, min_frequency=2, show_progress=False,
                                  special_tokens=list(SPECIAL_TOKENS),
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(CORPUS.splitlines(keepends=True), trainer=trainer)
    bos_id = tok.token_to_id(BOS)
    tok.post_processor = processors.TemplateProcessing(single=f"{BOS} $A", pair=f"{BOS} $A $B",
                                                       special_tokens=[(BOS, bos_id)])
    tok.save(str(directory / "tokenizer.json"))
    (directory / "tokenizer_config.json").write_text(json.dumps({
        "tokenizer_class": "PreTrainedTokenizerFast",
        "bos_token": BOS, "eos_token": EOS, "pad_token": PAD,
        "additional_special_tokens": list(ROLE_TOKENS),
        "add_bos_token": True, "add_eos_token": False,
        "model_max_length": DIMS["max_position_embeddings"],
        "clean_up_tokenization_spaces": False,
        "chat_template": CHAT_TEMPLATE,
    }, indent=2, sort_keys=True) + "\n")
    (directory / "special_tokens_map.json").write_text(json.dumps(
        {"bos_token": BOS, "eos_token": EOS, "pad_token": PAD, "additional_special_tokens": list(ROLE_TOKENS)},
        indent=2, sort_keys=True) + "\n")
    (directory / "chat_template.jinja").write_text(CHAT_TEMPLATE)
    ids = {name: tok.token_to_id(name) for name in SPECIAL_TOKENS}
    return -(-tok.get_vocab_size() // 64) * 64, ids


def _config(vocab_size: int, special: dict[str, int]) -> dict[str, Any]:
    return {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "vocab_size": vocab_size,
        **DIMS,
        "hidden_act": "silu",
        "rms_norm_eps": 1e-5,
        "rope_theta": 10000.0,
        "attention_bias": False,
        "mlp_bias": False,
        "tie_word_embeddings": True,
        "torch_dtype": "bfloat16",
        "bos_token_id": special[BOS],
        "eos_token_id": special[EOS],
        "pad_token_id": special[PAD],
        "initializer_range": 0.02,
    }


def _weights(config: dict[str, Any]) -> dict[str, Any]:
    """Seeded normal(0, 0.02) matrices and unit norms in Llama's parameter names (tied lm_head)."""
    import numpy as np

    rng = np.random.default_rng(SEED)
    h, inter = config["hidden_size"], config["intermediate_size"]
    q = config["num_attention_heads"] * config["head_dim"]
    kv = config["num_key_value_heads"] * config["head_dim"]

    def normal(*shape: int) -> Any:
        return (rng.standard_normal(shape, dtype=np.float32) * config["initializer_range"]).astype(np.float32)

    tensors: dict[str, Any] = {"model.embed_tokens.weight": normal(config["vocab_size"], h)}
    for i in range(config["num_hidden_layers"]):
        p = f"model.layers.{i}."
        tensors.update({
            p + "self_attn.q_proj.weight": normal(q, h),
            p + "self_attn.k_proj.weight": normal(kv, h),
            p + "self_attn.v_proj.weight": normal(kv, h),
            p + "self_attn.o_proj.weight": normal(h, q),
            p + "mlp.gate_proj.weight": normal(inter, h),
            p + "mlp.up_proj.weight": normal(inter, h),
            p + "mlp.down_proj.weight": normal(h, inter),
            p + "input_layernorm.weight": np.ones(h, dtype=np.float32),
            p + "post_attention_layernorm.weight": np.ones(h, dtype=np.float32),
        })
    tensors["model.norm.weight"] = np.ones(h, dtype=np.float32)
    return tensors


def _write_safetensors(path: Path, tensors: dict[str, Any]) -> None:
    """The safetensors format (8-byte header length, JSON header, raw data), float32 rounded to bf16."""
    import numpy as np

    header: dict[str, Any] = {"__metadata__": {"format": "pt"}}
    blobs = []
    offset = 0
    for name in sorted(tensors):
        bits = tensors[name].astype(np.float32).view(np.uint32)
        bf16 = ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16).astype("<u2")  # round to nearest even
        data = bf16.tobytes()
        header[name] = {"dtype": "BF16", "shape": list(tensors[name].shape),
                        "data_offsets": [offset, offset + len(data)]}
        blobs.append(data)
        offset += len(data)
    raw = json.dumps(header, separators=(",", ":"), sort_keys=True).encode()
    raw += b" " * (-len(raw) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(raw)))
        f.write(raw)
        for data in blobs:
            f.write(data)


def main(argv: list[str] | None = None) -> int:
    parser = Parser(prog="python -m raytpu.workloads.tiny_llm", description=__doc__.split("\n")[0])
    parser.add_argument("--cache-dir", default=None, help=f"default ${ENV_CACHE_DIR} or {DEFAULT_CACHE_DIR}")
    args = parser.parse_args(argv)

    def body() -> int:
        model = ensure(args.cache_dir)
        print(f"path: {model.path}")
        print(f"model: {model.name}")
        return 0

    return guarded(body)


if __name__ == "__main__":
    raise SystemExit(main())
