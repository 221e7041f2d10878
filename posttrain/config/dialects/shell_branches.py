"""Which branch of a launch script's ``if`` or ``case`` bash would take, for the conditions scripts branch on.

verl's scripts pick settings by a variable they set a few lines up::

    backend=megatron
    if [[ $backend == "megatron" ]]; then
        CONFIG_NAME=ppo_megatron_trainer
    else
        CONFIG_NAME=ppo_trainer
    fi

`Branches` follows ``if``/``elif``/``else``/``fi`` and says whether each command runs. A condition it
evaluates is one comparison of two words: ``[[ A == B ]]``, ``[[ A = B ]]``, ``[[ A != B ]]`` (an
unquoted right side is a glob pattern, as in bash) or ``[ A = B ]``, ``[ A == B ]``, ``[ A != B ]``
(literal), or one integer comparison ``[ A -gt B ]`` (``-eq -ne -lt -le -gt -ge``, either bracket),
with every variable in them set (by the script or the environment given) to a value that
stands on no gap. Any other condition (``-n``, ``&&``, a command, an unset variable, a variable set
from a command posttrain does not run) is not evaluated: every branch of that
``if`` runs, the last assignment winning, and the gap is named in the shell's `unresolved` list.

``case WORD in PATTERN) ... ;; esac`` takes the first clause one of whose glob patterns matches WORD,
as bash does, when WORD expands without a gap (posttrain.config.dialects.shell_lexer gives each
clause's patterns and ``;;`` as commands of their own); otherwise every clause is read.
"""

from __future__ import annotations

import dataclasses
import fnmatch
import operator

from posttrain.config.dialects.shell_words import Shell

_TESTS = {"[[": "]]", "[": "]"}
_INTEGER = {"-eq": operator.eq, "-ne": operator.ne, "-lt": operator.lt, "-le": operator.le, "-gt": operator.gt, "-ge": operator.ge}


def _integer(word: str | None) -> int | None:
    """A test's integer operand (bash allows surrounding blanks and a sign), or None: bash stops
    with "integer expression expected" on anything else, which this leaves unjudged."""
    try:
        return int(word.strip()) if word is not None else None
    except ValueError:
        return None


@dataclasses.dataclass
class _Frame:
    outer: bool  # whether the commands around the `if` run
    known: bool  # every condition so far was evaluated
    taken: bool = False  # a branch ran already (known frames)
    runs: bool = True  # whether the current branch runs
    subject: str | None = None  # a `case` frame's word (known frames)


class Branches:
    """The ``if`` frames open at the current command of a script read by `Shell`."""

    def __init__(self, shell: Shell):
        self.shell = shell
        self.frames: list[_Frame] = []
        self.condition: list[str] | None = None  # the if/elif whose `then` has not come yet
        self.judged = False  # that condition was looked at (not skipped after a branch was taken)
        self.evaluated = False  # and its comparison decided its frame

    @property
    def running(self) -> bool:
        return not self.frames or self.frames[-1].runs

    def step(self, raw: list[str]) -> list[str]:
        """Follow the keywords at the start of command ``raw``; return the rest of it ([] for none).
        The rest runs only when `running` says so afterwards."""
        head = raw[0] if raw else ""
        if self.condition is not None and head != "then":
            self._compound(raw)  # `if [[ a ]] && [[ b ]]`, `||`, a pipe: the condition goes on
            return []
        if head == "if":
            outer = self.running
            verdict = self._condition(raw) if outer else False
            self.frames.append(_Frame(outer, verdict is not None, bool(verdict), outer and verdict is not False))
            return []
        if head == "elif" and self.frames:
            frame = self.frames[-1]
            if frame.outer and frame.known and not frame.taken:
                verdict = self._condition(raw)
                frame.known, frame.taken = verdict is not None, bool(verdict)
                frame.runs = verdict is not False
            else:
                frame.runs = frame.outer and not frame.known
                self.condition, self.judged, self.evaluated = raw, False, False
            return []
        if head == "else" and self.frames:
            frame = self.frames[-1]
            frame.runs = frame.outer and (not frame.known or not frame.taken)
            return raw[1:]
        if head == "fi" and self.frames:
            self.frames.pop()
            return raw[1:]
        if head == "case":
            self._case(raw)
            return []
        if head in (")", ";;", "esac") and self.frames and self.frames[-1].subject is not None:
            return self._clause(raw)
        if head == "then":
            if self.condition is not None and self.judged and not self.evaluated:
                shown = " ".join(self.condition)
                self.shell.unresolved.append(f"{shown}: a condition posttrain does not evaluate (every branch read, the last assignment wins)")
            self.condition = None
            return raw[1:]
        return raw

    def _case(self, raw: list[str]) -> None:
        """``case WORD in``: a frame whose clauses are judged by WORD's expansion, when it has no gap."""
        outer = self.running
        word = self._expanded(raw[1]) if outer and len(raw) == 3 and raw[2] == "in" else None
        if outer and word is None:
            self.shell.unresolved.append(f"{' '.join(raw)}: a case word posttrain does not know (every clause read, the last assignment wins)")
        self.frames.append(_Frame(outer, word is not None, False, False, word if word is not None else ""))

    def _clause(self, raw: list[str]) -> list[str]:
        frame = self.frames[-1]
        if raw[0] == ";;":
            frame.runs = False
        elif raw[0] == "esac":
            self.frames.pop()
            return raw[1:]
        elif not frame.known:
            frame.runs = frame.outer
        else:  # `)`: the patterns of a clause; the first clause that matches runs
            matched = any(self._matches(frame.subject or "", pattern) for pattern in raw[1:])
            frame.runs = frame.outer and not frame.taken and matched
            frame.taken = frame.taken or frame.runs
        return []

    def _matches(self, subject: str, pattern: str) -> bool:
        glob = self._expanded(pattern)
        if glob is None:
            return False
        return subject == glob if pattern[:1] in "'\"" else fnmatch.fnmatchcase(subject, glob)

    def _expanded(self, raw: str) -> str | None:
        """One word's expansion, or None when it has a gap (an unset variable, a command not run, a
        value that stands on one) or is not one field."""
        self.shell.guessed_read = False  # set by a gap of this expansion (listed in `unresolved`) or a value standing on one
        fields = self.shell.fields(raw)
        return None if self.shell.guessed_read or len(fields) > 1 else (fields or [""])[0]

    def _compound(self, more: list[str]) -> None:
        """The condition is longer than one comparison: from its branch on every branch is read, as
        for any condition this does not evaluate."""
        if self.evaluated:
            frame = self.frames[-1]
            frame.known, frame.runs = False, True
            self.evaluated = False
        self.condition = [*self.condition, "...", *more]  # "...": the && or || the split dropped

    def _condition(self, command: list[str]) -> bool | None:
        """The truth of the comparison after ``if``/``elif``, or None when it is not one this reads."""
        raw = command[1:]
        verdict = None
        if len(raw) == 5 and raw[0] in _TESTS and raw[4] == _TESTS[raw[0]] and raw[2] in ("==", "=", "!="):
            a, b = self._expanded(raw[1]), self._expanded(raw[3])
            if a is not None and b is not None:
                pattern = raw[0] == "[[" and raw[3][:1] not in "'\""  # [[ x == glob ]], unquoted
                equal = fnmatch.fnmatchcase(a, b) if pattern else a == b
                verdict = equal if raw[2] != "!=" else not equal
        elif len(raw) == 5 and raw[0] in _TESTS and raw[4] == _TESTS[raw[0]] and raw[2] in _INTEGER:
            a, b = _integer(self._expanded(raw[1])), _integer(self._expanded(raw[3]))
            if a is not None and b is not None:
                verdict = _INTEGER[raw[2]](a, b)
        self.condition, self.judged, self.evaluated = command, True, verdict is not None
        return verdict  # one not evaluated is named when its `then` comes, the whole condition read


__all__ = ["Branches"]
