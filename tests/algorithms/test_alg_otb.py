"""The optimal-token-baseline estimators against hand-computed numbers (verl's OTB and TIR-OTB)."""

import math

import pytest
import torch

from posttrain.algorithms import ADVANTAGE_ESTIMATORS as EST
from posttrain.algorithms import estimator_needs, estimator_options


def logp(p):
    return torch.tensor(p, dtype=torch.float32).log()


# Rows 0, 1 answer prompt "a"; row 2 alone answers "b". w = 1 - 2 pi + sum pi^2:
# row 0: pi 0.5, sum 0.5 -> w 0.5, W = [0.5, 1.0, 1.5]; rows 1, 2: pi 0.25, sum 0.25 -> w 0.75, W = [0.75, 1.5, -].
MASK = torch.tensor([[1.0, 1.0, 1.0], [1.0, 1.0, 0.0], [1.0, 1.0, 0.0]])
REWARDS = torch.tensor([[0.0, 0.0, 1.0], [0.0, 0.0, 0.0], [0.0, 2.0, 0.0]])
OLD = logp([[0.5] * 3, [0.25] * 3, [0.25] * 3])
PI2 = torch.tensor([[0.5] * 3, [0.25] * 3, [0.25] * 3])
GROUPS = ["a", "a", "b"]


def otb(**kw):
    args = dict(token_level_rewards=REWARDS, response_mask=MASK, group_index=GROUPS, old_logprobs=OLD, sum_pi_squared=PI2)
    return EST["optimal_token_baseline"](**{**args, **kw})


def test_otb_per_token_baseline_hand_computed():
    adv, ret = otb()
    # G0 = [1, 1, 1], G1 = [0, 0, 0]; B_0 = 1*0.5 / (0.5 + 0.75) = 0.4, B_1 = 1*1 / (1 + 1.5) = 0.4,
    # B_2 = 1.5 / (1.5 + 1e-8) (row 1 is masked there); the lone row 2 keeps its return (B = 0)
    b2 = 1.5 / (1.5 + 1e-8)
    expected = torch.tensor([[0.6, 0.6, 1 - b2], [-0.4, -0.4, 0.0], [2.0, 2.0, 0.0]])
    torch.testing.assert_close(adv, expected)
    torch.testing.assert_close(ret, torch.tensor([[1.0, 1.0, 1.0], [0.0, 0.0, 0.0], [2.0, 2.0, 0.0]]))
    assert adv.dtype == torch.float32


def test_otb_handle_zero_tail_zeroes_the_baseline_past_the_second_longest_row():
    adv, _ = otb(handle_zero_tail=True)  # row 0 is the unique longest (3 > 2): its token 2 keeps G = 1
    torch.testing.assert_close(adv[0], torch.tensor([0.6, 0.6, 1.0]))
    torch.testing.assert_close(adv[1:], otb()[0][1:])


def test_otb_rollout_is_weights_scale_w_by_their_square():
    rho = torch.tensor([[1.0] * 3, [2.0] * 3, [1.0] * 3])
    adv, _ = otb(rollout_is_weights=rho)  # row 1: w = 0.75 * 4 = 3, W = [3, 6]; B_0 = 0.5 / 3.5, B_1 = 1 / 7
    torch.testing.assert_close(adv[0, :2], torch.tensor([6 / 7, 6 / 7]))


def test_otb_epsilon_is_an_option_and_an_empty_row_still_counts_in_its_group():
    # row 1 empty: its group has two rows, so row 0 is compared with itself: A = G - G W / (W + eps)
    mask = torch.tensor([[1.0, 1.0, 1.0], [0.0, 0.0, 0.0], [1.0, 1.0, 0.0]])
    adv, _ = otb(response_mask=mask, epsilon=0.5)
    torch.testing.assert_close(adv[0], torch.tensor([1 - 0.5 / 1.0, 1 - 1.0 / 1.5, 1 - 1.5 / 2.0]))
    assert torch.all(adv[1] == 0)


# TIR: one group; row 0 has a tool span at position 1 (mask 0), row 1 is shorter. pi 0.5, sum 0.5: w = 0.5.
TIR_MASK = torch.tensor([[1.0, 0.0, 1.0, 1.0], [1.0, 1.0, 0.0, 0.0]])
TIR_REWARDS = torch.tensor([[0.0, 0.0, 0.0, 1.0], [0.0, 0.5, 0.0, 0.0]])
TIR_OLD = logp([[0.5] * 4] * 2)
TIR_PI2 = torch.full((2, 4), 0.5)


def tir(name="tir_optimal_token_baseline", **kw):
    args = dict(token_level_rewards=TIR_REWARDS, response_mask=TIR_MASK, group_index=[0, 0], old_logprobs=TIR_OLD,
                sum_pi_squared=TIR_PI2)
    return EST[name](**{**args, **kw})


def test_tir_aligns_rows_by_their_kth_counted_token():
    adv, ret = tir()
    # row 0 by k: G = [1, 1, 1], W = [0.5, 1.0, 1.5]; row 1: G = [0.5, 0.5], W = [0.5, 1.0]
    # B_0 = (0.5 + 0.25) / 1 = 0.75, B_1 = (1 + 0.5) / 2 = 0.75; k = 2 is past row 1: zero tail (default) -> B = 0
    torch.testing.assert_close(adv, torch.tensor([[0.25, 0.0, 0.25, 1.0], [-0.25, -0.25, 0.0, 0.0]]))
    torch.testing.assert_close(ret, torch.tensor([[1.0, 1.0, 1.0, 1.0], [0.5, 0.5, 0.0, 0.0]]))


def test_otb_aligns_the_same_rows_by_position_instead():
    adv, _ = tir("optimal_token_baseline")
    # position 1: only row 1 counts (B = 0.5 W / (W + eps)), position 2, 3: only row 0
    b = lambda g, w: g * w / (w + 1e-8)  # noqa: E731
    expected = torch.tensor([[0.25, 0.0, 1 - b(1, 1.0), 1 - b(1, 1.5)], [-0.25, 0.5 - b(0.5, 1.0), 0.0, 0.0]])
    torch.testing.assert_close(adv, expected)


def test_tir_without_zero_tail_and_with_an_empty_row_which_joins_no_group():
    adv, _ = tir(handle_zero_tail=False)
    assert adv[0, 3].item() == pytest.approx(1 - 1.5 / (1.5 + 1e-8))
    mask = torch.tensor([[1.0, 0.0, 1.0, 1.0], [0.0, 0.0, 0.0, 0.0]])
    adv, _ = tir(response_mask=mask)  # row 0 is alone in its group: A = G on its counted tokens
    torch.testing.assert_close(adv, torch.tensor([[1.0, 0.0, 1.0, 1.0], [0.0] * 4]))


@pytest.mark.parametrize("name", ["optimal_token_baseline", "tir_optimal_token_baseline"])
def test_otb_needs_sum_pi_squared_and_offers_its_options(name):
    assert estimator_needs(name).sum_pi_squared
    assert estimator_options(name) == {"handle_zero_tail", "epsilon"}
    assert not math.isnan(EST[name](token_level_rewards=REWARDS, response_mask=MASK, group_index=GROUPS,
                                    old_logprobs=OLD, sum_pi_squared=PI2)[0].sum().item())


@pytest.mark.parametrize("name", ["optimal_token_baseline", "tir_optimal_token_baseline"])
def test_verl_s_estimator_names_load(name):
    from posttrain.config import load_config
    from posttrain.config.dialects import translate

    native, report = translate({"algorithm": {"adv_estimator": name}, "actor_rollout_ref": {"actor": {"calculate_sum_pi_squared": True}}}, "verl")
    assert native["algorithm"] == {"adv_estimator": name} and not report.refused
    cfg = load_config(None, [f"algorithm.adv_estimator={name}", "algorithm.adv_estimator_args={handle_zero_tail: true}"])
    assert cfg.algorithm.adv_estimator_args == {"handle_zero_tail": True}
