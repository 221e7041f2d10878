"""ROLL's ProxyEnvManager + GEMRunner as prompt_mode conversation (posttrain.envs.runner_spec): the
messages the runner writes, the tokens the manager's message tracker trains, its enable_thinking, and
the settings it reads from env_config."""

from __future__ import annotations

import pytest

from posttrain.envs.runner_spec import GEM_RUNNER, PROXY
from posttrain.envs.spec import parse_custom_envs
from posttrain.envs.walk import Walk
from posttrain.errors import ConfigError
from posttrain.models.tokenizer import CHATML_TEMPLATE
from posttrain.rollout.agent_loop import EnvSlot, LoopLimits, run_episodes
from posttrain.rollout.base import SamplingParams
from posttrain.rollout.turns import TurnRenderer
from tests.rollout.test_agent_loop import THINKING, TOK, ScriptedEngine
from tests.rollout.test_window_prompts import SCRIPT, chat

PAIR = {"env_manager_cls": PROXY, "agent_runner_cls": GEM_RUNNER}
TEMPLATE = "Turn {turn_idx}: {observation}{suffix} ({actions_left} left, {max_response_length} tokens)"
INSTRUCTION = "Move P to G: answer L or R."


class Hinted(Walk):
    def suffix(self):  # what ROLL's TrajEnvManager writes into {suffix}; GEMRunner writes ""
        return " [hint]"


def play(entry: dict, template: str = CHATML_TEMPLATE, env: type = Walk, limits: LoopLimits = LoopLimits(512, 512), **kwargs):
    spec = parse_custom_envs({"W": {"env_type": "walk", "env_config": {"size": 4}, "max_steps": 4, **entry}})["W"]
    engine = ScriptedEngine(SCRIPT)
    renderer = TurnRenderer(TOK, template, **kwargs)
    [traj] = run_episodes([EnvSlot(env(size=4), spec, 0, "g0", -0.1)], engine, SamplingParams(), renderer, limits, "s")
    return traj, [TOK.decode(p.input_ids[0][p.attention_mask[0] > 0]) for p, _ in engine.calls]


def gem_messages(system_template: str, instruction: str, observations: list[str], max_steps: int, tokens: int) -> list[dict]:
    """The messages GEMRunner sends before its last action, restated: the system template and the
    instruction after a blank line, then each observation through the template with an empty suffix
    (the assistant messages between them are left out: the tracker keeps the generated ids)."""
    system = f"{system_template}\n\n{instruction}" if instruction else system_template
    users = [TEMPLATE.format(observation=o, turn_idx=i + 1, actions_left=max_steps - i, max_response_length=tokens, suffix="")
             for i, o in enumerate(observations)]
    return [{"role": "system", "content": system}, *({"role": "user", "content": u} for u in users)]


def tracker_ids(messages: list[dict], responses: list[list[int]], closed: list[int] = ()) -> tuple[list[int], list[int]]:
    """ROLL's MessageTracker's training sample, restated: the system message rendered alone, each user
    message as the tail of a fixed two-message conversation (with the generation prompt), each response
    as generated, and one newline token between a response and the next user message; only the
    responses train. `closed`: tokens written between a response and that newline (none in ROLL)."""
    def render(msgs, generation):
        return TOK.apply_chat_template(msgs, chat_template=CHATML_TEMPLATE, tokenize=False, add_generation_prompt=generation)

    def ids(text):
        return TOK(text, add_special_tokens=False)["input_ids"]

    dummy = [{"role": "system", "content": "You are a helpful assistant."}, {"role": "user", "content": "I am a user."}]
    base = render(dummy, False)
    newline = ids("\n")[0]
    tokens, mask = ids(render(messages[:1], False)), []
    mask = [0] * len(tokens)
    for k, user in enumerate(messages[1:]):
        if k:
            tokens, mask = tokens + [*closed, newline], mask + [0] * (len(closed) + 1)
        tail = ids(render([*dummy, user], True)[len(base):])
        tokens, mask = tokens + tail + responses[k], mask + [0] * len(tail) + [1] * len(responses[k])
    return tokens, mask


def test_the_pair_writes_gemrunners_messages_and_trains_the_trackers_tokens():
    entry = {**PAIR, "agent_template": TEMPLATE, "agent_system_template": "S", "max_tokens_per_step": 8}
    traj, shown = play(entry, env=Hinted)
    observations = ["_G_P", "_GP_", "_G_P", "_G_P"]  # seed 0, actions L, R, x (invalid), L
    # first prompt: the instruction in the system message, the template alone (suffix "") as the user's
    assert shown[0] == chat("Turn 1: _G_P (4 left, 8 tokens)", system=f"S\n\n{INSTRUCTION}")
    assert shown[2].endswith("<|im_start|>user\nTurn 3: _G_P (2 left, 8 tokens)<|im_end|>\n<|im_start|>assistant\n")
    actions = [TOK(a, add_special_tokens=False)["input_ids"] + [TOK.eos_token_id] for a in SCRIPT]
    for k in range(4):  # every prompt is the tracker's input ids for that call
        expected, _ = tracker_ids(gem_messages("S", INSTRUCTION, observations[: k + 1], 4, 8), [*actions[:k], []])
        assert TOK(shown[k], add_special_tokens=False)["input_ids"] == expected
    tokens, mask = tracker_ids(gem_messages("S", INSTRUCTION, observations, 4, 8), actions)
    assert traj.prompt_ids + traj.response_ids == tokens  # the sample ROLL trains, token for token
    assert [0.0] * len(traj.prompt_ids) + traj.model_mask == [float(m) for m in mask]
    # the same entry under ROLL's TrajEnvManager: the instruction opens the first user message, {suffix} is the env's
    _, traj_mode = play({k: v for k, v in entry.items() if k not in PAIR}, env=Hinted)
    assert traj_mode[0] == chat(f"{INSTRUCTION}\nTurn 1: _G_P [hint] (4 left, 8 tokens)")


def test_an_action_cut_at_max_tokens_per_step_is_closed_where_roll_writes_only_the_newline():
    entry = {**PAIR, "agent_template": TEMPLATE, "agent_system_template": "S", "max_tokens_per_step": 1}
    traj, _ = play(entry)  # each scripted action is one letter + EOS: the EOS is cut
    observations = ["_G_P", "_GP_", "_G_P", "_G_P"]
    actions = [TOK(a, add_special_tokens=False)["input_ids"] for a in SCRIPT]
    messages = gem_messages("S", INSTRUCTION, observations, 4, 1)
    roll, _ = tracker_ids(messages, actions)
    # ROLL: action, "\n", next user turn; posttrain: action, "<|im_end|>", "\n", next user turn
    closed, mask = tracker_ids(messages, actions, TOK("<|im_end|>", add_special_tokens=False)["input_ids"])
    assert traj.prompt_ids + traj.response_ids == closed != roll
    assert [0.0] * len(traj.prompt_ids) + traj.model_mask == [float(m) for m in mask]  # the close is not trained


def test_enable_thinking_is_the_entrys_own():
    empty_think = "<|im_start|>assistant\n<think>\n\n</think>\n\n"
    _, off = play({**PAIR, "env_config": {"size": 4, "enable_thinking": False}}, THINKING)
    _, on = play({**PAIR, "env_config": {"size": 4, "enable_thinking": True}}, THINKING)
    _, default = play(dict(PAIR), THINKING, template_kwargs={"enable_thinking": True})  # ROLL's default: false, over the run's
    assert off[0].endswith(empty_think) and off[1].endswith(empty_think)
    assert not on[0].endswith(empty_think) and not on[1].endswith(empty_think)
    assert default[0].endswith(empty_think)
    # posttrain's own key, in any prompt mode; null keeps the run's data.enable_thinking
    _, native = play({"enable_thinking": False}, THINKING, template_kwargs={"enable_thinking": True})
    _, run = play({}, THINKING, template_kwargs={"enable_thinking": True})
    _, window = play({"enable_thinking": False, "prompt_mode": "window"}, THINKING)
    assert native[1].endswith(empty_think) and not run[1].endswith(empty_think) and window[0].endswith(empty_think)


def test_instruction_in_and_env_suffix_are_posttrain_keys_of_conversation_mode():
    _, system = play({"instruction_in": "system", "agent_template": "{observation}{suffix}", "agent_system_template": "S"}, env=Hinted)
    assert system[0] == chat("_G_P [hint]", system=f"S\n\n{INSTRUCTION}")
    _, bare = play({"env_suffix": False, "agent_template": "{observation}{suffix}"}, env=Hinted)
    assert bare[0] == f"<|im_start|>user\n{INSTRUCTION}\n_G_P<|im_end|>\n<|im_start|>assistant\n"
    _, head = play({"instruction_in": "user"})  # no template: the instruction opens the first user message
    _, plain = play({"instruction_in": "system"})  # the default without a template
    assert head[0] == f"<|im_start|>user\n{INSTRUCTION}\n_G_P<|im_end|>\n<|im_start|>assistant\n"
    assert plain[0] == chat("_G_P", system=INSTRUCTION)


@pytest.mark.parametrize("entry, problem", [
    ({**PAIR, "agent_runner_cls": "roll.pipeline.agentic.agent_runner.gem_runner.ToolCallRunner"},
     "W.agent_runner_cls: 'roll.pipeline.agentic.agent_runner.gem_runner.ToolCallRunner': not supported: posttrain plays ROLL's ProxyEnvManager with its GEMRunner"),
    ({"env_manager_cls": PROXY}, "W.agent_runner_cls: None: not supported"),
    ({"agent_runner_cls": GEM_RUNNER}, "W.agent_runner_cls: not supported: posttrain runs its own agent loop"),  # without the proxy
    ({**PAIR, "env_config": {"size": 4, "trajectory_mode": "step"}}, "W.env_config.trajectory_mode: step: not supported: ROLL then trains one sample per model call"),
    ({**PAIR, "env_config": {"size": 4, "reward_granularity": "step_scores"}}, "W.env_config.reward_granularity: 'step_scores': not supported"),
    ({**PAIR, "env_config": {"size": 4, "enable_thinking": "yes"}}, "W.env_config.enable_thinking: true or false"),
    ({**PAIR, "enable_thinking": True, "env_config": {"size": 4, "enable_thinking": False}}, "W: enable_thinking is True and env_config.enable_thinking is False"),
    ({"instruction_in": "assistant"}, "W.instruction_in: 'assistant'; choose one of ['user', 'system']"),
    ({"env_suffix": "no"}, "W.env_suffix: true or false"),
    ({"prompt_mode": "window", "instruction_in": "system"}, "W.instruction_in: not supported in prompt_mode window"),
    ({"enable_thinking": 1}, "W.enable_thinking: true, false or null"),
])
def test_what_the_pair_cannot_play_is_refused_with_the_reason(entry, problem):
    with pytest.raises(ConfigError) as e:
        parse_custom_envs({"W": {"env_type": "walk", "env_config": {"size": 4}, **entry}})
    assert any(problem in p for p in e.value.problems), e.value.problems


def test_the_managers_settings_that_change_nothing_here_are_read_and_kept_from_the_env():
    settings = {"trajectory_mode": "traj", "reward_granularity": "binary", "enable_fork": True, "tool_call_parser": "qwen25"}
    spec = parse_custom_envs({"W": {"env_type": "walk", **PAIR, "env_config": {"size": 4, **settings}}})["W"]
    assert spec.env_config == {"size": 4} and spec.enable_thinking is False  # Walk(**env_config) sees none of them
    assert spec.turns is None  # no template: the instruction is the system message, as GEMRunner's with an empty template
    traj, _ = play({**PAIR, "env_config": {"size": 4, **settings}})
    same, _ = play(dict(PAIR))
    assert traj.prompt_ids + traj.response_ids == same.prompt_ids + same.response_ids and traj.reward == same.reward
