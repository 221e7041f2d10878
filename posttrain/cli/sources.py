"""Where a command's config comes from: ``[--dialect D] [--config-path DIR --config-name NAME] [CONFIG] [KEY=VALUE ...]``.

Shared by ``posttrain train``, ``config show`` and ``config plan`` (and anything that takes a config
the same way): a posttrain YAML with dotted overrides, or a verl / ROLL / Trinity-RFT config with that
framework's Hydra-style overrides (posttrain.config.dialects.hydra); a verl launch line needs no file.
"""

from __future__ import annotations

import argparse
from pathlib import Path


def add_dialect_options(parser: argparse.ArgumentParser) -> None:
    """``--dialect`` and Hydra's ``--config-path/--config-name``: the words of a verl/ROLL launch line."""
    parser.add_argument("--dialect", choices=["verl", "roll", "trinity"], default=None,
                        help="read CONFIG and the overrides as that framework's (Hydra style: key=v, +key=v, ~key); "
                        "verl needs no CONFIG: its own trainer defaults are the base")
    parser.add_argument("--config-path", "-cp", dest="config_path", default=None, metavar="DIR",
                        help="Hydra: the directory of --config-name (relative to the current directory)")
    parser.add_argument("--config-name", "-cn", dest="config_name", default=None, metavar="NAME",
                        help="Hydra: the config file in --config-path (.yaml may be left out)")


def split_args(args: list[str]) -> tuple[str | None, list[str]]:
    """``[CONFIG] [KEY=VALUE ...]``: the first argument is the file unless it is an override
    (``key=value``, or Hydra's ``~key``)."""
    if args and "=" not in args[0] and not args[0].startswith("~"):
        return args[0], list(args[1:])
    return None, list(args)


def config_source(args: argparse.Namespace) -> tuple[str | None, list[str], str | None]:
    """``(config file, overrides, dialect)`` from the command line, Hydra's flags included."""
    from posttrain.errors import ConfigError

    path, overrides = split_args(args.args)
    dialect = getattr(args, "dialect", None)
    name, folder = getattr(args, "config_name", None), getattr(args, "config_path", None)
    if name is not None:
        if path is not None:
            raise ConfigError(f"give the config either as {path} or as --config-name {name}, not both")
        base = Path(folder or ".") / name
        path = str(base if base.suffix in (".yaml", ".yml") else base.with_suffix(".yaml"))
        if dialect is None:
            dialect = "verl"  # Hydra's flags: verl's launcher (ROLL's scripts take their own)
        # ppo_megatron_trainer with no such file here: verl's Megatron tree, which the verl dialect
        # recognises by the name (posttrain.config.dialects.verl_launch.builtin)
        if dialect == "verl" and Path(path).stem == "ppo_trainer" and not Path(path).is_file():
            path = None  # verl's own trainer config, which the verl dialect starts from anyway
    elif folder is not None:
        raise ConfigError("--config-path names the directory of --config-name; give --config-name too")
    return path, overrides, dialect
