"""What part of a decoded response the built-in scorers grade.

A response reaches a scorer as the decoded completion, with or without special tokens (depending on
`skip_special_tokens`), possibly with padding text or a trailing newline after <|im_end|>. Every
built-in task grades exactly this: the text before the first end-of-turn marker (<|im_end|> or
<|endoftext|>), stripped of surrounding whitespace. So "13359<|im_end|>\\n" and " 13359 " grade as
"13359", but "13359\\nmore text" grades as all of it: an answer that keeps going after the digits
is wrong. (An earlier version graded the first line only, and RL on the sort task learned to append
junk after a newline instead of ending its turn: a lenient extractor is a reward hack waiting.)
An empty or whitespace-only response grades as "".

`last_boxed` finds the ``\\boxed{...}`` answer of a math response (the math scorers and the
`roll_math` environment read it).
"""

from __future__ import annotations

END_MARKERS = ("<|im_end|>", "<|endoftext|>")


def extract_answer(solution_str: str | None) -> str:
    """The graded answer of a decoded response (see the module docstring).

    >>> extract_answer(" 13359<|im_end|>\\n<|endoftext|>")
    '13359'
    >>> extract_answer("\\n19\\n")
    '19'
    >>> extract_answer("19\\nbecause 12+7=19")
    '19\\nbecause 12+7=19'
    >>> extract_answer(None)
    ''
    """
    if not solution_str:
        return ""
    text = solution_str
    for marker in END_MARKERS:
        text = text.split(marker, 1)[0]
    return text.strip()


def last_boxed(text: str, spaced: bool = True) -> str | None:
    """The last boxed expression of `text` with its mark (``\\boxed{...}``, ``\\boxed ...`` or
    ``\\fbox{...}``), or None. ``spaced=False`` does not read the ``\\boxed ...`` form (it is then
    a mark like any other, whose next braces are taken).

    >>> last_boxed("so \\\\boxed{1} or \\\\boxed{\\\\frac{1}{2}}.")
    '\\\\boxed{\\\\frac{1}{2}}'
    """
    if spaced and "\\boxed " in text:  # the spaced form wins wherever it is, up to the next math delimiter
        return "\\boxed " + text.split("\\boxed ")[-1].split("$")[0]
    start = text.rfind("\\boxed")
    if start < 0:
        start = text.rfind("\\fbox")
        if start < 0:
            return None
    depth = 0
    for i in range(start, len(text)):
        if text[i] == "{":
            depth += 1
        elif text[i] == "}":
            depth -= 1
            if depth == 0:
                return text[start: i + 1]
    return None  # an unclosed brace: no answer
