"""verl's DAPO reward manager: the naive manager's scoring, with every sample's ``acc`` recorded.

verl's DAPO manager (``reward_model.reward_manager: dapo``) scores one sample at a time in-process,
as the naive manager does, and records ``acc`` for every sample: the function's own ``acc`` when it
returns a dict with one, else its score (a function that returns a number). DAPO's overlong penalty,
which verl's manager adds from its ``overlong_buffer_cfg``, is `reward.overlong_buffer` in posttrain,
added to the scores of every manager (posttrain.trainer.rewarding). A sample whose scoring failed
(on_error: fixed) gets the failure reward as its acc too.
"""

from __future__ import annotations

import math
from typing import Any, Callable

from posttrain.rewards.naive import NaiveRewardManager
from posttrain.rewards.types import RewardInput, RewardOutput


class DapoRewardManager:
    """Scores like `NaiveRewardManager` and fills ``acc`` (the module docstring says with what).

    >>> manager = DapoRewardManager(lambda data_source, solution_str, ground_truth, extra_info: float(solution_str == ground_truth))
    >>> manager.score([RewardInput("t", "4", "4", index=0), RewardInput("t", "5", "4", index=1)]).extra
    {'acc': [1.0, 0.0]}
    """

    def __init__(self, fn: Callable[..., Any], *, on_error: str = "raise", failure_reward: float = 0.0, timeout_s: float = 60.0):
        self.naive = NaiveRewardManager(fn, on_error=on_error, failure_reward=failure_reward, timeout_s=timeout_s)

    def score(self, samples: list[RewardInput]) -> RewardOutput:
        out = self.naive.score(samples)
        acc = out.extra.get("acc", [math.nan] * len(out.scores))  # NaN: the sample returned no acc
        out.extra["acc"] = [s if math.isnan(a) else a for a, s in zip(acc, out.scores)]
        return out

    def close(self) -> None:
        self.naive.close()
