"""`posttrain data fetch NAME [--subset S] [--split S] OUT`: a Hugging Face dataset as parquet files.

Run it on a machine that reaches the Hugging Face Hub; copy OUT to the training machine and name its
files in `data.train_files` / `data.val_files` (training itself never downloads). See
posttrain.data.fetch.
"""

from __future__ import annotations

import argparse


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("data", help="Datasets: fetch a Hugging Face dataset into parquet files.",
                                   description="Datasets: fetch a Hugging Face dataset into parquet files.")
    commands = parser.add_subparsers(dest="data_command", metavar="COMMAND")
    commands.required = True
    fetch = commands.add_parser(
        "fetch", help="Save a Hugging Face dataset as OUT/{split}.parquet (run on a connected machine).",
        description="Load a Hugging Face dataset with datasets.load_dataset and write OUT/{split}.parquet for each "
                    "split, the files data.train_files and data.val_files read. With HF_HUB_OFFLINE=1 it reads the "
                    "local cache only.",
    )
    fetch.add_argument("name", metavar="NAME", help="Dataset name on the Hub, e.g. openai/gsm8k.")
    fetch.add_argument("out", metavar="OUT", help="Folder for the parquet files (created).")
    fetch.add_argument("--subset", default=None, help="Subset (configuration) name, e.g. main for openai/gsm8k.")
    fetch.add_argument("--split", default=None, help="One split only (default: every split).")
    fetch.set_defaults(func=_fetch)


def _fetch(args: argparse.Namespace) -> int:
    from posttrain.data.fetch import fetch_dataset

    written = fetch_dataset(args.name, args.out, subset=args.subset, split=args.split)
    subset = f" (subset {args.subset})" if args.subset else ""
    print(f"wrote {args.name}{subset}: " + ", ".join(f"{split} {rows} rows" for split, (_, rows) in written.items()))
    for path, _ in written.values():
        print(f"  {path}")
    if "train" in written:
        print(f"use it with: data.train_files: {written['train'][0]}")
    return 0
