"""`posttrain eval [CONFIG] [KEY=VALUE ...] [--output FILE]`: score generated responses per data source.

CONFIG is a posttrain config (its `eval` section names the file and its columns, its `reward`
section the reward function) or verl's evaluation.yaml; ``--dialect verl`` reads the words of
``python3 -m verl.trainer.main_eval KEY=VALUE ...`` with verl's evaluation.yaml as the base
(posttrain.config.dialects.verl_eval). A verl trainer config, or a ROLL or Trinity-RFT one, is read
for its reward settings, as `posttrain train` reads it; eval.path=FILE then names the responses.
Prints one line per data source (verl's ``test_score/<data source>``); see posttrain.trainer.offline_eval.
"""

from __future__ import annotations

import argparse
from pathlib import Path


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "eval", help="score a file of generated responses per data source (verl's main_eval)",
        description="Score every response of a parquet or jsonl file (eval.path) with the configured reward "
                    "function and print the mean score of each data source. CONFIG: a posttrain config with an "
                    "`eval` section, or verl's evaluation.yaml (data.path, data.response_key, ...).",
    )
    p.add_argument("args", nargs="*", metavar="CONFIG|KEY=VALUE",
                   help="a YAML config, then overrides (eval.path=gen.parquet; verl's file: data.path=gen.parquet)")
    p.add_argument("--output", "-o", default=None, metavar="FILE", help="also write the table to FILE (.json or .csv)")
    from posttrain.cli.sources import add_dialect_options

    add_dialect_options(p)
    p.set_defaults(func=_run)


def _run(args: argparse.Namespace) -> int:
    from posttrain.errors import UserError

    if args.output is not None and Path(args.output).suffix not in (".json", ".csv"):
        raise UserError(f"--output {args.output}: write the table to a .json or .csv file")
    cfg = load_eval_config(args)
    from posttrain.trainer.offline_eval import evaluate_file, format_table, write_table

    result = evaluate_file(cfg)
    responses = sum(s.responses for s in result.sources)
    rows = sum(s.rows for s in result.sources)
    print(f"{result.path}: {rows} rows, {responses} responses")
    print(format_table(result), end="")
    if args.output is not None:
        print(f"table written to {write_table(result, args.output)}")
    return 0


def load_eval_config(args: argparse.Namespace):
    """The validated config of the command line: a verl evaluation config (a file detected as
    verl's, or --dialect verl) through its own translation, anything else through `load_config`."""
    from posttrain.cli.sources import config_source
    from posttrain.config import load_config
    from posttrain.config.dialects.detect import detect
    from posttrain.config.dialects.source import read_yaml
    from posttrain.config.dialects.verl_eval import eval_native, fits_evaluation
    from posttrain.config.schema import defaults_dict
    from posttrain.config.validate import deep_merge, validate

    path, overrides, dialect = config_source(args)
    if dialect == "verl" and path is not None and Path(path).stem == "evaluation" and not Path(path).is_file():
        path = None  # --config-name evaluation: verl's own evaluation.yaml, the base anyway
    raw = read_yaml(Path(path)) if path is not None else {}
    if dialect == "verl" or (dialect is None and path is not None and detect(raw, path) == "verl"):
        if fits_evaluation(raw):
            return validate(deep_merge(defaults_dict(), eval_native(path, overrides)))
        # a verl trainer config: its reward settings, with posttrain overrides (eval.path=...)
        # after the file, or verl's with --dialect verl
    return load_config(path, overrides, dialect=dialect)
