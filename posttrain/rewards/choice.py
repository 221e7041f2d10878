"""The ``multiple_choice`` scorer: the option letter a response chose, against the row's answer.

Extraction, as ROLL's multiple-choice rule workers do it: the text after the last ``</think>`` (when
the model thinks first) is searched for the last ``\\boxed{...}``; without one, for the text after
the last "answer is"; without that, the whole response is read. The chosen option is the first
capital letter there, and the answer's option is the first capital letter of the ground truth
("B", "(B)" and "B. 42" all mean B). A boxed answer is the right *format*.

The reward of (right, format) follows ``reward_type`` (a reward worker's key):

==========  ==============  =============  ===============  ================
reward_type right, boxed    right, unboxed wrong, boxed     wrong, unboxed
==========  ==============  =============  ===============  ================
null        1               0              0                0
loose       1               1              -1               -1
soft        1               0.5            -0.5             -1
strict      1               -1             -1               -1
==========  ==============  =============  ===============  ================
"""

from __future__ import annotations

import re
from typing import Any

from posttrain.errors import ConfigError
from posttrain.tasks.answers import END_MARKERS

_BOXED = re.compile(r"\\boxed\{([^}]+)\}")
# (right, boxed) -> reward, per reward_type
TABLES: dict[str | None, dict[tuple[bool, bool], float]] = {
    None: {(True, True): 1.0, (True, False): 0.0, (False, True): 0.0, (False, False): 0.0},
    "loose": {(True, True): 1.0, (True, False): 1.0, (False, True): -1.0, (False, False): -1.0},
    "soft": {(True, True): 1.0, (True, False): 0.5, (False, True): -0.5, (False, False): -1.0},
    "strict": {(True, True): 1.0, (True, False): -1.0, (False, True): -1.0, (False, False): -1.0},
}


def extract_choice(response: str) -> tuple[str | None, bool]:
    """(chosen option letter or None, whether it was boxed).

    >>> extract_choice("<think>A or B?</think>The answer is \\\\boxed{B}")
    ('B', True)
    >>> extract_choice("I think the answer is (C) because...")
    ('C', False)
    >>> extract_choice("no idea")
    (None, False)
    """
    text = response.rpartition("</think>")[2] if "</think>" in response else response
    for marker in END_MARKERS:
        text = text.replace(marker, "")
    boxed = _BOXED.findall(text)
    if boxed:
        part = boxed[-1]
    else:
        at = text.lower().rfind("answer is")
        part = text if at < 0 else text[at + len("answer is"):]
    letter = next((c for c in part if c.isupper()), None)
    return letter, bool(boxed)


def multiple_choice_score(
    data_source: str, solution_str: str, ground_truth: Any, extra_info: dict | None = None, reward_type: str | None = None
) -> dict[str, float]:
    """The reward of a multiple-choice answer (module docstring); ``acc`` is 1 for the right letter.

    >>> multiple_choice_score("mc", "\\\\boxed{B}", "B")
    {'score': 1.0, 'acc': 1.0, 'format': 1.0}
    >>> multiple_choice_score("mc", "The answer is B", "(B)", reward_type="soft")
    {'score': 0.5, 'acc': 1.0, 'format': 0.0}
    """
    if reward_type not in TABLES:
        raise ConfigError(f"multiple_choice: reward_type must be one of null, loose, soft, strict; got {reward_type!r}")
    truth = next((c for c in str(ground_truth) if c.isupper()), None)
    if truth is None:
        raise ValueError(f"the ground truth {ground_truth!r} names no option letter (A, B, C, ...)")
    letter, boxed = extract_choice(solution_str)
    right = letter == truth
    return {"score": TABLES[reward_type][(right, boxed)], "acc": float(right), "format": float(boxed)}
