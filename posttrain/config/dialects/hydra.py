"""Hydra command-line overrides, as verl and ROLL users type them after their launcher.

    trainer.total_epochs=2          set a key the config has (Hydra refuses a key it does not have)
    +trainer.my_key=1               add a key the config does not have (refused when it has it)
    ++trainer.my_key=1              set it whether it exists or not
    ~trainer.my_key  ~trainer.my_key=1   delete a key (with a value: only when it holds that value)
    trainer.logger='["console","wandb"]'   lists, numbers, booleans and null are read as YAML values

`apply` works on plain nested dicts. With ``strict`` (verl against its full trainer tree, ROLL
against its file) a plain override of a missing key is an error naming the closest keys, as Hydra
makes it; without (Trinity-RFT files, which have no override syntax of their own) it adds the key.
"""

from __future__ import annotations

import dataclasses
import difflib
import re
from collections.abc import Mapping, Sequence
from typing import Any

import yaml

from posttrain.errors import ConfigError

_KEY = re.compile(r"^[A-Za-z_][\w\-]*(\.[A-Za-z_0-9][\w\-]*)*$")
_FLOAT = re.compile(r"^[-+]?(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?$")  # YAML 1.1 reads 1e-6 as a string; Hydra as a float
MISSING = _MISSING = object()  # no value at a key (lookup)


@dataclasses.dataclass(frozen=True)
class Override:
    """One ``[+|++|~]key[=value]`` as typed."""

    text: str
    op: str  # "set" | "add" | "force" | "delete"
    key: str
    value: Any = _MISSING  # for "delete": the value the key must hold, when given


def is_override(arg: str) -> bool:
    """Whether a command-line word is a Hydra override rather than a file (``~key`` has no ``=``)."""
    return "=" in arg or arg.startswith("~")


def parse_value(text: str) -> Any:
    """A value as Hydra reads it: YAML scalars and lists; ``1e-6`` a float; ``key=`` an empty string.

    >>> parse_value('["console","wandb"]'), parse_value("1e-6"), parse_value("null"), parse_value("")
    (['console', 'wandb'], 1e-06, None, '')
    """
    if text == "":
        return ""
    if _FLOAT.match(text) and not re.match(r"^[-+]?\d+$", text):
        return float(text)
    if "${" in text:
        return text  # an interpolation: resolved after every override, as in Hydra
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError:
        return text


def parse(text: str) -> Override:
    """One override; a malformed one is a `ConfigError` showing the forms."""
    op, body = "set", text
    if body.startswith("++"):
        op, body = "force", body[2:]
    elif body.startswith("+"):
        op, body = "add", body[1:]
    elif body.startswith("~"):
        op, body = "delete", body[1:]
    key, sep, value = body.partition("=")
    group, at, package = key.partition("@")
    if at and sep and _KEY.match(group) and _KEY.match(package):
        raise ConfigError(
            f"command line override {text!r}: a choice of Hydra's config group {group!r} for {package} (option {value!r}), which "
            f"composes a file of the framework's config folder; posttrain reads the framework's composed trainer configs, not its "
            f"groups: set that file's keys as KEY=VALUE overrides (verl 0.10 chooses its engine's files with model_engine=dp|megatron)"
        )
    if not _KEY.match(key) or (op != "delete" and not sep):
        raise ConfigError(
            f"command line override {text!r}: expected key=value, +key=value (add), ++key=value (add or set) "
            f"or ~key (delete), with a dotted key such as trainer.total_epochs"
        )
    return Override(text, op, key, parse_value(value) if sep else _MISSING)


def leaf_keys(tree: Mapping[str, Any], prefix: str = "") -> list[str]:
    """Every dotted key of a nested dict, mappings included (``a``, ``a.b``)."""
    out = []
    for name, value in tree.items():
        key = f"{prefix}{name}"
        out.append(key)
        if isinstance(value, Mapping):
            out += leaf_keys(value, key + ".")
    return out


def lookup(tree: Mapping[str, Any], key: str) -> Any:
    """The value at dotted ``key`` of a nested dict, else `MISSING`."""
    node: Any = tree
    for part in key.split("."):
        if not isinstance(node, Mapping) or part not in node:
            return _MISSING
        node = node[part]
    return node


def put(tree: dict[str, Any], key: str, value: Any) -> None:
    """Set dotted ``key`` of a nested dict, making the mappings on its path."""
    *parents, last = key.split(".")
    node = tree
    for part in parents:
        child = node.get(part)
        if not isinstance(child, dict):
            child = node[part] = {}
        node = child
    node[last] = _merged(node.get(last), value)


def _merged(old: Any, new: Any) -> Any:
    """``new`` over ``old``: Hydra merges a mapping value into the mapping there (OmegaConf's merge);
    any other value replaces what was there."""
    if not (isinstance(old, dict) and isinstance(new, Mapping)):
        return new
    return {**old, **{name: _merged(old.get(name), inner) for name, inner in new.items()}}


def _delete(tree: dict[str, Any], key: str) -> None:
    *parents, last = key.split(".")
    node = tree
    for part in parents:
        node = node[part]
    del node[last]


def _copy(tree: Mapping[str, Any]) -> dict[str, Any]:
    return {k: _copy(v) if isinstance(v, Mapping) else v for k, v in tree.items()}


def apply(tree: Mapping[str, Any], overrides: Sequence[str], *, strict: bool, what: str,
          launcher: str | None = None) -> tuple[dict[str, Any], dict[str, str]]:
    """``(tree with the overrides applied, {dotted key set: the override as typed})``. ``what`` names
    the config in messages ("verl's trainer config"); ``launcher`` ("verl"), when the words come from
    a Hydra launcher, is named as failing on an override Hydra refuses (a script broken upstream).
    Every bad override is reported at once."""
    also = f", which Hydra refuses too: {launcher} fails on this line as well" if launcher else ""
    out = _copy(tree)
    set_by: dict[str, str] = {}
    problems = []
    for text in overrides:
        if not text.strip():
            problems.append(f"command line override {text!r}: a blank word, not an override{also or ', which Hydra refuses too'}; "
                            "in a script it comes from a backslash followed by a space rather than the line's end, and bash "
                            "ends the command at a '#' comment after it: put the comment on a line of its own")
            continue
        item = parse(text)
        current = lookup(out, item.key)
        if item.op == "delete":
            if current is _MISSING:
                problems.append(f"command line override {text!r}: cannot delete {item.key}: {what} has no such key")
            elif item.value is not _MISSING and item.value != current:
                problems.append(f"command line override {text!r}: {item.key} holds {current!r}, not {item.value!r}; nothing deleted")
            else:
                _delete(out, item.key)
                set_by = {k: v for k, v in set_by.items() if k != item.key and not k.startswith(item.key + ".")}
            continue
        # Hydra appends over a key that holds null, or with a mapping or list value (its check is
        # `OmegaConf.select(cfg, key) is None or isinstance(value, (dict, list))`)
        if item.op == "add" and current is not _MISSING and current is not None and not isinstance(item.value, (dict, list)):
            problems.append(f"command line override {text!r}: {what} already has {item.key}{also}; "
                            f"set it with {text[1:]!r} (or '+{text}' to add or set)")
            continue
        if item.op == "set" and current is _MISSING and strict:
            problems.append(f"command line override {text!r}: {what} has no key {item.key}{_did_you_mean(out, item.key)}{also}; "
                            f"{'remove it, or add' if launcher else 'add'} a new key with '+{text}', as Hydra does")
            continue
        put(out, item.key, item.value)
        set_by[item.key] = text
    if problems:
        raise ConfigError(problems)
    return out, set_by


def _did_you_mean(tree: Mapping[str, Any], key: str) -> str:
    keys = leaf_keys(tree)
    close = difflib.get_close_matches(key, keys, n=2, cutoff=0.75)
    if not close:  # the same last name elsewhere in the tree
        close = [k for k in keys if k.rsplit(".", 1)[-1] == key.rsplit(".", 1)[-1]][:2]
    return f" (did you mean {' or '.join(close)}?)" if close else ""


def origin(key: str, set_by: Mapping[str, str]) -> str | None:
    """The override (as typed) that set ``key`` or a mapping above it, else the first that set a key
    below it (a section refused as a whole), else None."""
    found = below = None
    for k, text in set_by.items():
        if key == k or key.startswith(k + ".") or key.startswith(k + "["):
            found = text
        elif below is None and k.startswith(key + "."):
            below = text
    return found or below
