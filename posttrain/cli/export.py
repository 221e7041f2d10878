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
            "(safetensors), config and tokenizer, loadable with from_pretrained; no training state. A LoRA run "
            "exports its adapter (peft's format), or with --merge the model with the adapter merged in."
        ),
    )
    p.add_argument("--merge", action="store_true", help="a LoRA adapter merged into its base model (a whole model) instead of the adapter")
    p.add_argument("checkpoint", help="checkpoint, checkpoints directory or run directory")
    p.add_argument("out", help="output directory (new or empty)")
    p.set_defaults(func=_run)


def _run(args: argparse.Namespace) -> int:
    from posttrain.checkpoint import export_model, resolve_model_dir

    source = resolve_model_dir(args.checkpoint)
    out = export_model(source, args.out, merge=args.merge)
    kind = "LoRA adapter" if (out / "adapter_config.json").is_file() else "model"
    print(f"exported {source} -> {out} ({kind})")
    return 0
