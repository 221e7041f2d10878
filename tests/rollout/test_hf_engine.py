import pytest
import torch

from posttrain.models.logprobs import batch_logprobs, response_logprobs
from posttrain.records import PromptBatch
from posttrain.rollout import HFEngine, RolloutEngine, SamplingParams, StalePolicyError

PROMPTS = [[5, 6, 7], [1, 2, 3, 4, 9], [8]]
PAD = 0


def prompt_batch(prompts=PROMPTS) -> PromptBatch:
    P = max(map(len, prompts))
    ids, mask = torch.full((len(prompts), P), PAD), torch.zeros(len(prompts), P)
    for i, p in enumerate(prompts):
        ids[i, P - len(p) :], mask[i, P - len(p) :] = torch.tensor(p), 1.0
    return PromptBatch(
        ids, mask, uid=[f"u{i}" for i in range(len(prompts))], ground_truth=["a", "b", "c"][: len(prompts)]
    )


def hf_greedy(model, prompt, max_new_tokens, **kw):
    out = model.generate(
        torch.tensor([prompt]), max_new_tokens=max_new_tokens, do_sample=False, pad_token_id=PAD, **kw
    )
    return out[0, len(prompt) :].tolist()


def test_engine_satisfies_the_protocol(tiny_lm):
    assert isinstance(HFEngine(tiny_lm, pad_token_id=PAD), RolloutEngine)


@pytest.mark.parametrize("penalty", [1.0, 1.5])
def test_greedy_equals_model_generate_with_left_padding(tiny_lm, penalty):
    engine = HFEngine(tiny_lm, eos_token_ids=[], pad_token_id=PAD)
    params = SamplingParams(do_sample=False, max_new_tokens=12, repetition_penalty=penalty)
    out = engine.generate(prompt_batch(), params, expected_version=0)
    assert out.response_ids.shape == (3, 12) and out.response_mask.sum() == 36
    for i, p in enumerate(PROMPTS):
        assert out.response_ids[i].tolist() == hf_greedy(tiny_lm, p, 12, repetition_penalty=penalty)


def test_repetition_penalty_changes_greedy_output(tiny_lm):
    engine = HFEngine(tiny_lm, eos_token_ids=[], pad_token_id=PAD)
    plain = engine.generate(prompt_batch(), SamplingParams(do_sample=False, max_new_tokens=12), expected_version=0)
    penalised = engine.generate(
        prompt_batch(), SamplingParams(do_sample=False, max_new_tokens=12, repetition_penalty=3.0), expected_version=0
    )
    assert not torch.equal(plain.response_ids, penalised.response_ids)
    # With a strong penalty the greedy row repeats far less (row 0 cycles 28, 40, 43 without it).
    assert len(set(penalised.response_ids[0].tolist())) > len(set(plain.response_ids[0].tolist()))


@pytest.mark.parametrize("temperature", [1.0, 0.7, 1.5])
def test_rollout_logprobs_equal_actor_recomputation(tiny_lm, temperature):
    engine = HFEngine(tiny_lm, eos_token_ids=[3], pad_token_id=PAD, seed=1)
    params = SamplingParams(temperature=temperature, top_k=20, top_p=0.9, n=4, max_new_tokens=16)
    out = engine.generate(prompt_batch(), params, expected_version=0)
    actor = batch_logprobs(tiny_lm, out, temperature=temperature)
    torch.testing.assert_close(actor.logprobs, out.rollout_logprobs, atol=1e-5, rtol=0)
    # And the gradient path accepts the engine's tensors (they are not inference tensors).
    actor = response_logprobs(tiny_lm, out.prompt_ids, out.prompt_mask, out.response_ids, out.response_mask)
    actor.logprobs.sum().backward()


def test_temperature_scales_recorded_logprobs(tiny_lm):
    engine = HFEngine(tiny_lm, eos_token_ids=[], pad_token_id=PAD)
    cold = engine.generate(prompt_batch(), SamplingParams(do_sample=False, temperature=0.5, max_new_tokens=6), expected_version=0)
    warm = engine.generate(prompt_batch(), SamplingParams(do_sample=False, temperature=2.0, max_new_tokens=6), expected_version=0)
    assert torch.equal(cold.response_ids, warm.response_ids)  # greedy ignores temperature
    # The argmax token gets more mass at a low temperature.
    assert (cold.rollout_logprobs > warm.rollout_logprobs).all()
    expected = response_logprobs(tiny_lm, warm.prompt_ids, warm.prompt_mask, warm.response_ids, warm.response_mask, temperature=2.0)
    torch.testing.assert_close(warm.rollout_logprobs, expected.logprobs.detach(), atol=1e-5, rtol=0)


def test_n_responses_per_prompt_share_group_and_prompt(tiny_lm):
    engine = HFEngine(tiny_lm, eos_token_ids=[], pad_token_id=PAD)
    out = engine.generate(prompt_batch(), SamplingParams(n=3, max_new_tokens=8), expected_version=0)
    assert len(out) == 9
    assert out.group_index == ["u0"] * 3 + ["u1"] * 3 + ["u2"] * 3
    assert out.ground_truth == ["a"] * 3 + ["b"] * 3 + ["c"] * 3
    assert torch.equal(out.prompt_ids, prompt_batch().input_ids.repeat_interleave(3, 0))
    assert out.weights_version.tolist() == [0] * 9
    # Samples of one prompt differ (random 64-token vocabulary, 8 tokens).
    assert len({tuple(r) for r in out.response_ids[:3].tolist()}) == 3


def test_eos_stops_each_row_and_pads_after_it(tiny_lm):
    free = HFEngine(tiny_lm, eos_token_ids=[], pad_token_id=PAD)
    params = SamplingParams(do_sample=False, max_new_tokens=10)
    unconstrained = free.generate(prompt_batch(), params, expected_version=0).response_ids.tolist()
    eos = unconstrained[0][2]
    assert eos not in unconstrained[0][:2]
    out = HFEngine(tiny_lm, eos_token_ids=[eos], pad_token_id=PAD).generate(prompt_batch(), params, expected_version=0)
    for row, ids, mask, lp in zip(unconstrained, out.response_ids.tolist(), out.response_mask.tolist(), out.rollout_logprobs):
        stop = row.index(eos) + 1 if eos in row else len(row)
        assert ids[:stop] == row[:stop] and ids[stop:] == [PAD] * (len(ids) - stop)
        assert mask == [1.0] * stop + [0.0] * (len(mask) - stop)
        assert (lp[:stop] < 0).all() and (lp[stop:] == 0).all()
    # ignore_eos generates through it; an extra stop id still stops.
    ignoring = HFEngine(tiny_lm, eos_token_ids=[eos], pad_token_id=PAD).generate(
        prompt_batch(), SamplingParams(do_sample=False, max_new_tokens=10, ignore_eos=True), expected_version=0
    )
    assert ignoring.response_ids.tolist() == unconstrained and ignoring.response_mask.sum() == 30
    stopped = free.generate(
        prompt_batch(), SamplingParams(do_sample=False, max_new_tokens=10, stop_token_ids=(eos,)), expected_version=0
    )
    assert stopped.response_mask[0].tolist() == [1.0] * 3 + [0.0] * 7


def test_max_total_tokens_caps_each_row_s_prompt_plus_response(tiny_lm):
    """model.max_model_len: prompts of 3, 5 and 1 tokens under a cap of 7 get 4, 2 and 6 tokens; the
    tokens they get are the uncapped greedy ones (the cap only stops a row)."""
    engine = HFEngine(tiny_lm, eos_token_ids=[], pad_token_id=PAD)
    capped = engine.generate(prompt_batch(), SamplingParams(do_sample=False, max_new_tokens=12, max_total_tokens=7), expected_version=0)
    assert capped.response_mask.sum(1).tolist() == [4.0, 2.0, 6.0]
    full = engine.generate(prompt_batch(), SamplingParams(do_sample=False, max_new_tokens=12), expected_version=0)
    for i, n in enumerate((4, 2, 6)):
        assert capped.response_ids[i, :n].tolist() == full.response_ids[i, :n].tolist()
    # the response limit still binds first when it is the shorter one, and a row always gets one token
    short = engine.generate(prompt_batch(), SamplingParams(do_sample=False, max_new_tokens=3, max_total_tokens=2), expected_version=0)
    assert short.response_mask.sum(1).tolist() == [1.0, 1.0, 1.0]


def test_generation_ends_when_all_rows_stopped(tiny_lm):
    free = HFEngine(tiny_lm, eos_token_ids=[], pad_token_id=PAD)
    row0 = free.generate(prompt_batch([[5, 6, 7]]), SamplingParams(do_sample=False, max_new_tokens=10), expected_version=0)
    tokens = row0.response_ids[0].tolist()
    eos = tokens[1]
    out = HFEngine(tiny_lm, eos_token_ids=[eos], pad_token_id=PAD).generate(
        prompt_batch([[5, 6, 7]]), SamplingParams(do_sample=False, max_new_tokens=10), expected_version=0
    )
    assert out.response_ids[0].tolist() == tokens[: tokens.index(eos) + 1]  # T shrinks to the stop


def test_top_k_one_equals_greedy(tiny_lm):
    engine = HFEngine(tiny_lm, eos_token_ids=[], pad_token_id=PAD)
    greedy = engine.generate(prompt_batch(), SamplingParams(do_sample=False, max_new_tokens=10), expected_version=0)
    top1 = engine.generate(prompt_batch(), SamplingParams(top_k=1, max_new_tokens=10, temperature=1.3), expected_version=0)
    assert torch.equal(greedy.response_ids, top1.response_ids)


def test_seed_makes_sampling_reproducible(tiny_lm):
    engine = HFEngine(tiny_lm, eos_token_ids=[], pad_token_id=PAD, seed=3)
    params = SamplingParams(n=2, max_new_tokens=8)
    a = engine.generate(prompt_batch(), params, expected_version=0, seed=7)
    b = engine.generate(prompt_batch(), params, expected_version=0, seed=7)
    c = engine.generate(prompt_batch(), params, expected_version=0)  # the engine's own seed, 3
    assert torch.equal(a.response_ids, b.response_ids) and not torch.equal(a.response_ids, c.response_ids)
    assert not torch.equal(a.response_ids[0], a.response_ids[1])  # the two samples of a prompt differ


def _responses(batch) -> dict[tuple[str, int], list[int]]:
    """Each row's real response tokens by (prompt uid, sample index within the group)."""
    out, seen = {}, {}
    for uid, ids, mask in zip(batch.group_index, batch.response_ids, batch.response_mask):
        j = seen[uid] = seen.get(uid, -1) + 1
        out[(uid, j)] = ids[mask > 0].tolist()
    return out


def test_a_response_depends_on_its_key_not_on_its_batch(tiny_lm):
    """Keyed noise: a prompt's samples are the same alone, in another order, or after other
    rollouts ran; another uid (the next step's) draws other noise."""
    engine = HFEngine(tiny_lm, eos_token_ids=[], pad_token_id=PAD, seed=5, decode_workers=1)
    params = SamplingParams(n=3, max_new_tokens=8)
    full = _responses(engine.generate(prompt_batch(), params, expected_version=0))
    engine.generate(prompt_batch(), SamplingParams(n=1, max_new_tokens=4), expected_version=0, seed=99)  # a "validation"
    prompts = prompt_batch()
    pieces = {}
    for i in range(len(prompts)):
        pieces.update(_responses(engine.generate(prompts[i], params, expected_version=0)))
    assert pieces == full
    assert _responses(engine.generate(prompts[[2, 0, 1]], params, expected_version=0)) == full
    renamed = prompts[[0]]
    renamed.uid = ["next-step"]
    again = _responses(engine.generate(renamed, params, expected_version=0))
    assert [again[("next-step", j)] for j in range(3)] != [full[("u0", j)] for j in range(3)]


def test_max_num_seqs_chunks_give_the_same_rollout(tiny_lm):
    params = SamplingParams(do_sample=False, n=2, max_new_tokens=6)
    whole = HFEngine(tiny_lm, eos_token_ids=[], pad_token_id=PAD).generate(prompt_batch(), params, expected_version=0)
    parts = HFEngine(tiny_lm, eos_token_ids=[], pad_token_id=PAD, max_num_seqs=4).generate(prompt_batch(), params, expected_version=0)
    assert torch.equal(whole.response_ids, parts.response_ids) and whole.group_index == parts.group_index
    torch.testing.assert_close(whole.rollout_logprobs, parts.rollout_logprobs, atol=1e-5, rtol=0)


def test_stale_weights_are_refused_until_update(tiny_lm):
    engine = HFEngine(tiny_lm, eos_token_ids=[], pad_token_id=PAD)  # holds its own copy, version 0
    params = SamplingParams(do_sample=False, max_new_tokens=6)
    before = engine.generate(prompt_batch(), params, expected_version=0)
    with torch.no_grad():  # an "optimizer step" on the actor: now version 1
        for p in tiny_lm.parameters():
            p.add_(torch.randn_like(p) * 0.5)
    with pytest.raises(StalePolicyError, match="holds weights version 0 but the trainer expects 1"):
        engine.generate(prompt_batch(), params, expected_version=1)
    # The copy really is separate: the old weights still give the old output.
    assert torch.equal(engine.generate(prompt_batch(), params, expected_version=0).response_ids, before.response_ids)
    engine.update_weights(tiny_lm.state_dict(), version=1)
    after = engine.generate(prompt_batch(), params, expected_version=1)
    assert after.weights_version.tolist() == [1, 1, 1]
    assert after.response_ids.tolist() == [hf_greedy(tiny_lm, p, 6) for p in PROMPTS]


def test_shared_module_needs_only_a_version_bump(tiny_lm):
    engine = HFEngine(tiny_lm, eos_token_ids=[], pad_token_id=PAD, copy_weights=False)
    tiny_lm.train()
    engine.update_weights(tiny_lm, version=5)
    assert engine.weights_version == 5
    engine.generate(prompt_batch(), SamplingParams(max_new_tokens=3), expected_version=5)
    assert tiny_lm.training  # the engine restored the actor's mode


def test_absolute_position_model_gets_positions_that_ignore_padding():
    # Rotary models are blind to a constant position shift, so left padding only shows its effect on
    # a model with learned absolute positions: GPT-2.
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    config = GPT2Config(vocab_size=64, n_embd=32, n_layer=2, n_head=4, n_positions=64, bos_token_id=63, eos_token_id=63)
    model = GPT2LMHeadModel(config).eval()
    out = HFEngine(model, eos_token_ids=[], pad_token_id=PAD).generate(
        prompt_batch(), SamplingParams(do_sample=False, max_new_tokens=8), expected_version=0
    )
    for i, p in enumerate(PROMPTS):
        assert out.response_ids[i].tolist() == hf_greedy(model, p, 8)
    actor = response_logprobs(model, out.prompt_ids, out.prompt_mask, out.response_ids, out.response_mask)
    torch.testing.assert_close(actor.logprobs, out.rollout_logprobs, atol=1e-5, rtol=0)


def test_min_new_tokens_keeps_eos_out_of_the_first_tokens(tiny_lm):
    """Greedy row 0 says EOS at its third token; with min_new_tokens=5 it cannot before the sixth,
    and the tokens before the first ban are the unconstrained ones."""
    free = HFEngine(tiny_lm, eos_token_ids=[], pad_token_id=PAD)
    unconstrained = free.generate(prompt_batch(), SamplingParams(do_sample=False, max_new_tokens=10), expected_version=0)
    eos = unconstrained.response_ids[0, 2].item()
    engine = HFEngine(tiny_lm, eos_token_ids=[eos], pad_token_id=PAD)
    out = engine.generate(prompt_batch(), SamplingParams(do_sample=False, max_new_tokens=10, min_new_tokens=5), expected_version=0)
    assert out.response_mask.sum(1).min() >= 5 and out.response_mask[0].sum() > 3
    assert eos not in out.response_ids[:, :5].flatten().tolist()
    assert out.response_ids[0, :2].tolist() == unconstrained.response_ids[0, :2].tolist()
    actor = batch_logprobs(tiny_lm, out, temperature=1.0)  # the ban shapes the draw, not the record
    torch.testing.assert_close(actor.logprobs, out.rollout_logprobs, atol=1e-5, rtol=0)


def test_fire_diversifies_first_tokens_and_keeps_recorded_logprobs_exact(tiny_lm):
    with torch.no_grad():
        tiny_lm.lm_head.weight.mul_(100.0)  # peaked next-token distributions: sampling at 1.0 is near greedy
    engine = HFEngine(tiny_lm, eos_token_ids=[], pad_token_id=PAD, seed=3)
    plain = SamplingParams(n=16, max_new_tokens=4)
    fire = SamplingParams(n=16, max_new_tokens=4, first_token_temperature=30.0, first_token_top_k=16)
    plain_out = engine.generate(prompt_batch(), plain, expected_version=0)
    fire_out = engine.generate(prompt_batch(), fire, expected_version=0)
    distinct = lambda out: len(set(out.response_ids[:16, 0].tolist()))  # noqa: E731: prompt 0's first tokens
    assert distinct(plain_out) <= 3 < 8 <= distinct(fire_out), (distinct(plain_out), distinct(fire_out))
    actor = batch_logprobs(tiny_lm, fire_out, temperature=1.0)
    torch.testing.assert_close(actor.logprobs, fire_out.rollout_logprobs, atol=1e-4, rtol=0)
