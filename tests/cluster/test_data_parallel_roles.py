"""Roles on 2 gloo processes with FSDP2 compute what one process computes.

The actor's PPO update and the critic's value update, sharded over two ranks, give the same metrics
and the same weights as the single-process update (to float rounding: the gradient is summed in
another order), for every loss aggregation and micro-batch split, including a token budget that
gives the two ranks different numbers of micro-batches; log-probs and values gathered from the two
ranks equal the single-process ones row for row.
"""

from __future__ import annotations

import pytest
import torch
from transformers import AutoModelForCausalLM

from dist_harness import run_ranks
from posttrain.cluster.fsdp import ShardingSettings, shard_model
from posttrain.cluster.parallel import DataParallel, balanced_shares, contiguous_shares
from posttrain.models.loading import load_value_model
from posttrain.models.tiny import make_tiny_model
from posttrain.workers import Actor, Critic, ReferencePolicy
from worker_helpers import NoSchedule, actor_settings, critic_settings, make_batch, noisy

# Rows of make_batch cost 8, 7, 9, 5, 7, 9, 6 tokens: the balanced split gives the two ranks
# different row counts (3 and 4), and a token budget of 20 different micro-batch counts.
CASES = {
    "token-mean": dict(loss_agg_mode="token-mean", micro_batch_size=2),
    "token-sum, budget": dict(loss_agg_mode="token-sum", max_tokens_per_micro_batch=20, micro_batch_size=None),
    "seq-mean-token-mean, budget": dict(loss_agg_mode="seq-mean-token-mean", max_tokens_per_micro_batch=20, micro_batch_size=None),
    "seq-mean-token-sum-norm, 2 minis, shuffled": dict(
        loss_agg_mode="seq-mean-token-sum-norm", loss_scale_factor=16.0, mini_batch_size=4, micro_batch_size=1, shuffle=True
    ),
}


def _batch(model):
    batch = make_batch(model.config.vocab_size)
    mask = batch.response_mask
    g = torch.Generator().manual_seed(3)
    current = Actor(model, torch.optim.SGD(model.parameters(), lr=0.0), NoSchedule(), actor_settings()).compute_logprobs(batch)
    batch.old_logprobs = noisy(current, mask, 0.3, seed=1)
    batch.ref_logprobs = noisy(current, mask, 0.5, seed=2)
    batch.advantages = torch.randn(mask.shape, generator=g) * mask
    batch.values = noisy(torch.zeros_like(mask), mask, 0.5, seed=4)
    batch.returns = noisy(torch.zeros_like(mask), mask, 1.0, seed=5)
    return batch


def _full(model) -> dict[str, torch.Tensor]:
    model = getattr(model, "inner", model)  # the FSDP root wraps the model
    return {n: (p.full_tensor() if hasattr(p, "full_tensor") else p).detach().clone() for n, p in model.named_parameters()}


def _load(model_dir, dp, critic=False, **sharding):
    """A fresh model from `model_dir` (the critic's head seeded alike on every rank), FSDP-sharded
    over the ranks when there are several."""
    torch.manual_seed(0)
    model = load_value_model(model_dir) if critic else AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    if dp.distributed:
        from torch.distributed.device_mesh import init_device_mesh

        return shard_model(model, init_device_mesh("cpu", (dp.size,)), ShardingSettings(**sharding))
    return model


def _actor_run(model_dir, dp, case, offload=False):
    batch = _batch(_load(model_dir, DataParallel()))
    model = _load(model_dir, dp, offload=offload)
    settings = actor_settings(use_kl_loss=True, kl_loss_coef=0.3, entropy_coeff=0.05, grad_clip=0.5, **{"mini_batch_size": 7, **case})
    # eps 1e-6: Adam divides by sqrt(v) + eps, so with the default 1e-8 an entry whose gradient is
    # ~1e-9 moves by a large share of lr, and summing two ranks' shares in another order (a rounding)
    # moved such an entry by 6e-5; 1e-6 keeps the update a smooth function of the gradient
    actor = Actor(model, torch.optim.AdamW(model.parameters(), lr=1e-2, eps=1e-6), NoSchedule(), settings, dp=dp)
    metrics = actor.update(batch)
    return metrics, _full(model), actor.compute_logprobs(batch)


def _critic_run(model_dir, dp):
    batch = _batch(_load(model_dir, DataParallel()))
    model = _load(model_dir, dp, critic=True)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2, eps=1e-6)  # eps: as _actor_run says (a 1e-8 eps moved an entry by 2.4e-5)
    critic = Critic(model, opt, NoSchedule(), critic_settings(micro_batch_size=2, grad_clip=1.0), dp=dp)
    metrics = critic.update(batch)
    return metrics, _full(model), critic.compute_values(batch)


def _reference_run(model_dir, dp):
    batch = _batch(_load(model_dir, DataParallel()))
    ref = ReferencePolicy(_load(model_dir, dp), temperature=1.0, micro_batch_size=1, dp=dp)
    return ref.compute_logprobs(batch)


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    return str(make_tiny_model(tmp_path_factory.mktemp("dp") / "m", layers=2, hidden=32, heads=4, seed=0))


# The policy loss reports its clip fractions and approximate KL as token means over each
# micro-batch; weighted by the micro-batch's share of a per-sequence normaliser they depend on how
# rows were split into micro-batches (in one process too), so only token-mean/token-sum runs compare them.
SPLIT_DEPENDENT = ("actor/pg_clipfrac", "actor/pg_clipfrac_lower", "actor/ppo_kl")


def _compare(single, ranks, split_invariant_only=False):
    s_metrics, s_params, s_out = single
    for metrics, params, out in ranks:
        assert metrics.keys() == s_metrics.keys()
        for k in s_metrics:
            if split_invariant_only and k in SPLIT_DEPENDENT:
                continue
            assert metrics[k] == pytest.approx(s_metrics[k], rel=1e-5, abs=1e-6), k
        for n in s_params:
            torch.testing.assert_close(params[n], s_params[n], atol=1e-5, rtol=1e-5, msg=lambda m: f"{n}: {m}")
        torch.testing.assert_close(out, s_out, atol=1e-5, rtol=0)


def _every_role(rank, world, model_dir):
    """Every role's two-rank run, as rank `rank`: one spawn of the ranks for the module's tests
    (starting the processes and their process group cost as much as a role's run)."""
    import torch.distributed as dist

    dp = DataParallel(rank, world, dist.group.WORLD)
    return {
        "actor": {name: _actor_run(model_dir, dp, case) for name, case in CASES.items()},
        "offload": _actor_run(model_dir, dp, CASES["token-mean"], True),
        "critic": _critic_run(model_dir, dp),
        "reference": _reference_run(model_dir, dp),
    }


@pytest.fixture(scope="module")
def ranked(model_dir) -> list[dict]:
    return run_ranks(_every_role, 2, model_dir)


@pytest.mark.parametrize("name", list(CASES))
def test_two_rank_actor_update_equals_one_process(model_dir, ranked, name):
    single = _actor_run(model_dir, DataParallel(), CASES[name])
    token_weighted = CASES[name]["loss_agg_mode"] in ("token-mean", "token-sum")  # metrics averaged by token shares
    _compare(single, [r["actor"][name] for r in ranked], split_invariant_only=not token_weighted)


def test_cpu_offload_policy_changes_no_number(model_dir, ranked):
    """fsdp_config.offload_policy (parameters, gradients and optimizer state on the CPU) on 2 ranks."""
    single = _actor_run(model_dir, DataParallel(), CASES["token-mean"])
    _compare(single, [r["offload"] for r in ranked])


def test_two_rank_critic_update_equals_one_process(model_dir, ranked):
    _compare(_critic_run(model_dir, DataParallel()), [r["critic"] for r in ranked])


def test_a_sharded_reference_gives_every_rank_the_whole_batch(model_dir, ranked):
    single = _reference_run(model_dir, DataParallel())
    for r in ranked:
        torch.testing.assert_close(r["reference"], single, atol=1e-5, rtol=0)


def test_shares_are_deterministic_and_cover_every_row_once():
    costs = [8, 7, 9, 5, 7, 9, 6]
    for parts in (1, 2, 3, 7, 9):
        for split in (balanced_shares(costs, parts), contiguous_shares(len(costs), parts)):
            assert sorted(r for share in split for r in share) == list(range(7))
            assert len(split) == parts and all(share == sorted(share) for share in split)
    loads = [sum(costs[r] for r in share) for share in balanced_shares(costs, 2)]
    assert max(loads) - min(loads) <= max(costs)
    assert DataParallel(1, 2, group=object(), balance=False).share(costs) == [4, 5, 6]
