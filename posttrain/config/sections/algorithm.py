"""`algorithm`: which kind of training, its advantage estimator, KL in reward and reward shaping.

posttrain picks two things separately: the *kind* of training (`rl`, `sft`, `dpo`, `distill`) and, for `rl`, the
advantage estimator (a registry name: `gae`, `grpo`, `rloo`, `reinforce_plus_plus`, ...). A "PPO run"
is `kind: rl` + `adv_estimator: gae` + a critic; "GRPO" is `kind: rl` + `adv_estimator: grpo`. The
policy loss, its clip ratios, entropy and KL-loss terms belong to the `actor` section.

Trinity-RFT names a bundle of parts with one key, `algorithm.algorithm_type`; the Trinity dialect
(posttrain.config.dialects.trinity_algorithms) writes the fields its parts select. ROLL's reward
normalisation keys, old and new, are translated to `reward_norm_mean`/`reward_norm_std` by
`roll_reward_norm`.

Order of reward shaping in one RL step (ROLL's order): clip the sequence reward to
[-reward_clip, reward_clip], normalise it (reward_norm_mean / reward_norm_std), add the token-level KL
penalty (use_kl_in_reward), whiten token rewards (whiten_rewards), estimate advantages, whiten them
(whiten_advantages), clip them to [-advantage_clip, advantage_clip].
"""

from __future__ import annotations

from typing import Any

from posttrain.config.access import get_path, is_rl
from posttrain.config.fields import param, section
from posttrain.config.sections.distill import DistillConfig

NORM_SOURCES = (None, "batch", "group", "running")

def roll_reward_norm(
    *,
    norm_mean_type: str | None = None,
    norm_std_type: str | None = None,
    reward_norm: str | None = None,
    reward_shift: bool = False,
    reward_scale: bool = False,
    use_reward_scaling: bool = False,
    use_reward_norm: bool = False,
) -> tuple[str | None, str | None]:
    """Translate ROLL's reward-normalisation keys into (reward_norm_mean, reward_norm_std).

    ROLL has three generations of these keys: `norm_mean_type`/`norm_std_type` (current, used as is),
    `reward_norm` with `reward_shift` (subtract the mean only) or `reward_scale` (divide by the std
    only), and `use_reward_scaling` (divide by a running std) with `use_reward_norm` (also subtract the
    running mean). The newest key that is set wins.

    >>> roll_reward_norm(reward_norm="group", reward_shift=True)
    ('group', None)
    >>> roll_reward_norm(use_reward_scaling=True)
    (None, 'running')
    """
    if norm_mean_type is not None or norm_std_type is not None:
        return norm_mean_type, norm_std_type
    if reward_norm is not None:
        return (None if reward_scale else reward_norm), (None if reward_shift else reward_norm)
    if use_reward_scaling:
        return ("running" if use_reward_norm else None), "running"
    return None, None


@section
class KLControlConfig:
    """Coefficient of the KL penalty added to the reward (use_kl_in_reward)."""

    type: str = param("fixed", doc="fixed keeps kl_coef; adaptive scales it toward target_kl over horizon steps (Ziegler et al. 2019).", choices=["fixed", "adaptive"], refs=["verl:algorithm.kl_ctrl.type"])
    kl_coef: float = param(0.001, doc="KL penalty coefficient (initial value for the adaptive controller).", ge=0, refs=["verl:algorithm.kl_ctrl.kl_coef", "roll:init_kl_coef"])
    horizon: int = param(10000, doc="Adaptive controller horizon in samples: larger reacts more slowly.", ge=1, refs=["verl:algorithm.kl_ctrl.horizon", "roll:kl_horizon"])
    target_kl: float = param(0.1, doc="KL per token the adaptive controller steers toward.", gt=0, refs=["verl:algorithm.kl_ctrl.target_kl", "roll:target_kl"])


@section
class PFPPOConfig:
    """Policy filtration (PF-PPO, Shen & Zhang 2024): how a response's score weighs its chance to be drawn."""

    reweight_method: str = param("pow", doc="Sample weight from the score s: pow (|s|^weight_pow), max_min (only the batch's highest and lowest scores), max_random (0.4 for the highest score, 0.1 for the rest).", choices=["pow", "max_min", "max_random"], refs=["verl:algorithm.pf_ppo.reweight_method"])
    weight_pow: float = param(2.0, doc="Exponent of the pow reweighting.", gt=0, refs=["verl:algorithm.pf_ppo.weight_pow"])


@section
class FilterGroupsConfig:
    """DAPO dynamic sampling: drop prompt groups whose responses all score the same, then refill
    (posttrain.trainer.dynamic_sampling)."""

    enable: bool = param(False, doc="Dynamic sampling: generate and score further batches of data.train_batch_size prompts until that many groups whose `metric` is not the same for all their responses are kept; the first that many train, the rest are discarded (RL stages answering prompts: the synchronous loop, or a decoupled explorer, which refills each batch before it writes it to the buffer).", refs=["verl:algorithm.filter_groups.enable"])
    metric: str = param("acc", doc="Per-response value whose spread decides (read when enable): acc (the function's acc, else its score), score (the function's score), seq_reward (the final score, with reward model and overlong penalty) or seq_final_reward (the same: no KL penalty is in the reward when groups are chosen).", choices=["acc", "score", "seq_reward", "seq_final_reward"], refs=["verl:algorithm.filter_groups.metric"])
    max_num_gen_batches: int = param(0, doc="Most generation rounds per step (read when enable); a step still short after that many stops the run with an error naming the counts; 0 means no limit.", ge=0, refs=["verl:algorithm.filter_groups.max_num_gen_batches"])
    std_threshold: float | None = param(None, doc="Keep only groups of two or more responses whose metric's standard deviation (unbiased) exceeds this, in place of the not-all-equal rule (read when enable); null: that rule, groups of one kept. Trinity-RFT's grpo std_threshold (e.g. 0.0001). With an agent function's turn rows (env.train_rows: turn, Trinity-RFT's multi_step_grpo) the groups of episodes at or below it (and groups of one) leave the losses instead, their calls' loss_mask 0, judged on the episodes' rewards, and the step is not refilled.", ge=0, refs=["trinity:algorithm.advantage_fn_args.std_threshold"])


@section
class TokenFilterConfig:
    """Entropy-dynamics token filters (Wang et al. 2026, arXiv:2602.03392): negative-advantage tokens
    whose per-token entropy signal is an outlier leave the losses (posttrain.algorithms.TOKEN_FILTERS)."""

    type: str | None = param(None, doc="clip_b (drop negative-advantage tokens whose S = p(H + log p) is more than mu std below the batch mean; posttrain.algorithms.clip_b_keep_mask) or clip_v (drop non-positive-advantage tokens whose D = N - S exceeds mu std, at most max_frac of the tokens; clip_v_keep_mask), from one more actor pass before the update; the dropped tokens leave the policy, KL and entropy losses after the advantages. null: no filter. Trinity-RFT's advantage_fn clipb / clipv set it (with adv_estimator grpo).", choices=[None, "clip_b", "clip_v"])
    mu: float | None = param(None, doc="How many standard deviations of the batch's signal make a token an outlier; null: the filter's default (clip_b 2.5, clip_v 8.5, Trinity-RFT's).", gt=0, refs=["trinity:algorithm.advantage_fn_args.mu"])
    max_frac: float = param(1e-4, doc="clip_v only: when the rule would drop more than this share of the batch's tokens, only the max(floor(max_frac x tokens), 1) negative-advantage tokens with the largest signal are dropped.", ge=0, le=1, refs=["trinity:algorithm.advantage_fn_args.max_frac"])


@section
class DPOConfig:
    """Direct preference optimisation (Rafailov et al. 2023); used when kind is dpo."""

    beta: float = param(0.1, doc="Inverse temperature of the implicit reward (log-ratio scale).", gt=0, refs=["trinity:algorithm.policy_loss_fn_args.beta", "roll:beta"])
    label_smoothing: float = param(0.0, doc="Probability that a preference label is flipped (conservative DPO); 0 is plain DPO.", ge=0, lt=0.5, refs=["trinity:algorithm.policy_loss_fn_args.label_smoothing", "roll:label_smoothing"])
    loss_type: str = param("sigmoid", doc="sigmoid (DPO), ipo (squared loss, Azar et al. 2023) or hinge (SLiC).", choices=["sigmoid", "ipo", "hinge"])


@section
class MixConfig:
    """Expert rows (SFT data) joined to every RL step's batch, for the mix and mix_chord policy losses."""

    expert_files: list[str] = param(factory=list, doc="SFT data files (prompt + response, or a conversation under messages_key) whose rows join each step's batch; empty: no expert rows.")
    expert_batch_size: int = param(0, doc="Expert rows joined to each step's batch, drawn in order through the files (reshuffled each pass); spread evenly over the step's mini-batches.", ge=0)
    prompt_key: str | None = param(None, doc="Prompt column of the expert files; null uses data.prompt_key.")
    response_key: str | None = param(None, doc="Response column of the expert files; null uses data.response_key.")
    messages_key: str | None = param(None, doc="Conversation column of the expert files (used instead of prompt/response); null uses data.messages_key.")
    image_key: str | None = param(None, doc="Images column of the expert files (a list of images per row, placed at the <image> markers of the row's messages, extra ones before the first user message's text, as in RL rows): with a vision-language policy the expert rows' log-probs and SFT loss are computed with their images; null uses data.image_key. Images must come before the first trained token; rows with images and a text-only policy are refused.")
    expert_epochs: int | None = param(None, doc="Passes over the expert rows the run may draw (Trinity-RFT's expert buffer total_epochs): rows x expert_epochs rows in batches of expert_batch_size bound the stage's steps, as Trinity-RFT's trainer stops when its expert reader runs dry; a stage of more steps is refused when it starts, naming the bound. Null: no limit (each pass reshuffled).", ge=1)


@section
class AgenticRewardNormConfig:
    """ROLL agentic pipeline: how trajectory rewards are grouped and normalised."""

    grouping: str = param("batch", doc="Which trajectories share the statistics (agentic stages): traj_group_id (one environment group: same tag and seed), tags (one environment type) or batch. ROLL's state and inductive need per-state keys posttrain's trajectories do not carry (they serve GiGPO's step rewards).", choices=["traj_group_id", "tags", "batch"], refs=["roll:reward_normalization.grouping"])
    method: str = param("identity", doc="identity (scores as they are), mean (subtract the mean), mean_std (standardise) or asym_clip (ROLL computes it as mean_std); applied to an agentic stage's trajectory scores before the advantage estimator (posttrain.algorithms.agentic_reward_norm).", choices=["identity", "mean", "mean_std", "asym_clip"], refs=["roll:reward_normalization.method"])
    norm_mean_type: str | None = param(None, doc="Where the subtracted mean comes from, overriding what method gives: batch (all the step's trajectories), group (the row's group of grouping); null: as method says (mean, mean_std and asym_clip subtract it over the grouping's scope).", choices=[None, "batch", "group"], refs=["roll:reward_normalization.norm_mean_type"])
    norm_std_type: str | None = param(None, doc="Where the dividing standard deviation comes from, overriding what method gives: batch or group, as norm_mean_type; null: as method says (mean_std and asym_clip divide by it). A std without a mean divides the raw scores.", choices=[None, "batch", "group"], refs=["roll:reward_normalization.norm_std_type"])


@section
class GiGPOConfig:
    """Step-level credit of `adv_estimator: gigpo` (posttrain.algorithms.gigpo_advantage)."""

    step_weight: float = param(1.0, doc="Weight of the step-level (anchor-state) advantage added to the episode-level one.", ge=0, refs=["roll:step_reward_weight"])
    episode_weight: float = param(1.0, doc="Weight of the episode-level (GRPO group) advantage.", ge=0, refs=["roll:episode_reward_weight"])
    step_gamma: float = param(0.95, doc="Discount of the per-turn returns that the step-level advantage compares.", ge=0, le=1, refs=["roll:step_reward_gamma"])


@section
class AlgorithmConfig:
    """Kind of training, advantage estimation, KL in reward and reward shaping."""

    kind: str = param("rl", doc="rl (rollouts, rewards, advantages), sft (supervised on responses), dpo (preference pairs) or distill (SFT rows with a teacher's distribution: algorithm.distill).", choices=["rl", "sft", "dpo", "distill"], refs=["trinity:algorithm.algorithm_type"])
    adv_estimator: str = param("grpo", doc="Advantage estimator name from posttrain.algorithms.ADVANTAGE_ESTIMATORS.", refs=["verl:algorithm.adv_estimator", "roll:adv_estimator", "trinity:algorithm.advantage_fn"])
    gamma: float = param(1.0, doc="Discount factor.", ge=0, le=1, refs=["verl:algorithm.gamma", "roll:gamma"])
    lam: float = param(1.0, doc="GAE lambda.", ge=0, le=1, refs=["verl:algorithm.lam", "roll:lambd"])
    adv_estimator_args: dict[str, Any] = param(factory=dict, doc="Options of the advantage estimator beyond the shared ones (opmd tau, asymre baseline_shift, on_policy_distill kl_coef, reinforce reinforce_mode, ...); each must be a keyword the estimator declares.", refs=["trinity:algorithm.advantage_fn_args"])
    norm_adv_by_std_in_grpo: bool = param(True, doc="GRPO divides group-centred rewards by the group std; false keeps only the centring (Dr. GRPO).", refs=["verl:algorithm.norm_adv_by_std_in_grpo"])
    gdpo_reward_keys: list[str] = param(factory=list, doc="adv_estimator gdpo: the keys of the reward function's returned dict that are the reward's separate components (e.g. [accuracy_reward, format_reward]); GDPO normalises each within its group before summing them (posttrain.algorithms.gdpo_advantage), and logs gdpo/<key>/mean, std, max and min. Needed by gdpo, refused with any other estimator.", refs=["verl:algorithm.gdpo_reward_keys"])
    gdpo_reward_weights: list[float] | None = param(None, doc="adv_estimator gdpo: one weight per gdpo_reward_keys entry in the sum of the normalised components; null weighs each 1.", refs=["verl:algorithm.gdpo_reward_weights"])

    use_kl_in_reward: bool = param(False, doc="Subtract kl_ctrl.kl_coef x KL(policy || ref) from each token's reward.", refs=["verl:algorithm.use_kl_in_reward", "roll:add_token_level_kl"])
    kl_penalty: str = param("kl", doc="KL estimator of the reward penalty, a name from posttrain.algorithms' KL registry (kl/k1, abs, mse/k2, low_var_kl/k3, full).", refs=["verl:algorithm.kl_penalty", "roll:kl_penalty", "trinity:algorithm.kl_penalty_fn"])
    kl_ctrl: KLControlConfig = param(factory=KLControlConfig, doc="Fixed or adaptive KL-in-reward coefficient.")

    reward_clip: float | None = param(None, doc="Clip each sequence reward to [-reward_clip, reward_clip]; null disables.", gt=0, refs=["roll:reward_clip"])
    reward_norm_mean: str | None = param(None, doc="Subtract the reward mean over: batch, group (same prompt), running (all steps so far); null leaves it (ROLL's reward_norm, reward_scale, use_reward_norm translate via roll_reward_norm).", choices=NORM_SOURCES, refs=["roll:norm_mean_type", "roll:reward_norm", "roll:reward_scale", "roll:use_reward_norm"])
    reward_norm_std: str | None = param(None, doc="Divide rewards by their std over: batch, group, running; null leaves it (ROLL's reward_shift, use_reward_scaling translate via roll_reward_norm).", choices=NORM_SOURCES, refs=["roll:norm_std_type", "roll:reward_shift", "roll:use_reward_scaling"])
    whiten_rewards: bool = param(False, doc="Whiten token-level rewards over the batch (masked mean 0, std 1) before advantage estimation.", refs=["roll:whiten_rewards"])
    whiten_advantages: bool = param(False, doc="Whiten advantages over the batch (masked mean 0, std 1) after estimation.", refs=["roll:whiten_advantages"])
    advantage_clip: float | None = param(None, doc="Clip advantages to [-advantage_clip, advantage_clip]; null disables.", gt=0, refs=["roll:advantage_clip"])

    use_pf_ppo: bool = param(False, doc="PF-PPO: after advantages, the critic and actor train on B responses drawn with replacement from the step's B, weighted by score (pf_ppo); with every estimator.", refs=["verl:algorithm.use_pf_ppo"])
    pf_ppo: PFPPOConfig = param(factory=PFPPOConfig, doc="PF-PPO's weighting of responses by score (read when use_pf_ppo).")
    filter_groups: FilterGroupsConfig = param(factory=FilterGroupsConfig, doc="DAPO dynamic sampling of informative prompt groups.")
    token_filter: TokenFilterConfig = param(factory=TokenFilterConfig, doc="Entropy-dynamics token filter (Clip_B / Clip_V) applied to the loss mask after the advantages.")
    dpo: DPOConfig = param(factory=DPOConfig, doc="DPO loss settings (kind: dpo).")
    distill: DistillConfig = param(factory=DistillConfig, doc="Offline distillation's teacher and divergence (kind: distill).")
    mix: MixConfig = param(factory=MixConfig, doc="Expert SFT rows mixed into RL batches (policy losses mix and mix_chord).")

    difficulty_loss_weight: bool = param(False, doc="ROLL's difficulty weights: each response's policy loss is weighted by 0.5 + 1.5 x its row's extra_info.difficulty (clamped to [0, 1]; every row needs one), rescaled to mean 1 per micro-batch as ROLL does (posttrain.algorithms.sample_loss_weights).", refs=["roll:difficulty_loss_weight"])
    length_loss_weight: bool = param(False, doc="ROLL's length weights: each response's policy loss is weighted by 1.5 - its length's position between the micro-batch's shortest (1.5) and longest (0.5) response, rescaled to mean 1.", refs=["roll:length_loss_weight"])
    max_len_mask: bool = param(False, doc="Leave responses as long as the response budget (cut before their end) out of the losses after the advantages (DAPO's overlong filtering; posttrain.algorithms.sample_keep_mask).", refs=["roll:max_len_mask"])
    error_max_len_clip: bool = param(False, doc="Keep in the losses (after the advantages) only responses scored exactly 1, or exactly 0 and shorter than error_max_len_threshold tokens (ROLL's rule: any other score is left out too).", refs=["roll:error_max_len_clip"])
    error_max_len_threshold: int = param(2**62, doc="Length from which a response scored 0 is left out by error_max_len_clip (ROLL's default: no length limit).", ge=1, refs=["roll:error_max_len_threshold"])
    min_score_mask: float | None = param(None, doc="Keep in the losses (after the advantages) only responses, or episodes, scored at least this; null keeps all. With the sft policy loss this is reward-ranked fine-tuning, Trinity-RFT's RAFT workflows (their successes, scored 1; Dong et al. 2023, arXiv:2304.06767).")
    valid_actions_mask: bool = param(False, doc="Agentic stages: keep in the losses (after the advantages) only episodes whose every action the environment read as well formed (its action_is_valid), as Trinity-RFT's RAFT ALFWorld workflow keeps only well-formatted trajectories.")
    difficulty_mask: bool = param(False, doc="Leave prompt groups whose mean score is not strictly between difficulty_low_threshold and difficulty_high_threshold out of the losses (policy, KL, entropy and value; the advantages still see them).", refs=["roll:difficulty_mask"])
    difficulty_low_threshold: float = param(0.1, doc="A group's mean score must exceed this to stay in the losses under difficulty_mask.", refs=["roll:difficulty_low_threshold"])
    difficulty_high_threshold: float = param(0.95, doc="A group's mean score must stay below this to stay in the losses under difficulty_mask.", refs=["roll:difficulty_high_threshold"])
    agentic_reward_norm: AgenticRewardNormConfig = param(factory=AgenticRewardNormConfig, doc="Agentic (multi-turn env) reward normalisation.")
    gigpo: GiGPOConfig = param(factory=GiGPOConfig, doc="Weights and discount of GiGPO's step-level credit (adv_estimator: gigpo, agentic stages).")

    rollout_is: bool = param(False, doc="Multiply the policy loss by the rollout importance weights pi_old / pi_rollout (posttrain.algorithms.rollout_importance_weights); false only logs them (rejection by rollout_is_mode=mask and the veto still applies). Needs rollout_is_threshold.", refs=["verl:algorithm.rollout_is"])
    rollout_is_threshold: float | None = param(None, doc="Upper bound U of the rollout importance weight; null switches rollout importance sampling off (no weights, metrics or rejection). Useful where the engine computes differently from the actor (rollout.dtype bf16); with equal numerics every weight is 1.", gt=0, refs=["verl:algorithm.rollout_is_threshold"])
    rollout_is_threshold_lower: float | None = param(None, doc="Lower bound L of the rollout importance weight for rollout_is_mode mask or zero; null means 1 / rollout_is_threshold.", gt=0, refs=["verl:algorithm.rollout_is_threshold_lower"])
    rollout_is_level: str = param("token", doc="Importance weight per token, per sequence (product of the token ratios), geometric (their geometric mean, shared by the sequence's tokens) or segment (the geometric mean over each run of trained tokens: one model turn of an agentic trajectory).", choices=["token", "sequence", "geometric", "segment"], refs=["verl:algorithm.rollout_is_level"])
    rollout_is_mode: str = param("truncate", doc="truncate caps the weights at the upper bound (TIS); mask keeps them and drops tokens (token level), turns (segment level) or sequences outside [lower, upper] from the losses and advantages; zero sets the weights outside [lower, upper] to 0 and keeps those tokens in the losses' normalisers (IcePop; needs rollout_is: true).", choices=["truncate", "mask", "zero"], refs=["verl:algorithm.rollout_is_mode"])
    rollout_is_veto_threshold: float | None = param(None, doc="Drop a whole sequence from the losses and advantages when one of its tokens has an (unbounded) ratio below this, e.g. 1e-4; null disables.", gt=0, refs=["verl:algorithm.rollout_is_veto_threshold"])
    rollout_is_batch_normalize: bool = param(False, doc="Rescale the rollout importance weights to mean 1 over the batch (tokens at the token level, sequences otherwise), after truncation; rollout_is/batch_norm_factor logs the mean.", refs=["verl:algorithm.rollout_correction.rollout_is_batch_normalize"])
    rollout_rs: str | None = param(None, doc="Rejection sampling: drop tokens or whole sequences whose divergence between pi_old and pi_rollout is out of bounds, before advantages and losses (after the advantages with rollout_reject_after_advantages) (posttrain.algorithms.rollout_rejection). Comma-separated options, all of which must pass: token_k1/k2/k3, seq_sum_k1/k2/k3, seq_mean_k1/k2/k3, seq_max_k2/k3, seg_mean_k1/k2/k3 (mean over each run of trained tokens: one model turn) (k1 = -log ratio, k2 = (log ratio)^2 / 2, k3 = ratio - 1 - log ratio), and token_diff, seq_sum_diff, seq_mean_diff, seg_mean_diff (the probability difference pi_old - pi_rollout); null: none. Needs rollout_is_threshold.", refs=["verl:algorithm.rollout_correction.rollout_rs"])
    rollout_rs_threshold: str | float | None = param(None, doc="Bounds of rollout_rs: one value shared by every option or one per option, comma-separated; a k1 option takes ratio bounds 'L_U' (or U, meaning L = 1/U), a diff option 'L_U' bounds on the probability difference (or U, meaning L = -U), a k2/k3 option one upper bound.", refs=["verl:algorithm.rollout_correction.rollout_rs_threshold"])
    rollout_reject_after_advantages: bool = param(False, doc="Reject tokens (rollout_rs, rollout_is_mode=mask, the veto) after the advantages are computed: the advantages, their whitening and the KL penalty count every trained token, and the rejected ones leave only the losses (ROLL's order: its train_infer_correction filters); false rejects them before the advantages (verl's).")


#: Keys of the reference frameworks that belong here but that posttrain refuses, with the reason.
_DISTILL = ("a key of ROLL's distillation pipeline: posttrain reads it in a distillation config (the student and teacher roles, "
            "start_distill_pipeline.py), as an algorithm.kind distill stage; in this pipeline it does nothing")
_ONPOLICY = ("a role of ROLL's on-policy distillation pipeline: posttrain reads a file whose student_train role is a mapping "
             "(start_onpolicy_distill_pipeline.py's config) as an RL stage with algorithm.adv_estimator on_policy_distill, the teacher "
             "at ref.model_path; in this file it does nothing")
UNSUPPORTED: dict[str, str] = {
    # Keys met in the published examples (tests/config/corpus, benchmarks/foreign_corpus.py).
    "roll:student": _DISTILL,
    "roll:teacher": _DISTILL,
    "roll:student_train": _ONPOLICY,
    "roll:student_pretrain": _DISTILL,
    "roll:logits_transfer_backend": _DISTILL,
    "roll:student_infer": _ONPOLICY,
    "roll:is_pure_opd": _ONPOLICY,
    "roll:pure_opd_pipeline_type": _ONPOLICY,
    "roll:use_opd": ("ROLL's mixed on-policy distillation (the teacher's KL subtracted from the RL advantages): posttrain's on_policy_distill "
                     "and jsd estimators take the advantages from the teacher alone, and no estimator adds a teacher term to reward-based ones"),
    "roll:question_key": _DISTILL,
    "roll:answer_key": _DISTILL,
}

# Reference keys any value of which changes nothing in posttrain (the loaders drop them with the reason).
NO_EFFECT: dict[str, str] = {
    "verl:algorithm.filter_groups.max_inflight_gen_batches": "how many of verl's dynamic-sampling batches are generated at once: when they are sampled, not what",
    "roll:add_len_reward": "declared in ROLL's PPOConfig but read nowhere in ROLL's code, so no value of it changes a ROLL run either (checked against alibaba/ROLL's source)",
    **{f"roll:{k}": "declared in ROLL's RLVR config but read nowhere in ROLL's code, so no value of it changes a ROLL run either"
       for k in ("use_policy_loss_type", "mask_type", "balance_length", "minibatch_data_iter_num", "val_greedy", "val_n_sample")},
}


def check_agentic_reward_norm(cfg: Any) -> list[str]:
    """The agentic reward normalisation acts on environment trajectories only."""
    norm = getattr(getattr(cfg, "algorithm", None), "agentic_reward_norm", None)
    env = getattr(cfg, "env", None)
    if norm is None or env is None or env.train_env_manager.tags:
        return []
    if (norm.method, norm.grouping, norm.norm_mean_type, norm.norm_std_type) == ("identity", "batch", None, None):
        return []
    return [f"algorithm.agentic_reward_norm (method {norm.method}, grouping {norm.grouping}) normalises the trajectory scores of an agentic stage, "
            "but env.train_env_manager.tags is empty: this stage answers prompts (use algorithm.reward_norm_mean / reward_norm_std there), or set the tags"]


def check_step_reward(cfg: Any) -> list[str]:
    """`adv_estimator: step_reward` gives each turn its own normalised step score on every token
    (ROLL's estimators over step samples with gamma 1 and no token-level KL), and `step_reinforce`
    its return normalised within its episode group: neither reads token-level rewards, so the
    shaping that would act on them is refused beside them (and, for step_reinforce, the agentic
    normalisation and clip it does not apply)."""
    alg = getattr(cfg, "algorithm", None)
    if alg is None or alg.kind != "rl" or alg.adv_estimator not in ("step_reward", "step_reinforce"):
        return []
    from posttrain.algorithms.advantages_steps import STEP_REWARD_MODES

    unread = {"algorithm.use_kl_in_reward": alg.use_kl_in_reward, "algorithm.whiten_rewards": alg.whiten_rewards,
              "algorithm.reward_norm_mean": alg.reward_norm_mean is not None, "algorithm.reward_norm_std": alg.reward_norm_std is not None,
              f"algorithm.gamma ({alg.gamma})": alg.gamma != 1.0}
    if alg.adv_estimator == "step_reinforce":
        norm = alg.agentic_reward_norm
        unread.update({"algorithm.agentic_reward_norm": (norm.method, norm.norm_mean_type, norm.norm_std_type) != ("identity", None, None),
                       "algorithm.reward_clip": alg.reward_clip is not None})
        return [f"{key}: adv_estimator step_reinforce credits each turn with its discounted step return (algorithm.gigpo.step_gamma) "
                "standardised within its episode group, and reads no token-level reward, agentic normalisation or clip, so this "
                "would change nothing; remove it (gamma: set 1), or use adv_estimator step_reward with adv_estimator_args.mode "
                "return, which normalises the returns by algorithm.agentic_reward_norm and clips them" for key, on in unread.items() if on]
    mode = (alg.adv_estimator_args or {}).get("mode", "reward")
    if mode not in STEP_REWARD_MODES:
        return [f"algorithm.adv_estimator_args.mode: {mode!r}; step_reward scores a turn by one of {list(STEP_REWARD_MODES)}"]
    return [f"{key}: adv_estimator step_reward gives every token of a turn that turn's own step score, normalised by "
            "algorithm.agentic_reward_norm and clipped by algorithm.reward_clip, and reads no token-level reward, so this would "
            "change nothing; remove it (gamma: set 1), or pick an estimator over token-level rewards" for key, on in unread.items() if on]


def check_filter_groups(cfg: Any) -> list[str]:
    """Dynamic sampling draws more prompt batches for one step's batch (in the synchronous loop or a
    decoupled explorer)."""
    gen, train = get_path(cfg, "data.gen_batch_size", None), get_path(cfg, "data.train_batch_size", 1)
    enabled = is_rl(cfg) and get_path(cfg, "algorithm.filter_groups.enable", False)
    if gen is not None and gen != train and not enabled:
        return [f"data.gen_batch_size ({gen}) differs from data.train_batch_size ({train}), but it is read only by dynamic sampling "
                "(algorithm.filter_groups.enable, RL stages): without it a posttrain step trains on data.train_batch_size prompts "
                f"(verl's DAPO trainer would train on all {gen}); enable dynamic sampling, or set data.train_batch_size to {gen}"]
    if not enabled:
        return []
    problems = []
    if get_path(cfg, "env.train_env_manager.tags", []):
        problems.append("algorithm.filter_groups.enable: an agentic stage plays one set of environment groups per step, seeded by the step "
                        "(env.train_env_manager), with no further prompts to draw; switch it off there")
    mode = get_path(cfg, "trainer.mode", "both")
    if mode in ("serve", "bench"):  # a decoupled explorer (both, explore) refills each batch; train reads what it wrote
        problems.append(f"algorithm.filter_groups.enable: trainer.mode {mode} explores no batches (serve trains on the agents' "
                        "committed calls, bench validates checkpoints), so no group is filtered; switch it off for this mode")
    if get_path(cfg, "algorithm.filter_groups.metric", "acc") == "seq_final_reward" and get_path(cfg, "algorithm.use_kl_in_reward", False):
        problems.append("algorithm.filter_groups.metric=seq_final_reward with algorithm.use_kl_in_reward: the KL penalty needs the reference "
                        "log-probs, which posttrain computes for the kept groups only (verl's DAPO trainer applies it before they exist); "
                        "use metric seq_reward")
    return problems


def check_token_filter(cfg: Any) -> list[str]:
    """The token filter acts on an RL stage's loss mask; its options shape only the filter they belong to."""
    kind = get_path(cfg, "algorithm.token_filter.type", None)
    mu, max_frac = get_path(cfg, "algorithm.token_filter.mu", None), get_path(cfg, "algorithm.token_filter.max_frac", 1e-4)
    if kind is not None and not is_rl(cfg):
        return [f"algorithm.token_filter.type={kind} filters the tokens of an RL loss by the advantages' sign; "
                f"algorithm.kind {get_path(cfg, 'algorithm.kind', 'rl')} has none: leave it null for this stage"]
    unread = [f"{name}={value}" for name, value, read in (("mu", mu, mu is None or kind is not None),
                                                           ("max_frac", max_frac, max_frac == 1e-4 or kind == "clip_v")) if not read]
    if unread:
        return [f"algorithm.token_filter.{', '.join(unread)}: read only by " + ("a filter" if kind is None else "clip_v")
                + f" (algorithm.token_filter.type is {kind or 'null'}); set the type or leave it at its default"]
    return []
