"""The actor's per-token statistics of its next-token distribution: sum_v pi^2 (verl's
calculate_sum_pi_squared) and the Clip_B / Clip_V token filters' signal."""

import torch

from posttrain.models.positions import concat_prompt_response
from worker_helpers import make_batch, sgd_actor


def test_the_actor_s_sum_pi_squared_is_that_of_the_model_s_full_logits(policy):
    batch = make_batch(policy.config.vocab_size)
    for settings in (dict(micro_batch_size=3, temperature=0.7), dict(micro_batch_size=7, temperature=0.7, pack=False)):
        got = sgd_actor(policy, **settings).sum_pi_squared(batch)  # (B, T)
        ids, attn, pos = concat_prompt_response(batch.prompt_ids, batch.prompt_mask, batch.response_ids, batch.response_mask)
        with torch.no_grad():
            logits = policy(input_ids=ids, attention_mask=attn, position_ids=pos).logits.float() / 0.7  # (B, S, V)
        P, T = batch.prompt_ids.shape[1], batch.response_ids.shape[1]
        want = (torch.softmax(logits[:, P - 1 : P - 1 + T], dim=-1) ** 2).sum(-1) * batch.response_mask  # (B, T)
        torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-4)
        assert float(got.max()) < 1.0 and float((got * batch.response_mask).min()) >= 0.0


def test_the_actor_s_token_filter_signal_is_that_of_the_model_s_full_logits(policy):
    from posttrain.algorithms import TOKEN_FILTERS, clip_v_signal, entropy_from_logits, nec_from_logits

    batch = make_batch(policy.config.vocab_size)
    got = sgd_actor(policy, micro_batch_size=3, temperature=0.7).token_signal(batch, TOKEN_FILTERS["clip_v"].signal)  # (B, T)
    ids, attn, pos = concat_prompt_response(batch.prompt_ids, batch.prompt_mask, batch.response_ids, batch.response_mask)
    with torch.no_grad():
        logits = policy(input_ids=ids, attention_mask=attn, position_ids=pos).logits.float() / 0.7  # (B, S, V)
    P, T = batch.prompt_ids.shape[1], batch.response_ids.shape[1]
    step = logits[:, P - 1 : P - 1 + T]  # (B, T, V): the positions that predict the response tokens
    lp = torch.log_softmax(step, -1).gather(-1, batch.response_ids.unsqueeze(-1)).squeeze(-1)  # (B, T)
    want = clip_v_signal(lp, entropy_from_logits(step), nec_from_logits(step)) * batch.response_mask
    torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-4)
