"""The agent loop on a scripted fake engine: which tokens are trained, how generation is batched,
how episodes end, and what a broken environment's error names."""

from __future__ import annotations

import pytest
import torch

from posttrain.envs.base import EnvError
from posttrain.envs.spec import parse_custom_envs
from posttrain.envs.walk import Walk
from posttrain.errors import ConfigError
from posttrain.models.tokenizer import CHATML_TEMPLATE, build_tiny_tokenizer
from posttrain.records import PromptBatch, RolloutBatch
from posttrain.rollout.agent_loop import EnvSlot, LoopLimits, run_episodes
from posttrain.rollout.base import SamplingParams
from posttrain.rollout.trajectory import to_rollout_batch
from posttrain.rollout.turns import TurnRenderer

TOK = build_tiny_tokenizer()
EOS = TOK.eos_token_id


class ScriptedEngine:
    """Answers every row of call k with the text script[k] + EOS; records each call's prompts."""

    def __init__(self, script: list[str]):
        self.script, self.calls = script, []

    def __call__(self, prompts: PromptBatch, params: SamplingParams) -> RolloutBatch:
        self.calls.append((prompts, params))
        ids = TOK(self.script[len(self.calls) - 1], add_special_tokens=False)["input_ids"] + [EOS]
        ids = ids[: params.max_new_tokens]
        b, t = len(prompts), len(ids)
        return RolloutBatch(
            prompt_ids=prompts.input_ids, prompt_mask=prompts.attention_mask,
            response_ids=torch.tensor([ids] * b), response_mask=torch.ones(b, t),
            rollout_logprobs=torch.full((b, t), -0.5), weights_version=torch.zeros(b, dtype=torch.long),
            group_index=list(prompts.uid), data_source=list(prompts.data_source), ground_truth=[None] * b,
            extra_info=[{}] * b, raw_prompt=[""] * b,
        )


def slots(n: int, seed: int, **entry) -> list[EnvSlot]:
    spec = parse_custom_envs({"W": {"env_type": "walk", "env_config": {"size": 4}, **entry}})["W"]
    return [EnvSlot(Walk(size=4), spec, seed, "g0", -0.1) for _ in range(n)]


def test_mask_covers_exactly_the_model_tokens_of_every_turn():
    # seed 0: '_G_P', the goal two cells left; "x" is invalid, then L, L reach it on turn 3
    engine = ScriptedEngine(["x", "L", "L"])
    renderer = TurnRenderer(TOK, CHATML_TEMPLATE)
    [traj] = run_episodes(slots(1, 0), engine, SamplingParams(), renderer, LoopLimits(128, 64), "s1")
    assert traj.done and traj.success and [t.valid for t in traj.turns] == [False, True, True]
    assert [t.reward for t in traj.turns] == [-0.1, 0.0, 1.0] and traj.reward == pytest.approx(0.9)
    # written out by hand: action, end of the assistant turn + observation as a user turn + generation prompt
    obs = lambda board: f"\n<|im_start|>user\n{board}<|im_end|>\n<|im_start|>assistant\n"
    pieces = [("x<|im_end|>", 1), (obs("_G_P"), 0), ("L<|im_end|>", 1), (obs("_GP_"), 0), ("L<|im_end|>", 1)]
    expected_ids = [i for text, _ in pieces for i in TOK(text, add_special_tokens=False)["input_ids"]]
    expected_mask = [m for text, m in pieces for _ in TOK(text, add_special_tokens=False)["input_ids"]]
    assert traj.response_ids == expected_ids and traj.model_mask == [float(m) for m in expected_mask]
    assert TOK.decode(traj.prompt_ids) == (
        "<|im_start|>system\nMove P to G: answer L or R.<|im_end|>\n"
        "<|im_start|>user\n_G_P<|im_end|>\n<|im_start|>assistant\n"
    )
    # spans: each action is 2 tokens (letter + EOS), each observation turn 24 (counted from the text above)
    assert [t.action for t in traj.turns] == [(0, 2), (2 + 24, 4 + 24), (4 + 48, 6 + 48)]
    batch = to_rollout_batch([traj], TOK.pad_token_id, 3, ["p"])
    assert batch.train_mask[0].tolist() == [float(m) for m in expected_mask]
    assert batch.response_mask[0].sum() == len(expected_ids)  # attention sees the env's tokens
    assert batch.rollout_logprobs[0].tolist() == [-0.5 if m else 0.0 for m in expected_mask]


# ChatML whose generation prompt closes an empty thinking block when enable_thinking is false (as Qwen3's does)
THINKING = CHATML_TEMPLATE.replace(
    "{%- if add_generation_prompt -%}{{- '<|im_start|>assistant\\n' -}}{%- endif -%}",
    "{%- if add_generation_prompt -%}{{- '<|im_start|>assistant\\n' -}}"
    "{%- if enable_thinking is defined and not enable_thinking -%}{{- '<think>\\n\\n</think>\\n\\n' -}}{%- endif -%}{%- endif -%}")


def test_template_variables_reach_the_prompt_and_every_observation_turn():
    assert THINKING != CHATML_TEMPLATE
    plain, off = TurnRenderer(TOK, THINKING), TurnRenderer(TOK, THINKING, template_kwargs={"enable_thinking": False})
    empty = "<think>\n\n</think>\n\n"
    assert TOK.decode(off.prompt_ids("i", "o")) == TOK.decode(plain.prompt_ids("i", "o")) + empty
    assert TOK.decode(off.observation_ids("o2", ended=True)) == TOK.decode(plain.observation_ids("o2", ended=True)) + empty


def test_generation_is_batched_across_live_envs_one_call_per_turn():
    engine = ScriptedEngine(["R", "L", "L", "L"])
    renderer = TurnRenderer(TOK, CHATML_TEMPLATE)
    envs = slots(3, 0) + slots(2, 5)  # seed 0: '_G_P' (R hits the wall, L L wins); seed 5: '__PG' (R wins)
    trajs = run_episodes(envs, engine, SamplingParams(n=4), renderer, LoopLimits(128, 200), "s1")
    assert [len(c[0]) for c in engine.calls] == [5, 3, 3]  # turn 1: all five; then the three still playing
    assert [len(t.turns) for t in trajs] == [3, 3, 3, 1, 1] and all(t.success for t in trajs)
    assert all(p.n == 1 for _, p in engine.calls)  # the group is made of environments
    assert len({len(t.turns) for t in trajs[:3]}) == 1  # same seed, same actions: same episode
    # each call's rows are the live envs' whole contexts: prompt + everything so far
    prompts, _ = engine.calls[1]
    assert prompts.attention_mask[0].sum() == len(trajs[0].prompt_ids) + 2 + 24


def test_envs_per_call_splits_each_turn_into_calls():
    engine = ScriptedEngine(["x"] * 6)
    renderer = TurnRenderer(TOK, CHATML_TEMPLATE)
    run_episodes(slots(5, 0, max_steps=2), engine, SamplingParams(), renderer, LoopLimits(128, 200, envs_per_call=2), "s")
    assert [len(c[0]) for c in engine.calls] == [2, 2, 1, 2, 2, 1]


def test_episode_ends_at_max_steps_and_at_the_token_budget():
    renderer = TurnRenderer(TOK, CHATML_TEMPLATE)
    [traj] = run_episodes(slots(1, 0, max_actions_per_traj=2), ScriptedEngine(["x", "x", "x"]), SamplingParams(), renderer, LoopLimits(128, 200), "s")
    assert traj.truncated and not traj.done and len(traj.turns) == 2 and traj.model_mask[-1] == 1.0
    [traj] = run_episodes(slots(1, 0), ScriptedEngine(["x"] * 9), SamplingParams(), renderer, LoopLimits(128, 40), "s")
    assert traj.truncated and len(traj.response_ids) <= 40 and len(traj.turns) == 2  # 2 + 24 + 2 fits, another observation would not


def test_the_engines_context_bounds_the_prompt_and_response_together():
    renderer = TurnRenderer(TOK, CHATML_TEMPLATE)
    prompt = len(run_episodes(slots(1, 0, max_steps=1), ScriptedEngine(["x"]), SamplingParams(), renderer, LoopLimits(128, 200), "s")[0].prompt_ids)
    # the same cut as a response budget of 40 above, now from a context of prompt + 40 tokens (ROLL's sequence_length)
    [traj] = run_episodes(slots(1, 0), ScriptedEngine(["x"] * 9), SamplingParams(), renderer,
                          LoopLimits(128, 10_000, max_total=prompt + 40), "s")
    assert traj.truncated and len(traj.turns) == 2 and len(traj.prompt_ids) + len(traj.response_ids) <= prompt + 40
    engine = ScriptedEngine(["LLLL"])  # an action gets what is left of the context
    [short] = run_episodes(slots(1, 0), engine, SamplingParams(), renderer, LoopLimits(128, 10_000, max_total=prompt + 2), "s")
    assert engine.calls[0][1].max_new_tokens == 2 and len(short.response_ids) == 2 and short.truncated
    with pytest.raises(ConfigError, match="model.max_model_len: the first prompt .* leaves no room for an action"):
        run_episodes(slots(1, 0), ScriptedEngine(["x"]), SamplingParams(), renderer, LoopLimits(128, 200, max_total=prompt), "s")


def test_max_tokens_per_step_cuts_the_action():
    engine = ScriptedEngine(["LLLL"])
    [traj] = run_episodes(slots(1, 0, max_tokens_per_step=1, max_steps=1), engine, SamplingParams(), TurnRenderer(TOK, CHATML_TEMPLATE), LoopLimits(128, 64), "s")
    assert traj.response_ids == TOK("L", add_special_tokens=False)["input_ids"] and engine.calls[0][1].max_new_tokens == 1


def test_action_pattern_extracts_the_action_and_penalises_a_miss():
    engine = ScriptedEngine(["<a>L</a>", "L"])
    spec_slots = slots(1, 0, action_pattern="<a>(.*?)</a>", format_penalty=-0.5, max_steps=2)
    for s in spec_slots:
        s.format_penalty = s.spec.format_penalty
    [traj] = run_episodes(spec_slots, engine, SamplingParams(), TurnRenderer(TOK, CHATML_TEMPLATE), LoopLimits(128, 200), "s")
    assert [t.valid for t in traj.turns] == [True, False] and [t.reward for t in traj.turns] == [0.0, -0.5]
    assert traj.observation == "_GP_"  # the unmatched text never reached the env


class Broken(Walk):
    def step(self, action_text):
        if action_text == "R":
            raise RuntimeError("boom")
        return ("ok", "high", False, {})


@pytest.mark.parametrize("script,message", [
    (["R"], "environment W (walk) (seed 7, turn 1): step raised RuntimeError: boom"),
    (["L"], "environment W (walk) (seed 7, turn 1): the reward must be a finite number, got 'high'"),
])
def test_a_broken_env_names_itself_the_seed_and_the_turn(script, message):
    [slot] = slots(1, 7)
    slot.env = Broken()
    with pytest.raises(EnvError) as e:
        run_episodes([slot], ScriptedEngine(script), SamplingParams(), TurnRenderer(TOK, CHATML_TEMPLATE), LoopLimits(128, 64), "s")
    assert str(e.value) == message + " (1 of 1 episodes of this step failed, more than env.max_failure_rate 0 allows; fix the environment or raise env.max_failure_rate)"
