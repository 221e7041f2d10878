"""actor.moe_aux_loss_coef and moe_z_loss_coef on a tiny Qwen3-MoE: the loss gains exactly coef x the
router loss of the captured router logits, the routers get its gradient, and micro-batches weigh by
their tokens."""

from __future__ import annotations

import copy

import pytest
import torch
from transformers import Qwen3MoeConfig, Qwen3MoeForCausalLM

from posttrain.algorithms import load_balancing_loss, router_z_loss
from posttrain.errors import ConfigError
from posttrain.models.moe import router_loss_settings, router_z_setting
from posttrain.models.positions import concat_prompt_response
from posttrain.workers.microbatch import micro_batches
from worker_helpers import LENGTHS, assert_same_grads, grads, make_batch, sgd_actor, tiny_moe_config

B = len(LENGTHS)
GATE = "model.layers.0.mlp.gate.weight"


@pytest.fixture(scope="module")
def moe_model():
    torch.manual_seed(0)
    return Qwen3MoeForCausalLM(tiny_moe_config()).float().train()


def _batch(model):
    batch = make_batch(model.config.vocab_size)
    mask = batch.response_mask
    batch.old_logprobs = -0.1 * mask
    batch.advantages = torch.randn(mask.shape, generator=torch.Generator().manual_seed(3)) * mask  # (B, T)
    return batch


def _router_loss(model, batch, z: bool = False):
    """The router loss (load balancing, or with `z` the z-loss) straight from transformers'
    output_router_logits on the padded batch."""
    ids, attention, positions = concat_prompt_response(batch.prompt_ids, batch.prompt_mask, batch.response_ids, batch.response_mask)
    out = model.model(input_ids=ids, attention_mask=attention, position_ids=positions, output_router_logits=True)  # the decoder
    if z:
        return router_z_loss(out.router_logits, attention.reshape(-1))
    return load_balancing_loss(out.router_logits, attention.reshape(-1), top_k=2)  # (B * S, E) per layer


def _update(model, batch, **kw):
    trained = copy.deepcopy(model)
    metrics = sgd_actor(trained, **kw).update(batch)
    return grads(trained), metrics


@pytest.mark.parametrize("pack", [True, False])
def test_the_loss_gains_coef_times_the_router_loss_and_the_routers_its_gradient(moe_model, pack):
    batch = _batch(moe_model)
    base, base_metrics = _update(moe_model, batch, pack=pack)
    got, metrics = _update(moe_model, batch, pack=pack, moe_aux_loss_coef=0.5, moe_top_k=2)
    assert "actor/moe_aux_loss" not in base_metrics
    reference = copy.deepcopy(moe_model)
    aux = _router_loss(reference, batch)
    assert metrics["actor/moe_aux_loss"] == pytest.approx(float(aux.detach()), rel=1e-5)
    (0.5 * aux).backward()
    difference = {k: got[k] - base[k] for k in got}
    assert_same_grads(difference, grads(reference), rtol=1e-3, atol=1e-6)
    gate = "model.layers.0.mlp.gate.weight"
    assert float(difference[gate].abs().max()) > 1e-4  # the router itself is pushed towards balance


def test_the_z_loss_adds_coef_times_the_router_z_loss_beside_the_balancing_loss(moe_model):
    batch = _batch(moe_model)
    base, base_metrics = _update(moe_model, batch)
    z_only, z_metrics = _update(moe_model, batch, moe_z_loss_coef=0.3)
    both, both_metrics = _update(moe_model, batch, moe_aux_loss_coef=0.5, moe_top_k=2, moe_z_loss_coef=0.3)
    assert "actor/moe_z_loss" not in base_metrics and "actor/moe_aux_loss" not in z_metrics
    reference = copy.deepcopy(moe_model)
    z = _router_loss(reference, batch, z=True)
    assert float(z.detach()) > 1e-3
    assert z_metrics["actor/moe_z_loss"] == pytest.approx(float(z.detach()), rel=1e-5)
    (0.3 * z).backward()
    z_grads = grads(reference)
    assert_same_grads({k: z_only[k] - base[k] for k in z_only}, z_grads, rtol=1e-3, atol=1e-6)
    assert float((z_only[GATE] - base[GATE]).abs().max()) > 1e-6  # the router's logits are pulled towards 0
    # both on: the two terms add, each logged on its own
    aux_ref = copy.deepcopy(moe_model)
    (0.5 * _router_loss(aux_ref, batch)).backward()
    expected = {k: z_grads[k] + grads(aux_ref).get(k, 0.0) for k in z_grads}
    assert_same_grads({k: both[k] - base[k] for k in both}, expected, rtol=1e-3, atol=1e-6)
    assert both_metrics["actor/moe_z_loss"] == pytest.approx(z_metrics["actor/moe_z_loss"], rel=1e-6)
    assert "actor/moe_aux_loss" in both_metrics


def test_micro_batches_weigh_by_their_share_of_the_tokens(moe_model):
    batch = _batch(moe_model)
    _, metrics = _update(moe_model, batch, micro_batch_size=3, moe_aux_loss_coef=0.5, moe_top_k=2)
    units = micro_batches(batch, size=3, max_tokens=None)
    tokens = [float(u.prompt_mask.sum() + u.response_mask.sum()) for u in units]
    with torch.no_grad():
        expected = sum(t / sum(tokens) * float(_router_loss(moe_model, u)) for t, u in zip(tokens, units))
    assert metrics["actor/moe_aux_loss"] == pytest.approx(expected, rel=1e-5)


def test_gradient_checkpointing_adds_no_second_capture(moe_model):
    batch = _batch(moe_model)
    plain, metrics = _update(moe_model, batch, moe_aux_loss_coef=0.5, moe_top_k=2)
    model = copy.deepcopy(moe_model)
    model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    checkpointed, metrics_gc = _update(model, batch, moe_aux_loss_coef=0.5, moe_top_k=2)
    assert metrics_gc["actor/moe_aux_loss"] == pytest.approx(metrics["actor/moe_aux_loss"], rel=1e-6)
    assert_same_grads(plain, checkpointed)


def test_settings_take_the_model_s_coefficient_and_refuse_a_dense_model(moe_model, policy):
    assert router_loss_settings(moe_model, None) == (0.001, 2)  # null: config.json's router_aux_loss_coef
    assert router_loss_settings(moe_model, 0.0) == (0.0, 0)
    assert router_loss_settings(moe_model, 0.02) == (0.02, 2)
    assert router_loss_settings(policy, None) == (0.0, 0)  # a dense model has no coefficient: off
    with pytest.raises(ConfigError, match="exposes no mixture-of-experts router logits"):
        router_loss_settings(policy, 0.01)
    assert router_z_setting(moe_model, 0.001) == 0.001
    assert router_z_setting(policy, 0.0) == 0.0
    with pytest.raises(ConfigError, match="critic.moe_z_loss_coef is 0.01.*router z-loss needs an MoE model"):
        router_z_setting(policy, 0.01, "critic.moe_z_loss_coef")


def test_the_critic_adds_the_router_loss_of_its_value_model():
    from transformers import Qwen3MoeForTokenClassification

    from worker_helpers import sgd_critic

    torch.manual_seed(0)
    config = Qwen3MoeConfig(
        vocab_size=64, hidden_size=16, intermediate_size=32, moe_intermediate_size=16, num_hidden_layers=2,
        num_attention_heads=2, num_key_value_heads=1, head_dim=8, num_experts=4, num_experts_per_tok=2, num_labels=1,
    )
    value_model = Qwen3MoeForTokenClassification(config).float().train()
    batch = make_batch(64)
    batch.values, batch.returns = torch.zeros_like(batch.response_mask), batch.response_mask.clone()

    def update(**kw):
        model = copy.deepcopy(value_model)
        metrics = sgd_critic(model, **kw).update(batch)
        return grads(model), metrics

    base, _ = update()
    got, metrics = update(moe_aux_loss_coef=0.5, moe_top_k=2)
    reference = copy.deepcopy(value_model)
    aux = _router_loss(reference, batch)
    assert metrics["critic/moe_aux_loss"] == pytest.approx(float(aux.detach()), rel=1e-5)
    (0.5 * aux).backward()
    assert_same_grads({k: got[k] - base[k] for k in got}, grads(reference), rtol=1e-3, atol=1e-6)
    got_z, metrics_z = update(moe_z_loss_coef=0.3)
    reference = copy.deepcopy(value_model)
    z = _router_loss(reference, batch, z=True)
    assert metrics_z["critic/moe_z_loss"] == pytest.approx(float(z.detach()), rel=1e-5)
    (0.3 * z).backward()
    assert_same_grads({k: got_z[k] - base[k] for k in got_z}, grads(reference), rtol=1e-3, atol=1e-6)
