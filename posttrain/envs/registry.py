"""Environments by name: the built-in ones registered here, a family's by prefix (``rg:NAME``), a
user's by ``module:Class`` or ``path/to/file.py:Class``.

A boring registry (STYLE.md): a module-level dict filled by a decorator, duplicates rejected,
unknown names answered with the list of valid ones. The package's `__init__` imports the built-in
environments, so they are registered before anything reads the registry.
"""

from __future__ import annotations

import importlib
import importlib.util
import inspect
from typing import Any, Callable

from posttrain.errors import ConfigError
from posttrain.files import import_python_file

ENVS: dict[str, type] = {}
# prefix -> (what NAME is, for messages; NAME, key -> the class): names made from another library's
# own list (every reasoning-gym dataset), answered before 'module:Class' so 'rg:x' is never a module.
FAMILIES: dict[str, tuple[str, Callable[[str, str], type]]] = {}
# Other frameworks' environment names that posttrain does not provide, and why (refused by name).
_ROCK = "posttrain does not drive ROCK sandboxes; give your own class as 'module:Class' to play such tasks"
FOREIGN: dict[str, str] = {
    "sokoban_sandbox": ("ROLL's Sokoban played inside a ROCK sandbox container (the ROCK SDK and a sandbox service at "
                        f"env_config.base_url): {_ROCK}, or use env_type sokoban, which plays Sokoban in this process"),
    "rock_tb_native_env": ("ROLL's Terminal-bench and SWE tasks, run in ROCK sandbox containers with ROCK's model service "
                           f"(env_config.sandbox_base_url): {_ROCK}"),
}


def register_env(name: str) -> Callable[[type], type]:
    """Class decorator: make `name` an `env_type` of `custom_envs`."""

    def add(cls: type) -> type:
        if name in ENVS:
            raise ValueError(f"environment {name!r} is registered twice")
        ENVS[name] = cls
        return cls

    return add


def register_env_family(prefix: str, what: str) -> Callable[[Callable[[str, str], type]], Callable[[str, str], type]]:
    """Function decorator: `prefix`NAME env_types are the class `make(NAME, key)` returns (it raises
    ConfigError, naming `key`, for a NAME it does not know); `what` says what NAME is."""

    def add(make: Callable[[str, str], type]) -> Callable[[str, str], type]:
        if prefix in FAMILIES:
            raise ValueError(f"environment family {prefix!r} is registered twice")
        FAMILIES[prefix] = (what, make)
        return make

    return add


def env_class(env_type: str, key: str) -> type:
    """The class named by `env_type`; `key` is the config key that holds it, for the messages."""
    if env_type in ENVS:
        return ENVS[env_type]
    for prefix, (_, make) in FAMILIES.items():
        if env_type.startswith(prefix):
            return make(env_type[len(prefix):], key)
    if env_type in FOREIGN:
        raise ConfigError(f"{key}: environment {env_type!r}: not supported: {FOREIGN[env_type]}")
    if ":" not in env_type:
        families = "".join(f", {prefix}NAME ({what})" for prefix, (what, _) in FAMILIES.items())
        raise ConfigError(
            f"{key}: unknown environment {env_type!r}; registered: {sorted(ENVS)}{families}, "
            "or give your own class as 'module:Class' or 'path/to/file.py:Class'"
        )
    where, _, name = env_type.rpartition(":")
    module = _import_file(where, key) if where.endswith(".py") else _import_module(where, key)
    cls = getattr(module, name, None)
    if not inspect.isclass(cls):
        classes = sorted(n for n, v in vars(module).items() if inspect.isclass(v) and v.__module__ == module.__name__)
        raise ConfigError(f"{key}: {where} defines no class {name!r}; its classes are {classes}")
    missing = [m for m in ("reset", "step") if not callable(getattr(cls, m, None))]
    if missing:
        raise ConfigError(f"{key}: {env_type} has no method {' or '.join(missing)}; an environment needs reset(seed) and step(action_text)")
    return cls


def make_env(cls: type, env_config: dict[str, Any], key: str) -> Any:
    """`cls(**env_config)`, with a constructor's refusal named by its config key."""
    try:
        return cls(**env_config)
    except TypeError as e:
        raise ConfigError(f"{key}.env_config: {cls.__name__}({', '.join(map(str, env_config))}) failed: {e}") from e
    except ValueError as e:
        raise ConfigError(f"{key}.env_config: {e}") from e


def _import_module(name: str, key: str) -> Any:
    try:
        return importlib.import_module(name)
    except ImportError as e:
        raise ConfigError(f"{key}: cannot import module {name!r}: {e}") from e


def _import_file(path: str, key: str) -> Any:
    return import_python_file(
        path, "env", lambda message: ConfigError(f"{key}: {message}"),
        lambda exc: ConfigError(f"{key}: importing {path} failed: {type(exc).__name__}: {exc}"),
    )
