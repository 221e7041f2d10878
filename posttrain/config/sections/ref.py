"""`ref`: the frozen reference policy used for KL terms.

The reference is created when a KL term needs it (actor.use_kl_loss or KL in the reward). It loads
the policy's initial weights with the same model options and only runs forward passes, so its
section holds batching for those passes and backend options. Fields left null follow the actor's
value, as verl's defaults interpolate them.

`UNSUPPORTED` lists reference keys that have no field here, each with the reason.
"""

from __future__ import annotations

from typing import Any

from posttrain.config.fields import param, section
from posttrain.config.sections.actor import NCCL_OFFLOAD, ROUTER_REPLAY, FsdpConfig, roll_worker_unsupported, verl_engine_keys, verl_role_keys
from posttrain.config.sections.data import TEMPLATE_UNREAD
from posttrain.config.sections.profiler import ProfilerConfig

_VERL = "verl:actor_rollout_ref.ref"


@section
class TeacherConfig:
    """One teacher of multi-teacher on-policy distillation (`ref.teachers`)."""

    model_path: str | None = param(None, doc="The teacher's weights (a model directory with the policy's vocabulary); required.", refs=["roll:teacher.<name>.model_args.model_name_or_path"])
    tag_included: list[str] = param(factory=list, doc="Tags (the data.reward_fn_key column) of the rows this teacher scores; a tag a reward worker holds stands for all that worker's tags (its domain), as ROLL routes rows. Empty: every row.", refs=["roll:teacher.<name>.tag_included"])
    kl_coef: float = param(1.0, doc="Weight of this teacher's term (log pi_teacher - log pi_student) in the advantage of the rows it scores.", ge=0, refs=["roll:teacher.<name>.opd_kl_coef"])


@section
class RefConfig:
    """The frozen reference policy (created when a KL term needs it)."""

    model_path: str | None = param(None, doc="Weights of the reference policy: null uses the policy's initial weights (model.path); a model directory makes it a teacher whose log-probs the estimators on_policy_distill and jsd read (on-policy distillation); the KL terms, when on, then measure the distance to the teacher. Its tokenizer must have the policy's vocabulary.")
    teachers: dict[str, TeacherConfig] = param(factory=dict, doc="Several teachers by name for algorithm.adv_estimator on_policy_distill (ROLL's multi-teacher distillation): each a frozen model on every trainer worker scoring only the rows of its tag_included; a row's advantage is the sum over the teachers that score it of kl_coef x (log pi_teacher - log pi_student), 0 when none does. Replaces ref.model_path and algorithm.adv_estimator_args.kl_coef; the batching and backend keys of this section apply to every teacher. Empty: one teacher, ref.model_path.")
    log_prob_micro_batch_size_per_gpu: int = param(8, doc="Responses per reference log-prob forward pass on one device.", ge=1, refs=[f"{_VERL}.log_prob_micro_batch_size_per_gpu", "roll:reference.infer_batch_size"])
    log_prob_use_dynamic_bsz: bool | None = param(None, doc="Pack reference forward passes by tokens; null follows actor.use_dynamic_bsz.", refs=[f"{_VERL}.log_prob_use_dynamic_bsz", "roll:reference.use_dynamic_batching_in_infer"])
    log_prob_max_token_len_per_gpu: int | None = param(None, doc="Token budget (prompt + response tokens) of one reference forward pass on one device; null uses actor.ppo_max_token_len_per_gpu.", ge=1, refs=[f"{_VERL}.log_prob_max_token_len_per_gpu", "roll:reference.max_tokens_per_microbatch_in_infer"])
    strategy: str = param("fsdp", doc="Backend across worker processes: fsdp and fsdp2 both select posttrain's one sharding backend, FSDP2 (one process runs plain torch either way).", choices=["fsdp", "fsdp2"], refs=[f"{_VERL}.strategy"])
    fsdp_config: FsdpConfig = param(factory=FsdpConfig, doc="FSDP sharding and offload of the reference model.", refs=[f"{_VERL}.fsdp_config"])
    ulysses_sequence_parallel_size: int | None = param(None, doc="Worker processes one sequence is split over in the reference's forwards (Ulysses); null follows actor.ulysses_sequence_parallel_size.", ge=1, refs=[f"{_VERL}.ulysses_sequence_parallel_size", "roll:reference.model_args.ulysses_size"])
    entropy_from_logits_with_chunking: bool | None = param(None, doc="Compute token entropy in chunks; null follows the actor. posttrain always computes log-probs in chunks (see actor.entropy_from_logits_with_chunking), so every value gives the same result.", refs=[f"{_VERL}.entropy_from_logits_with_chunking"])
    entropy_checkpointing: bool | None = param(None, doc="Recompute the entropy in the backward pass. The reference computes log-probs only (no entropy) and runs no backward pass, in verl as in posttrain, so every value gives the same run: accepted, no effect.", refs=[f"{_VERL}.entropy_checkpointing"])
    profiler: ProfilerConfig = param(factory=ProfilerConfig, doc="Profiling of the reference in profiler.steps.", refs=[f"{_VERL}.profiler"])


_ENGINE = verl_engine_keys(f"{_VERL}.fsdp_config", trains=False)
_ROLE = verl_role_keys(_VERL)

# Reference keys with no field in `ref`, and why (read by the mapping generator and dialect loaders).
UNSUPPORTED: dict[str, str] = {
    **_ENGINE[0],
    **{f"{_VERL}.router_replay.{k}": ROUTER_REPLAY for k in ("mode", "record_file", "replay_file")},
    "roll:reference.model_args.dtype": "the reference loads the policy weights with the policy's dtype (model section)",
    **roll_worker_unsupported("reference", "ref"),
    "verl:actor_rollout_ref.ref.use_torch_compile": "the reference runs the actor's forward, compiled when actor.use_torch_compile is (a different value cannot be honoured)",
    "roll:reference.model_args.attn_implementation": "every role runs the policy's attention kernel (model.attn_implementation, ROLL: actor_train.model_args.attn_implementation)",
}

# Reference keys any value of which changes nothing in posttrain (the loaders drop them with the reason).
NO_EFFECT: dict[str, str] = {
    **{f"roll:reference.training_args.{k}": "the reference is never trained: ROLL builds it no optimizer, schedule or gradient accumulation"
       for k in ("learning_rate", "lr_scheduler_type", "weight_decay", "adam_beta1", "adam_beta2", "num_train_epochs", "warmup_ratio",
                 "warmup_steps", "gradient_accumulation_steps", "per_device_train_batch_size")},
    **_ENGINE[1],
    f"{_VERL}.pad_to_length": _ROLE[1][f"{_VERL}.pad_to_length"],
    f"{_VERL}.entropy_from_logits_chunk_size": _ROLE[1][f"{_VERL}.entropy_from_logits_chunk_size"],
    "roll:reference.offload_nccl": NCCL_OFFLOAD,
    "roll:enable_reference": ("whether ROLL computes the reference's log-probs (it sets it itself when a KL loss or penalty is on): "
                              "posttrain runs the reference exactly when its KL loss, KL penalty or estimator reads them"),
    "roll:reference.model_args.freeze_module_prefix": "ROLL loads the reference with every parameter frozen (load_model with is_trainable false), so naming some of them frozen changes nothing; posttrain's reference is never trained either",
    "roll:reference.data_args.template": TEMPLATE_UNREAD,
    "roll:reference.model_args.disable_gradient_checkpointing": "the reference runs no backward pass, so gradient checkpointing has no meaning there",
}


def check_teachers(cfg: Any) -> list[str]:
    """ref.teachers: for on_policy_distill only, each with a model, instead of ref.model_path and
    the estimator's own kl_coef (the data's tags are checked when the dataset loads)."""
    ref = getattr(cfg, "ref", None)
    teachers = dict(getattr(ref, "teachers", None) or {})
    if not teachers:
        return []
    alg = getattr(cfg, "algorithm", None)
    problems = []
    estimator = getattr(alg, "adv_estimator", None)
    if getattr(alg, "kind", "rl") != "rl" or estimator != "on_policy_distill":
        problems.append(f"ref.teachers: several teachers score rows for algorithm.adv_estimator on_policy_distill in an RL stage; "
                        f"this stage has kind {getattr(alg, 'kind', 'rl')!r}, estimator {estimator!r}: set adv_estimator on_policy_distill or leave ref.teachers empty")
    if getattr(ref, "model_path", None) is not None:
        problems.append("ref.model_path and ref.teachers both name teachers: put the one teacher in ref.teachers (or use ref.model_path alone)")
    if "kl_coef" in dict(getattr(alg, "adv_estimator_args", None) or {}):
        problems.append("algorithm.adv_estimator_args.kl_coef: with ref.teachers each teacher has its own kl_coef (ref.teachers.<name>.kl_coef); remove it")
    for name, t in teachers.items():
        if not getattr(t, "model_path", None):
            problems.append(f"ref.teachers.{name}.model_path: a teacher needs its model directory")
    return problems
