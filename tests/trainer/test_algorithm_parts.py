"""The parts Trinity-RFT's algorithm types compose, in the RL stage: estimator and loss options,
a teacher as the reference (on-policy distillation), expert rows for the mix losses."""

from __future__ import annotations

import pytest
import torch

from posttrain.algorithms import AdvantageOutput
from posttrain.config.load import load_config
from posttrain.errors import ConfigError
from posttrain.models.tiny import make_tiny_model
from posttrain.records import RolloutBatch
from posttrain.tasks import write_task_data
from posttrain.trainer.advantages import compute_advantages, make_shaping_state
from posttrain.trainer.rl_settings import loss_options, check_rl_names
from posttrain.workers.microbatch import mini_batches
from rl_helpers import tiny_rl_files, tiny_rl_trainer


def _cfg(*overrides: str):
    return load_config(None, ["model.path=unused", "data.train_files=unused.parquet", *overrides])


def test_estimator_and_loss_options_are_checked_by_name():
    with pytest.raises(ConfigError, match=r"baseline_shfit is not an option of estimator 'asymre' \(its options: baseline_shift\)"):
        check_rl_names(_cfg("algorithm.adv_estimator=asymre", "algorithm.adv_estimator_args={baseline_shfit: 0.1}"))
    with pytest.raises(ConfigError, match=r"loss_args.mu: not an option of policy loss 'sapo' \(its options: tau_neg, tau_pos\)"):
        check_rl_names(_cfg("actor.policy_loss.loss_mode=sapo", "actor.policy_loss.loss_args={mu: 0.1}"))
    with pytest.raises(ConfigError, match="has its own field; set actor.clip_ratio"):
        check_rl_names(_cfg("actor.policy_loss.loss_args={clip_ratio: 0.1}"))
    with pytest.raises(ConfigError, match="set algorithm.mix.expert_files"):
        check_rl_names(_cfg("actor.policy_loss.loss_mode=mix"))
    with pytest.raises(ConfigError, match="cannot tell them apart"):
        check_rl_names(_cfg("algorithm.mix.expert_files=[x.parquet]", "algorithm.mix.expert_batch_size=2"))
    mix = ("actor.policy_loss.loss_mode=mix", "algorithm.mix.expert_files=[x.parquet]", "algorithm.mix.expert_batch_size=2")
    with pytest.raises(ConfigError, match="sft_loss_agg_mode: 'token_mean' is not an aggregation mode"):
        check_rl_names(_cfg(*mix, "actor.policy_loss.loss_args={sft_loss_agg_mode: token_mean}"))
    check_rl_names(_cfg(*mix, "actor.policy_loss.loss_args={sft_loss_agg_mode: token-mean, grpo_loss_agg_mode: null}"))
    cfg = _cfg("actor.policy_loss.loss_mode=sapo", "actor.policy_loss.loss_args={tau_neg: 2.0}")
    check_rl_names(cfg)
    assert loss_options(cfg) == {"tau_neg": 2.0}


def _batch(scores):
    n = len(scores)
    return RolloutBatch(
        prompt_ids=torch.zeros(n, 1, dtype=torch.long), prompt_mask=torch.ones(n, 1),
        response_ids=torch.zeros(n, 2, dtype=torch.long), response_mask=torch.ones(n, 2),
        rollout_logprobs=torch.zeros(n, 2), weights_version=torch.zeros(n, dtype=torch.long),
        group_index=["g"] * n, data_source=[""] * n, ground_truth=[None] * n, extra_info=[{}] * n, raw_prompt=[""] * n,
        old_logprobs=torch.full((n, 2), -1.0), ref_logprobs=torch.full((n, 2), -0.25),
    )


def test_estimator_options_and_old_logprobs_reach_the_estimator():
    alg = _cfg("algorithm.adv_estimator=asymre", "algorithm.adv_estimator_args={baseline_shift: 0.5}").algorithm
    batch = _batch([1.0, 0.0])
    compute_advantages(batch, torch.tensor([1.0, 0.0]), alg, make_shaping_state(alg), 2)
    torch.testing.assert_close(batch.advantages[:, 0], torch.tensor([0.0, -1.0]))  # baseline 0.5 + 0.5
    alg = _cfg("algorithm.adv_estimator=on_policy_distill", "algorithm.adv_estimator_args={kl_coef: 2.0}").algorithm
    batch = _batch([0.0, 0.0])
    compute_advantages(batch, torch.zeros(2), alg, make_shaping_state(alg), 2)
    torch.testing.assert_close(batch.advantages, torch.full((2, 2), 1.5))  # 2 x (-0.25 - -1)


def test_expert_rows_are_dealt_over_the_explored_mini_batches():
    explored, expert = _batch([0.0] * 8), _batch([0.0] * 4)
    explored.expert_mask, expert.expert_mask = torch.zeros(8, dtype=torch.bool), torch.ones(4, dtype=torch.bool)
    minis = mini_batches(RolloutBatch.cat([explored, expert]), 4, shuffle=False, generator=None)
    assert [(len(m), int(m.expert_mask.sum())) for m in minis] == [(6, 2), (6, 2)]


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    root = tmp_path_factory.mktemp("parts")
    out = tiny_rl_files(root)
    make_tiny_model(root / "teacher", layers=1, hidden=32, heads=4, seed=7)
    paths = write_task_data("sort", root / "expert", train=4, test=0, sft=4, dpo=0, seed=3)
    return out, root / "teacher", paths["sft"]


def test_a_teacher_is_the_reference_and_its_vocabulary_is_checked(files, tmp_path):
    base, teacher, _ = files
    t = tiny_rl_trainer(base, "algorithm.adv_estimator=on_policy_distill", f"ref.model_path={teacher}", run="teacher")
    ref = dict(t.roles.reference.model.named_parameters())
    mine = dict(t.roles.actor.model.named_parameters())
    name = "model.embed_tokens.weight"
    assert not torch.equal(ref[name], mine[name]) and not any(p.requires_grad for p in ref.values())
    other = make_tiny_model(tmp_path / "big_vocab", layers=1, hidden=32, heads=4, vocab_size=160)
    with pytest.raises(ConfigError, match="its vocabulary differs"):
        tiny_rl_trainer(base, "algorithm.adv_estimator=on_policy_distill", f"ref.model_path={other}", run="teacher2")


def test_mix_trains_expert_rows_by_likelihood(files):
    base, _, sft = files
    t = tiny_rl_trainer(
        base, "actor.policy_loss.loss_mode=mix", "actor.policy_loss.loss_args={mu: 1.0}", f"algorithm.mix.expert_files=[{sft}]",
        "algorithm.mix.expert_batch_size=4", "trainer.total_training_steps=3", "actor.optim.lr=0.01", run="mix",
    )
    seen = []
    update = t.roles.actor.update
    t.roles.actor.update = lambda batch, step=0, mini_size=None: seen.append(batch) or update(batch, step, mini_size)
    losses = []
    for step in (1, 2, 3):
        metrics = t.step(t._next_prompts(step), step)
        losses.append(metrics["actor/expert_sft_loss"])
    assert int(seen[0].expert_mask.sum()) == 4 and len(seen[0]) == 8 + 4  # 4 prompts x 2 responses + 4 expert rows
    assert seen[0].data_source[-4:] == ["expert"] * 4 and torch.equal(seen[0].advantages[-4:], torch.zeros_like(seen[0].advantages[-4:]))
    # mu = 1: only the expert rows' likelihood is trained, and all 4 expert rows come back every step
    assert losses[2] < losses[1] < losses[0], losses
    assert t.checkpoint_parts().states["expert"] is t.expert


def test_expert_files_are_read_with_the_mix_sections_column_keys(files, tmp_path):
    import json

    from posttrain.models.loading import load_tokenizer
    from posttrain.trainer.mixing import ExpertRows, expert_dataset

    (_, model), _, _ = files
    path = tmp_path / "expert.jsonl"
    rows = [{"q": "sort 3 1", "a": "1 3", "conv": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "ok"}]}] * 2
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    tok = load_tokenizer(str(model))
    plain = _cfg(f"algorithm.mix.expert_files=[{path}]", "algorithm.mix.prompt_key=q", "algorithm.mix.response_key=a")
    answer = ExpertRows(expert_dataset(plain, tok), 2, 0, 0).rows(version=0, step=1)
    assert tok.decode(answer.response_ids[0][answer.loss_mask[0] > 0]).startswith("1 3")
    conv = _cfg(f"algorithm.mix.expert_files=[{path}]", "algorithm.mix.messages_key=conv")
    reply = ExpertRows(expert_dataset(conv, tok), 2, 0, 0).rows(version=0, step=1)
    assert tok.decode(reply.response_ids[0][reply.loss_mask[0] > 0]).startswith("ok")
    with pytest.raises(Exception, match="'q'"):  # without the key the data section's prompt column is missing
        expert_dataset(_cfg(f"algorithm.mix.expert_files=[{path}]"), tok)


def test_the_experience_pipeline_runs_between_reward_and_training(files):
    from posttrain.trainer.metrics import PhaseTimer
    from posttrain.trainer.preflight import check_stage_names

    base, _, _ = files
    t = tiny_rl_trainer(base, "data_processor.experience_pipeline.operators=[{name: response_length_filter, args: {max_length: 3}}]", run="pipe")
    prompts = t._next_prompts(1)
    experience = t.explore(prompts, PhaseTimer(), expected_version=t.roles.actor.version)
    lengths = experience.batch.response_mask.sum(1)
    dropped = experience.reward_metrics["experience_pipeline/0_response_length_filter/filtered"]
    assert bool((lengths <= 3).all()) and len(experience.batch) + dropped == 8 and len(experience.texts) == len(experience.batch)
    with pytest.raises(ConfigError, match=r"operators\[0\]: data_juicer is refused"):
        check_stage_names(_cfg("data_processor.experience_pipeline.operators=[{name: data_juicer}]"))


def test_expert_rows_join_a_batch_that_carries_sum_pi_squared(files):
    """calculate_sum_pi_squared keeps sum_v pi^2 on the batch (the OTB estimators read it there):
    the expert rows joined after the advantages carry zeros for it, so the two parts concatenate."""
    base, _, sft = files
    t = tiny_rl_trainer(
        base, "actor.policy_loss.loss_mode=mix", f"algorithm.mix.expert_files=[{sft}]", "algorithm.mix.expert_batch_size=4",
        "actor.calculate_sum_pi_squared=true", "trainer.total_training_steps=1", run="mix_pi2",
    )
    metrics = t.step(t._next_prompts(1), 1)
    assert "actor/expert_sft_loss" in metrics and "variance_proxy/expected_w" in metrics


def test_expert_epochs_bound_the_steps_a_stage_may_run(files):
    """algorithm.mix.expert_epochs (Trinity-RFT's expert buffer total_epochs): rows x epochs // batch
    steps are drawn before Trinity's trainer stops, so a longer stage is refused before any model loads."""
    import pyarrow.parquet as pq

    from posttrain.errors import ConfigError

    base, _, sft = files
    rows = pq.read_metadata(sft).num_rows if str(sft).endswith(".parquet") else sum(1 for _ in open(sft))
    mix = ("actor.policy_loss.loss_mode=mix", f"algorithm.mix.expert_files=[{sft}]", "algorithm.mix.expert_batch_size=4")
    steps = rows * 1 // 4  # one pass
    with pytest.raises(ConfigError, match=rf"1 pass\(es\) over the {rows} expert rows give {steps} step\(s\).* runs {steps + 1}"):
        tiny_rl_trainer(base, *mix, "algorithm.mix.expert_epochs=1", f"trainer.total_training_steps={steps + 1}", run="epochs1")
    t = tiny_rl_trainer(base, *mix, "algorithm.mix.expert_epochs=1", f"trainer.total_training_steps={steps}", run="epochs-fit")
    assert t.expert is not None  # the bound holds: the stage builds
