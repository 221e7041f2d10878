"""The experience pipeline: plain transforms of a scored batch between reward and training
(`data_processor.experience_pipeline.operators`, Trinity-RFT's experience operators).

Each operator takes the batch, its scores (B,) and decoded texts, and returns the rows to keep and
the (possibly reshaped) scores, with its metrics; the pipeline applies them in order. In a decoupled
run they run in the explorer, before the batch is written to the buffer (where Trinity-RFT runs
them); in the synchronous loop, right after the reward. A dropped row is a response the step does
not train on: the group estimators compute their statistics over the rows that stay.

Operators, by Trinity-RFT name where it has one:

- `reward_filter` (threshold 0.0): keep responses with score >= threshold;
- `reward_std_filter` (threshold 0.0): keep prompt groups of two or more whose score std (population)
  is > threshold;
- `invalid_reward_filter`: drop responses whose score is NaN;
- `reward_shaping_mapper` (reward_shaping_configs: [{stats_key, op_type ADD|SUB|MUL|DIV, weight}]):
  reshape the score with a number from the row's `extra_info[stats_key]` (rows without it keep
  theirs; DIV by 0 keeps it), as Trinity-RFT does with its experience info;
- `response_length_filter` (min_length 0, max_length null; posttrain's): keep responses whose token
  count is within [min, max];
- `dedup_filter` (posttrain's): keep the first of identical responses to the same prompt.
- `pass_rate_calculator`: keeps every row and reports how the step's prompts' pass rates (mean
  score over each prompt's responses) spread: the shares in (0, 1), in (1/16, 15/16), below 1,
  above 0, below 15/16 and above 1/16 (Trinity-RFT's selection metrics). In Trinity-RFT it also
  feeds the task selector; posttrain's data.selector is fed each step's scores without it.

Trinity-RFT's `data_juicer` operator is refused by `check_pipeline` with the reason.
"""

from __future__ import annotations

import importlib.util
import inspect
import math
from typing import Any, Callable, NamedTuple

import torch

from posttrain.records import RolloutBatch


class Kept(NamedTuple):
    """An operator's result: the rows to keep (a (B,) bool mask), the scores (B,), metrics."""

    keep: torch.Tensor
    scores: torch.Tensor
    metrics: dict[str, float]


def reward_filter(batch: RolloutBatch, scores: torch.Tensor, texts: list[str], *, threshold: float = 0.0) -> Kept:
    keep = scores >= threshold
    return Kept(keep, scores, {"filtered": float((~keep).sum())})


def reward_std_filter(batch: RolloutBatch, scores: torch.Tensor, texts: list[str], *, threshold: float = 0.0) -> Kept:
    keep = torch.zeros(len(scores), dtype=torch.bool)
    for uid in dict.fromkeys(batch.group_index):
        rows = torch.tensor([i for i, g in enumerate(batch.group_index) if g == uid])
        if len(rows) >= 2 and float(scores[rows].double().std(unbiased=False)) > threshold:
            keep[rows] = True
    return Kept(keep, scores, {"filtered": float((~keep).sum())})


def invalid_reward_filter(batch: RolloutBatch, scores: torch.Tensor, texts: list[str]) -> Kept:
    keep = ~torch.isnan(scores)
    return Kept(keep, scores, {"filtered": float((~keep).sum())})


_OPS: dict[str, Callable[[float, float], float]] = {
    "ADD": lambda r, v: r + v, "SUB": lambda r, v: r - v, "MUL": lambda r, v: r * v,
    "DIV": lambda r, v: r / v if v != 0 else r,
}


def reward_shaping_mapper(
    batch: RolloutBatch, scores: torch.Tensor, texts: list[str], *, reward_shaping_configs: list[dict[str, Any]] | None = None
) -> Kept:
    shaped = scores.clone()
    for i, info in enumerate(batch.extra_info):
        for rule in reward_shaping_configs or []:
            value = (info or {}).get(rule.get("stats_key"))
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                op = _OPS[str(rule.get("op_type", "ADD")).upper()]
                shaped[i] = op(float(shaped[i]), float(rule.get("weight", 1.0)) * value)
    diff = (shaped - scores).float()
    return Kept(torch.ones(len(scores), dtype=torch.bool), shaped, {"reward_diff/mean": float(diff.mean()) if len(diff) else 0.0})


def response_length_filter(
    batch: RolloutBatch, scores: torch.Tensor, texts: list[str], *, min_length: int = 0, max_length: int | None = None
) -> Kept:
    lengths = batch.response_mask.sum(1)  # (B,) real response tokens
    keep = (lengths >= min_length) & (lengths <= (math.inf if max_length is None else max_length))
    return Kept(keep, scores, {"filtered": float((~keep).sum())})


def dedup_filter(batch: RolloutBatch, scores: torch.Tensor, texts: list[str]) -> Kept:
    seen: set[tuple[str, str]] = set()
    keep = torch.zeros(len(scores), dtype=torch.bool)
    for i, key in enumerate(zip(batch.group_index, texts)):
        if key not in seen:
            seen.add(key)
            keep[i] = True
    return Kept(keep, scores, {"filtered": float((~keep).sum())})


def pass_rate_calculator(batch: RolloutBatch, scores: torch.Tensor, texts: list[str]) -> Kept:
    rewards: dict[str, list[float]] = {}
    for uid, score in zip(batch.group_index, scores.tolist()):
        rewards.setdefault(uid, []).append(score)
    rates = [sum(r) / len(r) for r in rewards.values()]  # each prompt's pass rate
    lo, hi = 1 / 16 + 1e-3, 15 / 16 - 1e-3  # Trinity's margins around one success / failure in 16

    def share(test: Callable[[float], bool]) -> float:
        return sum(map(test, rates)) / len(rates) if rates else 0.0

    metrics = {"valid_ratio": share(lambda p: 0 < p < 1), "strict_valid_ratio": share(lambda p: lo < p < hi),
               "<1_ratio": share(lambda p: p < 1), ">0_ratio": share(lambda p: p > 0),
               "<15_16_ratio": share(lambda p: p < hi), ">1_16_ratio": share(lambda p: p > lo)}
    return Kept(torch.ones(len(scores), dtype=torch.bool), scores, metrics)


EXPERIENCE_OPERATORS: dict[str, Callable[..., Kept]] = {
    "reward_filter": reward_filter, "reward_std_filter": reward_std_filter, "invalid_reward_filter": invalid_reward_filter,
    "reward_shaping_mapper": reward_shaping_mapper, "response_length_filter": response_length_filter, "dedup_filter": dedup_filter,
    "pass_rate_calculator": pass_rate_calculator,
}
REFUSED: dict[str, str] = {}


def _data_juicer_reason() -> str:
    if importlib.util.find_spec("data_juicer") is None:
        return "data-juicer operators need the data_juicer package, which is not installed"
    return "data-juicer operators are not wired into posttrain's pipeline yet (data_juicer is installed, but nothing here calls it)"


def check_pipeline(operators: Any, key: str) -> list[str]:
    """Problems of an operator list (empty when every operator exists with arguments it takes)."""
    if not isinstance(operators, list):
        return [f"{key}: expected a list of {{name, args}} operators, got {type(operators).__name__}"]
    problems = []
    for i, op in enumerate(operators):
        where = f"{key}[{i}]"
        name = op.get("name") if isinstance(op, dict) else None
        if name == "data_juicer":
            problems.append(f"{where}: data_juicer is refused: {_data_juicer_reason()}")
        elif name in REFUSED:
            problems.append(f"{where}: {name} is refused: {REFUSED[name]}")
        elif name not in EXPERIENCE_OPERATORS:
            problems.append(f"{where}: unknown operator {name!r}; known: {', '.join(EXPERIENCE_OPERATORS)}")
        else:
            allowed = [p for p in inspect.signature(EXPERIENCE_OPERATORS[name]).parameters if p not in ("batch", "scores", "texts")]
            bad = sorted(set(op.get("args") or {}) - set(allowed)) + sorted(set(op) - {"name", "args"})
            if bad:
                problems.append(f"{where}: {name} takes no {', '.join(bad)} (its arguments: {', '.join(allowed) or 'none'})")
    return problems


def run_pipeline(
    operators: list[dict[str, Any]], batch: RolloutBatch, scores: torch.Tensor, texts: list[str]
) -> tuple[RolloutBatch, torch.Tensor, list[str], dict[str, float]]:
    """Apply the operators in order; returns the kept rows, their scores and texts, and metrics
    `experience_pipeline/<i>_<name>/<metric>`."""
    metrics: dict[str, float] = {}
    for i, op in enumerate(operators):
        out = EXPERIENCE_OPERATORS[op["name"]](batch, scores, texts, **(op.get("args") or {}))
        rows = out.keep.nonzero().flatten()  # (B',) long
        batch, scores, texts = batch[rows], out.scores[rows], [texts[j] for j in rows.tolist()]
        metrics.update({f"experience_pipeline/{i}_{op['name']}/{k}": v for k, v in out.metrics.items()})
    return batch, scores, texts, metrics
