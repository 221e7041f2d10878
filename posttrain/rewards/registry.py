"""Reward managers by name, as the config's ``reward.reward_manager`` selects them."""

from __future__ import annotations

import inspect
from typing import Any, Callable, Protocol

from posttrain.errors import ConfigError
from posttrain.rewards.dapo import DapoRewardManager
from posttrain.rewards.naive import NaiveRewardManager
from posttrain.rewards.parallel import ParallelRewardManager
from posttrain.rewards.types import RewardInput, RewardOutput


class RewardManager(Protocol):
    """What the trainer needs from a reward manager."""

    def score(self, samples: list[RewardInput]) -> RewardOutput: ...

    def close(self) -> None: ...


REWARD_MANAGERS: dict[str, Callable[..., RewardManager]] = {}


def register_reward_manager(name: str) -> Callable[[Callable[..., RewardManager]], Callable[..., RewardManager]]:
    """Decorator: make a manager class selectable by ``name``. A name can be registered once."""

    def add(cls: Callable[..., RewardManager]) -> Callable[..., RewardManager]:
        if name in REWARD_MANAGERS:
            raise ValueError(f"reward manager {name!r} is already registered ({REWARD_MANAGERS[name]!r})")
        REWARD_MANAGERS[name] = cls
        return cls

    return add


def build_reward_manager(name: str, fn: Callable[..., Any], **options: Any) -> RewardManager:
    """Build the manager called ``name`` around reward function ``fn``.

    Options are the manager's keyword arguments: ``on_error``, ``failure_reward`` and ``timeout_s``
    for all; ``num_workers`` for "parallel" only (the naive manager refuses it rather than ignore it).
    """
    return check_reward_manager(name, options)(fn, **options)


def check_reward_manager(name: str, options: dict[str, Any]) -> Callable[..., RewardManager]:
    """The manager class called ``name`` once its name and option names are checked, without
    building it (the parallel manager starts processes when built)."""
    if name not in REWARD_MANAGERS:
        raise ConfigError(
            f"reward.reward_manager: unknown reward manager {name!r}; "
            f"choose one of: {', '.join(sorted(REWARD_MANAGERS))}"
        )
    cls = REWARD_MANAGERS[name]
    accepted = inspect.signature(cls).parameters
    unknown = sorted(key for key in options if key not in accepted)
    if unknown:
        raise ConfigError(
            f"reward.reward_manager: the {name!r} manager does not use {', '.join(unknown)}"
            f" (it takes: {', '.join(k for k in accepted if k != 'fn')})"
        )
    return cls


register_reward_manager("naive")(NaiveRewardManager)
register_reward_manager("parallel")(ParallelRewardManager)
register_reward_manager("dapo")(DapoRewardManager)
