"""The engine registry: `rollout.name` -> the function that builds that engine.

A boring registry (STYLE.md): a module-level dict filled by a decorator, duplicates rejected, an
unknown name answered with the valid ones. Each engine module registers its builder when imported;
`posttrain.rollout.engines` imports them all, so look engines up there.

A builder takes the stage's config, the policy module the engine starts from (an HF causal LM;
an engine in another library may read only its weights), the tokenizer, the rollout seed and
whether `model` is a copy the engine may own, and returns a `RolloutEngine`.
"""

from __future__ import annotations

from typing import Any, Callable, Protocol

from torch import nn

from posttrain.errors import ConfigError
from posttrain.rollout.base import RolloutEngine


class EngineBuilder(Protocol):
    def __call__(self, cfg: Any, model: nn.Module, tokenizer: Any, *, seed: int, owns_weights: bool) -> RolloutEngine: ...


ENGINES: dict[str, EngineBuilder] = {}
# name -> what this machine lacks to run the engine with a config (one line), or None; checked at plan time
MACHINE_CHECKS: dict[str, Callable[[Any], str | None]] = {}


def register_engine(name: str, machine_check: Callable[[Any], str | None] | None = None) -> Callable[[EngineBuilder], EngineBuilder]:
    """Register an engine builder under `name` (the value of `rollout.name`), with the check of
    what the machine must have to run it (a package, a GPU, a version)."""

    def add(builder: EngineBuilder) -> EngineBuilder:
        if name in ENGINES:
            raise ValueError(f"rollout engine {name!r} is registered twice")
        ENGINES[name] = builder
        if machine_check is not None:
            MACHINE_CHECKS[name] = machine_check
        return builder

    return add


def engine_builder(name: str) -> EngineBuilder:
    """The builder registered as `name`; a ConfigError listing the valid names otherwise."""
    if name not in ENGINES:
        raise ConfigError(f"rollout.name={name!r}: no such rollout engine; valid: {', '.join(sorted(ENGINES))}")
    return ENGINES[name]
