"""`posttrain make-model tiny OUT_DIR`: build a small random-init Qwen2 model offline.

The kind of model is a sub-command (only `tiny` today) so later kinds get their own options.
"""

from __future__ import annotations

import argparse


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "make-model",
        help="Build a small random-init model + tokenizer offline (for tests, examples, benchmarks).",
        description="Build a small, randomly initialised Hugging Face model fully offline.",
    )
    kinds = parser.add_subparsers(dest="kind", metavar="KIND")
    kinds.required = True
    # Defaults are repeated as literals (not imported from posttrain.models.tiny) so that
    # `posttrain --help` does not pay for importing torch and transformers.
    p = kinds.add_parser(
        "tiny",
        help="Qwen2 causal LM with a character-level ChatML tokenizer (~0.67M parameters by default).",
        description="Qwen2 causal LM with a character-level ChatML tokenizer, saved with save_pretrained. "
        "Same arguments and seed give a bitwise-identical model.safetensors.",
    )
    p.add_argument("out_dir", metavar="OUT_DIR", help="Directory to write (created if missing).")
    p.add_argument("--layers", type=int, default=3, help="Decoder layers (default: %(default)s).")
    p.add_argument("--hidden", type=int, default=128, help="Hidden size (default: %(default)s).")
    p.add_argument("--heads", type=int, default=4, help="Attention heads (default: %(default)s).")
    p.add_argument("--kv-heads", type=int, default=None, help="Key/value heads for GQA (default: --heads).")
    p.add_argument("--intermediate", type=int, default=None, help="MLP size (default: 3 x --hidden).")
    p.add_argument("--vocab", type=int, default=None,
                   help="Vocabulary size; above the 100 characters+specials it pads with filler tokens.")
    p.add_argument("--max-position", type=int, default=512, help="Longest sequence in tokens (default: %(default)s).")
    p.add_argument("--tie-embeddings", action="store_true", help="Share the input embedding and the LM head.")
    p.add_argument("--seed", type=int, default=0, help="Initialisation seed (default: %(default)s).")
    p.set_defaults(func=_run_tiny)


def _run_tiny(args: argparse.Namespace) -> int:
    from safetensors import safe_open

    from posttrain.models.tiny import make_tiny_model

    out = make_tiny_model(
        args.out_dir, layers=args.layers, hidden=args.hidden, heads=args.heads, kv_heads=args.kv_heads,
        intermediate=args.intermediate, vocab_size=args.vocab, max_position=args.max_position,
        tie_embeddings=args.tie_embeddings, seed=args.seed,
    )
    with safe_open(out / "model.safetensors", framework="pt") as weights:
        n_params = sum(_numel(weights.get_slice(name).get_shape()) for name in weights.keys())
    print(f"wrote a tiny Qwen2 model ({n_params:,} parameters) and its tokenizer to {out}")
    return 0


def _numel(shape: list[int]) -> int:
    n = 1
    for dim in shape:
        n *= dim
    return n
