"""`posttrain make-env-data ENV OUT_DIR`: expert trajectories of an environment for an SFT warm-up.

The environment's planner (`expert_action`) plays `--episodes` episodes and each becomes one chat
conversation in OUT_DIR/sft_train.parquet (columns data_source, messages, extra_info); an SFT stage
reads them with ``data.messages_key: messages``. See posttrain.envs.expert.
"""

from __future__ import annotations

import argparse

import yaml

from posttrain.errors import ConfigError


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "make-env-data",
        help="Write expert trajectories of an environment (frozen_lake, sokoban, task) as SFT conversations.",
        description="Let an environment's planner play it and write each episode as one chat conversation "
                    "(OUT_DIR/sft_train.parquet, column messages) for an SFT warm-up before agentic RL.",
    )
    p.add_argument("env", metavar="ENV", help="A registered environment (frozen_lake, sokoban, task, ...) or module:Class.")
    p.add_argument("out_dir", metavar="OUT_DIR", help="Directory for sft_train.parquet.")
    p.add_argument("--env-config", default="{}", metavar="YAML",
                   help="The environment's keyword arguments, as in custom_envs' env_config, e.g. '{size: 3, is_slippery: false}'.")
    p.add_argument("--episodes", type=int, default=1000, help="Conversations to write (default: %(default)s).")
    p.add_argument("--max-steps", type=int, default=10, help="Actions per episode at most, as max_steps (default: %(default)s).")
    p.add_argument("--seed", type=int, default=0, help="Seed of the episode seeds; same seed, same files (default: %(default)s).")
    p.add_argument("--instruction", default=None,
                   help="The system message; default: the class's instruction (what the agent loop shows without env_instruction).")
    p.add_argument("--include-failures", action="store_true", help="Keep episodes the expert does not win (e.g. slipped into a hole).")
    p.add_argument("--holdout", default=None, metavar="CONFIG",
                   help="An agentic posttrain config: leave out every episode that starts on one of its validation boards "
                        "(env.val_env_manager's first observations), so validation success is measured on boards SFT never showed.")
    p.set_defaults(func=_run)


def _run(args: argparse.Namespace) -> int:
    from posttrain.envs.expert import expert_rows, write_expert_data
    from posttrain.envs.registry import env_class

    try:
        env_config = yaml.safe_load(args.env_config) or {}
    except yaml.YAMLError as e:
        raise ConfigError(f"--env-config: not YAML: {e}") from None
    if not isinstance(env_config, dict):
        raise ConfigError(f"--env-config: expected a mapping of keyword arguments, got {type(env_config).__name__}")
    for flag, value in (("--episodes", args.episodes), ("--max-steps", args.max_steps)):
        if value < 1:
            raise ConfigError(f"{flag}: must be >= 1, got {value}")
    cls = env_class(args.env, "ENV")
    instruction = getattr(cls, "instruction", "") if args.instruction is None else args.instruction
    exclude = frozenset()
    if args.holdout is not None:
        from posttrain.config.load import load_config
        from posttrain.trainer.agentic import validation_first_observations

        exclude = validation_first_observations(load_config(args.holdout))
    rows = expert_rows(cls, env_config, instruction, episodes=args.episodes, seed=args.seed, max_steps=args.max_steps,
                       successful_only=not args.include_failures, name=args.env, exclude=exclude)
    path = write_expert_data(rows, args.out_dir)
    turns = sum(r["extra_info"]["turns"] for r in rows) / len(rows)
    success = sum(r["extra_info"]["success"] for r in rows) / len(rows)
    held = f", none starting on the {len(exclude)} validation boards of {args.holdout}" if args.holdout else ""
    print(f"wrote {len(rows)} expert episodes of {args.env} ({turns:.2f} actions each, success {success:.2f}{held}) to {path}")
    return 0
