"""trinity_raft_alfworld (Trinity-RFT's RAFT_alfworld_workflow) on trinity_alfworld's small real game."""

from __future__ import annotations

import doctest

import pytest

from posttrain.envs import trinity_raft_alfworld
from posttrain.envs.trinity_alfworld import GAME_WALKTHROUGH
from posttrain.envs.trinity_raft_alfworld import MAX_ENV_STEPS, TrinityRaftAlfworld


def reply(action: str) -> str:
    return f"<experience>Look where apples are kept.</experience>\\n\\n<think>next</think>\\n\\n<action>{action}</action>"


@pytest.fixture
def game(alfworld_game):
    return alfworld_game


def test_doctests():
    assert doctest.testmod(trinity_raft_alfworld).failed == 0


def test_the_instruction_is_the_rendered_raft_template():
    text = TrinityRaftAlfworld.instruction
    assert text.startswith("You are an agent interacting with a virtual text-based environment.\n\n## Response Format:\n")
    # the template writes backslash-n characters between the example's tags, not line breaks
    assert "</experience>\\n\\n<think> To solve the task, I need first to ... </think>\\n\\n<action>go to cabinet 1</action>" in text
    assert "  move (object) to (receptacle):    place an object in or on a receptacle\n" in text
    assert text.endswith("rather than generic statements, placeholder content, or overly specific behavioral guidelines.")


def test_a_won_episode_with_every_tag_is_a_success_scored_by_the_game(game):
    env = TrinityRaftAlfworld(game)
    assert env.reset(seed=0).startswith("Observation: -= Welcome to TextWorld, ALFRED! =-")
    results = [env.step(reply(a)) for a in GAME_WALKTHROUGH]
    assert [r[1:3] for r in results] == [(0.0, False)] * 3 + [(1.0, True)]
    assert all(r[3]["action_is_valid"] for r in results) and results[-1][3]["success"]
    assert [r[3]["success"] for r in results[:-1]] == [False] * 3


def test_a_reply_missing_a_tag_sends_no_action_and_is_not_well_formed(game):
    env = TrinityRaftAlfworld(game)
    env.reset(seed=0)
    observation, reward, done, info = env.step("<think>go</think><action>go to diningtable 1</action>")  # no <experience>
    assert observation.startswith("Observation: Nothing happens.") and (reward, done) == (0.0, False)
    assert info == {"action_is_valid": False, "success": False}
    # the tags out of order do not match either
    assert not env.step("<action>look</action><experience>e</experience><think>t</think>")[3]["action_is_valid"]


def test_three_identical_actions_end_the_episode_unscored_before_the_third_is_played(game):
    env = TrinityRaftAlfworld(game)
    env.reset(seed=0)
    assert env.step(reply("go to diningtable 1"))[2] is False
    assert env.step(reply("go to cabinet 1"))[2] is False
    assert env.step(reply("go to cabinet 1"))[2] is False
    assert env.step(reply("go to cabinet 1")) == ("", 0.0, True, {"action_is_valid": True, "success": False})
    env.reset(seed=0)  # the count starts again with the game
    assert env.step(reply("go to cabinet 1"))[2] is False


def test_fifty_actions_end_the_episode_with_the_last_reward(game):
    env = TrinityRaftAlfworld(game)
    env.reset(seed=0)
    results = [env.step(reply(("look", "inventory")[i % 2])) for i in range(MAX_ENV_STEPS)]
    assert [r[2] for r in results] == [False] * (MAX_ENV_STEPS - 1) + [True]
    assert results[-1][1] == 0.0 and not results[-1][3]["success"]


def test_a_row_without_a_game_names_what_it_needs(tmp_path):
    with pytest.raises(ValueError, match="needs task_desc"):
        TrinityRaftAlfworld()
    pytest.importorskip("alfworld")
    with pytest.raises(ValueError, match="no such file"):
        TrinityRaftAlfworld(str(tmp_path / "game.tw-pddl"))
