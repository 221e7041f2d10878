"""Expert trajectories for the SFT warm-up: the planner wins, the conversations are what the agent
loop would render, and `posttrain make-env-data` writes them."""

from __future__ import annotations

import pyarrow.parquet as pq
import pytest

from posttrain.cli import main
from posttrain.envs.expert import expert_rows, play_expert
from posttrain.envs.frozen_lake import FrozenLake
from posttrain.envs.sokoban import Sokoban
from posttrain.envs.spec import parse_custom_envs
from posttrain.envs.walk import Walk
from posttrain.errors import ConfigError
from posttrain.models.tokenizer import CHATML_TEMPLATE, build_tiny_tokenizer
from posttrain.rollout.agent_loop import EnvSlot, LoopLimits, run_episodes
from posttrain.rollout.base import SamplingParams
from posttrain.rollout.turns import TurnRenderer


def test_expert_episodes_win_and_become_conversations():
    episode = play_expert(FrozenLake(size=3, is_slippery=False), 0, max_steps=5)
    assert (episode.observations, episode.actions, episode.reward, episode.success) == (["__G\n_OP\n___"], ["Up"], 1.0, True)
    assert episode.messages("go") == [{"role": "system", "content": "go"}, {"role": "user", "content": "__G\n_OP\n___"},
                                      {"role": "assistant", "content": "Up"}]
    rows = expert_rows(Sokoban, {"dim_room": [6, 6]}, "", episodes=5, seed=3, max_steps=20, name="sokoban")
    assert len(rows) == 5 and all(r["extra_info"]["success"] and r["data_source"] == "env/sokoban" for r in rows)
    assert rows == expert_rows(Sokoban, {"dim_room": [6, 6]}, "", episodes=5, seed=3, max_steps=20, name="sokoban")
    assert all(r["messages"][0]["role"] == "user" for r in rows)  # no instruction: no system message
    # on slippery ice the planner sometimes falls in; by default only its wins are kept
    kept = expert_rows(FrozenLake, {"size": 4}, "", episodes=20, seed=0, max_steps=10)
    every = expert_rows(FrozenLake, {"size": 4}, "", episodes=20, seed=0, max_steps=10, successful_only=False)
    assert all(r["extra_info"]["success"] for r in kept) and not all(r["extra_info"]["success"] for r in every)
    with pytest.raises(ConfigError, match="environment walk has no expert_action"):
        expert_rows(Walk, {}, "", episodes=1, seed=0, max_steps=3, name="walk")


class Replay:
    """An engine that writes the given actions (one per turn) for the single environment."""

    def __init__(self, tok, actions):
        self.tok, self.actions, self.turn = tok, actions, 0

    def __call__(self, prompts, params):
        import torch
        from posttrain.records import RolloutBatch

        ids = self.tok(self.actions[self.turn], add_special_tokens=False)["input_ids"] + [self.tok.eos_token_id]
        self.turn += 1
        return RolloutBatch(prompt_ids=prompts.input_ids, prompt_mask=prompts.attention_mask, response_ids=torch.tensor([ids]),
                            response_mask=torch.ones(1, len(ids)), rollout_logprobs=torch.zeros(1, len(ids)),
                            weights_version=torch.zeros(1, dtype=torch.long), group_index=list(prompts.uid),
                            data_source=list(prompts.data_source), ground_truth=[None], extra_info=[{}], raw_prompt=[""])


def test_the_sft_conversation_is_token_for_token_what_the_agent_loop_plays():
    tok = build_tiny_tokenizer()
    spec = parse_custom_envs({"S": {"env_type": "sokoban", "env_config": {"dim_room": [5, 5]}, "env_instruction": "push"}})["S"]
    episode = play_expert(Sokoban(dim_room=(5, 5)), 1, max_steps=10)
    assert len(episode.actions) > 1
    [traj] = run_episodes([EnvSlot(Sokoban(dim_room=(5, 5)), spec, 1, "g", 0.0)], Replay(tok, episode.actions), SamplingParams(),
                          TurnRenderer(tok, CHATML_TEMPLATE), LoopLimits(256, 512), "s")
    assert traj.success and [t.action_text for t in traj.turns] == episode.actions
    text = tok.apply_chat_template(episode.messages("push"), chat_template=CHATML_TEMPLATE, tokenize=False)
    # the conversation ends with the template's newline after the last <|im_end|>; the loop stops at the EOS
    assert tok(text, add_special_tokens=False)["input_ids"] == traj.prompt_ids + traj.response_ids + tok("\n")["input_ids"]


def test_make_env_data_writes_the_conversations(tmp_path, capsys):
    out = tmp_path / "expert"
    assert main(["make-env-data", "frozen_lake", str(out), "--env-config", "{size: 3, is_slippery: false}",
                 "--episodes", "6", "--instruction", "walk"]) == 0
    rows = pq.read_table(out / "sft_train.parquet").to_pylist()
    assert len(rows) == 6 and rows[0]["messages"][0] == {"role": "system", "content": "walk"}
    assert "wrote 6 expert episodes of frozen_lake" in capsys.readouterr().out
    assert main(["make-env-data", "frozen_lake", str(out), "--env-config", "{size: 1}"]) == 2
    assert "env_config: size must be between 2 and 16, got 1" in capsys.readouterr().err
    assert main(["make-env-data", "walk", str(out)]) == 2


def test_holdout_leaves_out_the_validation_boards(tmp_path, capsys):
    from posttrain.config.load import load_config
    from posttrain.trainer.agentic import validation_first_observations

    config = tmp_path / "lake.yaml"
    config.write_text("env:\n  custom_envs: {L: {env_type: frozen_lake, env_config: {size: 2, is_slippery: false}}}\n"
                      "  train_env_manager: {tags: [L]}\n  val_env_manager: {tags: [L], num_env_groups: 6}\n"
                      "data: {train_batch_size: 1}\nactor: {ppo_mini_batch_size: 1}\ntrainer: {total_training_steps: 1, seed: 3}\n")
    boards = validation_first_observations(load_config(config))
    assert 1 < len(boards) <= 6
    out = tmp_path / "expert"
    assert main(["make-env-data", "frozen_lake", str(out), "--env-config", "{size: 2, is_slippery: false}", "--episodes", "30",
                 "--holdout", str(config)]) == 0
    firsts = [r["messages"][1]["content"] for r in pq.read_table(out / "sft_train.parquet").to_pylist()]
    assert len(firsts) == 30 and not boards & set(firsts)
    assert f"none starting on the {len(boards)} validation boards of {config}" in capsys.readouterr().out
    everything = expert_rows(FrozenLake, {"size": 2, "is_slippery": False}, "x", episodes=30, seed=0, max_steps=10)
    assert boards & {r["messages"][1]["content"] for r in everything}  # without it, 2x2 lakes repeat
