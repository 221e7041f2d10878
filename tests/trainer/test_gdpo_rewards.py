"""adv_estimator gdpo in a run's reward stage: a training batch carries the reward function's named
components (in place and in the background alike), validation batches do not, and the advantage
stage normalises them one by one and logs each one's spread."""

from __future__ import annotations

import torch

from posttrain.algorithms import gdpo_advantage
from posttrain.config import load_config
from posttrain.models.tokenizer import build_tiny_tokenizer
from posttrain.trainer.advantages import compute_advantages, make_shaping_state
from posttrain.trainer.rewarding import RewardStage
from worker_helpers import answer_batch

GDPO = ["algorithm.adv_estimator=gdpo", "algorithm.gdpo_reward_keys=[accuracy_reward,format_reward]", "algorithm.gdpo_reward_weights=[1.0,2.0]"]


def two_parts(data_source, solution_str, ground_truth, extra_info=None):
    accuracy = float(solution_str.startswith(ground_truth))
    form = 10.0 * len(solution_str)  # a large component beside the 0/1 one
    return {"score": accuracy + form, "accuracy_reward": accuracy, "format_reward": form}


def test_training_batches_carry_the_components_and_the_advantage_normalises_each():
    cfg = load_config(None, GDPO)
    stage = RewardStage(cfg, build_tiny_tokenizer(), two_parts)
    batch = answer_batch(stage.tokenizer, ["12", "3", "123", "12"], ["a", "a", "b", "b"])
    texts = stage.decode(batch)
    scored = stage.score_parts(batch, texts)
    expected = torch.tensor([[float(t.startswith("12")), 10.0 * len(t)] for t in texts])
    torch.testing.assert_close(batch.reward_components, expected)
    # validation scores leave the batch as it is
    other = answer_batch(stage.tokenizer, ["12"], ["v"])
    stage.score(other, stage.decode(other))
    assert other.reward_components is None
    metrics = compute_advantages(batch, scored.scores, cfg.algorithm, make_shaping_state(cfg.algorithm), len(batch))
    want = gdpo_advantage(token_level_rewards=torch.zeros_like(batch.response_mask), response_mask=batch.response_mask,
                          group_index=batch.group_index, reward_components=expected, reward_weights=[1.0, 2.0])
    torch.testing.assert_close(batch.advantages, want.advantages)
    assert metrics["gdpo/accuracy_reward/mean"] == 0.75 and metrics["gdpo/format_reward/max"] == float(expected[:, 1].max())
    stage.close()


def test_the_background_scorer_fills_them_too():
    cfg = load_config(None, [*GDPO, "reward.launch_reward_fn_async=true"])
    stage = RewardStage(cfg, build_tiny_tokenizer(), two_parts)
    batch = answer_batch(stage.tokenizer, ["12", "3"], ["a", "a"])
    stage.start(batch, stage.decode(batch), background=True, training=True).result()
    assert batch.reward_components is not None and batch.reward_components.shape == (2, 2)
    stage.close()
