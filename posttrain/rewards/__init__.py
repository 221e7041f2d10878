"""Reward computation: reward functions, managers that run them, reward models, token placement.

The trainer's path through this package::

    fn = load_reward_function(path, name, reward_kwargs)      # built-in task scorers when path is None
    manager = build_reward_manager("parallel", fn, num_workers=2, timeout_s=10.0, on_error="raise")  # or "naive"
    output = manager.score([RewardInput(data_source, solution_str, ground_truth, extra_info, index)])
    token_level_scores = place_scores(output.tensor(), response_mask)  # (B, T)

Torch-dependent names (`place_scores`, `RewardModelScorer`, `combine_scores`) are imported on first
use, so reward worker processes start without importing torch.
"""

from __future__ import annotations

from typing import Any

from posttrain.rewards.evaluate import check_return
from posttrain.rewards.function import RewardFunction, load_reward_function
from posttrain.rewards.naive import NaiveRewardManager
from posttrain.rewards.parallel import ParallelRewardManager
from posttrain.rewards.registry import (
    REWARD_MANAGERS,
    RewardManager,
    build_reward_manager,
    check_reward_manager,
    register_reward_manager,
)
from posttrain.rewards.types import RewardInput, RewardOutput

_LAZY = {
    "place_scores": "posttrain.rewards.placement",
    "RewardModelScorer": "posttrain.rewards.reward_model",
    "combine_scores": "posttrain.rewards.reward_model",
}

__all__ = [
    "REWARD_MANAGERS",
    "NaiveRewardManager",
    "ParallelRewardManager",
    "RewardFunction",
    "RewardInput",
    "RewardManager",
    "RewardOutput",
    "build_reward_manager",
    "check_return",
    "check_reward_manager",
    "load_reward_function",
    "register_reward_manager",
    *_LAZY,
]


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'posttrain.rewards' has no attribute {name!r}")
