"""The `posttrain` command line.

Each subcommand lives in its own module exposing ``register(subparsers)``, which adds its parser
and sets ``func`` to a callable taking the parsed args and returning an exit status. A `UserError`
becomes one message on stderr and exit status 2; anything else is a bug and keeps its traceback.
"""

from __future__ import annotations

import argparse
import importlib
import sys

from posttrain.runtime import configure_process

# Before anything imports torch or starts a thread: sleeping OpenMP threads, one malloc arena (see
# posttrain.runtime). An explicit setting in the environment wins.
configure_process()

from posttrain import __version__  # noqa: E402
from posttrain.errors import UserError  # noqa: E402

# Subcommand modules, in the order `posttrain --help` lists them.
COMMAND_MODULES = [
    "posttrain.cli.make_model",
    "posttrain.cli.make_data",
    "posttrain.cli.make_env_data",
    "posttrain.cli.data_cmd",
    "posttrain.cli.config_cmd",
    "posttrain.cli.train",
    "posttrain.cli.eval_cmd",
    "posttrain.cli.smoke",
    "posttrain.cli.export",
    "posttrain.cli.report",
    "posttrain.cli.doctor",
    "posttrain.cli.studio",
    "posttrain.cli.serve",
]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="posttrain",
        description="Reinforcement-learning post-training of language models, from one YAML file.",
    )
    parser.add_argument("--version", action="version", version=f"posttrain {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    for name in COMMAND_MODULES:
        importlib.import_module(name).register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    if (sys.argv[1:] if argv is None else argv) == ["--version"]:
        # answered before the subcommands' modules import torch (seconds): `posttrain --version` is
        # how scripts check the install, and how the launcher tests start workers that only report
        print(f"posttrain {__version__}")
        return 0
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except UserError as err:
        print(f"posttrain: error: {err}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("posttrain: interrupted", file=sys.stderr)
        return 130
