"""actor.reuse_rollout_logprobs: the rollout's log-probs stand in for the old log-probs only when
they equal a recomputation (on-policy, same weights and dtype), checked on the first batch."""

from __future__ import annotations

import warnings

import pytest
import torch

from posttrain.config import load_config
from posttrain.records import PromptBatch
from posttrain.rollout import HFEngine, SamplingParams
from posttrain.workers import Actor, ActorSettings


class NoSchedule:
    def step(self) -> None:
        pass


def make_actor(model, reuse: bool) -> Actor:
    settings = ActorSettings(
        temperature=0.7, loss_mode="vanilla", loss_options={"clip_ratio": 0.2}, loss_agg_mode="token-mean",
        loss_scale_factor=None, entropy_coeff=0.0, use_kl_loss=False, kl_loss_coef=0.0, kl_loss_type="low_var_kl",
        ppo_epochs=1, mini_batch_size=6, micro_batch_size=6, max_tokens_per_micro_batch=None, grad_clip=None,
        shuffle=False, reuse_rollout_logprobs=reuse,
    )
    return Actor(model, torch.optim.SGD(model.parameters(), lr=0.1), NoSchedule(), settings)


def rollout(engine: HFEngine, version: int = 0):
    ids = torch.tensor([[0, 0, 11, 12, 13], [21, 22, 23, 24, 25]])
    prompts = PromptBatch(ids, (ids > 0).float(), uid=["a", "b"])
    params = SamplingParams(temperature=0.7, n=3, max_new_tokens=8, stop_token_ids=tuple(range(3, 20)))
    return engine.generate(prompts, params, expected_version=version)


def test_reuse_returns_the_rollout_logprobs_after_checking_them(tiny_lm):
    actor = make_actor(tiny_lm, reuse=True)
    engine = HFEngine(tiny_lm, eos_token_ids=[], pad_token_id=0, copy_weights=False, seed=1)
    batch = rollout(engine)
    old = actor.old_logprobs(batch)
    assert actor.reused_last and actor.reuse_checked is True
    assert torch.equal(old, batch.rollout_logprobs)
    torch.testing.assert_close(old, actor.compute_logprobs(batch), atol=1e-5, rtol=0)
    # Later batches are reused without another recomputation.
    calls = []
    actor.compute_logprobs = lambda b: calls.append(b)  # type: ignore[method-assign]
    second = rollout(engine)
    assert torch.equal(actor.old_logprobs(second), second.rollout_logprobs) and calls == []


def test_never_always_recomputes(tiny_lm):
    actor = make_actor(tiny_lm, reuse=False)
    batch = rollout(HFEngine(tiny_lm, eos_token_ids=[], pad_token_id=0, copy_weights=False, seed=1))
    old = actor.old_logprobs(batch)
    assert not actor.reused_last and actor.reuse_checked is None
    assert torch.equal(old, actor.compute_logprobs(batch))


def test_rows_from_older_weights_are_recomputed(tiny_lm):
    actor = make_actor(tiny_lm, reuse=True)
    batch = rollout(HFEngine(tiny_lm, eos_token_ids=[], pad_token_id=0, copy_weights=False, seed=1))
    actor.version = 1  # an optimizer step happened since the rollout
    old = actor.old_logprobs(batch)
    assert not actor.reused_last
    assert torch.equal(old, actor.compute_logprobs(batch))


def test_a_rollout_in_another_dtype_fails_the_check_and_switches_reuse_off(tiny_lm):
    actor = make_actor(tiny_lm, reuse=True)
    engine = HFEngine(tiny_lm, eos_token_ids=[], pad_token_id=0, copy_weights=True, dtype=torch.bfloat16, seed=1)
    batch = rollout(engine)
    with pytest.warns(UserWarning, match="recomputing old log-probs"):
        old = actor.old_logprobs(batch)
    assert not actor.reused_last and actor.reuse_checked is False
    assert torch.equal(old, actor.compute_logprobs(batch))
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # warned once, then silently recomputed
        actor.old_logprobs(rollout(engine))
    assert not actor.reused_last


def test_config_field_defaults_to_auto_and_accepts_never():
    assert load_config(None, []).actor.reuse_rollout_logprobs == "auto"
    assert load_config(None, ["actor.reuse_rollout_logprobs=never"]).actor.reuse_rollout_logprobs == "never"


@pytest.mark.parametrize("value, expected", [("auto", True), ("never", False)])
def test_the_trainer_builds_the_actor_with_the_configured_choice(tmp_path, value, expected):
    from posttrain.config import derive
    from posttrain.models.loading import tokenizer_from_config
    from posttrain.models.tiny import make_tiny_model
    from posttrain.trainer.rl_build import build_roles

    model_dir = make_tiny_model(tmp_path / "m", layers=1, hidden=32, heads=2)
    cfg = load_config(None, [f"model.path={model_dir}", f"actor.reuse_rollout_logprobs={value}"])
    roles = build_roles(cfg, derive(cfg, 64), tokenizer_from_config(cfg.model))
    assert roles.actor.s.reuse_rollout_logprobs is expected


@pytest.mark.parametrize("value", [True, False])
def test_rollout_enable_prefix_caching_reaches_the_engine(tmp_path, value):
    from posttrain.config import derive
    from posttrain.models.loading import tokenizer_from_config
    from posttrain.models.tiny import make_tiny_model
    from posttrain.trainer.rl_build import build_roles

    model_dir = make_tiny_model(tmp_path / "m", layers=1, hidden=32, heads=2)
    cfg = load_config(None, [f"model.path={model_dir}", f"rollout.enable_prefix_caching={str(value).lower()}"])
    roles = build_roles(cfg, derive(cfg, 64), tokenizer_from_config(cfg.model))
    assert roles.engine.share_prompt_prefill is value
