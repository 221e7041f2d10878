"""`rg:NAME`: a reasoning-gym dataset as a one-answer environment (GEM 0.0.4's ``rg:`` environments).

Every dataset of reasoning-gym's factory is an env_type ``rg:NAME`` (``rg:letter_counting``,
``rg:basic_arithmetic``, ...; needs ``pip install 'posttrain[reasoning-gym]'``). The entry's env_config
takes GEM's two arguments: ``size`` items generated with ``seed`` (defaults 500 and 42, GEM's
registration). One episode is one question:

- ``reset(seed)`` picks the item GEM picks for a reset seed: Python's generator seeded with it
  chooses one of the ``size`` items, and its question is the observation;
- ``step(text)`` scores the content of the reply's last ``\\boxed{...}`` (braces matched; None when
  there is none, as GEM's extractor returns) with the dataset's own ``score_answer``: that is the
  reward, and the episode ends. ``success`` when the score is 1; ``action_is_valid`` False when no
  boxed answer was found (the entry's format_penalty, 0 unless set, is added to its score of 0).

GEM regenerates its dataset (with seed + resets so far) every ``size`` resets of one environment;
that is left out because it would make an episode depend on more than its seeds: the dataset is the
one env_config's seed makes, and the reset seed picks the item. Under ROLL the env manager builds
each group's environment with the group's own seed in place of env_config's ``seed``: the ROLL
dialect sets the entry's ``seed_per_group`` (posttrain.envs.spec), which does the same.
"""

from __future__ import annotations

import random
from typing import Any

from posttrain.envs.dataset_envs import boxed_content
from posttrain.envs.registry import register_env_family
from posttrain.errors import ConfigError

PREFIX = "rg:"
INSTALL = "pip install 'posttrain[reasoning-gym]' (or reasoning-gym)"
_CLASSES: dict[str, type] = {}  # one class per dataset name, made once


class ReasoningGymEnv:
    """One item of a reasoning-gym dataset per episode, answered once (see the module docstring)."""

    instruction = ""
    dataset_name = ""  # set on each rg:NAME class

    def __init__(self, size: int = 500, seed: int = 42):
        for name, value, least in (("size", size, 1), ("seed", seed, 0)):
            if isinstance(value, bool) or not isinstance(value, int) or value < least:
                raise ValueError(f"{name} must be an integer >= {least}, got {value!r}")
        import reasoning_gym

        try:
            self.dataset = reasoning_gym.create_dataset(self.dataset_name, size=size, seed=seed)
        except (TypeError, ValueError, AssertionError) as e:  # the dataset's own config check
            raise ValueError(f"reasoning-gym's {self.dataset_name} dataset refused size={size}, seed={seed}: {e}") from None
        self.item: dict[str, Any] | None = None

    def reset(self, seed: int) -> str:
        self.item = random.Random(seed).choice(self.dataset)  # GEM: the global generator seeded, then choice
        return str(self.item["question"])

    def state(self) -> str:
        return str(self.item["question"]) if self.item else ""

    def step(self, action_text: str) -> tuple[str, float, bool, dict[str, Any]]:
        assert self.item is not None, "reset first"
        answer = boxed_content(action_text)  # GEM's reading of the last box
        score = float(self.dataset.score_answer(answer=answer, entry=self.item))
        return "", score, True, {"action_is_valid": answer is not None, "success": score == 1.0}


@register_env_family(PREFIX, "a reasoning-gym dataset")
def reasoning_gym_class(name: str, key: str) -> type:
    """The environment class of reasoning-gym's dataset `name`; ConfigError (naming `key`) when the
    package is missing or has no such dataset."""
    if name not in _CLASSES:
        try:
            from reasoning_gym.factory import DATASETS
        except ImportError:
            raise ConfigError(f"{key}: {PREFIX}{name} is a dataset of the reasoning-gym package, which is not installed: {INSTALL}") from None
        if name not in DATASETS:
            raise ConfigError(f"{key}: reasoning-gym has no dataset {name!r}; its datasets: {sorted(DATASETS)}")
        _CLASSES[name] = type(f"ReasoningGym_{name}", (ReasoningGymEnv,), {"dataset_name": name, "__module__": __name__})
    return _CLASSES[name]
