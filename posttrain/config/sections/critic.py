"""`critic`: the value model trained for GAE.

The critic is the policy's transformer with a scalar value head, initialised from the policy model
(or from `critic.model.path`). Batch units follow the actor's: ``ppo_mini_batch_size`` counts prompts
(x rollout.n responses) over all devices, ``*_micro_batch_size_per_gpu`` counts responses on one
device, token budgets count prompt + response tokens on one device.

verl's defaults copy several actor values into the critic (``${actor_rollout_ref.actor.ppo_epochs}``);
posttrain's critic fields have their own plain defaults, equal to the actor's defaults.

`UNSUPPORTED` lists reference keys that have no field here, each with the reason; `NEGATED_REFS` maps
keys whose meaning is the opposite of a field (a dialect loader negates them).
"""

from __future__ import annotations

from typing import Any

from posttrain.config.fields import param, section
from posttrain.config.sections.actor import (
    LOSS_AGG_MODES,
    CheckpointConfig,
    NCCL_OFFLOAD,
    FsdpConfig,
    roll_worker_unsupported,
    verl_engine_keys,
    verl_role_keys,
)
from posttrain.config.sections.data import TEMPLATE_UNREAD
from posttrain.config.sections.optim import CriticOptimConfig
from posttrain.config.sections.profiler import ProfilerConfig

_MODEL = "verl:critic.model"


@section
class CriticModelConfig:
    """Where the critic's weights come from and how they are loaded."""

    path: str | None = param(None, doc="Local Hugging Face directory the critic starts from; null uses model.path (the policy).", refs=[f"{_MODEL}.path", "trinity:model.critic_model_path"])
    tokenizer_path: str | None = param(None, doc="Tokenizer of the critic; null uses the policy's. The critic reads the policy's token ids, so a tokenizer given here must have the same vocabulary (checked when the critic is built).", refs=[f"{_MODEL}.tokenizer_path"])
    dtype: str = param("auto", doc="Parameter dtype of the critic: auto (same as model.dtype), fp32, bf16 or fp16.", choices=["auto", "fp32", "bf16", "fp16"], refs=["roll:critic.model_args.dtype"])
    override_config: dict[str, Any] = param(factory=dict, doc="config.json attributes replaced when loading the critic, e.g. {attention_dropout: 0.0}.", refs=[f"{_MODEL}.override_config"])
    external_lib: str | None = param(None, doc="Python module imported before loading the critic (registers custom models).", refs=[f"{_MODEL}.external_lib"])
    trust_remote_code: bool = param(False, doc="Allow code shipped inside the critic's model directory to run.", refs=[f"{_MODEL}.trust_remote_code"])
    enable_gradient_checkpointing: bool = param(False, doc="Recompute the critic's activations in the backward pass (less memory, slower).", refs=[f"{_MODEL}.enable_gradient_checkpointing"])
    enable_activation_offload: bool = param(False, doc="The critic's training forward keeps the tensors autograd saves for the backward in host memory (as model.enable_activation_offload): less GPU memory; on a CPU the hooks run and move nothing.", refs=[f"{_MODEL}.enable_activation_offload"])
    use_remove_padding: bool = param(True, doc="Run the critic's forwards on packed sequences without padding tokens (as model.use_remove_padding; on by default, unlike verl); false runs padded batches.", refs=[f"{_MODEL}.use_remove_padding"])
    lora_rank: int = param(0, doc="LoRA rank of the critic: > 0 trains low-rank adapters (peft) on its body and its new value head in full, instead of all its weights; 0 trains all weights.", ge=0, refs=[f"{_MODEL}.lora_rank", "roll:critic.model_args.lora_rank"])
    lora_alpha: float = param(16, doc="LoRA scaling of the critic's adapters: each adds (lora_alpha / lora_rank) * B @ A to its weight.", gt=0, refs=[f"{_MODEL}.lora_alpha", "roll:critic.model_args.lora_alpha"])
    target_modules: str | list[str] = param("all-linear", doc="The critic's layers that get adapters: all-linear (every linear layer of the body; the value head is trained whole), module names (suffixes) or one regular expression.", refs=[f"{_MODEL}.target_modules", "roll:critic.model_args.lora_target"])
    autocast_adapter_dtype: bool = param(True, doc="Keep the critic's LoRA adapters in fp32 when its model is bf16 or fp16 (as model.autocast_adapter_dtype); false keeps them in its dtype.", refs=["roll:critic.model_args.autocast_adapter_dtype"])
    use_shm: bool = param(False, doc="verl copies the critic's model to /dev/shm before reading; posttrain reads the local model directory directly (the OS page cache serves repeated reads), so true reads the same bytes the same way: accepted, no effect.", refs=[f"{_MODEL}.use_shm"])


@section
class CriticConfig:
    """Value model, its batching and optimizer."""

    # ---- batching ----------------------------------------------------------------------------
    ppo_mini_batch_size: int = param(8, doc="Prompts per critic optimizer step (x rollout.n responses), across all devices.", ge=1, refs=["verl:critic.ppo_mini_batch_size"])
    ppo_micro_batch_size_per_gpu: int = param(8, doc="Responses per critic forward/backward pass on one device.", ge=1, refs=["verl:critic.ppo_micro_batch_size_per_gpu", "roll:critic.training_args.per_device_train_batch_size"])
    ppo_epochs: int = param(1, doc="Critic passes over each rollout batch.", ge=1, refs=["verl:critic.ppo_epochs"])
    shuffle: bool | None = param(None, doc="Shuffle responses before splitting them into critic mini-batches; null follows actor.shuffle.", refs=["verl:critic.shuffle"])
    use_dynamic_bsz: bool = param(False, doc="Pack critic micro-batches by token budget instead of a fixed count.", refs=["verl:critic.use_dynamic_bsz", "roll:critic.use_dynamic_batching_in_train"])
    ppo_max_token_len_per_gpu: int = param(32768, doc="Token budget of one critic training micro-batch on one device when use_dynamic_bsz (times ulysses_sequence_parallel_size per micro-batch, as the actor's).", ge=1, refs=["verl:critic.ppo_max_token_len_per_gpu", "roll:critic.max_tokens_per_microbatch_in_train"])
    forward_micro_batch_size_per_gpu: int | None = param(None, doc="Responses per value forward pass (no backward) on one device; null uses ppo_micro_batch_size_per_gpu.", ge=1, refs=["verl:critic.forward_micro_batch_size_per_gpu", "roll:critic.infer_batch_size"])
    forward_max_token_len_per_gpu: int | None = param(None, doc="Token budget of one value forward pass on one device when use_dynamic_bsz; null uses ppo_max_token_len_per_gpu.", ge=1, refs=["verl:critic.forward_max_token_len_per_gpu", "roll:critic.max_tokens_per_microbatch_in_infer"])

    # ---- loss and optimization ---------------------------------------------------------------
    cliprange_value: float | None = param(0.5, doc="Value clipping: new values stay within this distance of the rollout-time values in the clipped loss term; null does not clip.", gt=0, refs=["verl:critic.cliprange_value", "roll:value_clip"])
    loss_agg_mode: str = param("token-mean", doc="How per-token value losses become one number (same modes as actor.loss_agg_mode).", choices=LOSS_AGG_MODES, refs=["verl:critic.loss_agg_mode"])
    micro_batch_weight: str = param("normaliser", doc="How each micro-batch's value loss is weighted in its mini-batch's gradient, as actor.micro_batch_weight: normaliser (its share of the mini-batch's loss normaliser: the gradient of the whole mini-batch's loss) or rows (its share of the mini-batch's responses: verl 0.8's legacy critic and Trinity-RFT's, which scale each micro-batch's own mean by 1 / the accumulation steps).", choices=["normaliser", "rows"])
    dynamic_bsz_partition: str = param("pack", doc="How a mini-batch is cut into micro-batches for the critic's update when use_dynamic_bsz. pack: rows longest first, packed greedily so that each micro-batch's padded forward (its rows x their longest prompt + longest response) stays within the token budget. balanced: as verl (and so Trinity-RFT) cuts it: min(rows, ceil(real tokens / budget)) micro-batches, the most any worker process needs, over which Karmarkar and Karp's differencing method balances the rows' workloads (24576 L + L^2 for L real tokens; posttrain.workers.balanced_split), so a micro-batch may exceed the budget. With micro_batch_weight normaliser the gradient is the same either way; with rows it follows the micro-batches, and balanced gives verl's in one process (with several, each process cuts its own share of the rows, which verl deals out otherwise). Refused without use_dynamic_bsz.", choices=["pack", "balanced"])
    moe_aux_loss_coef: float | None = param(0.0, doc="Weight of a mixture-of-experts value model's router load-balancing loss added to the value loss, as actor.moe_aux_loss_coef (Megatron adds it to every MoE model it trains), logged as critic/moe_aux_loss. null takes the model's router_aux_loss_coef (0 when it has none); 0 disables; a positive value needs a value model whose routers transformers exposes.", ge=0, refs=["roll:critic.strategy_args.strategy_config.moe_aux_loss_coeff", "roll:critic.model_args.moe_aux_loss_coef"])
    moe_z_loss_coef: float = param(0.0, doc="Weight of a mixture-of-experts value model's router z-loss added to the value loss, as actor.moe_z_loss_coef, logged as critic/moe_z_loss; 0 disables; a positive value needs a value model whose routers transformers exposes.", ge=0, refs=["roll:critic.strategy_args.strategy_config.moe_z_loss_coeff"])
    grad_clip: float = param(1.0, doc="Clip the critic's global gradient norm to this value before each optimizer step.", gt=0, refs=["verl:critic.grad_clip", "verl:critic.optim.clip_grad"])
    optim: CriticOptimConfig = param(factory=CriticOptimConfig, doc="Optimizer and LR schedule of the critic.", refs=["verl:critic.optim", "roll:critic.training_args"])

    # ---- model, backend and placement --------------------------------------------------------
    model: CriticModelConfig = param(factory=CriticModelConfig, doc="Where the critic's weights come from.")
    strategy: str = param("fsdp", doc="Training backend across worker processes: fsdp and fsdp2 both select posttrain's one sharding backend, FSDP2 (one process trains plain torch either way).", choices=["fsdp", "fsdp2"], refs=["verl:critic.strategy"])
    fsdp_config: FsdpConfig = param(factory=FsdpConfig, doc="FSDP sharding and offload of the critic (verl keeps it under critic.model).", refs=[f"{_MODEL}.fsdp_config"])
    ulysses_sequence_parallel_size: int = param(1, doc="Worker processes one sequence is split over in the critic's forwards (Ulysses sequence parallelism, as actor.ulysses_sequence_parallel_size); must divide the worker processes.", ge=1, refs=["verl:critic.ulysses_sequence_parallel_size"])
    checkpoint: CheckpointConfig = param(factory=CheckpointConfig, doc="What the critic's checkpoints hold.", refs=["verl:critic.checkpoint"])
    profiler: ProfilerConfig = param(factory=ProfilerConfig, doc="Profiling of the critic in profiler.steps.", refs=["verl:critic.profiler"])


# Reference keys that map onto a field with the opposite meaning: a dialect loader must negate them.
NEGATED_REFS: dict[str, str] = {
    "roll:critic.model_args.disable_gradient_checkpointing": "model.enable_gradient_checkpointing",
}

_ENGINES = [verl_engine_keys("verl:critic.fsdp", trains=True), verl_engine_keys("verl:critic.model.fsdp_config", trains=True)]
_ROLE = verl_role_keys("verl:critic")
_NO_ENTROPY = "the critic computes no entropy"
_MTP = ("multi-token prediction heads of the critic's model: posttrain's critic is a value head on the model's last hidden "
        "states; its defaults (enable: false) are accepted")

# Reference keys with no field in `critic`, and why (read by the mapping generator and dialect loaders).
UNSUPPORTED: dict[str, str] = {
    **roll_worker_unsupported("critic", "critic"),
    **{k: v for engine in _ENGINES for k, v in engine[0].items()},
    **_ROLE[0],
    "verl:critic.loss_scale_factor": ("the constant seq-mean-token-sum-norm divides by; posttrain divides by the response length "
                                      "(data.max_response_length), which is what verl's default (null: the padded response length) gives"),
    "verl:critic.data_loader_seed": "a workaround for Megatron's data order across context-parallel ranks; posttrain's shuffle is seeded from the run seed",
    "verl:critic.model.hf_config_path": "a config.json read from elsewhere than the model's directory; posttrain reads the critic model's own",
    "verl:critic.model.lora_adapter_path": "a LoRA adapter the critic starts from; posttrain's critic LoRA (critic.model.lora_rank) starts fresh",
    "verl:critic.model.exclude_modules": "modules LoRA leaves out by name; posttrain's critic LoRA names the modules it adapts (critic.model.target_modules)",
    **{f"verl:critic.model.mtp.{k}": _MTP for k in (
        "enable", "enable_train", "enable_rollout", "detach_encoder", "mtp_loss_scaling_factor", "speculative_algorithm",
        "speculative_num_steps", "speculative_eagle_topk", "speculative_num_draft_tokens", "method", "num_speculative_tokens")},
}

# Reference keys any value of which changes nothing in posttrain (the loaders drop them with the reason).
NO_EFFECT: dict[str, str] = {
    **{k: v for engine in _ENGINES for k, v in engine[1].items()},
    **_ROLE[1],
    **{f"verl:critic.{section}.{k}": _NO_ENTROPY for section in ("fsdp", "model.fsdp_config")
       for k in ("entropy_checkpointing", "entropy_from_logits_with_chunking", "entropy_from_logits_chunk_size")},
    "verl:critic.model.custom_chat_template": "the critic scores the policy's token ids; a chat template of its own renders nothing it reads",
    "verl:critic.model.use_fused_kernels": "verl's fused log-prob kernels, which a value head does not use",
    "verl:critic.model.fused_kernel_options.impl_backend": "the backend of verl's fused kernels, which a value head does not use",
    "verl:critic.model.use_liger": "Liger's fused kernels: the same numbers to float rounding",
    **{f"verl:critic.model.tiled_mlp.{k}": "computes the MLP over slices of the sequence to save memory: the same numbers" for k in ("enabled", "num_shards")},
    "roll:critic.offload_nccl": NCCL_OFFLOAD,
    "roll:critic.data_args.template": TEMPLATE_UNREAD,
}
