"""Every honoured config key changes what a run does, so a knob that stops working fails CI.

A config field without `todo` promises behaviour. Each such key is in exactly one table: `KNOBS` (a
tiny `posttrain train` run with the key changed does something else than the same run without the
change: another rollout, forward pass, worker pool, metric, weight, file, printed line or exit
status; see knob_harness.py), `ELSEWHERE` (a named test varies the key and asserts its effect, where
the harness cannot see it cheaply), `SAME_RESULT` (keys whose requested behaviour posttrain always
has: changing them must change nothing, which is checked too) or `UNCOVERED` (no test yet, with the
reason). A new field without `todo` fails `test_every_honoured_key_has_a_behaviour_test` until it
joins a table.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch

from knob_harness import make_assets, observe
from posttrain.config.fields import iter_fields, section_class
from posttrain.config.schema import Config

REPO = Path(__file__).resolve().parents[2]

@dataclass(frozen=True)
class Knob:
    change: tuple[str, ...]  # the override(s) of the run with the key changed; the first names the key
    observable: str  # the Observation field that must differ
    context: tuple[str, ...] = ()  # overrides of both runs: what the key needs to act
    first: tuple[str, ...] | None = None  # an unrecorded run in the same directory before both runs

    @property
    def key(self) -> str:
        return self.change[0].partition("=")[0]


def knob(change: str | tuple[str, ...], observable: str, *context: str, first: tuple[str, ...] | None = None) -> Knob:
    return Knob((change,) if isinstance(change, str) else change, observable, tuple(context), first)


# Contexts: what a key needs to act.
VAL = ("data.val_files={data}/test.parquet",)
VAL_SAMPLED = (*VAL, "rollout.val_kwargs.do_sample=true", "rollout.val_kwargs.temperature=1.0")
VARIED = ("data.train_files={data}/varied.parquet", "data.max_prompt_length=72")  # prompts of 26 to 68 tokens
CRITIC = ("algorithm.adv_estimator=gae",)
REF = ("actor.use_kl_loss=true",)
KL_REWARD = ("algorithm.use_kl_in_reward=true",)
ADAPTIVE = (*KL_REWARD, "algorithm.kl_ctrl.type=adaptive", "trainer.total_training_steps=3")  # step 3 shows step 2's update
# Four epochs of two mini-batches at a high learning rate: ratios far from 1, so clipping binds.
OFF_POLICY = ("actor.ppo_epochs=4", "actor.ppo_mini_batch_size=2", "actor.ppo_micro_batch_size_per_gpu=4", "actor.optim.lr=0.03")
CLIP_COV = (*OFF_POLICY, "actor.policy_loss.loss_mode=clip_cov")  # clips tokens whose covariance is in [lb, ub]
KL_COV = (*OFF_POLICY, "actor.policy_loss.loss_mode=kl_cov")
COSINE = ("actor.optim.lr_scheduler_type=cosine",)
CKPT = ("trainer.save_freq=1",)
RIS = ("algorithm.rollout_is_threshold=1.001", "actor.reuse_rollout_logprobs=never", "rollout.dtype=bf16")
REWARD_FILE = ("reward.custom_reward_function.path={data}/reward.py",)
BY_LENGTH = (*REWARD_FILE, "reward.custom_reward_function.name=by_length")  # scores vary within a group
OVERLONG = ("reward.overlong_buffer.len=4",)  # responses of 6 tokens against the budget of 6: in the ramp
POSITIVE = (*REWARD_FILE, "reward.custom_reward_function.reward_kwargs={bonus: 1.0}")  # every response scores >= 1
FLAKY = (*REWARD_FILE, "reward.custom_reward_function.name=flaky", "reward.on_error=fixed")
RM = ("reward.reward_model.enable=true", "reward.reward_model.path={assets}/rm")
SFT_DATA = ("data.train_files={data}/sft_train.parquet", "data.max_length=48", "actor.ppo_micro_batch_size_per_gpu=4")
SFT = ("algorithm.kind=sft", *SFT_DATA)
DPO = ("algorithm.kind=dpo", "data.train_files={data}/dpo_train.parquet", "data.max_length=48", "actor.ppo_micro_batch_size_per_gpu=4")
PREP_MODEL = ("prepare.model.path={root}/prepared_model", "prepare.model.tiny.layers=1", "prepare.model.tiny.hidden=16")
PREP_DATA = ("prepare.data.dir={root}/prepared_data", "prepare.data.train=8", "prepare.data.test=4")
PARALLEL = ("reward.reward_manager=parallel", "reward.num_workers=1")
LORA = ("model.lora_rank=4",)
CRITIC_LORA = (*CRITIC, "critic.model.lora_rank=2")
# A rerun that continues the first run's step-1 checkpoint in another directory.
RESUME = ("trainer.resume_mode=resume_path", "trainer.default_local_dir={root}/resumed")
STEP = "{root}/posttrain/run/checkpoints/global_step_"
# Profiling (trace files are compared by name: their bytes hold timings). PROF_D: the actor in discrete mode.
PROF = ("profiler.tool=torch", "profiler.steps=[1]", "actor.profiler.enable=true")
PROF_D = (*PROF, "actor.profiler.discrete=true")
# Rows-weighted micro-batches cut by a token budget: packing and verl's balanced cut group the responses otherwise.
ROWS_DYNAMIC = ("actor.micro_batch_weight=rows", "actor.use_dynamic_bsz=true", "actor.ppo_max_token_len_per_gpu=200", "data.max_response_length=48")
# The top-k distillation term against the starting policy sharpened (teacher at temperature 0.5): a term that is not 0 at step 1.
TOPK = ("actor.topk_kl.k=4", "actor.topk_kl.teacher_temperature=0.5")

KNOBS = [
    # data
    knob("data.train_files={data}/test.parquet", "prompts"),
    knob("data.val_files={data}/test.parquet", "validation"),
    knob("data.dataset_dir={assets}/data2", "prompts", "data.train_files=train.parquet", "data.dataset_dir={data}"),
    knob("data.max_prompt_length=20", "prompts", "data.truncation=left"),
    knob("data.max_response_length=3", "responses"),
    knob("data.max_length=24", "forwards", *SFT, "data.truncation=right"),
    knob("data.truncation=left", "prompts", "data.max_prompt_length=20", "data.truncation=right"),
    knob("data.filter_overlong_prompts=true", "prompts", *VARIED, "data.max_prompt_length=50", "data.truncation=right"),
    knob("data.filter_overlong_prompts_workers=2", "pools", *VARIED, "data.max_prompt_length=50", "data.filter_overlong_prompts=true"),
    knob("data.dataloader_num_workers=2", "pools"),
    knob("data.sampler={class_path: {data}/sampler.py, class_name: Rotating}", "prompts"),
    knob("data.selector.type=random", "prompts"),
    knob("data.train_batch_size=2", "prompts", "actor.ppo_mini_batch_size=2", "actor.ppo_micro_batch_size_per_gpu=4"),
    knob("data.val_batch_size=2", "validation", *VAL),
    knob("data.shuffle=false", "prompts"),
    knob("data.validation_shuffle=true", "validation", *VAL),
    knob("data.seed=2", "prompts"),
    knob("data.system_prompt=be brief", "prompts"),
    knob("data.chat_template=Q:{% for m in messages %}{{ m['content'] }}{% endfor %}A:", "prompts"),
    knob("data.apply_chat_template_kwargs={flag: true}", "prompts", "model.chat_template_path={data}/flag.jinja"),
    knob("data.return_full_prompt=true", "metrics", *RM, "data.max_prompt_length=20", "data.truncation=left"),
    knob("data.return_raw_chat=true", "metrics", *REWARD_FILE, "reward.custom_reward_function.name=chat_turns"),  # extra_info['raw_chat']
    # model
    knob("model.path={assets}/critic_model", "responses"),
    knob("model.tokenizer_path={assets}/tokenizer", "prompts"),
    knob("model.dtype=bf16", "metrics"),
    knob("model.external_lib=knob_policy_lib", "printed"),
    knob("model.override_config={rms_norm_eps: 0.5}", "metrics"),
    knob("model.enable_gradient_checkpointing=true", "forwards"),
    knob("model.attn_implementation=eager", "metrics"),
    knob("model.custom_chat_template=Q:{{ messages[0]['content'] }}A:", "prompts"),
    knob("model.chat_template_path={data}/flag.jinja", "prompts"),
    knob("model.max_model_len=100000", "exit"),
    knob("model.rope_theta=0.5", "metrics"),
    knob("model.rope_scaling={rope_type: linear, factor: 4.0}", "metrics"),
    knob("model.use_remove_padding=false", "forwards", *VARIED),
    knob("model.lora_rank=4", "weights"),
    knob("model.lora_alpha=64", "weights", *LORA),
    knob("model.target_modules=[q_proj]", "weights", *LORA),
    knob("model.exclude_modules=[q_proj]", "weights", *LORA),
    knob("model.autocast_adapter_dtype=false", "weights", *LORA, "model.dtype=bf16"),  # bf16 adapters: an fp32 model has nothing to lift
    # rollout
    knob("rollout.n=3", "responses", "actor.ppo_micro_batch_size_per_gpu=4"),
    knob("rollout.temperature=2.0", "responses"),
    knob("rollout.top_k=1", "responses"),
    knob("rollout.top_p=0.5", "responses"),
    knob("rollout.do_sample=false", "responses"),
    knob("rollout.repetition_penalty=2.0", "responses"),
    knob("rollout.ignore_eos=true", "responses", "data.max_response_length=48"),
    knob("rollout.response_length=3", "responses"),
    knob("rollout.seed=2", "responses"),
    knob("rollout.min_response_length=5", "responses"),
    knob("rollout.use_fire_sampling=true", "responses"),
    knob(("rollout.val_kwargs.do_sample=true", "rollout.val_kwargs.temperature=1.0"), "validation", *VAL),
    knob("rollout.val_kwargs.temperature=3.0", "validation", *VAL_SAMPLED),
    knob("rollout.val_kwargs.top_k=1", "validation", *VAL_SAMPLED),
    knob("rollout.val_kwargs.top_p=0.3", "validation", *VAL_SAMPLED),
    knob("rollout.val_kwargs.n=2", "validation", *VAL),
    knob("rollout.val_kwargs.repetition_penalty=2.0", "validation", *VAL_SAMPLED),
    knob("rollout.val_kwargs.response_length=2", "validation", *VAL),  # 2-token validation responses instead of 6
    knob("rollout.log_prob_micro_batch_size_per_gpu=2", "forwards", "actor.reuse_rollout_logprobs=never"),
    knob("rollout.log_prob_use_dynamic_bsz=true", "forwards", "actor.reuse_rollout_logprobs=never", "rollout.log_prob_max_token_len_per_gpu=80"),
    knob("rollout.log_prob_max_token_len_per_gpu=80", "forwards", "actor.reuse_rollout_logprobs=never", "rollout.log_prob_use_dynamic_bsz=true"),
    knob("rollout.dtype=bf16", "metrics"),
    knob("rollout.enable_prefix_caching=true", "forwards"),
    knob("rollout.engine_kwargs.hf.decode_workers=2", "pools"),
    knob("rollout.prompt_length=7", "exit"),  # another limit than data.max_prompt_length is refused
    knob("rollout.max_num_seqs=2", "forwards"),  # the hf engine decodes 2 rows at a time
    # actor
    knob("actor.ppo_mini_batch_size=2", "weights"),
    knob("actor.ppo_micro_batch_size_per_gpu=4", "forwards"),
    knob("actor.use_dynamic_bsz=true", "forwards", "actor.ppo_max_token_len_per_gpu=80"),
    knob("actor.ppo_max_token_len_per_gpu=80", "forwards", "actor.use_dynamic_bsz=true"),
    knob("actor.ppo_epochs=2", "weights"),
    knob("actor.shuffle=true", "weights", "actor.ppo_mini_batch_size=2", "actor.ppo_micro_batch_size_per_gpu=4"),
    knob("actor.share_prompt_forward=true", "forwards"),
    knob("actor.reuse_rollout_logprobs=never", "forwards"),
    knob("actor.clip_ratio=0.05", "weights", *OFF_POLICY),
    knob("actor.clip_ratio_low=0.05", "weights", *OFF_POLICY),
    knob("actor.clip_ratio_high=0.05", "weights", *OFF_POLICY),
    knob("actor.dual_clip=false", "weights", *OFF_POLICY, "actor.clip_ratio_c=1.01"),
    knob("actor.clip_ratio_c=1.01", "weights", *OFF_POLICY),
    knob("actor.loss_agg_mode=token-sum", "weights"),
    knob("actor.micro_batch_weight=rows", "weights", "actor.ppo_micro_batch_size_per_gpu=1", "data.max_response_length=48"),  # lengths differ: EOS
    knob("actor.dynamic_bsz_partition=balanced", "weights", *ROWS_DYNAMIC),  # other groups of rows than the packing's
    knob("actor.policy_loss.loss_mode=gspo", "weights"),
    knob("actor.topk_kl.k=4", "weights"),  # the teacher is the reference, the starting policy
    knob("actor.topk_kl.coef=5.0", "weights", *TOPK),
    knob("actor.topk_kl.policy_loss=false", "weights", *TOPK),
    knob("actor.topk_kl.teacher_temperature=2.0", "weights", *TOPK),
    knob("actor.topk_kl.log_prob_min_clamp=-1.0", "weights", *TOPK),
    knob("actor.topk_kl.loss_max_clamp=0.001", "weights", *TOPK),
    knob("actor.policy_loss.clip_cov_ratio=0.5", "weights", *CLIP_COV, "actor.policy_loss.clip_cov_lb=-100", "actor.policy_loss.clip_cov_ub=100"),
    knob("actor.policy_loss.clip_cov_lb=-100", "weights", *CLIP_COV, "actor.policy_loss.clip_cov_ratio=0.5", "actor.policy_loss.clip_cov_ub=100"),
    knob("actor.policy_loss.clip_cov_ub=-50", "weights", *CLIP_COV, "actor.policy_loss.clip_cov_ratio=0.5", "actor.policy_loss.clip_cov_lb=-100"),
    knob("actor.policy_loss.kl_cov_ratio=0.5", "weights", *KL_COV),
    knob("actor.policy_loss.ppo_kl_coef=10.0", "weights", *KL_COV, "actor.policy_loss.kl_cov_ratio=0.5"),
    knob("actor.entropy_coeff=0.5", "weights"),
    knob("actor.use_kl_loss=true", "forwards"),
    knob("actor.kl_loss_coef=1.0", "weights", *REF),
    knob("actor.kl_loss_type=abs", "weights", *REF),
    knob("actor.calculate_sum_pi_squared=true", "metrics"),  # the variance_proxy/ metrics
    knob("actor.rl_loss_coef=0.5", "weights"),
    knob("actor.sft_loss_coef=1.0", "weights", *POSITIVE),  # the policy loss is 0 there: the SFT term alone moves the weights
    # the tiny model is dense: a router loss is refused when it loads (its effect on an MoE model: tests/workers/test_actor_moe.py)
    knob("actor.moe_aux_loss_coef=0.1", "exit"),
    knob("critic.moe_aux_loss_coef=0.1", "exit", *CRITIC),
    knob("actor.moe_z_loss_coef=0.1", "exit"),
    knob("critic.moe_z_loss_coef=0.1", "exit", *CRITIC),
    # dense too: R2 is refused when it loads (on an MoE model: tests/workers/test_router_replay.py, tests/trainer/test_router_replay_run.py)
    knob("actor.router_replay.mode=R2", "exit"),  # the critic's on an MoE model: tests/workers/test_actor_moe.py
    knob("actor.grad_clip=1e-4", "weights"),
    knob("actor.optim.lr=2e-3", "weights"),
    knob("actor.optim.betas=[0.5,0.9]", "weights"),
    knob("actor.optim.eps=1e-3", "weights"),
    knob("actor.optim.fused=true", "weights"),
    knob("actor.optim.weight_decay=0.5", "weights"),
    knob("actor.optim.lr_warmup_steps=2", "metrics"),
    knob("actor.optim.lr_warmup_steps_ratio=1.0", "metrics"),
    knob("actor.optim.lr_scheduler_type=cosine", "metrics"),
    knob("actor.optim.min_lr_ratio=0.5", "metrics", *COSINE),
    knob("actor.optim.num_cycles=1.0", "metrics", *COSINE),
    knob("actor.optim.lr_warmup_init=5e-4", "metrics", "actor.optim.lr_warmup_steps=2"),
    knob("actor.optim.optimizer=sgd", "weights"),
    knob("actor.optim.override_optimizer_config={maximize: true}", "weights"),
    knob("actor.optim.lr_decay_steps=1", "metrics", *COSINE),
    knob("actor.optim.lr_schedule_unit=update", "metrics", *COSINE, "actor.ppo_mini_batch_size=2"),  # the LR moves between updates
    knob("actor.optim.decay_bias_and_norm=false", "weights", "actor.optim.weight_decay=0.5"),  # norm weights keep their decay-free value  # step 2's LR: the minimum instead of half-way
    knob("actor.fsdp_config.mixed_precision.param_dtype=bf16", "metrics"),
    knob("actor.checkpoint.save_contents=[model]", "files", *CKPT),
    knob("actor.checkpoint.load_contents=[model]", "weights", *CKPT, *RESUME, f"trainer.resume_from_path={STEP}1", first=CKPT),
    # reference
    knob("ref.log_prob_micro_batch_size_per_gpu=2", "forwards", *REF),
    knob("ref.log_prob_use_dynamic_bsz=true", "forwards", *REF, "ref.log_prob_max_token_len_per_gpu=80"),
    knob("ref.log_prob_max_token_len_per_gpu=80", "forwards", *REF, "ref.log_prob_use_dynamic_bsz=true"),
    knob("ref.fsdp_config.mixed_precision.param_dtype=bf16", "metrics", *REF),
    # critic
    knob("critic.ppo_mini_batch_size=2", "metrics", *CRITIC),
    knob("critic.ppo_micro_batch_size_per_gpu=4", "forwards", *CRITIC),
    knob("critic.ppo_epochs=2", "metrics", *CRITIC),
    knob("critic.shuffle=true", "metrics", *CRITIC, "critic.ppo_mini_batch_size=2", "critic.ppo_micro_batch_size_per_gpu=4"),
    knob("critic.use_dynamic_bsz=true", "forwards", *CRITIC, "critic.ppo_max_token_len_per_gpu=80"),
    knob("critic.ppo_max_token_len_per_gpu=80", "forwards", *CRITIC, "critic.use_dynamic_bsz=true"),
    knob("critic.forward_micro_batch_size_per_gpu=2", "forwards", *CRITIC),
    knob("critic.forward_max_token_len_per_gpu=80", "forwards", *CRITIC, "critic.use_dynamic_bsz=true"),
    knob("critic.cliprange_value=0.001", "metrics", *CRITIC, "critic.ppo_epochs=2"),
    knob("critic.loss_agg_mode=token-sum", "metrics", *CRITIC),
    knob("critic.micro_batch_weight=rows", "metrics", *CRITIC, "critic.ppo_micro_batch_size_per_gpu=1", "data.max_response_length=48"),
    knob("critic.dynamic_bsz_partition=balanced", "metrics", *CRITIC, "critic.micro_batch_weight=rows", "critic.use_dynamic_bsz=true",
         "critic.ppo_max_token_len_per_gpu=200", "data.max_response_length=48"),
    knob("critic.grad_clip=1e-4", "metrics", *CRITIC),
    knob("critic.optim.lr=2e-3", "metrics", *CRITIC),
    knob("critic.optim.betas=[0.5,0.9]", "metrics", *CRITIC),
    knob("critic.optim.eps=1e-3", "metrics", *CRITIC),
    knob("critic.optim.fused=true", "metrics", *CRITIC),
    knob("critic.optim.weight_decay=0.5", "metrics", *CRITIC),
    knob("critic.optim.lr_warmup_steps=2", "metrics", *CRITIC),
    knob("critic.optim.lr_warmup_steps_ratio=1.0", "metrics", *CRITIC),
    knob("critic.optim.lr_scheduler_type=cosine", "metrics", *CRITIC),
    knob("critic.optim.min_lr_ratio=0.5", "metrics", *CRITIC, "critic.optim.lr_scheduler_type=cosine"),
    knob("critic.optim.num_cycles=1.0", "metrics", *CRITIC, "critic.optim.lr_scheduler_type=cosine"),
    knob("critic.optim.lr_warmup_init=5e-4", "metrics", *CRITIC, "critic.optim.lr_warmup_steps=2"),
    knob("critic.optim.optimizer=sgd", "metrics", *CRITIC),
    knob("critic.optim.override_optimizer_config={maximize: true}", "metrics", *CRITIC),
    knob("critic.optim.lr_decay_steps=1", "metrics", *CRITIC, "critic.optim.lr_scheduler_type=cosine"),
    knob("critic.optim.decay_bias_and_norm=false", "metrics", *CRITIC, "critic.optim.weight_decay=0.5"),
    knob("critic.model.path={assets}/critic_model", "metrics", *CRITIC),
    knob("critic.model.dtype=bf16", "metrics", *CRITIC),
    knob("critic.model.override_config={rms_norm_eps: 0.5}", "metrics", *CRITIC),
    knob("critic.model.external_lib=knob_critic_lib", "printed", *CRITIC),
    knob("critic.model.enable_gradient_checkpointing=true", "forwards", *CRITIC),
    knob("critic.model.use_remove_padding=false", "forwards", *CRITIC, *VARIED),
    knob("critic.model.lora_rank=2", "metrics", *CRITIC),
    knob("critic.model.lora_alpha=64", "metrics", *CRITIC_LORA),
    knob("critic.model.target_modules=[q_proj]", "metrics", *CRITIC_LORA),
    knob("critic.model.autocast_adapter_dtype=false", "metrics", *CRITIC_LORA, "critic.model.dtype=bf16"),
    knob("critic.fsdp_config.mixed_precision.param_dtype=bf16", "metrics", *CRITIC),
    knob("critic.checkpoint.save_contents=[model]", "files", *CRITIC, *CKPT),
    knob("critic.checkpoint.load_contents=[model]", "metrics", *CRITIC, *CKPT, *RESUME, f"trainer.resume_from_path={STEP}1", first=(*CRITIC, *CKPT)),
    # reward
    knob("reward.reward_manager=parallel", "pools", "reward.num_workers=1"),
    knob("reward.num_workers=2", "pools", *PARALLEL),
    knob("reward.on_error=raise", "exit", *FLAKY),
    knob("reward.failure_reward=0.5", "metrics", *FLAKY),
    knob("reward.function_weight=2.0", "metrics"),
    knob("reward.reward_model_weight=2.0", "metrics", *RM),
    knob("reward.custom_reward_function.path={data}/reward.py", "metrics"),
    knob("reward.workers={len: {worker_cls: '{data}/reward.py:by_length', tag_included: [posttrain/sort]}}", "metrics"),
    knob("reward.custom_reward_function.name=by_length", "metrics", *REWARD_FILE),
    knob("reward.custom_reward_function.reward_kwargs={bonus: 1.0}", "metrics", *REWARD_FILE),
    knob("reward.overlong_buffer.enable=true", "metrics", *OVERLONG),
    knob("reward.overlong_buffer.len=40", "metrics", *OVERLONG, "reward.overlong_buffer.enable=true", "data.max_response_length=48"),  # answers end (EOS) before 48 tokens
    knob("reward.overlong_buffer.penalty_factor=3.0", "metrics", *OVERLONG, "reward.overlong_buffer.enable=true"),
    knob("reward.overlong_buffer.log=true", "metrics", *OVERLONG, "reward.overlong_buffer.enable=true"),
    knob("reward.overlong_buffer.max_resp_len=8", "metrics", *OVERLONG, "reward.overlong_buffer.enable=true"),  # the ramp ends 2 tokens later
    knob("reward.reward_model.enable=true", "metrics", "reward.reward_model.path={assets}/rm"),
    knob("reward.reward_model.path={assets}/rm", "exit", "reward.reward_model.enable=true"),
    knob("reward.reward_model.micro_batch_size_per_gpu=2", "forwards", *RM),
    knob("reward.reward_model.max_length=8", "forwards", *RM),
    knob("reward.reward_model.use_dynamic_bsz=true", "forwards", *RM, "reward.reward_model.forward_max_token_len_per_gpu=80"),
    knob("reward.reward_model.forward_max_token_len_per_gpu=80", "forwards", *RM, "reward.reward_model.use_dynamic_bsz=true"),
    # algorithm
    knob("algorithm.kind=sft", "metrics", *SFT_DATA),
    knob("algorithm.adv_estimator=rloo", "weights"),
    knob("algorithm.gamma=0.5", "metrics", *CRITIC),
    knob("algorithm.lam=0.5", "metrics", *CRITIC),
    knob("algorithm.norm_adv_by_std_in_grpo=false", "weights"),
    knob("algorithm.use_kl_in_reward=true", "forwards"),
    knob("algorithm.kl_penalty=abs", "metrics", *KL_REWARD),
    knob("algorithm.kl_ctrl.type=adaptive", "metrics", *KL_REWARD),
    knob("algorithm.kl_ctrl.kl_coef=0.5", "metrics", *KL_REWARD),
    knob("algorithm.kl_ctrl.horizon=2", "metrics", *ADAPTIVE),
    knob("algorithm.kl_ctrl.target_kl=1e-9", "metrics", *ADAPTIVE),
    knob("algorithm.reward_clip=0.5", "metrics"),
    knob("algorithm.reward_norm_mean=batch", "metrics"),
    knob("algorithm.reward_norm_std=batch", "metrics"),
    knob("algorithm.whiten_rewards=true", "metrics"),
    knob("algorithm.whiten_advantages=true", "metrics"),
    knob("algorithm.advantage_clip=0.1", "metrics"),
    knob("algorithm.use_pf_ppo=true", "weights"),
    knob("algorithm.pf_ppo.reweight_method=max_min", "weights", "algorithm.use_pf_ppo=true"),
    knob("algorithm.pf_ppo.weight_pow=8.0", "weights", "algorithm.use_pf_ppo=true"),
    knob("algorithm.max_len_mask=true", "weights", *BY_LENGTH),  # every response fills the budget: none trains
    knob("algorithm.difficulty_mask=true", "weights", *BY_LENGTH, "algorithm.difficulty_high_threshold=0.6"),
    knob("algorithm.difficulty_low_threshold=0.6", "metrics", *BY_LENGTH, "algorithm.difficulty_mask=true"),
    knob("algorithm.difficulty_high_threshold=0.6", "metrics", *BY_LENGTH, "algorithm.difficulty_mask=true"),
    knob("algorithm.error_max_len_clip=true", "weights", *BY_LENGTH),  # scores other than 0 and 1 leave
    knob("algorithm.min_score_mask=100.0", "weights", *BY_LENGTH),  # no response scores 100: none trains
    knob("actor.topr_positive_loss_coef=1.0", "weights", *BY_LENGTH),  # every response scores > 0
    knob("actor.topr_negative_loss_coef=1.0", "weights", *BY_LENGTH, "algorithm.reward_norm_mean=group"),  # about half <= 0
    knob(("algorithm.token_filter.type=clip_b", "algorithm.token_filter.mu=0.5"), "weights", *BY_LENGTH),  # outlier tokens leave
    knob("algorithm.token_filter.mu=0.5", "weights", *BY_LENGTH, "algorithm.token_filter.type=clip_b"),
    knob("algorithm.token_filter.max_frac=0.5", "weights", *BY_LENGTH, "algorithm.token_filter.type=clip_v", "algorithm.token_filter.mu=0.05"),
    knob("algorithm.error_max_len_threshold=3", "metrics", *REWARD_FILE, "algorithm.error_max_len_clip=true"),
    knob("algorithm.length_loss_weight=true", "metrics", *VARIED, "model.max_model_len=74"),  # rows cut at 2 to 48 tokens
    knob("algorithm.difficulty_loss_weight=true", "exit"),  # the task's rows have no extra_info.difficulty: refused by row
    knob("algorithm.dpo.beta=0.5", "metrics", *DPO),
    knob("algorithm.dpo.label_smoothing=0.2", "metrics", *DPO),
    knob("algorithm.dpo.loss_type=ipo", "metrics", *DPO),
    knob("algorithm.rollout_is_threshold=1.001", "metrics", *RIS[1:]),
    knob("algorithm.rollout_is=true", "weights", *RIS),
    knob("algorithm.rollout_is_threshold_lower=0.5", "metrics", *RIS, "algorithm.rollout_is_mode=mask"),
    knob("algorithm.rollout_is_level=sequence", "weights", *RIS, "algorithm.rollout_is=true"),
    knob("algorithm.rollout_is_mode=mask", "metrics", *RIS),
    knob("algorithm.rollout_is_mode=zero", "weights", *RIS, "algorithm.rollout_is=true"),  # bf16 ratios outside [1/1.001, 1.001] weigh 0
    knob("algorithm.rollout_is_veto_threshold=0.999", "metrics", *RIS),
    knob("algorithm.rollout_is_batch_normalize=true", "metrics", *RIS, "algorithm.rollout_is=true"),
    knob(("algorithm.rollout_rs=token_k2", "algorithm.rollout_rs_threshold=1e-12"), "metrics", *RIS),
    knob("algorithm.rollout_rs_threshold=1e-12", "metrics", *RIS, "algorithm.rollout_rs=token_k2", "algorithm.rollout_rs_threshold=10"),
    # trainer
    knob("trainer.project_name=elsewhere", "files"),
    knob("trainer.experiment_name=other", "files"),
    knob("trainer.total_epochs=2", "metrics", "trainer.total_training_steps=null"),
    knob("trainer.total_training_steps=1", "metrics"),
    knob("trainer.seed=43", "responses"),
    knob("trainer.logger=[jsonl,console]", "printed"),
    knob("trainer.tracker_kwargs={log_dir: {root}/tb}", "files", "trainer.logger=[jsonl,tensorboard]"),
    knob("trainer.log_val_generations=2", "files", *VAL),
    knob("trainer.write_report=true", "files"),
    knob("trainer.rollout_data_dir={root}/rollouts", "files"),
    knob("trainer.validation_data_dir={root}/validations", "files", *VAL),
    knob("trainer.test_freq=1", "validation", *VAL),
    knob("trainer.val_before_train=false", "validation", *VAL),
    knob("trainer.val_only=true", "weights", *VAL),
    knob("trainer.critic_warmup=1", "weights"),
    knob("trainer.root_dir={root}/other", "files"),
    knob("trainer.default_local_dir={root}/mine", "files"),
    knob("trainer.log_freq=2", "metrics"),
    knob("trainer.save_freq=1", "files"),
    knob("trainer.resume_mode=disable", "exit", first=()),
    knob(f"trainer.resume_from_path={STEP}1", "metrics", *CKPT, *RESUME, f"trainer.resume_from_path={STEP}2", first=CKPT),
    knob("trainer.checkpoint_dir={root}/checkpoints", "files", *CKPT),
    knob("trainer.max_actor_ckpt_to_keep=1", "files", *CKPT),
    knob("trainer.max_critic_ckpt_to_keep=1", "files", *CKPT, *CRITIC),
    knob("trainer.del_local_ckpt_after_load=true", "files", *CKPT, *RESUME, f"trainer.resume_from_path={STEP}1", first=CKPT),
    knob("trainer.save_hf_checkpoint=always", "files", *CKPT),
    # profiler
    knob("profiler.tool=torch_memory", "files", *PROF),
    knob("profiler.steps=[2]", "files", *PROF),
    knob("profiler.profile_continuous_steps=true", "files", *PROF, "profiler.steps=[1,2]"),
    knob("profiler.save_path={root}/traces", "files", *PROF),
    knob("actor.profiler.enable=true", "files", *PROF_D[:2], "actor.profiler.discrete=true", *REF, "ref.profiler.enable=true", "ref.profiler.discrete=true"),
    knob("ref.profiler.enable=true", "files", *PROF_D, *REF, "ref.profiler.discrete=true"),
    knob("critic.profiler.enable=true", "files", *PROF_D, *CRITIC, "critic.profiler.discrete=true"),
    knob("reward.reward_model.profiler.enable=true", "files", *PROF_D, "reward.reward_model.profiler.discrete=true"),
    knob("actor.profiler.discrete=true", "files", *PROF),
    knob("ref.profiler.discrete=true", "files", *PROF[:2], *REF, "ref.profiler.enable=true"),
    knob("critic.profiler.discrete=true", "files", *PROF[:2], *CRITIC, "critic.profiler.enable=true"),
    knob("reward.reward_model.profiler.discrete=true", "files", *PROF[:2], "reward.reward_model.profiler.enable=true"),
    # cluster: the batch arithmetic of the checks (one process on CPU)
    knob("cluster.nnodes=3", "exit", "cluster.n_gpus_per_node=1", "cluster.launcher=local"),  # refused at once: local processes are one machine
    knob("cluster.n_gpus_per_node=3", "files"),  # three worker processes, three rank logs (the mini-batch is split unevenly)
    # prepare
    knob("prepare.model.path={root}/prepared_model", "files"),
    knob("prepare.model.tiny.layers=2", "files", *PREP_MODEL),
    knob("prepare.model.tiny.hidden=32", "files", *PREP_MODEL),
    knob("prepare.model.tiny.heads=2", "files", *PREP_MODEL),
    knob("prepare.model.tiny.kv_heads=2", "files", *PREP_MODEL),
    knob("prepare.model.tiny.intermediate=8", "files", *PREP_MODEL),
    knob("prepare.model.tiny.vocab=128", "files", *PREP_MODEL),
    knob("prepare.model.tiny.max_position=64", "files", *PREP_MODEL),
    knob("prepare.model.tiny.tie_embeddings=true", "files", *PREP_MODEL),
    knob("prepare.model.tiny.seed=1", "files", *PREP_MODEL),
    knob("prepare.data.dir={root}/prepared_data", "files"),
    knob("prepare.data.task=countdown", "files", *PREP_DATA),
    knob("prepare.data.options={length: 3}", "files", *PREP_DATA),
    knob("prepare.data.train=9", "files", *PREP_DATA),
    knob("prepare.data.test=5", "files", *PREP_DATA),
    knob("prepare.data.sft=4", "files", *PREP_DATA),
    knob("prepare.data.dpo=4", "files", *PREP_DATA),
    knob("prepare.data.seed=1", "files", *PREP_DATA),
    knob("stages=[{name: first}, {name: second}]", "files"),
]

SHARDING, PLACEMENT, LAUNCH = (f"tests/cluster/{m}.py" for m in ("test_sharding_and_sync", "test_placement", "test_launch"))
DECOUPLED, SYNC = (f"tests/buffer/{m}.py" for m in ("test_decoupled_runs", "test_sync_settings"))
PROFILING, PROFILED = "tests/trainer/test_profiling.py", ("actor", "ref", "critic", "reward.reward_model")
ROUTING = "tests/rewards/test_reward_routing.py"
ENGINES = "tests/rollout/"
FSDP_KEYS = ("param_offload", "optimizer_offload", "offload_policy", "reshard_after_forward", "forward_prefetch", "fsdp_size",
             "min_num_params", "transformer_layer_cls_to_wrap", "mixed_precision.reduce_dtype")

# Keys a named test varies and checks the effect of (module path, test function).
AGENTIC = "tests/trainer/test_agentic.py"
AGENTIC_TESTS = {
    **{k: "test_tags_groups_partition_and_group_size_lay_out_the_step" for k in ("tags", "num_env_groups", "num_groups_partition", "group_size")},
    "format_penalty": "test_the_score_is_the_trajectory_reward_with_the_format_penalty",
    "max_env_num_per_worker": "test_max_env_num_per_worker_splits_each_turn_into_generate_calls",
    "max_traj_per_env": "test_each_env_plays_the_episodes_the_batch_needs_up_to_max_traj_per_env",
    "max_new_tokens": "test_max_new_tokens_caps_each_action_of_the_managers_environments",
}

KERNELS = "tests/workers/test_kernel_flags.py"
ULYSSES = "tests/cluster/test_ulysses.py::test_each_role_splits_by_its_own_key_and_the_reference_follows_the_actor"
DISTILL = "tests/trainer/test_distill.py"
ELSEWHERE = {
    # an agentic stage's episodes: the harness's single-turn rows have no actions to check
    "algorithm.valid_actions_mask": "tests/algorithms/test_sample_controls.py::test_valid_actions_mask_leaves_episodes_with_a_malformed_action_out_of_the_losses",
    # several distillation teachers: each row's advantage is recomputed from its own teacher (routing by
    # tag_included) with that teacher's model (model_path) and kl_coef (0.5 against the default 1.0)
    **{key: "tests/trainer/test_teachers.py::test_two_teachers_on_two_domains_train_two_steps_and_log"
       for key in ("ref.teachers", "ref.teachers.*.model_path", "ref.teachers.*.kl_coef", "ref.teachers.*.tag_included")},
    # the external engine (rollout.name=external, bench only) against scripted and posttrain-served endpoints
    "rollout.external.model_name": "tests/rollout/test_external_engine.py::test_each_row_is_one_request_with_the_model_key_and_n",
    "rollout.external.max_retries": "tests/rollout/test_external_engine.py::test_busy_answers_are_retried_max_retries_times",
    "rollout.external.timeout_s": "tests/rollout/test_external_engine.py::test_a_slow_answer_past_timeout_s_fails",
    **{key: "tests/trainer/test_bench_external.py::test_a_missing_environment_variable_is_one_line_naming_it"
       for key in ("rollout.external.base_url_env", "rollout.external.api_key_env")},
    # the warm-up's rounding and the critic's schedule length are derived numbers: the test varies each key
    **{key: "tests/config/test_config_derive_plan.py::test_lr_schedule_unit_update_counts_optimizer_updates"
       for key in ("actor.optim.lr_warmup_rounding", "critic.optim.lr_warmup_rounding", "critic.optim.lr_schedule_unit")},
    # a fixed schedule length in updates (ROLL's horizon with step env managers): the LR per update is hand-computed
    **{key: "tests/config/test_config_derive_plan.py::test_lr_schedule_updates_fixes_the_schedules_length_and_the_lr_holds_past_it"
       for key in ("actor.optim.lr_schedule_updates", "critic.optim.lr_schedule_updates")},
    # `posttrain eval` reads the file of generated responses these name; the tests score it with each changed
    "eval.path": "tests/trainer/test_offline_eval.py::test_two_data_sources_give_the_exact_table",
    "eval.response_key": "tests/trainer/test_offline_eval.py::test_the_eval_keys_choose_the_columns",
    "eval.data_source_key": "tests/trainer/test_offline_eval.py::test_the_eval_keys_choose_the_columns",
    "eval.reward_model_key": "tests/trainer/test_offline_eval.py::test_the_eval_keys_choose_the_columns",
    # sequence parallelism needs several worker processes: the 2-process tests set each key
    "actor.ulysses_sequence_parallel_size": f"{LAUNCH}::test_sequence_parallel_workers_train_as_one_process",
    "ref.ulysses_sequence_parallel_size": ULYSSES,
    "critic.ulysses_sequence_parallel_size": ULYSSES,
    # the LM-head and memory flags give the same numbers by design: unit tests show the path they take
    "actor.entropy_checkpointing": "tests/models/test_head_kernels.py::test_entropy_checkpointing_gives_the_same_numbers_and_recomputes_the_entropy",
    "model.use_fused_kernels": f"{KERNELS}::test_the_config_reaches_every_role",
    "model.fused_kernel_impl_backend": f"{KERNELS}::test_what_the_fused_head_cannot_do_is_refused_at_load",
    "model.enable_activation_offload": f"{KERNELS}::test_the_config_reaches_every_role",
    "critic.model.enable_activation_offload": f"{KERNELS}::test_the_config_reaches_every_role",
    "model.use_liger": f"{KERNELS}::test_liger_is_reported_once_where_it_cannot_run_and_applied_where_it_can",
    "reward.reward_model.use_remove_padding": "tests/rewards/test_reward_model_packed.py::test_the_key_reaches_the_reward_stage_s_scorer",
    "trainer.worker_nsight_options": "tests/cluster/test_nsight.py::test_workers_start_under_nsys_with_the_options",
    "env.render_save_dir": "tests/trainer/test_agentic.py::test_render_save_dir_writes_each_validation_episode_as_text_frames",
    "explorer.env_vars": "tests/trainer/test_explorer_env.py::test_the_reward_function_of_a_run_sees_the_variables",
    "data.sft_loss_turns": "tests/data/test_data_sft_dpo.py::test_sft_loss_turns_last_trains_only_the_final_message",
    "data_processor.experience_pipeline.operators": "tests/trainer/test_algorithm_parts.py::test_the_experience_pipeline_runs_between_reward_and_training",
    "buffer.trainer_input.experience_buffer.capacity": "tests/buffer/test_replay.py::test_capacity_makes_the_explorer_wait_for_the_trainer",
    "buffer.trainer_input.experience_buffer.replay_buffer.enable": "tests/buffer/test_replay.py::test_a_train_run_replays_an_explored_buffer_past_its_batches",
    "buffer.trainer_input.experience_buffer.replay_buffer.reuse_cooldown_time": "tests/buffer/test_replay.py::test_cooldown_no_reuse_use_count_limit_and_capacity",
    "buffer.trainer_input.experience_buffer.replay_buffer.priority_fn": "tests/buffer/test_replay.py::test_cooldown_no_reuse_use_count_limit_and_capacity",
    "buffer.trainer_input.experience_buffer.replay_buffer.priority_fn_args": "tests/buffer/test_replay.py::test_cooldown_no_reuse_use_count_limit_and_capacity",
    "explorer.bench_on_latest_checkpoint": "tests/trainer/test_bench.py::test_bench_writes_a_table_for_three_checkpoints",
    "explorer.proxy_port": "tests/trainer/test_serve_mode.py::test_served_calls_become_the_batches_a_train_run_learns_from_and_its_checkpoint_is_served",
    "explorer.listen_address": "tests/trainer/test_serve_mode.py::test_served_calls_become_the_batches_a_train_run_learns_from_and_its_checkpoint_is_served",
    "explorer.service_status_check_interval": "tests/trainer/test_serve_mode.py::test_served_calls_become_the_batches_a_train_run_learns_from_and_its_checkpoint_is_served",
    "explorer.db_url": "tests/trainer/test_serve_mode.py::test_served_calls_become_the_batches_a_train_run_learns_from_and_its_checkpoint_is_served",
    "explorer.max_timeout": "tests/trainer/test_explorer_deadline.py::test_a_tiny_timeout_changes_what_the_step_trains_on",
    "explorer.max_retry_times": "tests/trainer/test_explorer_deadline.py::test_a_late_group_is_generated_again_then_left_out",
    "explorer.over_rollout.ratio": "tests/trainer/test_over_rollout.py::test_over_rolled_groups_are_left_out_and_the_step_trains_on_the_rest",
    "explorer.over_rollout.wait_after_min": "tests/trainer/test_over_rollout.py::test_the_engine_cuts_the_groups_after_the_first_and_the_wait_decides_when",
    "algorithm.adv_estimator_args": "tests/trainer/test_algorithm_parts.py::test_estimator_options_and_old_logprobs_reach_the_estimator",
    "algorithm.gdpo_reward_keys": "tests/trainer/test_gdpo_rewards.py::test_training_batches_carry_the_components_and_the_advantage_normalises_each",
    "algorithm.gdpo_reward_weights": "tests/trainer/test_gdpo_rewards.py::test_training_batches_carry_the_components_and_the_advantage_normalises_each",
    "actor.policy_loss.loss_args": "tests/trainer/test_algorithm_parts.py::test_estimator_and_loss_options_are_checked_by_name",
    "ref.model_path": "tests/trainer/test_algorithm_parts.py::test_a_teacher_is_the_reference_and_its_vocabulary_is_checked",
    "algorithm.mix.expert_files": "tests/trainer/test_algorithm_parts.py::test_mix_trains_expert_rows_by_likelihood",
    "algorithm.mix.expert_batch_size": "tests/trainer/test_algorithm_parts.py::test_mix_trains_expert_rows_by_likelihood",
    "algorithm.mix.expert_epochs": "tests/trainer/test_algorithm_parts.py::test_expert_epochs_bound_the_steps_a_stage_may_run",
    "algorithm.mix.prompt_key": "tests/trainer/test_algorithm_parts.py::test_expert_files_are_read_with_the_mix_sections_column_keys",
    "algorithm.mix.response_key": "tests/trainer/test_algorithm_parts.py::test_expert_files_are_read_with_the_mix_sections_column_keys",
    "algorithm.mix.messages_key": "tests/trainer/test_algorithm_parts.py::test_expert_files_are_read_with_the_mix_sections_column_keys",
    "algorithm.mix.image_key": "tests/vision/test_vision_expert_rows.py::test_expert_rows_carry_their_images_and_their_logprobs_are_the_models_own",
    "data.custom_cls.path": "tests/data/test_data_custom_cls.py::test_custom_class_is_loaded_and_built_with_files_tokenizer_config",
    "data.custom_cls.name": "tests/data/test_data_custom_cls.py::test_custom_class_is_loaded_and_built_with_files_tokenizer_config",
    "data.prompt_key": "tests/data/test_data_rl.py::test_string_prompt_system_prompt_and_optional_outputs",
    "data.response_key": "tests/data/test_data_rl.py::test_string_prompt_system_prompt_and_optional_outputs",
    "data.prompt_dict_keys": "tests/data/test_data_rl.py::test_messages_key_and_prompt_dict_keys",
    "data.messages_key": "tests/data/test_data_rl.py::test_messages_key_and_prompt_dict_keys",
    "data.system_prompt_key": "tests/data/test_data_rl.py::test_system_prompt_key_wins_and_existing_system_message_is_kept",
    "data.query_key": "tests/data/test_data_sft_dpo.py::test_query_key_joins_the_query_to_the_prompt_after_a_newline",
    "data.sft_trim_final_newline": "tests/data/test_data_sft_dpo.py::test_sft_trim_final_newline_ends_the_sequence_at_the_end_of_turn",
    "actor.sft_loss_scope": "tests/trainer/test_sft.py::test_micro_batch_scope_averages_each_micro_batch_s_token_mean_as_verl_s_sft_trainer",
    "data.reward_fn_key": "tests/data/test_data_rl.py::test_bad_reward_model_and_explicit_reward_fn_key",
    "data.response_dict_keys": "tests/data/test_data_sft_dpo.py::test_response_dict_keys",
    "data.chosen_key": "tests/data/test_data_sft_dpo.py::test_dpo_custom_keys_and_missing_column",
    "data.rejected_key": "tests/data/test_data_sft_dpo.py::test_dpo_custom_keys_and_missing_column",
    "data.chat_template_name": "tests/data/test_data_templates.py::test_chatml_writes_its_own_template",
    "data.enable_thinking": "tests/data/test_data_templates.py::test_enable_thinking_qwen3_and_template_kwargs",
    "data.reply_prefix": "tests/data/test_data_templates.py::test_reply_prefix_opens_the_assistant_turn",
    "critic.model.tokenizer_path": "tests/trainer/test_rl_build.py::test_a_critic_tokenizer_with_another_vocabulary_is_refused",
    # 27 s of compilation on 2 cores: its own test checks the compiled forward is chosen per role
    "actor.use_torch_compile": "tests/trainer/test_use_torch_compile.py::test_the_flag_selects_the_compiled_lean_forward_per_role",
    # the reward model's own classes and chat template: unit tests with a tiny reward model
    "reward.reward_model.external_lib": "tests/rewards/test_reward_model.py::test_external_lib_registers_the_reward_model_s_class_before_it_loads",
    "reward.launch_reward_fn_async": "tests/trainer/test_async_reward.py::test_a_run_scoring_in_the_background_trains_and_logs_as_one_scoring_in_place",
    "model.trust_remote_code": "tests/trainer/test_trust_remote_code.py::test_trust_remote_code_runs_the_policy_s_and_the_critic_s_shipped_code",
    "critic.model.trust_remote_code": "tests/trainer/test_trust_remote_code.py::test_trust_remote_code_runs_the_policy_s_and_the_critic_s_shipped_code",
    "reward.reward_model.trust_remote_code": "tests/rewards/test_reward_model.py::test_trust_remote_code_runs_the_code_shipped_in_the_reward_model_s_directory",
    "reward.reward_model.truncation": "tests/rewards/test_reward_model.py::test_truncation_right_keeps_the_beginning_and_error_stops",
    "reward.reward_model.param_offload": "tests/rewards/test_reward_model.py::test_param_offload_moves_the_weights_to_the_device_for_each_pass_only",
    "reward.reward_model.input_tokenizer": "tests/trainer/test_rewarding.py::test_input_tokenizer_re_renders_the_conversation_in_the_reward_model_s_own_template",
    # a reward function that hangs: seconds of waiting
    "reward.timeout_s": "tests/rewards/test_reward_parallel.py::test_hanging_call_times_out_and_the_pool_stays_usable",
    # the keys of one reward worker (reward.workers.<name>.<key>): unit tests of the router
    **{f"reward.workers.*.{k}": f"{ROUTING}::{test}" for k, test in {
        "worker_cls": "test_worker_cls_forms_and_kwargs", "reward_kwargs": "test_worker_cls_forms_and_kwargs",
        "tag_included": "test_each_sample_goes_to_the_workers_of_its_tag_and_their_scores_add",
        "weight": "test_each_sample_goes_to_the_workers_of_its_tag_and_their_scores_add",
        "response_length_penalty_coef": "test_the_response_length_penalty_follows_roll",
        "world_size": "test_world_size_gives_the_worker_a_pool_of_its_own",
    }.items()},
    "data.domain_interleave_probs": "tests/data/test_data_domains.py::test_the_training_sampler_draws_by_domain_from_the_files",
    "data.interleave_probs": "tests/data/test_data_interleave.py::test_rows_are_drawn_by_file_with_the_probabilities",
    "data.selector.feature_keys": "tests/data/test_data_selectors.py::test_a_changed_key_changes_the_rows",
    **{f"data.selector.{k}": "tests/data/test_data_selectors.py::test_each_bots_argument_changes_the_posterior_or_the_rows"
       for k in ("m", "lamb", "rho", "adaptive_rho", "tau", "do_sample", "target_reward")},
    "data.tools_key": "tests/data/test_data_row_templates.py::test_each_rows_tools_reach_the_chat_template",
    "data.val_file_keys": "tests/data/test_data_val_file_keys.py::test_an_entry_is_read_with_its_own_columns",
    "explorer.task_rewards_file": "tests/trainer/test_task_rewards_file.py::test_every_explored_task_appends_its_rewards",
    "data.val_file_settings": "tests/data/test_val_file_settings.py::test_an_entry_is_prompted_with_its_own_template",
    "data.val_file_settings.*.chat_template": "tests/data/test_val_file_settings.py::test_an_entry_is_prompted_with_its_own_template",
    "data.val_file_settings.*.overlong_penalty": "tests/data/test_val_file_settings.py::test_an_entry_is_scored_with_its_own_overlong_penalty",
    "data.prompt_format": "tests/data/test_data_tool_n1.py::test_a_tool_n1_row_becomes_its_conversation",
    "data.user_suffix": "tests/data/test_data_tool_n1.py::test_user_suffix_follows_every_user_message",
    "data.tag_to_template": "tests/data/test_data_row_templates.py::test_a_tags_template_renders_its_rows",
    "rollout.stop_strings": "tests/rollout/test_stop_strings.py::test_configured_stop_strings_end_responses_and_false_leaves_them_out",
    "rollout.include_stop_str_in_output": "tests/rollout/test_stop_strings.py::test_configured_stop_strings_end_responses_and_false_leaves_them_out",
    "reward.workers.*.reward_type": "tests/rewards/test_reward_scorers.py::test_reward_type_picks_the_reward_table_of_a_worker",
    "reward.workers.*.use_local": "tests/trainer/test_reward_workers.py::test_roll_s_remote_code_sandbox_is_refused_by_name",  # true is the only behaviour
    "data.image_key": "tests/vision/test_vision_data.py::test_image_rows_become_prompts_with_one_pad_token_per_merged_patch",
    "data.image_min_pixels": "tests/vision/test_vision_data.py::test_pixel_bounds_set_how_many_image_tokens_a_row_gets",
    "data.image_max_pixels": "tests/vision/test_vision_data.py::test_pixel_bounds_set_how_many_image_tokens_a_row_gets",
    "data.video_key": "tests/vision/test_video_rows.py::test_grpo_on_videos_runs_two_steps",
    "data.video_folder": "tests/vision/test_video_rows.py::test_video_rows_become_prompts_and_the_video_keys_change_frames_and_pixels",
    "data.video_fps": "tests/vision/test_video_rows.py::test_video_rows_become_prompts_and_the_video_keys_change_frames_and_pixels",
    "data.video_min_frames": "tests/vision/test_video_rows.py::test_video_rows_become_prompts_and_the_video_keys_change_frames_and_pixels",
    "data.video_max_frames": "tests/vision/test_video_rows.py::test_video_rows_become_prompts_and_the_video_keys_change_frames_and_pixels",
    "data.video_min_pixels": "tests/vision/test_video_rows.py::test_video_rows_become_prompts_and_the_video_keys_change_frames_and_pixels",
    "data.video_max_pixels": "tests/vision/test_video_rows.py::test_video_rows_become_prompts_and_the_video_keys_change_frames_and_pixels",
    "data.video_total_pixels": "tests/vision/test_video_rows.py::test_video_rows_become_prompts_and_the_video_keys_change_frames_and_pixels",
    **{f"reward.workers.*.{k}": f"tests/rewards/test_reward_judge.py::{test}" for k, test in {
        "judge_prompt": "test_a_fake_engine_s_answers_become_scores_and_an_unparsable_one_is_counted",
        "judge_model_type": "test_judge_keys_are_checked_at_load",
        "model_args": "test_judge_spec_checks_keys_without_loading",
        "generating_args": "test_a_tiny_model_judges_through_the_hf_engine",
        "infer_batch_size": "test_a_tiny_model_judges_through_the_hf_engine",
        "chat_template_name": "test_chat_template_name_changes_the_judge_prompt_s_token_ids",
    }.items()},
    # the judge's engine (vllm/sglang need a GPU: their options are checked at the constructor's keywords)
    **{f"reward.workers.*.engine.{k}": f"tests/rewards/test_judge_engine.py::{test}" for k, test in {
        "name": "test_a_vllm_judge_is_built_through_the_engine_registry_and_sleeps_between_scorings",
        "free_cache_engine": "test_a_vllm_judge_is_built_through_the_engine_registry_and_sleeps_between_scorings",
        **{k: "test_the_judge_s_engine_options_reach_vllm_as_the_rollout_s_do" for k in (
            "tensor_model_parallel_size", "gpu_memory_utilization", "max_model_len", "enforce_eager", "max_num_batched_tokens", "kwargs")},
    }.items()},
    "data.extra_info_keys": "tests/data/test_extra_info_keys.py::test_listed_columns_are_copied_into_extra_info",
    # the policy as its own judge (posttrain.trainer.self_judge)
    "reward.self_judge.enable": "tests/trainer/test_self_judge.py::test_a_real_step_trains_the_judge_rows_only_where_the_gold_counts",
    "reward.self_judge.gold_probability": "tests/trainer/test_self_judge.py::test_a_real_step_trains_the_judge_rows_only_where_the_gold_counts",
    "reward.self_judge.gold_range": "tests/trainer/test_self_judge.py::test_blind_groups_take_the_verdict_and_gold_groups_train_the_judge",
    "reward.self_judge.instructions": "tests/trainer/test_self_judge.py::test_blind_groups_take_the_verdict_and_gold_groups_train_the_judge",
    "reward.auxiliary_models": "tests/trainer/test_reward_workers.py::test_a_ruler_judge_over_a_served_auxiliary_model_scores_its_tag_in_a_training_step",
    # auxiliary models (reward.auxiliary_models.<name>.<key>): built through the judge's engine builder, served to chat judges
    **{f"reward.auxiliary_models.*.{k}": "tests/rewards/test_chat_judges.py::test_an_auxiliary_model_s_path_dtype_and_engine_options_build_its_engine"
       for k in ("model_path", "dtype", *(f"engine.{e}" for e in ("name", "tensor_model_parallel_size", "gpu_memory_utilization", "max_model_len",
                                                                     "enforce_eager", "max_num_batched_tokens", "free_cache_engine", "kwargs")))},
    **{f"reward.sandbox_fusion.{k}": f"tests/rewards/test_reward_sandbox_remote.py::{test}" for k, test in {
        "url": "test_the_url_reaches_the_code_worker_and_needs_one",
        "memory_limit_mb": "test_the_url_reaches_the_code_worker_and_needs_one",
        "max_concurrent": "test_max_concurrent_bounds_the_requests_in_flight",
    }.items()},
    **{f"reward.workers.*.query_filter_config.{k}": "tests/trainer/test_reward_workers.py::test_query_filter_thresholds_choose_which_groups_train"
       for k in ("type", "filter_args")},
    # DAPO dynamic sampling: a step's rounds, metrics and error (the harness's random model scores acc 0 everywhere)
    **{f"algorithm.filter_groups.{k}": "tests/trainer/test_dynamic_sampling.py::test_a_step_samples_more_prompts_until_its_groups_are_informative"
       for k in ("enable", "metric", "max_num_gen_batches")},
    "data.gen_batch_size": "tests/trainer/test_dynamic_sampling.py::test_a_step_samples_more_prompts_until_its_groups_are_informative",
    "algorithm.filter_groups.std_threshold": "tests/trainer/test_dynamic_sampling.py::test_a_std_threshold_keeps_groups_of_two_or_more_spread_beyond_it",
    # several worker processes: the harness runs one process in-process
    **{f"actor.fsdp_config.{k}": f"{SHARDING}::test_each_fsdp_key_changes_the_sharding" for k in FSDP_KEYS},
    **{f"{role}.fsdp_config.{k}": f"{SHARDING}::test_each_role_is_sharded_by_its_own_fsdp_config_and_balance_batch_splits_by_tokens"
       for role in ("ref", "critic") for k in FSDP_KEYS},
    "trainer.balance_batch": f"{SHARDING}::test_each_role_is_sharded_by_its_own_fsdp_config_and_balance_batch_splits_by_tokens",
    "cluster.device_mapping.critic": f"{PLACEMENT}::test_a_colocated_device_mapping_is_the_same_placement_as_devices_per_node",
    # the reference on devices of its own: a crew of processes (the harness runs one process)
    "cluster.device_mapping.ref": "tests/trainer/test_reference_crew_runs.py::test_a_reference_crew_trains_what_the_colocated_reference_trains",
    "cluster.device_mapping.actor": f"{DECOUPLED}::test_split_placement_trains_on_policy_as_the_synchronous_loop",
    "cluster.device_mapping.rollout": f"{DECOUPLED}::test_split_placement_trains_on_policy_as_the_synchronous_loop",
    "cluster.launcher": f"{PLACEMENT}::test_one_process_by_default_and_n_local_workers_per_device",
    "cluster.device": f"{PLACEMENT}::test_cuda_is_refused_without_a_gpu",
    "cluster.env_vars": f"{LAUNCH}::test_env_vars_reach_every_worker_and_each_writes_its_own_trace_of_a_profiled_step",
    "cluster.rpc_timeout_s": f"{LAUNCH}::test_a_hung_worker_is_named_once_its_peers_time_out",
    "cluster.ray_address": f"{LAUNCH}::test_ray_refuses_what_it_cannot_place_or_reach",
    "cluster.ray_num_cpus": f"{LAUNCH}::test_ray_refuses_what_it_cannot_place_or_reach",
    "cluster.register_timeout_s": f"{LAUNCH}::test_ray_refuses_what_it_cannot_place_or_reach",
    "cluster.ray_namespace": f"{LAUNCH}::test_ray_workers_name_a_killed_worker_and_the_rerun_trains_as_one_process",
    "cluster.ray_timeline_file": f"{LAUNCH}::test_ray_workers_name_a_killed_worker_and_the_rerun_trains_as_one_process",
    # the explorer and trainer processes of a decoupled run (the harness runs one process)
    "trainer.mode": f"{DECOUPLED}::test_explore_then_train_trains_every_stored_batch_once",
    "rollout.hybrid_engine": f"{SYNC}::test_interval_and_offset_decide_the_split_and_the_staleness_bound",
    "actor.freeze_module_prefix": "tests/trainer/test_freeze_prefix.py::test_frozen_prefixes_keep_their_values_through_an_update_and_the_rest_trains",
    "actor.freeze_vision_tower": "tests/vision/test_vision_training.py::test_freeze_vision_tower_keeps_the_tower_and_trains_the_rest",
    "synchronizer.sync_interval": f"{SYNC}::test_interval_and_offset_decide_the_split_and_the_staleness_bound",
    "synchronizer.sync_offset": f"{SYNC}::test_interval_and_offset_decide_the_split_and_the_staleness_bound",
    "synchronizer.sync_timeout": f"{SYNC}::test_the_explorer_waits_sync_timeout_for_fresh_weights_then_names_the_trainer",
    "synchronizer.sync_style": "tests/buffer/test_sync_styles.py::test_a_slow_trainer_fixed_waits_for_its_schedule_dynamic_by_explorer_takes_what_is_trained",
    "buffer.trainer_input.experience_buffer.name": f"{SYNC}::test_the_buffer_file_is_named_by_the_buffer_name_unless_a_path_is_given",
    "buffer.trainer_input.experience_buffer.path": f"{DECOUPLED}::test_explore_then_train_trains_every_stored_batch_once",
    "buffer.trainer_input.experience_buffer.max_read_timeout": f"{DECOUPLED}::test_explore_then_train_trains_every_stored_batch_once",
    # rollout engines: the name picks one (a GPU engine is refused on this machine); the vLLM/SGLang
    # settings reach those libraries' constructors (stand-in modules: the libraries do not run here)
    "rollout.name": f"{ENGINES}test_engines.py::test_rollout_name_picks_the_engine_and_plan_names_what_the_machine_lacks",
    "rollout.free_cache_engine": "tests/trainer/test_rl_build.py::test_free_cache_engine_sleeps_the_engine_between_generations",
    **{f"rollout.{k}": f"{ENGINES}test_vllm_adapter.py::test_rollout_keys_become_llm_arguments" for k in (
        "tensor_model_parallel_size", "gpu_memory_utilization", "enforce_eager", "load_format", "max_model_len",
        "max_num_batched_tokens", "enable_chunked_prefill", "disable_log_stats", "engine_kwargs.vllm")},
    "rollout.engine_kwargs.sglang": f"{ENGINES}test_sglang_adapter.py::test_rollout_keys_become_engine_arguments",
    "rollout.update_weights_bucket_megabytes": f"{ENGINES}test_vllm_adapter.py::test_build_sends_the_policy_weights_only_with_a_dummy_load_format",
    # agentic stages: the harness plays no environment; the mapping of each grouping to rows
    **{f"algorithm.agentic_reward_norm.{k}": "tests/algorithms/test_agentic_norm.py::test_grouping_picks_the_environment_group_the_tag_or_the_batch" if k in ("grouping", "method") else "tests/algorithms/test_agentic_norm.py::test_the_scope_keys_reach_the_scores_and_a_roll_file_sets_them"
       for k in ("grouping", "method", "norm_mean_type", "norm_std_type")},
    # the log files of a run of several processes, and what posttrain's loggers write
    "log.dir": "tests/cluster/test_process_logs.py::test_the_local_launcher_writes_the_workers_logs_where_log_says",
    "log.group_by_node": "tests/cluster/test_process_logs.py::test_log_dir_and_group_by_node_place_each_process_s_file",
    "log.level": "tests/cluster/test_process_logs.py::test_log_level_decides_which_records_posttrain_s_loggers_write",
    # needs an adapter written by an earlier run
    "model.lora_adapter_path": "tests/trainer/test_lora_rl.py::test_a_run_starts_from_an_adapter_given_by_lora_adapter_path",
    # profiling: what a trace holds, which of several workers profile, the CUDA memory history (GPU only)
    "actor.profiler.contents": f"{PROFILING}::test_continuous_steps_share_one_trace_under_save_path",  # stack: ::test_a_run_without_profiling_makes_no_profiler
    **{f"{role}.profiler.contents": f"{PROFILING}::test_discrete_traces_are_one_per_phase_of_each_enabled_role" for role in PROFILED[1:]},
    **{f"{role}.profiler.{key}": f"{PROFILING}::test_ranks_and_all_ranks_choose_the_workers_that_profile_a_role"
       for role in PROFILED for key in ("ranks", "all_ranks")},
    **{f"profiler.torch_memory.{key}": f"{PROFILING}::test_the_cuda_memory_history_gets_the_torch_memory_options"
       for key in ("trace_alloc_max_entries", "context", "stacks")},
    # agentic stages: the harness's runs answer prompts from files, these play environments
    "env.custom_envs": f"{AGENTIC}::test_tags_groups_partition_and_group_size_lay_out_the_step",
    **{f"env.train_env_manager.{k}": f"{AGENTIC}::{test}" for k, test in AGENTIC_TESTS.items()},
    **{f"env.val_env_manager.{k}": f"{AGENTIC}::test_validation_reports_success_per_tag_over_the_val_manager_groups"
       for k in AGENTIC_TESTS if k not in ("max_traj_per_env", "max_new_tokens")},
    "env.val_env_manager.max_new_tokens": f"{AGENTIC}::test_max_new_tokens_caps_each_action_of_the_managers_environments",
    # tool calling: unit tests of the tool rollout on a scripted engine, and the RL stage with the tools
    "rollout.multi_turn.enable": "tests/trainer/test_tool_stage.py::test_enable_plays_conversations_with_the_tools_and_scores_them_with_the_reward_function",
    "rollout.multi_turn.format": "tests/trainer/test_tool_stage.py::test_tool_calling_mistakes_are_named_before_a_model_loads",
    **{f"rollout.multi_turn.{k}": f"tests/rollout/test_tool_loop.py::{test}" for k, test in {
        "tool_config_path": "test_a_call_runs_the_tool_and_only_the_model_tokens_train",
        "max_assistant_turns": "test_max_assistant_turns_and_max_user_turns_end_the_conversation",
        "max_user_turns": "test_max_assistant_turns_and_max_user_turns_end_the_conversation",
        "max_parallel_calls": "test_max_parallel_calls_runs_that_many_calls_of_a_turn",
        "max_tool_response_length": "test_a_long_tool_response_is_truncated_on_the_configured_side",
        "tool_response_truncate_side": "test_a_long_tool_response_is_truncated_on_the_configured_side",
        "interaction_config_path": "test_an_interaction_answers_turns_without_tool_calls",
        "use_inference_chat_template": "test_use_inference_chat_template_re_renders_the_history",
        "tokenization_sanity_check_mode": "test_tokenization_sanity_check_counts_conversations_the_template_renders_otherwise",
    }.items()},
    "env.val_env_manager.max_traj_per_env": f"{AGENTIC}::{AGENTIC_TESTS['max_traj_per_env']}",
    # agent functions (rollout.agent): the stage test runs one, the unit tests vary its limits
    "rollout.agent.function": "tests/trainer/test_agent_fn_stage.py::test_two_grpo_steps_train_on_every_call_of_the_agents_episodes",
    "rollout.agent.max_concurrency": "tests/rollout/test_agent_fn.py::test_max_concurrency_bounds_the_episodes_running_at_once",
    "rollout.agent.log_requests": "tests/agents/test_agentscope_frozenlake.py::test_log_requests_writes_one_line_per_request",
    "rollout.agent.val_kwargs": "tests/trainer/test_agent_fn_stage.py::test_val_kwargs_replace_kwargs_for_validation_episodes",
    "rollout.agent.kwargs": "tests/rollout/test_agent_fn.py::test_kwargs_reach_the_function_with_every_episode_and_a_name_it_does_not_take_is_refused",
    **{f"rollout.agent.{k}": "tests/rollout/test_agent_fn.py::test_a_failing_episode_is_dropped_or_penalised_and_too_many_stop_the_run"
       for k in ("timeout", "failure_penalty", "max_failure_rate")},
    **{f"rollout.agent.{k}": "tests/rollout/test_agent_tools.py::test_a_tool_choice_the_endpoint_cannot_honour_is_a_400_that_says_why"
       for k in ("tool_call_parser", "enable_auto_tool_choice")},
    "rollout.agent.reasoning_parser": "tests/rollout/test_agent_tools.py::test_the_reasoning_parser_key_changes_the_answer_and_calls_after_the_reasoning_are_read",
    **{f"env.{k}": f"{AGENTIC}::test_env_fault_keys_time_out_penalise_and_stop" for k in ("step_timeout", "failure_penalty", "max_failure_rate")},
    **{f"env.{k}": "tests/trainer/test_agentic_turn_rows.py::test_turn_rows_train_each_turn_and_count_mini_batches_in_turn_rows"
       for k in ("train_rows", "turn_mini_batch_size")},
    **{f"algorithm.gigpo.{k}": "tests/trainer/test_agentic_credit.py::test_gigpo_keys_change_the_step_advantages_as_the_formula_says"
       for k in ("step_weight", "episode_weight", "step_gamma")},
    **{f"rollout.trace.{k}": "tests/tracking/test_optional_trackers.py::test_rollout_traces_go_to_the_mlflow_store_tagged_as_verl_tags_them"
       for k in ("backend", "token2text")},
    "rollout.trace.max_samples_per_step_per_worker": "tests/tracking/test_optional_trackers.py::test_a_training_run_sends_the_same_metrics_and_samples_to_every_tracker",
    **{f"trainer.{k}": "tests/trainer/test_rollout_mock.py::test_a_replayed_run_trains_on_the_dumped_rollouts_and_reproduces_the_losses"
       for k in ("rollout_mock", "rollout_mock_dir")},
    # offline distillation (algorithm.kind distill): unit tests on one batch show each key's effect
    "algorithm.distill.teacher_path": f"{DISTILL}::test_the_checks_ask_for_a_teacher_and_keep_distill_keys_to_distill_stages",
    **{f"algorithm.distill.{k}": f"{DISTILL}::test_each_distill_key_changes_the_divergence_and_not_the_nll"
       for k in ("objective", "topk", "temperature", "teacher_temperature", "adaptive_alpha", "skew_lambda")},
    "algorithm.distill.weight": f"{DISTILL}::test_weight_mixes_the_two_token_means_and_the_split_changes_nothing",
    "algorithm.distill.on_prompt": f"{DISTILL}::test_on_prompt_trains_every_real_token",
    # ROLL's order of rejection: the test runs one step each way and compares the rejected tokens' advantages
    "algorithm.rollout_reject_after_advantages": "tests/trainer/test_rl_rollout_correction.py::test_rejection_after_the_advantages_leaves_them_counting_every_token",
}

# Keys whose requested behaviour posttrain always has (each field's doc says so): no effect, checked.
# A tuple is (overrides of both runs..., the change).
SAME_RESULT = {
    "model.use_shm": (*LORA, "model.use_shm=true"),
    "critic.model.use_shm": (*CRITIC, "critic.model.use_shm=true"),
    "data.use_shm": "data.use_shm=true",
    "reward.reward_model.use_shm": (*RM, "reward.reward_model.use_shm=true"),
    # a sequence classifier has no vocabulary softmax to fuse; the reference computes no entropy and no backward
    "reward.reward_model.use_fused_kernels": (*RM, "reward.reward_model.use_fused_kernels=true"),
    "ref.entropy_checkpointing": (*REF, "ref.entropy_checkpointing=true"),
    # the LoRA weight sync gathers one tensor at a time whatever it says
    "rollout.layered_summon": (*LORA, "rollout.layered_summon=true"),
    "rollout.calculate_log_probs": "rollout.calculate_log_probs=true",
    "actor.entropy_from_logits_with_chunking": "actor.entropy_from_logits_with_chunking=true",
    "ref.entropy_from_logits_with_chunking": "ref.entropy_from_logits_with_chunking=true",
    # in step nothing moves; in a decoupled run nccl sends over a process group and checkpoint writes files
    # (tests/buffer/test_decoupled_runs.py: the split run keeps no weights on disk, the lagging run writes them)
    "synchronizer.sync_method": "synchronizer.sync_method=checkpoint",
    # queue and sql are both the SQLite buffer (a decoupled run's; the synchronous loop has none)
    "buffer.trainer_input.experience_buffer.storage_type": "buffer.trainer_input.experience_buffer.storage_type=sql",
    # one process writes one checkpoint at a time: every strategy is met (several processes: tests/config)
    "trainer.save_strategy": (*CKPT, "trainer.save_strategy=single_thread"),
    # fsdp and fsdp2 both select FSDP2, posttrain's one sharding backend
    "actor.strategy": "actor.strategy=fsdp2",
    "ref.strategy": "ref.strategy=fsdp2",
    "critic.strategy": "critic.strategy=fsdp2",
}

# Keys no test can show the effect of yet, with the reason.
UNCOVERED = {
    "rollout.num_beams": "1 is its only accepted value (beam search gives no policy samples: tests/config/test_sections_workers.py refuses 4): nothing to vary",
    **{f"{role}.fsdp_config.mixed_precision.buffer_dtype": "fp32 is its only accepted value (FSDP2 has no buffer cast): nothing to vary"
       for role in ("actor", "ref", "critic")},
}


def honoured_keys() -> set[str]:
    return {path for path, info in iter_fields(Config) if section_class(info.type) is None and not info.todo}


def test_every_honoured_key_has_a_behaviour_test():
    tables = [{k.key for k in KNOBS}, set(ELSEWHERE), set(SAME_RESULT), set(UNCOVERED)]
    listed = set().union(*tables)
    assert sum(len(t) for t in tables) == len(listed), "a key is in two tables"
    assert listed - honoured_keys() == set(), "a table names a key that is not an honoured field"
    assert honoured_keys() - listed == set(), "these honoured keys have no behaviour test: add a KNOBS row"


def test_the_tests_named_elsewhere_exist():
    for key, where in ELSEWHERE.items():
        path, _, name = where.partition("::")
        assert f"\ndef {name}(" in (REPO / path).read_text(), f"{key}: {where} does not exist"
        assert key.rpartition(".")[2] in (REPO / path).read_text(), f"{key}: {where} does not set it"


@pytest.fixture(scope="module")
def harness(tmp_path_factory):
    """The assets and a cache of observations by (context, first run), one torch thread."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # the runs are tiny: one thread is fastest and the same every time
    assets = make_assets(tmp_path_factory.mktemp("knobs"))
    sys.path.insert(0, str(assets.root / "lib"))
    yield assets, {}
    sys.path.remove(str(assets.root / "lib"))
    torch.set_num_threads(threads)


def _observe(harness, overrides, first, name):
    assets, cache = harness
    key = (overrides, first)
    if key not in cache:
        cache[key] = observe(assets, overrides, f"{name}-{len(cache)}", first)
    return cache[key]


def test_two_runs_of_one_config_observe_the_same(harness):
    assert _observe(harness, (), None, "base") == observe(harness[0], (), "again")


@pytest.mark.parametrize("row", KNOBS, ids=lambda k: k.key)
def test_changing_the_key_changes_the_run(harness, row):
    base = _observe(harness, row.context, row.first, "base")
    changed = _observe(harness, row.context + row.change, row.first, "changed")
    assert base.exit[0] == 0 or row.observable == "exit", f"the run without the change failed: {base.exit}"
    assert getattr(changed, row.observable) != getattr(base, row.observable), (
        f"{' '.join(row.change)} changed no {row.observable} of the run (it changed: {changed.differences(base) or 'nothing'})"
    )


@pytest.mark.parametrize("key", sorted(SAME_RESULT))
def test_keys_posttrain_always_honours_change_nothing(harness, key):
    *context, change = (SAME_RESULT[key],) if isinstance(SAME_RESULT[key], str) else SAME_RESULT[key]
    base = _observe(harness, tuple(context), None, "base")
    assert base.exit[0] == 0, f"the run without the change failed: {base.exit}"
    assert _observe(harness, (*context, change), None, "same").differences(base) == []


def test_a_curriculum_sampler_sees_the_scores_computed_in_the_background_too(harness):
    # the step's update() must reach the sampler before it draws the next batch, however the reward ran
    sampler = "data.sampler={class_path: {data}/sampler.py, class_name: Rotating}"
    in_place = _observe(harness, (sampler,), None, "base")
    background = _observe(harness, (sampler, "reward.launch_reward_fn_async=true"), None, "async")
    assert in_place.exit[0] == 0 and background.exit[0] == 0, (in_place.exit, background.exit)
    assert background.prompts == in_place.prompts


def test_validation_generates_up_to_val_kwargs_response_length(harness):
    import ast

    def widths(obs):  # the response tensors' widths (padded to the longest response of a call)
        return {len(ast.literal_eval(call)[1][0]) for call in obs.validation}

    assert widths(_observe(harness, VAL, None, "base")) == {6}  # data.max_response_length
    assert widths(_observe(harness, (*VAL, "rollout.val_kwargs.response_length=2"), None, "changed")) == {2}
