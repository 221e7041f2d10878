"""The environment protocol and the check that turns a user env's mistakes into one clear error.

Gymnasium's `Env` was considered: its `step` returns five values over array observations and its
spaces describe tensors, while an LLM environment exchanges text. A four-method Protocol says what
the agent loop needs and nothing more (a gymnasium toy-text env is wrapped in a few lines).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from posttrain.errors import UserError


class EnvError(UserError):
    """A user environment raised or returned something the agent loop cannot use.

    The message names the environment (its `custom_envs` tag and class), the seed and the turn, so
    the failing episode can be replayed by hand with `reset(seed)` and the same actions."""


@runtime_checkable
class Env(Protocol):
    """A text environment. One instance runs one episode at a time; `reset` starts a new one."""

    def reset(self, seed: int) -> str:
        """Start an episode determined by `seed` (the same seed, the same episode) and return the
        first observation."""
        ...

    def step(self, action_text: str) -> tuple[str, float, bool, dict[str, Any]]:
        """Apply the model's action; return (observation, reward, done, info).

        info may hold ``success`` (bool: the episode's goal was reached; validation counts it) and
        ``action_is_valid`` (bool: False adds the env's format penalty)."""
        ...


# Optional methods (not part of the Protocol: the loop checks for them):
#   state() -> Hashable: the environment's current state. GiGPO (adv_estimator: gigpo) groups the
#       turns of an env group taken in equal states; without it the observation text stands in.
#   suffix() -> str | None: text written after the current observation where ROLL's env managers write
#       an environment's info["suffix"] (GEM's task suffix): after it in prompt_mode observation_window,
#       as the {suffix} field of a conversation's agent_template. Read after the reset and each step.
#   tools() -> list[dict] | None: in prompt_mode messages, the tool schemas the chat template writes into
#       every prompt (an OpenReward session's tools). Read after the reset.
#   expert_action() -> str: a planner's action in the current state; `posttrain make-env-data`
#       writes expert trajectories for an SFT warm-up with it (posttrain.envs.expert).
# And on the class:
#   check_runtime() (a static method): raises ValueError naming what this machine lacks to play the
#       environment (a package, a Java runtime); `config plan` and the run call it when they read the
#       custom_envs entry, before any environment is built.


@dataclass(frozen=True)
class StepResult:
    """One checked `Env.step` result."""

    observation: str | list[dict[str, str]]
    reward: float
    done: bool
    info: dict[str, Any] = field(default_factory=dict)


def where(name: str, seed: int, turn: int | None) -> str:
    """'environment X (seed S, turn K)': how every env error starts."""
    at = "reset" if turn is None else f"turn {turn}"
    return f"environment {name} (seed {seed}, {at})"


def _is_messages(value: Any) -> bool:
    return isinstance(value, list) and all(
        isinstance(m, dict) and isinstance(m.get("role"), str) and isinstance(m.get("content"), str) for m in value)


def is_image(value: Any) -> bool:
    """Whether an observation is a picture: an RGB array (height, width, 3) of uint8, as gym's
    ``render_mode: rgb_array`` gives, or a PIL image. The agent loop shows it to a vision-language
    policy (posttrain.rollout.episode_images)."""
    shape = getattr(value, "shape", None)
    if shape is not None:
        return len(shape) == 3 and shape[2] == 3 and str(getattr(value, "dtype", "")) == "uint8"
    return type(value).__module__.startswith("PIL.") and callable(getattr(value, "convert", None))


def check_observation(value: Any, name: str, seed: int, turn: int | None, messages: bool = False) -> Any:
    """A str (one user turn), an image (`is_image`) or, after an action, a list of chat messages
    ({role, content}: a tool env's tool answers) rendered as they are. With `messages` (prompt_mode
    messages) the observation is the whole conversation so far, a non-empty list of chat messages, at
    the reset too."""
    if messages:
        if not value or not _is_messages(value):
            raise EnvError(f"{where(name, seed, turn)}: in prompt_mode messages the observation must be the conversation so far, a "
                           f"non-empty list of {{'role': str, 'content': str}} messages, got {type(value).__name__}: {value!r:.80}")
        return value
    if turn is not None and _is_messages(value):
        return value
    if not isinstance(value, str) and not is_image(value):
        raise EnvError(f"{where(name, seed, turn)}: the observation must be a str or an image (an RGB uint8 array of shape "
                       f"(height, width, 3) or a PIL image), got {type(value).__name__}: {value!r:.80}")
    return value


def check_step(value: Any, name: str, seed: int, turn: int, messages: bool = False) -> StepResult:
    """`value` as a `StepResult`, or an `EnvError` saying what is wrong with it.

    >>> check_step(("ok", 1, False, {}), "walk", 3, 1).reward
    1.0
    >>> check_step(("ok", 1.0), "walk", 3, 1)
    Traceback (most recent call last):
    ...
    posttrain.envs.base.EnvError: environment walk (seed 3, turn 1): step() must return (observation, reward, done, info), got a tuple of 2
    """
    head = where(name, seed, turn)
    if not isinstance(value, tuple) or len(value) != 4:
        got = f"a tuple of {len(value)}" if isinstance(value, tuple) else type(value).__name__
        raise EnvError(f"{head}: step() must return (observation, reward, done, info), got {got}")
    observation, reward, done, info = value
    check_observation(observation, name, seed, turn, messages)
    if isinstance(reward, bool) or not isinstance(reward, (int, float)) or not math.isfinite(float(reward)):
        raise EnvError(f"{head}: the reward must be a finite number, got {reward!r:.80}")
    if not isinstance(done, bool):
        raise EnvError(f"{head}: done must be a bool, got {type(done).__name__}: {done!r:.80}")
    if not isinstance(info, dict):
        raise EnvError(f"{head}: info must be a dict, got {type(info).__name__}")
    return StepResult(observation, float(reward), done, info)
