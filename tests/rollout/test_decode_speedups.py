"""The engine's speed-ups keep its results: rows dropped once finished, the static cache, and the
attention kernel switched while sampling (then restored)."""

from __future__ import annotations

import pytest
import torch

from posttrain.models.logprobs import batch_logprobs
from posttrain.rollout import HFEngine, SamplingParams
from test_hf_engine import PAD, PROMPTS, hf_greedy, prompt_batch


def decode_batch_sizes(model) -> list[int]:
    """Rows of every forward through the decoder body (recorded by a hook)."""
    sizes: list[int] = []
    model.get_decoder().register_forward_hook(lambda m, args, kwargs, out: sizes.append(kwargs["input_ids"].shape[0]), with_kwargs=True)
    return sizes


def stops_of(tiny_lm, steps: int = 12) -> tuple[int, ...]:
    """Stop ids that end the three greedy rows at different steps (one of each row's tokens)."""
    rows = [hf_greedy(tiny_lm, p, steps) for p in PROMPTS]
    return (rows[0][2], rows[1][6])  # row 0 stops at step 3, row 1 at step 7 at the latest


@pytest.mark.parametrize("penalty", [1.0, 1.5])
def test_greedy_rows_that_stop_early_equal_model_generate(tiny_lm, penalty):
    stops = stops_of(tiny_lm)
    engine = HFEngine(tiny_lm, eos_token_ids=list(stops), pad_token_id=PAD, copy_weights=False)
    sizes = decode_batch_sizes(tiny_lm)
    params = SamplingParams(do_sample=False, max_new_tokens=12, repetition_penalty=penalty)
    out = engine.generate(prompt_batch(), params, expected_version=0)
    sizes = list(sizes)  # before model.generate below adds its own forwards
    for i, p in enumerate(PROMPTS):
        expected = hf_greedy(tiny_lm, p, 12, eos_token_id=list(stops), repetition_penalty=penalty)
        n = int(out.response_mask[i].sum())
        assert out.response_ids[i, :n].tolist() == expected[:n]
        assert n == len(expected) or expected[n - 1] in stops  # HF pads after its stop token too
        assert out.response_ids[i, n:].eq(PAD).all()
    if penalty == 1.0:
        assert sizes[0] == 3 and min(sizes) < 3  # finished rows left the decode batch
    torch.testing.assert_close(batch_logprobs(tiny_lm, out).logprobs, out.rollout_logprobs, atol=1e-5, rtol=0)


def test_sampled_rows_are_dropped_and_logprobs_stay_exact(tiny_lm):
    engine = HFEngine(
        tiny_lm, eos_token_ids=list(range(3, 12)), pad_token_id=PAD, copy_weights=False, seed=5, decode_workers=1
    )
    sizes = decode_batch_sizes(tiny_lm)
    out = engine.generate(prompt_batch(), SamplingParams(temperature=1.0, n=8, max_new_tokens=16), expected_version=0)
    lengths = out.response_mask.sum(1)
    assert sizes[0] == 24 and sizes[-1] < 24 and sorted(sizes, reverse=True) == sizes
    assert len(set(lengths.tolist())) > 3
    # Every real token is recorded, nothing after a row's stop token is.
    for row, n in zip(out.response_ids, lengths.long().tolist()):
        assert int(row[n - 1]) in range(3, 12) or n == out.response_ids.shape[1]
        assert row[n:].eq(PAD).all()
    torch.testing.assert_close(batch_logprobs(tiny_lm, out).logprobs, out.rollout_logprobs, atol=1e-5, rtol=0)


def test_attention_kernel_is_switched_only_while_sampling(tiny_lm):
    own = tiny_lm.config._attn_implementation
    params = SamplingParams(do_sample=False, max_new_tokens=10)
    eager = HFEngine(tiny_lm, eos_token_ids=[], pad_token_id=PAD, copy_weights=False)
    assert eager.attn_implementation == "eager"  # "auto" on CPU
    fast = eager.generate(prompt_batch(), params, expected_version=0)
    assert tiny_lm.config._attn_implementation == own
    kept = HFEngine(tiny_lm, eos_token_ids=[], pad_token_id=PAD, copy_weights=False, attn_implementation=None)
    assert torch.equal(fast.response_ids, kept.generate(prompt_batch(), params, expected_version=0).response_ids)


def test_shared_prompt_prefill_runs_each_prompt_once_and_changes_no_result(tiny_lm):
    params = SamplingParams(temperature=0.8, n=4, max_new_tokens=10, stop_token_ids=tuple(range(3, 12)))
    results = {}
    for share in (False, True):
        engine = HFEngine(tiny_lm, eos_token_ids=[], pad_token_id=PAD, copy_weights=False, share_prompt_prefill=share)
        sizes = decode_batch_sizes(tiny_lm)
        greedy = engine.generate(prompt_batch(), params.greedy(), expected_version=0)
        sampled = engine.generate(prompt_batch(), params, expected_version=0, seed=7)
        results[share] = (greedy, sampled, sizes[0])
    assert results[True][2] == 3 and results[False][2] == 3  # greedy: n=1, nothing to share
    off, on = results[False], results[True]
    assert torch.equal(off[0].response_ids, on[0].response_ids)
    # Same seed, same rows: the sampled tokens agree too, and the log-probs to float rounding.
    assert torch.equal(off[1].response_ids, on[1].response_ids)
    torch.testing.assert_close(off[1].rollout_logprobs, on[1].rollout_logprobs, atol=1e-5, rtol=0)
    torch.testing.assert_close(batch_logprobs(tiny_lm, on[1], temperature=0.8).logprobs, on[1].rollout_logprobs, atol=1e-5, rtol=0)


def test_shared_prompt_prefill_prefills_one_row_per_prompt(tiny_lm):
    engine = HFEngine(tiny_lm, eos_token_ids=[], pad_token_id=PAD, copy_weights=False, share_prompt_prefill=True)
    sizes = decode_batch_sizes(tiny_lm)
    engine.generate(prompt_batch(), SamplingParams(n=4, max_new_tokens=3), expected_version=0)
    assert sizes == [3, 12, 12]  # prefill on the 3 prompts, then 12 rows decode
