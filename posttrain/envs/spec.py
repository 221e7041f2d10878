"""`env.custom_envs` entries and env-manager layouts as typed records, checked at load time.

An entry of ``custom_envs`` names one environment configuration (its tag) in ROLL's layout::

    custom_envs:
      Walk4:
        env_type: walk               # a registered name, module:Class or path.py:Class
        env_config: {size: 4}        # keyword arguments of the class
        max_actions_per_traj: 4      # or max_steps: actions before the episode is cut
        max_tokens_per_step: 2       # new tokens the model may write per action
        format_penalty: -0.1         # added per action the pattern or the env rejects
        action_pattern: "<a>(.*?)</a>"  # optional: the action is the last of at most 2 groups (or the whole match); else the class's `action_pattern`, if any
        env_instruction: "..."       # the system message; else the class's `instruction`
        episode_files: [tasks.jsonl] # optional: one episode per row, in order (below)
        episode_columns: {task_desc: prompt}  # optional: a constructor argument read from a column of another name
        seed_per_group: false        # true: env_config.seed becomes each env group's own constant seed
        enable_thinking: false       # optional: the chat template's enable_thinking for this entry's turns (else the run's)

An entry may also prompt each action afresh from a template instead of the growing conversation
(prompt_mode window / observation_window, ROLL's step env managers: posttrain.envs.window_spec), or
from the conversation its environment writes itself (prompt_mode messages: posttrain.envs.window).
ROLL's ProxyEnvManager with its GEMRunner is prompt_mode conversation with the instruction in the
system message (posttrain.envs.runner_spec).

As in ROLL, max_steps, max_actions_per_traj, format_penalty, action_pattern and env_instruction may
also sit inside env_config; the loop reads them from there and does not pass them to the class.

With ``episode_files`` (posttrain's key; Trinity-RFT's environment workflows play one episode per
taskset row) the entry's episodes are the rows of those files (or of a dataset folder's split,
``FOLDER[:SUBSET]@SPLIT``, as data.train_files reads it), in order: a row's ``seed`` column is
the episode's reset seed and its columns named like constructor arguments of the class override
env_config for that episode (other columns, e.g. an index, are not read). ``episode_columns``
(``{argument: column}``) reads an argument from a column of another name (Trinity's
``format.prompt_key``). A class whose ``episode_argument`` names the constructor argument that
makes an episode by itself (trinity_sciworld's ``task_desc``) takes rows without a seed: such a row is
reset with its position among the entry's rows (0, 1, ... over the files in order), so a run
replays the same seeds. Training groups take the next rows each step, wrapping round at the end;
validation groups take the first rows.

An env manager (`train_env_manager`, `val_env_manager`) runs `num_env_groups` groups of
`group_size` environments, split over its `tags` by `num_groups_partition` (evenly when empty).
"""

from __future__ import annotations

import inspect
import re
from dataclasses import dataclass
from typing import Any

from posttrain.config.sections.env import EnvManagerConfig
from posttrain.envs.registry import env_class, make_env
from posttrain.envs.runner_spec import proxy_entry
from posttrain.envs.text_tools import ToolWrapping, parse_tool_wrapper
from posttrain.envs.window import WindowSpec
from posttrain.envs.turn_template import TurnTemplate
from posttrain.envs.window_spec import MANAGERS, WINDOW_KEYS, entry_mode, parse_turn_template, parse_window
from posttrain.errors import ConfigError, DataError

# Keys of a custom_envs entry that posttrain refuses, with the reason (the rest of ROLL's per-env
# keys are templating helpers or belong to features not built yet).
REFUSED = {
    "env_manager_cls": ("posttrain's agent loop plays ROLL's TrajEnvManager (prompt_mode conversation), StepEnvManager (window), "
                        "StepConcatEnvManager (observation_window) and ProxyEnvManager with GEMRunner (conversation, "
                        "instruction_in: system); another manager has no counterpart: remove the key"),
    "agent_runner_cls": "posttrain runs its own agent loop; remove the key",
    "grid_vocab": "templating helper: write the symbol legend into env_instruction",
    "action_lookup": "templating helper: write the action list into env_instruction",
    "max_tokens": "ambiguous in ROLL (per step or per trajectory): use max_tokens_per_step",
}
# use_thread_lock and max_env_step_concurrent bound how many environment calls run at once (ROLL's
# thread lock, and its limiter of concurrent reset/step calls per tag): posttrain's loop makes its
# environment calls from one thread, one at a time, which meets every such bound.
KNOWN = ("env_type", "env_config", "max_steps", "max_actions_per_traj", "max_tokens_per_step", "format_penalty",
         "action_pattern", "env_instruction", "use_thread_lock", "max_env_step_concurrent", "episode_files", "episode_columns", "tool_wrapper",
         "seed_per_group", "enable_thinking", *WINDOW_KEYS)
# ROLL writes the loop's settings inside env_config (its envs parse their own actions); posttrain's
# loop reads them there too and does not pass them to the class.
LIFTED = ("max_steps", "max_actions_per_traj", "format_penalty", "action_pattern", "env_instruction")
# What each refused key may hold because it says what posttrain does anyway.
SAME = {"env_manager_cls": tuple(MANAGERS), "agent_runner_cls": (None,)}
DEFAULT_MAX_STEPS = 10


@dataclass(frozen=True)
class EnvSpec:
    """One checked `custom_envs` entry."""

    tag: str
    env_type: str
    cls: type
    env_config: dict[str, Any]
    max_steps: int  # actions before the episode is cut (truncated, not done)
    max_tokens_per_step: int | None  # None: whatever is left of data.max_response_length
    format_penalty: float | None  # None: the env manager's
    action_pattern: re.Pattern[str] | None
    instruction: str
    window: WindowSpec | None = None  # None: prompt_mode conversation (the whole episode so far)
    turns: TurnTemplate | None = None  # conversation turns written through agent_template; None: as they come
    episodes: tuple[dict[str, Any], ...] = ()  # episode_files' rows: (seed, env_config overrides) each; empty: seeds drawn
    tools: ToolWrapping | None = None  # the entry's tool_wrapper: text tools in front of the env (posttrain.envs.text_tools)
    seed_per_group: bool = False  # env_config.seed is each env group's own constant seed (ROLL's env managers)
    enable_thinking: bool | None = None  # the chat template's enable_thinking for this entry's turns; None: the run's (data.*)

    @property
    def template_kwargs(self) -> dict[str, Any]:
        """Chat-template variables of this entry's own, over the run's (TurnRenderer.with_template_kwargs)."""
        return {} if self.enable_thinking is None else {"enable_thinking": self.enable_thinking}

    def make(self, env_config: dict[str, Any]) -> Any:
        """A fresh environment of this entry with `env_config`, behind its tools when it has any."""
        env = make_env(self.cls, env_config, f"env.custom_envs.{self.tag}")
        return env if self.tools is None else self.tools.wrap(env)

    def episode(self, index: int) -> tuple[int, dict[str, Any]]:
        """The reset seed and env_config of the episode_files row ``index`` (wrapping round)."""
        row = self.episodes[index % len(self.episodes)]
        return row["seed"], {**self.env_config, **{k: v for k, v in row.items() if k != "seed"}}

    def parse_action(self, text: str) -> str | None:
        """The action inside the model's text, or None when the pattern does not match it."""
        if self.action_pattern is None:
            return text
        found = self.action_pattern.search(text)
        if found is None:
            return None
        # ROLL's think-then-answer patterns have two groups (thought, action): the action is the last
        return found.group(self.action_pattern.groups).strip() if self.action_pattern.groups == 2 else (
            found.group(1) if self.action_pattern.groups else found.group(0))


def parse_custom_envs(custom_envs: dict[str, Any]) -> dict[str, EnvSpec]:
    """Every entry of `env.custom_envs` as an `EnvSpec`; every problem of every entry in one error."""
    specs, problems = {}, []
    for tag, entry in custom_envs.items():
        try:
            specs[tag] = _parse_entry(str(tag), entry)
        except ConfigError as e:
            problems.extend(e.problems)
    if problems:
        raise ConfigError(problems)
    return specs


def _parse_entry(tag: str, entry: Any) -> EnvSpec:
    key = f"env.custom_envs.{tag}"
    if not isinstance(entry, dict):
        raise ConfigError(f"{key}: expected a mapping with env_type, env_config, ..., got {type(entry).__name__}")
    # prompt_mode messages: the environment parses the model's text itself, so its pattern stays its own
    native = entry_mode(entry, key)[0] == "messages"
    if isinstance(entry.get("env_config"), dict):
        entry = _lift(entry, key, ("action_pattern",) if native else ())
    entry, problems = proxy_entry(entry, key)  # ROLL's ProxyEnvManager + GEMRunner: posttrain keys
    problems += [f"{key}.{k}: not supported: {REFUSED[k]}" for k in entry if k in REFUSED and entry[k] not in SAME.get(k, ())]
    problems += [f"{key}.{k}: unknown key; an environment entry takes {list(KNOWN)}" for k in entry if k not in REFUSED and k not in KNOWN]
    if "env_type" not in entry:
        problems.append(f"{key}.env_type: missing; name a registered environment, 'module:Class' or 'file.py:Class'")
    env_config = entry.get("env_config") or {}
    if not isinstance(env_config, dict):
        problems.append(f"{key}.env_config: expected a mapping of constructor arguments, got {type(env_config).__name__}")
    steps = {k: entry[k] for k in ("max_steps", "max_actions_per_traj") if entry.get(k) is not None}
    if len(set(steps.values())) > 1:
        problems.append(f"{key}: max_steps and max_actions_per_traj mean the same here and differ ({steps}); keep one")
    max_steps = next(iter(steps.values()), DEFAULT_MAX_STEPS)
    tokens = entry.get("max_tokens_per_step")
    for name, value in (("max_steps", max_steps), ("max_tokens_per_step", tokens)):
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
            problems.append(f"{key}.{name}: must be an integer >= 1, got {value!r}")
    limit = entry.get("max_env_step_concurrent")
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 0):
        problems.append(f"{key}.max_env_step_concurrent: must be an integer >= 0 (0: no limit), got {limit!r}")
    penalty = entry.get("format_penalty")
    if penalty is not None and (isinstance(penalty, bool) or not isinstance(penalty, (int, float)) or penalty > 0):
        problems.append(f"{key}.format_penalty: must be a number <= 0 (a penalty), got {penalty!r}")
    pattern = None
    if native and entry.get("action_pattern") is not None:
        problems.append(f"{key}.action_pattern: not read in prompt_mode messages, where the environment keeps the model's whole "
                        "text in its conversation and parses the action itself: give the pattern to the class in env_config")
    elif entry.get("action_pattern") is not None:
        try:
            pattern = re.compile(str(entry["action_pattern"]), re.DOTALL)
        except re.error as e:
            problems.append(f"{key}.action_pattern: not a regular expression: {e}")
        else:
            if pattern.groups > 2:
                problems.append(f"{key}.action_pattern: at most two capture groups (the action, or a thought and the action), got {pattern.groups}")
    per_group = entry.get("seed_per_group", False)
    if not isinstance(per_group, bool):
        problems.append(f"{key}.seed_per_group: true or false, got {per_group!r}")
    elif per_group and "seed" not in env_config:
        problems.append(f"{key}.seed_per_group: true gives each env group its own env_config.seed, and env_config has no seed to replace")
    thinking = entry.get("enable_thinking")
    if thinking is not None and not isinstance(thinking, bool):
        problems.append(f"{key}.enable_thinking: true, false or null (the run's data.enable_thinking), got {thinking!r}")
    if native and "tool_wrapper" in entry:
        problems.append(f"{key}.tool_wrapper: not supported in prompt_mode messages: the text tools answer in front of an environment "
                        "of text observations, and this one writes the whole conversation itself")
    tools, tool_problems = parse_tool_wrapper(entry["tool_wrapper"], f"{key}.tool_wrapper") if "tool_wrapper" in entry and not native else (None, [])
    problems += tool_problems
    window, window_problems = parse_window(entry, key, tokens)
    turns, turn_problems = parse_turn_template(entry, key, tokens) if window is None and not window_problems else (None, [])
    problems += window_problems + turn_problems
    if problems:
        raise ConfigError(problems)
    cls = env_class(str(entry["env_type"]), f"{key}.env_type")
    check = getattr(cls, "check_runtime", None)
    if callable(check):  # what this machine lacks to play it, named at plan time, not at the first step
        try:
            check()
        except ValueError as e:
            raise ConfigError(f"{key}.env_type {entry['env_type']}: {e}") from None
    instruction = entry.get("env_instruction")
    if instruction is None:
        instruction = getattr(cls, "instruction", "")
    if pattern is None and not native and getattr(cls, "action_pattern", None):  # the class's own, as its framework parses
        pattern = re.compile(cls.action_pattern, re.DOTALL)
    if native and "max_steps" in inspect.signature(cls).parameters:
        env_config.setdefault("max_steps", max_steps)  # an environment writing its own conversation may end it at the last action
    columns = _episode_columns(entry.get("episode_columns"), cls, key, entry.get("episode_files") is not None)
    episodes = _episodes(entry["episode_files"], cls, f"{key}.episode_files", columns) if entry.get("episode_files") is not None else ()
    return EnvSpec(tag, str(entry["env_type"]), cls, dict(env_config), max_steps, tokens,
                   None if penalty is None else float(penalty), pattern, str(instruction), window, turns, episodes, tools,
                   per_group is True, enable_thinking=thinking)


def _episode_columns(columns: Any, cls: type, key: str, files: bool) -> dict[str, str]:
    """The entry's episode_columns ({constructor argument: column}), checked."""
    if columns is None:
        return {}
    key, takes = f"{key}.episode_columns", set(inspect.signature(cls).parameters)
    if not files:
        raise ConfigError(f"{key}: reads columns of episode_files rows, and the entry has no episode_files; remove it or add them")
    if not isinstance(columns, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in columns.items()):
        raise ConfigError(f"{key}: expected a mapping {{constructor argument: column name}}, got {columns!r:.80}")
    unknown = sorted(set(columns) - takes - {"seed"})
    if unknown:
        raise ConfigError(f"{key}: {unknown} are not constructor arguments of {cls.__name__} (it takes {sorted(takes)}) nor seed")
    return dict(columns)


def _episodes(files: Any, cls: type, key: str, columns: dict[str, str] | None = None) -> tuple[dict[str, Any], ...]:
    """Each row of ``files`` as its ``seed`` and the columns ``cls`` takes as constructor arguments
    (read under their `columns` names); a row without a seed that holds the class's
    ``episode_argument`` is seeded with its position among the rows."""
    from posttrain.data.files import as_file_list
    from posttrain.data.sources import read_entry

    takes, columns = set(inspect.signature(cls).parameters), columns or {}
    by_row = getattr(cls, "episode_argument", None)
    out = []
    try:
        # a file, or a dataset folder's split (FOLDER[:SUBSET]@SPLIT: a Trinity taskset converted where it was not)
        for path, rows in (found for entry in as_file_list(files) for found in read_entry(entry, setting=key, default_split="train")):
            for i, row in enumerate(rows):
                missing = [c for c in columns.values() if c not in row]
                if missing:
                    raise ConfigError(f"{key}: {path} row {i}: no column {missing[0]!r} (episode_columns reads it); its columns are {sorted(row)}")
                row = {**{k: v for k, v in row.items() if k not in columns.values()}, **{a: row[c] for a, c in columns.items()}}
                seed = row.get("seed")
                if seed is None and "seed" not in row and by_row is not None and row.get(by_row) is not None:
                    seed = len(out)  # the row names its episode: the reset seed only has to be reproducible
                if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
                    named = f", or a {by_row} column naming the episode" if by_row else ""
                    raise ConfigError(f"{key}: {path} row {i}: the seed column must hold an integer >= 0 (the episode's reset seed){named}, got {seed!r}")
                out.append({"seed": seed, **{k: v for k, v in row.items() if k in takes and k != "seed"}})
    except DataError as e:
        raise ConfigError(f"{key}: {e}") from None
    if not out:
        raise ConfigError(f"{key}: no rows in {files!r}; give files of episodes (a seed column, and constructor arguments of {cls.__name__})")
    return tuple(out)


def _lift(entry: dict[str, Any], key: str, keep: tuple[str, ...] = ()) -> dict[str, Any]:
    """`entry` with the loop's settings moved out of env_config (see LIFTED), but those in `keep`."""
    entry, env_config = dict(entry), dict(entry["env_config"])
    for name in LIFTED:
        if name in env_config and name not in keep:
            value = env_config.pop(name)
            if entry.get(name, value) != value:
                raise ConfigError(f"{key}: {name} is {entry[name]!r} and env_config.{name} is {value!r}; keep one")
            entry[name] = value
    entry["env_config"] = env_config
    return entry


def tag_groups(manager: EnvManagerConfig, specs: dict[str, EnvSpec], key: str) -> list[str]:
    """The tag of each of the manager's `num_env_groups` groups, in order."""
    tags = list(manager.tags)
    unknown = [t for t in tags if t not in specs]
    if unknown:
        raise ConfigError(f"{key}.tags: {unknown} not in env.custom_envs (defined: {sorted(specs)})")
    if not tags:
        raise ConfigError(f"{key}.tags: empty; name the env.custom_envs entries this manager runs")
    parts = list(manager.num_groups_partition)
    if manager.num_env_groups == 0:  # one group per episode_files row
        plain = [t for t in tags if not specs[t].episodes]
        if plain or parts:
            raise ConfigError(f"{key}.num_env_groups: 0 plays one group per row of the tags' episode_files, but "
                              + (f"{plain} have none; give them episode_files or set num_env_groups" if plain else
                                 "num_groups_partition is set too; remove it"))
        return [tag for tag in tags for _ in specs[tag].episodes]
    if not parts:  # evenly, the first tags taking the remainder
        share, extra = divmod(manager.num_env_groups, len(tags))
        parts = [share + (i < extra) for i in range(len(tags))]
    if len(parts) != len(tags) or sum(parts) != manager.num_env_groups or min(parts) < 0:
        raise ConfigError(
            f"{key}.num_groups_partition: {parts} must give one count per tag ({len(tags)} tags) summing to "
            f"num_env_groups ({manager.num_env_groups})"
        )
    return [tag for tag, n in zip(tags, parts) for _ in range(n)]
