"""What part of a decoded response the built-in scorers grade.

A response reaches a scorer as the decoded completion, with or without special tokens (depending on
`skip_special_tokens`), possibly with padding text or a trailing newline after <|im_end|>. Every
built-in task grades exactly this: the text before the first end-of-turn marker (<|im_end|> or
<|endoftext|>), stripped of surrounding whitespace, then its first line. So "13359<|im_end|>\\n",
" 13359 " and "13359\\nmore text" all grade as "13359"; an empty or whitespace-only response grades
as "".
"""

from __future__ import annotations

END_MARKERS = ("<|im_end|>", "<|endoftext|>")


def extract_answer(solution_str: str | None) -> str:
    """The graded answer of a decoded response (see the module docstring).

    >>> extract_answer(" 13359<|im_end|>\\n<|endoftext|>")
    '13359'
    >>> extract_answer("\\n19\\nbecause 12+7=19")
    '19'
    >>> extract_answer(None)
    ''
    """
    if not solution_str:
        return ""
    text = solution_str
    for marker in END_MARKERS:
        text = text.split(marker, 1)[0]
    text = text.strip()
    return text.split("\n", 1)[0].strip()
