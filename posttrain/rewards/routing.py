"""Reward workers routed by tag: each sample goes to every worker whose tags include its own.

A run with several domains (math, code, multiple choice, ...) scores each with its own scorer.
Each sample carries its domain tag (verl's ``data_source``, ROLL's ``tag`` column: the
``data.reward_fn_key`` column); each worker names the tags it scores (``tag_included``). The router
splits a batch by tag, lets every worker score its share with its own reward manager (workers
whose manager is a process pool score side by side, in threads that wait on their pools; in-process
workers take turns on the calling thread, where their time limit can use SIGALRM), and merges:

    reward = sum over the workers w that claim the sample's tag of
             weight_w x (score_w + response_length_penalty_coef_w x length_reward(response tokens))

``length_reward`` is ROLL's: -0.5 below 100 tokens, rising linearly to 0 at 400 tokens and above.
Failures follow ``reward.on_error`` in each worker's manager and are counted per worker; the output
carries a `WorkerTally` per worker (``reward/<worker>/mean``, ``count``, ``failures``, ``time_s``).
A tag no worker claims is refused before training (`check_tags`); one that appears later (a custom
dataset) stops the batch with the same message.
"""

from __future__ import annotations

import math
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from posttrain.errors import DataError
from posttrain.rewards.registry import RewardManager
from posttrain.rewards.types import RewardInput, RewardOutput, WorkerTally

SHORT_TOKENS, LONG_TOKENS = 100, 400  # ROLL's length reward ramps between these response lengths


def length_reward(tokens: int) -> float:
    """ROLL's response-length reward: -0.5 for a short response, 0 for a long one.

    >>> [length_reward(n) for n in (10, 100, 250, 400, 900)]
    [-0.5, -0.5, -0.25, 0.0, 0.0]
    """
    if tokens < SHORT_TOKENS:
        return -0.5
    if tokens > LONG_TOKENS:
        return 0.0
    return 0.5 * (tokens - LONG_TOKENS) / (LONG_TOKENS - SHORT_TOKENS)  # -0.5 at 100 tokens, 0 at 400


@dataclass
class RoutedWorker:
    """One reward worker: its manager (which owns the scorer and the failure policy) and routing."""

    name: str
    manager: RewardManager
    tags: tuple[str, ...]
    weight: float = 1.0
    length_penalty_coef: float = 0.0
    in_process: bool = True  # a naive manager: scored on the calling thread


class RewardRouter:
    """Scores a batch with the workers that claim each sample's tag; a `RewardManager` itself."""

    def __init__(self, workers: list[RoutedWorker]):
        if not workers:
            raise ValueError("a reward router needs at least one worker")
        self.workers = workers
        self.by_tag: dict[str, list[RoutedWorker]] = {}
        for worker in workers:
            for tag in worker.tags:
                self.by_tag.setdefault(tag, []).append(worker)

    def unclaimed_message(self, tag: str, where: str) -> str:
        """The error for a tag no worker claims, naming the tag, where it was found and the workers."""
        claims = "; ".join(f"{w.name}: {list(w.tags)}" for w in self.workers)
        return (
            f"{where}: tag {tag!r} (the data.reward_fn_key column) is claimed by no reward worker "
            f"(reward.workers tag_included: {claims}); add it to a worker's tag_included or drop those rows"
        )

    def check_tags(self, tags: dict[str, str]) -> None:
        """``tags``: each tag in some data and where it first occurs; a DataError for the first one
        no worker claims."""
        for tag, where in tags.items():
            if tag not in self.by_tag:
                raise DataError(self.unclaimed_message(tag, where))

    def score(self, samples: list[RewardInput]) -> RewardOutput:
        """Scores of ``samples`` in order, summed over their workers; extra metrics merged."""
        shares: dict[str, list[int]] = {w.name: [] for w in self.workers}
        for position, sample in enumerate(samples):
            claimed = self.by_tag.get(sample.data_source)
            if not claimed:
                raise DataError(self.unclaimed_message(sample.data_source, f"sample {sample.index}"))
            for worker in claimed:
                shares[worker.name].append(position)
        outputs = self._run_all(samples, shares)
        return self._merge(samples, shares, outputs)

    def close(self) -> None:
        for worker in self.workers:
            worker.manager.close()

    def _run_all(self, samples: list[RewardInput], shares: dict[str, list[int]]) -> dict[str, tuple[RewardOutput, float]]:
        """Each worker's output on its share and its seconds: pool workers in threads, the rest here."""
        busy = [w for w in self.workers if shares[w.name]]
        pooled = [w for w in busy if not w.in_process]
        outputs: dict[str, tuple[RewardOutput, float]] = {}
        with ThreadPoolExecutor(max_workers=max(1, len(pooled))) as threads:
            futures = {w.name: threads.submit(self._run_one, w, samples, shares[w.name]) for w in pooled}
            for worker in busy:
                if worker.in_process:
                    outputs[worker.name] = self._run_one(worker, samples, shares[worker.name])
            for name, future in futures.items():
                outputs[name] = future.result()  # re-raises a worker's error (on_error=raise) here
        return outputs

    @staticmethod
    def _run_one(worker: RoutedWorker, samples: list[RewardInput], rows: list[int]) -> tuple[RewardOutput, float]:
        start = time.perf_counter()
        out = worker.manager.score([samples[i] for i in rows])
        return out, time.perf_counter() - start

    def _merge(
        self, samples: list[RewardInput], shares: dict[str, list[int]], outputs: dict[str, tuple[RewardOutput, float]]
    ) -> RewardOutput:
        scores = [0.0] * len(samples)
        extra: dict[str, list[float]] = {}
        tallies: dict[str, WorkerTally] = {}
        failures = 0
        for worker in self.workers:  # config order: the first worker with a value for a key gives it
            if worker.name not in outputs:
                tallies[worker.name] = WorkerTally()
                continue
            out, seconds = outputs[worker.name]
            penalty_sum = 0.0
            for position, score in zip(shares[worker.name], out.scores):
                penalty = worker.length_penalty_coef * length_reward(samples[position].response_length)
                scores[position] += worker.weight * (score + penalty)
                penalty_sum += penalty
            for key, values in out.extra.items():
                column = extra.setdefault(key, [math.nan] * len(samples))
                for position, value in zip(shares[worker.name], values):
                    if math.isnan(column[position]):
                        column[position] = value
            failures += out.num_failures
            tallies[worker.name] = WorkerTally(len(out.scores), sum(out.scores), out.num_failures, penalty_sum, seconds)
        return RewardOutput(scores, extra, failures, tallies)


def label_worker(manager: Any, name: str) -> None:
    """Name the worker in the manager's failure messages ("... (reward worker 'math') raised ...")."""
    policy = getattr(manager, "policy", None)
    if policy is not None:
        policy.fn_label = f"{policy.fn_label} (reward worker {name!r})"
