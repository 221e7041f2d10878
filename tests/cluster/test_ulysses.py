"""Ulysses sequence parallelism (posttrain.models.ulysses) on 2 gloo processes: the response
log-probs, entropies and parameter gradients of a sequence split over the sp group equal one
process's (fp32, 1e-5), padded and packed, with sp dividing the kv heads and with a single kv head
(repeated before the exchange), and with a sequence width that sp does not divide; and the actor,
critic and reference, each sequence split over both ranks (dp 1 x sp 2, the models FSDP-sharded
over both), compute the metrics, weights and outputs of one process.

One spawn of the two ranks runs every check (starting processes is most of the cost)."""

from __future__ import annotations

import pytest
import torch
import torch.distributed as dist
from transformers import Qwen2Config, Qwen2ForCausalLM

from dist_harness import run_ranks
from posttrain.cluster.world import World
from posttrain.models.logprobs import response_logprobs
from posttrain.models.ulysses import SequenceGroup, current_group, sequence_parallel, ulysses_unsupported_reason


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


def _sequence_logprobs(model, share: float):
    """SFT's log-probs of right-padded sequences (widths 9, 6, 3) and their gradients."""
    from posttrain.data.examples import SequenceBatch
    from posttrain.trainer.sequence_logprobs import sequence_logprobs

    model.zero_grad(set_to_none=True)
    lengths = torch.tensor([9, 6, 3])
    mask = (torch.arange(9)[None] < lengths[:, None]).long()
    ids = (torch.arange(27).view(3, 9) * 7 % 60 + 1) * mask
    out = sequence_logprobs(model, SequenceBatch(ids, mask, (mask * (torch.arange(9)[None] >= 2)).float(), [0, 1, 2]))
    ((out.logprobs * out.mask).sum() * share).backward()
    return out.logprobs.detach(), {n: p.grad.clone() for n, p in model.named_parameters()}


def _primitive(rank: int, world: int) -> dict:
    import posttrain.models.packing as packing
    from transformers import AttentionInterface

    from posttrain.models.ulysses import ATTENTION_NAME, ulysses_attention

    packing.MIN_SAVING = 0.0  # pack whenever packing saves anything: the packed path is exercised
    sp = SequenceGroup(rank, world, dist.group.WORLD)
    widths = []  # the query width each split attention call received: this rank's columns only

    def spy(module, query, *args, **kwargs):
        widths.append(query.shape[2])
        return ulysses_attention(module, query, *args, **kwargs)

    AttentionInterface.register(ATTENTION_NAME, spy)
    import posttrain.models.logprobs as logprobs_module

    head, rows = logprobs_module._head_logprobs, {True: 0, False: 0}  # tokens the LM head scored, split or not

    def head_spy(model, hidden, *args, **kwargs):
        rows[current_group() is not None] += hidden.shape[0]
        return head(model, hidden, *args, **kwargs)

    logprobs_module._head_logprobs = head_spy
    out = {"sft": _sft_errors(sp, world)}
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
    AttentionInterface.register(ATTENTION_NAME, ulysses_attention)
    logprobs_module._head_logprobs = head
    out["widths"] = sorted(set(widths))
    out["head_rows"] = (rows[False], rows[True])
    return out


def _sft_errors(sp: SequenceGroup, world: int) -> tuple[float, float]:
    model = _model(2)
    lp1, grads1 = _sequence_logprobs(model, 1.0)
    with sequence_parallel(sp):
        lp, grads = _sequence_logprobs(model, 1.0 / world)
    for g in grads.values():
        dist.all_reduce(g)
    return float((lp - lp1).abs().max()), max(float((grads[n] - grads1[n]).abs().max() / grads1[n].abs().max()) for n in grads)


def test_split_sequence_matches_one_process(ranked):
    rows = [r["primitive"].pop("head_rows") for r in ranked]  # (tokens the LM head scored unsplit, split)
    assert rows[0][0] == rows[1][0] == rows[0][1] + rows[1][1] > 0  # split: each token scored on one rank
    for rank_result in (r["primitive"] for r in ranked):
        # padded: 13 columns to 14 (7 per rank); packed: rows of 12 columns; SFT: 9 columns to 10
        assert rank_result.pop("widths") == [5, 6, 7]
        sft_lp_err, sft_grad_err = rank_result.pop("sft")
        assert sft_lp_err < 1e-5 and sft_grad_err < 1e-5, (sft_lp_err, sft_grad_err)
        assert set(rank_result) == {(2, False), (2, True), (1, False), (1, True)}
        for case, (lp_err, ent_err, grad_err, size) in rank_result.items():
            assert size > 1.0, case  # the log-probs are not trivially zero
            assert lp_err < 1e-5 and ent_err < 1e-5 and grad_err < 1e-5, (case, lp_err, ent_err, grad_err)


def test_unsupported_models_are_named():
    model = _model(2)
    assert "4 attention heads do not divide over 3" in ulysses_unsupported_reason(model, 3)
    model.activation_checkpointing_enable()
    assert "gradient checkpointing" in ulysses_unsupported_reason(model, 2)
    model._supports_attention_backend = False
    assert "attention interface" in ulysses_unsupported_reason(model, 2)
    from posttrain.cluster.world import role_parallelism
    from posttrain.errors import ConfigError

    with pytest.raises(ConfigError, match=r"critic.ulysses_sequence_parallel_size=2: .* \(Qwen2ForCausalLM does not run its attention"):
        role_parallelism(World(), True)(model, "critic", 2)




# ---------------------------------------------------------------- the roles over a dp x sp grid


def _load(model_dir: str, world: int, critic: bool = False):
    """A fresh model (the critic's head seeded alike on every rank), FSDP-sharded over `world` ranks
    when there are several, as `World.shard` shards a role over every worker process."""
    from test_data_parallel_roles import _load as load_one

    from posttrain.cluster.fsdp import ShardingSettings, shard_model
    from posttrain.cluster.parallel import DataParallel

    model = load_one(model_dir, DataParallel(), critic=critic)
    if world == 1:
        return model
    from torch.distributed.device_mesh import init_device_mesh

    return shard_model(model, init_device_mesh("cpu", (world,)), ShardingSettings())


def _roles(model_dir: str, dp, world: int) -> tuple:
    """(actor update: metrics, weights, log-probs after), the same for the critic (values), and the
    reference's log-probs, with `dp` and the models sharded over `world` ranks."""
    from test_data_parallel_roles import CASES, _batch, _full
    from worker_helpers import NoSchedule, actor_settings, critic_settings

    from posttrain.workers import Actor, Critic, ReferencePolicy

    batch = _batch(_load(model_dir, 1))
    # SGD: the weights move by lr x the gradient, so comparing them compares the gradients (Adam's
    # first step, g / (|g| + eps), turns a rounding in a near-zero gradient entry into a large move)
    model = _load(model_dir, world)
    settings = actor_settings(use_kl_loss=True, kl_loss_coef=0.3, entropy_coeff=0.05, grad_clip=0.5, mini_batch_size=7, **CASES["token-mean"])
    actor = Actor(model, torch.optim.SGD(model.parameters(), lr=0.1), NoSchedule(), settings, dp=dp)
    out = [(actor.update(batch), _full(model), actor.compute_logprobs(batch))]
    model = _load(model_dir, world, critic=True)
    critic = Critic(model, torch.optim.SGD(model.parameters(), lr=0.1), NoSchedule(), critic_settings(micro_batch_size=2, grad_clip=1.0), dp=dp)
    metrics = critic.update(batch)
    out.append((metrics, _full(model), critic.compute_values(batch)))
    reference = ReferencePolicy(_load(model_dir, world), temperature=1.0, micro_batch_size=1, dp=dp)
    return (*out, reference.compute_logprobs(batch))


def _all(rank: int, world: int, model_dir: str) -> dict:
    from posttrain.cluster.parallel import DataParallel

    dp = World(rank, world).data_parallel(sp=world)
    assert dp.seq is not None and dp.seq.size == world and not dp.distributed and dp.loss_share == 0.5
    return {"primitive": _primitive(rank, world), "single": _roles(model_dir, DataParallel(), 1), "split": _roles(model_dir, dp, world),
            "moe": (_moe_actor(DataParallel()), _moe_actor(dp)),
            "built": [_built(rank, world, model_dir, sizes) for sizes in (("2", "1", "2"), ("2", "null", "1"))]}


def _moe_actor(dp) -> tuple:
    """(metrics, weights) of a tiny Qwen3-MoE actor's update with the router load-balancing loss and
    z-loss (actor.moe_aux_loss_coef, moe_z_loss_coef): with sp, each rank routes its columns and the
    counts meet in a sum."""
    from test_data_parallel_roles import _batch, _full
    from transformers import Qwen3MoeConfig, Qwen3MoeForCausalLM
    from worker_helpers import NoSchedule, actor_settings

    from posttrain.workers import Actor

    torch.manual_seed(0)
    config = Qwen3MoeConfig(vocab_size=64, hidden_size=16, intermediate_size=32, moe_intermediate_size=16, num_hidden_layers=2,
                            num_attention_heads=2, num_key_value_heads=2, head_dim=8, num_experts=4, num_experts_per_tok=2,
                            max_position_embeddings=64)
    model = Qwen3MoeForCausalLM(config).float().train()
    batch = _batch(model)
    if dp.seq is not None:  # sharded over both ranks, as World.shard does: the ranks' gradients meet in a sum
        from torch.distributed.device_mesh import init_device_mesh

        from posttrain.cluster.fsdp import ShardingSettings, shard_model

        model = shard_model(model, init_device_mesh("cpu", (dp.seq.size,)), ShardingSettings())
    # the policy loss is off (rl_loss_coef 0): the update is the router loss's alone
    settings = actor_settings(mini_batch_size=7, micro_batch_size=3, rl_loss_coef=0.0, moe_aux_loss_coef=1.0, moe_top_k=2,
                              moe_z_loss_coef=0.5)
    actor = Actor(model, torch.optim.SGD(model.parameters(), lr=1.0), NoSchedule(), settings, dp=dp)
    return actor.update(batch), _full(model)


def _built(rank: int, world: int, model_dir: str, sizes: tuple[str, str, str]) -> dict:
    """Each role's sp size (0: not split) as `build_roles` wires the actor/ref/critic keys."""
    from posttrain.config.derive import derive
    from posttrain.config.load import load_config
    from posttrain.models.loading import tokenizer_from_config
    from posttrain.trainer.rl_build import build_roles

    keys = [f"{role}.ulysses_sequence_parallel_size={size}" for role, size in zip(("actor", "ref", "critic"), sizes)]
    cfg = load_config(None, [f"model.path={model_dir}", "cluster.n_gpus_per_node=2", "algorithm.adv_estimator=gae",
                             "actor.use_kl_loss=true", *keys])
    roles = build_roles(cfg, derive(cfg, 64), tokenizer_from_config(cfg.model), World(rank, world))
    return {name: role.dp.seq.size if role.dp.seq else 0 for name, role in
            (("actor", roles.actor), ("ref", roles.reference), ("critic", roles.critic), ("rollout", roles.rollout))}


@pytest.fixture(scope="module")
def ranked(tmp_path_factory):
    from posttrain.models.tiny import make_tiny_model

    model_dir = str(make_tiny_model(tmp_path_factory.mktemp("sp") / "m", layers=2, hidden=32, heads=4, seed=0))
    return run_ranks(_all, 2, model_dir)


def test_roles_split_over_sp_ranks_compute_what_one_process_computes(ranked):
    from test_data_parallel_roles import _compare

    for result in ranked:
        single, split = result["single"], result["split"]
        for one, two in zip(single[:2], split[:2]):  # the actor and the critic: metrics, weights, outputs
            assert one[0]["actor/grad_norm" if "actor/grad_norm" in one[0] else "critic/grad_norm"] > 1e-3
            _compare(one, [two])
        torch.testing.assert_close(split[2], single[2], atol=1e-5, rtol=0)


def test_the_router_loss_of_split_sequences_is_one_process_s(ranked):
    for result in ranked:
        (single, single_weights), (split, split_weights) = result["moe"]
        assert single["actor/moe_aux_loss"] > 1.0  # 1 per layer at perfect balance: 2 layers, not balanced
        assert split["actor/moe_aux_loss"] == pytest.approx(single["actor/moe_aux_loss"], rel=1e-5)
        assert split["actor/moe_z_loss"] == pytest.approx(single["actor/moe_z_loss"], rel=1e-5) and single["actor/moe_z_loss"] > 1e-3
        assert split["actor/grad_norm"] == pytest.approx(single["actor/grad_norm"], rel=1e-4) and single["actor/grad_norm"] > 1e-4
        for name, value in single_weights.items():
            torch.testing.assert_close(split_weights[name], value, atol=1e-6, rtol=1e-5)


def test_each_role_splits_by_its_own_key_and_the_reference_follows_the_actor(ranked):
    for result in ranked:
        explicit, following = result["built"]
        assert explicit == {"actor": 2, "ref": 0, "critic": 2, "rollout": 0}  # ref 1, critic 2
        assert following == {"actor": 2, "ref": 2, "critic": 0, "rollout": 0}  # ref null: the actor's size


def test_a_size_that_does_not_divide_the_workers_is_refused():
    from posttrain.config.load import load_config
    from posttrain.errors import ConfigError

    for overrides, key in ((["actor.ulysses_sequence_parallel_size=2"], "actor"),
                           (["algorithm.adv_estimator=gae", "critic.ulysses_sequence_parallel_size=3", "cluster.n_gpus_per_node=2"], "critic")):
        with pytest.raises(ConfigError, match=rf"{key}.ulysses_sequence_parallel_size=\d does not divide the \d worker process"):
            load_config(None, overrides)
    load_config(None, ["critic.ulysses_sequence_parallel_size=3", "cluster.n_gpus_per_node=2"])  # no critic: nothing to split
    with pytest.raises(ConfigError, match="differs from actor.ulysses_sequence_parallel_size=2 in a DPO stage"):
        load_config(None, ["algorithm.kind=dpo", "cluster.n_gpus_per_node=2", "actor.ulysses_sequence_parallel_size=2",
                           "ref.ulysses_sequence_parallel_size=1"])


def test_batches_divide_over_data_parallel_groups_not_workers():
    """verl's rule: a mini-batch splits over world / sp data-parallel groups (each sp group takes the same rows)."""
    from posttrain.config.load import load_config
    from posttrain.errors import ConfigError

    four = ["cluster.n_gpus_per_node=4", "data.train_batch_size=2", "rollout.n=1", "actor.ppo_mini_batch_size=2"]
    load_config(None, [*four, "actor.ulysses_sequence_parallel_size=2"])  # 2 responses over 2 groups
    # 2 responses over 4 devices: two ranks get none and run zero-weight passes (posttrain.workers.microbatch)
    load_config(None, four)
    with pytest.raises(ConfigError, match=r"does not divide the per-device mini-batch of 4 responses .* / 2 data-parallel groups"):
        load_config(None, [*four, "data.train_batch_size=8", "actor.ppo_mini_batch_size=8", "actor.ppo_micro_batch_size_per_gpu=3",
                           "actor.ulysses_sequence_parallel_size=2"])


def _grid(rank: int, world: int, model_dir: str) -> dict:
    """4 ranks as 2 data-parallel groups x 2 sp ranks: who is in which group, and the roles' results."""
    from posttrain.cluster.parallel import DataParallel

    dp = World(rank, world).data_parallel(sp=2)
    members = torch.zeros(world)
    members[rank] = 1.0
    seq_members, dp_members = members.clone(), members.clone()
    dist.all_reduce(seq_members, group=dp.seq.group)
    dist.all_reduce(dp_members, group=dp.group)
    return {"place": (dp.rank, dp.size, dp.seq.rank, seq_members.tolist(), dp_members.tolist()),
            "single": _roles(model_dir, DataParallel(), 1), "split": _roles(model_dir, dp, world)}


@pytest.mark.long  # 4 processes on 2 cores (~35 CPU s); CI covers sp with 2 ranks and the dp-group batch rule
def test_a_dp_by_sp_grid_of_four_ranks_computes_what_one_process_computes(tmp_path):
    from posttrain.models.tiny import make_tiny_model
    from test_data_parallel_roles import _compare

    model_dir = str(make_tiny_model(tmp_path / "m", layers=2, hidden=32, heads=4, seed=0))
    results = run_ranks(_grid, 4, model_dir, timeout=600)
    # sp groups are consecutive ranks {0, 1}, {2, 3}; data-parallel groups {0, 2}, {1, 3} (verl's (dp, sp) mesh)
    assert [r["place"] for r in results] == [
        (0, 2, 0, [1, 1, 0, 0], [1, 0, 1, 0]), (0, 2, 1, [1, 1, 0, 0], [0, 1, 0, 1]),
        (1, 2, 0, [0, 0, 1, 1], [1, 0, 1, 0]), (1, 2, 1, [0, 0, 1, 1], [0, 1, 0, 1]),
    ]
    for result in results:
        for one, split in zip(result["single"][:2], result["split"][:2]):
            _compare(one, [split])
        torch.testing.assert_close(result["split"][2], result["single"][2], atol=1e-5, rtol=0)
