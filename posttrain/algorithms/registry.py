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
from dataclasses import dataclass
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


@dataclass(frozen=True)
class EstimatorNeeds:
    """What an advantage estimator reads beyond rewards, masks and groups; the roles of an RL stage
    are built from it (a critic for `values`, a reference policy for `ref_logprobs`, a greedy
    rollout for `reward_baselines`), never from the estimator's name."""

    values: bool = False  # per-token values V(s_t) of a critic trained alongside the actor (GAE)
    reference: bool = False  # per-token log-probs of the frozen reference policy
    greedy_baseline: bool = False  # the score of one greedy response to each row's prompt (ReMax)
    turns: bool = False  # per-turn spans, rewards and anchor states of an agentic (multi-turn) batch (GiGPO)
    sum_pi_squared: bool = False  # per-token sum_v pi(v)^2 of the policy before its update (one more actor pass)

    def describe(self) -> str:
        """The needs in words, for the generated docs ("" when it needs nothing extra)."""
        words = {"values": "critic values", "reference": "reference log-probs", "greedy_baseline": "a greedy baseline",
                 "turns": "an agentic stage's per-turn records",
                 "sum_pi_squared": "the actor's per-token sum of squared probabilities (one more forward pass)"}
        return ", ".join(text for key, text in words.items() if getattr(self, key))


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
    name: str, aliases: tuple[str, ...] = (), *, needs: EstimatorNeeds = EstimatorNeeds()
) -> Callable[[F], F]:
    """Register an advantage estimator under `name` (and `aliases`).

    The function is called with keyword arguments only, always the same set (`token_level_rewards`,
    `response_mask`, `values`, `ref_logprobs`, `group_index`, `gamma`, `lam`, `norm_adv_by_std`,
    `epsilon`, `reward_baselines`, `old_logprobs`, `sum_pi_squared`, `rollout_is_weights`, the per-turn `turn_index`/`turn_rewards`/`turn_states` of an
    agentic batch (else None) and `algorithm.gigpo`'s `step_weight`/`episode_weight`/`step_gamma`),
    so it must accept `**kwargs` and ignore what it does not read. It returns `AdvantageOutput`.

    `needs` declares the inputs that cost a role: `values` (B, T) from a critic, `ref_logprobs`
    (B, T) from a reference policy, `reward_baselines` (B,) from a greedy rollout; an input no
    role provides arrives as None; `sum_pi_squared` asks the actor for sum_v pi(v)^2 (B, T). The config checks and the trainer read
    `estimator_needs(name)`, so an alias builds the same roles as its canonical name.
    """
    if not isinstance(needs, EstimatorNeeds):
        raise TypeError(f"needs of advantage estimator {name!r} must be an EstimatorNeeds, got {needs!r}")
    return _register(ADVANTAGE_ESTIMATORS, "advantage estimator", name, aliases, needs=needs)


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


def estimator_needs(name: str) -> EstimatorNeeds:
    """What the estimator registered as `name` (or an alias) needs; a function put into the dict
    by hand, without the decorator, needs nothing extra. An unknown name raises `ConfigError`."""
    return getattr(get_advantage_estimator(name), "needs", EstimatorNeeds())


def get_policy_loss(name: str) -> Callable[..., LossOutput]:
    """The policy loss registered as `name`; an unknown name raises `ConfigError` listing valid ones."""
    return _lookup(POLICY_LOSSES, "policy loss", "actor.policy_loss.loss_mode", name)


def advantage_estimator_names() -> list[str]:
    """Canonical (non-alias) estimator names in registration order."""
    return list(_CANONICAL[id(ADVANTAGE_ESTIMATORS)])


def policy_loss_names() -> list[str]:
    """Canonical (non-alias) policy-loss names in registration order."""
    return list(_CANONICAL[id(POLICY_LOSSES)])


#: What the trainer passes every advantage estimator; its other keywords are its own options
#: (algorithm.adv_estimator_args). `epsilon` is passed too but an estimator may take it as an option.
ESTIMATOR_INPUTS = frozenset(
    {"token_level_rewards", "response_mask", "values", "ref_logprobs", "old_logprobs", "group_index", "gamma", "lam",
     "norm_adv_by_std", "reward_baselines", "sum_pi_squared", "rollout_is_weights",
     # an agentic batch's turn records and algorithm.gigpo's fields: the trainer passes them, not adv_estimator_args
     "turn_index", "turn_rewards", "turn_states", "step_weight", "episode_weight", "step_gamma",
     # algorithm.agentic_reward_norm's fields and algorithm.reward_clip, which step_reward applies per turn
     "norm_groups", "norm_method", "norm_mean_type", "norm_std_type", "reward_clip",
     # ref.teachers' log-probs, rows and coefficients (on_policy_distill with several teachers)
     "teacher_logprobs", "teacher_rows", "teacher_coefs"}
)


def estimator_options(name: str) -> frozenset[str]:
    """Keyword options of the estimator registered as `name` beyond `ESTIMATOR_INPUTS`."""
    params = inspect.signature(get_advantage_estimator(name)).parameters.values()
    return frozenset(p.name for p in params if p.kind is inspect.Parameter.KEYWORD_ONLY and p.name not in ESTIMATOR_INPUTS)


_BASE_LOSS_ARGS = frozenset({"old_logprob", "logprob", "advantages", "response_mask", "loss_agg_mode"})


def policy_loss_options(name: str) -> frozenset[str]:
    """Keyword options the named loss accepts beyond the five every loss takes.

    The config layer uses this to refuse an option the chosen loss would ignore.
    """
    fn = get_policy_loss(name)
    params = inspect.signature(fn).parameters
    return frozenset(p for p in params if p not in _BASE_LOSS_ARGS)
