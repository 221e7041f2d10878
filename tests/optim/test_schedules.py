import math

import pytest
import torch

from posttrain.optim import build_optimizer, build_scheduler, lr_multiplier


def test_constant_with_warmup():
    got = [lr_multiplier("constant", s, warmup_steps=4, total_steps=10) for s in range(6)]
    assert got == [0.0, 0.25, 0.5, 0.75, 1.0, 1.0]  # the first update at 0, as verl's, HF's and Megatron's schedulers


def test_cosine_reaches_min_ratio_at_end_and_half_way_is_midpoint():
    kw = dict(warmup_steps=0, total_steps=10, min_lr_ratio=0.1)
    assert lr_multiplier("cosine", 0, **kw) == pytest.approx(1.0)
    assert lr_multiplier("cosine", 5, **kw) == pytest.approx(0.1 + 0.9 * 0.5)
    assert lr_multiplier("cosine", 10, **kw) == pytest.approx(0.1)
    # warm-up then cosine over the remaining steps
    assert lr_multiplier("cosine", 1, warmup_steps=2, total_steps=12) == pytest.approx(0.5)
    assert lr_multiplier("cosine", 2, warmup_steps=2, total_steps=12) == pytest.approx(1.0)
    assert lr_multiplier("cosine", 7, warmup_steps=2, total_steps=12) == pytest.approx(0.5 * (1 + math.cos(math.pi * 0.5)))


def test_wsd_stable_then_linear_decay():
    kw = dict(warmup_steps=2, total_steps=20, min_lr_ratio=0.0, decay_ratio=0.25)
    assert lr_multiplier("wsd", 0, **kw) == 0.0 and lr_multiplier("wsd", 1, **kw) == pytest.approx(0.5)
    assert lr_multiplier("wsd", 14, **kw) == pytest.approx(1.0)
    assert lr_multiplier("wsd", 15, **kw) == pytest.approx(1.0)  # decay starts at 20 - 5
    assert lr_multiplier("wsd", 17, **kw) == pytest.approx(1.0 - 2 / 5)
    assert lr_multiplier("wsd", 20, **kw) == pytest.approx(0.0)


def test_unknown_schedule_names_choices():
    with pytest.raises(ValueError, match="constant, cosine, linear, wsd"):
        lr_multiplier("polynomial", 0, warmup_steps=0, total_steps=1)


def test_scheduler_drives_optimizer_lr():
    w = torch.nn.Parameter(torch.zeros(2))
    opt = build_optimizer([w], lr=1e-2, weight_decay=0.0, betas=(0.9, 0.999))
    sched = build_scheduler(opt, "constant", warmup_steps=2, total_steps=5)
    lrs = []
    for _ in range(3):
        lrs.append(opt.param_groups[0]["lr"])
        opt.step()
        sched.step()
    assert lrs == pytest.approx([0.0, 5e-3, 1e-2])


def test_warmup_starts_from_lr_warmup_init():
    got = [lr_multiplier("cosine", s, warmup_steps=4, total_steps=10, warmup_init_ratio=0.2) for s in range(4)]
    assert got == pytest.approx([0.2, 0.4, 0.6, 0.8])  # 0.2 + 0.8 * s / 4


def test_lr_warmup_init_reaches_the_optimizer(tmp_path):
    from posttrain.config import derive, load_config
    from posttrain.models.loading import tokenizer_from_config
    from posttrain.models.tiny import make_tiny_model
    from posttrain.trainer.rl_build import build_roles

    model_dir = make_tiny_model(tmp_path / "m", layers=1, hidden=32, heads=2)
    cfg = load_config(None, [f"model.path={model_dir}", "actor.optim.lr=1e-3", "actor.optim.lr_warmup_steps=4",
                             "actor.optim.lr_warmup_init=2e-4"])
    optimizer = build_roles(cfg, derive(cfg, 64), tokenizer_from_config(cfg.model)).actor.optimizer
    assert optimizer.param_groups[0]["lr"] == pytest.approx(2e-4)  # the first step at the initial LR


def test_fused_adamw_on_request_matches_the_loop_implementation():
    torch.manual_seed(0)
    params = [torch.randn(64, 32, requires_grad=True), torch.randn(32, requires_grad=True)]
    twins = [p.detach().clone().requires_grad_() for p in params]
    start = [p.detach().clone() for p in params]
    fused = build_optimizer(params, lr=1e-2, weight_decay=0.01, betas=(0.9, 0.999), fused=True)
    loop = torch.optim.AdamW(twins, lr=1e-2, weight_decay=0.01, betas=(0.9, 0.999), foreach=False)
    assert fused.param_groups[0]["fused"] is True
    assert not build_optimizer([torch.zeros(2, requires_grad=True)], lr=1.0, weight_decay=0.0, betas=(0.9, 0.9)).param_groups[0]["fused"]
    for _ in range(10):
        for p, q in zip(params, twins):
            g = torch.randn_like(p)
            p.grad, q.grad = g.clone(), g.clone()
        fused.step()
        loop.step()
    for p, q, p0 in zip(params, twins, start):
        torch.testing.assert_close(p.detach(), q.detach(), atol=1e-6, rtol=0)
        assert float((p.detach() - p0).abs().max()) > 1e-2  # ten steps of lr 1e-2 moved it


def test_one_builder_turns_an_optim_section_into_adamw_and_its_schedule():
    from posttrain.config.sections.optim import OptimConfig
    from posttrain.optim import build_optimization

    o = OptimConfig(lr=1e-3, betas=[0.8, 0.95], eps=1e-6, weight_decay=0.1, lr_scheduler_type="cosine",
                    min_lr_ratio=0.5, lr_warmup_init=5e-4)
    w = torch.zeros(3, requires_grad=True)
    frozen = torch.zeros(2, requires_grad=False)
    optimizer, scheduler = build_optimization([w, frozen], o, warmup_steps=2, total_steps=6)
    group = optimizer.param_groups[0]
    assert len(group["params"]) == 1  # only parameters that train
    assert (group["betas"], group["eps"], group["weight_decay"]) == ((0.8, 0.95), 1e-6, 0.1)
    lrs = []
    for _ in range(6):
        lrs.append(group["lr"])
        optimizer.step()
        scheduler.step()
    # warm-up from 5e-4 to 1e-3 over 2 steps, then a half cosine from 1e-3 down towards 0.5 x 1e-3
    assert lrs[:3] == pytest.approx([5e-4, 7.5e-4, 1e-3])
    assert lrs[3:] == pytest.approx([1e-3 * (0.5 + 0.5 * 0.5 * (1 + math.cos(math.pi * k / 4))) for k in (1, 2, 3)])


def test_linear_decays_in_a_straight_line_to_min_ratio_after_warmup():
    # Hugging Face's linear: (total - step) / (total - warm-up) after warm-up
    got = [lr_multiplier("linear", s, warmup_steps=0, total_steps=4) for s in range(5)]
    assert got == pytest.approx([1.0, 0.75, 0.5, 0.25, 0.0])
    assert lr_multiplier("linear", 1, warmup_steps=2, total_steps=6) == pytest.approx(0.5)  # still warming up
    assert lr_multiplier("linear", 4, warmup_steps=2, total_steps=6, min_lr_ratio=0.2) == pytest.approx(0.2 + 0.8 * 0.5)
    assert lr_multiplier("linear", 9, warmup_steps=2, total_steps=6) == pytest.approx(0.0)  # holds past the end
