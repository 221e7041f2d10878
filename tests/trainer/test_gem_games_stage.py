"""One RL step of an agentic stage over GEM's `game:GuessTheNumber-v0`, from a posttrain YAML file, on a
tiny random model: the game's rules open each episode's prompt through the entry's agent_template
(prompt_mode observation_window, as ROLL's StepConcatEnvManager), and the model's unreadable guesses
score GEM's -0.1 plus the manager's format penalty."""

from __future__ import annotations

import json

import pytest

from posttrain.cli import main
from posttrain.models.tiny import make_tiny_model

CONFIG = """\
data: {max_prompt_length: 1024, max_response_length: 16, train_batch_size: 2}
rollout: {n: 2}
actor: {ppo_mini_batch_size: 2, ppo_micro_batch_size_per_gpu: 8}
trainer: {total_training_steps: 1, logger: [jsonl]}
env:
  train_rows: turn
  train_env_manager: {tags: [Guess], num_env_groups: 2, group_size: 2, format_penalty: -0.2}
  custom_envs:
    Guess:
      env_type: game:GuessTheNumber-v0
      env_config: {min_number: 3, max_number: 40, max_turns: 12}
      max_steps: 12
      max_tokens_per_step: 16
      prompt_mode: observation_window
      history_length: 12
      agent_template: "You play a game.\\nObservation:\\n{history}\\n{current_observation}Put your guess in \\\\boxed{{}}."
"""


def test_one_step_over_guess_the_number_from_a_yaml_file(tmp_path):
    model = make_tiny_model(tmp_path / "model", layers=1, hidden=32, heads=4, seed=0)
    (tmp_path / "run.yaml").write_text(CONFIG)
    assert main(["train", str(tmp_path / "run.yaml"), f"model.path={model}", f"trainer.default_local_dir={tmp_path / 'run'}",
                 f"trainer.rollout_data_dir={tmp_path / 'dump'}"]) == 0
    rows = [json.loads(line) for line in (tmp_path / "dump" / "1.jsonl").read_text().splitlines()]
    assert len(rows) == 4 and {r["data_source"] for r in rows} == {"Guess"}
    for row in rows:  # the first (and, with no readable guess, only) action's prompt
        assert row["prompt"].startswith("<|im_start|>user\nYou play a game.\nObservation:\n\nGuess the secret whole number "
                                        "between 3 and 40 (both included) in at most 12 guesses.\n")
        assert row["prompt"].endswith("Make your first guess.\nGive your next guess.Put your guess in \\boxed{}.<|im_end|>\n<|im_start|>assistant\n")
        assert "\\boxed{" not in row["response"]  # a random model: GEM ends the game on the first turn
        assert row["score"] == pytest.approx(-0.1 - 0.2)
    [metrics] = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines() if '"env/reward"' in line]
    assert (metrics["env/Guess/episodes"], metrics["env/turns"], metrics["env/invalid_action_rate"]) == (4.0, 1.0, 1.0)
    assert metrics["env/reward"] == pytest.approx(-0.3) and metrics["env/success"] == 0.0 and "actor/pg_loss" in metrics
