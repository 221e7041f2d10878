"""On 2 gloo processes: each fsdp_config key changes how a role is sharded; the weight sync gives
every rank's engine the actor's whole weights; the rollout role samples what one process samples;
the reward stage scores every sample exactly once over the ranks and gives every rank all scores."""

from __future__ import annotations

import textwrap

import pytest
import torch
from torch.distributed.fsdp import CPUOffloadPolicy, FSDPModule
from transformers import AutoModelForCausalLM

from dist_harness import run_ranks
from posttrain.cluster.weight_sync import GatherShards, weight_sync_for
from posttrain.cluster.world import World
from posttrain.config.load import load_config
from posttrain.models.tiny import make_tiny_model
from posttrain.records import PromptBatch
from posttrain.rollout.base import SamplingParams
from posttrain.rollout.hf_engine import HFEngine
from posttrain.trainer.rewarding import RewardStage
from posttrain.workers.rollout import RolloutWorker

SHARDING_CASES = {
    "default": [],
    "offload": ["actor.fsdp_config.param_offload=true"],
    "optimizer offload": ["actor.fsdp_config.optimizer_offload=true"],
    "offload policy": ["actor.fsdp_config.offload_policy=true"],
    "keep gathered": ["actor.fsdp_config.reshard_after_forward=false"],
    "prefetch": ["actor.fsdp_config.forward_prefetch=true"],
    "hsdp": ["actor.fsdp_config.fsdp_size=1"],
    "by size": ["actor.fsdp_config.min_num_params=1000"],
    "by class": ["actor.fsdp_config.transformer_layer_cls_to_wrap=[Qwen2MLP]"],
    "reduce bf16": ["actor.fsdp_config.mixed_precision.reduce_dtype=bf16"],
}


def _describe(root) -> dict:
    """What a sharded role's FSDP set-up looks like, from the state FSDP2 keeps per unit."""
    units = [m for m in root.modules() if isinstance(m, FSDPModule) and m is not root]  # the root keeps its own settings
    layer = units[0]._get_fsdp_state()._fsdp_param_group
    return {
        "units": sorted(type(m).__name__.removeprefix("FSDP") for m in units),
        "offload": isinstance(layer.offload_policy, CPUOffloadPolicy),
        "reshard": layer.post_forward_mesh_info is not None,
        "prefetch": len(units[0]._get_fsdp_state()._states_to_forward_prefetch),
        "mesh_dims": layer.mesh_info.mesh.ndim,
        "reduce": str(layer.mp_policy.reduce_dtype),
    }


def _shard_every_case(rank, world, model_dir):
    out = {}
    for name, overrides in SHARDING_CASES.items():
        cfg = load_config(None, ["cluster.n_gpus_per_node=2", *overrides])
        model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
        out[name] = _describe(World(rank, world).shard(model, cfg.actor.fsdp_config))
    return out


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    return make_tiny_model(tmp_path_factory.mktemp("m") / "model", layers=2, hidden=32, heads=4, seed=0)


def test_each_fsdp_key_changes_the_sharding(model_dir):
    ranks = run_ranks(_shard_every_case, 2, str(model_dir))
    assert ranks[0] == ranks[1]
    got = ranks[0]
    base = got["default"]
    layers = ["Qwen2DecoderLayer", "Qwen2DecoderLayer"]
    assert base == {"units": layers, "offload": False, "reshard": True, "prefetch": 0, "mesh_dims": 1, "reduce": "None"}
    expected_change = {
        "offload": {"offload": True}, "optimizer offload": {"offload": True}, "offload policy": {"offload": True},
        "keep gathered": {"reshard": False}, "prefetch": {"prefetch": 1}, "hsdp": {"mesh_dims": 2},
        "reduce bf16": {"reduce": "torch.bfloat16"}, "by class": {"units": ["Qwen2MLP", "Qwen2MLP"]},
    }
    for name, change in expected_change.items():
        assert got[name] == {**base, **change}, name
    # every module of at least 1000 parameters of its own: the layers' projections, not the layers
    assert "Qwen2DecoderLayer" not in got["by size"]["units"] and len(got["by size"]["units"]) > 2


def _prompts(vocab: int) -> PromptBatch:
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(3, vocab, (6, 5), generator=g)
    mask = torch.ones(6, 5)
    mask[1, :2] = 0  # left padding
    return PromptBatch(ids, mask, uid=[f"p{i}" for i in range(6)], data_source=["posttrain/sort"] * 6,
                       ground_truth=["123"] * 6)


def _sync_rollout_and_reward(rank, world, model_dir, cfg_overrides):
    torch.manual_seed(0)
    full = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    engine = HFEngine(full, copy_weights=True, seed=7)
    w = World(rank, world)
    cfg = load_config(None, ["cluster.n_gpus_per_node=2", *cfg_overrides])
    actor = w.shard(full, cfg.actor.fsdp_config)
    opt = torch.optim.SGD(actor.parameters(), lr=0.5)
    for p in actor.parameters():  # move every weight: a step on a made-up gradient
        p.grad = torch.ones_like(p)
    opt.step()
    sync = weight_sync_for(engine, actor.inner, sharded=True)
    sync.push(1)
    whole = {n: (t.full_tensor() if hasattr(t, "full_tensor") else t) for n, t in actor.inner.state_dict().items()}
    same = all(torch.equal(engine.model.state_dict()[n], t) for n, t in whole.items())
    dp = w.data_parallel()
    batch = RolloutWorker(engine, dp).generate(_prompts(full.config.vocab_size), SamplingParams(n=2, max_new_tokens=4), expected_version=1)
    # cluster.device_mapping.rollout on the first worker only: rank 0 samples every prompt, rank 1 none
    real, asked = engine.generate, []
    engine.generate = lambda prompts, *a, **k: (asked.append(len(prompts)), real(prompts, *a, **k))[1]
    one = RolloutWorker(engine, dp, engines=1).generate(_prompts(full.config.vocab_size), SamplingParams(n=2, max_new_tokens=4), expected_version=1)
    stage = RewardStage(cfg, tokenizer=None, dp=dp)
    texts = [f"{i}" for i in range(len(batch))]
    scores, metrics, _ = stage.score(batch, texts)
    return {"synced": same, "is_gather": isinstance(sync, GatherShards), "engine": engine.model.state_dict(),
            "ids": batch.response_ids, "logprobs": batch.rollout_logprobs, "scores": scores, "metrics": metrics,
            "one_engine_ids": one.response_ids, "one_engine_asked": asked}


def test_weight_sync_rollout_and_reward_on_two_ranks(model_dir, tmp_path):
    calls = tmp_path / "calls"
    calls.mkdir()
    reward = tmp_path / "reward.py"
    reward.write_text(textwrap.dedent(f"""
        import os
        def score(data_source, solution_str, ground_truth, extra_info=None):
            with open(os.path.join({str(calls)!r}, str(os.getpid())), "a") as f:
                f.write(solution_str + "\\n")
            return float(solution_str) / 10
    """))
    overrides = [f"reward.custom_reward_function.path={reward}", "reward.custom_reward_function.name=score"]
    ranks = run_ranks(_sync_rollout_and_reward, 2, str(model_dir), overrides)
    for r in ranks:
        assert r["synced"] and r["is_gather"]
    for name, tensor in ranks[0]["engine"].items():
        assert torch.equal(tensor, ranks[1]["engine"][name])
    # the same responses as one process sampling every prompt with the synced weights
    single = HFEngine(AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32), copy_weights=True, seed=7)
    single.update_weights(ranks[0]["engine"], 1)
    expected = single.generate(_prompts(single.model.config.vocab_size), SamplingParams(n=2, max_new_tokens=4), expected_version=1)
    for r in ranks:
        assert torch.equal(r["ids"], expected.response_ids)
        assert torch.allclose(r["logprobs"], expected.rollout_logprobs, atol=1e-5)
        assert torch.equal(r["one_engine_ids"], expected.response_ids)  # the same batch from one engine
    assert [r["one_engine_asked"] for r in ranks] == [[6], []]
    # 12 responses scored once each, 6 per rank; every rank has all 12 scores
    per_process = sorted(len(f.read_text().split()) for f in calls.iterdir())
    assert per_process == [6, 6]
    assert sorted(x for f in calls.iterdir() for x in f.read_text().split()) == sorted(str(i) for i in range(12))
    for r in ranks:
        assert r["scores"].tolist() == pytest.approx([i / 10 for i in range(12)])
        assert r["metrics"]["reward/failures"] == 0.0


def _build_roles(rank, world, model_dir, overrides):
    from posttrain.config.derive import derive
    from posttrain.models.loading import tokenizer_from_config
    from posttrain.trainer.rl_build import build_roles

    cfg = load_config(None, [f"model.path={model_dir}", "cluster.n_gpus_per_node=2", *overrides])
    roles = build_roles(cfg, derive(cfg, 64), tokenizer_from_config(cfg.model), World(rank, world))
    costs = [9, 1, 1, 1, 8, 8]  # token counts: the balanced split differs from consecutive runs
    return {
        "actor": _describe(roles.actor.run), "ref": _describe(roles.reference.run), "critic": _describe(roles.critic.run),
        "share": roles.actor.dp.share(costs),
    }


def test_each_role_is_sharded_by_its_own_fsdp_config_and_balance_batch_splits_by_tokens(model_dir):
    roles = ["algorithm.adv_estimator=gae", "actor.use_kl_loss=true"]  # a critic and a reference too
    own = ["actor.fsdp_config.param_offload=true", "ref.fsdp_config.reshard_after_forward=false",
           "critic.fsdp_config.forward_prefetch=true"]
    got = run_ranks(_build_roles, 2, str(model_dir), [*roles, *own])
    plain = run_ranks(_build_roles, 2, str(model_dir), [*roles, "trainer.balance_batch=false"])
    assert (got[0]["actor"]["offload"], got[0]["ref"]["offload"], got[0]["critic"]["offload"]) == (True, False, False)
    assert (got[0]["actor"]["reshard"], got[0]["ref"]["reshard"], got[0]["critic"]["reshard"]) == (True, False, True)
    assert (got[0]["actor"]["prefetch"], got[0]["ref"]["prefetch"], got[0]["critic"]["prefetch"]) == (0, 0, 1)
    # balanced by tokens: 9+1+1+1 vs 8+8; consecutive runs: rows 0-2 vs 3-5
    assert (got[0]["share"], got[1]["share"]) == ([0, 1, 2, 3], [4, 5])
    assert (plain[0]["share"], plain[1]["share"]) == ([0, 1, 2], [3, 4, 5])
