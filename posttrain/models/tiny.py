"""Tiny, randomly initialised Qwen2 causal LMs with a character tokenizer, built fully offline.

Every test and CPU example trains one of these instead of downloading a checkpoint. The default size
is the "robust recipe" of the shared notes (hidden 128, MLP 384, 3 layers, 4 heads, ~0.67M
parameters), which learns the sort task with GRPO on one CPU core in about 90 s.

The output directory is an ordinary Hugging Face model directory (config.json, generation_config.json,
model.safetensors, tokenizer files), so everything downstream loads it with `AutoModelForCausalLM` /
`AutoTokenizer` exactly as it would load a real checkpoint. Building is deterministic: the same
arguments give a bitwise-identical model.safetensors.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch
from transformers import GenerationConfig, Qwen2Config, Qwen2ForCausalLM

from posttrain.errors import ConfigError
from posttrain.models.quiet import quiet_transformers
from posttrain.models.tokenizer import (
    CHATML_TEMPLATE,
    IM_END,
    PAD_TOKEN,
    build_tiny_tokenizer,
)

# Defaults of `posttrain make-model tiny`; the CLI reads them from here.
DEFAULT_LAYERS = 3
DEFAULT_HIDDEN = 128
DEFAULT_HEADS = 4
DEFAULT_MAX_POSITION = 512

# Real architectures' shapes (their config.json values) for throughput and memory tests: random
# weights and the character tokenizer padded with filler tokens to the real vocabulary size, since
# no weights can be downloaded. `make-model tiny OUT --shape qwen2.5-0.5b`.
SHAPES: dict[str, dict] = {
    "qwen2.5-0.5b": dict(layers=24, hidden=896, heads=14, kv_heads=2, intermediate=4864, vocab_size=151936,
                         max_position=32768, tie_embeddings=True),
    "qwen2.5-1.5b": dict(layers=28, hidden=1536, heads=12, kv_heads=2, intermediate=8960, vocab_size=151936,
                         max_position=32768, tie_embeddings=True),
    "qwen2.5-3b": dict(layers=36, hidden=2048, heads=16, kv_heads=2, intermediate=11008, vocab_size=151936,
                       max_position=32768, tie_embeddings=True),
    "qwen2.5-7b": dict(layers=28, hidden=3584, heads=28, kv_heads=4, intermediate=18944, vocab_size=152064,
                       max_position=32768, tie_embeddings=False),
}

__all__ = ["SHAPES", "build_tiny_tokenizer", "make_tiny_config", "make_tiny_model"]


def check_shape(layers: int, hidden: int, heads: int, kv_heads: int, intermediate: int, max_position: int) -> None:
    """Refuse sizes Qwen2 cannot build, with the flag to change (instead of a deep torch error)."""
    problems = []
    for name, value in (("layers", layers), ("hidden", hidden), ("heads", heads), ("kv-heads", kv_heads),
                        ("intermediate", intermediate), ("max-position", max_position)):
        if value < 1:
            problems.append(f"--{name} must be >= 1, got {value}")
    if not problems:
        if hidden % heads:
            problems.append(f"--hidden {hidden} must be divisible by --heads {heads}")
        elif (hidden // heads) % 2:
            problems.append(f"--hidden / --heads = {hidden // heads} must be even (rotary embeddings rotate pairs)")
        if heads % kv_heads:
            problems.append(f"--heads {heads} must be divisible by --kv-heads {kv_heads}")
    if problems:
        raise ConfigError(problems)


def make_tiny_config(
    *,
    layers: int = DEFAULT_LAYERS,
    hidden: int = DEFAULT_HIDDEN,
    heads: int = DEFAULT_HEADS,
    kv_heads: int | None = None,
    intermediate: int | None = None,
    vocab_size: int,
    max_position: int = DEFAULT_MAX_POSITION,
    tie_embeddings: bool = False,
) -> Qwen2Config:
    """The Qwen2 config of a tiny model; `intermediate` None means 3 x hidden, `kv_heads` None means heads."""
    kv_heads = heads if kv_heads is None else kv_heads
    intermediate = 3 * hidden if intermediate is None else intermediate
    check_shape(layers, hidden, heads, kv_heads, intermediate, max_position)
    tokenizer = build_tiny_tokenizer(vocab_size)  # cheap; gives the special-token ids
    return Qwen2Config(
        vocab_size=vocab_size,
        hidden_size=hidden,
        intermediate_size=intermediate,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        num_key_value_heads=kv_heads,
        max_position_embeddings=max_position,
        max_window_layers=layers,
        tie_word_embeddings=tie_embeddings,
        bos_token_id=tokenizer.convert_tokens_to_ids(PAD_TOKEN),
        eos_token_id=tokenizer.convert_tokens_to_ids(IM_END),
        pad_token_id=tokenizer.pad_token_id,
        dtype="float32",
    )


def make_tiny_model(
    out_dir: str | Path,
    *,
    layers: int = DEFAULT_LAYERS,
    hidden: int = DEFAULT_HIDDEN,
    heads: int = DEFAULT_HEADS,
    kv_heads: int | None = None,
    intermediate: int | None = None,
    vocab_size: int | None = None,
    max_position: int = DEFAULT_MAX_POSITION,
    tie_embeddings: bool = False,
    seed: int = 0,
    dtype: str = "fp32",
) -> Path:
    """Write a random-init tiny Qwen2 model and its tokenizer to `out_dir`; return the directory.

    `vocab_size` None uses the tokenizer's own size (100); a larger value pads the tokenizer with
    filler tokens so `len(tokenizer) == config.vocab_size` always holds. The global torch RNG is left
    untouched (initialisation runs under a forked RNG seeded with `seed`). `dtype` ("fp32" or "bf16")
    is the dtype the weights are saved in (initialised in fp32 either way).
    """
    if dtype not in ("fp32", "bf16"):
        raise ConfigError(f"--dtype must be fp32 or bf16, got {dtype!r}")
    tokenizer = build_tiny_tokenizer(vocab_size, model_max_length=max_position)
    config = make_tiny_config(
        layers=layers, hidden=hidden, heads=heads, kv_heads=kv_heads, intermediate=intermediate,
        vocab_size=len(tokenizer), max_position=max_position, tie_embeddings=tie_embeddings,
    )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = Qwen2ForCausalLM(config)
    if dtype == "bf16":
        model.to(torch.bfloat16)
        model.config.dtype = "bfloat16"
    model.generation_config = GenerationConfig(
        bos_token_id=config.bos_token_id,
        # Chat generation ends at <|im_end|>; <|endoftext|> also stops a model that emits it.
        eos_token_id=[config.eos_token_id, config.pad_token_id],
        pad_token_id=config.pad_token_id,
    )
    out = Path(out_dir).expanduser()
    out.mkdir(parents=True, exist_ok=True)
    with quiet_transformers():
        model.save_pretrained(out)
        tokenizer.save_pretrained(out)
    _write_portable_tokenizer_config(out)
    return out


def _write_portable_tokenizer_config(out: Path) -> None:
    """Make tokenizer_config.json readable by transformers 4.x as well as 5.x.

    transformers 5 writes the class as "TokenizersBackend" and the template to chat_template.jinja;
    4.x knows neither, so the config also names the (aliased) fast class and embeds the template.
    """
    path = out / "tokenizer_config.json"
    data = json.loads(path.read_text())
    data["tokenizer_class"] = "PreTrainedTokenizerFast"
    data["chat_template"] = CHATML_TEMPLATE
    path.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")
