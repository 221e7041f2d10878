"""Chat judges: reward workers that ask an auxiliary model (reward.auxiliary_models) for scores.

Two judges, each a reward manager of its own (worker_cls ``ruler_judge`` / ``rubric_judge``), call
the auxiliary model ``reward_kwargs.model`` names over its OpenAI-compatible endpoint
(posttrain.rewards.auxiliary), with posttrain's own prompt text (`RULER_SYSTEM`, `RUBRIC_SYSTEM`):

- **ruler_judge** (group-relative, after RULER, OpenPipe ART's "relative universal LLM-elicited
  rewards"; Trinity-RFT's math_ruler_workflow): the judge sees a task's whole group of responses (the
  samples of one prompt, ``RewardInput.group``) in one request, compares them and ends with a list
  of one score in [0, 1] per response (`parse_scores`: the last ``[...]`` list in the reply; scores
  are clipped to [0, 1]). The reference answer is not shown: the judge ranks the answers on their own.
- **rubric_judge** (per response; Trinity-RFT's rubric_judge_workflow, after "Rubrics as Rewards",
  arXiv:2507.17746): the judge sees the question, one response and the row's rubric
  (``extra_info[rubric_key]``: a list of ``{description, weight}`` objects, or of strings, or one
  string) and rates it 1-10 (`parse_rating`: the last ``Rating: n``, JSON ``"rating": n`` too);
  the score is rating / 10, as Trinity-RFT normalises it.

A reply that does not parse (no list, a list of the wrong length, a non-number; no rating, a rating
outside 1-10) never stops the run, whatever reward.on_error says: every response it was to score
gets ``reward_kwargs.fallback_score`` (default 0.0, Trinity-RFT's), is counted in
``reward/failures`` and ``reward/<worker>/failures``, and ``reward/judge_parsed`` logs the share of
responses whose score was read (Trinity-RFT's judge_success). A row without a rubric is bad data:
a DataError naming the row and the key.

Sampling: ``reward_kwargs.temperature`` (default 0: greedy) and ``max_tokens`` (default 512);
``instructions`` (ruler_judge) is text added after the task, e.g. the answer format the task asks for.
"""

from __future__ import annotations

import functools
import math
import re
from dataclasses import dataclass, field
from typing import Any, Callable

from posttrain.errors import ConfigError, DataError
from posttrain.rewards.types import RewardInput, RewardOutput
from posttrain.tasks.answers import END_MARKERS

# messages -> the judge's reply text
Chat = Callable[[list[dict[str, Any]]], str]

RULER_SYSTEM = (
    "You grade several answers to the same task against each other. Give every answer a score between 0 and 1: "
    "1 for an answer that solves the task fully and correctly, 0 for one that does not solve it at all, values in "
    "between for partial work. A better answer gets a higher score than a worse one."
)
RUBRIC_SYSTEM = (
    "You grade one response against a rubric: a list of criteria, each with a weight. Weigh all the criteria "
    "together; a response that misses heavily weighted criteria earns a low rating. Rate the response with a whole "
    "number from 1 (fails the rubric) to 10 (meets every criterion)."
)
_LIST = re.compile(r"\[([^\[\]]*)\]")
_RATING = re.compile(r"rating\"?\s*[:=]\s*\"?(-?\d+(?:\.\d+)?)", re.IGNORECASE)
_COMMON = {"model", "max_tokens", "temperature", "fallback_score"}
KWARGS = {"ruler_judge": _COMMON | {"instructions"}, "rubric_judge": _COMMON | {"rubric_key"}}


def parse_scores(reply: str, count: int) -> list[float] | None:
    """The ``count`` scores of a RULER reply's last ``[...]`` list, clipped to [0, 1]; None when absent or malformed.

    >>> parse_scores("B is better. [0.2, 0.9]", 2)
    [0.2, 0.9]
    >>> parse_scores("Scores: [1.5, -1]", 2), parse_scores("[0.5]", 2), parse_scores("[a, b]", 2), parse_scores("none", 1)
    ([1.0, 0.0], None, None, None)
    """
    found = _LIST.findall(reply)
    if not found:
        return None
    try:
        values = [float(part) for part in found[-1].split(",") if part.strip()]
    except ValueError:
        return None
    if len(values) != count or any(math.isnan(v) for v in values):
        return None
    return [min(1.0, max(0.0, v)) for v in values]


def parse_rating(reply: str) -> float | None:
    """A rubric reply's last rating in 1-10, divided by 10; None when absent or out of range.

    >>> [parse_rating(r) for r in ("Mostly right. Rating: 7", '{"rating": 10}', "Rating: 0", "good")]
    [0.7, 1.0, None, None]
    """
    found = _RATING.findall(reply)
    if not found:
        return None
    value = float(found[-1])
    return value / 10.0 if 1.0 <= value <= 10.0 else None


def clean_response(text: str) -> str:
    """A response as a judge reads it: without the end-of-turn markers the decoder keeps."""
    for marker in END_MARKERS:
        text = text.replace(marker, "")
    return text.strip()


def ruler_messages(question: str, responses: list[str], instructions: str = "") -> list[dict[str, str]]:
    """The RULER request for one task's group of responses."""
    task = question.strip() + (f"\n\n{instructions.strip()}" if instructions.strip() else "")
    answers = "\n\n".join(f"Answer {i + 1}:\n{text}" for i, text in enumerate(responses))
    user = (f"Task:\n{task}\n\n{answers}\n\nReason briefly if you need to, then end with one line holding a list of "
            f"{len(responses)} scores in the order of the answers: [score of answer 1, ..., score of answer {len(responses)}]")
    return [{"role": "system", "content": RULER_SYSTEM}, {"role": "user", "content": user}]


def rubric_text(rubric: Any) -> str:
    """A row's rubric as lines: ``{description, weight}`` objects, strings, or one string.

    >>> print(rubric_text([{"description": "cites a source", "weight": 2}, "is polite"]))
    - (weight 2) cites a source
    - is polite
    """
    items = [rubric] if isinstance(rubric, str) else list(rubric)
    lines = []
    for item in items:
        if isinstance(item, dict):
            weight = f"(weight {item['weight']}) " if "weight" in item else ""
            lines.append(f"- {weight}{item.get('description', item.get('criterion', ''))}")
        else:
            lines.append(f"- {item}")
    return "\n".join(lines)


def rubric_messages(question: str, response: str, rubric: str) -> list[dict[str, str]]:
    user = (f"Prompt:\n{question.strip()}\n\nResponse:\n{response}\n\nRubric:\n{rubric}\n\n"
            "End your reply with the line: Rating: <a whole number from 1 to 10>")
    return [{"role": "system", "content": RUBRIC_SYSTEM}, {"role": "user", "content": user}]


def _output(scores: list[float], parsed: list[bool]) -> RewardOutput:
    return RewardOutput(scores, {"judge_parsed": [float(p) for p in parsed]}, num_failures=parsed.count(False))


class RulerJudge:
    """Group-relative judge: one request per task group (module docstring)."""

    def __init__(self, chat: Chat, *, instructions: str = "", fallback_score: float = 0.0):
        self.chat, self.instructions, self.fallback = chat, instructions, float(fallback_score)

    def score(self, samples: list[RewardInput]) -> RewardOutput:
        groups: dict[str, list[int]] = {}
        for position, sample in enumerate(samples):  # a group's samples, in batch order
            groups.setdefault(sample.group or f"row{sample.index}", []).append(position)
        scores, parsed = [self.fallback] * len(samples), [False] * len(samples)
        for members in groups.values():
            reply = self.chat(ruler_messages(samples[members[0]].prompt, [clean_response(samples[i].solution_str) for i in members], self.instructions))
            values = parse_scores(reply, len(members))
            for i, value in zip(members, values or []):
                scores[i], parsed[i] = value, True
        return _output(scores, parsed)

    def close(self) -> None:
        pass


class RubricJudge:
    """Per-response judge against the row's rubric (module docstring)."""

    def __init__(self, chat: Chat, *, rubric_key: str = "rubric", fallback_score: float = 0.0):
        self.chat, self.rubric_key, self.fallback = chat, rubric_key, float(fallback_score)

    def score(self, samples: list[RewardInput]) -> RewardOutput:
        scores, parsed = [], []
        for sample in samples:
            rubric = (sample.extra_info or {}).get(self.rubric_key)
            if not rubric:
                raise DataError(f"sample {sample.index}: a rubric_judge reads the row's rubric from extra_info.{self.rubric_key}, and "
                                "this row has none; add it to the row's extra_info column (a list of {description, weight})")
            value = parse_rating(self.chat(rubric_messages(sample.prompt, clean_response(sample.solution_str), rubric_text(rubric))))
            scores.append(self.fallback if value is None else value)
            parsed.append(value is not None)
        return _output(scores, parsed)

    def close(self) -> None:
        pass


@dataclass(frozen=True)
class ChatJudgeSpec:
    """A checked chat-judge worker as plain data; `build` connects it to its model's server."""

    kind: str
    model: str
    options: dict[str, Any] = field(default_factory=dict)

    def build(self, urls: dict[str, str], chat: Chat | None = None) -> RulerJudge | RubricJudge:
        """The judge, calling auxiliary model ``model`` at ``urls[model]`` (``chat`` replaces the call in tests)."""
        from posttrain.rewards.auxiliary import chat as call

        o = self.options
        if chat is None and self.model not in urls:
            raise ConfigError(f"auxiliary model {self.model!r} is not being served; declare it in reward.auxiliary_models")
        chat = chat or functools.partial(_call, call, self.model, urls[self.model], o.get("max_tokens", 512), o.get("temperature", 0.0))
        if self.kind == "ruler_judge":
            return RulerJudge(chat, instructions=o.get("instructions", ""), fallback_score=o.get("fallback_score", 0.0))
        return RubricJudge(chat, rubric_key=o.get("rubric_key", "rubric"), fallback_score=o.get("fallback_score", 0.0))


def _call(call: Any, model: str, base_url: str, max_tokens: int, temperature: float, messages: list[dict[str, Any]]) -> str:
    return call(model, messages, max_tokens=max_tokens, temperature=temperature, base_url=base_url)


def chat_judge_spec(kind: str, reward_kwargs: dict[str, Any], where: str) -> ChatJudgeSpec:
    """Check a chat judge's reward_kwargs (``where``: reward.workers.<name>)."""
    unknown = sorted(set(reward_kwargs) - KWARGS[kind])
    if unknown:
        raise ConfigError(f"{where}.reward_kwargs: a {kind} takes {', '.join(sorted(KWARGS[kind]))}, not {', '.join(unknown)}")
    checks = {"max_tokens": (int, 1), "temperature": ((int, float), 0), "fallback_score": ((int, float), None)}
    for key, (kinds, low) in checks.items():
        value = reward_kwargs.get(key)
        if value is not None and (isinstance(value, bool) or not isinstance(value, kinds) or (low is not None and value < low)):
            raise ConfigError(f"{where}.reward_kwargs.{key}: expected a number{'' if low is None else f' >= {low}'}, got {value!r}")
    for key in ("instructions", "rubric_key"):
        if key in reward_kwargs and not isinstance(reward_kwargs[key], str):
            raise ConfigError(f"{where}.reward_kwargs.{key}: expected text, got {reward_kwargs[key]!r}")
    options = {k: v for k, v in reward_kwargs.items() if k != "model"}
    return ChatJudgeSpec(kind, str(reward_kwargs.get("model")), options)

