"""The ``ifeval`` scorer: does the response follow the verifiable instructions its row names?

Each row's ground truth names its checks (ROLL's and open-instruct's IFEval layout): a mapping, or
its JSON text, ``{"func_name": "<check>", <the check's arguments>}``, or a list of such mappings (all
must pass). The response is read after the last ``</think>``, without end-of-turn markers. The score
is 1.0 when every check passes, else 0.0; ``pass_rate`` is the fraction passed. A check posttrain
does not know, or missing or malformed arguments, make the sample a reward failure
(``reward.on_error``), never a silent 0 (ROLL scores those 0).

The checks are posttrain's own implementations of the documented set in `CHECKS` (Google's IFEval
reference code needs NLTK data downloaded at run time, which posttrain never does). Counting
rules shared by several checks: words are whitespace-separated; sentences end at ``.``, ``!`` or
``?`` followed by a space or the end; paragraphs are separated by blank lines (``* * *`` lines for
``verify_paragraph_count``); ``quantifier`` is ``at least``, ``at most`` or ``around`` (within 10 %
of N, at least 1). Word matches are whole-word and case-insensitive. Not implemented:
``validate_response_language`` (it needs a language detector) and ROLL's n-gram repetition penalty.
"""

from __future__ import annotations

import inspect
import json
import re
from typing import Any, Callable

from posttrain.tasks.answers import END_MARKERS


def _count_ok(actual: int, n: int, quantifier: str) -> bool:
    """``actual`` against ``n`` under an IFEval quantifier."""
    if quantifier == "at least":
        return actual >= n
    if quantifier == "at most":
        return actual <= n
    if quantifier == "around":
        return abs(actual - n) <= max(1, round(0.1 * n))  # 10 % of N, and never stricter than +-1
    raise ValueError(f"quantifier must be 'at least', 'at most' or 'around', got {quantifier!r}")


def _words(text: str) -> list[str]:
    return text.split()


def _whole_word_count(text: str, word: str) -> int:
    return len(re.findall(rf"(?<!\w){re.escape(word)}(?!\w)", text, re.IGNORECASE))


def _sentences(text: str) -> list[str]:
    return [s for s in re.split(r"(?<=[.!?])\s+", text.strip()) if s.strip()]


def _paragraphs(text: str) -> list[str]:
    return [p for p in re.split(r"\n\s*\n", text.strip()) if p.strip()]


def verify_keywords(text: str, keyword_list: list[str]) -> bool:
    """Every keyword appears (case-insensitive, anywhere)."""
    return all(k.lower() in text.lower() for k in keyword_list)


def verify_keyword_frequency(text: str, word: str, N: int) -> bool:
    """``word`` appears exactly N times as a whole word."""
    return _whole_word_count(text, word) == int(N)


def validate_forbidden_words(text: str, forbidden_words: list[str]) -> bool:
    """None of the words appears as a whole word."""
    return all(_whole_word_count(text, w) == 0 for w in forbidden_words)


def verify_letter_frequency(text: str, letter: str, N: int) -> bool:
    """The letter appears exactly N times (case-insensitive)."""
    if len(letter) != 1:
        raise ValueError(f"letter must be one character, got {letter!r}")
    return text.lower().count(letter.lower()) == int(N)


def verify_paragraph_count(text: str, N: int) -> bool:
    """N non-empty paragraphs separated by ``* * *`` lines."""
    parts = re.split(r"^\s*\*\s\*\s\*\s*$", text.strip(), flags=re.MULTILINE)
    return all(p.strip() for p in parts) and len(parts) == int(N)


def validate_word_constraint(text: str, N: int, quantifier: str) -> bool:
    return _count_ok(len(_words(text)), int(N), quantifier)


def verify_sentence_constraint(text: str, N: int, quantifier: str) -> bool:
    return _count_ok(len(_sentences(text)), int(N), quantifier)


def validate_paragraphs(text: str, N: int, first_word: str, i: int) -> bool:
    """N blank-line-separated paragraphs, the i-th (from 1) starting with ``first_word``."""
    paragraphs = _paragraphs(text)
    if len(paragraphs) != int(N) or not 1 <= int(i) <= len(paragraphs):
        return False
    first = paragraphs[int(i) - 1].split()[0].strip(".,;:!?\"'*").lower()
    return first == first_word.lower()


def verify_postscript(text: str, postscript_marker: str) -> bool:
    """A line starting with the marker (e.g. ``P.S.``) and holding more than the marker."""
    lines = [line.strip() for line in text.splitlines()]
    return any(line.startswith(postscript_marker) and line[len(postscript_marker):].strip() for line in lines)


def validate_placeholders(text: str, N: int) -> bool:
    """At least N placeholders in square brackets, e.g. ``[address]``."""
    return len(re.findall(r"\[[^\[\]\n]+\]", text)) >= int(N)


def verify_bullet_points(text: str, N: int) -> bool:
    """Exactly N markdown bullets (lines starting with ``* `` or ``- ``)."""
    bullets = [line for line in text.splitlines() if re.match(r"^\s*[*-]\s+\S", line) and not re.match(r"^\s*\*\s\*\s\*", line)]
    return len(bullets) == int(N)


def validate_title(text: str) -> bool:
    """A title in double angle brackets, e.g. ``<<poem of joy>>``."""
    return re.search(r"<<[^<>\n]*\S[^<>\n]*>>", text) is not None


def validate_choice(text: str, options: list[str]) -> bool:
    """The response contains one of the options."""
    return any(option in text for option in options)


def validate_highlighted_sections(text: str, N: int) -> bool:
    """At least N markdown highlights, ``*text*`` or ``**text**``."""
    return len(re.findall(r"\*\*[^\n*]+\*\*|\*[^\n*]+\*", text)) >= int(N)


def validate_sections(text: str, N: int, section_splitter: str) -> bool:
    """Exactly N lines starting with the splitter (e.g. ``Section`` for ``Section 1``, ``Section 2``)."""
    return sum(1 for line in text.splitlines() if line.strip().startswith(section_splitter)) == int(N)


def validate_json_format(text: str) -> bool:
    """The whole response (a ``` fence around it allowed) is JSON."""
    body = re.sub(r"^```(?:json)?\s*|\s*```$", "", text.strip(), flags=re.IGNORECASE)
    try:
        json.loads(body)
    except ValueError:
        return False
    return True


def validate_repeat_prompt(text: str, original_prompt: str) -> bool:
    """The response starts with the request, unchanged."""
    return text.strip().startswith(original_prompt.strip())


def validate_two_responses(text: str) -> bool:
    """Two different non-empty responses separated by one ``******``."""
    parts = text.split("******")
    return len(parts) == 2 and all(p.strip() for p in parts) and parts[0].strip() != parts[1].strip()


def validate_uppercase(text: str) -> bool:
    return any(c.isalpha() for c in text) and text == text.upper()


def validate_lowercase(text: str) -> bool:
    return any(c.isalpha() for c in text) and text == text.lower()


def validate_frequency_capital_words(text: str, N: int, quantifier: str) -> bool:
    """Words in capitals only (``NOTE``, ``I``) counted against N."""
    return _count_ok(len(re.findall(r"\b[A-Z]+\b", text)), int(N), quantifier)


def validate_end(text: str, end_phrase: str) -> bool:
    """The response ends with the exact phrase, nothing after it."""
    return text.strip().endswith(end_phrase.strip())


def validate_quotation(text: str) -> bool:
    """The whole response is wrapped in double quotes."""
    body = text.strip()
    return len(body) >= 2 and body[0] == '"' and body[-1] == '"'


def validate_no_commas(text: str) -> bool:
    return "," not in text


CHECKS: dict[str, Callable[..., bool]] = {f.__name__: f for f in (
    verify_keywords, verify_keyword_frequency, validate_forbidden_words, verify_letter_frequency,
    verify_paragraph_count, validate_word_constraint, verify_sentence_constraint, validate_paragraphs,
    verify_postscript, validate_placeholders, verify_bullet_points, validate_title, validate_choice,
    validate_highlighted_sections, validate_sections, validate_json_format, validate_repeat_prompt,
    validate_two_responses, validate_uppercase, validate_lowercase, validate_frequency_capital_words,
    validate_end, validate_quotation, validate_no_commas,
)}


def run_check(text: str, constraint: dict[str, Any]) -> bool:
    """One check of a ground truth on a response; a ValueError names an unknown check or bad arguments.

    >>> run_check("a, b", {"func_name": "validate_no_commas"})
    False
    >>> run_check("Hello WORLD and YOU", {"func_name": "validate_frequency_capital_words", "N": 2, "quantifier": "at least"})
    True
    """
    name = constraint.get("func_name")
    if name not in CHECKS:
        known = "validate_response_language needs a language detector, which posttrain does not have; " if name == "validate_response_language" else ""
        raise ValueError(f"{known}unknown instruction check {name!r}; the ifeval scorer knows: {', '.join(CHECKS)}")
    check = CHECKS[name]
    wanted = [p for p in inspect.signature(check).parameters if p != "text"]
    missing = [p for p in wanted if constraint.get(p) is None]
    if missing:
        raise ValueError(f"instruction check {name} needs {', '.join(missing)} in the ground truth, got {constraint!r}")
    return bool(check(text, **{p: constraint[p] for p in wanted}))


def read_constraints(ground_truth: Any) -> list[dict[str, Any]]:
    """The checks a ground truth names (module docstring)."""
    value = json.loads(ground_truth) if isinstance(ground_truth, str) else ground_truth
    items = value if isinstance(value, list) else [value]
    if not items or not all(isinstance(c, dict) and "func_name" in c for c in items):
        raise ValueError(f"an ifeval row's ground truth must be {{func_name: ..., <arguments>}} or a list of them, got {str(ground_truth)[:120]!r}")
    return items


def ifeval_score(data_source: str, solution_str: str, ground_truth: Any, extra_info: dict | None = None) -> dict[str, float]:
    """1.0 when the response passes every check its ground truth names, else 0.0.

    >>> ifeval_score("ifeval", "<think>...</think>all lower case<|im_end|>", '{"func_name": "validate_lowercase"}')
    {'score': 1.0, 'pass_rate': 1.0}
    >>> ifeval_score("ifeval", "Two, words", [{"func_name": "validate_no_commas"}, {"func_name": "validate_word_constraint", "N": 2, "quantifier": "at most"}])
    {'score': 0.0, 'pass_rate': 0.5}
    """
    text = solution_str.rpartition("</think>")[2]
    for marker in END_MARKERS:
        text = text.replace(marker, "")
    text = text.strip()
    results = [run_check(text, c) for c in read_constraints(ground_truth)]
    return {"score": float(all(results)), "pass_rate": sum(results) / len(results)}
