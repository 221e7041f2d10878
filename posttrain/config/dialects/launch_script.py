"""The words of a verl launch line, read out of a shell script without running it.

verl's examples are shell scripts: variable assignments, then ``python3 -m verl.trainer.main_ppo
KEY=VALUE ...`` (or ``torchrun ... -m verl.trainer.fsdp_sft_trainer KEY=VALUE ...``, read as
``--config-name sft_trainer KEY=VALUE ...``) with ``$VAR``, ``${VAR:-default}``, ``$((a + b))`` and ``"$@"`` in the words. A user
who wants to know whether posttrain takes their script replaces ``python3 -m verl.trainer.main_ppo``
with ``posttrain config plan --dialect verl``; `launch_words` does that substitution for a script
file (the corpus sweep in benchmarks/foreign_corpus.py and the corpus tests use it):

    words = launch_words(Path("run_qwen2-7b.sh").read_text(), {"HOME": "/home/me"})
    # ['algorithm.adv_estimator=grpo', 'data.train_files=/home/me/data/gsm8k/train.parquet', ...]

Nothing is executed. The script is read top to bottom as bash would, one simple command at a time:
assignments (``NAME=value``, ``export NAME=value``, arrays ``NAME=(a b)``) update the variables;
quoting, escapes and field splitting of unquoted expansions follow bash. An ``if`` comparing a set
variable with a word takes the branch bash would (`posttrain.config.dialects.shell_branches`); any
other condition reads every branch (the last assignment wins), and loops are not followed. A
command substitution other than ``$(pwd)``, ``$(date +FORMAT)``, ``$(basename X)``, ``$(dirname X)``
and ``$(cd X && pwd)`` expands to nothing; every such gap is listed in `Extraction.unresolved`.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping

from posttrain.config.dialects.shell_branches import Branches
from posttrain.config.dialects.shell_words import Shell, commands

VERL_MODULE = "verl.trainer.main_ppo"
SFT_MODULE = "verl.trainer.fsdp_sft_trainer"
# verl's launch modules -> the words that pick its trainer tree (posttrain.config.dialects.verl_launch):
# the SFT trainer's is sft_trainer.yaml, which `--config-name sft_trainer` names
VERL_MODULES = {VERL_MODULE: (), SFT_MODULE: ("--config-name", "sft_trainer")}


@dataclasses.dataclass
class Extraction:
    """What `extract` read: the launch words (None when the script has no such command), the
    variables at that point, what could not be expanded, and each ``key=`` word left empty by
    variables that are not set (``trainer.nnodes=$SLURM_JOB_NUM_NODES`` outside a SLURM job)."""

    words: list[str] | None
    variables: dict[str, str | list[str]]
    unresolved: list[str]
    blanks: dict[str, list[str]] = dataclasses.field(default_factory=dict)

    def blank_notes(self) -> list[str]:
        """One line per empty ``key=`` word, naming the variables to set.

        >>> Extraction([], {}, [], {"trainer.nnodes": ["SLURM_JOB_NUM_NODES"]}).blank_notes()
        ['trainer.nnodes is empty: $SLURM_JOB_NUM_NODES is not set; SLURM sets it inside a job: export it to plan here']
        """
        return [_blank_note(key, names) for key, names in self.blanks.items()]


def _blank_note(key: str, names: list[str]) -> str:
    shown = [f"${n.removeprefix('#positional')} (an argument of the script)" if n.startswith("#") else f"${n}" for n in names]
    text = f"{key} is empty: {' and '.join(shown)} {'is' if len(shown) == 1 else 'are'} not set"
    if any(n.startswith("SLURM_") for n in names):
        text += f"; SLURM sets {'it' if len(shown) == 1 else 'them'} inside a job"
    return text + f": {'pass' if all(n.startswith('#') for n in names) else 'export'} {'it' if len(shown) == 1 else 'them'} to plan here"


def launch_words(text: str, env: Mapping[str, str] = (), module: str | None = None) -> list[str] | None:
    """The arguments after ``-m MODULE`` in the script's first command that runs it, else None."""
    return extract(text, env, module).words


def extract(text: str, env: Mapping[str, str] = (), module: str | None = None, script: str = "script.sh") -> Extraction:
    """Read ``text`` as bash would, stopping at the first command running ``python -m MODULE`` (by
    default any of verl's launch modules, `VERL_MODULES`, whose tree-picking words lead the result)."""
    modules = {module: ()} if module else VERL_MODULES
    shell = Shell(dict(env), script)
    branches = Branches(shell)
    for raw in commands(text):
        raw = branches.step(raw)
        if not raw or not branches.running:
            continue  # an if/elif/else/fi keyword, or a command in a branch bash would not take
        words = shell.run(raw)
        for name, lead in modules.items():
            at = words.index(name) if words is not None and name in words else 0
            if at > 0 and words[at - 1] == "-m":
                launch = [*lead, *_drop_redirections(words[at + 1:])]
                blanks = {k: v for k, v in shell.blanks.items() if any(w.lstrip("+") == f"{k}=" for w in launch)}
                return Extraction(launch, shell.vars, shell.unresolved, blanks)
    return Extraction(None, shell.vars, shell.unresolved)


def _drop_redirections(words: list[str]) -> list[str]:
    out, skip = [], False
    for word in words:
        if skip:
            skip = False
        elif re.fullmatch(r"\d*(>>?|<|&>)", word):
            skip = True  # `> log.txt`: the target is the next word
        elif not re.match(r"^\d*(>>?|<|&>)", word):
            out.append(word)
    return out


__all__ = ["Extraction", "SFT_MODULE", "VERL_MODULE", "VERL_MODULES", "extract", "launch_words"]
