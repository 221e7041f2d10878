"""The task registry: each synthetic task registers a problem generator, a scorer and its options.

A task is two plain functions, kept side by side in one module so the scorer always matches the data:
``generate(rng, **options) -> Problem`` draws one problem, and ``score(solution_str, ground_truth,
extra_info=None) -> dict`` grades a decoded model response. Registering attaches the name, the
`data_source` written into every row ("posttrain/<name>"), the `ability` column and the options the
`make-data` command exposes.
"""

from __future__ import annotations

import hashlib
import random
from dataclasses import dataclass, field
from typing import Any, Callable

from posttrain.errors import ConfigError, DataError

DATA_SOURCE_PREFIX = "posttrain/"

Scorer = Callable[..., dict[str, float]]


@dataclass(frozen=True)
class Problem:
    """One drawn problem: the user message, the scorer's ground truth, and one correct response.

    `turns`: a task whose answer takes several turns (tool calls) gives the messages after the user's
    one correct conversation (assistant, tool, ..., assistant); its SFT rows then hold the whole
    conversation in a `messages` column (train with data.messages_key: messages)."""

    prompt: str
    ground_truth: str
    response: str
    turns: tuple[dict[str, str], ...] = ()
    images: tuple[bytes, ...] = ()  # PNG files of an image task, placed at the prompt's <image> markers

    @property
    def key(self) -> str:
        """What tells problems apart (test rows are kept out of training by it): the prompt, and the
        images of an image task, whose prompts may all be the same words."""
        if not self.images:
            return self.prompt
        return self.prompt + "|" + "|".join(hashlib.sha256(b).hexdigest()[:16] for b in self.images)


@dataclass(frozen=True)
class TaskOption:
    """An option of a task's generator; `make-data` turns it into ``--<name with dashes>``."""

    name: str
    default: Any
    help: str
    type: type = int
    nargs: str | None = None  # "+" for list options
    choices: tuple[Any, ...] | None = None


@dataclass(frozen=True)
class TaskSpec:
    """A registered task: generator, scorer and option declarations."""

    name: str
    description: str
    ability: str
    generate: Callable[..., Problem]
    score: Scorer
    options: tuple[TaskOption, ...] = field(default_factory=tuple)

    @property
    def data_source(self) -> str:
        return DATA_SOURCE_PREFIX + self.name

    @property
    def defaults(self) -> dict[str, Any]:
        return {o.name: o.default for o in self.options}

    def resolve_options(self, options: dict[str, Any] | None) -> dict[str, Any]:
        """Defaults overlaid with `options`; an unknown option name is refused with the valid ones."""
        merged = self.defaults
        for key, value in (options or {}).items():
            if key not in merged:
                known = ", ".join(merged) or "none"
                raise ConfigError(f"task {self.name!r} has no option {key!r}; its options are: {known}")
            merged[key] = value
        return merged

    def draw(self, rng: random.Random, options: dict[str, Any]) -> Problem:
        return self.generate(rng, **options)


TASKS: dict[str, TaskSpec] = {}


def register_task(
    name: str,
    *,
    description: str,
    ability: str,
    score: Scorer,
    options: tuple[TaskOption, ...] | list[TaskOption] = (),
) -> Callable[[Callable[..., Problem]], Callable[..., Problem]]:
    """Decorator registering a generator function under `name`; duplicates are a bug."""

    def decorate(generate: Callable[..., Problem]) -> Callable[..., Problem]:
        if name in TASKS:
            raise ValueError(f"task {name!r} is registered twice")
        TASKS[name] = TaskSpec(name, description, ability, generate, score, tuple(options))
        return generate

    return decorate


def get_task(name: str) -> TaskSpec:
    """The task called `name`, or a ConfigError listing the known tasks."""
    if name not in TASKS:
        raise ConfigError(f"unknown task {name!r}; known tasks: {', '.join(sorted(TASKS))}")
    return TASKS[name]


def task_for_data_source(data_source: str) -> TaskSpec:
    """The task whose rows carry `data_source`, or a DataError listing the known data sources."""
    name = data_source[len(DATA_SOURCE_PREFIX):] if data_source.startswith(DATA_SOURCE_PREFIX) else None
    if name not in TASKS:
        known = ", ".join(sorted(spec.data_source for spec in TASKS.values()))
        raise DataError(
            f"no built-in scorer for data_source {data_source!r}; known data sources: {known}. "
            f"For other data, configure a custom reward function"
        )
    return TASKS[name]
