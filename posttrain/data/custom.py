"""`data.custom_cls`: a user's dataset class, loaded from a Python file.

The class is built as ``cls(files, tokenizer, data_config)`` and must behave like posttrain's own
datasets: ``len(ds)`` and ``ds[k]`` returning the example type of the algorithm (`RLExample`,
`SFTExample` or `DPOExample`). The first example is checked at build time so a wrong class fails
before training, with the file and class named. The class receives the whole `data` config and
owns everything between files and examples: posttrain applies no template, truncation or
`filter_overlong_prompts` of its own to a custom dataset.
"""

from __future__ import annotations

import inspect
from typing import Any

from posttrain.config.sections.data import DataConfig
from posttrain.errors import ConfigError, DataError
from posttrain.files import import_python_file


def load_class(path: str, name: str | None, key: str = "data.custom_cls", keys: tuple[str, str] = ("path", "name"), what: str = "dataset") -> type:
    """The class `name` defined in the Python file `path`; errors name `key`.path / `key`.name
    (or the sub-keys `keys`, e.g. data.sampler's class_path and class_name)."""
    path_key, name_key = f"{key}.{keys[0]}", f"{key}.{keys[1]}"
    if not name:
        raise ConfigError(f"{name_key}: empty; name the {what} class defined in {path_key}")
    module = import_python_file(
        path, what, lambda message: ConfigError(f"{path_key}: {message}"),
        lambda exc: ConfigError(f"{path_key}: importing {path} failed: {type(exc).__name__}: {exc}"),
    )
    cls = getattr(module, name, None)
    if not inspect.isclass(cls):
        classes = sorted(n for n, v in vars(module).items() if inspect.isclass(v) and v.__module__ == module.__name__)
        raise ConfigError(f"{name_key}: {path} defines no class '{name}'; its classes are {classes}")
    return cls


def build_custom_dataset(cfg: DataConfig, files: list[str], tokenizer: Any, example_type: type) -> Any:
    """Build the user's dataset and check it yields `example_type`."""
    path, name = cfg.custom_cls.path, cfg.custom_cls.name
    cls = load_class(path, name)
    where = f"data.custom_cls: {name} from {path}"
    dataset = cls(files, tokenizer, cfg)
    if not (hasattr(dataset, "__len__") and hasattr(dataset, "__getitem__")):
        raise DataError(f"{where}: a dataset needs __len__ and __getitem__")
    if len(dataset) == 0:
        raise DataError(f"{where}: the dataset is empty")
    first = dataset[0]
    if not isinstance(first, example_type):
        raise DataError(f"{where}: dataset[0] is a {type(first).__name__}; it must return posttrain.data.{example_type.__name__}")
    return dataset
