import math

import pytest
import torch

from posttrain.rollout import SamplingParams
from posttrain.rollout.sampling import apply_repetition_penalty, apply_top_k, apply_top_p, keyed_uniforms, next_tokens, row_keys

INF = float("-inf")


def test_top_k_keeps_the_k_largest():
    logits = torch.tensor([[1.0, 4.0, 3.0, 2.0]])
    assert apply_top_k(logits, 2).tolist() == [[INF, 4.0, 3.0, INF]]
    assert torch.equal(apply_top_k(logits, -1), logits) and torch.equal(apply_top_k(logits, 0), logits)


def test_top_p_keeps_smallest_set_reaching_p():
    # probabilities 0.5, 0.3, 0.15, 0.05
    logits = torch.tensor([[0.5, 0.3, 0.15, 0.05]]).log()
    kept = lambda p: torch.isfinite(apply_top_p(logits, p)).tolist()[0]  # noqa: E731
    assert kept(0.5) == [True, False, False, False]
    assert kept(0.6) == [True, True, False, False]
    assert kept(0.9) == [True, True, True, False]
    assert kept(0.01) == [True, False, False, False]  # the top token always survives


def test_repetition_penalty_divides_positive_and_multiplies_negative():
    logits = torch.tensor([[2.0, -2.0, 1.0, -1.0]])
    seen = torch.tensor([[True, True, False, False]])
    assert apply_repetition_penalty(logits, seen, 2.0).tolist() == [[1.0, -4.0, 1.0, -1.0]]


def test_recorded_logprob_is_of_tempered_untruncated_distribution():
    logits = torch.tensor([[2.0, 1.0, 0.0, -1.0]])
    params = SamplingParams(temperature=0.5, do_sample=False)
    token, logprob = next_tokens(logits, params, None, None)
    expected = 4.0 - math.log(sum(math.exp(x / 0.5) for x in (2.0, 1.0, 0.0, -1.0)))
    assert token.item() == 0 and logprob.item() == pytest.approx(expected, abs=1e-6)
    # top-k=1 sampling picks the argmax but records the full distribution's log-prob.
    token, logprob2 = next_tokens(logits, SamplingParams(temperature=0.5, top_k=1), None, torch.tensor([0.9]))
    assert token.item() == 0 and logprob2.item() == pytest.approx(expected, abs=1e-6)


def test_sampling_frequencies_follow_the_tempered_softmax():
    logits = torch.tensor([1.0, 0.0, -1.0]).repeat(20000, 1)
    tokens, _ = next_tokens(logits, SamplingParams(temperature=2.0), None, torch.rand(20000, generator=torch.Generator().manual_seed(0)))
    freq = torch.bincount(tokens, minlength=3).float() / 20000
    torch.testing.assert_close(freq, torch.softmax(torch.tensor([0.5, 0.0, -0.5]), 0), atol=0.015, rtol=0)


def test_sampling_params_reject_bad_values():
    with pytest.raises(ValueError, match="temperature must be > 0"):
        SamplingParams(temperature=0.0)
    with pytest.raises(ValueError, match="top_p"):
        SamplingParams(top_p=0.0)
    greedy = SamplingParams(n=8, top_k=5, max_new_tokens=7).greedy()
    assert (greedy.do_sample, greedy.n, greedy.top_k, greedy.max_new_tokens) == (False, 1, -1, 7)


def test_sample_categorical_draws_each_token_with_its_probability():
    from posttrain.rollout.sampling import sample_categorical

    probs = torch.tensor([0.5, 0.0, 0.2, 0.3, 0.0])
    u = torch.rand(200_000, generator=torch.Generator().manual_seed(0))
    draws = sample_categorical(probs.expand(200_000, -1), u)  # (N,)
    freq = torch.bincount(draws, minlength=5).double() / len(draws)
    assert freq[1] == 0 and freq[4] == 0  # zero-probability tokens, even the last one, never come up
    # 200k draws: the standard error of each frequency is < 0.0012, so 0.005 is > 4 sigma.
    torch.testing.assert_close(freq, probs.double(), atol=5e-3, rtol=0)


def test_keyed_uniforms_are_uniform_and_independent_across_rows_and_steps():
    keys = row_keys(7, [f"s1-{i}" for i in range(50_000)], [0] * 50_000)  # (N, 2)
    steps = torch.stack([keyed_uniforms(keys, t) for t in range(4)])  # (4, N)
    assert float(steps.min()) >= 0.0 and float(steps.max()) < 1.0
    # 200k uniforms: mean 0.5 +- 0.0013 (2 sigma), variance 1/12; deciles hold 10 % each.
    assert abs(float(steps.mean()) - 0.5) < 0.003 and abs(float(steps.var()) - 1 / 12) < 0.001
    deciles = torch.histc(steps.flatten(), 10, 0, 1) / steps.numel()
    assert float((deciles - 0.1).abs().max()) < 0.004
    # consecutive steps of a row, and neighbouring rows, are uncorrelated
    assert abs(float(torch.corrcoef(steps[:2])[0, 1])) < 0.02
    assert abs(float(torch.corrcoef(torch.stack([steps[0, :-1], steps[0, 1:]]))[0, 1])) < 0.02


def test_keys_depend_on_seed_uid_and_sample_only():
    a = row_keys(1, ["x", "x", "y"], [0, 1, 0])
    assert torch.equal(a, row_keys(1, ["x", "x", "y"], [0, 1, 0]))
    assert torch.equal(a[2], row_keys(1, ["y"], [0])[0])  # not on the row's position in the batch
    assert len({tuple(k) for k in a.tolist()} | {tuple(row_keys(2, ["x"], [0])[0].tolist())}) == 4
    # the same key gives the same uniform on every call, whatever rows surround it
    assert torch.equal(keyed_uniforms(a, 5)[2:], keyed_uniforms(a[2:], 5))


def test_banned_tokens_are_not_drawn_but_the_recorded_logprob_is_unchanged():
    """min_new_tokens bans the stop ids: greedy takes the best other token, whose log-prob is of the
    whole distribution: 1 - log(e^3 + e^1 + e^0) = -2.16985."""
    logits = torch.tensor([[3.0, 1.0, 0.0]])
    token, logprob = next_tokens(logits, SamplingParams(do_sample=False), None, None, banned=torch.tensor([0]))
    assert token.item() == 1 and logprob.item() == pytest.approx(-2.16985, abs=1e-5)
    # sampling: a uniform that would land on token 0 (its share is 0.844) lands on token 1 or 2
    token, _ = next_tokens(logits, SamplingParams(), None, torch.tensor([0.1]), banned=torch.tensor([0]))
    assert token.item() == 1


def test_fire_draws_the_first_token_hot_among_the_top_k_and_records_the_regular_logprob():
    """logits (2, 0, -2), first token at temperature 30 among the top 2: shares sigmoid(2/30) =
    0.5167 and 0.4833, so u = 0.6 draws token 1 (at temperature 1 token 0 holds 0.867 and wins);
    u = 0.99 still cannot draw token 2. The recorded log-prob is log softmax at temperature 1:
    0 - log(e^2 + 1 + e^-2) = -2.14293."""
    params = SamplingParams(first_token_temperature=30.0, first_token_top_k=2)
    logits = torch.tensor([[2.0, 0.0, -2.0]] * 2)
    token, logprob = next_tokens(logits, params, None, torch.tensor([0.6, 0.99]), step=0)
    assert token.tolist() == [1, 1] and logprob[0].item() == pytest.approx(-2.14293, abs=1e-5)
    later, _ = next_tokens(logits, params, None, torch.tensor([0.6, 0.99]), step=1)
    assert later.tolist() == [0, 2]  # regular temperature, no top-k after the first token
    assert params.draw_settings(0) == (30.0, 2) and params.draw_settings(1) == (1.0, -1)
    assert params.greedy().first_token_temperature is None
    with pytest.raises(ValueError, match="first_token_temperature"):
        SamplingParams(first_token_temperature=0.0)
    with pytest.raises(ValueError, match="min_new_tokens"):
        SamplingParams(min_new_tokens=-1)
