"""Clip_B / Clip_V entropy-dynamics token filters (arXiv:2602.03392, Trinity-RFT's clipb/clipv), by hand."""

from __future__ import annotations

import math

import torch

from posttrain.algorithms import TOKEN_FILTERS, clip_b_keep_mask, clip_b_signal, clip_v_keep_mask, clip_v_signal, nec_from_logits


def test_signals_of_a_two_token_distribution_by_hand():
    logits = torch.tensor([0.0, math.log(3.0)])  # p = (1/4, 3/4)
    h = -(0.25 * math.log(0.25) + 0.75 * math.log(0.75))  # 0.562335
    n = h * (0.25**2 + 0.75**2) + 0.25**2 * math.log(0.25) + 0.75**2 * math.log(0.75)  # 0.102995
    assert abs(float(nec_from_logits(logits)) - 0.102995) < 1e-5 and abs(float(nec_from_logits(logits)) - n) < 1e-6
    s = clip_b_signal(torch.tensor([math.log(0.75)]), torch.tensor([h]))  # 0.75 (H + log 0.75)
    assert abs(float(s) - 0.205990) < 1e-5
    d = clip_v_signal(torch.tensor([math.log(0.75)]), torch.tensor([h]), torch.tensor([n]))
    assert abs(float(d) - (0.102995 - 0.205990)) < 1e-5
    tokens = torch.tensor([1])
    assert abs(float(TOKEN_FILTERS["clip_b"].signal(logits[None], tokens)) - 0.205990) < 1e-5
    assert abs(float(TOKEN_FILTERS["clip_v"].signal(logits[None], tokens)) + 0.102995) < 1e-5


def test_clip_b_drops_low_outliers_of_negative_advantage_only():
    # S = (1, 1, 1, 1, -4) on the 5 real tokens: mean 0, population std 2; a padded 100 is ignored
    signal = torch.tensor([[1.0, 1.0, 1.0, 1.0, -4.0, 100.0]])
    mask = torch.tensor([[1.0, 1.0, 1.0, 1.0, 1.0, 0.0]])
    adv = torch.tensor([[-1.0, -1.0, 1.0, 1.0, -1.0, 0.0]])
    keep, metrics = clip_b_keep_mask(signal, adv, mask, mu=1.0)  # -4 < -1 x 2: dropped
    assert (keep * mask).tolist() == [[1.0, 1.0, 1.0, 1.0, 0.0, 0.0]]
    assert abs(metrics["token_filter/frac_clipped"] - 0.2) < 1e-6 and abs(metrics["token_filter/frac_clipped_neg"] - 1 / 3) < 1e-6
    assert metrics["token_filter/frac_clipped_pos"] == 0.0 and abs(metrics["token_filter/signal_std"] - 2.0) < 1e-6
    keep, _ = clip_b_keep_mask(signal, adv, mask, mu=2.5)  # -4 >= -2.5 x 2: kept
    assert (keep * mask).sum() == 5
    keep, _ = clip_b_keep_mask(signal, adv.abs(), mask, mu=1.0)  # every advantage >= 0: all kept
    assert (keep * mask).sum() == 5
    keep, _ = clip_b_keep_mask(torch.full((1, 4), 0.3), -torch.ones(1, 4), torch.ones(1, 4), mu=0.1)  # flat signal
    assert keep.sum() == 4


def test_clip_v_drops_high_outliers_of_non_positive_advantage():
    # D = (0, 0, 0, 0, 10): mean 2, population std 4; the threshold is mu std = 4 (not mean + mu std)
    signal, mask = torch.tensor([[0.0, 0.0, 0.0, 0.0, 10.0]]), torch.ones(1, 5)
    for last, kept in ((-1.0, 0.0), (0.0, 0.0), (1.0, 1.0)):  # a zero advantage follows the negative rule
        keep, _ = clip_v_keep_mask(signal, torch.tensor([[1.0, -1.0, -1.0, -1.0, last]]), mask, mu=1.0, max_frac=1.0)
        assert keep.tolist() == [[1.0, 1.0, 1.0, 1.0, kept]]
    keep, _ = clip_v_keep_mask(signal, -torch.ones(1, 5), mask, mu=2.6, max_frac=1.0)  # 10 <= 2.6 x 4
    assert keep.sum() == 5


def test_clip_v_caps_the_negative_tokens_it_drops():
    # D = (5, 6, 7, 0 x 7): mean 1.8, std 2.786; mu 1 drops the first three (a share of 0.3)
    signal, mask, adv = torch.tensor([[5.0, 6.0, 7.0] + [0.0] * 7]), torch.ones(1, 10), -torch.ones(1, 10)
    keep, _ = clip_v_keep_mask(signal, adv, mask, mu=1.0, max_frac=0.5)  # under the cap: all three leave
    assert keep[0, :4].tolist() == [0.0, 0.0, 0.0, 1.0]
    keep, metrics = clip_v_keep_mask(signal, adv, mask, mu=1.0, max_frac=0.2)  # cap floor(0.2 x 10) = 2: the two largest D
    assert keep[0, :4].tolist() == [1.0, 0.0, 0.0, 1.0] and abs(metrics["token_filter/frac_clipped"] - 0.2) < 1e-6
    keep, _ = clip_v_keep_mask(signal, adv, mask, mu=1.0, max_frac=0.01)  # a cap below one token still drops one
    assert keep[0, :4].tolist() == [1.0, 1.0, 0.0, 1.0]
