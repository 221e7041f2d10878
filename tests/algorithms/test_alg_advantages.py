import math

import numpy as np
import pytest
import torch

from posttrain.algorithms import estimator_needs
from hypothesis import given, settings
from hypothesis import strategies as st

import alg_reference as ref
from posttrain.algorithms import ADVANTAGE_ESTIMATORS as EST

# Three responses to one prompt, scores 1, 0, 0, reward on the last valid token.
REWARDS = torch.tensor([[0.0, 0.0, 1.0], [0.0, 0.0, 0.0], [0.0, 0.0, 0.0]])
MASK = torch.ones(3, 3)
SQRT3 = math.sqrt(3.0)


def call(name, **kw):
    kw.setdefault("response_mask", MASK)
    return EST[name](**kw)


def test_grpo_group_of_three_hand_computed():
    # mean 1/3; unbiased std sqrt(((2/3)^2 + 2 (1/3)^2) / 2) = 1/sqrt(3)
    adv, ret = call("grpo", token_level_rewards=REWARDS, group_index=[7, 7, 7])
    hi = (2 / 3) / (1 / SQRT3 + 1e-6)
    lo = (-1 / 3) / (1 / SQRT3 + 1e-6)
    expected = torch.tensor([[hi] * 3, [lo] * 3, [lo] * 3])
    torch.testing.assert_close(adv, expected, rtol=0, atol=1e-6)
    torch.testing.assert_close(ret, adv)
    assert adv.dtype == torch.float32


def test_dr_grpo_does_not_divide_by_std():
    adv, _ = call("grpo", token_level_rewards=REWARDS, group_index=[0, 0, 0], norm_adv_by_std=False)
    torch.testing.assert_close(adv[:, 0], torch.tensor([2 / 3, -1 / 3, -1 / 3]))


def test_grpo_edge_cases_all_equal_single_and_masked():
    # all-equal group -> 0; a group of one keeps s / (1 + eps); masked tokens are 0
    rewards = torch.tensor([[1.0, 0.0], [0.0, 1.0], [0.0, 3.0], [0.0, 0.0]])
    mask = torch.tensor([[1.0, 0.0], [1.0, 1.0], [1.0, 1.0], [0.0, 0.0]])
    adv, _ = call("grpo", token_level_rewards=rewards, response_mask=mask, group_index=["a", "a", "b", "c"])
    expected = torch.tensor([[0.0, 0.0], [0.0, 0.0], [3 / (1 + 1e-6)] * 2, [0.0, 0.0]])
    torch.testing.assert_close(adv, expected)


def test_grpo_batch_std_divides_by_the_std_of_every_score_and_keeps_the_group_means():
    # Trinity-RFT grpo std_cal_level batch: scores 1,0,0 (group a), 2,0 (b), 5 (c, alone: mean 0).
    # batch mean 4/3; squared deviations 1/9 + 16/9 + 16/9 + 4/9 + 16/9 + 121/9 = 174/9; unbiased: / 5
    rewards = torch.tensor([[1.0], [0.0], [0.0], [2.0], [0.0], [5.0]])
    std_b = math.sqrt(174 / 9 / 5)
    adv, _ = call("grpo", token_level_rewards=rewards, response_mask=torch.ones(6, 1), group_index=list("aaabbc"), std_cal_level="batch")
    expected = torch.tensor([2 / 3, -1 / 3, -1 / 3, 1.0, -1.0, 5.0]) / (std_b + 1e-6)
    torch.testing.assert_close(adv[:, 0], expected, rtol=0, atol=1e-6)
    group, _ = call("grpo", token_level_rewards=rewards, response_mask=torch.ones(6, 1), group_index=list("aaabbc"))
    assert not torch.allclose(group, adv)  # the group level divides group a by 1/sqrt(3), b by sqrt(2)
    one, _ = call("grpo", token_level_rewards=rewards[:1], response_mask=torch.ones(1, 1), group_index=["a"], std_cal_level="batch")
    torch.testing.assert_close(one, torch.tensor([[1.0 / (1 + 1e-6)]]))  # a batch of one divides by 1
    with pytest.raises(ValueError, match="std_cal_level must be 'group' or 'batch'"):
        call("grpo", token_level_rewards=rewards, group_index=list("aaabbc"), response_mask=torch.ones(6, 1), std_cal_level="task")


def test_grpo_step_norm_divides_each_row_by_its_turns():
    # Trinity-RFT step_wise_grpo enable_step_norm: scores 1 and 0 in one group -> +-0.5 / (0.70711 + 1e-6);
    # row 0 has turns 0, 1, 2 (three turns), row 1 turns 0, 1 (two); -1 marks environment tokens
    rewards = torch.tensor([[0.0, 0.0, 0.0, 0.0, 1.0], [0.0, 0.0, 0.0, 0.0, 0.0]])
    mask = torch.tensor([[1.0, 0.0, 1.0, 0.0, 1.0], [1.0, 0.0, 1.0, 0.0, 0.0]])
    turns = torch.tensor([[0, -1, 1, -1, 2], [0, -1, 1, -1, -1]])
    a = 0.5 / (math.sqrt(0.5) + 1e-6)
    adv, _ = call("grpo", token_level_rewards=rewards, response_mask=mask, group_index=[0, 0], turn_index=turns, enable_step_norm=True)
    torch.testing.assert_close(adv, torch.tensor([[a / 3, 0, a / 3, 0, a / 3], [-a / 2, 0, -a / 2, 0, 0]]))
    plain, _ = call("grpo", token_level_rewards=rewards, response_mask=mask, group_index=[0, 0], turn_index=turns)
    torch.testing.assert_close(plain, torch.tensor([[a, 0, a, 0, a], [-a, 0, -a, 0, 0]]))
    # without turn records (a single-turn batch) every row is one step: nothing changes
    single, _ = call("grpo", token_level_rewards=rewards, response_mask=mask, group_index=[0, 0], enable_step_norm=True)
    torch.testing.assert_close(single, plain)


def test_grpo_accepts_numpy_strings_and_tensor_index():
    a1, _ = call("grpo", token_level_rewards=REWARDS, group_index=np.array(["p", "p", "p"], dtype=object))
    a2, _ = call("grpo", token_level_rewards=REWARDS, group_index=torch.tensor([4, 4, 4]))
    torch.testing.assert_close(a1, a2)
    with pytest.raises(ValueError, match="3 responses"):
        call("grpo", token_level_rewards=REWARDS, group_index=[0, 0])


def test_grpo_bf16_input_gives_fp32_accurate_result():
    adv32, _ = call("grpo", token_level_rewards=REWARDS, group_index=[0, 0, 0])
    adv16, _ = call("grpo", token_level_rewards=REWARDS.bfloat16(), group_index=[0, 0, 0], response_mask=MASK.bfloat16())
    assert adv16.dtype == torch.float32
    torch.testing.assert_close(adv16, adv32, rtol=0, atol=1e-6)


@settings(max_examples=40, deadline=None)
@given(st.lists(st.floats(-5, 5, allow_nan=False, width=32), min_size=2, max_size=6), st.integers(1, 4))
def test_grpo_group_advantages_sum_to_zero(scores, length):
    rewards = torch.zeros(len(scores), length)
    rewards[:, -1] = torch.tensor(scores)
    for norm in (True, False):
        adv, _ = call("grpo", token_level_rewards=rewards, response_mask=torch.ones_like(rewards),
                      group_index=[0] * len(scores), norm_adv_by_std=norm)
        assert abs(float(adv[:, 0].sum())) < 1e-3 * max(1.0, float(adv.abs().max()))
    rloo, _ = call("rloo", token_level_rewards=rewards, response_mask=torch.ones_like(rewards), group_index=[0] * len(scores))
    assert abs(float(rloo[:, 0].sum())) < 1e-3 * max(1.0, float(rloo.abs().max()))


def _random_batch(seed, B=8, T=6, groups=3, holes=False):
    g = torch.Generator().manual_seed(seed)
    rewards = torch.randn(B, T, generator=g)
    lengths = torch.randint(1, T + 1, (B,), generator=g)
    mask = (torch.arange(T).unsqueeze(0) < lengths.unsqueeze(1)).float()
    if holes:  # multi-turn: masked observation tokens inside the response
        mask = mask * (torch.rand(B, T, generator=g) > 0.3).float()
        mask[:, 0] = 1.0
    index = torch.randint(0, groups, (B,), generator=g).tolist()
    return rewards * mask, mask, index, torch.randn(B, T, generator=g)


@pytest.mark.parametrize("seed", range(5))
def test_group_estimators_match_loop_reference(seed):
    rewards, mask, index, _ = _random_batch(seed)
    kw = dict(token_level_rewards=rewards, response_mask=mask, group_index=index)
    torch.testing.assert_close(EST["grpo"](**kw).advantages, ref.grpo(rewards, mask, index).float(), atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(EST["grpo"](**kw, norm_adv_by_std=False).advantages,
                               ref.grpo(rewards, mask, index, norm=False).float(), atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(EST["rloo"](**kw).advantages, ref.rloo(rewards, mask, index).float(), atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(EST["opo"](**kw).advantages, ref.opo(rewards, mask, index).float(), atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(EST["reinforce_plus_plus_baseline"](**kw).advantages,
                               ref.rpp_baseline(rewards, mask, index).float(), atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("holes", [False, True])
@pytest.mark.parametrize("seed", range(5))
def test_gae_and_reinforce_pp_match_loop_reference(seed, holes):
    rewards, mask, _, values = _random_batch(seed, holes=holes)
    adv, ret = EST["gae"](token_level_rewards=rewards, values=values, response_mask=mask, gamma=0.9, lam=0.8)
    ref_adv, ref_ret = ref.gae(rewards, values, mask, 0.9, 0.8)
    torch.testing.assert_close(adv, ref_adv.float(), atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(ret, ref_ret.float(), atol=1e-5, rtol=1e-5)
    adv, ret = EST["reinforce_plus_plus"](token_level_rewards=rewards, response_mask=mask, gamma=0.95)
    ref_adv, ref_ret = ref.reinforce_pp(rewards, mask, 0.95)
    torch.testing.assert_close(adv, ref_adv.float(), atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(ret, ref_ret.float(), atol=1e-5, rtol=1e-5)


def test_gae_hand_computed_skips_padding():
    # one response, 2 valid tokens then padding; gamma=1, lam=1 -> A_t = sum_{k>=t} r_k - V_t
    rewards = torch.tensor([[0.0, 1.0, 0.0]])
    values = torch.tensor([[0.5, 0.25, 9.0]])  # the padded value 9 must be ignored
    mask = torch.tensor([[1.0, 1.0, 0.0]])
    adv, ret = EST["gae"](token_level_rewards=rewards, values=values, response_mask=mask, gamma=1.0, lam=1.0, gae_whiten=False)
    torch.testing.assert_close(adv, torch.tensor([[0.5, 0.75, 0.0]]))
    torch.testing.assert_close(ret, torch.tensor([[1.0, 1.0, 0.0]]))
    # gamma=0.5, lam=0.5: delta1 = 1 - .25 = .75; delta0 = 0 + .5*.25 - .5 = -.375; A0 = -.375 + .25*.75
    adv, _ = EST["gae"](token_level_rewards=rewards, values=values, response_mask=mask, gamma=0.5, lam=0.5, gae_whiten=False)
    torch.testing.assert_close(adv, torch.tensor([[-0.375 + 0.25 * 0.75, 0.75, 0.0]]))
    # whitened: two values -> +-1/sqrt(2) * sign (unbiased variance), padding zero
    adv, _ = EST["gae"](token_level_rewards=rewards, values=values, response_mask=mask, gamma=1.0, lam=1.0)
    torch.testing.assert_close(adv, torch.tensor([[-1 / math.sqrt(2), 1 / math.sqrt(2), 0.0]]), atol=1e-4, rtol=0)
    with pytest.raises(ValueError, match="values"):
        EST["gae"](token_level_rewards=rewards, values=None, response_mask=mask)


def test_rloo_hand_computed():
    adv, _ = call("rloo", token_level_rewards=REWARDS, group_index=[0, 0, 0])
    # 1 - (0+0)/2 = 1; 0 - (1+0)/2 = -0.5
    torch.testing.assert_close(adv[:, 0], torch.tensor([1.0, -0.5, -0.5]))
    single, _ = call("rloo", token_level_rewards=torch.tensor([[2.0]]), response_mask=torch.ones(1, 1), group_index=[0])
    assert float(single) == 2.0


def test_opo_length_weighted_baseline():
    rewards = torch.tensor([[1.0, 0.0, 0.0], [0.0, 0.0, 0.0]])
    mask = torch.tensor([[1.0, 0.0, 0.0], [1.0, 1.0, 1.0]])
    adv, _ = call("opo", token_level_rewards=rewards, response_mask=mask, group_index=[0, 0])
    # baseline (1*1 + 3*0) / 4 = 0.25
    torch.testing.assert_close(adv, torch.tensor([[0.75, 0.0, 0.0], [-0.25, -0.25, -0.25]]))


def test_gpg_rescales_by_nonzero_share():
    adv, _ = call("gpg", token_level_rewards=REWARDS, group_index=[0, 0, 0])
    # alpha = 3 / 1 = 3; (s - 1/3) * 3
    torch.testing.assert_close(adv[:, 0], torch.tensor([2.0, -1.0, -1.0]))


def test_grpo_passk_credits_only_the_best():
    rewards = torch.tensor([[3.0], [1.0], [2.0], [5.0], [5.0]])
    adv, _ = call("grpo_passk", token_level_rewards=rewards, response_mask=torch.ones(5, 1),
                  group_index=[0, 0, 0, 1, 1], norm_adv_by_std=False)
    torch.testing.assert_close(adv[:, 0], torch.tensor([1.0, 0.0, 0.0, 0.0, 0.0]))
    adv, _ = call("grpo_passk", token_level_rewards=rewards[:3], response_mask=torch.ones(3, 1), group_index=[0, 0, 0])
    assert math.isclose(float(adv[0]), 1.0 / (1.0 + 1e-6), rel_tol=1e-6)  # std of (3,1,2) is 1
    with pytest.raises(ValueError, match="at least 2"):
        call("grpo_passk", token_level_rewards=rewards[:1], response_mask=torch.ones(1, 1), group_index=[0])


def test_reinforce_pp_baseline_hand_computed():
    adv, _ = call("reinforce_plus_plus_baseline", token_level_rewards=REWARDS, group_index=[0, 0, 0])
    # centred scores 2/3, -1/3, -1/3 tiled over 9 tokens: mean 0, unbiased var = (3*4/9 + 6/9)/8 = 0.25
    expected = torch.tensor([2 / 3, -1 / 3, -1 / 3]) / math.sqrt(0.25 + 1e-8)
    torch.testing.assert_close(adv[:, 1], expected)


def test_reinforce_pp_whitens_discounted_returns():
    rewards = torch.tensor([[0.0, 1.0], [0.0, 0.0]])
    adv, ret = call("reinforce_plus_plus", token_level_rewards=rewards, response_mask=torch.ones(2, 2), gamma=0.5)
    torch.testing.assert_close(ret, torch.tensor([[0.5, 1.0], [0.0, 0.0]]))
    # mean 0.375, unbiased var = (0.015625 + 0.390625 + 2 * 0.140625) / 3 = 0.229167
    std = math.sqrt(0.6875 / 3 + 1e-8)
    torch.testing.assert_close(adv, (ret - 0.375) / std)


def test_remax_subtracts_greedy_baseline():
    rewards = torch.tensor([[0.0, 1.0, 0.0], [2.0, 0.0, 0.0]])
    mask = torch.tensor([[1.0, 1.0, 0.0], [1.0, 0.0, 0.0]])
    adv, ret = call("remax", token_level_rewards=rewards, response_mask=mask, reward_baselines=torch.tensor([0.5, 3.0]))
    torch.testing.assert_close(ret, torch.tensor([[1.0, 1.0, 0.0], [2.0, 0.0, 0.0]]))
    torch.testing.assert_close(adv, torch.tensor([[0.5, 0.5, 0.0], [-1.0, 0.0, 0.0]]))
    with pytest.raises(ValueError, match="reward_baselines"):
        call("remax", token_level_rewards=rewards, response_mask=mask)


def test_reinforce_return_and_outcome_modes():
    rewards = torch.tensor([[1.0, 0.0, 2.0, 0.0]])
    mask = torch.tensor([[1.0, 1.0, 1.0, 0.0]])
    adv, _ = call("reinforce", token_level_rewards=rewards, response_mask=mask, gamma=0.5)
    torch.testing.assert_close(adv, torch.tensor([[1.5, 1.0, 2.0, 0.0]]))
    adv, _ = call("reinforce", token_level_rewards=rewards, response_mask=mask, reinforce_mode="outcome")
    torch.testing.assert_close(adv, torch.tensor([[3.0, 3.0, 3.0, 0.0]]))
    # gamma = 1 and a single final reward: both modes agree
    a1, _ = call("reinforce", token_level_rewards=REWARDS, gamma=1.0)
    a2, _ = call("reinforce", token_level_rewards=REWARDS, reinforce_mode="outcome")
    torch.testing.assert_close(a1, a2)


def test_opmd_mean_and_logavgexp_baselines():
    rewards = torch.tensor([[1.0], [0.0]])
    adv, _ = call("opmd", token_level_rewards=rewards, response_mask=torch.ones(2, 1), group_index=[0, 0])
    torch.testing.assert_close(adv[:, 0], torch.tensor([0.5, -0.5]))
    adv, _ = call("opmd", token_level_rewards=rewards, response_mask=torch.ones(2, 1), group_index=[0, 0],
                  opmd_baseline="logavgexp", tau=0.5)
    base = 0.5 * (math.log(math.exp(2.0) + 1.0) - math.log(2.0))
    torch.testing.assert_close(adv[:, 0], torch.tensor([1.0 - base, -base]))


def test_every_estimator_accepts_the_full_keyword_set():
    rewards, mask, index, values = _random_batch(0)
    full = dict(token_level_rewards=rewards, response_mask=mask, values=values, group_index=index, gamma=1.0,
                lam=0.95, norm_adv_by_std=True, epsilon=1e-6, reward_baselines=torch.zeros(8), unused_option=1,
                old_logprobs=-torch.rand_like(rewards), ref_logprobs=-torch.rand_like(rewards),
                sum_pi_squared=torch.rand_like(rewards), rollout_is_weights=None)
    for name, fn in EST.items():
        if estimator_needs(name).turns:  # per-turn records of agentic rows: tests/algorithms/test_alg_gigpo.py
            continue
        adv, ret = fn(**full)
        assert adv.shape == rewards.shape and ret.shape == rewards.shape, name
        assert torch.all(adv[mask == 0] == 0), name
        assert torch.isfinite(adv).all(), name
