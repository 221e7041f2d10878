"""`posttrain smoke` on an agentic config: a handful of environments instead of the cluster's hundreds.

An agentic step plays `num_env_groups x group_size` episodes, which must divide the step's
trajectories (data.train_batch_size x rollout.n). The smoke run keeps one group of at most two
environments per manager, so its two-trajectory steps fit; the tags beyond the first then play no
group (their `num_groups_partition` goes with the count it split); a manager that plays one group per
row of its tags' episode files (num_env_groups 0) whose files are not here plays one seeded group. The prompt gets room for the env's
instruction and first observation in the tiny tokenizer's tokens. An environment over a dataset
(`roll_math`, `roll_qa`: posttrain.envs.dataset_envs) whose dataset this machine lacks plays
synthetic rows with its question and answer columns instead; an entry whose episode files are not
here plays its class's own stand-in rows (``smoke_rows()``: trinity_sciworld's two real tasks) when
it has them.
"""

from __future__ import annotations

import inspect
import json
from pathlib import Path
from typing import Any

from posttrain.envs.spec import LIFTED
from posttrain.errors import ConfigError, DataError

MANAGERS = ("train_env_manager", "val_env_manager")
# The tiny tokenizer writes about one token per character: an env's instruction and observation,
# a few hundred tokens for the real one, need this much room.
PROMPT_LENGTH = 4096
GROUPS = 1
GROUP_SIZE = 2


def shrink_env_managers(native: dict[str, Any]) -> list[str]:
    """Shrink each env manager the config sets, and give an agentic or agent-function stage's prompts room; one line per change."""
    env = native.get("env") if isinstance(native.get("env"), dict) else {}
    agent = ((native.get("rollout") or {}).get("agent") or {}).get("function")  # an agent function's conversations grow too
    lines = []
    for name in MANAGERS:
        manager = env.get(name)
        if not isinstance(manager, dict):
            continue
        entries = env.get("custom_envs") or {}
        files = [t for t in manager.get("tags") or [] if isinstance(entries.get(t), dict) and entries[t].get("episode_files")]
        if manager.get("num_env_groups") == 0 and manager.get("tags") and not files:  # its episode files are on the cluster's disk
            manager["num_env_groups"] = GROUPS
            lines.append(f"env.{name}.num_env_groups: 0 -> {GROUPS} (one group per episode-file row, and the tags' episode files are "
                         "not on this machine: a seeded group instead)")
        for key, new in (("num_env_groups", lambda v: min(v, GROUPS)), ("group_size", lambda v: min(v, GROUP_SIZE))):
            old = manager.get(key)
            if isinstance(old, int) and not isinstance(old, bool) and new(old) != old:
                manager[key] = new(old)
                lines.append(f"env.{name}.{key}: {old} -> {manager[key]}")
        if manager.get("num_groups_partition") and "num_env_groups" in manager:
            lines.append(f"env.{name}.num_groups_partition: {manager.pop('num_groups_partition')} -> left out (the first tag plays the group)")
    data = native.setdefault("data", {})
    if (isinstance(env.get("train_env_manager"), dict) or agent) and (data.get("max_prompt_length") or 0) < PROMPT_LENGTH:
        lines.append(f"data.max_prompt_length: {data.get('max_prompt_length')} -> {PROMPT_LENGTH} (the tiny tokenizer's tokens are "
                     "about one per character: room for the " + ("agent's conversation" if agent else "env's instruction and observation") + ")")
        data["max_prompt_length"] = PROMPT_LENGTH
    return lines


def local_env_datasets(native: dict[str, Any], workdir: Path) -> list[str]:
    """Synthetic rows for each played dataset environment whose dataset is not on this machine."""
    from posttrain.envs.registry import ENVS

    env = native.get("env") if isinstance(native.get("env"), dict) else {}
    entries = env.get("custom_envs") or {}
    tags = [t for name in MANAGERS for t in ((env.get(name) or {}).get("tags") or [])]
    lines = []
    for tag in dict.fromkeys(tags):
        entry = entries.get(tag)
        cls = ENVS.get(entry.get("env_type")) if isinstance(entry, dict) else None
        config = entry.get("env_config") if isinstance(entry, dict) else None
        if not callable(getattr(cls, "check_data", None)) or not isinstance(config, dict):
            continue
        # the entry's own keys a ROLL env_config may hold (max_steps, ...), which the run lifts out of it (posttrain.envs.spec)
        params = inspect.signature(cls).parameters
        kwargs = {k: v for k, v in config.items() if not (k in LIFTED and k not in params)}
        try:
            cls.check_data(dict(kwargs))
            continue
        except DataError:
            pass
        except (ConfigError, TypeError, ValueError):  # a bad env_config: the run names it
            continue
        probe = cls(**kwargs)
        path = workdir / f"env_{tag}.jsonl"
        rows = [{probe.question_key: f"What is {i} + {i}?", probe.answer_key: str(2 * i)} for i in range(8)]
        path.write_text("".join(json.dumps(r) + "\n" for r in rows))
        lines.append(f"env.custom_envs.{tag}.env_config.dataset_name: {config.get('dataset_name')} -> {path} "
                     f"(8 synthetic rows with its columns {probe.question_key!r} and {probe.answer_key!r})")
        config["dataset_name"] = str(path)
        config.pop("split", None)
    return lines


def local_episode_files(native: dict[str, Any], workdir: Path) -> list[str]:
    """Each custom_envs entry whose episode_files this machine lacks (or whose class needs rows and has
    none) plays its class's ``smoke_rows()`` (under the entry's episode_columns names), written to the smoke folder."""
    from posttrain.envs.registry import ENVS
    from posttrain.files import parse_dataset_entry  # a folder's split (FOLDER@SPLIT) is here when its folder is

    entries = (native.get("env") or {}).get("custom_envs") if isinstance(native.get("env"), dict) else None
    lines = []
    for tag, entry in (entries or {}).items():
        files = entry.get("episode_files") if isinstance(entry, dict) else None
        cls = ENVS.get(entry.get("env_type")) if isinstance(entry, dict) else None
        if not callable(getattr(cls, "smoke_rows", None)):
            continue
        # no files at all: the translation left the taskset's path out (not on this machine), and the class
        # needs rows unless env_config names its episode (its episode_argument)
        needs = getattr(cls, "episode_argument", None) not in (None, *((entry.get("env_config") or {}).keys()))
        files = [files] if isinstance(files, str) else list(files or [])
        if (files and all(isinstance(f, str) and f and Path(parse_dataset_entry(f)[0]).expanduser().exists() for f in files)) or (not files and not needs):
            continue
        columns = entry.get("episode_columns") if isinstance(entry.get("episode_columns"), dict) else {}
        rows = [{columns.get(k, k): v for k, v in row.items()} for row in cls.smoke_rows()]
        path = workdir / f"env_{tag}_episodes.jsonl"
        path.write_text("".join(json.dumps(r) + "\n" for r in rows))
        entry["episode_files"] = [str(path)]
        lines.append(f"env.custom_envs.{tag}.episode_files: {files or None} -> {path} ({len(rows)} stand-in rows of "
                     f"{entry['env_type']}: the taskset is not on this machine)")
    return lines
