"""`actor`: policy training (the PPO update), its batching, losses and optimizer.

Batch units follow verl: ``ppo_mini_batch_size`` counts prompts (each brings rollout.n responses) and
is global over all devices; ``ppo_micro_batch_size_per_gpu`` counts responses on one device; the
token budget ``ppo_max_token_len_per_gpu`` counts prompt + response tokens on one device.

This module also holds the sub-sections the `ref` and `critic` sections reuse (FSDP options,
checkpoint contents; the profiler settings come from posttrain.config.sections.profiler). Their refs are relative (``"verl:.param_offload"``); the holding
field gives each role's prefix.

`UNSUPPORTED` lists reference keys that have no field here, each with the reason.
"""

from __future__ import annotations

from typing import Any

from posttrain.config.fields import param, section
from posttrain.config.sections.optim import OptimConfig
from posttrain.config.sections.profiler import ProfilerConfig
from posttrain.config.sections.topk_kl import TopkKLConfig

_VERL = "verl:actor_rollout_ref.actor"
_TRINITY_ALGO = "trinity:algorithm"

# Kept equal to posttrain.algorithms (the config layer does not import it; a test compares them).
LOSS_AGG_MODES = ("token-mean", "token-sum", "seq-mean-token-sum", "seq-mean-token-mean", "seq-mean-token-sum-norm")
KL_LOSS_TYPES = ("kl", "k1", "abs", "mse", "k2", "low_var_kl", "k3", "full")


# ---- sub-sections shared with `ref` and `critic` ----------------------------------------------


@section
class MixedPrecisionConfig:
    """The dtype a role computes in while its parameters, gradients and optimizer state stay in
    model.dtype (`torch.autocast` in one process and on every worker alike)."""

    param_dtype: str = param("auto", doc="Compute dtype of forward and backward: auto (bf16 when the role computes on a GPU, fp32 on the CPU), fp32 (as model.dtype: no autocast) or bf16 (matmuls and attention in bfloat16 under torch.autocast, fp32 master weights: the role's forwards in RL stages, the policy's in SFT and DPO, the reference's in DPO). fp16 is refused: it needs loss scaling, which posttrain does not do.", choices=["auto", "fp32", "bf16"], refs=["verl:.param_dtype"])
    reduce_dtype: str = param("fp32", doc="Dtype of the gradient reduction across worker processes when the role is sharded (FSDP2's reduce dtype); one process has nothing to reduce.", choices=["fp32", "bf16"], refs=["verl:.reduce_dtype"])
    buffer_dtype: str = param("fp32", doc="Dtype module buffers are cast to. Only fp32 is accepted: FSDP2 has no buffer cast, buffers (rotary frequencies) keep model.dtype.", choices=["fp32"], refs=["verl:.buffer_dtype"])


@section
class FsdpConfig:
    """How a role's model is sharded over worker processes with FSDP2 (`cluster.n_gpus_per_node`
    >= 2). With one process nothing is sharded: the sharding keys are refused at other values than
    their defaults, and the offload keys are accepted only on the CPU (where parameters already are)."""

    mixed_precision: MixedPrecisionConfig = param(factory=MixedPrecisionConfig, doc="Compute dtype with fp32 master weights (bf16 autocast).", refs=["verl:.mixed_precision"])

    param_offload: bool = param(False, doc="Keep parameters (and with them gradients and optimizer state: FSDP2's CPU offload policy, the optimizer step runs on the CPU) in CPU memory between uses.", refs=["verl:.param_offload"])
    optimizer_offload: bool = param(False, doc="Keep optimizer state in CPU memory: the same CPU offload policy as param_offload (FSDP2 offloads parameters, gradients and optimizer state together).", refs=["verl:.optimizer_offload"])
    offload_policy: bool = param(False, doc="FSDP2's CPU offload policy: parameters, gradients and optimizer state in CPU memory (the same as param_offload).", refs=["verl:.offload_policy"])
    reshard_after_forward: bool = param(True, doc="Free the gathered parameters of each layer after its forward (gather again for the backward); false keeps them until the backward (more memory, fewer gathers).", refs=["verl:.reshard_after_forward"])
    forward_prefetch: bool = param(False, doc="Gather the next layer's parameters while the current layer computes its forward.", refs=["verl:.forward_prefetch"])
    fsdp_size: int = param(-1, doc="Worker processes per sharding group; -1 shards over all of them; a divisor d of the world shards within groups of d and replicates across groups (HSDP).", ge=-1, refs=["verl:.fsdp_size"])
    min_num_params: int = param(0, doc="Wrap policy: every module with at least this many parameters of its own becomes a sharding unit; 0 makes each decoder layer one.", ge=0, refs=["verl:.wrap_policy.min_num_params"])
    transformer_layer_cls_to_wrap: list[str] = param(factory=list, doc="Wrap policy: module class names made sharding units; empty uses the model's decoder layers.", refs=["verl:.wrap_policy.transformer_layer_cls_to_wrap"])


@section
class CheckpointConfig:
    """What a role saves in, and restores from, a checkpoint."""

    save_contents: list[str] = param(factory=lambda: ["model", "optimizer", "extra"], doc="Parts saved: the weights (model; hf_model also adds a standalone Hugging Face copy in <role>/huggingface/ where the role directory is a LoRA adapter or sharded files, and is the same as model otherwise), optimizer (optimizer.pt), extra (LR schedule, generators, sampler). Leaving out optimizer or extra saves space, and a resume from such a checkpoint continues without them, not exactly (a warning says so).", choices=["model", "optimizer", "extra", "hf_model"], refs=["verl:.save_contents", "verl:.contents"])
    load_contents: list[str] = param(factory=lambda: ["model", "optimizer", "extra"], doc="Parts restored on resume: model (hf_model is the same: the weights are a Hugging Face directory), optimizer, extra (LR schedule, generators, sampler and RNG); leaving one out continues without it, not exactly.", choices=["model", "optimizer", "extra", "hf_model"], refs=["verl:.load_contents"])


def roll_worker_unsupported(role: str, section_name: str) -> dict[str, str]:
    """UNSUPPORTED entries for a ROLL worker (``actor_train``, ``reference``, ``critic``). Its
    ``strategy_name`` and its DeepSpeed, FSDP2 and Megatron options are rules of
    posttrain.config.dialects.roll_strategy, roll_fsdp2 and roll_megatron."""
    return {
        f"roll:{role}.strategy_args.strategy_config": f"options of a strategy posttrain does not translate: it runs {section_name} with its own FSDP2 (ROLL's DeepSpeed, FSDP2 and Megatron options are translated)",
        f"roll:{role}.world_size": "ROLL derives it from device_mapping; posttrain derives process counts from the cluster section",
    }


# ROLL declares offload_nccl on every worker but its WorkerConfig.__post_init__ sets it to false (and logs
# "force set offload_nccl=False") since v0.3.0, so no value frees a process group there either.
NCCL_OFFLOAD = ("ROLL sets offload_nccl to false for every worker whatever the file says (its worker config's post-init "
                "forces it), so its NCCL process groups stay up for the whole run, as posttrain's do; the rollout engine's "
                "memory is freed between generations with rollout.free_cache_engine")
FREEZE = ("freezing modules by name prefix (ROLL, for a multimodal model's vision tower): posttrain trains every parameter of the "
          "policy, or with model.lora_rank only adapters on model.target_modules (the base frozen)")


# ---- the actor -------------------------------------------------------------------------------


@section
class PolicyLossConfig:
    """Which policy loss the actor minimises, and the options of the losses that have them."""

    loss_mode: str = param("vanilla", doc="Policy loss: a name registered in posttrain.algorithms (vanilla is clipped PPO with dual clip).", refs=[f"{_VERL}.policy_loss.loss_mode", f"{_TRINITY_ALGO}.policy_loss_fn"])
    clip_cov_ratio: float = param(0.0002, doc="clip-cov: fraction of tokens whose gradient is cut (those with the largest advantage-logprob covariance).", gt=0, le=1, refs=[f"{_VERL}.policy_loss.clip_cov_ratio"])
    clip_cov_lb: float = param(1.0, doc="clip-cov: lower covariance bound of the tokens eligible for cutting.", refs=[f"{_VERL}.policy_loss.clip_cov_lb"])
    clip_cov_ub: float = param(5.0, doc="clip-cov: upper covariance bound of the tokens eligible for cutting.", refs=[f"{_VERL}.policy_loss.clip_cov_ub"])
    kl_cov_ratio: float = param(0.0002, doc="kl-cov: fraction of tokens (largest covariance) that get a KL penalty instead of clipping.", gt=0, le=1, refs=[f"{_VERL}.policy_loss.kl_cov_ratio"])
    ppo_kl_coef: float = param(0.1, doc="kl-cov: coefficient of that per-token KL penalty.", ge=0, refs=[f"{_VERL}.policy_loss.ppo_kl_coef"])
    loss_args: dict[str, Any] = param(factory=dict, doc="Options of the policy loss that have no field of their own (opmd tau, sapo tau_pos/tau_neg, sppo epsilon, rec clip_mode, mix mu, ...); each must be a keyword the loss declares (Trinity-RFT's policy_loss_fn_args).")


@section
class RouterReplayConfig:
    """Routing replay of a mixture-of-experts policy (posttrain.models.router_replay)."""

    mode: str = param("disabled", doc="disabled: every forward routes each token with the router's own top-k. R2: the old-log-prob forward records every MoE layer's top-k experts of every token, and the update's forwards (and their gradient-checkpoint recomputations) route each token to those experts, the weights of the replayed experts coming from the router's current logits by the family's own rule (softmax at the replayed experts, renormalised where it renormalises its top-k), so the PPO ratio compares one sub-network at two parameter values (verl's Megatron actor's R2). R2 always recomputes the old log-probs (the rollout's come with no routing), and needs an MoE policy whose routers posttrain knows (Qwen2/Qwen3-MoE, Mixtral, OLMoE, GPT-OSS). R3 (verl: replaying the rollout engine's routing) is not a choice: posttrain's engines record no routing. RL stages only.", choices=["disabled", "R2"])


@section
class ActorConfig:
    """The policy update: mini/micro-batches, epochs, loss options, optimizer."""

    # ---- batching ----------------------------------------------------------------------------
    ppo_mini_batch_size: int = param(8, doc="Prompts per optimizer step (x rollout.n responses), across all devices.", ge=1, refs=[f"{_VERL}.ppo_mini_batch_size"])
    ppo_micro_batch_size_per_gpu: int = param(8, doc="Responses per forward/backward pass on one device (gradient accumulation unit).", ge=1, refs=[f"{_VERL}.ppo_micro_batch_size_per_gpu", "roll:actor_train.training_args.per_device_train_batch_size"])
    use_dynamic_bsz: bool = param(False, doc="Pack micro-batches by token budget (ppo_max_token_len_per_gpu) instead of a fixed count.", refs=[f"{_VERL}.use_dynamic_bsz", "trinity:trainer.use_dynamic_bsz", "roll:actor_train.use_dynamic_batching_in_train"])
    ppo_max_token_len_per_gpu: int = param(16384, doc="Token budget (prompt + response tokens) of one micro-batch on one device when use_dynamic_bsz; under Ulysses a micro-batch holds ulysses_sequence_parallel_size times this, split over those devices (as verl).", ge=1, refs=[f"{_VERL}.ppo_max_token_len_per_gpu", "trinity:trainer.max_token_len_per_gpu", "roll:actor_train.max_tokens_per_microbatch_in_train"])
    ppo_epochs: int = param(1, doc="Passes over each rollout batch.", ge=1, refs=[f"{_VERL}.ppo_epochs", "roll:ppo_epochs"])
    shuffle: bool = param(False, doc="Shuffle the responses before splitting them into mini-batches, each epoch.", refs=[f"{_VERL}.shuffle"])
    share_prompt_forward: bool = param(False, doc="Training forward computes each prompt once for its group of responses (one row: prompt, then every response, with a mask that keeps responses apart); same results to float rounding, less work when prompts are long.", refs=[f"{_VERL}.use_prefix_grouper"])
    reuse_rollout_logprobs: str = param("auto", doc="Old log-probs of the PPO ratio: never reuse the rollout's (always recompute them with the actor); auto reuses the rollout's when it sampled on-policy with the actor's weights in the actor's compute dtype, after checking on the first step that they equal a recomputation; always reuses them for on-policy rows even when the engine computes in another dtype (rollout.dtype, fsdp_config.mixed_precision), so the first PPO ratio is pi_actor / pi_rollout rather than 1 (what ROLL does without old-log-prob recomputation).", choices=["never", "auto", "always"])

    # ---- policy loss -------------------------------------------------------------------------
    clip_ratio: float = param(0.2, doc="PPO clip range epsilon: the ratio is clipped to [1 - eps, 1 + eps].", gt=0, refs=[f"{_VERL}.clip_ratio", "roll:pg_clip", f"{_TRINITY_ALGO}.policy_loss_fn_args.clip_range"])
    clip_ratio_low: float | None = param(None, doc="Lower clip range (ratio >= 1 - clip_ratio_low); null uses clip_ratio.", gt=0, refs=[f"{_VERL}.clip_ratio_low", f"{_TRINITY_ALGO}.policy_loss_fn_args.clip_range_low"])
    clip_ratio_high: float | None = param(None, doc="Upper clip range (ratio <= 1 + clip_ratio_high; DAPO's clip-higher); null uses clip_ratio.", ge=0, refs=[f"{_VERL}.clip_ratio_high", f"{_TRINITY_ALGO}.policy_loss_fn_args.clip_range_high"])
    dual_clip: bool = param(True, doc="Dual-clip PPO: bound the loss of negative-advantage tokens at clip_ratio_c x |advantage|.", refs=["roll:dual_clip_loss"])
    clip_ratio_c: float = param(3.0, doc="Dual-clip bound c (> 1) used when dual_clip.", gt=1, refs=[f"{_VERL}.clip_ratio_c", f"{_TRINITY_ALGO}.policy_loss_fn_args.clip_ratio_c"])
    loss_agg_mode: str = param("token-mean", doc="How per-token losses become one number: token-mean, token-sum (no normaliser), seq-mean-token-sum, seq-mean-token-mean or seq-mean-token-sum-norm.", choices=LOSS_AGG_MODES, refs=[f"{_VERL}.loss_agg_mode", "roll:loss_agg_mode", f"{_TRINITY_ALGO}.loss_agg_mode"])
    micro_batch_weight: str = param("normaliser", doc="RL stages: how each micro-batch's loss is weighted when a mini-batch's gradient is accumulated. normaliser: by its share of the mini-batch's loss_agg_mode normaliser (its trained tokens for token-mean, its responses for the seq-mean modes, 1 for token-sum), so the gradient is that of the whole mini-batch's loss however it is cut into micro-batches (verl, ROLL). rows: by its share of the mini-batch's responses whatever the mode (Trinity-RFT's default, trainer.fix_actor_microbatch_loss_scale false: its micro-batch losses scaled by 1 / the accumulation steps, or by their responses over the mini-batch's with dynamic batch size), so a token-mean becomes the mean of the micro-batches' own token means and the gradient depends on the cut (with use_dynamic_bsz, on how dynamic_bsz_partition cuts the micro-batches). With several worker processes the share is of the whole mini-batch's responses.", choices=["normaliser", "rows"])
    dynamic_bsz_partition: str = param("pack", doc="How a mini-batch is cut into micro-batches for the actor's update when use_dynamic_bsz (an SFT, DPO or distillation stage's batch likewise, its examples' real tokens counted). pack: rows longest first, packed greedily so that each micro-batch's padded forward (its rows x their longest prompt + longest response) stays within the token budget (SFT/DPO examples in order, by real tokens). balanced: as verl (and so Trinity-RFT) cuts it: min(rows, ceil(real tokens / budget)) micro-batches, the most any worker process needs, over which Karmarkar and Karp's differencing method balances the rows' workloads (24576 L + L^2 for L real tokens; posttrain.workers.balanced_split), so a micro-batch may exceed the budget. With micro_batch_weight normaliser (SFT: sft_loss_scope batch) the gradient is the same either way; with rows (SFT: micro_batch_rows or micro_batch) it follows the micro-batches, and balanced gives verl's in one process (with several, each process cuts its own share of the rows, which verl deals out otherwise). Refused without use_dynamic_bsz.", choices=["pack", "balanced"])
    policy_loss: PolicyLossConfig = param(factory=PolicyLossConfig, doc="Policy loss choice and its options.")
    entropy_coeff: float = param(0.0, doc="Weight of the entropy bonus: loss -= entropy_coeff x mean token entropy; 0 disables.", refs=[f"{_VERL}.entropy_coeff", "roll:entropy_loss_coef", f"{_TRINITY_ALGO}.entropy_loss_fn_args.entropy_coef"])
    use_kl_loss: bool = param(False, doc="Add a KL(policy || reference) term to the actor loss (GRPO-style, instead of KL in the reward).", refs=[f"{_VERL}.use_kl_loss", "roll:use_kl_loss"])
    kl_loss_coef: float = param(0.001, doc="Weight of the KL loss term when use_kl_loss.", ge=0, refs=[f"{_VERL}.kl_loss_coef", "roll:kl_loss_coef", f"{_TRINITY_ALGO}.kl_loss_fn_args.kl_coef"])
    kl_loss_type: str = param("low_var_kl", doc="KL estimator of the KL loss: kl/k1, abs, mse/k2, low_var_kl/k3 or full (needs whole distributions).", choices=KL_LOSS_TYPES, refs=[f"{_VERL}.kl_loss_type", f"{_TRINITY_ALGO}.kl_loss_fn"])
    rl_loss_coef: float = param(1.0, doc="Weight of the RL part of the actor loss, policy loss plus KL loss (ROLL): loss = rl_loss_coef x (pg_loss + kl_loss_coef x kl_loss) - entropy_coeff x entropy + sft_loss_coef x sft_loss + the TOPR terms (topr_positive_loss_coef, topr_negative_loss_coef). RL stages only.", ge=0, refs=["roll:rl_loss_coef"])
    calculate_sum_pi_squared: bool = param(False, doc="Compute sum_v pi(v)^2, the squared next-token probabilities summed over the vocabulary, at every response token of the policy before its update (one more forward pass over the batch per step; verl computes it in its old-log-prob pass) and log verl's variance-proxy metrics of the policy gradient from it: variance_proxy/expected_w, expected_a_squared, proxy1_signal_strength (grad_norm^2), proxy2_total_power, proxy3_pure_noise (posttrain.algorithms.variance_proxy_metrics). RL stages only. An advantage estimator that reads it (optimal_token_baseline, tir_optimal_token_baseline) has it computed, and these metrics logged, whatever this says.", refs=[f"{_VERL}.calculate_sum_pi_squared"])
    sft_loss_scope: str = param("batch", doc="SFT stages: what a trained token's loss is averaged over. batch: every trained token of the step's batch (one token mean, however the batch is cut: ROLL, Trinity-RFT with trainer.fix_actor_microbatch_loss_scale); micro_batch: its micro-batch's trained tokens, the micro-batch means then averaged over the micro-batches and the worker processes (verl's SFT trainer, whose loss therefore weighs a token of a short micro-batch more); micro_batch_all_ranks: the trained tokens of that micro-batch round on every worker process, then averaged over the rounds (verl's data.balance_dp_token). micro_batch_rows: its micro-batch's token mean, weighted by the micro-batch's share of the batch's sequences (Trinity-RFT's default, trainer.fix_actor_microbatch_loss_scale false: its micro-batch losses scaled by 1 / the accumulation steps, or by their sequences over the batch's with dynamic batch size). In one process micro_batch and micro_batch_all_ranks are the same.", choices=["batch", "micro_batch", "micro_batch_all_ranks", "micro_batch_rows"], refs=["verl:data.balance_dp_token"])
    sft_loss_coef: float = param(0.0, doc="Weight of ROLL's SFT term on the responses that scored above 0: the mean over them of -score x (the response's probability under the sampling policy) x its log-likelihood (posttrain.algorithms.positive_sft_loss), logged as actor/sft_loss; 0 disables. RL stages only.", ge=0, refs=["roll:sft_loss_coef"])
    topr_positive_loss_coef: float = param(0.0, doc="Weight of ROLL's TOPR term on the responses that scored above 0, added outside rl_loss_coef: REINFORCE, agg(-A log pi) over their tokens (the positive part of posttrain.algorithms.topr_loss with scores), logged with the negative part as actor/topr_loss; 0 disables. ROLL's RLVR actor added it from 2025-07 until v0.2.0 (its field postive_loss_coef, still declared there but no longer read). RL stages only.", ge=0, refs=["roll:postive_loss_coef"])
    topr_negative_loss_coef: float = param(0.0, doc="Weight of ROLL's TOPR term on the responses that scored 0 or less, added outside rl_loss_coef: agg(-sg[clip(pi / pi_old, 0, 1)] A log pi) over their tokens (the negative part of posttrain.algorithms.topr_loss with scores); 0 disables. ROLL's RLVR actor added it from 2025-07 until v0.2.0 (use_topr_neg_loss_coef, still declared there but no longer read; its TOPR is now actor_train.pg_variant topr). RL stages only.", ge=0, refs=["roll:use_topr_neg_loss_coef"])
    topk_kl: TopkKLConfig = param(factory=TopkKLConfig, doc="On-policy distillation: a supervised top-k forward KL from the teacher (the reference model, ref.model_path) to the policy at every response token, added to the loss or as the whole loss (posttrain.algorithms.distill_topk). RL stages only.")
    router_replay: RouterReplayConfig = param(factory=RouterReplayConfig, doc="Routing replay of a mixture-of-experts policy: the update routes each token as the old-log-prob forward did (R2).")
    moe_aux_loss_coef: float | None = param(0.0, doc="Weight of the mixture-of-experts router's load-balancing loss added to the actor loss (Switch Transformers' loss as Megatron-core's aux_loss computes it: per MoE layer E / (k T^2) x sum over experts of routed-token count x summed router probability over the micro-batch's real tokens, summed over layers; posttrain.algorithms.load_balancing_loss), each micro-batch's weighted by its share of the mini-batch's tokens, logged as actor/moe_aux_loss. null takes the model's router_aux_loss_coef (config.json; 0.001 for Qwen3-MoE, 0 when it has none); 0 disables. A positive value needs a model whose routers transformers exposes (output_router_logits: Qwen2/Qwen3-MoE, Mixtral, ...) and routes each response's prompt in the update (no share_prompt_forward there), as Megatron does. SFT and DPO stages add it to their loss too (each micro-batch's by its share of the batch's tokens, logged as sft/moe_aux_loss, dpo/moe_aux_loss); distillation stages refuse a changed value.", ge=0, refs=["roll:actor_train.strategy_args.strategy_config.moe_aux_loss_coeff", "roll:actor_train.model_args.moe_aux_loss_coef"])
    moe_z_loss_coef: float = param(0.0, doc="Weight of the mixture-of-experts router's z-loss added to the actor loss (ST-MoE's, as Megatron-core's moe_z_loss_coeff computes it: per MoE layer the mean over the micro-batch's real tokens of the squared logsumexp of the router logits, summed over layers; posttrain.algorithms.router_z_loss), each micro-batch's weighted by its share of the mini-batch's tokens as moe_aux_loss_coef's, logged as actor/moe_z_loss; 0 disables. A positive value needs a model whose routers transformers exposes, and routes each response's prompt in the update. SFT and DPO stages add it to their loss too (sft/moe_z_loss, dpo/moe_z_loss); distillation stages refuse a changed value.", ge=0, refs=["roll:actor_train.strategy_args.strategy_config.moe_z_loss_coeff"])

    # ---- optimization ------------------------------------------------------------------------
    grad_clip: float = param(1.0, doc="Clip the global gradient norm to this value before each optimizer step.", gt=0, refs=[f"{_VERL}.grad_clip", f"{_VERL}.optim.clip_grad", "roll:max_grad_norm", "trinity:trainer.grad_clip", f"{_TRINITY_ALGO}.optimizer.clip_grad"])
    freeze_module_prefix: list[str] = param(factory=list, doc="Freeze the policy's parameters whose names (model.named_parameters() of the loaded model: model.embed_tokens, model.layers.0.mlp, lm_head, ...) start with one of these prefixes: no gradient and no optimizer state, so they keep their loaded values (ROLL's freeze_module_prefix, translated from its comma-separated string). A prefix that names no parameter, or prefixes that freeze every parameter, are refused when the model loads. RL stages only; refused with LoRA (model.lora_rank), whose base is frozen already.")
    freeze_vision_tower: bool = param(False, doc="Freeze a vision-language policy's vision tower (its model.visual parameters: patch embedding, blocks, merger): no gradient and no optimizer state, so only the language model trains. Refused with a text-only policy (no tower to freeze), with LoRA (the base is frozen already) and in SFT/DPO stages.", refs=[f"{_VERL}.freeze_vision_tower"])
    optim: OptimConfig = param(factory=OptimConfig, doc="Optimizer and LR schedule of the actor.", refs=[f"{_VERL}.optim", "roll:actor_train.training_args", f"{_TRINITY_ALGO}.optimizer"])

    # ---- backend, parallelism and performance -------------------------------------------------
    strategy: str = param("fsdp", doc="Training backend across worker processes: fsdp and fsdp2 both select posttrain's one sharding backend, FSDP2 (one process trains plain torch either way).", choices=["fsdp", "fsdp2"], refs=[f"{_VERL}.strategy", "trinity:trainer.trainer_strategy"])
    fsdp_config: FsdpConfig = param(factory=FsdpConfig, doc="FSDP sharding and offload of the actor.", refs=[f"{_VERL}.fsdp_config"])
    ulysses_sequence_parallel_size: int = param(1, doc="Worker processes one sequence is split over (Ulysses sequence parallelism: attention heads exchanged by all-to-all; models whose attention runs through transformers' attention interface, without sliding windows); must divide the worker processes, which form data-parallel groups of this size. Also the SFT/DPO stages' policy.", ge=1, refs=[f"{_VERL}.ulysses_sequence_parallel_size", "trinity:trainer.ulysses_sequence_parallel_size", "roll:actor_train.model_args.ulysses_size"])
    use_torch_compile: bool = param(False, doc="RL stages: run the decoder layers of the training-side forwards (actor update and log-probs; the reference and critic take the same setting) of supported Llama/Qwen2 models as a lean forward compiled with torch.compile (exact to float rounding; ~10 s compile; falls back to eager when compiling fails). Refused for SFT/DPO stages.", refs=[f"{_VERL}.use_torch_compile"])
    entropy_from_logits_with_chunking: bool = param(False, doc="Compute token entropy in chunks to lower peak memory. posttrain always does (log-probs and entropy from at most 2**26 logits at a time, posttrain.models.logprobs), so true is what happens and false changes nothing: the values are the same either way.", refs=[f"{_VERL}.entropy_from_logits_with_chunking"])
    entropy_checkpointing: bool = param(False, doc="Recompute the token entropy's softmax and products in the backward pass instead of storing them (torch.utils.checkpoint around the entropy of each chunk of logits): one (tokens, vocabulary) tensor less per chunk, same numbers. No effect with model.use_fused_kernels, whose head stores no logits.", refs=[f"{_VERL}.entropy_checkpointing"])
    checkpoint: CheckpointConfig = param(factory=CheckpointConfig, doc="What the actor's checkpoints hold.", refs=[f"{_VERL}.checkpoint"])
    profiler: ProfilerConfig = param(factory=ProfilerConfig, doc="Profiling of the actor (and of the rollout, which follows it) in profiler.steps.", refs=[f"{_VERL}.profiler"])


_SAME_NUMBERS = "the same numbers"
_QAT = ("quantization-aware training (fake-quantized weights in the training forward, quantized weights in the engine); posttrain "
        "trains and samples in the role's compute dtype: its defaults (enable: false) are accepted")


def verl_engine_keys(prefix: str, trains: bool) -> tuple[dict[str, str], dict[str, str]]:
    """``(unsupported, no_effect)`` for the keys of one of verl's FSDP engine sections (``prefix``:
    a role's ``fsdp_config``, or the critic's ``fsdp``) that no posttrain field takes: what changes
    the numbers is refused unless at verl's default, what only says how they are computed is
    dropped. ``trains``: whether the role takes optimizer steps."""
    unsupported = {
        f"{prefix}.dtype": "the engine's compute dtype: bfloat16 (verl's default) is posttrain's mixed precision on a GPU; float16 needs "
                           "loss scaling, which posttrain does not do",
        f"{prefix}.seed": "verl seeds the engine's processes with it; posttrain seeds every role's processes with trainer.seed",
        f"{prefix}.full_determinism": "deterministic kernels everywhere (torch.use_deterministic_algorithms); posttrain seeds every role "
                                      "with trainer.seed but does not force deterministic kernels",
        f"{prefix}.model_dtype": "the dtype the role's weights are loaded in; posttrain loads every role in model.dtype",
        **{f"{prefix}.qat.{k}": _QAT for k in ("enable", "mode", "group_size", "ignore_patterns", "activation_observer", "quantization_config_path")},
    }
    if trains:
        unsupported[f"{prefix}.forward_only"] = "true would run the role's forward passes only and never train it"
    no_effect = {
        f"{prefix}.use_orig_params": "FSDP1's flat-parameter option; posttrain's FSDP2 shards each parameter as it is",
        f"{prefix}.use_torch_compile": f"compiles verl's entropy function in the engine: {_SAME_NUMBERS}",
        f"{prefix}.pad_to_length": f"pads each packed micro-batch up to a length bucket; the padding is stripped before the loss: {_SAME_NUMBERS}",
        f"{prefix}.pad_to_length_bucket": f"the length bucket of pad_to_length; the padding is stripped before the loss: {_SAME_NUMBERS}",
        f"{prefix}.strategy": "fsdp or fsdp2 inside the engine: both are posttrain's FSDP2 (the role's strategy names the engine)",
        f"{prefix}.entropy_from_logits_chunk_size": f"the chunk of tokens verl's chunked entropy takes at a time: {_SAME_NUMBERS}",
    }
    if not trains:
        no_effect[f"{prefix}.forward_only"] = "verl marks the reference as forward-only; posttrain's reference never trains"
    return unsupported, no_effect


def verl_role_keys(prefix: str) -> tuple[dict[str, str], dict[str, str]]:
    """``(unsupported, no_effect)`` for role-level keys of verl 0.10's actor, reference and critic
    that no posttrain field takes."""
    unsupported: dict[str, str] = {}
    no_effect = {
        f"{prefix}.pad_to_length": f"pads each packed micro-batch up to a length bucket; the padding is stripped before the loss: {_SAME_NUMBERS}",
        f"{prefix}.entropy_from_logits_chunk_size": f"the chunk of tokens verl's chunked entropy takes at a time: {_SAME_NUMBERS}",
        f"{prefix}.checkpoint.async_save": "writes the checkpoint in the background: the same files",
    }
    unsupported[f"{prefix}.optim.zero_indexed_step"] = ("whether verl's learning-rate schedule counts its first step as 0 (its default) or 1; "
                                                        "posttrain's schedule is not shifted by a step")
    return unsupported, no_effect


_ACTOR_ENGINE = verl_engine_keys(f"{_VERL}.fsdp_config", trains=True)
del _ACTOR_ENGINE[0][f"{_VERL}.fsdp_config.model_dtype"]  # the actor's is model.dtype (a field of its own)
_ACTOR_ROLE = verl_role_keys(_VERL)

# Reference keys with no field in `actor`, and why (read by the mapping generator and dialect loaders).
# The reference's router_replay: verl reads the actor's only (its reference routes with its own routers).
ROUTER_REPLAY = ("routing replay of the reference (verl reads router_replay of the actor only, and replays routing in its Megatron "
                 "actor); posttrain's reference routes every token with the model's own router; `mode: disabled` is accepted")
UNSUPPORTED: dict[str, str] = {
    f"{_VERL}.data_loader_seed": "a workaround for Megatron's data order across context-parallel ranks; posttrain's shuffle is seeded from the run seed",
    f"{_TRINITY_ALGO}.entropy_loss_fn": "posttrain has one entropy term, Trinity-RFT's default (entropy_coef x mean token entropy, weighted by actor.entropy_coeff): `default` is accepted, another entropy function is refused",
    "roll:l2": "use decoupled weight decay: actor.optim.weight_decay",
    **roll_worker_unsupported("actor_train", "actor"),
    # Keys met in the published examples (tests/config/corpus, benchmarks/foreign_corpus.py).
    "roll:actor_train.worker_cls": "ROLL's worker class for the role; posttrain's roles are its own (posttrain.workers), chosen by the algorithm",
    **_ACTOR_ENGINE[0],
    **_ACTOR_ROLE[0],
    **{f"{_VERL}.qat.{k}": _QAT for k in ("enable", "mode", "group_size", "ignore_patterns", "activation_observer", "quantization_config_path")},
    f"{_VERL}.loss_scale_factor": ("the constant seq-mean-token-sum-norm divides by; posttrain divides by the response length "
                                   "(data.max_response_length), which is what verl's default (null: the padded response length) gives"),
    f"{_VERL}.policy_loss.dro_beta": "the weight of the quadratic log-ratio penalty of verl's dro loss, which posttrain does not provide",
}


# ROLL builds its config with dacite's from_dict, which ignores keys its dataclasses do not declare.
_NOT_READ = "not read by ROLL (no field of its config dataclasses declares it; ROLL ignores such keys)"
# ROLL keys met in its published examples that change nothing whatever their value (the loaders drop them).
NO_EFFECT: dict[str, str] = {
    **_ACTOR_ENGINE[1],
    **_ACTOR_ROLE[1],
    f"{_VERL}.calculate_entropy": "whether verl computes the entropy when its coefficient is 0 (for its metrics); posttrain computes it for its metrics and the bonus either way",
    f"{_VERL}.use_fused_kernels": f"verl's fused log-prob and entropy kernels: {_SAME_NUMBERS} to float rounding",
    f"{_VERL}.use_remove_padding": f"packing the micro-batch's sequences without padding (verl 0.10's engine reads it here): {_SAME_NUMBERS}; posttrain's switch is model.use_remove_padding",
    "roll:actor_train.offload_nccl": NCCL_OFFLOAD,
    "roll:positive_loss_coef": _NOT_READ + " (ROLL spells its field postive_loss_coef)",
    "roll:model_name": _NOT_READ + " (a name the agentic examples build with ${now:...})",
    "roll:world_size": _NOT_READ + " at the top level (only a role, or an env manager, has a world_size; a role's is the length of its device list)",
    "verl:actor_rollout_ref.actor.sum_pi_squared_checkpointing": "recomputes verl's sum of squared probabilities in its backward to save memory; posttrain computes it (actor.calculate_sum_pi_squared) in a pass without gradients, which keeps no activations",
    "roll:enable_old_logprobs_recompute": "when ROLL computes old log-probs (a scheduling optimisation with the same values); posttrain decides with actor.reuse_rollout_logprobs",
    "roll:reference.use_dynamic_batching_in_train": "the reference is never trained",
    "roll:reference.max_tokens_per_microbatch_in_train": "the reference is never trained",
    "roll:batch_adjust_mode": "posttrain trains one row per trajectory (all its turns), so a step is always rollout_batch_size rows: no step samples to copy or delete",
    "roll:validation.eval_steps": _NOT_READ + " (its validation frequency is the top-level eval_steps)",
    **{f"roll:{role}.model_args.flash_attn": _NOT_READ + " (the attention kernel is model_args.attn_implementation)"
       for role in ("actor_train", "actor_infer", "reference", "critic")},
    **{f"roll:{role}.sequence_length_round_in_{phase}": "padding granularity of ROLL's dynamic micro-batches: padding is masked out, so it changes no result"
       for role in ("actor_train", "reference", "critic") for phase in ("train", "infer")},
}


def check_save_contents(cfg: Any) -> list[str]:
    """A checkpoint always holds the weights: save_contents must name model or hf_model."""
    problems = []
    for role in ("actor", "critic"):
        contents = getattr(getattr(getattr(cfg, role, None), "checkpoint", None), "save_contents", None)
        if contents is not None and not {"model", "hf_model"} & set(contents):
            problems.append(f"{role}.checkpoint.save_contents {list(contents)} leaves out the weights: a checkpoint without them cannot be resumed or exported; add model (or hf_model)")
    return problems


def check_freeze_prefix(cfg: Any) -> list[str]:
    """actor.freeze_module_prefix acts on the RL actor's full model: not on an SFT/DPO stage, not beside
    LoRA (whose base is frozen already; ROLL ignores the prefixes then), and not with an empty prefix
    (every name starts with it)."""
    prefixes = list(getattr(getattr(cfg, "actor", None), "freeze_module_prefix", None) or [])
    problems = check_freeze_vision_tower(cfg)
    if not prefixes:
        return problems
    if "" in prefixes:
        problems.append(f"actor.freeze_module_prefix {prefixes} holds an empty prefix, which every parameter name starts with; remove it")
    return problems + _rl_full_model(cfg, "actor.freeze_module_prefix", "leave it empty",
                                     "LoRA trains only its adapters and freezes the whole base already")


def check_freeze_vision_tower(cfg: Any) -> list[str]:
    """actor.freeze_vision_tower acts on the RL actor's full model: not in an SFT/DPO stage, not beside LoRA."""
    if not getattr(getattr(cfg, "actor", None), "freeze_vision_tower", False):
        return []
    return _rl_full_model(cfg, "actor.freeze_vision_tower", "set it to false",
                          "LoRA freezes the whole base, vision tower included, already")


def _rl_full_model(cfg: Any, key: str, remedy: str, lora_why: str) -> list[str]:
    """A freezing key acts on the RL actor's full model: refused in an SFT/DPO stage and beside LoRA."""
    model = getattr(cfg, "model", None)
    kind = getattr(getattr(cfg, "algorithm", None), "kind", "rl")
    problems = []
    if kind != "rl":
        problems.append(f"{key} is read by RL stages only, and algorithm.kind is {kind}; {remedy} for this stage")
    if getattr(model, "lora_rank", 0) > 0 or getattr(model, "lora_adapter_path", None) is not None:
        problems.append(f"{key} with LoRA (model.lora_rank / lora_adapter_path): {lora_why}; drop one of the two")
    return problems


def check_router_replay(cfg: Any) -> list[str]:
    """actor.router_replay.mode R2 replays what the old-log-prob forward recorded, so it cannot take the rollout's log-probs as the old ones (verl's
    bypass mode), acts on the RL actor only, and takes no expert rows (algorithm.mix) or turn rows
    (env.train_rows) that the old-log-prob forward did not route."""
    if get_mode(cfg) != "R2":
        return []
    problems = []
    kind = getattr(getattr(cfg, "algorithm", None), "kind", "rl")
    actor = getattr(cfg, "actor", None)
    if kind != "rl":
        problems.append(f"actor.router_replay.mode R2 is read by RL stages only, and algorithm.kind is {kind}; set it to disabled for this stage")
    if getattr(actor, "reuse_rollout_logprobs", "auto") == "always":
        problems.append("actor.router_replay.mode R2 records the experts in the old-log-prob forward, and actor.reuse_rollout_logprobs always "
                        "(verl's bypass mode) skips that forward: the rollout's log-probs come with no routing; use auto or never")
    mix = getattr(getattr(cfg, "algorithm", None), "mix", None)
    if mix is not None and getattr(mix, "expert_files", None):
        problems.append("actor.router_replay.mode R2 with algorithm.mix: the expert rows join the batch after the old-log-prob forward, "
                        "which recorded no routing for them; set router_replay to disabled")
    if getattr(getattr(cfg, "env", None), "train_rows", "episode") == "turn":
        problems.append("actor.router_replay.mode R2 with env.train_rows turn: the old-log-prob forward routes the episode rows, not the "
                        "turn rows the update trains on; use train_rows episode or router_replay disabled")
    return problems


def get_mode(cfg: Any) -> str:
    return getattr(getattr(getattr(cfg, "actor", None), "router_replay", None), "mode", "disabled")
