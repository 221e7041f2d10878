"""PF-PPO in the RL step (`algorithm.use_pf_ppo`): after advantages, the critic and actor train on
rows drawn by score, keyed by (seed, step) so a resumed run draws the same rows."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from posttrain.config import load_config
from posttrain.config.sections.algorithm import AlgorithmConfig, PFPPOConfig
from posttrain.data import collate_prompts
from posttrain.errors import ConfigError
from posttrain.records import RolloutBatch
from posttrain.trainer.advantages import compute_advantages, filter_by_reward, make_shaping_state, pf_ppo_key
from rl_helpers import tiny_rl_files, tiny_rl_trainer

SCORES = torch.tensor([1.0, 0.0, 0.0, 2.0, -4.0, 0.5])  # max 2.0 at row 3, min -4.0 at row 4


def scored_batch(alg: AlgorithmConfig) -> RolloutBatch:
    """Six one-token responses whose token is the row number, with GRPO advantages of SCORES."""
    B = len(SCORES)
    b = RolloutBatch(
        prompt_ids=torch.ones(B, 2, dtype=torch.long), prompt_mask=torch.ones(B, 2),
        response_ids=torch.arange(B).reshape(B, 1), response_mask=torch.ones(B, 1),
        rollout_logprobs=torch.zeros(B, 1), weights_version=torch.zeros(B, dtype=torch.long),
        group_index=["a", "a", "a", "b", "b", "b"], data_source=["toy"] * B, ground_truth=list(range(B)),
        extra_info=[{} for _ in range(B)], raw_prompt=[""] * B,
    )
    compute_advantages(b, SCORES, alg, make_shaping_state(alg), len(b))
    return b


def pf(method: str = "pow", weight_pow: float = 2.0, on: bool = True) -> AlgorithmConfig:
    return dataclasses.replace(AlgorithmConfig(), use_pf_ppo=on, pf_ppo=PFPPOConfig(reweight_method=method, weight_pow=weight_pow))


def test_off_the_step_trains_on_the_batch_itself():
    b = scored_batch(pf(on=False))
    assert filter_by_reward(b, pf(on=False), seed=1, step=1) == (b, {})


def test_max_min_keeps_only_the_best_and_worst_responses_with_every_field_following_its_row():
    b = scored_batch(pf("max_min"))
    train, metrics = filter_by_reward(b, pf("max_min"), seed=1, step=1)
    rows = train.response_ids[:, 0]  # (B,) the source row of each drawn row
    assert len(train) == 6 and set(rows.tolist()) <= {3, 4}
    assert torch.equal(train.advantages, b.advantages[rows]) and torch.equal(train.returns, b.returns[rows])
    assert train.ground_truth == rows.tolist() and train.group_index == [b.group_index[i] for i in rows.tolist()]
    assert metrics["pf_ppo/unique_frac"] == len(set(rows.tolist())) / 6
    assert metrics["pf_ppo/score_mean"] == pytest.approx(float(SCORES[rows].mean()))


def _share_of_row_4(alg: AlgorithmConfig, steps: int = 200) -> float:
    b = scored_batch(alg)
    drawn = torch.cat([filter_by_reward(b, alg, seed=0, step=s)[0].response_ids[:, 0] for s in range(steps)])
    return float((drawn == 4).float().mean())


def test_pow_draws_in_proportion_to_abs_score_to_the_power():
    # |s|^2 = 1, 0, 0, 4, 16, 0.25 (+1e-8): row 4 has 16 / 21.25 = 0.753 of the mass; |s|^8 gives it 0.996.
    assert 0.70 < _share_of_row_4(pf("pow", 2.0)) < 0.80
    assert _share_of_row_4(pf("pow", 8.0)) > 0.98
    # max_random: 0.4 for the best (row 3), 0.1 for each other row: row 4 gets 0.1 / 0.9.
    assert 0.07 < _share_of_row_4(pf("max_random")) < 0.16


def test_the_draw_is_keyed_by_seed_and_step_not_by_the_global_generator():
    b = scored_batch(pf())
    first = filter_by_reward(b, pf(), seed=3, step=5)[0].response_ids
    torch.manual_seed(12345)
    torch.rand(100)  # another random stream moved: a resumed run starts from another global state
    assert torch.equal(filter_by_reward(b, pf(), seed=3, step=5)[0].response_ids, first)
    others = [filter_by_reward(b, pf(), seed=s, step=t)[0].response_ids for s, t in ((3, 6), (4, 5))]
    assert all(not torch.equal(o, first) for o in others)
    assert pf_ppo_key(3, 5) == pf_ppo_key(3, 5) != pf_ppo_key(5, 3)


@pytest.mark.parametrize("overrides, message", [
    (["algorithm.pf_ppo.reweight_method=max_min"], "need\\(s\\) algorithm.use_pf_ppo=true"),
    (["algorithm.use_pf_ppo=true", "algorithm.pf_ppo.reweight_method=max_min", "algorithm.pf_ppo.weight_pow=3"], "only read by reweight_method=pow"),
])
def test_pf_ppo_settings_nothing_reads_are_refused(overrides, message):
    with pytest.raises(ConfigError, match=message):
        load_config(None, overrides)


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    return tiny_rl_files(tmp_path_factory.mktemp("pf"))


def _one_step(files, *overrides: str):
    """(generated batch, batch the actor trained on, metrics) of one step."""
    t = tiny_rl_trainer(files, "actor.ppo_micro_batch_size_per_gpu=8", *overrides, run="-".join(overrides) or "off")
    generated, trained = [], []
    generate = t.roles.engine.generate
    t.roles.engine.generate = lambda *a, **k: generated.append(generate(*a, **k)) or generated[-1]
    t.roles.actor.update = lambda batch, step=0, mini_size=None: trained.append(batch) or {}
    rows = t.sampler.next_batch()
    metrics = t.step(collate_prompts([t.train_set[i] for i in rows], t.pad_id, uid_prefix="s1"), 1)
    return generated[0], trained[0], metrics


def test_the_rl_step_trains_on_the_resampled_batch(files):
    generated, trained, metrics = _one_step(files)
    assert trained is generated and "pf_ppo/unique_frac" not in metrics
    generated, trained, metrics = _one_step(files, "algorithm.use_pf_ppo=true")
    assert trained is not generated and len(trained) == len(generated) == 8
    # Each trained row is one of the step's responses, with its advantages; some were drawn twice.
    source = [next(i for i in range(8) if torch.equal(generated.response_ids[i], r)) for r in trained.response_ids]
    assert torch.equal(trained.advantages, generated.advantages[source])
    assert metrics["pf_ppo/unique_frac"] < 1.0 and len(set(source)) < 8
