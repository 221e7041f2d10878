"""actor.topk_kl and dynamic_bsz_partition balanced on two FSDP-sharded gloo ranks: the teacher's
top-k gathered on every rank equals one process's, the distillation update trains the weights one
process trains, and the ranks agree on the number of verl-cut micro-batches (no rank waits alone)."""

from __future__ import annotations

import pytest
import torch
from transformers import AutoModelForCausalLM

from dist_harness import run_ranks
from posttrain.cluster.fsdp import ShardingSettings, shard_model
from posttrain.cluster.parallel import DataParallel
from posttrain.models.tiny import make_tiny_model
from posttrain.workers import Actor, ReferencePolicy
from posttrain.workers.topk_kl import TopkKLSettings
from worker_helpers import NoSchedule, actor_settings, make_batch


def _sharded(path, ranks):
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)
    if ranks > 1:
        from torch.distributed.device_mesh import init_device_mesh

        model = shard_model(model, init_device_mesh("cpu", (ranks,)), ShardingSettings())
    return model


def _run(student, teacher, dp):
    ranks = dp.size
    model = _sharded(student, ranks)
    batch = make_batch(getattr(model, "inner", model).config.vocab_size)
    batch.advantages = torch.zeros(batch.response_mask.shape)
    ref = ReferencePolicy(_sharded(teacher, ranks), temperature=1.0, micro_batch_size=2, dp=dp)
    batch.ref_logprobs, batch.teacher_topk_logprobs, batch.teacher_topk_ids = ref.compute_topk(batch, 4, 1.0)
    settings = actor_settings(topk_kl=TopkKLSettings(4, policy_loss=False), micro_batch_size=2, mini_batch_size=4)
    actor = Actor(model, torch.optim.SGD(model.parameters(), lr=0.5), NoSchedule(), settings, dp=dp)
    batch.old_logprobs = actor.compute_logprobs(batch)
    metrics = actor.update(batch)
    # verl's cut with the rows weighting: each rank cuts its share, all into the same number of micro-batches
    balanced = Actor(_sharded(student, ranks), torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=0.0), NoSchedule(),
                     actor_settings(by_rows=True, balanced=True, max_tokens_per_micro_batch=9), dp=dp)
    balanced.update(batch)
    inner = getattr(model, "inner", model)
    params = {n: (p.full_tensor() if hasattr(p, "full_tensor") else p).detach().clone() for n, p in inner.named_parameters()}
    return batch.teacher_topk_logprobs, batch.teacher_topk_ids, params, metrics["actor/topk_kl_loss"]


def _on_ranks(rank, world, student, teacher):
    import torch.distributed as dist

    return _run(student, teacher, DataParallel(rank, world, dist.group.WORLD))


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    root = tmp_path_factory.mktemp("topk_ranks")
    return (str(make_tiny_model(root / "student", layers=1, hidden=32, heads=4, seed=0)),
            str(make_tiny_model(root / "teacher", layers=1, hidden=32, heads=4, seed=3)))


@pytest.mark.slow  # ~12 s on 2 shared cores: two forked gloo ranks
def test_two_ranks_distil_as_one_process(models):
    logprobs, ids, params, loss = _run(*models, DataParallel())
    for got_lp, got_ids, got_params, got_loss in run_ranks(_on_ranks, 2, *models):
        assert torch.equal(got_ids, ids)
        torch.testing.assert_close(got_lp, logprobs, atol=1e-5, rtol=0)
        assert got_loss == pytest.approx(loss, rel=1e-4)
        for name in params:
            torch.testing.assert_close(got_params[name], params[name], atol=1e-5, rtol=1e-5, msg=lambda m: f"{name}: {m}")
