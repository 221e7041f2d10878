"""actor.freeze_module_prefix (ROLL's freeze_module_prefix): the named parameters keep their loaded
values through an actor update while the others train; what cannot be honoured is refused."""

from __future__ import annotations

import pytest
import torch

from posttrain.config.derive import derive
from posttrain.config.dialects import translate
from posttrain.config.load import load_config
from posttrain.errors import ConfigError, ModelError
from posttrain.models.freeze import freeze_by_prefix
from posttrain.models.loading import tokenizer_from_config
from posttrain.models.tiny import make_tiny_model
from posttrain.trainer.rl_build import build_roles
from worker_helpers import make_batch

FROZEN = ("model.layers.0.mlp", "lm_head")


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory):
    return make_tiny_model(tmp_path_factory.mktemp("freeze") / "model", layers=2, hidden=32, heads=4, seed=0)


def _roles(tiny_dir, *overrides):
    c = load_config(None, [f"model.path={tiny_dir}", "data.train_batch_size=4", "rollout.n=2", "actor.ppo_mini_batch_size=4",
                           "actor.ppo_micro_batch_size_per_gpu=8", "actor.optim.lr=0.01", "actor.optim.weight_decay=0.1", *overrides])
    return build_roles(c, derive(c, 8), tokenizer_from_config(c.model))


def test_frozen_prefixes_keep_their_values_through_an_update_and_the_rest_trains(tiny_dir):
    roles = _roles(tiny_dir, f"actor.freeze_module_prefix=[{','.join(FROZEN)}]")
    model = roles.actor.model
    before = {name: p.detach().clone() for name, p in model.named_parameters()}
    frozen = {name for name in before if name.startswith(FROZEN)}
    assert frozen and {"lm_head.weight", "model.layers.0.mlp.up_proj.weight"} <= frozen
    assert "model.layers.0.self_attn.q_proj.weight" not in frozen  # a prefix of names, not of modules anywhere
    optimized = {id(p) for group in roles.actor.optimizer.param_groups for p in group["params"]}
    assert {name for name, p in model.named_parameters() if id(p) in optimized} == set(before) - frozen

    batch = make_batch(model.config.vocab_size)
    batch.old_logprobs = roles.actor.compute_logprobs(batch).detach()
    batch.advantages = torch.randn(batch.response_mask.shape, generator=torch.Generator().manual_seed(0)) * batch.response_mask  # (B, T)
    roles.actor.update(batch)
    after = dict(model.named_parameters())
    assert all(torch.equal(after[name], before[name]) for name in frozen)  # no gradient step, no weight decay
    assert all(not torch.equal(after[name], before[name]) for name in set(before) - frozen)


def test_a_prefix_naming_nothing_or_everything_is_refused_when_the_model_loads(tiny_dir):
    with pytest.raises(ModelError, match=r"'vision_model' names no parameter of the model; its parameter names start with lm_head.weight, model.embed_tokens"):
        _roles(tiny_dir, "actor.freeze_module_prefix=[model.layers, vision_model]")
    model = torch.nn.Sequential(torch.nn.Linear(2, 2))
    with pytest.raises(ModelError, match="freezes every parameter"):
        freeze_by_prefix(model, ["0."])
    assert freeze_by_prefix(model, []) == [] and all(p.requires_grad for p in model.parameters())


@pytest.mark.parametrize(("overrides", "words"), [
    (["actor.freeze_module_prefix=['']"], "holds an empty prefix"),
    (["actor.freeze_module_prefix=[lm_head]", "algorithm.kind=sft"], "RL stages only"),
    (["actor.freeze_module_prefix=[lm_head]", "model.lora_rank=4"], "LoRA trains only its adapters"),
])
def test_what_the_prefixes_cannot_act_on_is_refused_at_load(overrides, words):
    with pytest.raises(ConfigError, match=words):
        load_config(None, overrides)


@pytest.mark.parametrize(("model_args", "status", "native"), [
    ({"freeze_module_prefix": "model.layers.0, lm_head"}, "translated", ["model.layers.0", "lm_head"]),
    ({"freeze_module_prefix": ["model.embed_tokens"]}, "translated", ["model.embed_tokens"]),
    ({"freeze_module_prefix": "vision_model"}, "translated", ["model.visual"]),  # ROLL's Megatron name of the tower
    ({"freeze_module_prefix": "vision_model.blocks,vision_model.patch_embed"}, "translated",
     ["model.visual.blocks", "model.visual.patch_embed"]),
    ({"freeze_module_prefix": "model.visual"}, "translated", ["model.visual"]),
    ({"freeze_module_prefix": "vision_model,audio_model,talker,code2wav"}, "refused", None),  # Qwen3-Omni
    ({"freeze_module_prefix": "model.visual", "lora_target": "q_proj"}, "dropped", None),  # ROLL reads it only without LoRA
    ({"freeze_module_prefix": None}, "dropped", None),
])
def test_roll_s_comma_separated_prefixes(model_args, status, native):
    got, report = translate({"actor_train": {"model_args": model_args}}, "roll")
    entry = report.entry("actor_train.model_args.freeze_module_prefix")
    assert entry.status == status and got.get("actor", {}).get("freeze_module_prefix") == native
    if status == "refused":
        assert "audio or other non-vision modules" in entry.reason
    _, report = translate({"reference": {"model_args": model_args}}, "roll")  # the reference is never trained
    assert report.entry("reference.model_args.freeze_module_prefix").status == "dropped"
