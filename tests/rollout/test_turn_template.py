"""prompt_mode conversation with an agent_template (ROLL's TrajEnvManager): the exact text of the
first prompt and of each observation turn the model sees."""

from __future__ import annotations

from posttrain.rollout.agent_loop import LoopLimits
from tests.rollout.test_window_prompts import TOK, chat, play

TEMPLATE = "Turn {turn_idx}: {observation} ({actions_left} left, {max_response_length} tokens)"


def turn(user: str) -> str:
    """An observation turn after an action: the assistant's close, the user message, the generation prompt."""
    return f"<|im_end|>\n<|im_start|>user\n{user}<|im_end|>\n<|im_start|>assistant\n"


def test_each_observation_turn_is_written_through_the_agent_template():
    traj, shown = play(LoopLimits(512, 512), agent_template=TEMPLATE, agent_system_template="S", max_tokens_per_step=8)
    i = "Move P to G: answer L or R."
    # the system message is the agent_system_template; the instruction opens the first user message
    first = chat(f"{i}\nTurn 1: _G_P (4 left, 8 tokens)")
    assert shown[0] == first
    # each later prompt is the whole conversation so far: turn k's observation through the template
    assert shown[1].startswith(first) and shown[1].endswith(turn("Turn 2: _GP_ (3 left, 8 tokens)"))
    assert shown[3].endswith(turn("Turn 4: _G_P (1 left, 8 tokens)"))
    assert shown[3].count("<|im_start|>user") == 4 and len(traj.turns) == 4


def test_without_a_template_the_observations_come_as_they_are():
    _, plain = play()
    assert plain[0] == chat("_G_P", system="Move P to G: answer L or R.")
    assert plain[1].endswith(turn("_GP_"))
    _, system_only = play(agent_system_template="S")  # the template defaults to the bare observation
    assert system_only[0] == chat("Move P to G: answer L or R.\n_G_P")


def test_the_suffix_field_is_the_envs_suffix_after_each_observation():
    """ROLL's TrajEnvManager fills {suffix} from the env's info; posttrain from the env's optional suffix()."""
    from posttrain.envs.spec import parse_custom_envs
    from posttrain.envs.walk import Walk
    from posttrain.rollout.agent_loop import EnvSlot, run_episodes
    from posttrain.rollout.base import SamplingParams
    from tests.rollout.test_window_prompts import RENDERER, SCRIPT, ScriptedEngine

    class Hinted(Walk):
        calls = 0

        def suffix(self):
            self.calls += 1
            return f"[{self.calls}]"  # read after the reset and after each step that does not end the episode

    spec = parse_custom_envs({"W": {"env_type": "walk", "env_config": {"size": 4}, "max_steps": 3, "agent_template": "{observation} {suffix}",
                                    "agent_system_template": "S"}})["W"]
    engine = ScriptedEngine(SCRIPT)
    [traj] = run_episodes([EnvSlot(Hinted(size=4), spec, 0, "g0", -0.1)], engine, SamplingParams(), RENDERER, LoopLimits(512, 512), "s")
    shown = [TOK.decode(p.input_ids[0][p.attention_mask[0] > 0]) for p, _ in engine.calls]
    assert shown[0] == chat("Move P to G: answer L or R.\n_G_P [1]")
    assert shown[1].endswith(turn("_GP_ [2]")) and shown[2].endswith(turn("_G_P [3]"))
    _, plain = play(agent_template="{observation} {suffix}", agent_system_template="S")  # an env without suffix(): ""
    assert plain[0] == chat("Move P to G: answer L or R.\n_G_P ")


def test_pre_and_next_step_templates_write_each_turn_around_the_observation():
    """ROLL's VLTrajEnvManager: instruction + pre_step_template(turn_idx) + observation +
    next_step_template(actions_left, max_response_length), the instruction with nothing after it."""
    traj, shown = play(LoopLimits(512, 512), pre_step_template="\nTurn {turn_idx}:\n", next_step_template="\n{actions_left} left, {max_response_length}",
                       agent_system_template="S", max_tokens_per_step=8)
    assert shown[0] == chat("Move P to G: answer L or R.\nTurn 1:\n_G_P\n4 left, 8")
    assert shown[1].endswith(turn("\nTurn 2:\n_GP_\n3 left, 8")) and len(traj.turns) == 4


def test_step_templates_that_cannot_be_written_are_refused():
    import pytest

    from posttrain.envs.spec import parse_custom_envs
    from posttrain.errors import ConfigError

    def parse(**entry):
        parse_custom_envs({"W": {"env_type": "walk", "max_tokens_per_step": 4, **entry}})

    with pytest.raises(ConfigError, match=r"W: agent_template and pre_step_template both write the user turn; keep one"):
        parse(agent_template="{observation}", pre_step_template="x")
    with pytest.raises(ConfigError, match=r"W.pre_step_template: fields \['actions_left'\] are not filled .* it fills \['turn_idx'\]"):
        parse(pre_step_template="{actions_left}")
    with pytest.raises(ConfigError, match=r"W.next_step_template: not supported in prompt_mode window"):
        parse(prompt_mode="window", next_step_template="x")
