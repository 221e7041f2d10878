"""The FrozenLake AgentScope agent (posttrain.agents.agentscope_frozenlake) against the agent endpoint
with a scripted policy: the real agentscope ReActAgent walks the row's lake, one recorded call per
move, with the example's prompts and action words, and is rewarded at the goal."""

from __future__ import annotations

import logging

import pytest

pytest.importorskip("agentscope", reason="the agentscope extra (pip install 'posttrain[agentscope]')")
pytest.importorskip("gymnasium", reason="the envs extra (pip install 'posttrain[envs]')")

from agent_helpers import scripted_episode  # noqa: E402
from posttrain.agents.agentscope_frozenlake import SYSTEM_PROMPT, frozenlake_agent, parse_move  # noqa: E402
from posttrain.envs.trinity_frozen_lake import trinity_map  # noqa: E402

# seed 0, 3x3: ['FFG', 'FHS', 'FFF']: the player starts right of the hole, the goal is one move up
ROW = {"size": 3, "p": 0.8, "seed": 0}


def test_the_map_is_trinity_s_and_one_move_up_reaches_the_goal():
    assert trinity_map(3, 0.8, seed=0, max_steps=8) == ["FFG", "FHS", "FFF"]
    result, calls, policy = scripted_episode(frozenlake_agent, ["The goal is above me: ```Up```"], ROW)
    assert (result["reward"], result["success"], result["env_done"], result["env_steps"]) == (1.0, 1.0, 1.0, 1.0)
    assert len(calls) == 1  # one reply, one model call (no tools, no second iteration)
    first = policy.prompts[0].replace("<|unk|>", "\t")  # the tiny tokenizer has no tab
    assert "each iteration in the ``` ```" in first and "interation" not in first  # the example's guide
    assert "Current Observation (0): \n _ \t _ \t G \t\n _ \t O \t P \t\n _ \t _ \t _ \t" in first
    assert "The maximum number of steps remaining is 10." in first


def test_an_invalid_reply_leaves_the_player_and_the_next_prompt_says_so_until_the_replies_run_out():
    result, calls, policy = scripted_episode(frozenlake_agent, ["```4```"], ROW, agent_max_steps=3)
    assert (result["reward"], result["success"], result["env_done"], result["env_steps"]) == (0.0, 0.0, 0.0, 3.0)
    assert len(calls) == 3 and len(policy.prompts) == 3
    assert "Your last response is invalid" not in policy.prompts[0]
    assert "Current Observation (1)" in policy.prompts[1] and "Your last response is invalid" in policy.prompts[1]
    assert "The maximum number of steps remaining is 1." in policy.prompts[2]
    assert "Current Observation (0)" in policy.prompts[2]  # the agent's memory keeps the whole walk


def test_a_hole_ends_the_walk_without_reward_and_the_row_s_is_slippery_wins():
    result, calls, _ = scripted_episode(frozenlake_agent, ["```left```"], ROW)
    assert (result["reward"], result["success"], result["env_done"], len(calls)) == (0.0, 0.0, 1.0, 1)
    with pytest.raises(KeyError, match="a FrozenLake row gives the lake's size, p and seed"):
        scripted_episode(frozenlake_agent, ["```Up```"], {"p": 0.8})


def test_only_the_four_words_are_moves():
    assert [parse_move(t) for t in ("```Left```", "```DOWN```", "```right``` then ```up```", "```1```", "```still```", "up")] == [0, 1, 3, None, None, None]
    assert SYSTEM_PROMPT.startswith("You are Qwen, created by Alibaba Cloud.")


def test_log_requests_writes_one_line_per_request(caplog):
    with caplog.at_level(logging.INFO, logger="posttrain.rollout.agent_endpoint"):
        scripted_episode(frozenlake_agent, ["```4```"], ROW, log_requests=True, agent_max_steps=2)
    lines = [r.getMessage() for r in caplog.records if r.name == "posttrain.rollout.agent_endpoint"]
    assert len(lines) == 2 and lines[0].startswith("agent endpoint: episode e: 2 messages, 0 tools, max_tokens 400")
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="posttrain.rollout.agent_endpoint"):
        scripted_episode(frozenlake_agent, ["```4```"], ROW, agent_max_steps=2)
    assert not [r for r in caplog.records if r.name == "posttrain.rollout.agent_endpoint"]
