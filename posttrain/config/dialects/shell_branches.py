"""Which branch of a launch script's ``if`` bash would take, for the conditions scripts branch on.

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
(literal), with every variable in them set (by the script or the environment given). Any other
condition (``-n``, ``&&``, a command, an unset variable) is not evaluated: every branch of that
``if`` runs, the last assignment winning, and the gap is named in the shell's `unresolved` list.
"""

from __future__ import annotations

import dataclasses
import fnmatch

from posttrain.config.dialects.shell_words import Shell

_TESTS = {"[[": "]]", "[": "]"}


@dataclasses.dataclass
class _Frame:
    outer: bool  # whether the commands around the `if` run
    known: bool  # every condition so far was evaluated
    taken: bool = False  # a branch ran already (known frames)
    runs: bool = True  # whether the current branch runs


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
        if head == "then":
            if self.condition is not None and self.judged and not self.evaluated:
                shown = " ".join(self.condition)
                self.shell.unresolved.append(f"{shown}: a condition posttrain does not evaluate (every branch read, the last assignment wins)")
            self.condition = None
            return raw[1:]
        return raw

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
            kept, self.shell.unresolved = self.shell.unresolved, []  # this comparison's own gaps
            left, right = self.shell.fields(raw[1]), self.shell.fields(raw[3])
            gaps, self.shell.unresolved = self.shell.unresolved, kept
            kept.extend(g for g in gaps if g not in kept)
            if not gaps and len(left) <= 1 and len(right) <= 1:
                a, b = (left or [""])[0], (right or [""])[0]
                pattern = raw[0] == "[[" and raw[3][:1] not in "'\""  # [[ x == glob ]], unquoted
                equal = fnmatch.fnmatchcase(a, b) if pattern else a == b
                verdict = equal if raw[2] != "!=" else not equal
        self.condition, self.judged, self.evaluated = command, True, verdict is not None
        return verdict  # one not evaluated is named when its `then` comes, the whole condition read


__all__ = ["Branches"]
