"""actor.router_replay.mode R2 on two FSDP-sharded gloo ranks, as two data-parallel ranks and as one
Ulysses group (each rank routes its columns of every row): every rank gets the whole batch's
recorded routes, equal to one process's, and the replayed update trains the same weights."""

from __future__ import annotations

import pytest
import torch
from transformers import AutoModelForCausalLM, Qwen3MoeConfig, Qwen3MoeForCausalLM

from dist_harness import run_ranks
from posttrain.cluster.fsdp import ShardingSettings, shard_model
from posttrain.cluster.parallel import DataParallel
from posttrain.models.moe import router_modules
from posttrain.workers import Actor
from worker_helpers import NoSchedule, actor_settings, make_batch


def _run(model_dir, dp):
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    batch = make_batch(model.config.vocab_size)
    batch.advantages = torch.randn(batch.response_mask.shape, generator=torch.Generator().manual_seed(3)) * batch.response_mask
    ranks = dp.size if dp.distributed else dp.seq.size if dp.seq is not None else 1
    if ranks > 1:
        from torch.distributed.device_mesh import init_device_mesh

        model = shard_model(model, init_device_mesh("cpu", (ranks,)), ShardingSettings())
    settings = actor_settings(router_replay=True, micro_batch_size=2, mini_batch_size=4, max_tokens_per_micro_batch=None)
    actor = Actor(model, torch.optim.SGD(model.parameters(), lr=0.5), NoSchedule(), settings, dp=dp)
    batch.old_logprobs, batch.routes = actor.old_logprobs_and_routes(batch)
    actor.update(batch)  # two mini-batches: the second replays after the first moved the routers
    inner = getattr(model, "inner", model)
    params = {n: (p.full_tensor() if hasattr(p, "full_tensor") else p).detach().clone() for n, p in inner.named_parameters()}
    return batch.old_logprobs, batch.routes, params


def _on_ranks(rank, world, model_dir, ulysses=False):
    import torch.distributed as dist

    from posttrain.cluster.world import World

    return _run(model_dir, World(rank, world).data_parallel(sp=world) if ulysses else DataParallel(rank, world, dist.group.WORLD))


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    torch.manual_seed(0)
    model = Qwen3MoeForCausalLM(Qwen3MoeConfig(
        vocab_size=64, hidden_size=16, intermediate_size=32, moe_intermediate_size=16, num_hidden_layers=2, num_attention_heads=2,
        num_key_value_heads=1, head_dim=8, num_experts=8, num_experts_per_tok=2, decoder_sparse_step=1, max_position_embeddings=64,
    ))
    for module, _ in router_modules(model):
        torch.nn.init.normal_(module.weight, std=1.0)
    path = tmp_path_factory.mktemp("rr_dp") / "m"
    model.save_pretrained(path)
    return str(path)


@pytest.mark.slow  # ~35 s each on 2 shared cores: two forked gloo ranks
@pytest.mark.parametrize("ulysses", [False, True])
def test_two_ranks_record_and_replay_as_one_process(model_dir, ulysses):
    logprobs, routes, params = _run(model_dir, DataParallel())
    for got_lp, got_routes, got_params in run_ranks(_on_ranks, 2, model_dir, ulysses):
        assert torch.equal(got_routes, routes)
        torch.testing.assert_close(got_lp, logprobs, atol=1e-5, rtol=0)
        for name in params:
            torch.testing.assert_close(got_params[name], params[name], atol=1e-5, rtol=1e-5, msg=lambda m: f"{name}: {m}")
