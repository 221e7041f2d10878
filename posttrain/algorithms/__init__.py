"""posttrain's algorithms: pure tensor functions over (B, T) tensors, selected by name.

Nothing here touches a model. Importing this package fills the registries:

- `ADVANTAGE_ESTIMATORS[name](**kw) -> AdvantageOutput(advantages, returns)`
- `POLICY_LOSSES[name](old_logprob=, logprob=, advantages=, response_mask=, loss_agg_mode=, **opts)
  -> LossOutput(loss, metrics)`

and exports the building blocks a custom loss needs: `aggregate_loss`, `kl_penalty`, `value_loss`,
`entropy_from_logits`, masked reductions, KL controllers and ROLL-style reward shaping.
docs/algorithms.md is generated from the docstrings (`python -m posttrain.algorithms.docgen`).
"""

# Importing the implementations registers them; they are also exported for direct calls.
from posttrain.algorithms.advantages_outcome import (
    gdpo_advantage,
    gpg_advantage,
    grpo_advantage,
    grpo_passk_advantage,
    opmd_advantage,
    opo_advantage,
    reinforce_plus_plus_baseline_advantage,
    rloo_advantage,
)
from posttrain.algorithms.advantages_returns import (
    gae_advantage,
    reinforce_advantage,
    reinforce_plus_plus_advantage,
    remax_advantage,
)
from posttrain.algorithms.advantages_steps import gigpo_advantage, step_reinforce_advantage, step_reward_advantage
from posttrain.algorithms.policy_losses import (
    cispo_loss,
    gpg_loss,
    gspo_loss,
    opmd_loss,
    ppo_clip_loss,
    topr_loss,
)
from posttrain.algorithms.policy_losses_cov import clip_cov_loss, kl_cov_loss
from posttrain.algorithms.policy_losses_reinforce import importance_sampling_loss, rec_loss, sapo_loss, sppo_loss
from posttrain.algorithms.policy_losses_dppo import dppo_kl_loss, dppo_tv_loss
from posttrain.algorithms.bypass_loss import bypass_mode_loss
from posttrain.algorithms.policy_losses_mix import chord_mu, mix_chord_loss, mix_loss, sft_is_loss, sft_phi_loss
from posttrain.algorithms.advantages_shifted import asymre_advantage, rec_advantage
from posttrain.algorithms.advantages_distill import jsd_advantage, on_policy_distill_advantage, teacher_routes
from posttrain.algorithms.distill_topk import TopkKL, topk_forward_kl
from posttrain.algorithms.advantages_otb import optimal_token_baseline_advantage, tir_optimal_token_baseline_advantage
from posttrain.algorithms.aggregation import LOSS_AGG_MODES, aggregate_loss
from posttrain.algorithms.entropy import entropy_from_logits, entropy_from_logits_chunked, sum_pi_squared_from_logits
from posttrain.algorithms.variance_proxy import variance_proxy_metrics
from posttrain.algorithms.token_filters import (
    TOKEN_FILTERS,
    TokenFilter,
    clip_b_keep_mask,
    clip_b_signal,
    clip_v_keep_mask,
    clip_v_signal,
    nec_from_logits,
)
from posttrain.algorithms.groups import group_stats
from posttrain.algorithms.kl import KL_PENALTY_KINDS, KLRewardOutput, apply_kl_penalty, check_kl_kind, kl_penalty
from posttrain.algorithms.kl_controllers import AdaptiveKLController, FixedKLController
from posttrain.algorithms.moe import load_balancing_loss, router_z_loss
from posttrain.algorithms.masked import masked_mean, masked_sum, masked_var, masked_whiten
from posttrain.algorithms.pf_ppo import PF_PPO_METHODS, pf_ppo_resample, pf_ppo_weights
from posttrain.algorithms.registry import (
    ADVANTAGE_ESTIMATORS,
    POLICY_LOSSES,
    AdvantageOutput,
    LossOutput,
    advantage_estimator_names,
    EstimatorNeeds,
    estimator_needs,
    estimator_options,
    get_advantage_estimator,
    get_policy_loss,
    policy_loss_names,
    policy_loss_options,
    register_advantage_estimator,
    register_policy_loss,
)
from posttrain.algorithms.rollout_correction import RolloutCorrection, rollout_importance_weights, rollout_rejection, rs_thresholds
from posttrain.algorithms.running import RunningMoments
from posttrain.algorithms.agentic_norm import agentic_reward_norm
from posttrain.algorithms.sample_controls import sample_keep_mask
from posttrain.algorithms.dynamic_sampling import informative_groups, rows_of_groups
from posttrain.algorithms.shaping import (
    NORM_TYPES,
    Clipped,
    clip_advantages,
    clip_rewards,
    normalize_rewards,
    overlong_penalty,
    sample_loss_weights,
    scores_to_token_rewards,
    whiten,
)
from posttrain.algorithms.supervised import dpo_loss, dpo_policy_loss, positive_sft_loss, sft_loss
from posttrain.algorithms.value import ValueLossOutput, value_loss

__all__ = [
    "load_balancing_loss",
    "router_z_loss",
    "informative_groups",
    "rows_of_groups",
    "agentic_reward_norm",
    "overlong_penalty",
    "sample_keep_mask",
    "ADVANTAGE_ESTIMATORS",
    "POLICY_LOSSES",
    "AdvantageOutput",
    "LossOutput",
    "register_advantage_estimator",
    "register_policy_loss",
    "get_advantage_estimator",
    "get_policy_loss",
    "advantage_estimator_names",
    "EstimatorNeeds",
    "estimator_needs",
    "estimator_options",
    "policy_loss_names",
    "policy_loss_options",
    "aggregate_loss",
    "LOSS_AGG_MODES",
    "rollout_importance_weights",
    "rollout_rejection",
    "rs_thresholds",
    "RolloutCorrection",
    "kl_penalty",
    "check_kl_kind",
    "KL_PENALTY_KINDS",
    "apply_kl_penalty",
    "KLRewardOutput",
    "value_loss",
    "ValueLossOutput",
    "entropy_from_logits",
    "entropy_from_logits_chunked",
    "sum_pi_squared_from_logits",
    "optimal_token_baseline_advantage",
    "tir_optimal_token_baseline_advantage",
    "variance_proxy_metrics",
    "TOKEN_FILTERS",
    "TokenFilter",
    "clip_b_keep_mask",
    "clip_b_signal",
    "clip_v_keep_mask",
    "clip_v_signal",
    "nec_from_logits",
    "FixedKLController",
    "AdaptiveKLController",
    "dpo_loss",
    "masked_sum",
    "masked_mean",
    "masked_var",
    "masked_whiten",
    "group_stats",
    "RunningMoments",
    "NORM_TYPES",
    "Clipped",
    "clip_rewards",
    "clip_advantages",
    "normalize_rewards",
    "whiten",
    "sample_loss_weights",
    "scores_to_token_rewards",
    "PF_PPO_METHODS",
    "pf_ppo_weights",
    "pf_ppo_resample",
    # the registered implementations, callable directly
    "gae_advantage",
    "gigpo_advantage",
    "step_reinforce_advantage",
    "step_reward_advantage",
    "grpo_advantage",
    "gdpo_advantage",
    "grpo_passk_advantage",
    "rloo_advantage",
    "opo_advantage",
    "gpg_advantage",
    "reinforce_plus_plus_advantage",
    "reinforce_plus_plus_baseline_advantage",
    "remax_advantage",
    "reinforce_advantage",
    "opmd_advantage",
    "asymre_advantage",
    "rec_advantage",
    "on_policy_distill_advantage",
    "teacher_routes",
    "jsd_advantage",
    "TopkKL",
    "topk_forward_kl",
    "ppo_clip_loss",
    "gspo_loss",
    "cispo_loss",
    "dppo_kl_loss",
    "dppo_tv_loss",
    "gpg_loss",
    "topr_loss",
    "opmd_loss",
    "clip_cov_loss",
    "kl_cov_loss",
    "sft_loss",
    "positive_sft_loss",
    "dpo_policy_loss",
    "sapo_loss",
    "sppo_loss",
    "rec_loss",
    "importance_sampling_loss",
    "bypass_mode_loss",
    "sft_is_loss",
    "sft_phi_loss",
    "mix_loss",
    "mix_chord_loss",
    "chord_mu",
]
