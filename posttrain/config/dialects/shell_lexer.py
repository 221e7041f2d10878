"""Bash's lexing of a script, for the forms launch scripts use: the script as simple commands of raw
(unexpanded) words, quotes kept, continuation lines joined, comments out. posttrain.config.dialects.
shell_words expands the words.

Inside ``case WORD in ... esac`` each clause's pattern list comes out as its own command, ``[")",
PATTERN, ...]`` (``a | b)``: two patterns), and each ``;;`` as ``[";;"]``, so that
posttrain.config.dialects.shell_branches can take the clause bash would.
"""

from __future__ import annotations

import re
from collections.abc import Iterator

_SEPARATORS = ("&&", "||", ";;", "|", ";", "&", "\n")


def commands(text: str) -> Iterator[list[str]]:
    """Each simple command as its raw words (quotes kept); continuation lines joined, comments out;
    a ``case`` clause's patterns and ``;;`` as commands of their own (module docstring)."""
    words: list[str] = []
    word: list[str] = []
    i, n = 0, len(text)
    cases = 0  # `case` commands open (their `esac` not met yet)
    pattern = False  # inside a case, where a clause's pattern list comes next

    def end_word() -> None:
        if word:
            words.append("".join(word))
            word.clear()

    while i < n:
        c = text[i]
        if pattern and not words and not word:
            if c in " \t\n;":
                i += 1
                continue
            if c == "#":
                while i < n and text[i] != "\n":
                    i += 1
                continue
            if not re.match(r"esac\b", text[i:]):  # a clause: `pat | pat)`, its commands follow
                j = _pattern_end(text, i)
                yield [")", *(p.strip() for p in text[i:j].lstrip("(").split("|") if p.strip())]
                pattern, i = False, j + 1
                continue
            pattern = False
        if c == "\\" and i + 1 < n:
            if text[i + 1] == "\n":  # line continuation
                i += 2
                continue
            word.append(text[i:i + 2])
            i += 2
        elif c in "'\"":
            j = close_quote(text, i)
            word.append(text[i:j])
            i = j
        elif c == "$" and text.startswith(("$(", "${"), i):
            j = close_group(text, i + 1)
            word.append(text[i:j])
            i = j
        elif c == "(" and word and "".join(word).endswith("="):  # NAME=( array )
            j = close_group(text, i)
            word.append(text[i:j])
            i = j
        elif c == "#" and not word:
            while i < n and text[i] != "\n":
                i += 1
        elif c in " \t":
            end_word()
            i += 1
            if len(words) == 3 and words[0] == "case" and words[2] == "in":  # `case X in pat) ...` on one line
                cases, pattern = _after(words, cases, pattern)
                yield words
                words = []
        elif c in "|;&\n" and not (c == "&" and word and word[-1][-1:] in "<>"):
            sep = next((s for s in _SEPARATORS if text.startswith(s, i)), c)
            end_word()
            if words:
                cases, pattern = _after(words, cases, pattern)
                yield words
            words = []
            i += len(sep)
            if sep == ";;" and cases:
                yield [";;"]
                pattern = True
        else:
            word.append(c)
            i += 1
    end_word()
    if words:
        yield words


def _after(words: list[str], cases: int, pattern: bool) -> tuple[int, bool]:
    """(cases open, whether a pattern list comes next) after the command ``words``."""
    if words[0] == "case" and words[-1] == "in":
        return cases + 1, True
    if words[0] == "esac" and cases:
        return cases - 1, False
    return cases, pattern


def _pattern_end(text: str, i: int) -> int:
    """The index of the ``)`` that ends the case pattern list starting at ``i`` (quotes skipped)."""
    j = i
    while j < len(text) and text[j] != ")":
        j = close_quote(text, j) if text[j] in "'\"" else j + 1
    return j


def close_quote(text: str, i: int) -> int:
    """The index after the quote that closes the one at ``i`` (double quotes honour backslashes)."""
    q, j = text[i], i + 1
    while j < len(text) and text[j] != q:
        if q == '"' and text.startswith(("$(", "${"), j):  # "$(dirname "$0")": quotes nest inside
            j = close_group(text, j + 1)
            continue
        j += 2 if (q == '"' and text[j] == "\\") else 1
    return min(j + 1, len(text))


def close_group(text: str, i: int) -> int:
    """The index after the bracket matching the ``(`` or ``{`` at ``i`` (quotes inside skipped)."""
    pairs = {"(": ")", "{": "}"}
    stack = [pairs[text[i]]]
    j = i + 1
    while j < len(text) and stack:
        c = text[j]
        if c in "'\"":
            j = close_quote(text, j)
            continue
        if c == "\\":
            j += 2
            continue
        if c in pairs:
            stack.append(pairs[c])
        elif c == stack[-1]:
            stack.pop()
        j += 1
    return j


__all__ = ["close_group", "close_quote", "commands"]
