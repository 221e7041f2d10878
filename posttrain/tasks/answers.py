"""What part of a decoded response the built-in scorers grade.

A response reaches a scorer as the decoded completion, with or without special tokens (depending on
`skip_special_tokens`), possibly with padding text or a trailing newline after <|im_end|>. Every
built-in task grades exactly this: the text before the first end-of-turn marker (<|im_end|> or
<|endoftext|>), stripped of surrounding whitespace. So "13359<|im_end|>\\n" and " 13359 " grade as
"13359", but "13359\\nmore text" grades as all of it: an answer that keeps going after the digits
is wrong. (An earlier version graded the first line only, and RL on the sort task learned to append
junk after a newline instead of ending its turn: a lenient extractor is a reward hack waiting.)
An empty or whitespace-only response grades as "".
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
