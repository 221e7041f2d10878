"""`posttrain make-model tiny OUT_DIR`: build a small random-init Qwen2 model offline.

The kind of model is a sub-command with its own options: `tiny` (a Qwen2 text model) and `tiny-vl`
(a Qwen2-VL vision-language model, posttrain.models.tiny_vl).
"""

from __future__ import annotations

import argparse

# The names of posttrain.models.tiny.SHAPES, repeated so that `posttrain --help` imports no torch
# (tests/models compares the two).
_SHAPES = ("qwen2.5-0.5b", "qwen2.5-1.5b", "qwen2.5-3b", "qwen2.5-7b")


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
    p.add_argument("--shape", choices=_SHAPES, default=None,
                   help="A real architecture's dimensions (random weights, the character tokenizer padded to its "
                   "vocabulary) for throughput and memory tests; the flags below override single values.")
    p.add_argument("--layers", type=int, default=None, help="Decoder layers (default: 3).")
    p.add_argument("--hidden", type=int, default=None, help="Hidden size (default: 128).")
    p.add_argument("--heads", type=int, default=None, help="Attention heads (default: 4).")
    p.add_argument("--kv-heads", type=int, default=None, help="Key/value heads for GQA (default: --heads).")
    p.add_argument("--intermediate", type=int, default=None, help="MLP size (default: 3 x --hidden).")
    p.add_argument("--vocab", type=int, default=None,
                   help="Vocabulary size; above the 100 characters+specials it pads with filler tokens.")
    p.add_argument("--max-position", type=int, default=None, help="Longest sequence in tokens (default: 512).")
    p.add_argument("--tie-embeddings", action="store_true", default=None, help="Share the input embedding and the LM head.")
    p.add_argument("--dtype", choices=["fp32", "bf16"], default="fp32", help="Dtype of the saved weights (default: %(default)s).")
    p.add_argument("--seed", type=int, default=0, help="Initialisation seed (default: %(default)s).")
    p.set_defaults(func=_run_tiny)
    v = kinds.add_parser(
        "tiny-vl",
        help="Qwen2-VL vision-language model: tiny text model, one-block vision tower, the character tokenizer.",
        description="Random-init Qwen2-VL with the character tokenizer plus its vision tokens and a PIL image "
        "processor (4-pixel patches: a 16x16 image is 4 image tokens), saved with save_pretrained.",
    )
    v.add_argument("out_dir", metavar="OUT_DIR", help="Directory to write (created if missing).")
    v.add_argument("--layers", type=int, default=2, help="Text decoder layers (default: %(default)s).")
    v.add_argument("--hidden", type=int, default=64, help="Text hidden size (default: %(default)s).")
    v.add_argument("--heads", type=int, default=4, help="Text attention heads (default: %(default)s).")
    v.add_argument("--vision-depth", type=int, default=1, help="Vision tower blocks (default: %(default)s).")
    v.add_argument("--vision-dim", type=int, default=32, help="Vision tower width (default: %(default)s).")
    v.add_argument("--seed", type=int, default=0, help="Initialisation seed (default: %(default)s).")
    v.set_defaults(func=_run_tiny_vl)


def _run_tiny_vl(args: argparse.Namespace) -> int:
    from posttrain.models.tiny_vl import make_tiny_vl_model

    out = make_tiny_vl_model(args.out_dir, layers=args.layers, hidden=args.hidden, heads=args.heads,
                             vision_depth=args.vision_depth, vision_dim=args.vision_dim, seed=args.seed)
    print(f"wrote a random tiny Qwen2-VL model, its tokenizer and image processor to {out}")
    return 0


def _run_tiny(args: argparse.Namespace) -> int:
    from safetensors import safe_open

    from posttrain.models.tiny import SHAPES, make_tiny_model

    given = dict(layers=args.layers, hidden=args.hidden, heads=args.heads, kv_heads=args.kv_heads,
                 intermediate=args.intermediate, vocab_size=args.vocab, max_position=args.max_position,
                 tie_embeddings=args.tie_embeddings)
    shape = dict(SHAPES[args.shape]) if args.shape else {}
    shape.update({k: v for k, v in given.items() if v is not None})  # a flag overrides the shape's value
    out = make_tiny_model(args.out_dir, seed=args.seed, dtype=args.dtype, **shape)
    n_params = 0
    for path in sorted(out.glob("*.safetensors")):  # large shapes are saved in several files
        with safe_open(path, framework="pt") as weights:
            n_params += sum(_numel(weights.get_slice(name).get_shape()) for name in weights.keys())
    kind = f"{args.shape}-shaped" if args.shape else "tiny"
    print(f"wrote a random {kind} Qwen2 model ({n_params:,} parameters, {args.dtype}) and its tokenizer to {out}")
    return 0


def _numel(shape: list[int]) -> int:
    n = 1
    for dim in shape:
        n *= dim
    return n
