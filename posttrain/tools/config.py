"""The tool config file (verl's ``rollout.multi_turn.tool_config_path``): which tools the model may call.

The layout is verl's::

    tools:
      - class_name: calculator                 # built in (calculator, code_interpreter), or your class:
                                               #   pkg.module.Class, pkg.module:Class or path/to/file.py:Class
        config: {type: native}                 # keyword arguments of the class; type: native (verl's MCP is refused)
        tool_schema:                           # OpenAI function schema; optional when the class has a `schema`
          type: function
          function: {name: calculator, description: "...", parameters: {type: object, properties: {...}}}

Every problem names the file and the line of the entry (or of the YAML syntax error), e.g.
``tools.yaml:7: tools[1].class_name: ...``.
"""

from __future__ import annotations

import copy
import inspect
from dataclasses import dataclass
from typing import Any

import yaml

from posttrain.tools import interpreter  # noqa: F401  (registers the built-in tools)
from posttrain.tools import calculator  # noqa: F401
from posttrain.tools.base import TOOLS
from posttrain.errors import ConfigError
from posttrain.files import import_user_module

ENTRY_KEYS = ("class_name", "config", "tool_schema")


@dataclass(frozen=True)
class ToolSpec:
    """One checked entry of a tool config."""

    name: str  # what the model calls it by: the schema's function.name
    cls: type
    config: dict[str, Any]  # the class's keyword arguments (verl's `type` removed)
    schema: dict[str, Any]  # the OpenAI function schema shown to the model
    where: str  # "file:line" of the entry


def load_tool_config(path: str) -> list[ToolSpec]:
    """The tools of the config file at `path`; a ConfigError naming file and line otherwise."""
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except OSError as e:
        raise ConfigError(f"rollout.multi_turn.tool_config_path: cannot read {path}: {e.strerror or e}") from e
    try:
        root = yaml.compose(text)
        data = yaml.safe_load(text)
    except yaml.MarkedYAMLError as e:
        line = e.problem_mark.line + 1 if e.problem_mark is not None else 1
        raise ConfigError(f"{path}:{line}: not valid YAML: {e.problem}") from e
    entries = _entry_nodes(root)
    if not isinstance(data, dict) or not isinstance(data.get("tools"), list) or not data["tools"]:
        raise ConfigError(f"{path}:1: expected a mapping with a non-empty list `tools:` of tool entries (class_name, config, tool_schema)")
    specs, problems = [], []
    for i, entry in enumerate(data["tools"]):
        where = f"{path}:{entries[i] if i < len(entries) else 1}"
        try:
            specs.append(_entry(entry, f"{where}: tools[{i}]", where))
        except ConfigError as e:
            problems.extend(e.problems)
    names = [s.name for s in specs]
    problems += [f"{s.where}: tool name {s.name!r} is used twice; each tool needs its own function.name"
                 for k, s in enumerate(specs) if s.name in names[:k]]
    if problems:
        raise ConfigError(problems)
    return specs


def build_tools(specs: list[ToolSpec]) -> dict[str, Any]:
    """name -> tool instance; a constructor's refusal is named by the entry's file and line."""
    tools = {}
    for s in specs:
        try:
            tools[s.name] = s.cls(**s.config)
        except (TypeError, ValueError) as e:
            raise ConfigError(f"{s.where}: {s.cls.__name__}({', '.join(s.config)}) failed: {e}") from e
    return tools


def _entry_nodes(root: Any, name: str = "tools") -> list[int]:
    """1-based line of each entry of the `name` sequence (empty when the layout is wrong)."""
    if not isinstance(root, yaml.MappingNode):
        return []
    for key, value in root.value:
        if getattr(key, "value", None) == name and isinstance(value, yaml.SequenceNode):
            return [item.start_mark.line + 1 for item in value.value]
    return []


def _entry(entry: Any, head: str, where: str) -> ToolSpec:
    if not isinstance(entry, dict):
        raise ConfigError(f"{head}: expected a mapping with class_name, config and tool_schema, got {type(entry).__name__}")
    problems = [f"{head}.{k}: unknown key; a tool entry takes {list(ENTRY_KEYS)}" for k in entry if k not in ENTRY_KEYS]
    config = dict(entry.get("config") or {})
    kind = config.pop("type", "native")
    if kind != "native":
        problems.append(f"{head}.config.type: {kind!r} is not supported (verl's MCP tools need an MCP server); posttrain runs native tools only")
    if not isinstance(entry.get("class_name"), str):
        problems.append(f"{head}.class_name: missing; name a built-in tool {sorted(TOOLS)}, 'pkg.module.Class' or 'file.py:Class'")
    if problems:
        raise ConfigError(problems)
    cls = _tool_class(entry["class_name"], f"{head}.class_name")
    schema = entry.get("tool_schema")
    if schema is None:
        schema = copy.deepcopy(getattr(cls, "schema", None))
        if schema is None:
            raise ConfigError(f"{head}.tool_schema: missing, and {entry['class_name']} has no default `schema`; give the OpenAI function schema")
    function = schema.get("function") if isinstance(schema, dict) else None
    if not isinstance(function, dict) or not isinstance(function.get("name"), str) or not function["name"]:
        raise ConfigError(f"{head}.tool_schema: expected {{type: function, function: {{name: ..., description: ..., parameters: ...}}}}")
    if schema.get("type", "function") != "function":
        raise ConfigError(f"{head}.tool_schema.type: only 'function' tools exist, got {schema['type']!r}")
    return ToolSpec(function["name"], cls, config, schema, where)


def _tool_class(name: str, key: str) -> type:
    """A built-in tool's class, or the user's by 'module:Class', 'file.py:Class' or 'pkg.module.Class'."""
    if name in TOOLS:
        return TOOLS[name]
    if ":" not in name and "." not in name:
        raise ConfigError(f"{key}: unknown tool {name!r}; built in: {sorted(TOOLS)}, or give your class as "
                          "'pkg.module.Class', 'pkg.module:Class' or 'path/to/file.py:Class'")
    return _user_class(name, key, ("execute",))


def _user_class(name: str, key: str, methods: tuple[str, ...]) -> type:
    """The class at 'module:Class', 'file.py:Class' or 'pkg.module.Class', with `methods`."""
    module_name, sep, class_name = name.rpartition(":") if ":" in name else name.rpartition(".")
    if not sep or not module_name:
        raise ConfigError(f"{key}: {name!r} names no class; write 'pkg.module.Class', 'pkg.module:Class' or 'path/to/file.py:Class'")
    module = import_user_module(module_name, "tool", lambda m: ConfigError(f"{key}: {m}"))
    cls = getattr(module, class_name, None)
    if not inspect.isclass(cls):
        raise ConfigError(f"{key}: {module_name} defines no class {class_name!r}")
    missing = [m for m in methods if not callable(getattr(cls, m, None))]
    if missing:
        raise ConfigError(f"{key}: {name} has no method {', '.join(missing)}; it needs {', '.join(methods)}")
    return cls


INTERACTION_METHODS = ("start_interaction", "generate_response", "finalize_interaction")


def load_interactions(path: str) -> dict[str, Any]:
    """name -> interaction instance from verl's interaction config::

        interaction:
          - name: tutor                      # rows pick it by extra_info.interaction_kwargs.name
            class_name: my_module.Tutor      # or my_file.py:Tutor
            config: {...}                    # passed to the class as one dict, as verl does

    An interaction has verl's three methods (synchronous or async): ``start_interaction(instance_id,
    **kwargs)``, ``generate_response(instance_id, messages, **kwargs) -> (done, text, score, info)``
    and ``finalize_interaction(instance_id)``.
    """
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
        root, data = yaml.compose(text), yaml.safe_load(text)
    except OSError as e:
        raise ConfigError(f"rollout.multi_turn.interaction_config_path: cannot read {path}: {e.strerror or e}") from e
    except yaml.MarkedYAMLError as e:
        raise ConfigError(f"{path}:{e.problem_mark.line + 1 if e.problem_mark else 1}: not valid YAML: {e.problem}") from e
    lines = _entry_nodes(root, "interaction")
    if not isinstance(data, dict) or not isinstance(data.get("interaction"), list) or not data["interaction"]:
        raise ConfigError(f"{path}:1: expected a mapping with a non-empty list `interaction:` of entries (name, class_name, config)")
    out = {}
    for i, entry in enumerate(data["interaction"]):
        head = f"{path}:{lines[i] if i < len(lines) else 1}: interaction[{i}]"
        if not isinstance(entry, dict) or not isinstance(entry.get("class_name"), str):
            raise ConfigError(f"{head}: expected a mapping with name, class_name and config")
        unknown = [k for k in entry if k not in ("name", "class_name", "config")]
        if unknown:
            raise ConfigError(f"{head}.{unknown[0]}: unknown key; an interaction entry takes name, class_name and config")
        cls = _user_class(entry["class_name"], f"{head}.class_name", INTERACTION_METHODS)
        config = {**dict(entry.get("config") or {}), "name": entry.get("name", cls.__name__)}
        name = config["name"]
        if name in out:
            raise ConfigError(f"{head}.name: {name!r} is used twice")
        try:
            out[name] = cls(config)
        except Exception as e:  # a user constructor: name the entry whatever it raised
            raise ConfigError(f"{head}: {cls.__name__}(config) failed: {type(e).__name__}: {e}") from e
    return out
