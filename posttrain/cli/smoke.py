"""`posttrain smoke CONFIG [KEY=VALUE ...]`: try a real config here, in two RL steps, before the cluster.

Also `posttrain smoke --dialect verl KEY=VALUE ...` (a verl launch line) and ROLL / Trinity-RFT files.
Only what this machine cannot provide is substituted (posttrain.trainer.smoke): a tiny random model
of the same family, the HF engine, one CPU process, the first rows of the data (or synthetic rows with
its columns), tiny batches and lengths; a bench of a hosted model gets the tiny model behind a local
endpoint in its place (posttrain.trainer.smoke_endpoint). Each substitution is printed, then the run goes as
`posttrain train` runs it. A key refused for another reason than the machine fails the smoke run as
it fails `posttrain train`.
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path


def register(subparsers: argparse._SubParsersAction) -> None:
    from posttrain.cli.sources import add_dialect_options

    parser = subparsers.add_parser("smoke", help="run 2 RL steps of a real config here, substituting what this machine lacks",
                                   description=__doc__.split("\n\n")[0])
    parser.add_argument("args", nargs="*", metavar="CONFIG|KEY=VALUE", help="the config file, then its overrides (with --dialect verl the file may be left out)")
    parser.add_argument("--workdir", default=None, metavar="DIR", help="where the tiny model, the data and the run go (default: a new temporary folder)")
    add_dialect_options(parser)
    parser.set_defaults(func=_run)


def _run(args: argparse.Namespace) -> int:
    from posttrain.cli import main
    from posttrain.cli.sources import config_source
    from posttrain.errors import ConfigError
    from posttrain.trainer.smoke import STEPS, smoke_config
    from posttrain.trainer.smoke_endpoint import stand_in_endpoint

    path, overrides, dialect = config_source(args)
    if path is None and dialect is None:
        raise ConfigError("posttrain smoke: give a config file (or --dialect verl and a verl launch line's KEY=VALUE words)")
    workdir = Path(args.workdir) if args.workdir else Path(tempfile.mkdtemp(prefix="posttrain-smoke-"))
    config, lines = smoke_config(path, overrides, dialect, workdir)
    print(f"smoke: {path or 'the launch line'} with what this machine lacks substituted ({len(lines)} substitutions):")
    for line in lines:
        print(f"  {line}")
    print(f"smoke: config {config}")
    with stand_in_endpoint(config) as url:  # a bench of a hosted model: the tiny model answers in its place
        if url is not None:
            print(f"smoke: the stand-in endpoint is {url}")
        rc = main(["train", str(config)])
    if rc == 0:
        did = "benched the stand-in endpoint" if url is not None else f"ran {STEPS} steps"
        print(f"smoke: {path or 'the launch line'} {did} here; the run is in {workdir / 'run'}")
    return rc
