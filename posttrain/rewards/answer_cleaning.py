"""Qwen2.5-Math's answer cleaning: the string normalisation Trinity-RFT's ``math_boxed_reward``
compares answers after (its ``trinity/common/rewards/qwen25_eval.py`` keeps a copy of Qwen2.5-Math's
evaluation code; the word-number step is the ``word2number`` package's).

`clean_answer` turns a boxed answer into a canonical string so that ``\\dfrac{1}{2}``, ``1/2`` and
``\\frac12`` compare equal, as do ``5\\text{ cm}``, ``5 cm`` and ``five``. It is plain string
rewriting, step by step in the order of the source, including its quirks (noted where they
surprise), because the scores must be the source's:

1. cut the ends, newlines, trailing dots, ``\\!``, dollar and percent signs;
2. LaTeX spellings to one form: arrays and bmatrix to pmatrix, tfrac/dfrac to frac, neq/leq/geq to
   ne/le/ge; ``\\left``/``\\right``, ``\\mbox{..}``, ``\\mathbf`` and degree marks removed; ``\\{`` to ``{``;
3. ``\\text{X}`` to X, then whole-word unit names removed (`UNITS`, twice over);
4. a text made of number words (``two hundred``) becomes its number (`word_number`);
5. a leading ``x =`` removed; inf/infinity to ``\\infty``; ``3.00`` to ``3``; ``.5`` to ``0.5``;
6. spaces removed, ``\\sqrt2`` to ``\\sqrt{2}``, ``\\frac12`` to ``\\frac{1}{2}``, ``3/4`` to
   ``\\frac{3}{4}``, one pair of outer braces or parentheses removed.

An empty result is None. `Unreadable` is raised where the source's word-number step fails with
an error other than "no number here" (``thousand five``): its caller then compares the raw strings.
"""

from __future__ import annotations

import re

# Unit words of MathQA, in the source's order (duplicates kept: each entry is one substitution, and
# the order can matter). They are regular expressions: the dots are wildcards, as in the source.
_UNIT_WORDS = (
    "east", "degree", "mph", "kmph", "ft", "m sqaure", " m east", "sq m", "deg", "mile", "q .", "monkey",
    "prime", "ratio", "profit of rs", "rd", "o", "gm", "p . m", "lb", "tile", "per", "dm", "lt", "gain", "ab",
    "way", "west", "a .", "b .", "c .", "d .", "e .", "f .", "g .", "h .", "t", "a", "h", "no change", "men",
    "soldier", "pie", "bc", "excess", "st", "inches", "noon", "percent", "by", "gal", "kmh", "c", "acre", "rise",
    "a . m", "th", "π r 2", "sq", "mark", "l", "toy", "coin", "sq . m", "gallon", "° f", "profit", "minw", "yr",
    "women", "feet", "am", "pm", "hr", "cu cm", "square", "v â € ™", "are", "rupee", "rounds", "cubic", "cc",
    "mtr", "s", "ohm", "number", "kmph", "day", "hour", "minute", "min", "second", "man", "woman", "sec", "cube",
    "mt", "sq inch", "mp", "∏ cm ³", "hectare", "more", "sec", "unit", "cu . m", "cm 2", "rs .", "rs", "kg", "g",
    "month", "km", "m", "cm", "mm", "apple", "liter", "loss", "yard", "pure", "year", "increase", "decrease", "d",
    "less", "Surface", "litre", "pi sq m", "s .", "metre", "meter", "inch",
)
UNITS = _UNIT_WORDS + tuple(u + "s" for u in _UNIT_WORDS if not u.endswith("s"))  # plurals follow, as in the source
# A unit is removed only as a whole word: at the start or after a non-word character, and before
# the end or a non-word character (both neighbours are kept).
_UNIT_PATTERNS = tuple(re.compile(r"(^|\W)" + unit + r"($|\W)") for unit in UNITS)

_ONES = ("zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten", "eleven", "twelve",
         "thirteen", "fourteen", "fifteen", "sixteen", "seventeen", "eighteen", "nineteen")
_TENS = ("twenty", "thirty", "forty", "fifty", "sixty", "seventy", "eighty", "ninety")
NUMBER_WORDS: dict[str, int] = {
    **{w: i for i, w in enumerate(_ONES)}, **{w: 20 + 10 * i for i, w in enumerate(_TENS)},
    "hundred": 100, "thousand": 1000, "million": 1_000_000, "billion": 1_000_000_000,
}
_SCALES = ("billion", "million", "thousand")


class Unreadable(Exception):
    """The source's cleaning fails on this text (its caller then compares the raw strings)."""


def _group(words: list[str]) -> int:
    """The value of the words before (or after) a scale word, by the source's rule for 1-4 words:
    ``a b c d`` is a*b + c + d, ``a b c`` a*b + c, ``a b`` a*b with a hundred in it (else a + b);
    one word, or five and more, is the first word's value."""
    if not words:
        raise Unreadable("a scale word with nothing before it")  # the source indexes an empty list
    n = [NUMBER_WORDS[w] for w in words]
    if len(n) == 4:
        return n[0] * n[1] + n[2] + n[3]
    if len(n) == 3:
        return n[0] * n[1] + n[2]
    if len(n) == 2:
        return n[0] * n[1] if 100 in n else n[0] + n[1]
    return n[0]


def word_number(text: str) -> int | float | None:
    """The number a text of number words spells (other words are skipped), or None when it has none
    or they are malformed (a scale word twice, or out of order).

    >>> word_number("two hundred and five"), word_number("one point two five"), word_number("x + 1")
    (205, 1.25, None)
    """
    text = text.replace("-", " ").lower()
    if text.isdigit():  # digits come back as their int (so "007" is 7); a digit int() cannot read is skipped
        try:
            return int(text)
        except ValueError:
            return None
    words = [w for w in text.strip().split() if w in NUMBER_WORDS or w == "point"]
    if not words or any(words.count(w) > 1 for w in (*_SCALES, "point")):
        return None
    decimals: list[str] = []
    if "point" in words:
        at = words.index("point")
        words, decimals = words[:at], words[at + 1:]
    at = {s: words.index(s) if s in words else -1 for s in _SCALES}
    b, m, t = at["billion"], at["million"], at["thousand"]
    if (t > -1 and (t < m or t < b)) or (m > -1 and m < b):
        return None
    total: int | float = 0
    if len(words) == 1:
        total = NUMBER_WORDS[words[0]]
    elif words:
        if b > -1:
            total += _group(words[:b]) * 1_000_000_000
        if m > -1:
            total += _group(words[b + 1 if b > -1 else 0:m]) * 1_000_000
        if t > -1:
            total += _group(words[(m if m > -1 else b) + 1 if (m > -1 or b > -1) else 0:t]) * 1000
        end = len(words) - 1
        # the source's order of tests: with "thousand" last, the words after "million" are read,
        # "thousand" among them ("two million three thousand" is 2004003, as in the source)
        if t > -1 and t != end:
            total += _group(words[t + 1:])
        elif m > -1 and m != end:
            total += _group(words[m + 1:])
        elif b > -1 and b != end:
            total += _group(words[b + 1:])
        elif t == m == b == -1:
            total += _group(words)
    if decimals:
        # digit words after "point" are the decimals; any other word there makes the part 0
        digits = [NUMBER_WORDS[w] for w in decimals if w in _ONES[:10]]
        total += float("0." + "".join(map(str, digits))) if len(digits) == len(decimals) else 0
    return total


def _fix_sqrt(s: str) -> str:
    return re.sub(r"\\sqrt\s*(\w+)", r"\\sqrt{\1}", s) if "\\sqrt" in s else s


def _fix_fracs(s: str) -> str:
    """``\\frac12`` -> ``\\frac{1}{2}``, ``\\frac1{2}`` -> ``\\frac{1}{2}``; a frac with under two
    characters after it leaves the whole text as it was."""
    head, *parts = s.split("\\frac")
    out = head
    for part in parts:
        out += "\\frac"
        if part.startswith("{"):
            out += part
        elif len(part) < 2:
            return s
        elif part[1] != "{":
            out += "{" + part[0] + "}{" + part[1] + "}" + part[2:]
        else:
            out += "{" + part[0] + "}" + part[1:]
    return out


def _fix_slash(s: str) -> str:
    """``a/b`` of two integers (or square roots) written plainly -> ``\\frac{a}{b}``."""
    parts = s.split("/")
    if len(parts) != 2:
        return s
    try:
        a, b = (p if "sqrt" in p else int(p) for p in parts)
    except ValueError:
        return s
    return f"\\frac{{{a}}}{{{b}}}" if s == f"{a}/{b}" else s


def _without_units(s: str) -> str:
    for _ in range(2):
        for pattern in _UNIT_PATTERNS:
            stripped = pattern.sub(r"\1\2", s)
            if stripped != "":  # a text that is only a unit word keeps it
                s = stripped
    return s


def clean_answer(answer: str) -> str | None:
    """The canonical form of one answer (module docstring), None when nothing is left.

    >>> clean_answer("\\\\dfrac{1}{2}"), clean_answer("1/2"), clean_answer("5\\\\text{ cm}"), clean_answer("five")
    ('\\\\frac{1}{2}', '\\\\frac{1}{2}', '5', '5')
    """
    s = str(answer).strip().replace("\n", "").rstrip(".")
    s = s.replace("\\!", "").replace("\\$", "").replace("$", "")
    s = s.replace("%", "").replace("\\%", "")  # "%" goes first, so "\\%" leaves its backslash (as the source)
    s = re.sub(r"\\begin\{array\}\{.*?\}", r"\\begin{pmatrix}", s)
    s = re.sub(r"\\end\{array\}", r"\\end{pmatrix}", s).replace("bmatrix", "pmatrix")
    s = s.replace("tfrac", "frac").replace("dfrac", "frac")
    s = s.replace("\\neq", "\\ne").replace("\\leq", "\\le").replace("\\geq", "\\ge")
    s = s.replace("\\left", "").replace("\\right", "").replace("\\{", "{").replace("\\}", "}")
    s = re.sub(r"\\mbox{.*?}", "", s).replace("\\mathbf", "")
    s = s.replace("^{\\circ}", "").replace("^\\circ", "")
    s = _without_units(re.sub(r"\\text\{(.*?)\}", r"\1", s))
    number = word_number(s)
    if number is not None:
        s = str(number)
    s = re.sub(r"^[a-zA-Z]\s*=\s*", "", s)
    # "inf" is replaced inside the "\infty" just written too: both sides get the same odd form
    s = s.replace("infinity", "\\infty").replace("inf", "\\infty")
    s = re.sub(r"(\d+)\.0+([^\d]|$)", r"\1\2", s)
    s = s.replace(" .", " 0.").replace("{.", "{0.")
    if s.startswith("."):
        s = "0" + s
    s = _fix_slash(_fix_fracs(_fix_sqrt(s.replace(" ", ""))))
    if (s.startswith("{") and s.endswith("}")) or (s.startswith("(") and s.endswith(")")):
        s = s[1:-1]
    return s.strip() or None
