"""Ulysses sequence parallelism (posttrain.models.ulysses) on 2 gloo processes: the response
log-probs, entropies and parameter gradients of a sequence split over the sp group equal one
process's (fp32, 1e-5), padded and packed, with sp dividing the kv heads and with a single kv head
(repeated before the exchange), and with a sequence width that sp does not divide."""

from __future__ import annotations

import torch
import torch.distributed as dist
from transformers import Qwen2Config, Qwen2ForCausalLM

from dist_harness import run_ranks
from posttrain.models.logprobs import response_logprobs
from posttrain.models.ulysses import SequenceGroup, sequence_parallel, ulysses_unsupported_reason


def _model(kv_heads: int) -> Qwen2ForCausalLM:
    torch.manual_seed(0)
    config = Qwen2Config(
        vocab_size=64, hidden_size=32, intermediate_size=48, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=kv_heads, max_position_embeddings=64, tie_word_embeddings=True,
    )
    return Qwen2ForCausalLM(config).float().train()


def _batch():
    """Left-padded prompts (width 7), right-padded responses (width 6): 13 columns, odd for sp=2."""
    g = torch.Generator().manual_seed(1)
    a, c = torch.tensor([7, 2, 5, 1]), torch.tensor([5, 1, 6, 3])
    pm = (torch.arange(7)[None] >= 7 - a[:, None]).float()
    rm = (torch.arange(6)[None] < c[:, None]).float()
    return torch.randint(1, 60, (4, 7), generator=g) * pm.long(), pm, torch.randint(1, 60, (4, 6), generator=g) * rm.long(), rm


def _run(model, pack: bool, share: float):
    """(log-probs, entropy, gradients) of a loss that uses both, its gradient weighted by `share`."""
    model.zero_grad(set_to_none=True)
    pid, pm, rid, rm = _batch()
    out = response_logprobs(model, pid, pm, rid, rm, with_entropy=True, pack=pack)
    loss = (out.logprobs * rm).sum() / rm.sum() + 0.1 * (out.entropy * rm).sum()
    (loss * share).backward()
    return out.logprobs.detach(), out.entropy.detach(), {n: p.grad.clone() for n, p in model.named_parameters()}


def _compare(rank: int, world: int) -> dict:
    import posttrain.models.packing as packing

    packing.MIN_SAVING = 0.0  # pack whenever packing saves anything: the packed path is exercised
    sp = SequenceGroup(rank, world, dist.group.WORLD)
    out = {}
    for kv_heads in (2, 1):
        model = _model(kv_heads)
        assert ulysses_unsupported_reason(model, world) is None
        for pack in (False, True):
            lp1, ent1, grads1 = _run(model, pack, 1.0)
            with sequence_parallel(sp):
                lp, ent, grads = _run(model, pack, 1.0 / world)  # each sp rank's share of the same loss
            for g in grads.values():  # what the gradient reduction over the ranks does
                dist.all_reduce(g)
            errs = [float((grads[n] - grads1[n]).abs().max() / grads1[n].abs().max().clamp(min=1e-12)) for n in grads]
            out[(kv_heads, pack)] = (
                float((lp - lp1).abs().max()), float((ent - ent1).abs().max()), max(errs), float(lp1.abs().sum()),
            )
    return out


def test_split_sequence_matches_one_process():
    results = run_ranks(_compare, 2)
    for rank_result in results:
        assert set(rank_result) == {(2, False), (2, True), (1, False), (1, True)}
        for case, (lp_err, ent_err, grad_err, size) in rank_result.items():
            assert size > 1.0, case  # the log-probs are not trivially zero
            assert lp_err < 1e-5 and ent_err < 1e-5 and grad_err < 1e-5, (case, lp_err, ent_err, grad_err)


def test_unsupported_models_are_named():
    model = _model(2)
    assert "4 attention heads do not divide over 3" in ulysses_unsupported_reason(model, 3)
    model.config.model_type = "gpt2"
    assert "model_type 'gpt2'" in ulysses_unsupported_reason(model, 2)
