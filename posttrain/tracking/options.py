"""The optional trackers' packages and `trainer.tracker_kwargs`, checked before training starts.

`check_trackers` runs in the preflight of every stage (`posttrain train` and `posttrain config plan`),
so a tracker whose package is missing, or an option no named tracker reads, stops the run before a
model is loaded, with the pip command or the fix.

`trainer.tracker_kwargs` is one flat mapping shared by the trackers named in `trainer.logger` (ROLL's
`tracker_kwargs`, Trinity-RFT's `monitor.monitor_args`): each option goes to the trackers that read
it, under the spellings those frameworks use (``experiment_name``/``name``, ``logdir``/``log_dir``).
Credentials and server addresses are refused: the config is saved in the run directory and sent to
the trackers as the run's config, so a key written there would be stored with every run. The
trackers' clients read them from their environment variables instead.
"""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass
from typing import Any

from posttrain.errors import ConfigError

KEY = "trainer.tracker_kwargs"

# tracker -> (the module its client imports, the pip command that installs it)
PACKAGES: dict[str, tuple[str, str]] = {
    "wandb": ("wandb", "pip install 'posttrain[wandb]'"),
    "mlflow": ("mlflow", "pip install 'posttrain[mlflow]'"),
    "swanlab": ("swanlab", "pip install 'posttrain[swanlab]'"),
}


@dataclass(frozen=True)
class Option:
    readers: tuple[str, ...]  # the trackers that read it
    doc: str
    is_list: bool = False  # a list of strings (else one string)


OPTIONS: dict[str, Option] = {
    "project": Option(("wandb", "mlflow", "swanlab"), "project of the tracker run (mlflow: its experiment) instead of trainer.project_name"),
    "name": Option(("wandb", "mlflow", "swanlab"), "name of the tracker run instead of trainer.experiment_name"),
    "tags": Option(("wandb", "swanlab"), "tags of the tracker run", is_list=True),
    "notes": Option(("wandb", "mlflow", "swanlab"), "a description of the run"),
    "group": Option(("wandb", "swanlab"), "the group the run belongs to"),
    "entity": Option(("wandb",), "the wandb user or team"),
    "workspace": Option(("swanlab",), "the swanlab workspace"),
    "mode": Option(("wandb", "swanlab"), "online or offline (no server: the run is written locally, to sync later)"),
    "log_dir": Option(("tensorboard", "wandb", "swanlab"), "local directory instead of the run directory"),
    "uri": Option(("mlflow",), "MLflow tracking URI (a server, or file:DIR)"),
}
# Other frameworks' spellings -> posttrain's
ALIASES = {"experiment_name": "name", "description": "notes", "logdir": "log_dir", "dir": "log_dir", "tracking_uri": "uri"}
# Read from the environment only, by the tracker's own client.
FROM_ENVIRONMENT = {
    "api_key": "WANDB_API_KEY or SWANLAB_API_KEY",
    "login_kwargs": "SWANLAB_API_KEY",
    "base_url": "WANDB_BASE_URL",
    "username": "MLFLOW_TRACKING_USERNAME",
    "password": "MLFLOW_TRACKING_PASSWORD",
}
MODES = {"wandb": ("online", "offline", "disabled"), "swanlab": ("cloud", "online", "offline", "local", "disabled")}


def canonical_options(kwargs: dict[str, Any]) -> dict[str, Any]:
    """`trainer.tracker_kwargs` under posttrain's names (aliases resolved); assumes it was checked."""
    return {ALIASES.get(key, key): value for key, value in kwargs.items()}


def installed(tracker: str) -> bool:
    """Whether the tracker's client package can be imported (found without importing it)."""
    module = PACKAGES[tracker][0]
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):  # a broken or stubbed-out module counts as missing
        return False


def check_trackers(logger: list[str], kwargs: dict[str, Any]) -> None:
    """Refuse a named tracker whose package is missing and every tracker option that is unknown,
    read by no named tracker, a credential, or of the wrong type; all problems in one error."""
    problems = [
        f"trainer.logger: the {name} tracker needs the {PACKAGES[name][0]} package, which is not installed: "
        f"{PACKAGES[name][1]} (or remove {name} from trainer.logger)"
        for name in logger if name in PACKAGES and not installed(name)
    ]
    problems += _option_problems(logger, kwargs)
    if problems:
        raise ConfigError(problems)


def _option_problems(logger: list[str], kwargs: dict[str, Any]) -> list[str]:
    problems: list[str] = []
    given: dict[str, tuple[str, Any]] = {}  # posttrain's name -> (the key used, its value)
    for key, value in kwargs.items():
        path = f"{KEY}.{key}"
        if key in FROM_ENVIRONMENT:
            problems.append(
                f"{path}: credentials and server addresses are not taken from the config (it is saved in the run "
                f"directory and sent to the trackers); set {FROM_ENVIRONMENT[key]} in the environment, where the tracker reads it"
            )
            continue
        name = ALIASES.get(key, key)
        option = OPTIONS.get(name)
        if option is None:
            known = sorted({*OPTIONS, *ALIASES})
            problems.append(f"{path}: unknown tracker option; known: {', '.join(known)}")
            continue
        if name in given and given[name][1] != value:
            problems.append(f"{path}: also given as {KEY}.{given[name][0]} with another value; keep one")
        given.setdefault(name, (key, value))
        readers = [t for t in option.readers if t in logger]
        if not readers:
            problems.append(f"{path}: read only by the {', '.join(option.readers)} tracker(s), and trainer.logger names none of them")
            continue
        problems += _value_problems(path, name, option, value, readers)
    return problems


def _value_problems(path: str, name: str, option: Option, value: Any, readers: list[str]) -> list[str]:
    if option.is_list:
        if not (isinstance(value, list) and all(isinstance(v, str) for v in value)):
            return [f"{path}: expected a list of strings, got {value!r}"]
        return []
    if not isinstance(value, str):
        return [f"{path}: expected a string, got {value!r}"]
    if name == "mode":
        return [f"{path}: {t} accepts mode {', '.join(MODES[t])}, not {value!r}" for t in readers if value not in MODES[t]]
    return []
