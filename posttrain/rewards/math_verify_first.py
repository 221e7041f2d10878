"""The ``math_verify_first`` scorer: RM-Gallery's ``math_verify_reward``, the reward of Trinity-RFT's
``math_rm_workflow`` with ``rm_gallery_reward`` (RM-Gallery: rm_gallery/gallery/rm/math/math.py).

    score = 1.0 if verify(parse(truth)[0], parse(response)[0]) else 0.0
            (0.0 when either side parses to nothing)

It differs from posttrain's ``math`` scorer in what it reads and compares:

- The **whole response** is parsed, stripped of surrounding blanks: a ``\\boxed{}`` answer inside
  ``<think>`` counts like any other (math-verify may even read two nearby boxes as one set). The
  end-of-turn marker posttrain's decoder keeps is removed first: the source framework's engine never
  hands it over.
- The **reference is parsed as it is**, with no ``$...$`` around it, so math-verify reads a bare
  reference by its plain-expression rules: ``2\\sqrt{2}`` reads as 2, ``1,2`` as 1.2, and ``\\pi``,
  ``A``, ``(1,2)`` or ``x+y`` as nothing, which scores every response 0. (The ``math`` scorer
  wraps a bare reference in ``$...$``.) Numbers, fractions and boxed or ``$``-delimited references
  read as expected.
- Both sides go through math-verify's ``parse`` with LaTeX and plain-expression extraction, in that
  order (its default extraction), and only the **first** item of each result is compared (math-verify
  returns the expression, then the text it matched).
- A reference that parses to nothing (an empty one, say) scores 0 rather than failing the row.
- The ground truth must be text: RM-Gallery calls ``.strip()`` on it outside its error handling, so
  a number or a list there fails the call (in Trinity-RFT the task fails); here it is a reward
  failure (``reward.on_error``). math-verify itself never raises out of ``parse`` or ``verify``: an
  expression it cannot read or compare is no parse, or unequal.

Time limits: RM-Gallery leaves math-verify's own (5 s for each ``parse``, 5 s for each comparison,
an expired one counting as no parse or unequal). They use SIGALRM, which the reward managers' time
limit owns, so they are off here and ``reward.timeout_s`` bounds the whole call; a call past it is a
reward failure rather than a 0. Under Trinity-RFT the workflow runs off the main thread (a Ray async
actor), where math-verify's SIGALRM limits cannot be set: ``parse`` raises there, and RM-Gallery
scores that call its ``timeout_score`` (0.0), whatever the response. This scorer gives the scores
RM-Gallery's code computes where math-verify can run.
"""

from __future__ import annotations

from typing import Any

from posttrain.rewards.think_answer import response_text

try:
    from math_verify import parse, verify
    from math_verify.parser import ExprExtractionConfig, LatexExtractionConfig
except ImportError as exc:  # the scorer names the extra that installs it, before training starts
    from posttrain.errors import ConfigError

    raise ConfigError(f"the math_verify_first scorer needs the math-verify package ({exc}); install it with: pip install 'posttrain[math]'") from exc

# LaTeX first, then plain expressions: RM-Gallery passes both, in this order, for each side.
EXTRACTION = (LatexExtractionConfig(), ExprExtractionConfig())
METRIC = "math_verify"  # the name RM-Gallery reports the score under (its reward's `name` field)


def first_parse(text: str) -> Any:
    """math-verify's first reading of ``text`` (an expression, or the matched text when none parses), else None.

    >>> first_parse("so x = \\\\frac{1}{2}")
    1/2
    >>> first_parse("no math here") is None
    True
    """
    parsed = parse(text, extraction_config=list(EXTRACTION), parsing_timeout=None)  # the manager's timeout bounds it
    return parsed[0] if parsed else None


def math_verify_first_score(data_source: str, solution_str: str, ground_truth: Any, extra_info: dict | None = None,
                            name: str = METRIC) -> dict[str, float]:
    """1.0 when the first expression of the whole response equals the first of the truth, else 0.0;
    the score is also logged under ``name`` (RM-Gallery's reward name, ``math_verify``).

    >>> math_verify_first_score("math", "<think>\\\\boxed{7}</think> \\\\boxed{3}", "3")  # both boxes read: the set {3, 7}
    {'score': 0.0, 'math_verify': 0.0}
    >>> math_verify_first_score("math", "It is \\\\boxed{\\\\frac{1}{2}}.<|im_end|>", " 0.5 ")
    {'score': 1.0, 'math_verify': 1.0}
    """
    if not isinstance(ground_truth, str):  # RM-Gallery strips it unguarded: a non-text truth fails the call there
        raise ValueError(f"the ground truth {ground_truth!r} is not text; RM-Gallery's math_verify_reward reads the "
                         "reference as a string (write the response_key column as text)")
    generated, reference = response_text(solution_str).strip(), ground_truth.strip()
    try:
        gold, pred = first_parse(reference), first_parse(generated)
        right = gold is not None and pred is not None and verify(gold, pred, timeout_seconds=None)
    except Exception:  # an error out of math-verify scores RM-Gallery's default timeout_score, 0.0
        right = False
    score = float(right)
    return {"score": score, name: score}
