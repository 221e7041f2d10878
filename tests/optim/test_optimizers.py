"""optim.optimizer (adamw, adam, sgd), override_optimizer_config and lr_decay_steps."""

import math

import pytest
import torch

from posttrain.config import derive, load_config
from posttrain.config.dialects import translate
from posttrain.config.sections.optim import OptimConfig
from posttrain.errors import ConfigError
from posttrain.optim import build_optimization, lr_multiplier


def _one_param(o: OptimConfig, value: float = 1.0):
    w = torch.nn.Parameter(torch.tensor([value]))
    optimizer, _ = build_optimization([w], o, warmup_steps=0, total_steps=10)
    return w, optimizer


def _step(w, optimizer, grad: float) -> float:
    w.grad = torch.tensor([grad])
    optimizer.step()
    return float(w.detach())


def test_adam_adds_weight_decay_to_the_gradient_where_adamw_decouples_it():
    # w = 1, gradient 0, lr 0.01, weight_decay 0.1. Adam: g = 0.1 * w, its first step is lr * g / |g| = 0.01.
    # AdamW: w *= 1 - lr * wd (0.999), and the zero gradient moves nothing.
    adam, opt = _one_param(OptimConfig(optimizer="adam", lr=0.01, weight_decay=0.1))
    assert isinstance(opt, torch.optim.Adam) and not isinstance(opt, torch.optim.AdamW)
    assert _step(adam, opt, 0.0) == pytest.approx(0.99, abs=1e-6)
    adamw, opt = _one_param(OptimConfig(optimizer="adamw", lr=0.01, weight_decay=0.1))
    assert isinstance(opt, torch.optim.AdamW)
    assert _step(adamw, opt, 0.0) == pytest.approx(0.999, abs=1e-7)


def test_sgd_takes_momentum_and_nesterov_from_override_optimizer_config():
    o = OptimConfig(optimizer="sgd", lr=0.1, weight_decay=0.0, override_optimizer_config={"momentum": 0.9})
    w, opt = _one_param(o)
    assert isinstance(opt, torch.optim.SGD) and "betas" not in opt.param_groups[0]
    # buffer b1 = g = 2: w = 1 - 0.1 * 2 = 0.8; b2 = 0.9 * 2 + 2 = 3.8: w = 0.8 - 0.38 = 0.42
    assert _step(w, opt, 2.0) == pytest.approx(0.8)
    assert _step(w, opt, 2.0) == pytest.approx(0.42)
    w, opt = _one_param(OptimConfig(optimizer="sgd", lr=0.1, weight_decay=0.0))
    assert _step(w, opt, 2.0) == pytest.approx(0.8) and _step(w, opt, 2.0) == pytest.approx(0.6)  # no momentum
    w, opt = _one_param(OptimConfig(optimizer="sgd", lr=0.1, weight_decay=0.0, override_optimizer_config={"momentum": 0.9, "nesterov": True}))
    assert _step(w, opt, 2.0) == pytest.approx(1 - 0.1 * (2 + 0.9 * 2))  # nesterov: g + momentum * b1


def test_unknown_optimizers_and_arguments_are_refused_when_the_config_loads():
    with pytest.raises(ConfigError, match="adamw, adam, sgd"):
        load_config(None, ["actor.optim.optimizer=rmsprop"])
    with pytest.raises(ConfigError, match=r"'momentum' is not an argument of torch.optim's adamw \(it takes amsgrad"):
        load_config(None, ["actor.optim.override_optimizer_config={momentum: 0.9}"])
    with pytest.raises(ConfigError, match="sets lr, which has a field of its own: set critic.optim.lr"):
        load_config(None, ["critic.optim.override_optimizer_config={lr: 0.1}"])
    with pytest.raises(ConfigError, match="sgd has no betas"):
        load_config(None, ["actor.optim.optimizer=sgd", "actor.optim.betas=[0.5,0.9]"])
    cfg = load_config(None, ["critic.optim.optimizer=sgd", "critic.optim.override_optimizer_config={momentum: 0.9, nesterov: true}"])
    assert cfg.critic.optim.override_optimizer_config == {"momentum": 0.9, "nesterov": True}


def test_verl_s_class_names_become_posttrain_s_optimizers():
    for given, native in (("AdamW", "adamw"), ("Adam", "adam"), ("SGD", "sgd")):
        out, report = translate({"actor_rollout_ref": {"actor": {"optim": {"optimizer": given}}}, "critic": {"optim": {"optimizer": given}}}, "verl")
        assert not report.refused and out["actor"]["optim"]["optimizer"] == out["critic"]["optim"]["optimizer"] == native


def test_lr_decay_steps_ends_the_decay_and_holds_the_final_lr():
    # warm-up 2 steps, cosine decay from step 2 to step 6 (decay_steps counts from the start), then min
    kw = dict(warmup_steps=2, total_steps=20, min_lr_ratio=0.1, decay_steps=6)
    got = [lr_multiplier("cosine", s, **kw) for s in range(9)]
    half = 0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * 0.5))  # progress (4 - 2) / (6 - 2)
    assert got == pytest.approx([0.0, 0.5, 1.0, 0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * 0.25)), half,
                                 0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * 0.75)), 0.1, 0.1, 0.1])
    # wsd: the last 10% of 20 decay_steps (2 steps) decay linearly, from step 18 to 20, then hold
    wsd = [lr_multiplier("wsd", s, warmup_steps=0, total_steps=50, decay_steps=20) for s in (17, 18, 19, 20, 40)]
    assert wsd == pytest.approx([1.0, 1.0, 0.5, 0.0, 0.0])
    assert lr_multiplier("constant", 30, warmup_steps=2, total_steps=50, decay_steps=20) == 1.0  # no decay to end
    assert lr_multiplier("cosine", 4, warmup_steps=2, total_steps=6, min_lr_ratio=0.1) == pytest.approx(half)  # null: ends at the total


def test_lr_decay_steps_must_outlast_the_warm_up():
    cfg = load_config(None, ["actor.optim.lr_decay_steps=4", "actor.optim.lr_warmup_steps=4", "trainer.total_training_steps=10"])
    with pytest.raises(ConfigError, match=r"actor.optim.lr_decay_steps \(4\) ends the decay before warm-up \(4 steps\)"):
        derive(cfg, None)
    cfg = load_config(None, ["critic.optim.lr_decay_steps=5", "critic.optim.lr_warmup_steps_ratio=0.5", "trainer.total_training_steps=10"])
    with pytest.raises(ConfigError, match="critic.optim.lr_decay_steps"):
        derive(cfg, None)
    assert derive(load_config(None, ["actor.optim.lr_decay_steps=5", "actor.optim.lr_warmup_steps=4"]), None).actor_warmup_steps == 4


def test_decay_bias_and_norm_false_exempts_biases_and_1d_parameters_as_megatron_does():
    # AdamW, lr 0.01, weight_decay 0.1, zero gradients: a decayed weight becomes 1 x (1 - 0.01 x 0.1) = 0.999;
    # Megatron's rule leaves the bias (name ends in .bias) and the norm weight (one dimension) at 1.
    model = torch.nn.ModuleDict({"proj": torch.nn.Linear(2, 2), "norm": torch.nn.LayerNorm(2, bias=False)})
    for p in model.parameters():
        torch.nn.init.ones_(p)
    for decay_all, expected_bias in ((True, 0.999), (False, 1.0)):
        o = OptimConfig(optimizer="adamw", lr=0.01, weight_decay=0.1, decay_bias_and_norm=decay_all)
        optimizer, _ = build_optimization(model.named_parameters(), o, warmup_steps=0, total_steps=10)
        for p in model.parameters():
            p.grad = torch.zeros_like(p)
        optimizer.step()
        assert model["proj"].weight.detach().flatten().tolist() == pytest.approx([0.999] * 4)
        assert model["proj"].bias.detach().tolist() == pytest.approx([expected_bias] * 2)
        assert model["norm"].weight.detach().tolist() == pytest.approx([expected_bias] * 2)
        for p in model.parameters():
            torch.nn.init.ones_(p)
