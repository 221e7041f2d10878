"""`posttrain config show|explain|plan|convert`: look at a config before running it.

``show`` prints the fully resolved config (every default included) as YAML; ``explain`` prints the
schema's documentation of a key or a section; ``plan`` runs every check `posttrain train` runs
before its first step (`posttrain.trainer.run.check_run`: registry names, the model directory and
tokenizer, every stage's data, the reward function; no weights read) and prints the batch
arithmetic of one training step. All three validate first, so a broken config is reported here,
not an hour into a run; they accept verl, ROLL and Trinity-RFT files too (posttrain.config.dialects).

``convert`` turns a verl/ROLL/Trinity-RFT file into a posttrain one, headed by a commented report of
every key: translated (to which posttrain key), dropped (no effect in posttrain, and why) or refused
(posttrain cannot honour it, and why). Exit status: 0 when every key translated and the result
validates, 1 when the file was written but keys were refused or it does not validate yet, 2 when
nothing was written (unreadable file, unknown dialect).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from posttrain.cli.sources import add_dialect_options, config_source, split_args  # noqa: F401 (split_args: re-exported)
from posttrain.config.derive import count_rows, derive
from posttrain.config.dialects import convert
from posttrain.errors import ConfigError
from posttrain.config.explain import explain
from posttrain.config.load import load_config, to_yaml
from posttrain.config.plan import format_plan
from posttrain.files import atomic_write_text


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("config", help="show, explain or plan a config", description=__doc__)
    sub = parser.add_subparsers(dest="config_command", metavar="ACTION")
    sub.required = True
    usage = "[--dialect verl|roll|trinity] [CONFIG] [KEY=VALUE ...]"
    show = sub.add_parser("show", help="print the resolved config as YAML", usage=f"posttrain config show {usage}")
    show.add_argument("args", nargs="*", metavar="CONFIG|KEY=VALUE", help="a YAML file, then dotted overrides")
    add_dialect_options(show)
    show.set_defaults(func=run_show)
    exp = sub.add_parser("explain", help="document a key or a section")
    exp.add_argument("key", nargs="?", default=None, help="dotted key or section, e.g. actor.ppo_epochs; none lists sections")
    exp.set_defaults(func=run_explain)
    plan = sub.add_parser("plan", help="print the batch arithmetic of one step", usage=f"posttrain config plan {usage}")
    plan.add_argument("args", nargs="*", metavar="CONFIG|KEY=VALUE", help="a YAML file, then dotted overrides")
    add_dialect_options(plan)
    plan.set_defaults(func=run_plan)
    conv = sub.add_parser("convert", help="translate a verl/ROLL/Trinity-RFT config into a posttrain config",
                          usage="posttrain config convert IN [OUT] [--dialect verl|roll|trinity]\n"
                                "       posttrain config convert --dialect verl|roll|trinity [IN] KEY=VALUE ... [-o OUT]",
                          description="Write IN as a posttrain config (to OUT, or stdout), with a commented report of "
                          "what was translated, dropped and refused; or a launch line (a verl script's words after "
                          "`python3 -m verl.trainer.main_ppo`, or a file with its overrides). Exit 0: all translated and "
                          "valid; 1: written, but some keys were refused or it does not validate yet; 2: nothing written.")
    conv.add_argument("args", nargs="*", metavar="IN [OUT] | [IN] KEY=VALUE",
                      help="a verl, ROLL or Trinity-RFT YAML config and where to write the posttrain YAML (omitted: stdout); "
                           "or, with --dialect, a launch line's [config] and overrides")
    conv.add_argument("-o", "--output", default=None, metavar="OUT", help="where to write the posttrain YAML (a launch line's OUT)")
    add_dialect_options(conv)
    conv.set_defaults(func=run_convert)


def run_show(args: argparse.Namespace) -> int:
    path, overrides, dialect = config_source(args)
    print(to_yaml(load_config(path, overrides, dialect=dialect)), end="")
    return 0


def run_explain(args: argparse.Namespace) -> int:
    print(explain(args.key), end="")
    return 0


def run_plan(args: argparse.Namespace) -> int:
    path, overrides, dialect = config_source(args)
    cfg = load_config(path, overrides, dialect=dialect)
    # a dialect's overrides are named by the dialect's loader; posttrain's own by the override itself
    print(plan_text(cfg, path, [] if dialect else overrides), end="")
    return 0


def plan_text(cfg, path: str | None, overrides: list[str]) -> str:
    """Run every check `posttrain train` runs before its first step (the same function: registry
    names, model directory, tokenizer, data, reward function; no weights read, nothing trained or
    built), then each stage's batch arithmetic from its real dataset size. `posttrain studio`
    shows the same text as the user edits a config."""
    from posttrain.cli.train import naming_config_source
    from posttrain.cluster.placement import plan_world
    from posttrain.trainer.preflight import engine_notes
    from posttrain.trainer.prepare import pending_builds
    from posttrain.trainer.run import check_run

    with naming_config_source(path, overrides, cfg.stages):
        plan_world(cfg)  # the placement train would start: devices, launcher, Ray keys
        checks = check_run(cfg, pending=pending_builds(cfg.prepare))
    out = [note + "\n" for note in engine_notes([c.config for c in checks])]
    for i, check in enumerate(checks):
        if len(checks) > 1:
            out.append(f"{'' if i == 0 else chr(10)}stage {i} ({check.name}):\n")
        if check.skipped:
            out.append(f"(model and data not checked: {check.skipped})\n")
        out.append(_plan_text(check, path))
    return "".join(out)


def run_convert(args: argparse.Namespace) -> int:
    if not any(_is_override(w) for w in args.args) and args.config_name is None and 1 <= len(args.args) <= 2:
        if args.output is not None and len(args.args) == 2:
            raise ConfigError(f"two outputs: {args.args[1]} and -o {args.output}; give one")
        path, overrides, output = args.args[0], [], args.args[1] if len(args.args) == 2 else args.output  # IN [OUT]
    else:  # a launch line: [IN] KEY=VALUE ..., written to -o
        path, overrides, _ = config_source(args)
        stray = [w for w in overrides if not _is_override(w)]
        if stray or (args.dialect is None and args.config_name is None):
            raise ConfigError(f"config convert {' '.join(args.args)}: a launch line needs --dialect verl|roll|trinity, one config "
                              f"file at most, then KEY=VALUE overrides, and its output as -o OUT" + (f" (not {stray[0]})" if stray else ""))
        output = args.output
    text, foreign, problems = convert(path, args.dialect or ("verl" if args.config_name else None), overrides)
    refused = foreign.report.refused
    if output is None:
        print(text, end="")
    else:
        atomic_write_text(Path(output), text)
    out = sys.stderr if output is None else sys.stdout
    where = f" -> {output}" if output else ""
    source = path if not overrides else f"{path or 'the command line'} with {len(overrides)} override(s)"
    print(f"{source}: {foreign.report.title()} config{where}: {foreign.report.counts()}", file=out)
    for entry in refused:
        print(f"  refused: {entry.line()}", file=out)
    for problem in problems:
        print(f"  does not validate: {problem}", file=out)
    return 1 if refused or problems else 0


def _is_override(word: str) -> bool:
    """A Hydra override (``key=value``, ``+key=value``, ``~key``) rather than a file name."""
    return "=" in word or word.startswith("~")


def _plan_text(check, path: str | None) -> str:
    """The plan of one checked stage, from its dataset's real size (after filtering) when it was
    built, else from counting the rows of its files."""
    cfg = check.config
    if check.inputs is not None and check.inputs.train_set is None:  # environments, or a bench of data.val_files only
        note = ("an agentic stage plays environments (env.train_env_manager), no dataset" if cfg.env.train_env_manager.tags else
                f"trainer.mode bench evaluates the {len(check.inputs.val_set)} rows of data.val_files and reads no training rows")
        return format_plan(cfg, derive(cfg, None), size_note=note)
    if check.inputs is not None:
        return format_plan(cfg, derive(cfg, len(check.inputs.train_set)))
    files = list(cfg.data.train_files)
    rows = count_rows(files)
    note = "no data files: data.train_files is empty" if not files else "data.train_files not built yet"
    return format_plan(cfg, derive(cfg, rows), size_note=note)
