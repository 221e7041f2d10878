"""actor.moe_aux_loss_coef in SFT and DPO stages, on a tiny Qwen3-MoE: each micro-batch's loss gains
coef x the router loss of its policy forward weighted by its share of the batch's real tokens, and
the routers get that gradient (Megatron adds the same term to whatever it trains)."""

from __future__ import annotations

import copy
from types import SimpleNamespace

import pytest
import torch
from transformers import Qwen3MoeForCausalLM

from posttrain.algorithms import load_balancing_loss, router_z_loss
from posttrain.config import load_config
from posttrain.data import DPOExample, SFTExample, collate_sft
from posttrain.trainer.dpo import dpo_objective, freeze
from posttrain.trainer.sft import MicroBatching, accumulate, sft_objective
from worker_helpers import tiny_moe_config

PAD = 0
GATE = "model.layers.0.mlp.gate.weight"


@pytest.fixture(scope="module")
def moe_model():
    torch.manual_seed(0)
    return Qwen3MoeForCausalLM(tiny_moe_config(pad_token_id=PAD)).float().train()


def _example(index: int, length: int, prompt: int) -> SFTExample:
    g = torch.Generator().manual_seed(index)
    ids = torch.randint(1, 64, (length,), generator=g).tolist()
    return SFTExample(index, ids, [0] * prompt + [1] * (length - prompt))


EXAMPLES = [_example(i, n, 3) for i, n in enumerate([9, 6, 12, 7])]


def _router_loss(model, examples) -> torch.Tensor:
    """The router loss straight from transformers' output_router_logits over the examples' real tokens."""
    batch = collate_sft(examples, PAD)
    out = model.model(input_ids=batch.input_ids, attention_mask=batch.attention_mask, output_router_logits=True)
    return load_balancing_loss(out.router_logits, batch.attention_mask.reshape(-1) > 0, top_k=2)


def _grads(model, objective, examples, micro) -> tuple[dict[str, torch.Tensor], dict[str, float]]:
    model.zero_grad(set_to_none=True)
    metrics = accumulate(objective, examples, micro, backward=True)
    return {k: p.grad.clone() for k, p in model.named_parameters() if p.grad is not None}, metrics


def test_sft_adds_coef_times_the_token_weighted_router_loss(moe_model):
    model = copy.deepcopy(moe_model)
    base, base_metrics = _grads(model, sft_objective(model, PAD), EXAMPLES, MicroBatching(2))
    got, metrics = _grads(model, sft_objective(model, PAD, moe_aux_loss_coef=0.5), EXAMPLES, MicroBatching(2))
    assert "sft/moe_aux_loss" not in base_metrics
    assert metrics["sft/loss"] == pytest.approx(base_metrics["sft/loss"], rel=1e-6)  # the NLL is reported alone
    # micro-batches [0, 1] and [2, 3], each weighed by its share of the batch's real tokens
    units, tokens = [EXAMPLES[:2], EXAMPLES[2:]], [15.0, 19.0]
    reference = copy.deepcopy(moe_model)
    aux = sum(t / sum(tokens) * _router_loss(reference, u) for t, u in zip(tokens, units))
    assert metrics["sft/moe_aux_loss"] == pytest.approx(float(aux.detach()), rel=1e-5)
    (0.5 * aux).backward()
    for name, param in reference.named_parameters():
        if param.grad is not None:
            torch.testing.assert_close(got[name] - base[name], param.grad, rtol=1e-3, atol=1e-6)
    assert float((got[GATE] - base[GATE]).abs().max()) > 1e-4  # the router itself is pushed towards balance


def test_sft_adds_the_z_loss_beside_the_nll(moe_model):
    model = copy.deepcopy(moe_model)
    base, base_metrics = _grads(model, sft_objective(model, PAD), EXAMPLES, MicroBatching(2))
    got, metrics = _grads(model, sft_objective(model, PAD, moe_aux_loss_coef=0.0, moe_z_loss_coef=0.25), EXAMPLES, MicroBatching(2))
    assert "sft/moe_aux_loss" not in metrics and metrics["sft/loss"] == pytest.approx(base_metrics["sft/loss"], rel=1e-6)
    units, tokens = [EXAMPLES[:2], EXAMPLES[2:]], [15.0, 19.0]
    reference = copy.deepcopy(moe_model)

    def z_loss(examples):
        batch = collate_sft(examples, PAD)
        out = reference.model(input_ids=batch.input_ids, attention_mask=batch.attention_mask, output_router_logits=True)
        return router_z_loss(out.router_logits, batch.attention_mask.reshape(-1) > 0)
    z = sum(t / sum(tokens) * z_loss(u) for t, u in zip(tokens, units))
    assert metrics["sft/moe_z_loss"] == pytest.approx(float(z.detach()), rel=1e-5)
    (0.25 * z).backward()
    for name, param in reference.named_parameters():
        if param.grad is not None:
            torch.testing.assert_close(got[name] - base[name], param.grad, rtol=1e-3, atol=1e-6)


def test_the_model_s_own_coefficient_with_null_and_none_for_zero(moe_model):
    assert sft_objective(moe_model, PAD, moe_aux_loss_coef=None).router.weights.aux == pytest.approx(0.001)
    assert sft_objective(moe_model, PAD, moe_aux_loss_coef=0.0).router is None
    assert sft_objective(moe_model, PAD, moe_aux_loss_coef=0.0, moe_z_loss_coef=0.1).router.weights.z == pytest.approx(0.1)


def test_dpo_adds_the_policy_forward_s_router_loss(moe_model):
    pairs = [DPOExample(i, EXAMPLES[2 * i], EXAMPLES[2 * i + 1]) for i in range(2)]
    settings = load_config(None, ["algorithm.kind=dpo"]).algorithm.dpo
    policy, reference = copy.deepcopy(moe_model), freeze(copy.deepcopy(moe_model))
    base, base_metrics = _grads(policy, dpo_objective(policy, reference, PAD, settings), pairs, MicroBatching(1))
    got, metrics = _grads(policy, dpo_objective(policy, reference, PAD, settings, moe_aux_loss_coef=0.5), pairs, MicroBatching(1))
    assert metrics["dpo/loss"] == pytest.approx(base_metrics["dpo/loss"], rel=1e-6)
    # each pair is one forward over its chosen and rejected rows; pairs weigh by their tokens (15, 19)
    expected = sum(t / 34 * float(_router_loss(moe_model, [p.chosen, p.rejected])) for t, p in zip([15, 19], pairs))
    assert metrics["dpo/moe_aux_loss"] == pytest.approx(expected, rel=1e-5)
    assert float((got[GATE] - base[GATE]).abs().max()) > 1e-4
    assert all(p.grad is None for p in reference.parameters())  # the reference's forward adds nothing


def test_distillation_still_refuses_a_changed_coefficient():
    from posttrain.config.checks_losses import check_supervised_loss_coefs

    for kind, refused in (("sft", False), ("dpo", False), ("distill", True)):
        cfg = SimpleNamespace(algorithm=SimpleNamespace(kind=kind), actor=SimpleNamespace(moe_aux_loss_coef=0.1, moe_z_loss_coef=0.0))
        problems = check_supervised_loss_coefs(cfg)
        assert bool(problems) is refused, (kind, problems)
        assert not refused or "actor.moe_aux_loss_coef=0.1" in problems[0]
        cfg.actor.moe_aux_loss_coef, cfg.actor.moe_z_loss_coef = 0.0, 0.2
        problems = check_supervised_loss_coefs(cfg)
        assert bool(problems) is refused and (not refused or "actor.moe_z_loss_coef=0.2" in problems[0]), (kind, problems)
