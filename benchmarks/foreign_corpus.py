"""Plan every example config of local verl / ROLL / Trinity-RFT checkouts, and count the outcomes.

    python benchmarks/foreign_corpus.py --verl ~/src/verl --roll ~/src/ROLL --trinity ~/src/Trinity-RFT
    python benchmarks/foreign_corpus.py --verl ~/src/verl-0.8 --verl ~/src/verl-0.10  # a row per verl release
    python benchmarks/foreign_corpus.py --roll ~/src/ROLL --show refused     # every refusal line, by file
    python benchmarks/foreign_corpus.py --verl ~/src/verl --unknown           # keys the schema does not know

This is the held-out sweep of issue 18 (the handful committed under tests/config/corpus is left out
by default: `--with-corpus` keeps it). Each file is planned as its users run it, with
`posttrain config plan` in this process:

- verl: every ``examples/**/*.sh`` that runs ``python3 -m verl.trainer.main_ppo``; the command's
  words are read out of the script with its shell variables substituted (posttrain.config.dialects.
  launch_script; nothing is executed) and planned as ``posttrain config plan --dialect verl WORDS``
  from the checkout's root (verl's scripts use paths relative to it). ``HOME`` is the one variable
  verl's docs tell users about (``$HOME/data/gsm8k``); it is set to a folder that does not exist.
- ROLL: every ``examples/**/*.yaml`` that detects as a ROLL pipeline config (the ``examples/config``
  include files are not pipelines), planned as ``posttrain config plan --dialect roll FILE``.
- Trinity-RFT: every ``examples/**/*.yaml`` detected as Trinity-RFT, with the ``TRINITY_*``
  variables its docs have users export (model, taskset, checkpoint folder) set to paths that do not
  exist here, as on a machine that lacks the data and the model.

Each file ends in one outcome: ``accepted`` (the plan printed), ``machine`` (refused only for what
this machine lacks: the model, a data file, a GPU), ``refused`` (some key or value posttrain cannot
honour: grouped by the reason's first words), or ``traceback`` (a bug: never acceptable). The issue's
acceptance counts accepted + machine.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import io
import os
import re
import sys
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from posttrain.cli import main as posttrain_main  # noqa: E402
from posttrain.config.dialects.detect import detect  # noqa: E402
from posttrain.config.dialects.launch_script import extract  # noqa: E402
from posttrain.config.dialects.source import read_yaml  # noqa: E402
from posttrain.config.dialects.verl_trees import release_of  # noqa: E402
from posttrain.trainer.smoke import machine_refusal  # noqa: E402

SMOKE_MARK = "\n(smoke-able: refused only for the engine, backend, devices, model or data, which `posttrain smoke` substitutes)"
SOURCE_MARK = "\n(refused by its own framework too: every refusal is a line verl, ROLL or Trinity-RFT fails on as well)"
# a refusal that says the source framework stops on the same line (Hydra's override rules, ROLL's tracker
# registry, the AgentScope v0 API that Trinity-RFT's own agentscope no longer has)
SOURCE_FAILS = re.compile(r"fails on this line as well|ROLL stops with|Trinity-RFT stops on this line too")
SIDE = {"smoke", "source"}  # annotations of refused files, not outcomes of their own

CORPUS = ROOT / "tests" / "config" / "corpus"
ABSENT = "/nonexistent"  # a machine without the users' data and models
TRINITY_ENV = {
    "TRINITY_MODEL_PATH": f"{ABSENT}/model",
    "TRINITY_TASKSET_PATH": f"{ABSENT}/taskset",
    "TRINITY_SFT_DATASET_PATH": f"{ABSENT}/sft_dataset",
    "TRINITY_AUX_MODEL_PATH": f"{ABSENT}/aux_model",
    "TRINITY_BUFFER_PATH": f"{ABSENT}/buffer",
    "TRINITY_CHECKPOINT_ROOT_DIR": "./checkpoints",
}
# ROLL files that log to wandb read its key from the environment, which ROLL's launch scripts tell users to export
ROLL_ENV = {"WANDB_API_KEY": "set-by-the-sweep"}
# What a machine lacks, as the problem lines of `config plan` say it (posttrain never downloads).
MACHINE = [
    ("the model", re.compile(r"model path .* is not an existing local directory|is not a model directory|no config\.json|nor a model the local Hugging Face cache")),
    ("a data file", re.compile(r"data file .* not found|no such data file|file not found|is neither a local file|in neither local Hugging Face cache|not found in the local|dataset .* not .* cache|does not exist", re.I)),
    ("a GPU", re.compile(r"CUDA is not available|no (CUDA )?GPU|needs? (a )?GPU|\bcuda\b.*not available", re.I)),
    # a device count a launch script reads from a scheduler's variable (SLURM's), unset outside a job
    ("a cluster job", re.compile(r"a cluster job's device count")),
    # a size that must divide the worker processes, where the file leaves the device count to the
    # machine (posttrain.config.dialects.machine) and this one has fewer GPUs than the user's
    ("GPUs for its parallel sizes", re.compile(r"the file leaves the device count to the machine")),
    # vLLM/SGLang rollout: the engine package is missing because the machine has no CUDA GPU for it
    ("vLLM/SGLang", re.compile(r"(vLLM|SGLang) is not installed .*no CUDA GPU")),
    # an environment's package (alfworld, scienceworld, webshop_minimal) or Java runtime, named by its check_runtime at plan time
    ("an environment's package", re.compile(r"custom_envs\.\S+\.env_type \S+: .*(pip install 'posttrain\[envs\]'|`java` is not on PATH|"
                                            r"package, which is not installed on this machine)")),
    # a tracker's secret the file reads with ${oc.env:...}: the user's shell has it, this one does not
    ("an API key", re.compile(r"environment variable \w*(API_KEY|TOKEN)\w* is not set")),
]

PER_WORLD = re.compile(r"does not divide the \d+ worker process")
# A line that names what the machine lacks and then what stops the file where it runs as well
# (posttrain.rollout.requests.tensor_parallel_note): posttrain's lack, not the machine's.
REFUSED_THERE_TOO = re.compile(r"Where it runs, .*refused too")


def lacks_only(problem: str) -> bool:
    """Whether a problem line names only what this machine lacks."""
    return not REFUSED_THERE_TOO.search(problem) and any(pattern.search(problem) for _, pattern in MACHINE)


def verl_runs(checkout: Path) -> list[tuple[str, list[str] | None, str]]:
    """``(relative path, plan words or None, note)`` for each verl launch script."""
    out = []
    env = {"HOME": f"{ABSENT}/home", "PWD": str(checkout)}
    for script in sorted(checkout.glob("examples/**/*.sh")):
        found = extract(script.read_text(errors="replace"), env, script=str(script))
        rel = str(script.relative_to(checkout))
        note = "; ".join(found.blank_notes() + found.unresolved)
        out.append((rel, None if found.words is None else ["config", "plan", "--dialect", "verl", *found.words], note))
    return out


def yaml_runs(checkout: Path, dialect: str) -> list[tuple[str, list[str] | None, str]]:
    """``(relative path, plan words or None, note)`` for each YAML file of ``examples``; a file that
    other files include through their Hydra ``defaults`` is a part, not a config of its own."""
    files = sorted(checkout.glob("examples/**/*.yaml"))
    parts = set()
    for file in files:
        for entry in _defaults(file):
            name = entry.split("@")[0] if isinstance(entry, str) else ""
            if name and name != "_self_":
                parts.add((file.parent / name).with_suffix(".yaml").resolve())
    out = []
    for file in files:
        rel = str(file.relative_to(checkout))
        if file.resolve() in parts:
            out.append((rel, None, "included by other files' defaults (a part, not a config)"))
            continue
        if dialect == "roll" and rel.startswith("examples/config/"):
            # ROLL's folder of include files (env lists, strategy blocks) for its pipelines' defaults
            out.append((rel, None, "in ROLL's examples/config, its folder of include files (a part, not a config)"))
            continue
        try:
            found = detect(read_yaml(file), rel)
        except Exception as err:  # noqa: BLE001 - an unreadable file is an outcome of its own
            out.append((rel, ["config", "plan", "--dialect", dialect, str(file)], f"unreadable: {err}"))
            continue
        out.append((rel, ["config", "plan", "--dialect", dialect, str(file)] if found == dialect else None, f"detected as {found}"))
    return out


def _defaults(file: Path) -> list:
    try:
        found = read_yaml(file).get("defaults")
    except Exception:  # noqa: BLE001 - the file's own run reports it
        return []
    return found if isinstance(found, list) else []


def plan(words: list[str], cwd: Path, env: dict[str, str]) -> tuple[str, str]:
    """``(outcome, text)``: run `posttrain config plan` in this process, from ``cwd``."""
    old_cwd, old_env = os.getcwd(), dict(os.environ)
    out, err = io.StringIO(), io.StringIO()
    try:
        os.chdir(cwd)
        os.environ.update(env)
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                rc = posttrain_main(words)
            except SystemExit as stop:  # argparse
                rc = stop.code if isinstance(stop.code, int) else 2
    except Exception:  # noqa: BLE001 - a traceback is what this sweep looks for
        return "traceback", traceback.format_exc()
    finally:
        os.chdir(old_cwd)
        os.environ.clear()
        os.environ.update(old_env)
    if rc == 0:
        return "accepted", out.getvalue()
    text = err.getvalue().removeprefix("posttrain: error: ")
    problems = problem_lines(text)
    lacks = {name for name, pattern in MACHINE for p in problems if pattern.search(p)}
    # with a cluster job's device counts unknown here, a size that must divide the process count is
    # judged against this machine's one process: the machine's lack too (smoke substitutes it)
    unknown_world = "a cluster job" in lacks
    problems = [p for p in problems if not (unknown_world and PER_WORLD.search(p))]
    if problems and all(lacks_only(p) for p in problems):
        return "machine", "lacks " + ", ".join(sorted(lacks))
    # a line the source framework stops on too (a missing include naming DeepSpeed, say) is nothing smoke substitutes
    smokeable = [not SOURCE_FAILS.search(p) and (machine_refusal(_reason(p)) and "--config-name" not in p
                                                 or any(pattern.search(p) for _, pattern in MACHINE)) for p in problems]
    if problems and all(smokeable):
        return "refused", text + SMOKE_MARK
    if problems and all(SOURCE_FAILS.search(p) or lacks_only(p) for p in problems):
        return "refused", text + SOURCE_MARK
    return "refused", text


def problem_lines(text: str) -> list[str]:
    """The problems of an error message: its ``  - `` items, else the message (the closing
    "read as a ... config (N keys translated ...)" summary left out)."""
    items = [line.strip()[2:] for line in text.splitlines() if line.startswith("  - ")]
    items = items or [text.strip()]
    return [p for p in items if p and not re.search(r"read as a .* config \(\d+ keys translated", p)]


def _reason(line: str) -> str:
    """A refusal line without where it came from and the key: its reason."""
    line = re.sub(r"^(command line override '[^']*'|verl's default|/\S*\.(yaml|sh)):\s*", "", line.strip())
    return re.sub(r"^[\w.\[\]*-]+( \(posttrain: [^)]*\))?:\s*", "", line)


def reason_of(line: str) -> str:
    """A refusal line's reason, shortened to group alike lines."""
    there = REFUSED_THERE_TOO.search(line)
    if there:
        rest = line[there.end():].lstrip(": ")
        if rest.startswith("unless the run is one process"):  # an engine every worker process holds whole (a judge's)
            return "tensor_model_parallel_size > 1 over several worker processes (an engine each holds whole; refused where it runs)"
        return "where the engine runs: " + re.split(r"[;(:]", rest)[0].strip()[:80]
    return re.split(r"[;(]", _reason(line))[0].strip()[:100]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--verl", type=Path, action="append", default=[],
                        help="a verl checkout; give it twice for two releases (a row each, named by verl/version/version)")
    parser.add_argument("--roll", type=Path)
    parser.add_argument("--trinity", type=Path)
    parser.add_argument("--with-corpus", action="store_true", help="also plan the files committed under tests/config/corpus")
    parser.add_argument("--show", choices=["refused", "machine", "accepted", "traceback", "all"], default=None,
                        help="print each file of that outcome with its message")
    parser.add_argument("--unknown", action="store_true", help="list the keys refused as not known to the schema, with counts")
    args = parser.parse_args()
    held = set() if args.with_corpus else {str(p.relative_to(CORPUS)) for p in CORPUS.rglob("*") if p.is_file()}
    jobs = []
    for checkout in args.verl:
        name = f"verl {release_of(checkout)}"
        jobs += [(name, checkout, *run, {}) for run in verl_runs(checkout.resolve())]
    if args.roll:
        jobs += [("roll", args.roll, *run, ROLL_ENV) for run in yaml_runs(args.roll.resolve(), "roll")]
    if args.trinity:
        jobs += [("trinity", args.trinity, *run, TRINITY_ENV) for run in yaml_runs(args.trinity.resolve(), "trinity")]
    counts: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
    reasons: collections.Counter = collections.Counter()
    unknown: collections.Counter = collections.Counter()
    skipped = collections.Counter()
    for dialect, checkout, rel, words, note, env in jobs:
        if _corpus_name(dialect, rel) in held:
            skipped[f"{dialect}: in tests/config/corpus"] += 1
            continue
        if words is None:
            skipped[f"{dialect}: {note if not dialect.startswith('verl') else 'no main_ppo or fsdp_sft_trainer command'}"] += 1
            continue
        outcome, text = plan(words, checkout.resolve(), env)
        counts[dialect][outcome] += 1
        counts[dialect]["smoke"] += outcome == "refused" and text.endswith(SMOKE_MARK)
        counts[dialect]["source"] += outcome == "refused" and text.endswith(SOURCE_MARK)
        if outcome == "refused":
            reasons.update({reason_of(p) for p in problem_lines(text)})
            for p in problem_lines(text):
                m = re.search(r"(\S+): no posttrain equivalent: not a .* key the schema knows", p)
                if m:
                    unknown[dialect.split()[0] + ":" + re.sub(r"\[\d+\]", "[i]", m.group(1))] += 1
        if args.show in (outcome, "all"):
            print(f"== {dialect} {rel} [{outcome}]" + (f"  (script: {note})" if note and dialect.startswith("verl") else ""))
            print(text.rstrip() if outcome != "accepted" else text.splitlines()[0] if text else "")
    _report(counts, reasons, skipped)
    if args.unknown:
        print("\nkeys not known to the schema (files):")
        for key, n in unknown.most_common():
            print(f"  {n:4d}  {key}")
    return 1 if any(c["traceback"] for c in counts.values()) else 0


def _corpus_name(dialect: str, rel: str) -> str:
    """The file name a corpus copy of ``rel`` has (tests/config/corpus/README.md names the scheme):
    verl 0.8's under verl/, verl 0.10's under verl_0_10/."""
    folder = {"verl 0.8": "verl"}.get(dialect, dialect.replace(" ", "_").replace(".", "_"))
    return f"{folder}/" + rel.removeprefix("examples/")


def _report(counts, reasons, skipped) -> None:
    total = collections.Counter()
    print(f"{'dialect':10s} {'files':>5s} {'accepted':>9s} {'machine':>8s} {'refused':>8s} {'traceback':>10s}")
    for dialect, c in counts.items():
        total.update(c)
        n = sum(v for k, v in c.items() if k not in SIDE)
        print(f"{dialect:10s} {n:5d} {c['accepted']:9d} {c['machine']:8d} {c['refused']:8d} {c['traceback']:10d}")
    smoke, source = total.pop("smoke", 0), total.pop("source", 0)
    n = sum(total.values())
    print(f"{'all':10s} {n:5d} {total['accepted']:9d} {total['machine']:8d} {total['refused']:8d} {total['traceback']:10d}")
    print(f"\naccepted or refused only for what the machine lacks: {total['accepted'] + total['machine']} of {n}")
    print(f"refused only for the engine/backend/devices/model/data (`posttrain smoke` runs them here): {smoke} of {n}")
    print(f"refused only where their own framework fails too (verl's Hydra, ROLL's tracker registry, Trinity-RFT's AgentScope v0 workflow): {source} of {n}")
    if skipped:
        print("\nnot planned:")
        for what, k in sorted(skipped.items()):
            print(f"  {k:4d}  {what}")
    if reasons:
        print("\nrefusal reasons (files):")
        for reason, k in reasons.most_common(40):
            print(f"  {k:4d}  {reason}")


if __name__ == "__main__":
    sys.exit(main())
