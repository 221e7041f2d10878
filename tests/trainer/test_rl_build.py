"""Wiring of the RL roles from the config: sampling parameters, loss options, names, role settings."""

from __future__ import annotations

import pytest
import torch

from posttrain.algorithms import get_policy_loss, policy_loss_names, policy_loss_options
from posttrain.config.derive import derive
from posttrain.config.load import load_config
from posttrain.errors import ConfigError
from posttrain.models.loading import tokenizer_from_config
from posttrain.models.tiny import make_tiny_model
from posttrain.rollout import SamplingParams
from posttrain.trainer.rl_build import build_roles
from posttrain.trainer.rl_settings import (
    baseline_sampling_params,
    check_rl_names,
    forward_batching,
    loss_inputs,
    loss_options,
    micro_batch_budget,
    sampling_params,
)


def cfg(*overrides):
    return load_config(None, list(overrides))


def test_validation_takes_its_own_repetition_penalty_else_the_rollouts():
    train, val = sampling_params(cfg("rollout.repetition_penalty=1.2"), tokenizer=None)
    assert train.repetition_penalty == val.repetition_penalty == 1.2
    train, val = sampling_params(cfg("rollout.repetition_penalty=1.2", "rollout.val_kwargs.repetition_penalty=1.0"), tokenizer=None)
    assert (train.repetition_penalty, val.repetition_penalty) == (1.2, 1.0)


def test_sampling_params_defaults_sample_for_training_and_decode_greedily_for_validation():
    train, val = sampling_params(cfg(), tokenizer=None)  # val_kwargs.temperature defaults to 0: accepted
    assert train == SamplingParams(temperature=1.0, top_k=-1, top_p=1.0, do_sample=True, n=1, max_new_tokens=512)
    assert val.do_sample is False and val.n == 1 and val.max_new_tokens == 512
    assert val.temperature == 1.0  # 0 would be refused by SamplingParams; greedy ignores it anyway


def test_model_max_model_len_caps_training_and_validation_rollouts():
    train, val = sampling_params(cfg("model.max_model_len=600"), tokenizer=None)
    assert train.max_total_tokens == val.max_total_tokens == 600


def test_val_kwargs_response_length_bounds_validation_responses_only():
    from posttrain.rollout.requests import max_model_len

    train, val = sampling_params(cfg("rollout.response_length=32", "rollout.val_kwargs.response_length=100"), tokenizer=None)
    assert (train.max_new_tokens, val.max_new_tokens) == (32, 100)
    # the engine's context holds the longer one: data.max_prompt_length 512 + 100
    assert max_model_len(cfg("rollout.response_length=32", "rollout.val_kwargs.response_length=100")) == 612
    assert max_model_len(cfg("rollout.response_length=32", "rollout.val_kwargs.response_length=8")) == 544
    with pytest.raises(ConfigError, match="validation response length"):
        cfg("rollout.min_response_length=9", "rollout.val_kwargs.response_length=8")


def test_min_response_length_binds_both_and_fire_only_training_rollouts():
    train, val = sampling_params(cfg("rollout.min_response_length=3", "rollout.use_fire_sampling=true"), tokenizer=None)
    assert train.min_new_tokens == val.min_new_tokens == 3
    assert (train.first_token_temperature, train.first_token_top_k) == (30.0, 16)  # top_k off: FIRE's 16
    assert (val.first_token_temperature, val.first_token_top_k) == (None, None)
    train, _ = sampling_params(cfg("rollout.use_fire_sampling=true", "rollout.top_k=5"), tokenizer=None)
    assert train.first_token_top_k == 5
    with pytest.raises(ConfigError, match="min_response_length \\(600\\) exceeds the response length \\(512\\)"):
        cfg("rollout.min_response_length=600")


def test_sampling_params_map_rollout_and_val_kwargs():
    train, val = sampling_params(
        cfg(
            "rollout.n=4", "rollout.temperature=0.7", "rollout.top_k=5", "rollout.top_p=0.9",
            "rollout.response_length=32", "rollout.ignore_eos=true", "rollout.repetition_penalty=1.2",
            "rollout.val_kwargs.do_sample=true", "rollout.val_kwargs.temperature=0.6",
            "rollout.val_kwargs.n=2", "rollout.val_kwargs.top_p=0.8", "rollout.val_kwargs.top_k=3",
        ),
        tokenizer=None,
    )
    assert train == SamplingParams(
        temperature=0.7, top_k=5, top_p=0.9, do_sample=True, n=4, max_new_tokens=32, ignore_eos=True,
        repetition_penalty=1.2,
    )
    assert val == SamplingParams(
        temperature=0.6, top_k=3, top_p=0.8, do_sample=True, n=2, max_new_tokens=32, ignore_eos=True,
        repetition_penalty=1.2,
    )


def test_greedy_training_rollouts_accept_temperature_zero():
    train, _ = sampling_params(cfg("rollout.do_sample=false", "rollout.temperature=0"), tokenizer=None)
    assert train.do_sample is False and train.temperature == 1.0


def test_loss_options_pass_only_what_the_loss_accepts():
    vanilla = loss_options(cfg())
    assert vanilla == {"clip_ratio": 0.2, "clip_ratio_low": None, "clip_ratio_high": None, "clip_ratio_c": 3.0}
    assert loss_options(cfg("actor.dual_clip=false"))["clip_ratio_c"] is None
    gspo = loss_options(cfg("actor.policy_loss.loss_mode=gspo", "actor.clip_ratio_low=0.0003", "actor.clip_ratio_high=0.0004"))
    assert gspo == {"clip_ratio": 0.2, "clip_ratio_low": 0.0003, "clip_ratio_high": 0.0004}
    cov = loss_options(cfg("actor.policy_loss.loss_mode=clip_cov", "actor.policy_loss.clip_cov_ratio=0.01"))
    assert cov["clip_cov_ratio"] == 0.01 and "kl_cov_ratio" not in cov


@pytest.mark.parametrize("mode", policy_loss_names())
def test_every_registered_loss_accepts_what_the_actor_passes(mode):
    """The actor calls loss(old_logprob=, logprob=, advantages=, response_mask=, loss_scale_factor=,
    loss_agg_mode=, **loss_options(cfg)); that must work for every loss a user can choose."""
    c = cfg(f"actor.policy_loss.loss_mode={mode}")
    if mode == "dpo":  # needs ref_logprob and chosen/rejected pairs: refused before any model loads
        with pytest.raises(ConfigError, match=r"loss_mode=dpo.*ref_logprob"):
            check_rl_names(c)
        return
    batch_inputs = {}
    if "expert_mask" in policy_loss_options(mode):  # the mix losses: expert rows configured, the actor passes the mask
        with pytest.raises(ConfigError, match="set algorithm.mix.expert_files"):
            check_rl_names(c)
        c = cfg(f"actor.policy_loss.loss_mode={mode}", "algorithm.mix.expert_files=[x.parquet]", "algorithm.mix.expert_batch_size=1")
        batch_inputs = {"expert_mask": torch.tensor([False, True])}
    if "global_step" in policy_loss_options(mode):
        batch_inputs["global_step"] = 3
    check_rl_names(c)
    options = loss_options(c)
    assert set(options) <= policy_loss_options(mode)
    options.update(batch_inputs)
    g = torch.Generator().manual_seed(0)
    mask = torch.tensor([[1.0, 1.0, 0.0], [1.0, 1.0, 1.0]])
    logprob = (-torch.rand(2, 3, generator=g)).requires_grad_()
    if "scores" in loss_inputs(c):  # the actor passes each response's score to a loss that requires them
        options = {**options, "scores": torch.tensor([1.0, 0.0])}
    out = get_policy_loss(mode)(
        old_logprob=-torch.rand(2, 3, generator=g), logprob=logprob, advantages=torch.randn(2, 3, generator=g),
        response_mask=mask, loss_agg_mode="token-mean", loss_scale_factor=None, **options,
    )
    out.loss.backward()
    assert torch.isfinite(out.loss) and torch.isfinite(logprob.grad).all()


def test_check_rl_names_rejects_unknown_names_with_the_key():
    check_rl_names(cfg())
    with pytest.raises(ConfigError, match=r"algorithm\.adv_estimator.*'grpoo'.*did you mean 'grpo'"):
        check_rl_names(cfg("algorithm.adv_estimator=grpoo"))
    with pytest.raises(ConfigError, match=r"actor\.policy_loss\.loss_mode.*'vanila'"):
        check_rl_names(cfg("actor.policy_loss.loss_mode=vanila"))
    check_rl_names(cfg("algorithm.adv_estimator=remax"))  # the step generates its greedy baseline


def test_baseline_sampling_is_greedy_with_training_limits_only_for_remax():
    train, _ = sampling_params(cfg("rollout.n=4", "rollout.response_length=8"), tokenizer=None)
    assert baseline_sampling_params(cfg("rollout.n=4"), train) is None
    greedy = baseline_sampling_params(cfg("algorithm.adv_estimator=remax", "rollout.n=4"), train)
    assert greedy == SamplingParams(temperature=1.0, do_sample=False, n=1, max_new_tokens=8)


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory):
    return make_tiny_model(tmp_path_factory.mktemp("rlb") / "model", layers=1, hidden=32, heads=4, seed=0)


def roles(tiny_dir, *overrides):
    c = cfg(
        f"model.path={tiny_dir}", "data.train_batch_size=4", "data.max_response_length=16", "rollout.n=2",
        "actor.ppo_mini_batch_size=2", "actor.ppo_micro_batch_size_per_gpu=2",
        "critic.ppo_mini_batch_size=2", "critic.ppo_micro_batch_size_per_gpu=2", *overrides,
    )
    return build_roles(c, derive(c, 8), tokenizer_from_config(c.model))


def test_build_roles_grpo_without_kl(tiny_dir):
    r = roles(tiny_dir, "rollout.temperature=0.7")
    s = r.actor.s
    assert r.critic is None and r.reference is None
    assert r.engine.model is r.actor.model  # shared module, no copy
    assert (s.temperature, s.mini_batch_size, s.micro_batch_size) == (0.7, 4, 2)  # 2 prompts x n = 2
    assert s.loss_scale_factor is None and s.max_tokens_per_micro_batch is None and s.grad_clip == 1.0


def test_build_roles_gae_with_kl_loss_and_token_budget(tiny_dir):
    r = roles(
        tiny_dir, "algorithm.adv_estimator=gae", "actor.use_kl_loss=true", "actor.loss_agg_mode=seq-mean-token-sum-norm",
        "actor.use_dynamic_bsz=true", "actor.ppo_max_token_len_per_gpu=600", "critic.cliprange_value=0.3",
        "rollout.do_sample=false", "rollout.temperature=0",
    )
    s = r.actor.s
    assert s.loss_scale_factor == 16.0  # the response length, fixed for every micro-batch
    assert s.max_tokens_per_micro_batch == 600 and s.use_kl_loss
    assert s.temperature == 1.0 and r.reference.temperature == 1.0  # greedy at temperature 0
    assert r.reference.max_tokens == 600  # the reference follows the actor's token packing
    assert r.reference.model is not r.actor.model
    assert all(torch.equal(a, b) for a, b in zip(r.reference.model.parameters(), r.actor.model.parameters()))
    assert r.critic is not None and r.critic.s.cliprange_value == 0.3 and r.critic.s.mini_batch_size == 4


@pytest.mark.parametrize("overrides, expected", [([], 3), (["rollout.seed=11"], 11)])
def test_rollout_seed_seeds_the_engine_else_the_run_seed(tmp_path, overrides, expected):
    from posttrain.trainer.rl_settings import rollout_seed

    model_dir = make_tiny_model(tmp_path / "m", layers=1, hidden=32, heads=2)
    c = cfg(f"model.path={model_dir}", "trainer.seed=3", *overrides)
    roles = build_roles(c, derive(c, 64), tokenizer_from_config(c.model))
    assert rollout_seed(c) == expected and roles.engine.seed == expected
    assert roles.actor.generator.initial_seed() == 3  # the actor's shuffle keeps the run seed


def test_log_prob_passes_have_their_own_batching(tmp_path, monkeypatch):
    import posttrain.workers.actor as actor_module

    model_dir = make_tiny_model(tmp_path / "m", layers=1, hidden=32, heads=2)
    base = [f"model.path={model_dir}", "actor.ppo_micro_batch_size_per_gpu=4", "actor.use_kl_loss=true"]
    default = build_roles(c := cfg(*base), derive(c, 64), tokenizer_from_config(c.model))
    assert default.actor.s.logprob_batching == (4, None)  # as the update: 4 responses, no token budget
    assert (default.reference.micro_batch_size, default.reference.max_tokens) == (8, None)
    own = cfg(
        *base, "rollout.log_prob_micro_batch_size_per_gpu=3", "rollout.log_prob_use_dynamic_bsz=true",
        "rollout.log_prob_max_token_len_per_gpu=2000", "ref.log_prob_use_dynamic_bsz=true",
    )
    roles = build_roles(own, derive(own, 64), tokenizer_from_config(own.model))
    assert roles.actor.s.logprob_batching == (3, 2000)
    assert roles.reference.max_tokens == 16384  # null budget: actor.ppo_max_token_len_per_gpu
    seen = []
    monkeypatch.setattr(actor_module, "batched_logprobs", lambda model, batch, t, size, max_tokens, pack, dp, run, head: seen.append((size, max_tokens)))
    roles.actor.compute_logprobs(object())
    assert seen == [(3, 2000)]


def test_a_token_budget_counts_one_devices_share_of_a_ulysses_split_micro_batch():
    # verl: max_token_len = *_max_token_len_per_gpu x ulysses_sequence_parallel_size
    assert micro_batch_budget(25600, 2) == 51200 and micro_batch_budget(100, 1) == 100
    assert forward_batching(3, None, None, default_dynamic=True, default_budget=1000, sp=4) == (3, 4000)
    assert forward_batching(3, True, 500, default_dynamic=False, default_budget=1000, sp=2) == (3, 1000)
    assert forward_batching(3, False, 500, default_dynamic=True, default_budget=1000, sp=2) == (3, None)


def test_a_log_prob_token_budget_below_one_sequence_is_refused():
    with pytest.raises(ConfigError, match=r"rollout.log_prob_max_token_len_per_gpu \(100\) is smaller than one full sequence"):
        cfg("data.max_prompt_length=64", "data.max_response_length=64", "rollout.log_prob_use_dynamic_bsz=true",
            "rollout.log_prob_max_token_len_per_gpu=100")


def test_critic_batching_and_loss_options_reach_the_critic(tmp_path, monkeypatch):
    import posttrain.workers.critic as critic_module

    model_dir = make_tiny_model(tmp_path / "m", layers=1, hidden=32, heads=2)
    base = [f"model.path={model_dir}", "algorithm.adv_estimator=gae", "actor.shuffle=true", "data.max_response_length=12"]
    default = build_roles(c := cfg(*base), derive(c, 64), tokenizer_from_config(c.model)).critic.s
    assert default.shuffle is True  # critic.shuffle null follows actor.shuffle
    assert (default.loss_agg_mode, default.max_tokens_per_micro_batch, default.forward_batching) == ("token-mean", None, (8, None))
    own = cfg(
        *base, "critic.shuffle=false", "critic.loss_agg_mode=seq-mean-token-sum-norm", "critic.use_dynamic_bsz=true",
        "critic.ppo_max_token_len_per_gpu=3000", "critic.forward_micro_batch_size_per_gpu=5",
        "critic.forward_max_token_len_per_gpu=4000",
    )
    critic = build_roles(own, derive(own, 64), tokenizer_from_config(own.model)).critic
    s = critic.s
    assert (s.shuffle, s.loss_agg_mode, s.loss_scale_factor) == (False, "seq-mean-token-sum-norm", 12.0)
    assert (s.max_tokens_per_micro_batch, s.forward_batching) == (3000, (5, 4000))
    seen = []
    monkeypatch.setattr(critic_module, "forward_in_order", lambda batch, fn, size, max_tokens, dp: seen.append((size, max_tokens)))
    critic.compute_values(object())
    assert seen == [(5, 4000)]


def test_a_critic_forward_budget_below_one_sequence_is_refused():
    with pytest.raises(ConfigError, match=r"critic.forward_max_token_len_per_gpu \(100\) is smaller than one full sequence"):
        cfg("algorithm.adv_estimator=gae", "data.max_prompt_length=64", "data.max_response_length=64",
            "critic.use_dynamic_bsz=true", "critic.forward_max_token_len_per_gpu=100")


def test_critic_model_options_load_the_critic(tmp_path):
    policy_dir = make_tiny_model(tmp_path / "policy", layers=1, hidden=32, heads=2)
    critic_dir = make_tiny_model(tmp_path / "critic", layers=2, hidden=48, heads=2)
    base = [f"model.path={policy_dir}", "algorithm.adv_estimator=gae"]
    same = cfg(*base)
    critic = build_roles(same, derive(same, 64), tokenizer_from_config(same.model)).critic.model
    assert critic.config.hidden_size == 32 and next(critic.parameters()).dtype == torch.float32  # the policy's
    own = cfg(
        *base, f"critic.model.path={critic_dir}", "critic.model.dtype=bf16", "critic.model.enable_gradient_checkpointing=true",
        "critic.model.override_config={attention_dropout: 0.25}", f"critic.model.tokenizer_path={critic_dir}",
    )
    critic = build_roles(own, derive(own, 64), tokenizer_from_config(own.model)).critic.model
    assert (critic.config.hidden_size, critic.config.num_hidden_layers) == (48, 2)
    assert next(critic.parameters()).dtype == torch.bfloat16
    assert critic.is_activation_checkpointing and critic.config.attention_dropout == 0.25


def test_a_critic_tokenizer_with_another_vocabulary_is_refused(tmp_path):
    policy_dir = make_tiny_model(tmp_path / "policy", layers=1, hidden=32, heads=2)
    other_dir = make_tiny_model(tmp_path / "other", layers=1, hidden=32, heads=2, vocab_size=300)
    c = cfg(f"model.path={policy_dir}", "algorithm.adv_estimator=gae", f"critic.model.tokenizer_path={other_dir}")
    with pytest.raises(ConfigError, match="critic.model.tokenizer_path .*vocabulary differs from the policy's"):
        build_roles(c, derive(c, 64), tokenizer_from_config(c.model))


def test_use_remove_padding_switches_packing_for_every_role(tmp_path, monkeypatch):
    import posttrain.models.logprobs as logprobs_module

    model_dir = make_tiny_model(tmp_path / "m", layers=1, hidden=32, heads=2)
    base = [f"model.path={model_dir}", "algorithm.adv_estimator=gae", "actor.use_kl_loss=true"]
    packed = build_roles(c := cfg(*base), derive(c, 64), tokenizer_from_config(c.model))
    assert packed.actor.s.pack and packed.reference.pack and packed.critic.s.pack  # on by default
    off = cfg(*base, "model.use_remove_padding=false", "critic.model.use_remove_padding=false")
    padded = build_roles(off, derive(off, 64), tokenizer_from_config(off.model))
    assert not (padded.actor.s.pack or padded.reference.pack or padded.critic.s.pack)
    # Padded roles never build a packed batch, and give the packed roles' numbers.
    from posttrain.records import PromptBatch
    from posttrain.rollout import SamplingParams

    ids = torch.tensor([[0, 0, 5, 6], [7, 8, 9, 10]])
    batch = packed.engine.generate(PromptBatch(ids, (ids > 0).float(), uid=["a", "b"]), SamplingParams(n=4, max_new_tokens=6), expected_version=0)
    want_actor, want_ref = packed.actor.compute_logprobs(batch), packed.reference.compute_logprobs(batch)
    want_values = packed.critic.compute_values(batch)
    monkeypatch.setattr(logprobs_module, "pack_batch", lambda *a, **k: pytest.fail("packed although use_remove_padding=false"))
    torch.testing.assert_close(padded.actor.compute_logprobs(batch), want_actor, atol=1e-5, rtol=0)
    torch.testing.assert_close(padded.reference.compute_logprobs(batch), want_ref, atol=1e-5, rtol=0)
    torch.testing.assert_close(padded.critic.compute_values(batch), want_values, atol=1e-5, rtol=0)


@pytest.mark.parametrize("fused", [False, True])
def test_optim_fused_reaches_the_actor_and_critic_optimizers(tmp_path, fused):
    model_dir = make_tiny_model(tmp_path / "m", layers=1, hidden=32, heads=2)
    flag = str(fused).lower()
    c = load_config(None, [
        f"model.path={model_dir}", "algorithm.adv_estimator=gae", f"actor.optim.fused={flag}", f"critic.optim.fused={flag}",
    ])
    roles = build_roles(c, derive(c, 64), tokenizer_from_config(c.model))
    for optimizer in (roles.actor.optimizer, roles.critic.optimizer):
        assert bool(optimizer.param_groups[0]["fused"]) is fused


@pytest.mark.parametrize("free", [True, False])
def test_free_cache_engine_sleeps_the_engine_between_generations(tiny_dir, free):
    from posttrain.records import PromptBatch

    r = roles(tiny_dir, f"rollout.free_cache_engine={str(free).lower()}", "rollout.dtype=bf16")
    engine, calls = r.engine, []
    assert engine.owns_weights  # another dtype: the engine's own copy, which sleep may move off a GPU
    sleep, wake_up = engine.sleep, engine.wake_up
    engine.sleep = lambda level=1: (calls.append(("sleep", level)), sleep(level))[1]
    engine.wake_up = lambda: (calls.append("wake_up"), wake_up())[1]
    ids = torch.tensor([[5, 6, 7]])
    r.rollout.generate(PromptBatch(ids, torch.ones(1, 3), uid=["a"]), SamplingParams(max_new_tokens=2), expected_version=0)
    assert calls == (["wake_up", ("sleep", 1)] if free else [])
    assert engine.asleep == (1 if free else 0)
    r.sync.push(1)  # weights pushed while it sleeps land in the sleeping engine
    assert engine.weights_version == 1
