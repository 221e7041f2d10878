"""`model`: the policy model directory and how every role loads it.

The actor, the rollout engine and the reference policy all load this one directory (verl's
`actor_rollout_ref.model`, ROLL's `pretrain` + `actor_train.model_args`, Trinity's `model`); the
critic and reward model have their own sections. `posttrain.models.loading` turns this section into a
model and a tokenizer (`causal_lm_from_config`, `tokenizer_from_config`); the fields without `todo`
are the ones that code honours.
"""

from __future__ import annotations

from typing import Any

from posttrain.config.fields import param, section

DTYPES = ("fp32", "bf16", "fp16", "auto")
ATTN_IMPLEMENTATIONS = ("auto", "eager", "sdpa", "flash_attention_2", "fa2")


@section
class ModelConfig:
    """The policy model: a local Hugging Face directory and loading options."""

    path: str = param(
        "", doc="Local Hugging Face model directory of the policy (never downloaded at run time).",
        refs=["verl:actor_rollout_ref.model.path", "verl:model.partial_pretrain", "roll:pretrain",
              "roll:actor_train.model_args.model_name_or_path", "trinity:model.model_path"],
    )
    tokenizer_path: str | None = param(
        None, doc="Local tokenizer directory; null uses `path`.", refs=["verl:data.tokenizer", "verl:actor_rollout_ref.model.tokenizer_path"],
    )
    dtype: str = param(
        "fp32", doc="Parameter dtype: fp32, bf16, fp16, or auto (the dtype saved in config.json).",
        choices=DTYPES, refs=["verl:model.fsdp_config.model_dtype", "verl:actor_rollout_ref.actor.fsdp_config.model_dtype", "roll:actor_train.model_args.dtype"],
    )
    trust_remote_code: bool = param(
        False, doc="Allow modelling/tokenizer code shipped inside the model directory to run (one switch for both: verl's data.trust_remote_code, the tokenizer's, is this one).",
        refs=["verl:actor_rollout_ref.model.trust_remote_code", "verl:model.trust_remote_code", "verl:data.trust_remote_code", "trinity:model.trust_remote_code"],
    )
    external_lib: str | None = param(
        None, doc="Python module imported before loading, to register custom models/tokenizers with transformers.",
        refs=["verl:actor_rollout_ref.model.external_lib", "verl:model.external_lib"],
    )
    override_config: dict[str, Any] = param(
        factory=dict, doc="config.json attributes replaced at load time, e.g. {attention_dropout: 0.1}.",
        refs=["verl:actor_rollout_ref.model.override_config"],
    )
    enable_gradient_checkpointing: bool = param(
        False, doc="Recompute activations in the backward pass: less memory, ~30% slower steps.",
        refs=["verl:actor_rollout_ref.model.enable_gradient_checkpointing", "verl:model.enable_gradient_checkpointing"],
    )
    attn_implementation: str = param(
        "auto", doc="Attention kernel: auto (transformers' default, sdpa), eager, sdpa, flash_attention_2 (alias fa2).",
        choices=ATTN_IMPLEMENTATIONS, refs=["roll:actor_train.model_args.attn_implementation"],
    )
    custom_chat_template: str | None = param(
        None, doc="Jinja chat template replacing the tokenizer's own; null keeps the tokenizer's.",
        refs=["trinity:model.custom_chat_template"],
    )
    chat_template_path: str | None = param(
        None, doc="File holding a Jinja chat template; overrides custom_chat_template when both are set.",
        refs=["trinity:model.chat_template_path"],
    )
    max_model_len: int | None = param(
        None, doc="Longest prompt + response in tokens: each response stops after max_model_len minus its prompt's tokens (at least one), before rollout.response_length if that comes first; refused at load if above the model's max_position_embeddings. null: prompt and response limits alone.",
        ge=1, refs=["trinity:model.max_model_len", "roll:sequence_length"],
    )
    rope_theta: float | None = param(
        None, doc="RoPE base frequency replacing the one in config.json; null keeps it.",
        gt=0, refs=["trinity:model.rope_theta"],
    )
    rope_scaling: dict[str, Any] | None = param(
        None, doc="RoPE scaling, e.g. {rope_type: linear, factor: 2.0}; null keeps config.json's.",
        refs=["trinity:model.rope_scaling"],
    )
    enable_activation_offload: bool = param(
        False, doc="RL stages: the actor's training forward keeps the tensors autograd saves for the backward in host memory (torch.autograd.graph.save_on_cpu, pinned on CUDA) and copies them back in the backward: less GPU memory, one copy each way. On a CPU they already live in host memory: the hooks run and move nothing. Refused for SFT/DPO stages.",
        refs=["verl:actor_rollout_ref.model.enable_activation_offload"],
    )
    use_remove_padding: bool = param(
        True, doc="Training-side forwards of the policy (actor update, old and reference log-probs) pack the real tokens of several sequences into one row instead of padding them, where the model keeps packed sequences apart (posttrain.models.packing; equal up to float rounding). On by default, unlike verl: it is exact and faster. false runs padded batches.",
        refs=["verl:actor_rollout_ref.model.use_remove_padding", "roll:actor_train.use_remove_padding"],
    )
    use_liger: bool = param(
        False, doc="Patch the liger-kernel package's Triton kernels (RMSNorm, rotary, SwiGLU: apply_liger_kernel_to_<model family>) into the policy when it is loaded on a CUDA GPU and the package imports (it is not a posttrain dependency); elsewhere the model runs its own layers and one logged warning says why. The lean forward of actor.use_torch_compile bypasses the patched layers.",
        refs=["verl:actor_rollout_ref.model.use_liger", "verl:model.use_liger"],
    )
    use_fused_kernels: bool = param(
        False, doc="RL stages: compute log-probs and entropy from the last hidden states and the output head's weight chunk by chunk with a hand-written backward (posttrain.models.fused_head), so no (tokens, vocabulary) logits outlive their chunk in the forward or the backward; same numbers to float rounding. Refused for a head it does not reproduce (a bias, LoRA on the head, logit soft-capping) and for SFT/DPO stages.",
        refs=["verl:actor_rollout_ref.model.use_fused_kernels"],
    )
    fused_kernel_impl_backend: str | None = param(
        None, doc="Backend of the fused head when use_fused_kernels: torch (eager torch ops; null is torch, verl's default) or triton (the same chunk functions compiled by torch.compile into Triton kernels: refused unless the policy computes on a CUDA GPU).", choices=[None, "triton", "torch"],
        refs=["verl:actor_rollout_ref.model.fused_kernel_options.impl_backend"],
    )
    # ---- LoRA (posttrain.models.lora) --------------------------------------------------------
    lora_rank: int = param(
        0, doc="LoRA rank: > 0 trains low-rank adapters (peft) on the policy instead of all its weights; the reference is the base model with the adapters off and the rollout engine gets the merged weights. 0 (and no lora_adapter_path) trains all weights.",
        ge=0, refs=["verl:actor_rollout_ref.model.lora_rank", "verl:model.lora_rank", "roll:actor_train.model_args.lora_rank",
                    "trinity:model.lora_configs"],
    )
    lora_alpha: float = param(
        16, doc="LoRA scaling: the adapter adds (lora_alpha / lora_rank) * B @ A to each targeted weight.", gt=0,
        refs=["verl:actor_rollout_ref.model.lora_alpha", "verl:model.lora_alpha", "roll:actor_train.model_args.lora_alpha"],
    )
    target_modules: str | list[str] = param(
        "all-linear", doc="Layers that get adapters: all-linear (every linear layer but the output head), a list of module names (matched as name suffixes, e.g. [q_proj, v_proj]) or one regular expression matched against full module names.",
        refs=["verl:actor_rollout_ref.model.target_modules", "verl:model.target_modules", "roll:actor_train.model_args.lora_target"],
    )
    exclude_modules: str | list[str] | None = param(
        None, doc="Layers kept without adapters although target_modules matches them: module names (suffixes) or one regular expression; null excludes none.",
        refs=["verl:actor_rollout_ref.model.exclude_modules"],
    )
    autocast_adapter_dtype: bool = param(
        True, doc="Keep the LoRA adapters (A and B) in fp32 when the model is bf16 or fp16 (peft's autocast_adapter_dtype, its default and what verl, ROLL and Trinity-RFT build): the optimizer then updates fp32 adapters and the forward casts them as it casts the activations; false keeps them in the model's dtype. Nothing changes for an fp32 model.",
        refs=["roll:actor_train.model_args.autocast_adapter_dtype"],
    )
    lora_adapter_path: str | None = param(
        None, doc="Local peft adapter directory (adapter_config.json, adapter_model.safetensors) the policy's adapter starts from, which turns LoRA on; its own rank, alpha and targets are used (lora_rank/lora_alpha, if set, must agree).",
        refs=["verl:actor_rollout_ref.model.lora_adapter_path"],
    )
    use_shm: bool = param(
        False, doc="verl copies the model (and adapter) to /dev/shm before reading; posttrain reads the local model directory directly (the OS page cache serves repeated reads), so true reads the same bytes the same way: accepted, no effect.",
        refs=["verl:actor_rollout_ref.model.use_shm", "verl:model.use_shm"],
    )


# Reference keys that map onto a field with the opposite meaning: a dialect loader must negate them.
NEGATED_REFS: dict[str, str] = {
    "roll:actor_train.model_args.disable_gradient_checkpointing": "enable_gradient_checkpointing",
}

# Reference keys about the policy model that posttrain refuses, and why.
_TINKER = "Tinker is a remote training service; posttrain trains the model locally"
# verl's Megatron trainer spells LoRA as model.lora.* (Megatron-Bridge's adapters).
_MEGATRON_LORA = ("Megatron's LoRA (verl's Megatron trainer): adapters on Megatron's modules, by default one adapter over the fused "
                  "query/key/value and gate/up matrices, with Megatron's initialisation; posttrain's LoRA is PEFT's, one adapter per "
                  "Hugging Face projection: set model.lora_rank, model.lora_alpha and model.target_modules instead")
_MTP = ("multi-token prediction (extra MTP heads trained beside the LM head, and used by the engine for speculative decoding): "
        "posttrain trains and samples the model's next-token head only; its defaults (enable: false) are accepted")
UNSUPPORTED: dict[str, str] = {
    **{f"verl:actor_rollout_ref.model.mtp.{k}": _MTP for k in (
        "enable", "enable_train", "enable_rollout", "detach_encoder", "mtp_loss_scaling_factor", "speculative_algorithm",
        "speculative_num_steps", "speculative_eagle_topk", "speculative_num_draft_tokens", "method", "num_speculative_tokens")},
    "verl:actor_rollout_ref.model.lora": _MEGATRON_LORA,
    "verl:actor_rollout_ref.model.hf_config_path": "a config.json read from elsewhere than the model's directory; posttrain reads the model directory's own (model.override_config changes its attributes)",
    "verl:critic.model.lora": _MEGATRON_LORA,
    "verl:actor_rollout_ref.model.override_config.moe_config.freeze_moe_router": (
        "Megatron MoE option; posttrain has no Megatron backend"
    ),
    "roll:actor_train.model_args.model_type": (
        "ROLL picks a TRL value-head class with it; posttrain picks the model class from the role "
        "(critic: value model, reward: sequence classifier)"
    ),
    "trinity:model.tinker.enable": _TINKER,
    "trinity:model.tinker.rank": _TINKER,
    "trinity:model.tinker.seed": _TINKER,
    "trinity:model.tinker.train_mlp": _TINKER,
    "trinity:model.tinker.train_attn": _TINKER,
    "trinity:model.tinker.train_unembed": _TINKER,
    "roll:actor_infer.model_args.model_name_or_path": "every role loads the policy's weights (model.path, ROLL: pretrain)",
    "roll:reference.model_args.model_name_or_path": "every role loads the policy's weights (model.path, ROLL: pretrain)",
}


def check_kernel_flags(cfg: Any) -> list[str]:
    """The fused head and activation offload act on the RL stage's actor (posttrain.workers.actor);
    SFT and DPO compute their log-probs through another loop, where the flags would do nothing."""
    kind = getattr(getattr(cfg, "algorithm", None), "kind", "rl")
    model = getattr(cfg, "model", None)
    if kind not in ("sft", "dpo", "distill") or model is None:
        return []
    return [f"model.{key} acts on the RL actor's training forward; algorithm.kind {kind} trains through its own loop, where it would change nothing: set it to false for this stage"
            for key in ("use_fused_kernels", "enable_activation_offload") if getattr(model, key, False)]


# Reference keys any value of which changes nothing in posttrain (the loaders drop them with the reason).
NO_EFFECT: dict[str, str] = {
    "trinity:model.fully_sharded_loras": "declared in Trinity-RFT's model config and read by nothing in Trinity-RFT (its vLLM engines take their LoRA settings from model.lora_configs)",
    "trinity:model.max_cpu_loras": "declared in Trinity-RFT's model config and read by nothing in Trinity-RFT (its vLLM engines take their LoRA settings from model.lora_configs)",
    **{f"verl:actor_rollout_ref.model.tiled_mlp.{k}": "computes the MLP over slices of the sequence to save memory: the same numbers"
       for k in ("enabled", "num_shards")},
}
