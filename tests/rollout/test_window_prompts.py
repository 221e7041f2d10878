"""Window prompt modes (ROLL's step env managers): the exact prompt of every step, the rows each
step trains as, and the checks of the entry keys."""

from __future__ import annotations

import pytest
import torch

from posttrain.envs.spec import parse_custom_envs
from posttrain.envs.walk import Walk
from posttrain.errors import ConfigError
from posttrain.models.tokenizer import CHATML_TEMPLATE
from posttrain.rollout.agent_loop import EnvSlot, LoopLimits, run_episodes
from posttrain.rollout.base import SamplingParams
from posttrain.rollout.episode_render import episode_text
from posttrain.rollout.trajectory import to_rollout_batch
from posttrain.rollout.turn_rows import turn_rows, windowed
from posttrain.rollout.turns import TurnRenderer
from tests.rollout.test_agent_loop import TOK, ScriptedEngine

RENDERER = TurnRenderer(TOK, CHATML_TEMPLATE)
FIELDS = "{env_instruction}|{step_count}|{history_length}|{current_step}|[{history}]|{current_observation}"
TIP = "(IMPORTANT TIPS: this action is not valid, your new response *must* strictly adhere to the format according to env instructions.)"
# seed 0: '_G_P'; L moves left, R back, x is invalid (the player stays, format penalty -0.1), L again
SCRIPT = ["L", "R", "x", "L"]


def play(limits: LoopLimits = LoopLimits(512, 64), **entry):
    spec = parse_custom_envs({"W": {"env_type": "walk", "env_config": {"size": 4}, "max_steps": 4, **entry}})["W"]
    engine = ScriptedEngine(SCRIPT)
    [traj] = run_episodes([EnvSlot(Walk(size=4), spec, 0, "g0", -0.1)], engine, SamplingParams(), RENDERER, limits, "s")
    shown = [TOK.decode(p.input_ids[0][p.attention_mask[0] > 0]) for p, _ in engine.calls]
    return traj, shown


def chat(user: str, system: str = "S") -> str:
    return f"<|im_start|>system\n{system}<|im_end|>\n<|im_start|>user\n{user}<|im_end|>\n<|im_start|>assistant\n"


def test_each_step_is_prompted_with_a_window_of_the_last_two_steps():
    traj, shown = play(prompt_mode="window", history_window=2, agent_template=FIELDS, agent_system_template="S")
    i = "Move P to G: answer L or R."
    s1, s2, s3 = ("(step: 1, observation: _G_P, action: L, reward: 0.0)", "(step: 2, observation: _GP_, action: R, reward: 0.0)",
                  f"(step: 3, observation: _G_P, action: x{TIP}, reward: -0.1)")
    assert shown == [chat(f"{i}|0|0|1|[]|_G_P"), chat(f"{i}|1|1|2|[{s1}]|_GP_"), chat(f"{i}|2|2|3|[{s1}, {s2}]|_G_P"),
                     chat(f"{i}|3|2|4|[{s2}, {s3}]|_G_P")]
    assert traj.truncated and len(traj.turns) == 4
    frames = episode_text(traj, TOK.decode).split("## frame ")[1:]  # the observations, as in conversation mode
    assert [f.split("\n")[1] for f in frames[1:]] == ["_GP_", "_G_P", "_G_P"]
    # ROLL's StepEnvManager writes only the window's invalid steps (history_length still counts the window)
    _, invalid = play(env_manager_cls="roll.pipeline.agentic.env_manager.step_env_manager.StepEnvManager", history_length=3,
                      agent_template=FIELDS, agent_system_template="S")
    assert invalid[2:] == [chat(f"{i}|2|2|3|[]|_G_P"), chat(f"{i}|3|2|4|[{s3}]|_G_P")]


def test_a_changed_window_changes_the_prompts():
    _, two = play(prompt_mode="window", history_window=2, agent_template=FIELDS)
    _, one = play(prompt_mode="window", history_length=2, agent_template=FIELDS)  # ROLL's length 2: one earlier step
    _, every = play(prompt_mode="window", history_length=0, agent_template="[{history}]")  # ROLL's 0: every earlier step
    assert one[:2] == two[:2] and one[2] != two[2]
    assert "(step: 1," not in one[2] and "(step: 2, observation: _GP_" in one[2] and "(step: 1," in two[2]
    assert "(step: 1," in every[3] and "(step: 3," in every[3]
    assert not one[0].startswith("<|im_start|>system")  # no agent_system_template: no system message


def test_the_lengths_cap_each_prompt_and_each_action_not_the_episode():
    # 4 actions of 2 tokens: past a response length of 3 for the episode, but each action fits
    traj, _ = play(LoopLimits(512, 3), prompt_mode="window")
    assert len(traj.turns) == 4 and traj.response_ids and len(traj.response_ids) == 8
    whole, _ = play(LoopLimits(512, 3))  # the conversation mode's response holds the whole episode
    assert len(whole.turns) == 1 and whole.truncated
    short, shown = play(LoopLimits(len(RENDERER.prompt_ids("", "[]")) + 40, 64), prompt_mode="window", history_window=3,
                        agent_template="[{history}]")
    assert short.truncated and len(short.turns) == len(shown) < 4  # the next window prompt would not fit
    first = len(TOK(shown[0], add_special_tokens=False)["input_ids"])  # with the engine's context: prompt and action share it
    capped, shown = play(LoopLimits(512, 64, max_total=first + 2), prompt_mode="window", history_window=3, agent_template="[{history}]")
    assert capped.truncated and len(capped.turns) == len(shown) == 1  # the second prompt, with a step of history, fills it


def test_observation_window_shows_the_earlier_observations_one_per_line():
    _, shown = play(prompt_mode="observation_window", history_window=2)
    assert shown[0] == "<|im_start|>user\n\n_G_P\n<|im_end|>\n<|im_start|>assistant\n"  # no history yet: an empty line
    assert shown[3] == "<|im_start|>user\n_GP_\n_G_P\n_G_P\n<|im_end|>\n<|im_start|>assistant\n"


def test_each_step_trains_as_its_own_prompt_and_action():
    traj, shown = play(prompt_mode="window", history_window=2, agent_template=FIELDS, agent_system_template="S")
    batch = to_rollout_batch([traj], TOK.pad_token_id, 0, ["p"])
    actions = [TOK(a, add_special_tokens=False)["input_ids"] + [TOK.eos_token_id] for a in SCRIPT]
    # the episode row holds the actions only, each a span of its own, all trained
    assert batch.response_ids[0].tolist() == sum(actions, []) and batch.train_mask[0].tolist() == [1.0] * 8
    assert batch.extra_info[0]["turn_spans"] == [[0, 2], [2, 4], [4, 6], [6, 8]]
    rows = turn_rows(batch, TOK.pad_token_id)
    assert len(rows) == 4
    for k in range(4):
        assert TOK.decode(rows.prompt_ids[k][rows.prompt_mask[k] > 0]) == shown[k]
        assert rows.response_ids[k].tolist() == actions[k] and rows.train_mask[k].tolist() == [1.0, 1.0]
        assert rows.response_mask[k].tolist() == [1.0, 1.0]
    assert rows.extra_info[2]["turn_rewards"] == [pytest.approx(-0.1)]
    # a forward pass on the turn rows lands on each action's columns of the episode row
    prompt_lengths = rows.prompt_mask.sum(1)  # (B',)
    out = windowed(lambda r: r.prompt_mask.sum(1, keepdim=True).expand(-1, r.response_ids.shape[1]).clone(), batch, TOK.pad_token_id)
    assert out[0].tolist() == torch.repeat_interleave(prompt_lengths, 2).tolist()


def test_window_keys_are_checked():
    def problems(**entry):
        with pytest.raises(ConfigError) as e:
            parse_custom_envs({"W": {"env_type": "walk", **entry}})
        return str(e.value)

    assert "fields ['observation'] are not filled in prompt_mode window" in problems(prompt_mode="window", agent_template="{observation}")
    assert "fields ['env_instruction'] are not filled in prompt_mode observation_window" in problems(
        env_manager_cls="roll.pipeline.agentic.env_manager.step_concat_env_manager.StepConcatEnvManager", agent_template="{env_instruction}")
    assert "max_tokens_per_step, which is not set" in problems(prompt_mode="window", agent_template="{max_response_length}")
    assert "fields ['history'] are not filled in prompt_mode conversation" in problems(agent_template="{history}")
    assert "with no window of earlier steps; set prompt_mode: window" in problems(history_window=2)
    assert "history_window and ROLL's history_length both set" in problems(prompt_mode="window", history_window=1, history_length=2)
    assert "disagree" in problems(prompt_mode="conversation", env_manager_cls="roll.pipeline.agentic.env_manager.step_env_manager.StepEnvManager")
    assert "no counterpart" in problems(env_manager_cls="my.Manager")
