"""The rollout-engine contract (docs/engines.md) as checks any engine must pass.

Each `check_*` takes an `EngineCase`: a way to build the engine under test over a model directory,
the same weights as an HF module (the actor that recomputes), a tokenizer and a tolerance.
tests/rollout/test_engine_contract.py runs every check for every engine: `hf` always (CPU), `vllm`
and `sglang` where they import and CUDA is present (skipped with the reason otherwise).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import torch

from posttrain.models.logprobs import batch_logprobs
from posttrain.models.positions import position_ids_from_mask
from posttrain.records import PromptBatch
from posttrain.rollout.base import RolloutEngine, SamplingParams, StalePolicyError


@dataclass
class EngineCase:
    name: str
    make: Callable[[], RolloutEngine]  # a fresh engine over the model directory's weights, version 0
    actor: torch.nn.Module  # the same weights, for recomputation
    other: torch.nn.Module  # other weights of the same shapes, for update_weights
    tokenizer: Any
    atol: float  # log-prob tolerance against the actor's recomputation


def prompts(case: EngineCase, texts=("12+34=", "hello", "x")) -> PromptBatch:
    rows = [case.tokenizer(t, add_special_tokens=False)["input_ids"] for t in texts]
    P, pad = max(map(len, rows)), case.tokenizer.pad_token_id
    ids = torch.tensor([[pad] * (P - len(r)) + r for r in rows])  # (B, P) left-padded
    mask = torch.tensor([[0.0] * (P - len(r)) + [1.0] * len(r) for r in rows])  # (B, P)
    return PromptBatch(ids, mask, uid=[f"p{i}" for i in range(len(rows))])


def greedy(**kw) -> SamplingParams:
    return SamplingParams(do_sample=False, max_new_tokens=10, ignore_eos=True, **kw)


def actor_argmax(model: torch.nn.Module, out) -> torch.Tensor:
    """The model's argmax at every response position, teacher-forced on the responses (B, T)."""
    ids = torch.cat([out.prompt_ids, out.response_ids], dim=1).to(next(model.parameters()).device)  # (B, S)
    mask = out.attention_mask.to(ids.device)  # (B, S)
    with torch.no_grad():
        logits = model(input_ids=ids, attention_mask=mask.long(), position_ids=position_ids_from_mask(mask)).logits
    P = out.prompt_ids.shape[1]
    return logits[:, P - 1 : -1].argmax(-1).to(out.response_ids.device)  # (B, T): position t predicts token t


def _rows(out) -> list[list[int]]:
    lengths = out.response_mask.sum(1).long().tolist()
    return [r[:n].tolist() for r, n in zip(out.response_ids, lengths)]


def check_logprobs_equal_the_actor_recomputation(case: EngineCase) -> None:
    engine = case.make()
    out = engine.generate(prompts(case), SamplingParams(temperature=0.7, n=2, max_new_tokens=12), expected_version=0)
    actor = batch_logprobs(case.actor, out.to(next(case.actor.parameters()).device), temperature=0.7)
    mask = out.response_mask.bool()
    torch.testing.assert_close(actor.logprobs.cpu()[mask.cpu()], out.rollout_logprobs.cpu()[mask.cpu()], atol=case.atol, rtol=0)


def check_n_gives_adjacent_groups(case: EngineCase) -> None:
    out = case.make().generate(prompts(case), SamplingParams(n=3, max_new_tokens=4), expected_version=0)
    assert out.group_index == ["p0"] * 3 + ["p1"] * 3 + ["p2"] * 3
    assert len(out) == 9 and bool((out.weights_version == 0).all())


def check_max_new_tokens_and_ignore_eos(case: EngineCase) -> None:
    out = case.make().generate(prompts(case), SamplingParams(max_new_tokens=7, ignore_eos=True), expected_version=0)
    assert out.response_ids.shape[1] == 7 and bool((out.response_mask == 1).all())


def check_greedy_is_the_argmax(case: EngineCase) -> None:
    out = case.make().generate(prompts(case), greedy(), expected_version=0)
    mask = out.response_mask.bool()
    assert torch.equal(actor_argmax(case.actor, out)[mask], out.response_ids[mask])


def check_temperature_sharpens(case: EngineCase) -> None:
    engine = case.make()
    cold = engine.generate(prompts(case), SamplingParams(temperature=0.1, n=4, max_new_tokens=8, ignore_eos=True), expected_version=0)
    hot = engine.generate(prompts(case), SamplingParams(temperature=3.0, n=4, max_new_tokens=8, ignore_eos=True), expected_version=0)
    # sampled tokens are near-certain under a cold distribution and unlikely under a hot one
    assert cold.rollout_logprobs.mean() > hot.rollout_logprobs.mean() + 1.0


def check_truncation_params_reach_greedy(case: EngineCase) -> None:
    engine = case.make()
    reference = _rows(engine.generate(prompts(case), greedy(), expected_version=0))
    free = _rows(engine.generate(prompts(case), SamplingParams(temperature=1.0, n=1, max_new_tokens=10, ignore_eos=True, seed=3), expected_version=0))
    assert free != reference  # sampling without truncation leaves the argmax path (random tiny model)
    for params in (dict(top_k=1), dict(top_p=1e-6), dict(min_p=1.0)):
        sampled = engine.generate(
            prompts(case), SamplingParams(temperature=1.0, max_new_tokens=10, ignore_eos=True, seed=3, **params), expected_version=0
        )
        assert _rows(sampled) == reference, f"{params} should leave only the most likely token"


def check_stop_token_ids_and_stop_strings(case: EngineCase) -> None:
    engine = case.make()
    full = _rows(engine.generate(prompts(case), greedy(), expected_version=0))[0]
    stop_id = full[3]
    first = full.index(stop_id)
    cut = _rows(engine.generate(prompts(case), greedy(stop_token_ids=(stop_id,)), expected_version=0))[0]
    assert cut == full[: first + 1]  # the stop token ends the response and is part of it
    stop = case.tokenizer.decode(full, skip_special_tokens=False)[4:6]  # two characters of the greedy text
    # the response ends with the first token whose text completes the stop string
    k = next(k for k in range(1, len(full) + 1) if stop in case.tokenizer.decode(full[:k], skip_special_tokens=False))
    stopped = _rows(engine.generate(prompts(case), greedy(stop=(stop,)), expected_version=0))[0]
    assert stopped == full[:k]


def check_stop_strings_left_out_of_the_output(case: EngineCase) -> None:
    """include_stop false (rollout.include_stop_str_in_output): the rollout role takes the stop
    string's tokens off again, whatever the engine; ids, mask and log-probs end before it."""
    from posttrain.workers.rollout import RolloutWorker

    worker = RolloutWorker(case.make(), tokenizer=case.tokenizer)
    full = _rows(worker.generate(prompts(case), greedy(), expected_version=0))[0]
    text = case.tokenizer.decode(full, skip_special_tokens=False)
    stop = text[4:6]
    kept = worker.generate(prompts(case), greedy(stop=(stop,)), expected_version=0)
    left = worker.generate(prompts(case), greedy(stop=(stop,), include_stop=False), expected_version=0)
    with_stop, without = _rows(kept)[0], _rows(left)[0]
    assert case.tokenizer.decode(with_stop, skip_special_tokens=False).endswith(stop)
    without_text = case.tokenizer.decode(without, skip_special_tokens=False)
    assert stop not in without_text and text.startswith(without_text) and without == with_stop[: len(without)]
    n = len(without)
    assert torch.all(left.response_mask[0, n:] == 0) and torch.all(left.rollout_logprobs[0, n:] == 0)
    assert torch.equal(left.rollout_logprobs[0, :n], kept.rollout_logprobs[0, :n])


def check_seed_reproduces(case: EngineCase) -> None:
    engine = case.make()
    params = SamplingParams(temperature=1.0, n=3, max_new_tokens=12, ignore_eos=True, seed=7)
    first = engine.generate(prompts(case), params, expected_version=0)
    again = engine.generate(prompts(case), params, expected_version=0)
    other = engine.generate(prompts(case), SamplingParams(temperature=1.0, n=3, max_new_tokens=12, ignore_eos=True, seed=8), expected_version=0)
    assert torch.equal(first.response_ids, again.response_ids)
    assert not torch.equal(first.response_ids, other.response_ids)
    # the three samples of a prompt differ from each other too
    assert len({tuple(r) for r in _rows(first)[:3]}) > 1


def check_stale_version_is_refused(case: EngineCase) -> None:
    engine = case.make()
    try:
        engine.generate(prompts(case), greedy(), expected_version=1)
    except StalePolicyError:
        return
    raise AssertionError("generate with the wrong expected_version did not raise StalePolicyError")


def check_update_weights_from_pairs(case: EngineCase) -> None:
    engine = case.make()
    before = engine.generate(prompts(case), greedy(), expected_version=0)
    pairs = ((name, tensor.detach().clone()) for name, tensor in case.other.state_dict().items())  # one at a time
    engine.update_weights(pairs, version=1)
    assert engine.weights_version == 1
    after = engine.generate(prompts(case), greedy(), expected_version=1)
    assert not torch.equal(before.response_ids, after.response_ids)
    mask = after.response_mask.bool()
    assert torch.equal(actor_argmax(case.other, after)[mask], after.response_ids[mask])
    assert bool((after.weights_version == 1).all())


def check_sleep_and_wake_up_round_trip(case: EngineCase) -> None:
    engine = case.make()
    before = engine.generate(prompts(case), greedy(), expected_version=0)
    engine.sleep(level=1)
    try:
        engine.generate(prompts(case), greedy(), expected_version=0)
    except RuntimeError:
        pass
    else:
        raise AssertionError("generate while asleep did not raise")
    engine.wake_up()
    after = engine.generate(prompts(case), greedy(), expected_version=0)
    assert torch.equal(before.response_ids, after.response_ids)


CHECKS = [
    check_logprobs_equal_the_actor_recomputation, check_n_gives_adjacent_groups, check_max_new_tokens_and_ignore_eos,
    check_greedy_is_the_argmax, check_temperature_sharpens, check_truncation_params_reach_greedy,
    check_stop_token_ids_and_stop_strings, check_stop_strings_left_out_of_the_output, check_seed_reproduces, check_stale_version_is_refused,
    check_update_weights_from_pairs, check_sleep_and_wake_up_round_trip,
]
