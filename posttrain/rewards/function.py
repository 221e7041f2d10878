"""Finding the reward function: the built-in task scorers or a user's function in a Python file.

A user function has verl's signature ``fn(data_source, solution_str, ground_truth, extra_info,
**reward_kwargs) -> float | dict`` and is named in the config by file path and function name, or
(a reward worker's ``worker_cls``) by ``module:name``. A class named there is built once per process
with the keyword arguments, and its instances are called with verl's four arguments.

`RewardFunction` keeps the *path and name*, not the function object: functions from a file loaded
with ``spec_from_file_location`` cannot be pickled by reference, so a worker process of the parallel
manager receives (path, name, kwargs) and imports the file itself on its first call.
"""

from __future__ import annotations

import importlib
import importlib.util
import inspect
import os
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any, Callable

from posttrain.errors import ConfigError, RewardFunctionError
from posttrain.files import import_python_file

PATH_KEY = "reward.custom_reward_function.path"
NAME_KEY = "reward.custom_reward_function.name"
VERL_ARGS = ("data_source", "solution_str", "ground_truth", "extra_info")


@dataclass
class RewardFunction:
    """A picklable handle on a reward function; calling it calls the function with keywords.

    ``path=None`` means the built-in task scorers (`posttrain.tasks.compute_score`, dispatching on
    ``data_source``), unless ``module`` names the module ``name`` is imported from. ``kwargs`` are
    verl's ``reward_kwargs``: extra keyword arguments on every call (of a class: of its constructor).
    ``settings`` are the config keys errors name: (the file's key, the name's key).
    """

    path: str | None
    name: str = "compute_score"
    kwargs: dict[str, Any] = field(default_factory=dict)
    module: str | None = None
    settings: tuple[str, str] = (PATH_KEY, NAME_KEY)
    _fn: Callable[..., Any] | None = field(default=None, repr=False, compare=False)
    _built: bool = field(default=False, repr=False, compare=False)  # _fn is an instance holding kwargs

    @property
    def label(self) -> str:
        """How errors name the function."""
        if self.module is not None:
            return f"{self.module}:{self.name}"
        if self.path is None:
            return "posttrain.tasks.compute_score"
        return f"{self.name} in {self.path}"

    def resolve(self) -> Callable[..., Any]:
        """Import the function (once per process; a class is built then) and return it."""
        if self._fn is None:
            if self.module is not None:
                raw = _load_from_module(self.module, self.name, self.settings[1])
            elif self.path is None:
                raw = _default_scorer()
            else:
                raw = _load_from_file(self.path, self.name, self.settings)
            if isinstance(raw, type):  # a scorer class: one instance per process, built with the kwargs
                _check_call(raw, self, self.kwargs, constructor=True)
                raw, self._built = raw(**self.kwargs), True
            self._fn = raw
        return self._fn

    def __call__(self, data_source: str, solution_str: str, ground_truth: Any, extra_info: Any = None) -> Any:
        fn = self.resolve()
        kwargs = {} if self._built else self.kwargs
        return fn(data_source=data_source, solution_str=solution_str, ground_truth=ground_truth, extra_info=extra_info, **kwargs)

    def __getstate__(self) -> dict[str, Any]:
        # Ship only the names; the receiving process imports the file or module itself.
        return {"path": self.path, "name": self.name, "kwargs": self.kwargs, "module": self.module,
                "settings": self.settings, "_fn": None, "_built": False}


def load_reward_function(
    path: str | None, name: str = "compute_score", reward_kwargs: dict[str, Any] | None = None,
    *, module: str | None = None, settings: tuple[str, str] = (PATH_KEY, NAME_KEY),
) -> RewardFunction:
    """Load and check a reward function now, so config mistakes surface before training starts.

    ``path=None`` selects the built-in task scorers (``name`` is then ignored). A relative path is
    resolved against the current directory. Raises `ConfigError` naming the config key when the file
    or function is missing, is not callable, or does not accept verl's four keyword arguments plus
    ``reward_kwargs``.
    """
    kwargs = dict(reward_kwargs or {})
    if module is not None:
        fn = RewardFunction(None, name, kwargs, module=module, settings=settings)
    elif path is None:
        fn = RewardFunction(None, "compute_score", kwargs, settings=settings)
    else:
        fn = RewardFunction(os.path.abspath(os.path.expanduser(path)), name, kwargs, settings=settings)
    raw = fn.resolve()
    _check_call(raw, fn, {} if fn._built else kwargs)
    return fn


def _default_scorer() -> Callable[..., Any]:
    # Imported here, not at module top: the task scorers live in a sibling component that the
    # rewards package must not require at import time.
    from posttrain.tasks import compute_score

    return compute_score


def _load_from_file(path: str, name: str, settings: tuple[str, str] = (PATH_KEY, NAME_KEY)) -> Callable[..., Any]:
    """Import ``path`` as a module and return its attribute ``name``."""
    if not os.path.isfile(path):
        raise ConfigError(f"{settings[0]}: reward function file not found: {path}")
    return _attribute(_import_file(path, settings[0]), name, path, settings[1])


def _load_from_module(module_name: str, name: str, setting: str) -> Callable[..., Any]:
    """Import the module ``module_name`` (from sys.path) and return its attribute ``name``."""
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise ConfigError(f"{setting}: cannot import module {module_name!r} ({exc}); is it on PYTHONPATH?") from exc
    return _attribute(module, name, f"module {module_name}", setting)


def _attribute(module: ModuleType, name: str, where: str, setting: str) -> Callable[..., Any]:
    if not hasattr(module, name):
        public = sorted(n for n, v in vars(module).items() if callable(v) and not n.startswith("_"))
        raise ConfigError(
            f"{setting}: {where} has no function named {name!r}"
            f" (callables defined there: {', '.join(public) or 'none'})"
        )
    fn = getattr(module, name)
    if not callable(fn):
        raise ConfigError(f"{setting}: {name!r} in {where} is a {type(fn).__name__}, not a function")
    return fn


def _import_file(path: str, setting: str = PATH_KEY) -> ModuleType:
    return import_python_file(
        path, "reward", lambda message: ConfigError(f"{setting}: {message}"),
        lambda exc: RewardFunctionError(f"importing the reward function file {path} failed: {type(exc).__name__}: {exc}"),
    )


def _check_call(raw: Callable[..., Any], fn: RewardFunction, kwargs: dict[str, Any], *, constructor: bool = False) -> None:
    """Refuse a function (or a class's constructor) that cannot be called the way the managers
    call it: verl's four keyword arguments plus ``kwargs`` (a constructor: ``kwargs`` alone)."""
    try:
        signature = inspect.signature(raw)
    except (TypeError, ValueError):
        return  # builtins and some C callables have no signature; the first call will tell
    args = {} if constructor else {arg: None for arg in VERL_ARGS}
    try:
        signature.bind(**args, **kwargs)
    except TypeError as exc:
        extra = f" plus reward_kwargs {sorted(kwargs)}" if kwargs and not constructor else ""
        called = f"keyword arguments {sorted(kwargs)}" if constructor else f"keyword arguments ({', '.join(VERL_ARGS)}){extra}"
        what = "the class" if constructor else ""
        raise ConfigError(
            f"{fn.settings[1]}: {what + ' ' if what else ''}{fn.label} has signature {fn.name}{signature}, but it is "
            f"{'built' if constructor else 'called'} with {called}: {exc}"
        ) from exc
