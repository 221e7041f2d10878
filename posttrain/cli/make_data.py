"""`posttrain make-data TASK OUT_DIR`: write a synthetic verifiable task as parquet files.

Each registered task is its own sub-command, so ``posttrain make-data sort --help`` lists exactly the
options that task has. Files: train.parquet and test.parquet (verl RL layout), sft_train.parquet
(prompt + response for the SFT warm-up) and dpo_train.parquet / dpo_test.parquet (prompt + chosen +
rejected preference pairs); see posttrain.tasks.writing.
"""

from __future__ import annotations

import argparse

from posttrain.tasks import TASKS, TaskOption, TaskSpec, write_task_data


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "make-data",
        help="Write a synthetic task (sort, arithmetic, countdown) as parquet train/test/SFT files.",
        description="Write a synthetic verifiable task as parquet files in verl's RL layout, plus SFT data.",
    )
    tasks = parser.add_subparsers(dest="task", metavar="TASK")
    tasks.required = True
    for spec in TASKS.values():
        _add_task_parser(tasks, spec)


def _add_task_parser(tasks: argparse._SubParsersAction, spec: TaskSpec) -> None:
    p = tasks.add_parser(spec.name, help=spec.description, description=spec.description)
    p.add_argument("out_dir", metavar="OUT_DIR", help="Directory for train/test.parquet, sft_train.parquet, dpo_train/dpo_test.parquet.")
    p.add_argument("--train", type=int, default=1000, help="RL training rows (default: %(default)s).")
    p.add_argument("--test", type=int, default=200,
                   help="Held-out rows, distinct and absent from train/SFT/DPO (default: %(default)s).")
    p.add_argument("--sft", type=int, default=None, help="SFT warm-up rows (default: same as --train; 0: no SFT file).")
    p.add_argument("--dpo", type=int, default=None,
                   help="DPO training pairs (default: same as --train; 0: no DPO files). dpo_test.parquet "
                        "holds one pair per --test problem.")
    p.add_argument("--seed", type=int, default=0, help="Random seed; same seed and options give the same files.")
    p.add_argument("--system-prompt", default=None, help="Optional system message prepended to every prompt.")
    for option in spec.options:
        p.add_argument(
            "--" + option.name.replace("_", "-"), dest=f"task_{option.name}", type=option.type,
            nargs=option.nargs, choices=option.choices, default=option.default, metavar=_metavar(option),
            help=f"{option.help} (default: {option.default})",
        )
    p.set_defaults(func=_run, spec=spec)


def _metavar(option: TaskOption) -> str | None:
    """`--digits N`, `--ops {+,-,*}`: a readable placeholder instead of argparse's TASK_DIGITS."""
    return None if option.choices else "N" if option.type is int else "TEXT"


def _run(args: argparse.Namespace) -> int:
    spec: TaskSpec = args.spec
    options = {o.name: getattr(args, f"task_{o.name}") for o in spec.options}
    paths = write_task_data(
        spec.name, args.out_dir, train=args.train, test=args.test, sft=args.sft, dpo=args.dpo,
        seed=args.seed, system_prompt=args.system_prompt, options=options,
    )
    sft = 0 if "sft" not in paths else args.train if args.sft is None else args.sft
    dpo = 0 if "dpo" not in paths else args.train if args.dpo is None else args.dpo
    print(f"wrote {spec.data_source}: {args.train} train, {args.test} test, {sft} SFT rows, {dpo} DPO pairs")
    for path in paths.values():
        print(f"  {path}")
    return 0
