"""Mixed precision (actor/ref/critic `fsdp_config.mixed_precision.param_dtype`) and the rollout
engine's dtype (`rollout.dtype`): bf16 compute with fp32 master weights, wired from the config."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from transformers import Qwen2Config, Qwen2ForCausalLM

from posttrain.config import derive, load_config
from posttrain.errors import ConfigError
from posttrain.models.logprobs import response_logprobs
from posttrain.models.precision import autocast
from posttrain.models.loading import tokenizer_from_config
from posttrain.models.tiny import make_tiny_model
from posttrain.records import PromptBatch
from posttrain.rollout import SamplingParams
from posttrain.models.lean_decoder import LeanDecoder
from posttrain.trainer.rl_build import build_roles, engine_precision


def tiny_lm(dtype=torch.float32) -> Qwen2ForCausalLM:
    torch.manual_seed(0)
    config = Qwen2Config(
        vocab_size=64, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
        intermediate_size=64,
    )
    return Qwen2ForCausalLM(config).to(dtype).eval()


def batch(B: int = 4, P: int = 5, T: int = 6):
    g = torch.Generator().manual_seed(1)
    prompt = torch.randint(1, 64, (B, P), generator=g)
    response = torch.randint(1, 64, (B, T), generator=g)
    prompt_mask, response_mask = torch.ones(B, P), torch.ones(B, T)
    prompt_mask[0, :2] = 0  # left padding
    response_mask[1, 4:] = 0  # a shorter response
    return prompt, prompt_mask, response, response_mask


def test_autocast_runs_matmuls_in_bf16_only_when_asked():
    model = tiny_lm()
    x = torch.randn(3, 32)
    with autocast(model, "bf16"):
        assert F.linear(x, model.lm_head.weight).dtype == torch.bfloat16
    with autocast(model, "fp32"):
        assert F.linear(x, model.lm_head.weight).dtype == torch.float32
    with autocast(tiny_lm(torch.bfloat16), "bf16"):  # already bf16 parameters: nothing to cast
        assert not torch.is_autocast_enabled("cpu")


def test_bf16_log_probs_are_close_to_fp32_and_gradients_stay_fp32():
    model = tiny_lm().train()
    args = batch()
    exact = response_logprobs(model, *args).logprobs
    with autocast(model, "bf16"):
        mixed = response_logprobs(model, *args).logprobs
    real = args[3] > 0
    assert mixed.dtype == torch.float32
    gap = float((mixed - exact).detach()[real].abs().max())
    assert 0 < gap < 0.1  # bf16 rounding moves them, a little
    assert bool((mixed[~real] == 0).all())
    mixed.sum().backward()
    assert all(p.grad is None or p.grad.dtype == torch.float32 for p in model.parameters())
    assert model.lm_head.weight.grad is not None and model.lm_head.weight.dtype == torch.float32


def test_lean_decoder_in_bf16_matches_the_hf_model_in_bf16():
    model = tiny_lm(torch.bfloat16)
    ids = torch.tensor([[0, 0, 5, 6, 7], [8, 9, 10, 11, 12]])
    mask = (ids > 0).long()
    positions = (mask.cumsum(1) - 1).clamp(min=0)
    with torch.inference_mode():
        ours = model.lm_head(LeanDecoder(model, 8).prefill(ids, mask, positions)).float()
        theirs = model(input_ids=ids, attention_mask=mask, position_ids=positions).logits[:, -1].float()
    torch.testing.assert_close(ours, theirs, atol=0.05, rtol=0.02)


@pytest.mark.parametrize(
    "params, actor, rollout, expected",
    [
        (torch.float32, "fp32", "auto", (torch.float32, True)),
        (torch.float32, "bf16", "auto", (torch.bfloat16, False)),  # auto follows the actor's compute dtype
        (torch.float32, "fp32", "bf16", (torch.bfloat16, False)),
        (torch.float32, "bf16", "fp32", (torch.float32, False)),  # the actor autocasts, the engine does not
        (torch.bfloat16, "fp32", "auto", (torch.bfloat16, True)),
    ],
)
def test_engine_precision(params, actor, rollout, expected):
    assert engine_precision(tiny_lm(params), actor, rollout) == expected


def roles(tmp_path, *overrides):
    model_dir = make_tiny_model(tmp_path / "m", layers=1, hidden=32, heads=2)
    cfg = load_config(None, [f"model.path={model_dir}", "rollout.response_length=4", *overrides])
    return build_roles(cfg, derive(cfg, 64), tokenizer_from_config(cfg.model))


def test_default_engine_shares_the_actor_module_and_reuses_its_log_probs(tmp_path):
    r = roles(tmp_path)
    assert r.engine.model is r.actor.model
    assert r.actor.s.compute_dtype == "fp32" and r.actor.s.reuse_rollout_logprobs


def test_bf16_rollout_gets_its_own_bf16_copy_refreshed_after_each_update(tmp_path):
    r = roles(tmp_path, "rollout.dtype=bf16")
    engine, actor = r.engine, r.actor
    assert engine.model is not actor.model
    assert {p.dtype for p in engine.model.parameters()} == {torch.bfloat16}
    assert {p.dtype for p in actor.model.parameters()} == {torch.float32}
    assert not actor.s.reuse_rollout_logprobs  # auto: another dtype cannot give the actor's log-probs
    with torch.no_grad():
        for p in actor.model.parameters():
            p.add_(0.5)
    engine.update_weights(actor.weights(), 1)
    for (name, ours), theirs in zip(engine.model.named_parameters(), actor.model.parameters()):
        assert torch.equal(ours, theirs.to(torch.bfloat16)), name
    prompts = PromptBatch(torch.tensor([[5, 6, 7]]), torch.ones(1, 3), uid=["p"])
    out = engine.generate(prompts, SamplingParams(n=2, max_new_tokens=4), expected_version=1)
    assert out.rollout_logprobs.dtype == torch.float32 and out.response_ids.shape[0] == 2


def test_mixed_precision_reaches_actor_reference_and_critic(tmp_path):
    r = roles(
        tmp_path, "actor.fsdp_config.mixed_precision.param_dtype=bf16", "actor.use_kl_loss=true",
        "ref.fsdp_config.mixed_precision.param_dtype=bf16", "algorithm.adv_estimator=gae",
        "critic.fsdp_config.mixed_precision.param_dtype=bf16",
    )
    assert r.actor.s.compute_dtype == "bf16" and r.reference.compute_dtype == "bf16"
    assert r.critic.s.compute_dtype == "bf16"
    assert {p.dtype for p in r.engine.model.parameters()} == {torch.bfloat16}  # rollout.dtype auto
    assert not r.actor.s.reuse_rollout_logprobs


def test_the_actor_computes_under_autocast(tmp_path):
    fp32 = roles(tmp_path / "a")
    bf16 = roles(tmp_path / "b", "actor.fsdp_config.mixed_precision.param_dtype=bf16")
    prompts = PromptBatch(torch.tensor([[5, 6, 7], [8, 9, 10]]), torch.ones(2, 3), uid=["p", "q"])
    out = fp32.engine.generate(prompts, SamplingParams(n=2, max_new_tokens=4), expected_version=0)
    exact, mixed = fp32.actor.compute_logprobs(out), bf16.actor.compute_logprobs(out)
    with autocast(bf16.actor.model, "bf16"):
        expected = response_logprobs(bf16.actor.model.eval(), out.prompt_ids, out.prompt_mask, out.response_ids, out.response_mask).logprobs
    torch.testing.assert_close(mixed, expected.detach(), atol=1e-6, rtol=0)
    assert not torch.equal(mixed, exact)
    torch.testing.assert_close(mixed, exact, atol=0.1, rtol=0)


def test_always_reuses_even_across_dtypes(tmp_path):
    r = roles(tmp_path, "rollout.dtype=bf16", "actor.reuse_rollout_logprobs=always")
    assert r.actor.s.reuse_rollout_logprobs and r.actor.s.force_reuse
    prompts = PromptBatch(torch.tensor([[5, 6, 7]]), torch.ones(1, 3), uid=["p"])
    out = r.engine.generate(prompts, SamplingParams(n=2, max_new_tokens=4), expected_version=0)
    r.actor.compute_logprobs = lambda b: pytest.fail("recomputed")  # type: ignore[method-assign]
    assert torch.equal(r.actor.old_logprobs(out), out.rollout_logprobs) and r.actor.reused_last


def test_sft_and_dpo_objectives_compute_under_autocast():
    from posttrain.config.sections.algorithm import DPOConfig
    from posttrain.data.examples import DPOExample, SFTExample
    from posttrain.trainer.dpo import dpo_objective
    from posttrain.trainer.sft import MicroBatching, accumulate, sft_objective

    model = tiny_lm().train()
    a, b = SFTExample(0, [1, 30, 31, 32, 2], [0, 0, 0, 1, 1]), SFTExample(1, [1, 33, 34, 35, 36, 2], [0, 0, 0, 1, 1, 1])
    losses = {}
    for dtype in ("fp32", "bf16"):
        model.zero_grad(set_to_none=True)
        losses[dtype] = accumulate(sft_objective(model, 0, dtype), [a, b], MicroBatching(2), backward=True)["sft/loss"]
        assert model.lm_head.weight.grad.dtype == torch.float32
    assert losses["bf16"] != losses["fp32"] and losses["bf16"] == pytest.approx(losses["fp32"], abs=0.05)

    pair = DPOExample(0, a, SFTExample(0, [1, 30, 31, 40, 2], [0, 0, 0, 1, 1]))
    reference = tiny_lm().requires_grad_(False)
    logp = {}
    for dtype in ("fp32", "bf16"):
        with torch.no_grad():
            metrics = accumulate(dpo_objective(model, reference, 0, DPOConfig(), dtype, dtype), [pair], MicroBatching(1), backward=False)
        logp[dtype] = metrics["dpo/chosen_logp"]
    assert logp["bf16"] != logp["fp32"] and logp["bf16"] == pytest.approx(logp["fp32"], abs=0.1)


def test_fp16_compute_and_a_reduce_dtype_without_sharding_are_refused():
    with pytest.raises(ConfigError, match="param_dtype"):
        load_config(None, ["actor.fsdp_config.mixed_precision.param_dtype=fp16"])
    with pytest.raises(ConfigError, match="reduce_dtype: only act on a model sharded over several worker processes"):
        load_config(None, ["actor.fsdp_config.mixed_precision.reduce_dtype=bf16"])
    load_config(None, ["actor.fsdp_config.mixed_precision.reduce_dtype=bf16", "cluster.n_gpus_per_node=2"])


def test_auto_compute_dtype_is_bf16_on_a_gpu_and_fp32_on_the_cpu():
    """param_dtype's default, auto: bf16 autocast where a role computes on CUDA, none on the CPU."""
    from posttrain.models.precision import compute_dtype

    assert load_config(None, []).actor.fsdp_config.mixed_precision.param_dtype == "auto"
    assert compute_dtype("auto", torch.device("cuda", 0)) == "bf16"
    assert compute_dtype("auto", "cpu") == "fp32"
    assert compute_dtype("fp32", "cuda") == "fp32" and compute_dtype("bf16", "cpu") == "bf16"
    model = torch.nn.Linear(4, 4)
    with autocast(model, "auto"):  # CPU parameters: no autocast, the matmul stays fp32
        assert model(torch.ones(1, 4)).dtype == torch.float32
