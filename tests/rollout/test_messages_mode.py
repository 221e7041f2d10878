"""prompt_mode messages (ROLL's AgentNativeStepEnvManager): the environment writes the conversation,
each action is prompted with it through the chat template and trains as its own row."""

from __future__ import annotations

import pytest

from posttrain.envs.base import EnvError
from posttrain.envs.sokoban import Sokoban
from posttrain.envs.sokoban_native import SokobanNative
from posttrain.envs.spec import parse_custom_envs
from posttrain.errors import ConfigError
from posttrain.models.tokenizer import CHATML_TEMPLATE
from posttrain.rollout.agent_loop import EnvSlot, LoopLimits, run_episodes
from posttrain.rollout.base import SamplingParams
from posttrain.rollout.trajectory import to_rollout_batch
from posttrain.rollout.turn_rows import turn_rows
from posttrain.rollout.turns import TurnRenderer
from tests.rollout.test_agent_loop import TOK, ScriptedEngine

RENDERER = TurnRenderer(TOK, CHATML_TEMPLATE)
ROOM = {"dim_room": [5, 5], "num_boxes": 1, "search_depth": 30}
# seed 3's room (see posttrain.envs.sokoban): Left moves, "hm" matches no pattern, Right moves back, Up solves it
SCRIPT = ["I go <answer>Left</answer>", "hm", "<answer>Right</answer>", "<answer>Up</answer>"]


def play(script=SCRIPT, env_config=None, **entry):
    config = {**ROOM, "format_penalty": -0.15, "system_template": "Play.", "observation_suffix": "Next?", **(env_config or {})}
    spec = parse_custom_envs({"N": {"env_type": "sokoban_native_env", "prompt_mode": "messages", "max_steps": 6,
                                    "env_config": config, **entry}})["N"]
    env = spec.make(spec.env_config)
    engine = ScriptedEngine(script)
    [traj] = run_episodes([EnvSlot(env, spec, 3, "g0", spec.format_penalty)], engine, SamplingParams(), RENDERER, LoopLimits(4096, 64), "s")
    shown = [TOK.decode(p.input_ids[0][p.attention_mask[0] > 0]) for p, _ in engine.calls]
    return traj, shown, env


def turn(role: str, text: str) -> str:
    return f"<|im_start|>{role}\n{text}<|im_end|>\n"


def test_each_action_is_prompted_with_the_conversation_the_environment_wrote():
    traj, shown, env = play()
    rooms = [Sokoban(**ROOM)]
    first = rooms[0].reset(3)
    after = [rooms[0].step(a)[0] for a in ("Left", "", "Right")]
    system = turn("system", f"Play.\n\n{Sokoban.instruction}")
    user = [turn("user", f"The room now:\n{r}\n\nNext?") for r in [first, *after]]
    assistant = [turn("assistant", s) for s in SCRIPT]
    head = "<|im_start|>assistant\n"
    shown = [s.replace("<|unk|>" * 3, "√") for s in shown]  # the tiny tokenizer spells √ as three unknown bytes
    assert shown == [system + user[0] + head, system + user[0] + assistant[0] + user[1] + head,
                     system + user[0] + assistant[0] + user[1] + assistant[1] + user[2] + head,
                     system + "".join(u + a for u, a in zip(user[:3], assistant[:3])) + user[3] + head]
    # the environment got the model's whole text (no pattern applied by the loop) and parsed the action itself
    assert [m["content"] for m in env.messages[2::2]] == SCRIPT
    assert traj.done and traj.success and [t.valid for t in traj.turns] == [True, False, True, True]
    # the invalid text: the room's -0.1 and the format penalty lifted out of env_config
    assert [t.reward for t in traj.turns] == pytest.approx([-0.1, -0.25, -0.1, 10.9])


def test_each_action_trains_as_its_own_prompt_and_action():
    traj, shown, _ = play()
    batch = to_rollout_batch([traj], TOK.pad_token_id, 0, ["p"])
    actions = [TOK(a, add_special_tokens=False)["input_ids"] + [TOK.eos_token_id] for a in SCRIPT]
    assert batch.response_ids[0].tolist() == sum(actions, [])  # the episode row holds the actions only
    rows = turn_rows(batch, TOK.pad_token_id)
    assert len(rows) == 4
    for k in range(4):
        assert TOK.decode(rows.prompt_ids[k][rows.prompt_mask[k] > 0]) == shown[k]
        assert rows.response_ids[k][rows.response_mask[k] > 0].tolist() == actions[k]


def test_the_environments_own_pattern_decides_what_is_an_action():
    traj, _, _ = play(SCRIPT + SCRIPT, env_config={"action_pattern": "<move>(.*?)</move>"})
    assert [t.valid for t in traj.turns] == [False] * 6 and traj.truncated  # max_steps 6, nothing matched
    assert parse_custom_envs({"N": {"env_type": "sokoban_native_env", "prompt_mode": "messages",
                                    "env_config": {"action_pattern": "<m>(.*)</m>"}}})["N"].env_config["action_pattern"] == "<m>(.*)</m>"


def test_the_longest_prompt_ends_the_episode():
    spec = parse_custom_envs({"N": {"env_type": "sokoban_native_env", "prompt_mode": "messages", "env_config": ROOM}})["N"]
    first = len(RENDERER.messages_ids(SokobanNative(**ROOM).reset(3)))
    engine = ScriptedEngine(["<answer>Left</answer>"] * 10)
    [traj] = run_episodes([EnvSlot(spec.make(spec.env_config), spec, 3, "g0", 0.0)], engine, SamplingParams(), RENDERER,
                          LoopLimits(first + 200, 64), "s")
    assert traj.truncated and len(traj.turns) == len(engine.calls) < 10  # as ROLL's manager stops at sequence_length


def test_an_environment_that_answers_text_fails_its_episode():
    spec = parse_custom_envs({"W": {"env_type": "walk", "prompt_mode": "messages"}})["W"]
    with pytest.raises(EnvError, match=r"W \(walk\) \(seed 0, reset\): in prompt_mode messages the observation must be the conversation so far"):
        run_episodes([EnvSlot(spec.make({}), spec, 0, "g0", 0.0)], ScriptedEngine(["L"]), SamplingParams(), RENDERER, LoopLimits(512, 64), "s")


def test_keys_prompt_mode_messages_does_not_read_are_refused():
    def problems(**entry):
        with pytest.raises(ConfigError) as e:
            parse_custom_envs({"N": {"env_type": "sokoban_native_env", "prompt_mode": "messages", **entry}})
        return str(e.value)

    assert "agent_template: not read: prompt_mode messages renders the environment's own conversation" in problems(agent_template="{observation}")
    assert "history_window: not read" in problems(history_window=2)
    assert "action_pattern: not read in prompt_mode messages" in problems(action_pattern="<a>(.*)</a>")
    assert "tool_wrapper: not supported in prompt_mode messages" in problems(tool_wrapper={"tool_configs": {}})
    native = "roll.pipeline.agentic.env_manager.agent_native_env_manager.AgentNativeStepEnvManager"
    assert parse_custom_envs({"N": {"env_type": "sokoban_native_env", "env_manager_cls": native}})["N"].window.mode == "messages"


def test_sokoban_native_keeps_the_conversation_and_the_rooms_of_sokoban():
    env, plain = SokobanNative(**ROOM), Sokoban(**ROOM)
    opening = env.reset(7)
    assert [m["role"] for m in opening] == ["system", "user"] and plain.reset(7) in opening[1]["content"]
    messages, reward, done, info = env.step("<answer>left</answer> and more")
    assert (reward, done, info) == plain.step("Left")[1:] and messages[2] == {"role": "assistant", "content": "<answer>left</answer> and more"}
    assert messages[3]["content"].startswith(f"The room now:\n{plain.render()}") and len(env.reset(7)) == 2
    messages[0]["content"] = "changed"  # the caller's copy: the environment's conversation stays
    assert env.messages[0]["content"] != "changed"
