"""The words of a verl launch line, read out of a shell script without running it.

verl's examples are shell scripts: variable assignments, then ``python3 -m verl.trainer.main_ppo
KEY=VALUE ...`` with ``$VAR``, ``${VAR:-default}``, ``$((a + b))`` and ``"$@"`` in the words. A user
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


@dataclasses.dataclass
class Extraction:
    """What `extract` read: the launch words (None when the script has no such command), the
    variables at that point, and what could not be expanded."""

    words: list[str] | None
    variables: dict[str, str | list[str]]
    unresolved: list[str]


def launch_words(text: str, env: Mapping[str, str] = (), module: str = VERL_MODULE) -> list[str] | None:
    """The arguments after ``-m MODULE`` in the script's first command that runs it, else None."""
    return extract(text, env, module).words


def extract(text: str, env: Mapping[str, str] = (), module: str = VERL_MODULE, script: str = "script.sh") -> Extraction:
    """Read ``text`` as bash would, stopping at the first command running ``python -m MODULE``."""
    shell = Shell(dict(env), script)
    branches = Branches(shell)
    for raw in commands(text):
        raw = branches.step(raw)
        if not raw or not branches.running:
            continue  # an if/elif/else/fi keyword, or a command in a branch bash would not take
        words = shell.run(raw)
        if words is not None and module in words:
            at = words.index(module)
            if at > 0 and words[at - 1] == "-m":
                return Extraction(_drop_redirections(words[at + 1:]), shell.vars, shell.unresolved)
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


__all__ = ["Extraction", "VERL_MODULE", "extract", "launch_words"]
