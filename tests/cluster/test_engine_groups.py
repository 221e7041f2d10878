"""On 4 gloo processes: worker processes that share one engine (its tensor-parallel ranks, the vllm
engine's layout with rollout.tensor_model_parallel_size > 1) are each given the same prompts, and the
batch holds one copy of each engine's rows, in prompt order, equal to one process sampling them all.

The engine here is the hf engine told it has 2 ranks per engine: what is checked is the rollout
role's share-out and gather, which is the same for any engine; vLLM's own tensor parallelism needs
GPUs and is not run here.
"""

from __future__ import annotations

import pytest
import torch
from transformers import AutoModelForCausalLM

from dist_harness import run_ranks
from posttrain.cluster.world import World
from posttrain.models.tiny import make_tiny_model
from posttrain.records import PromptBatch
from posttrain.rollout.base import SamplingParams
from posttrain.rollout.hf_engine import HFEngine
from posttrain.workers.rollout import RolloutWorker

PARAMS = SamplingParams(n=2, max_new_tokens=4)


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    return make_tiny_model(tmp_path_factory.mktemp("m") / "model", layers=2, hidden=32, heads=4, seed=0)


def _prompts(vocab: int) -> PromptBatch:
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(3, vocab, (6, 5), generator=g)
    mask = torch.ones(6, 5)
    mask[1, :2] = 0  # left padding
    return PromptBatch(ids, mask, uid=[f"p{i}" for i in range(6)])


def _grouped_rollout(rank, world, model_dir):
    engine = HFEngine(AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32), seed=7)
    engine.ranks_per_engine = 2  # ranks 0-1 and 2-3 are one engine each
    real, asked = engine.generate, []

    def generate(prompts, *args, **kwargs):
        asked.append(list(prompts.uid))
        batch = real(prompts, *args, **kwargs)
        if rank % 2:  # a second rank's copy must never reach the batch: make it wrong
            batch.response_ids = batch.response_ids + 1
        return batch

    engine.generate = generate
    dp = World(rank, world).data_parallel()
    prompts = _prompts(engine.model.config.vocab_size)
    both = RolloutWorker(engine, dp).generate(prompts, PARAMS, expected_version=0)
    both_asked, asked[:] = list(asked), []
    # cluster.device_mapping.rollout on the first 2 workers: one engine (ranks 0-1) samples every prompt
    first = RolloutWorker(engine, dp, engines=2).generate(prompts, PARAMS, expected_version=0)
    try:
        RolloutWorker(engine, dp, engines=3)
        odd = None
    except ValueError as e:
        odd = str(e)
    return {"ids": both.response_ids, "logprobs": both.rollout_logprobs, "uid": both.group_index, "asked": both_asked,
            "first_ids": first.response_ids, "first_asked": list(asked), "odd": odd}


def test_the_ranks_of_one_engine_sample_one_share_and_the_batch_keeps_one_copy(model_dir):
    ranks = run_ranks(_grouped_rollout, 4, str(model_dir))
    single = HFEngine(AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32), seed=7)
    prompts = _prompts(single.model.config.vocab_size)
    expected = single.generate(prompts, PARAMS, expected_version=0)
    # both ranks of an engine were asked its share: the first 3 prompts for ranks 0-1, the last 3 for 2-3
    assert [r["asked"] for r in ranks] == [[["p0", "p1", "p2"]]] * 2 + [[["p3", "p4", "p5"]]] * 2
    assert [r["first_asked"] for r in ranks] == [[[f"p{i}" for i in range(6)]]] * 2 + [[]] * 2
    for r in ranks:
        assert torch.equal(r["ids"], expected.response_ids)  # the second ranks' altered copies left out
        assert torch.allclose(r["logprobs"], expected.rollout_logprobs, atol=1e-5)
        assert list(r["uid"]) == list(expected.group_index)
        assert torch.equal(r["first_ids"], expected.response_ids)
        assert r["odd"] == "2 ranks per engine do not divide the 3 generating ranks of 4"
