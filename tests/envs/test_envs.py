"""Environments: the built-in walk, the registry, custom_envs entries and env-group layouts."""

from __future__ import annotations

import pytest

from posttrain.config.sections.env import EnvManagerConfig
from posttrain.envs import ENVS, env_class
from posttrain.envs.spec import parse_custom_envs, tag_groups
from posttrain.envs.walk import Walk
from posttrain.errors import ConfigError

USER_ENV = '''
class Echo:
    instruction = "say it"

    def __init__(self, word="hi"):
        self.word = word

    def reset(self, seed):
        return self.word

    def step(self, action_text):
        return self.word, float(action_text == self.word), True, {"success": action_text == self.word}
'''


def test_walk_is_reproducible_by_seed_and_walls_stop_the_player():
    boards = [Walk(size=5).reset(seed) for seed in range(20)]
    assert boards == [Walk(size=5).reset(seed) for seed in range(20)] and len(set(boards)) > 5
    env = Walk(size=4)
    assert env.reset(seed=2) == "P__G"
    assert env.step("L") == ("P__G", 0.0, False, {"action_is_valid": True, "success": False})  # the wall
    assert env.step(" jump") == ("P__G", 0.0, False, {"action_is_valid": False, "success": False})
    assert [env.step("R")[2] for _ in range(3)] == [False, False, True]


def test_unknown_env_type_lists_the_registered_ones():
    with pytest.raises(ConfigError, match=r"env.custom_envs.X.env_type: unknown environment 'webarena'; registered: \['frozen_lake', 'game:GuessTheNumber-v0', .*'roll_math', 'roll_qa', 'sokoban', 'sokoban_native_env', 'task', .*'trinity_frozen_lake', 'trinity_raft_alfworld', 'trinity_sciworld', 'trinity_webshop', 'walk', 'webshop'\], "
                       r"rg:NAME \(a reasoning-gym dataset\), or give your own class"):
        parse_custom_envs({"X": {"env_type": "webarena"}})
    assert ENVS["walk"] is Walk


def test_user_envs_load_by_file_and_by_module(tmp_path, monkeypatch):
    (tmp_path / "my_envs.py").write_text(USER_ENV)
    by_file = env_class(f"{tmp_path / 'my_envs.py'}:Echo", "k")
    monkeypatch.syspath_prepend(str(tmp_path))
    by_module = env_class("my_envs:Echo", "k")
    assert by_file.__name__ == by_module.__name__ == "Echo"
    spec = parse_custom_envs({"E": {"env_type": "my_envs:Echo", "env_config": {"word": "yo"}}})["E"]
    assert spec.instruction == "say it" and spec.cls(**spec.env_config).reset(0) == "yo"
    with pytest.raises(ConfigError, match=r"defines no class 'Nope'; its classes are \['Echo'\]"):
        env_class("my_envs:Nope", "k")
    with pytest.raises(ConfigError, match="k: file not found: missing.py"):
        env_class("missing.py:Echo", "k")


def test_roll_entries_lift_loop_settings_out_of_env_config():
    entry = {
        "env_type": "walk", "max_steps": 6, "max_tokens_per_step": 8, "use_thread_lock": True, "max_env_step_concurrent": 4,
        "env_manager_cls": "roll.pipeline.agentic.env_manager.traj_env_manager.TrajEnvManager", "agent_runner_cls": None,
        "env_config": {"size": 5, "max_steps": 6, "format_penalty": -0.15, "action_pattern": "<answer>(.*?)</answer>",
                       "env_instruction": "walk"},
    }
    spec = parse_custom_envs({"W": entry})["W"]
    assert spec.env_config == {"size": 5} and (spec.max_steps, spec.max_tokens_per_step, spec.format_penalty) == (6, 8, -0.15)
    assert spec.instruction == "walk" and spec.parse_action("I go <answer>L</answer>") == "L" and spec.parse_action("L") is None


def test_refused_and_bad_entry_keys_are_all_named():
    entry = {"env_type": "walk", "agent_template": "{obs}", "env_manager_cls": "my.Manager", "max_steps": 3,
             "max_actions_per_traj": 4, "format_penalty": 0.5, "action_pattern": "(a)(b)(c)", "history": 2, "max_env_step_concurrent": -1}
    with pytest.raises(ConfigError) as e:
        parse_custom_envs({"W": entry})
    problems = e.value.problems
    assert ("env.custom_envs.W.agent_template: fields ['obs'] are not filled in prompt_mode conversation; it fills "
            "['observation', 'turn_idx', 'actions_left', 'max_response_length', 'suffix']") in problems
    assert any(p.startswith("env.custom_envs.W.env_manager_cls: not supported") for p in problems)
    assert any(p.startswith("env.custom_envs.W.history: unknown key") for p in problems)
    assert "env.custom_envs.W.max_env_step_concurrent: must be an integer >= 0 (0: no limit), got -1" in problems
    assert any("max_steps and max_actions_per_traj mean the same here and differ" in p for p in problems)
    assert any(p.startswith("env.custom_envs.W.format_penalty: must be a number <= 0") for p in problems)
    assert any(p.startswith("env.custom_envs.W.action_pattern: at most two capture groups") for p in problems)


def test_groups_are_split_over_tags_by_partition_or_evenly():
    specs = parse_custom_envs({"A": {"env_type": "walk"}, "B": {"env_type": "walk"}})
    assert tag_groups(EnvManagerConfig(num_env_groups=3, tags=["A", "B"]), specs, "m") == ["A", "A", "B"]
    assert tag_groups(EnvManagerConfig(num_env_groups=3, tags=["A", "B"], num_groups_partition=[0, 3]), specs, "m") == ["B"] * 3
    with pytest.raises(ConfigError, match=r"m.num_groups_partition: \[1, 1\] must give one count per tag \(2 tags\) summing to num_env_groups \(3\)"):
        tag_groups(EnvManagerConfig(num_env_groups=3, tags=["A", "B"], num_groups_partition=[1, 1]), specs, "m")
    with pytest.raises(ConfigError, match=r"m.tags: \['C'\] not in env.custom_envs"):
        tag_groups(EnvManagerConfig(tags=["C"]), specs, "m")


def test_the_docs_example_env_plays_as_documented(tmp_path):
    import re
    from pathlib import Path

    from posttrain.envs.base import check_step

    doc = (Path(__file__).resolve().parents[2] / "docs" / "agentic.md").read_text()
    (source,) = [block for block in re.findall(r"```python\n(.*?)```", doc, re.DOTALL) if "class MyEnv" in block]
    (tmp_path / "my_envs.py").write_text(source)
    spec = parse_custom_envs({"G": {"env_type": f"{tmp_path / 'my_envs.py'}:MyEnv", "env_config": {"high": 5}}})["G"]
    env = spec.cls(**spec.env_config)
    assert spec.instruction.startswith("Guess the number") and env.reset(seed=9) == "a number from 0 to 5"
    assert check_step(env.step("x"), "G", 9, 1).info == {"action_is_valid": False}
    assert check_step(env.step("1"), "G", 9, 2).observation == "higher"
    assert check_step(env.step("3"), "G", 9, 3).done  # the secret is 9 % 6


def test_a_think_then_answer_pattern_takes_the_last_group_as_the_action():
    entry = {"env_type": "walk", "env_config": {"action_pattern": r"<think>(.*?)</think>\s*<answer>(.*?)</answer>"}}
    spec = parse_custom_envs({"W": entry})["W"]
    assert spec.parse_action("<think>left is closer</think> <answer> L </answer>") == "L"
    assert spec.parse_action("<answer>L</answer>") is None  # no thought: the pattern does not match
