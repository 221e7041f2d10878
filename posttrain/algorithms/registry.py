"""Name registries for advantage estimators and policy losses, and their result types.

A config string (`algorithm.adv_estimator: grpo`, `actor.policy_loss.loss_mode: vanilla`) selects a
function from a module-level dict. Users add their own with the same decorators the built-ins use::

    from posttrain.algorithms import register_advantage_estimator

    @register_advantage_estimator("my_baseline")
    def my_baseline(*, token_level_rewards, response_mask, **_):
        ...

Why two dicts and not a class: a dict is the whole mechanism, it can be printed, and the trainer never
branches on a name (STYLE.md points 2 and 15). Aliases point at the same function, so the ROLL and
Trinity-RFT spellings (`reinforceplusplus`, `ppo`) select the verl-named implementation.
"""

from __future__ import annotations

import difflib
import inspect
from typing import Callable, NamedTuple, TypeVar

import torch

from posttrain.errors import ConfigError

F = TypeVar("F", bound=Callable)


class AdvantageOutput(NamedTuple):
    """What every advantage estimator returns; unpacks as `(advantages, returns)`."""

    advantages: torch.Tensor  # (B, T) float32, zero on padding
    returns: torch.Tensor  # (B, T) float32, targets for the critic (equal to advantages if none)


class LossOutput(NamedTuple):
    """What every policy loss returns; unpacks as `(loss, metrics)`.

    `metrics` always holds `pg_clipfrac`, `ppo_kl` and `pg_clipfrac_lower` as Python floats (0.0 where
    a loss has no such notion), so loggers never need to know which loss ran.
    """

    loss: torch.Tensor  # () scalar, differentiable w.r.t. `logprob` only
    metrics: dict[str, float]


ADVANTAGE_ESTIMATORS: dict[str, Callable[..., AdvantageOutput]] = {}
POLICY_LOSSES: dict[str, Callable[..., LossOutput]] = {}
_CANONICAL: dict[int, list[str]] = {id(ADVANTAGE_ESTIMATORS): [], id(POLICY_LOSSES): []}


def _register(
    table: dict[str, Callable], kind: str, name: str, aliases: tuple[str, ...], **attributes: object
) -> Callable[[F], F]:
    """Decorator factory shared by both registries: rejects a name already taken by another function."""
    if not isinstance(name, str) or not name:
        raise TypeError(f"{kind} name must be a non-empty string, got {name!r}")
    if isinstance(aliases, str):
        raise TypeError(f"aliases of {kind} {name!r} must be a tuple of strings, not a string")

    def decorator(fn: F) -> F:
        if not callable(fn):
            raise TypeError(f"can only register a callable as {kind} {name!r}, got {fn!r}")
        for key in (name, *aliases):
            taken = table.get(key)
            if taken is not None and taken is not fn:
                raise ValueError(
                    f"{kind} {key!r} is already registered to {taken.__module__}.{taken.__qualname__}; "
                    f"pick another name"
                )
        for key in (name, *aliases):
            table[key] = fn
        if name not in _CANONICAL[id(table)]:
            _CANONICAL[id(table)].append(name)
        fn.registered_name = name  # type: ignore[attr-defined]
        fn.aliases = tuple(aliases)  # type: ignore[attr-defined]
        for attr, value in attributes.items():
            setattr(fn, attr, value)
        return fn

    return decorator


def register_advantage_estimator(
    name: str, aliases: tuple[str, ...] = (), *, needs_greedy_baseline: bool = False
) -> Callable[[F], F]:
    """Register an advantage estimator under `name` (and `aliases`).

    The function is called with keyword arguments only, always the same set (`token_level_rewards`,
    `response_mask`, `values`, `group_index`, `gamma`, `lam`, `norm_adv_by_std`, `epsilon`,
    `reward_baselines`, ...), so it must accept `**kwargs` and ignore what it does not read. It
    returns `AdvantageOutput`.

    `needs_greedy_baseline=True` asks the trainer for `reward_baselines` (B,): the score of one
    greedy response to each sample's prompt (ReMax). The trainer reads this flag through
    `estimator_needs_greedy_baseline` and never the estimator's name.
    """
    return _register(
        ADVANTAGE_ESTIMATORS, "advantage estimator", name, aliases, needs_greedy_baseline=needs_greedy_baseline
    )


def register_policy_loss(name: str, aliases: tuple[str, ...] = ()) -> Callable[[F], F]:
    """Register a policy loss under `name` (and `aliases`).

    The function is called with `old_logprob, logprob, advantages, response_mask, loss_agg_mode` plus
    only the options the user configured for it, as keywords; it declares each option explicitly so
    a misspelt option fails loudly (`policy_loss_options(name)` lists them). It returns `LossOutput`.
    """
    return _register(POLICY_LOSSES, "policy loss", name, aliases)


def _lookup(table: dict[str, Callable], kind: str, key: str, name: str) -> Callable:
    fn = table.get(name)
    if fn is not None:
        return fn
    valid = sorted(table)
    close = difflib.get_close_matches(str(name), valid, n=1)
    hint = f" (did you mean {close[0]!r}?)" if close else ""
    raise ConfigError(f"{key}: unknown {kind} {name!r}{hint}; valid names: {', '.join(valid)}")


def get_advantage_estimator(name: str) -> Callable[..., AdvantageOutput]:
    """The estimator registered as `name`; an unknown name raises `ConfigError` listing valid ones."""
    return _lookup(ADVANTAGE_ESTIMATORS, "advantage estimator", "algorithm.adv_estimator", name)


def estimator_needs_greedy_baseline(name: str) -> bool:
    """Whether the named estimator reads `reward_baselines`, the scores of greedy responses."""
    return bool(getattr(get_advantage_estimator(name), "needs_greedy_baseline", False))


def get_policy_loss(name: str) -> Callable[..., LossOutput]:
    """The policy loss registered as `name`; an unknown name raises `ConfigError` listing valid ones."""
    return _lookup(POLICY_LOSSES, "policy loss", "actor.policy_loss.loss_mode", name)


def advantage_estimator_names() -> list[str]:
    """Canonical (non-alias) estimator names in registration order."""
    return list(_CANONICAL[id(ADVANTAGE_ESTIMATORS)])


def policy_loss_names() -> list[str]:
    """Canonical (non-alias) policy-loss names in registration order."""
    return list(_CANONICAL[id(POLICY_LOSSES)])


_BASE_LOSS_ARGS = frozenset({"old_logprob", "logprob", "advantages", "response_mask", "loss_agg_mode"})


def policy_loss_options(name: str) -> frozenset[str]:
    """Keyword options the named loss accepts beyond the five every loss takes.

    The config layer uses this to refuse an option the chosen loss would ignore.
    """
    fn = get_policy_loss(name)
    params = inspect.signature(fn).parameters
    return frozenset(p for p in params if p not in _BASE_LOSS_ARGS)
