"""The kernel and memory flags on the roles: the config reaches the actor, reference and critic, their
updates take the flagged path, and the gradients stay those of the plain path."""

from __future__ import annotations

import copy
import logging
import sys
import types

import pytest
import torch

from posttrain.config.derive import derive
from posttrain.config.load import load_config
from posttrain.errors import ConfigError
from posttrain.models import kernels
from posttrain.models.loading import causal_lm_from_config, tokenizer_from_config
from posttrain.models.logprobs import HeadKernel
from posttrain.trainer.rl_build import build_roles
from worker_helpers import assert_same_grads, grads, make_batch, noisy, sgd_actor, sgd_critic

TERMS = dict(entropy_coeff=0.1, use_kl_loss=True, kl_loss_coef=0.3, kl_loss_type="low_var_kl")


def prepared(model):
    batch = make_batch(model.config.vocab_size)
    current = sgd_actor(model).compute_logprobs(batch)
    batch.old_logprobs = noisy(current, batch.response_mask, 0.3, seed=1)
    batch.ref_logprobs = noisy(current, batch.response_mask, 0.5, seed=2)
    batch.advantages = torch.randn(batch.response_mask.shape, generator=torch.Generator().manual_seed(3)) * batch.response_mask
    return batch


class SavedCounter:
    """Counts the model-sized tensors autograd saves that reach the outermost hooks (activations and
    weights, last dimension >= the hidden size; the loss terms on (b, T) tensors are not the model's):
    save_on_cpu's own hooks, pushed inside, take every save of the forward they wrap."""

    def __init__(self):
        self.count = 0
        self.hooks = torch.autograd.graph.saved_tensors_hooks(self.pack, lambda t: t)

    def pack(self, t):
        self.count += int(t.dim() >= 2 and t.shape[-1] >= 32)  # hidden 32, vocabulary 100; T is 7
        return t


def update_grads(policy, batch, **settings):
    model = copy.deepcopy(policy)
    counter = SavedCounter()
    with counter.hooks:
        sgd_actor(model, **TERMS, **settings).update(batch)
    return grads(model), counter.count


def test_activation_offload_hooks_take_the_actor_s_saved_tensors(policy):
    batch = prepared(policy)
    plain, seen_plain = update_grads(policy, batch)
    offloaded, seen_offloaded = update_grads(policy, batch, activation_offload=True)
    assert seen_plain > 20 and seen_offloaded == 0  # every save went through save_on_cpu instead
    assert_same_grads(plain, offloaded)


def test_the_fused_head_and_entropy_checkpointing_keep_the_actor_s_gradients(policy):
    batch = prepared(policy)
    plain, _ = update_grads(policy, batch)
    for head in (HeadKernel(fused="torch"), HeadKernel(entropy_checkpointing=True)):
        assert_same_grads(plain, update_grads(policy, batch, head=head)[0], rtol=1e-4, atol=1e-6)


def test_activation_offload_hooks_take_the_critic_s_saved_tensors(value_model):
    batch = make_batch(value_model.config.vocab_size)
    batch.values = sgd_critic(value_model).compute_values(batch)
    batch.returns = (batch.values + 1.0) * batch.response_mask
    seen = []
    for offload in (False, True):
        counter = SavedCounter()
        with counter.hooks:
            sgd_critic(copy.deepcopy(value_model), activation_offload=offload).update(batch)
        seen.append(counter.count)
    assert seen[0] > 20 and seen[1] == 0


def cfg(model_dir, *overrides):
    return load_config(None, [f"model.path={model_dir}", "data.max_response_length=16", *overrides])


def test_the_config_reaches_every_role(model_dir):
    c = cfg(model_dir, "model.use_fused_kernels=true", "actor.entropy_checkpointing=true", "actor.use_kl_loss=true",
            "model.enable_activation_offload=true", "algorithm.adv_estimator=gae", "critic.model.enable_activation_offload=true")
    r = build_roles(c, derive(c, 8), tokenizer_from_config(c.model))
    assert r.actor.s.head == HeadKernel(fused="torch", entropy_checkpointing=True)
    assert r.reference.head == HeadKernel(fused="torch")  # no backward: nothing to checkpoint
    assert r.actor.s.activation_offload and r.critic.s.activation_offload
    plain = load_config(None, [f"model.path={model_dir}"])
    r = build_roles(plain, derive(plain, 8), tokenizer_from_config(plain.model))
    assert r.actor.s.head == HeadKernel() and not r.actor.s.activation_offload


def test_what_the_fused_head_cannot_do_is_refused_at_load(model_dir):
    with pytest.raises(ConfigError, match="triton compiles the fused head into Triton kernels, which run on a CUDA GPU"):
        causal_lm_from_config(cfg(model_dir, "model.use_fused_kernels=true", "model.fused_kernel_impl_backend=triton").model)
    fused = cfg(model_dir, "model.use_fused_kernels=true").model
    model = causal_lm_from_config(fused)
    model.config.final_logit_softcapping = 30.0  # Gemma 2's transform, which the fused head lacks
    with pytest.raises(ConfigError, match="soft-caps its logits"):
        kernels.check_fused_head(fused, model, "cpu")
    causal_lm_from_config(cfg(model_dir, "model.fused_kernel_impl_backend=triton").model)  # verl's default file: no fused head, no check
    with pytest.raises(ConfigError, match="model.use_fused_kernels acts on the RL actor"):
        load_config(None, ["algorithm.kind=sft", "model.use_fused_kernels=true"])
    with pytest.raises(ConfigError, match="model.enable_activation_offload acts on the RL actor"):
        load_config(None, ["algorithm.kind=dpo", "model.enable_activation_offload=true"])


def test_liger_is_reported_once_where_it_cannot_run_and_applied_where_it_can(model_dir, monkeypatch, caplog):
    monkeypatch.setattr(kernels, "_LIGER_REPORTED", set())
    c = cfg(model_dir, "model.use_liger=true")
    with caplog.at_level(logging.WARNING, logger="posttrain.models.kernels"):
        causal_lm_from_config(c.model)
        causal_lm_from_config(c.model)
    lines = [r.getMessage() for r in caplog.records if "use_liger" in r.getMessage()]
    assert lines == ["model.use_liger: Liger kernels unavailable, the model runs its own layers: "
                     "Liger's kernels are Triton kernels for CUDA GPUs and this model is on cpu"]
    # A CUDA device with the package (a stand-in module here): the family's function patches the model.
    applied = []
    fake = types.ModuleType("liger_kernel.transformers")
    fake.apply_liger_kernel_to_qwen2 = lambda model: applied.append(model)
    monkeypatch.setitem(sys.modules, "liger_kernel", types.ModuleType("liger_kernel"))
    monkeypatch.setitem(sys.modules, "liger_kernel.transformers", fake)
    model = causal_lm_from_config(c.model)
    assert kernels.apply_liger(model, "cuda") and applied == [model]
    model.config.model_type = "other"
    assert not kernels.apply_liger(model, "cuda")
    assert "liger-kernel has no apply_liger_kernel_to_other" in caplog.text
