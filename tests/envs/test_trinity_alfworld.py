"""trinity_alfworld (Trinity-RFT's alfworld_workflow) on a small real game: alfworld's domain and grammar,
textworld's PDDL engine, no download."""

from __future__ import annotations

import doctest
import json
import sys

import pytest

from posttrain.envs import trinity_alfworld
from posttrain.envs.registry import make_env
from posttrain.envs.trinity_alfworld import GAME_WALKTHROUGH, TrinityAlfworld
from posttrain.errors import ConfigError

WIN = [f"<think>next</think><action>{a}</action>" for a in GAME_WALKTHROUGH]
HINT = "Please check if the action you take is valid or you have carefully followed the action format."


@pytest.fixture
def game(alfworld_game):
    return alfworld_game


def test_doctests():
    assert doctest.testmod(trinity_alfworld).failed == 0


def test_the_instruction_is_trinitys_system_prompt():
    text = TrinityAlfworld.instruction
    assert text.startswith("\nYou are an agent interacting with a virtual text-based environment.\n\n## Notes:\n")
    assert "  move (object) to (receptacle):  place an object in or on a receptacle\n" in text
    assert text.endswith("<think> To solve the task, I need first to ... </think><action>go to cabinet 1</action>\n")


def test_reset_and_a_valid_action_read_as_trinitys_user_turns(game):
    env = TrinityAlfworld(game)
    assert env.reset(seed=0) == ("Observation: -= Welcome to TextWorld, ALFRED! =-\n\nYou are in the middle of a room. "
                                 "Looking quickly around you, you see a cabinet 1, a countertop 1, and a diningtable 1.\n\n"
                                 "Your task is to: put some apple on countertop.")
    assert env.step("<action>go to cabinet 1</action>") == (
        "Observation: You arrive at cabinet 1. The cabinet 1 is closed.", 0.0, False, {"action_is_valid": True, "success": False})
    assert env.step("<think>open it</think><action> open cabinet 1")[0] == (  # unclosed: to the end, stripped
        "Observation: You open the cabinet 1. The cabinet 1 is open. In it, you see nothing.")


def test_winning_gives_the_games_reward_and_ends(game):
    env = TrinityAlfworld(game, max_env_steps=len(WIN))  # the win on the last allowed action is a win
    env.reset(seed=0)
    results = [env.step(a) for a in WIN]
    assert [r[1:3] for r in results] == [(0.0, False)] * 3 + [(1.0, True)]
    assert results[-1][0] == "Observation: You move the apple 1 to the countertop 1." and results[-1][3]["success"]
    env.reset(seed=0)  # a fresh game: the apple is back on the table
    assert env.step(WIN[0])[0] == "Observation: You arrive at diningtable 1. On the diningtable 1, you see a apple 1."


def test_a_reply_without_action_sends_nothing_and_gets_the_hint(game):
    env = TrinityAlfworld(game)
    env.reset(seed=0)
    assert env.step("go to cabinet 1") == (f"Observation: Nothing happens.{HINT}", 0.0, False, {"action_is_valid": False, "success": False})
    assert env.step("<action>jump</action>")[0] == f"Observation: Nothing happens.{HINT}"  # the game does not know it


@pytest.mark.parametrize("max_env_steps", [2, 3])
def test_max_env_steps_without_an_end_costs_0_1_and_ends(game, max_env_steps):
    env = TrinityAlfworld(game, max_env_steps=max_env_steps)
    env.reset(seed=0)
    results = [env.step(a) for a in WIN[:max_env_steps]]
    assert [r[1:3] for r in results] == [(0.0, False)] * (max_env_steps - 1) + [(-0.1, True)]
    assert sum(r[1] for r in results) == -0.1  # Trinity's final reward of the episode


def test_textworlds_own_50_move_limit_ends_with_nothing(game):
    env = TrinityAlfworld(game, max_env_steps=60)
    env.reset(seed=0)
    results = [env.step("<action>look</action>") for _ in range(50)]
    assert [r[1:3] for r in results[-2:]] == [(0.0, False), (0.0, True)]


def test_the_reset_gives_back_sys_argv(game):
    argv = list(sys.argv)
    TrinityAlfworld(game).reset(seed=0)  # fast-downward's translator sets sys.argv to its own
    assert sys.argv == argv


def test_game_file_mistakes_name_the_file_and_the_column(game, tmp_path):
    missing = str(tmp_path / "none" / "game.tw-pddl")
    with pytest.raises(ConfigError, match=r"env.custom_envs.A.env_config: task_desc \(the row's game file\) '.*none/game.tw-pddl': no such file"):
        make_env(TrinityAlfworld, {"task_desc": missing}, "env.custom_envs.A")
    (tmp_path / "bad.tw-pddl").write_text("{not json")
    with pytest.raises(ValueError, match=r"bad.tw-pddl': cannot be read as a tw-pddl game \(JSON\)"):
        TrinityAlfworld(str(tmp_path / "bad.tw-pddl"))
    (tmp_path / "empty.tw-pddl").write_text(json.dumps({"grammar": ""}))
    with pytest.raises(ValueError, match=r"empty.tw-pddl': not a tw-pddl game, it lacks pddl_domain, pddl_problem$"):
        TrinityAlfworld(str(tmp_path / "empty.tw-pddl"))
    (tmp_path / "alone.tw-pddl").write_text(open(game).read())
    with pytest.raises(ValueError, match=r"alone.tw-pddl': its folder has no traj_data.json"):
        TrinityAlfworld(str(tmp_path / "alone.tw-pddl"))
    with pytest.raises(ValueError, match=r"trinity_alfworld needs task_desc"):
        TrinityAlfworld()
    with pytest.raises(ValueError, match=r"max_env_steps must be an integer >= 1, got 0"):
        TrinityAlfworld(game, max_env_steps=0)


def test_a_missing_package_is_one_line_naming_what_to_install(monkeypatch):
    real = trinity_alfworld.importlib.util.find_spec
    monkeypatch.setattr(trinity_alfworld.importlib.util, "find_spec", lambda name: None if name == "fast_downward" else real(name))
    with pytest.raises(ValueError, match=r"^trinity_alfworld plays .*fast_downward is not installed: pip install 'posttrain\[envs\]' \(or alfworld; .*make\)$"):
        TrinityAlfworld("game.tw-pddl")


def test_smoke_rows_are_a_playable_game(game):
    rows = TrinityAlfworld.smoke_rows()
    env = TrinityAlfworld(**rows[0])
    env.reset(seed=0)
    assert [env.step(a)[1] for a in WIN] == [0.0, 0.0, 0.0, 1.0]


def test_a_machine_without_alfworld_is_named_when_the_entry_is_read(monkeypatch):
    """`config plan` (and the run) read custom_envs before any environment is built: a missing package
    is one line naming the entry and what installs it, not an error at the first step."""
    from posttrain.envs.spec import parse_custom_envs

    monkeypatch.setitem(sys.modules, "alfworld", None)  # find_spec("alfworld") -> None: not installed
    for env_type in ("trinity_alfworld", "trinity_raft_alfworld"):
        with pytest.raises(ConfigError, match=rf"env.custom_envs.a.env_type {env_type}: .*alfworld is not installed: "
                                              r"pip install 'posttrain\[envs\]'"):
            parse_custom_envs({"a": {"env_type": env_type, "max_steps": 2, "env_config": {"task_desc": "g.tw-pddl"}}})
