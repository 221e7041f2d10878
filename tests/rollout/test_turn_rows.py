"""Turn rows (env.train_rows: turn): hand-built episodes cut into one row per model turn, with the
episode's GRPO advantage on each of its turns, and log-probs that the cut leaves unchanged."""

from __future__ import annotations

import math

import pytest
import torch

from posttrain.config.load import load_config
from posttrain.models.logprobs import response_logprobs
from posttrain.rollout.trajectory import Trajectory, Turn, to_rollout_batch
from posttrain.rollout.turn_rows import turn_rows
from posttrain.trainer.advantages import compute_advantages, make_shaping_state


def episodes() -> list[Trajectory]:
    """A: two actions ([10, 11], then [12]) with one environment token (20) between, reward 1.
    B (same group): one action [13, 14, 15], reward 0. C: failed at reset, its one token no action."""
    a = Trajectory("FL", 7, "g0", [1, 2, 3])
    first = a.add([10, 11], [-0.1, -0.2])
    obs = a.add([20], None)
    a.turns.append(Turn(first, obs, "Up", 0.0, True, "s0"))
    second = a.add([12], [-0.3])
    a.turns.append(Turn(second, (second[1], second[1]), "Up", 1.0, True, "s1"))
    b = Trajectory("FL", 7, "g0", [1, 2])
    only = b.add([13, 14, 15], [-0.4, -0.5, -0.6])
    b.turns.append(Turn(only, (only[1], only[1]), "Up", 0.0, True, "s0"))
    c = Trajectory("FL", 9, "g1", [4], failed="reset raised")
    c.add([0], None)
    c.turns.append(Turn((0, 0), (0, 1), "", -1.0, True, None))
    return [a, b, c]


def scored_batch(*overrides: str):
    trajs = episodes()
    batch = to_rollout_batch(trajs, 0, 3, ["", "", ""])
    alg = load_config(None, ["algorithm.adv_estimator=grpo", *overrides]).algorithm
    batch.old_logprobs = batch.rollout_logprobs.clone()
    compute_advantages(batch, torch.tensor([t.reward for t in trajs]), alg, make_shaping_state(alg), 1)
    return batch


def test_each_model_turn_becomes_a_row_with_its_context_and_the_episode_advantage():
    rows = turn_rows(scored_batch(), pad_id=0)
    # C's empty action gives no row; A gives two, B one
    assert rows.group_index == ["g0", "g0", "g0"] and [e["turn"] for e in rows.extra_info] == [0, 1, 0]
    assert rows.prompt_ids.tolist() == [[0, 0, 0, 1, 2, 3], [1, 2, 3, 10, 11, 20], [0, 0, 0, 0, 1, 2]]
    assert rows.prompt_mask.tolist() == [[0, 0, 0, 1, 1, 1], [1] * 6, [0, 0, 0, 0, 1, 1]]
    assert rows.response_ids.tolist() == [[10, 11, 0], [12, 0, 0], [13, 14, 15]]
    assert rows.response_mask.tolist() == [[1, 1, 0], [1, 0, 0], [1, 1, 1]]
    assert rows.loss_mask.tolist() == [[1, 1, 0], [1, 0, 0], [1, 1, 1]]
    torch.testing.assert_close(rows.old_logprobs, torch.tensor([[-0.1, -0.2, 0.0], [-0.3, 0.0, 0.0], [-0.4, -0.5, -0.6]]))
    # GRPO over the group {A: 1, B: 0}: mean 0.5, unbiased std sqrt(0.5); every token of A's turns +a, B's -a
    a = 0.5 / (math.sqrt(0.5) + 1e-6)
    torch.testing.assert_close(rows.advantages, torch.tensor([[a, a, 0.0], [a, 0.0, 0.0], [-a, -a, -a]]))
    assert rows.weights_version.tolist() == [3, 3, 3]
    # the score sits on the episode's last token: A's second turn
    assert rows.token_level_scores.tolist() == [[0, 0, 0], [1, 0, 0], [0, 0, 0]]
    assert rows.extra_info[1]["turn_spans"] == [[0, 1]] and rows.extra_info[1]["turn_rewards"] == [1.0]


def test_step_norm_divides_each_turn_row_by_its_episodes_turns_as_trinity_does():
    rows = turn_rows(scored_batch("algorithm.adv_estimator_args={enable_step_norm: true}"), pad_id=0)
    a = 0.5 / (math.sqrt(0.5) + 1e-6)
    torch.testing.assert_close(rows.advantages[:, 0], torch.tensor([a / 2, a / 2, -a]))


def test_turn_rows_recompute_the_episode_rows_log_probs(tiny_lm):
    """A causal model scores an action the same with or without the rest of the episode after it."""
    batch = scored_batch()[:2]
    rows = turn_rows(batch, pad_id=0)
    with torch.no_grad():
        whole = response_logprobs(tiny_lm, batch.prompt_ids, batch.prompt_mask, batch.response_ids, batch.response_mask).logprobs
        cut = response_logprobs(tiny_lm, rows.prompt_ids, rows.prompt_mask, rows.response_ids, rows.response_mask).logprobs
    torch.testing.assert_close(cut[0, :2], whole[0, :2], atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(cut[1, :1], whole[0, 3:4], atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(cut[2, :3], whole[1, :3], atol=1e-5, rtol=1e-5)


def test_a_batch_without_turn_records_is_refused():
    batch = scored_batch()
    batch.extra_info[0] = {}
    with pytest.raises(ValueError, match="row 0 has no turn records"):
        turn_rows(batch, 0)
