"""Finding the reward function: the built-in task scorers or a user's function in a Python file.

A user function has verl's signature ``fn(data_source, solution_str, ground_truth, extra_info,
**reward_kwargs) -> float | dict`` and is named in the config by file path and function name.

`RewardFunction` keeps the *path and name*, not the function object: functions from a file loaded
with ``spec_from_file_location`` cannot be pickled by reference, so a worker process of the parallel
manager receives (path, name, kwargs) and imports the file itself on its first call.
"""

from __future__ import annotations

import hashlib
import importlib.util
import inspect
import os
import sys
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any, Callable

from posttrain.errors import ConfigError, RewardFunctionError
from posttrain.files import check_python_source

PATH_KEY = "reward.custom_reward_function.path"
NAME_KEY = "reward.custom_reward_function.name"
VERL_ARGS = ("data_source", "solution_str", "ground_truth", "extra_info")


@dataclass
class RewardFunction:
    """A picklable handle on a reward function; calling it calls the function with keywords.

    ``path=None`` means the built-in task scorers (`posttrain.tasks.compute_score`, dispatching on
    ``data_source``). ``kwargs`` are verl's ``reward_kwargs``: extra keyword arguments on every call.
    """

    path: str | None
    name: str = "compute_score"
    kwargs: dict[str, Any] = field(default_factory=dict)
    _fn: Callable[..., Any] | None = field(default=None, repr=False, compare=False)

    @property
    def label(self) -> str:
        """How errors name the function."""
        if self.path is None:
            return "posttrain.tasks.compute_score"
        return f"{self.name} in {self.path}"

    def resolve(self) -> Callable[..., Any]:
        """Import the function (once per process) and return it."""
        if self._fn is None:
            self._fn = _default_scorer() if self.path is None else _load_from_file(self.path, self.name)
        return self._fn

    def __call__(self, data_source: str, solution_str: str, ground_truth: Any, extra_info: Any = None) -> Any:
        return self.resolve()(
            data_source=data_source,
            solution_str=solution_str,
            ground_truth=ground_truth,
            extra_info=extra_info,
            **self.kwargs,
        )

    def __getstate__(self) -> dict[str, Any]:
        # Ship only the path and name; the receiving process imports the file itself.
        return {"path": self.path, "name": self.name, "kwargs": self.kwargs, "_fn": None}


def load_reward_function(
    path: str | None, name: str = "compute_score", reward_kwargs: dict[str, Any] | None = None
) -> RewardFunction:
    """Load and check a reward function now, so config mistakes surface before training starts.

    ``path=None`` selects the built-in task scorers (``name`` is then ignored). A relative path is
    resolved against the current directory. Raises `ConfigError` naming the config key when the file
    or function is missing, is not callable, or does not accept verl's four keyword arguments plus
    ``reward_kwargs``.
    """
    kwargs = dict(reward_kwargs or {})
    if path is None:
        fn = RewardFunction(None, "compute_score", kwargs)
    else:
        fn = RewardFunction(os.path.abspath(os.path.expanduser(path)), name, kwargs)
    _check_signature(fn.resolve(), fn, kwargs)
    return fn


def _default_scorer() -> Callable[..., Any]:
    # Imported here, not at module top: the task scorers live in a sibling component that the
    # rewards package must not require at import time.
    from posttrain.tasks import compute_score

    return compute_score


def _load_from_file(path: str, name: str) -> Callable[..., Any]:
    """Import ``path`` as a module and return its attribute ``name``."""
    if not os.path.isfile(path):
        raise ConfigError(f"{PATH_KEY}: reward function file not found: {path}")
    module = _import_file(path)
    if not hasattr(module, name):
        public = sorted(n for n, v in vars(module).items() if callable(v) and not n.startswith("_"))
        raise ConfigError(
            f"{NAME_KEY}: {path} has no function named {name!r}"
            f" (callables defined there: {', '.join(public) or 'none'})"
        )
    fn = getattr(module, name)
    if not callable(fn):
        raise ConfigError(f"{NAME_KEY}: {name!r} in {path} is a {type(fn).__name__}, not a function")
    return fn


def _import_file(path: str) -> ModuleType:
    """Execute a Python file as a uniquely named module (two files may share a basename)."""
    digest = hashlib.sha1(path.encode()).hexdigest()[:10]
    module_name = f"posttrain_user_reward_{digest}"
    if module_name in sys.modules:
        return sys.modules[module_name]
    spec = importlib.util.spec_from_file_location(module_name, path)
    if spec is None or spec.loader is None:
        raise ConfigError(f"{PATH_KEY}: cannot import {path} as Python (is it a .py file?)")
    check_python_source(path, lambda message: ConfigError(f"{PATH_KEY}: {message}"))
    module = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(module)
    except KeyboardInterrupt:
        raise
    except BaseException as exc:  # SystemExit too: a file ending the process on import gets a message
        raise RewardFunctionError(
            f"importing the reward function file {path} failed: {type(exc).__name__}: {exc}"
        ) from exc
    # Registered so that pickle and dataclasses defined in the file work within this process.
    sys.modules[module_name] = module
    return module


def _check_signature(raw: Callable[..., Any], fn: RewardFunction, kwargs: dict[str, Any]) -> None:
    """Refuse a function that cannot be called the way the managers call it."""
    try:
        signature = inspect.signature(raw)
    except (TypeError, ValueError):
        return  # builtins and some C callables have no signature; the first call will tell
    try:
        signature.bind(**{arg: None for arg in VERL_ARGS}, **kwargs)
    except TypeError as exc:
        extra = f" plus reward_kwargs {sorted(kwargs)}" if kwargs else ""
        raise ConfigError(
            f"{NAME_KEY}: {fn.label} has signature {fn.name}{signature}, but it is called with keyword "
            f"arguments ({', '.join(VERL_ARGS)}){extra}: {exc}"
        ) from exc
