"""Metrics of one RL step and of a validation pass, computed from the typed records."""

from __future__ import annotations

import time
from collections import Counter, defaultdict
from contextlib import AbstractContextManager, contextmanager, nullcontext
from typing import Callable, Iterator

import torch

from posttrain.algorithms import masked_mean
from posttrain.records import RolloutBatch


class PhaseTimer:
    """Wall time per phase of the step, reported as `timing/<phase>_s`.

    `watch`, when given, is entered around every phase with the phase's name: the one place where
    per-phase observation (peak memory, profiler ranges: posttrain.trainer.throughput) hooks in,
    so the step names each phase once."""

    def __init__(self, watch: Callable[[str], AbstractContextManager] | None = None) -> None:
        self.seconds: dict[str, float] = defaultdict(float)
        self.watch = watch
        self.start = time.perf_counter()
        self.end: float | None = None

    @contextmanager
    def __call__(self, phase: str) -> Iterator[None]:
        t0 = time.perf_counter()
        try:
            with self.watch(phase) if self.watch is not None else nullcontext():
                yield
        finally:
            self.seconds[phase] += time.perf_counter() - t0

    def elapsed(self) -> float:
        """Seconds from the timer's creation to the first call of `elapsed` (or `metrics`)."""
        if self.end is None:
            self.end = time.perf_counter()
        return self.end - self.start

    def metrics(self) -> dict[str, float]:
        out = {f"timing/{k}_s": v for k, v in self.seconds.items()}
        out["timing/step_s"] = self.elapsed()
        return out


def _stats(prefix: str, values: torch.Tensor) -> dict[str, float]:
    values = values.float()
    return {f"{prefix}/mean": float(values.mean()), f"{prefix}/max": float(values.max()), f"{prefix}/min": float(values.min())}


def batch_metrics(batch: RolloutBatch, scores: torch.Tensor, max_new_tokens: int) -> dict[str, float]:
    """Scores, rewards, advantages, returns, values and lengths of a rollout batch (none of a batch
    whose every group was dropped: its step learned nothing)."""
    if len(batch) == 0:
        return {}
    mask = batch.response_mask
    lengths = mask.sum(1)  # (B,)
    valid = lengths > 0
    m: dict[str, float] = {}
    m.update(_stats("critic/score", scores))
    m.update(_stats("critic/rewards", batch.token_level_rewards.sum(1)))
    if batch.advantages is not None and bool(valid.any()):
        adv = batch.advantages[mask > 0]
        ret = batch.returns[mask > 0]
        m.update(_stats("critic/advantages", adv))
        m.update(_stats("critic/returns", ret))
    if batch.values is not None and bool(valid.any()):
        m.update(_stats("critic/values", batch.values[mask > 0]))
    m.update(_stats("response_length", lengths))
    m["response_length/clip_ratio"] = float((lengths >= max_new_tokens).float().mean())
    m.update(_stats("prompt_length", batch.prompt_mask.sum(1)))
    if batch.ref_logprobs is not None and batch.old_logprobs is not None:
        m["actor/ref_kl"] = float(masked_mean(batch.old_logprobs - batch.ref_logprobs, mask))
    return m


def validation_metrics(
    data_sources: list[str], group_index: list[str], scores: list[float], answers: list[str], extra: dict[str, list[float]]
) -> dict[str, float]:
    """Per data source: mean@n, best@n and maj@n of the score (and of every extra metric's mean).

    maj@n takes, within each prompt's n responses, the score of the most frequent answer (ties
    broken by first occurrence); best@n the highest score; mean@n the average.
    """
    groups: dict[str, dict[str, list[int]]] = defaultdict(lambda: defaultdict(list))
    for i, (ds, uid) in enumerate(zip(data_sources, group_index)):
        groups[ds][uid].append(i)
    out: dict[str, float] = {}
    all_scores = []
    for ds, prompts in groups.items():
        n = max(len(rows) for rows in prompts.values())
        mean, best, maj = [], [], []
        for rows in prompts.values():
            s = [scores[i] for i in rows]
            mean.append(sum(s) / len(s))
            best.append(max(s))
            top = Counter(answers[i] for i in rows).most_common(1)[0][0]
            maj.append(next(scores[i] for i in rows if answers[i] == top))
        out[f"val/{ds}/score/mean@{n}"] = sum(mean) / len(mean)
        if n > 1:
            out[f"val/{ds}/score/best@{n}"] = sum(best) / len(best)
            out[f"val/{ds}/score/maj@{n}"] = sum(maj) / len(maj)
        for key, values in extra.items():
            kept = [values[i] for rows in prompts.values() for i in rows if values[i] == values[i]]
            if kept:
                out[f"val/{ds}/{key}/mean@{n}"] = sum(kept) / len(kept)
        all_scores.extend(mean)
    if all_scores:
        out["val/score/mean"] = sum(all_scores) / len(all_scores)
    return out
