"""Cross-field rules: batch divisibility (with and without several devices) and the other checks."""

from __future__ import annotations

import pytest

from posttrain.config import load_config, validate
from posttrain.config.fields import param, section
from posttrain.errors import ConfigError


def batch_overrides(prompts=8, n=8, mini=2, micro=8, nodes=1, gpus=0, dynamic=False, budget=16384):
    return [
        f"data.train_batch_size={prompts}",
        f"rollout.n={n}",
        f"actor.ppo_mini_batch_size={mini}",
        f"actor.ppo_micro_batch_size_per_gpu={micro}",
        f"actor.use_dynamic_bsz={str(dynamic).lower()}",
        f"actor.ppo_max_token_len_per_gpu={budget}",
        f"cluster.nnodes={nodes}",
        f"cluster.n_gpus_per_node={gpus}",
        "data.max_prompt_length=512",
        "data.max_response_length=512",
        "algorithm.adv_estimator=grpo",
    ]


def problems(**kwargs) -> list[str]:
    with pytest.raises(ConfigError) as info:
        load_config(None, batch_overrides(**kwargs))
    return info.value.problems


def test_consistent_batches_pass():
    cfg = load_config(None, batch_overrides())
    assert cfg.actor.ppo_mini_batch_size == 2
    load_config(None, batch_overrides(nodes=2, gpus=4, micro=2))  # 16 responses / 8 devices = 2 each


def test_mini_batch_must_divide_the_prompts_of_a_step():
    assert problems(mini=3) == [
        "data.train_batch_size (8) is not divisible by actor.ppo_mini_batch_size (3): each step's prompts "
        "are split into equal mini-batches; use one of 1, 2, 4, 8"
    ]


def test_mini_batch_cannot_exceed_the_step():
    assert problems(mini=16) == [
        "actor.ppo_mini_batch_size (16) is larger than data.train_batch_size (8): a mini-batch is a share "
        "of one step's prompts; use at most 8"
    ]


def test_micro_batch_must_divide_the_mini_batch():
    assert problems(micro=5) == [
        "actor.ppo_micro_batch_size_per_gpu (5) does not divide the per-device mini-batch of 16 responses "
        "(actor.ppo_mini_batch_size 2 × rollout.n 8 / 1 device); use one of 1, 2, 4, 8, 16"
    ]


def test_a_mini_batch_that_does_not_divide_over_the_devices_is_split_unevenly():
    """verl refuses 16 responses on 3 devices; posttrain gives the ranks 5, 5 and 6 (the loss weighting
    keeps the gradient the mini-batch's), and the plan says so."""
    from posttrain.config import derive
    from posttrain.config.plan import format_plan

    cfg = load_config(None, batch_overrides(gpus=3, micro=2))
    plan = format_plan(cfg, derive(cfg, None))
    assert "16 / 3 devices = 5 or 6 per device / actor.ppo_micro_batch_size_per_gpu 2" in plan
    assert [line.split()[1] for line in plan.splitlines() if "micro-batches/mini-batch" in line] == ["3"]  # the busiest rank's 6 / 2
    assert "actor mini-batch      5 or 6   (16 responses / 3)" in plan


def test_micro_batch_is_checked_against_the_per_device_share():
    # 16 responses over 8 devices is 2 per device: a micro-batch of 8 is the whole share in one pass
    # (verl refuses it; posttrain has nothing to split), while 3 of 6 per device cannot divide it
    load_config(None, batch_overrides(gpus=8))
    assert problems(gpus=2, micro=3) == [
        "actor.ppo_micro_batch_size_per_gpu (3) does not divide the per-device mini-batch of 8 responses "
        "(actor.ppo_mini_batch_size 2 × rollout.n 8 / 2 devices); use one of 1, 2, 4, 8"
    ]


def test_dynamic_batching_skips_the_micro_rule_but_needs_room_for_one_sequence():
    load_config(None, batch_overrides(micro=5, dynamic=True))
    assert problems(dynamic=True, budget=1000) == [
        "actor.ppo_max_token_len_per_gpu (1000) is smaller than one full sequence (data.max_prompt_length 512 "
        "+ data.max_response_length 512 = 1024); raise it to at least 1024"
    ]
    # model.max_model_len ends every response sooner: the longest sequence is that long
    load_config(None, batch_overrides(dynamic=True, budget=1000) + ["model.max_model_len=1000"])
    with pytest.raises(ConfigError) as capped:
        load_config(None, batch_overrides(dynamic=True, budget=900) + ["model.max_model_len=1000"])
    assert capped.value.problems == [
        "actor.ppo_max_token_len_per_gpu (900) is smaller than one full sequence (model.max_model_len 1000); raise it to at least 1000"
    ]
    # under Ulysses a sequence is split over sp ranks: the per-device budget holds 1/sp of it (as verl's)
    sp = ["actor.ulysses_sequence_parallel_size=2", "ref.log_prob_max_token_len_per_gpu=500"]
    load_config(None, batch_overrides(gpus=2, dynamic=True, budget=512) + sp[:1])
    with pytest.raises(ConfigError) as info:
        load_config(None, batch_overrides(gpus=2, dynamic=True, budget=512) + sp + ["actor.use_kl_loss=true"])
    assert info.value.problems == [
        "ref.log_prob_max_token_len_per_gpu (500) × its role's ulysses_sequence_parallel_size 2 is smaller than one full sequence "
        "(data.max_prompt_length 512 + data.max_response_length 512 = 1024); raise it to at least 512"
    ]


def test_critic_batches_are_checked_only_when_a_critic_is_trained():
    extra = ["critic.ppo_mini_batch_size=3"]
    load_config(None, batch_overrides() + extra)  # GRPO: no critic, its batch sizes do not matter
    with pytest.raises(ConfigError) as info:
        load_config(None, batch_overrides() + extra + ["algorithm.adv_estimator=gae"])
    assert info.value.problems == [
        "data.train_batch_size (8) is not divisible by critic.ppo_mini_batch_size (3): each step's prompts "
        "are split into equal mini-batches; use one of 1, 2, 4, 8"
    ]


# Rules whose fields may not be in the real schema yet run on any schema that has them.


@section
class Actor:
    """Toy actor."""

    clip_ratio_c: float = param(3.0, doc="Dual-clip bound.")


@section
class ValKwargs:
    """Toy validation sampling."""

    do_sample: bool = param(False, doc="Sample.")
    temperature: float = param(0.0, doc="Temperature.", ge=0)


@section
class Rollout:
    """Toy rollout."""

    val_kwargs: ValKwargs = param(factory=ValKwargs, doc="Validation sampling.")


@section
class Toy:
    """Toy root."""

    actor: Actor = param(factory=Actor, doc="Actor.")
    rollout: Rollout = param(factory=Rollout, doc="Rollout.")


def test_dual_clip_bound_must_exceed_one():
    validate({"actor": {"clip_ratio_c": 1.5}}, Toy)
    with pytest.raises(ConfigError) as info:
        validate({"actor": {"clip_ratio_c": 1}}, Toy)
    assert info.value.problems == ["actor.clip_ratio_c (1.0) must be greater than 1 (dual-clip lower bound; verl uses 3.0)"]


def test_sampled_validation_needs_a_positive_temperature():
    validate({"rollout": {"val_kwargs": {"do_sample": False, "temperature": 0}}}, Toy)  # greedy is fine
    with pytest.raises(ConfigError) as info:
        validate({"rollout": {"val_kwargs": {"do_sample": True, "temperature": 0}}}, Toy)
    assert info.value.problems == [
        "rollout.val_kwargs.temperature (0.0) must be > 0 when rollout.val_kwargs.do_sample is true; set "
        "do_sample: false for greedy validation"
    ]


def test_real_schema_rules_are_wired():
    with pytest.raises(ConfigError, match=r"actor\.clip_ratio_c"):
        load_config(None, batch_overrides() + ["actor.clip_ratio_c=0.5"])
    with pytest.raises(ConfigError, match=r"rollout\.val_kwargs\.temperature"):
        load_config(None, batch_overrides() + ["rollout.val_kwargs.do_sample=true", "rollout.val_kwargs.temperature=0"])


# algorithm.kind sft/dpo: one step is data.train_batch_size sequences (pairs); no rollout, no critic.


def supervised(kind, batch=64, micro=16, *extra):
    return [f"algorithm.kind={kind}", f"data.train_batch_size={batch}", f"actor.ppo_micro_batch_size_per_gpu={micro}", *extra]


def supervised_problems(kind, *args) -> list[str]:
    with pytest.raises(ConfigError) as info:
        load_config(None, supervised(kind, *args))
    return info.value.problems


@pytest.mark.parametrize("kind", ["sft", "dpo"])
def test_supervised_kinds_ignore_the_rl_only_rules(kind):
    # Each of these alone is refused for RL (see the tests above); none concerns SFT or DPO.
    rl_only = [
        "actor.ppo_mini_batch_size=3",  # does not divide the prompts
        "rollout.n=7",
        "critic.ppo_mini_batch_size=5",
        "algorithm.adv_estimator=gae",
        "rollout.val_kwargs.do_sample=true",
        "rollout.val_kwargs.temperature=0",
    ]
    with pytest.raises(ConfigError):
        load_config(None, batch_overrides(mini=3))
    cfg = load_config(None, supervised(kind, 64, 16, *rl_only))
    assert cfg.algorithm.kind == kind


def test_sft_micro_batch_must_divide_the_batch():
    assert supervised_problems("sft", 64, 24) == [
        "actor.ppo_micro_batch_size_per_gpu (24) does not divide the per-device batch of 64 sequences "
        "(data.train_batch_size 64 / 1 device, algorithm.kind sft); use one of 1, 2, 4, 8, 16, 32, 64"
    ]


def test_dpo_micro_batch_counts_pairs_per_device():
    # 32 pairs over 4 devices is 8 per device; a micro-batch of 3 cannot divide it, one of 16 takes all 8
    assert supervised_problems("dpo", 32, 3, "cluster.n_gpus_per_node=4") == [
        "actor.ppo_micro_batch_size_per_gpu (3) does not divide the per-device batch of 8 pairs "
        "(data.train_batch_size 32 / 4 devices, algorithm.kind dpo); use one of 1, 2, 4, 8"
    ]
    load_config(None, supervised("dpo", 32, 16, "cluster.n_gpus_per_node=4"))
    load_config(None, supervised("dpo", 32, 8, "cluster.n_gpus_per_node=4"))


def test_a_supervised_batch_that_does_not_divide_over_the_devices_is_split_unevenly():
    from posttrain.config import derive
    from posttrain.config.plan import format_plan

    cfg = load_config(None, supervised("sft", 30, 5, "cluster.n_gpus_per_node=4"))
    assert "7 or 8" in format_plan(cfg, derive(cfg, None))


def test_supervised_token_budget_must_hold_a_sequence_or_a_pair():
    budget = ["actor.use_dynamic_bsz=true", "data.max_length=600", "actor.ppo_max_token_len_per_gpu=1000"]
    load_config(None, supervised("sft", 64, 24, *budget))  # packing by tokens: the count rule is off
    assert supervised_problems("dpo", 64, 16, *budget) == [
        "actor.ppo_max_token_len_per_gpu (1000) is smaller than one pair (chosen + rejected, 2 × "
        "data.max_length 600 = 1200); raise it to at least 1200"
    ]
    assert supervised_problems("sft", 64, 16, "actor.use_dynamic_bsz=true", "data.max_length=2000",
                               "actor.ppo_max_token_len_per_gpu=1000") == [
        "actor.ppo_max_token_len_per_gpu (1000) is smaller than one sequence (data.max_length 2000); "
        "raise it to at least 2000"
    ]


def test_dpo_label_smoothing_needs_the_sigmoid_loss():
    load_config(None, supervised("dpo", 64, 16, "algorithm.dpo.label_smoothing=0.1"))
    load_config(None, supervised("sft", 64, 16, "algorithm.dpo.label_smoothing=0.1", "algorithm.dpo.loss_type=ipo"))
    assert supervised_problems("dpo", 64, 16, "algorithm.dpo.label_smoothing=0.1", "algorithm.dpo.loss_type=hinge") == [
        "algorithm.dpo.label_smoothing (0.1) only applies to algorithm.dpo.loss_type sigmoid, not hinge; "
        "set it to 0 or use loss_type sigmoid"
    ]


def test_training_rollout_sampling_needs_positive_temperature():
    from posttrain.config import load_config
    from posttrain.errors import ConfigError

    with pytest.raises(ConfigError, match=r"rollout.temperature \(0.0\) must be > 0 when rollout.do_sample is true"):
        load_config(None, ["rollout.temperature=0.0", "rollout.do_sample=true"])
    cfg = load_config(None, ["rollout.temperature=0.0", "rollout.do_sample=false"])
    assert cfg.rollout.temperature == 0.0


def test_sft_refuses_a_loss_agg_mode_it_would_ignore():
    with pytest.raises(ConfigError, match="actor.loss_agg_mode=seq-mean-token-mean is not implemented for algorithm.kind sft"):
        load_config(None, ["algorithm.kind=sft", "actor.loss_agg_mode=seq-mean-token-mean"])
    assert load_config(None, ["algorithm.kind=sft"]).actor.loss_agg_mode == "token-mean"


def test_save_strategy_refuses_turns_that_several_writers_would_have_to_take():
    two = batch_overrides(gpus=2, micro=4)  # one node, 2 worker processes writing their shards at once
    for strategy in ("unrestricted", "single_node"):
        assert load_config(None, [*two, f"trainer.save_strategy={strategy}"]).trainer.save_strategy == strategy
    with pytest.raises(ConfigError, match="save_strategy=single_process asks checkpoint writers to take turns, but the 2 worker"):
        load_config(None, [*two, "trainer.save_strategy=single_process"])
    with pytest.raises(ConfigError, match="single_node asks the nodes to take turns"):
        load_config(None, [*batch_overrides(nodes=2, gpus=2, micro=2), "trainer.save_strategy=single_node"])
    assert load_config(None, [*batch_overrides(), "trainer.save_strategy=single_thread"]).trainer.save_strategy == "single_thread"


@pytest.mark.parametrize("overrides, words", [
    (["algorithm.token_filter.mu=3"], "read only by a filter"),
    (["algorithm.token_filter.type=clip_b", "algorithm.token_filter.max_frac=0.1"], "read only by clip_v"),
    (["algorithm.kind=sft", "algorithm.token_filter.type=clip_b"], "algorithm.kind sft has none"),
])
def test_token_filter_options_that_would_do_nothing_are_refused(overrides, words):
    with pytest.raises(ConfigError, match=words):
        load_config(None, overrides)
    load_config(None, ["algorithm.token_filter.type=clip_v", "algorithm.token_filter.max_frac=0.1", "algorithm.token_filter.mu=1"])
