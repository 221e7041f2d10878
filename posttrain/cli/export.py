"""`posttrain export CKPT OUT`: a standalone Hugging Face model directory from a checkpoint."""

from __future__ import annotations

import argparse


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "export",
        help="write a checkpoint's policy as a Hugging Face model directory",
        description=(
            "Copy the policy of CKPT (a global_step_N checkpoint or its actor/ directory, a checkpoints/ "
            "directory (its latest complete checkpoint), or a stage run directory) into OUT: weights "
            "(safetensors), config and tokenizer, loadable with from_pretrained; no training state."
        ),
    )
    p.add_argument("checkpoint", help="checkpoint, checkpoints directory or run directory")
    p.add_argument("out", help="output directory (new or empty)")
    p.set_defaults(func=_run)


def _run(args: argparse.Namespace) -> int:
    from posttrain.checkpoint import export_model, resolve_model_dir

    source = resolve_model_dir(args.checkpoint)
    out = export_model(source, args.out)
    print(f"exported {source} -> {out}")
    return 0
