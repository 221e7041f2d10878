"""`posttrain train CONFIG [key=value ...]`: run an experiment (all its stages)."""

from __future__ import annotations

import argparse


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "train",
        help="run an experiment from a YAML config",
        description="Run every stage of CONFIG (SFT, RL, DPO), each from the previous stage's final policy.",
    )
    p.add_argument("config", help="YAML config file")
    p.add_argument("overrides", nargs="*", help="dotted overrides, e.g. actor.optim.lr=1e-5")
    p.set_defaults(func=_run)


def _run(args: argparse.Namespace) -> int:
    from posttrain.config import load_config
    from posttrain.trainer.run import run, run_directory

    cfg = load_config(args.config, args.overrides)
    results = run(cfg)
    print(f"run directory: {run_directory(cfg)}")
    for r in results:
        print(f"final model: {r.final_model}")
    return 0
