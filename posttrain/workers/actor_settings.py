"""The actor's settings: everything its update needs, resolved from the config once
(`posttrain.trainer.rl_settings`), read by the actor (`posttrain.workers.actor`) and by its loss
(`posttrain.workers.actor_loss`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from posttrain.models.logprobs import PLAIN_HEAD, HeadKernel
from posttrain.models.moe import RouterWeights
from posttrain.workers.topk_kl import TopkKLSettings


@dataclass(frozen=True)
class ActorSettings:
    """Everything the PPO update needs, resolved from the config once (see `actor_settings`)."""

    temperature: float  # rollout temperature: log-probs are of logits / temperature
    loss_mode: str  # name in posttrain.algorithms.POLICY_LOSSES
    loss_options: dict[str, Any]  # keyword options of that loss (clip ratios, ...)
    loss_agg_mode: str
    loss_scale_factor: float | None  # seq-mean-token-sum-norm's constant (the max response length)
    entropy_coeff: float
    use_kl_loss: bool
    kl_loss_coef: float
    kl_loss_type: str
    ppo_epochs: int
    mini_batch_size: int  # responses per optimizer step
    micro_batch_size: int  # responses per forward/backward
    max_tokens_per_micro_batch: int | None  # token budget instead of micro_batch_size (dynamic bsz)
    grad_clip: float | None
    shuffle: bool
    seed: int = 0
    extra: dict[str, Any] = field(default_factory=dict)
    schedule_per_update: bool = False  # actor.optim.lr_schedule_unit == "update": the LR moves after each optimizer step
    reuse_rollout_logprobs: bool = False  # "auto" with engine numerics equal to the actor's, or "always" (see `old_logprobs`)
    share_prompt: bool = False  # actor.share_prompt_forward (posttrain.models.shared_prompt)
    compute_dtype: str = "fp32"  # actor.fsdp_config.mixed_precision.param_dtype (posttrain.models.precision)
    force_reuse: bool = False  # actor.reuse_rollout_logprobs == "always": reuse without the equality check
    # (responses per forward, token budget or None) of old-log-prob passes: rollout.log_prob_*; None
    # batches them as the update does (micro_batch_size, max_tokens_per_micro_batch)
    logprob_batching: tuple[int, int | None] | None = None
    pack: bool = True  # model.use_remove_padding (posttrain.models.packing)
    lean_forward: str = "off"  # "compiled" with actor.use_torch_compile (posttrain.models.lean_forward)
    # batch inputs the loss declares beyond the five every loss takes: "expert_mask" (the mix
    # losses' expert rows), "global_step" (mix_chord's mu schedule), "scores" (topr_roll's split)
    loss_inputs: frozenset[str] = frozenset()
    difficulty_loss_weight: bool = False  # algorithm.difficulty_loss_weight (posttrain.algorithms.sample_loss_weights)
    length_loss_weight: bool = False  # algorithm.length_loss_weight
    rl_loss_coef: float = 1.0  # actor.rl_loss_coef: weight of pg_loss + KL loss (ROLL)
    sft_loss_coef: float = 0.0  # actor.sft_loss_coef: weight of ROLL's SFT term on positive responses
    topr_coefs: tuple[float, float] = (0.0, 0.0)  # actor.topr_positive_loss_coef, topr_negative_loss_coef (ROLL v0.1)
    head: HeadKernel = PLAIN_HEAD  # model.use_fused_kernels, actor.entropy_checkpointing (posttrain.models.kernels)
    activation_offload: bool = False  # model.enable_activation_offload: saved activations in host memory
    moe_aux_loss_coef: float = 0.0  # actor.moe_aux_loss_coef, resolved against the model (posttrain.models.moe.router_loss_settings)
    moe_top_k: int = 0  # experts per token of the policy's routers, when moe_aux_loss_coef > 0
    moe_z_loss_coef: float = 0.0  # actor.moe_z_loss_coef (posttrain.models.moe.router_z_setting)
    router_replay: bool = False  # actor.router_replay.mode R2: the update routes as the old-log-prob forward did
    by_rows: bool = False  # actor.micro_batch_weight rows: micro-batch losses weighted by their rows (posttrain.workers.microbatch.micro_share)
    balanced: bool = False  # actor.dynamic_bsz_partition balanced: verl's cut (posttrain.workers.balanced_split)
    topk_kl: TopkKLSettings | None = None  # actor.topk_kl with k > 0: the top-k distillation term (posttrain.workers.topk_kl)

    @property
    def router_weights(self) -> RouterWeights:
        return RouterWeights(self.moe_aux_loss_coef, self.moe_z_loss_coef, self.moe_top_k)

    def __post_init__(self) -> None:
        # seq-mean-token-sum-norm divides by a constant. Left as None, `aggregate_loss` would divide
        # by each micro-batch's own (trimmed) width, so the gradient would depend on the split. verl's
        # None means the configured response length, which `rl_build` passes explicitly.
        if self.loss_agg_mode == "seq-mean-token-sum-norm" and self.loss_scale_factor is None:
            raise ValueError(
                "ActorSettings: loss_agg_mode='seq-mean-token-sum-norm' needs loss_scale_factor (a constant, "
                "e.g. the maximum response length, as verl's default); None would make the gradient depend "
                "on how mini-batches are cut into micro-batches"
            )
