"""ROLL's per-role keys that posttrain reads once for the policy: frozen modules, attention, templates.

- ``actor_train.model_args.freeze_module_prefix`` (roll/configs/model_args.py splits the string at
  commas; roll/models/model_providers.py ``freeze_model`` freezes every parameter whose name starts
  with one, and only when ``lora_target`` is unset) is ``actor.freeze_module_prefix``
  (posttrain.models.freeze). A vision tower's prefix is renamed to the name the Hugging Face model
  gives it: ROLL's Megatron models hold the tower as ``vision_model`` (mcore_adapter's Qwen2.5-VL and
  Qwen3-VL wrap the Hugging Face vision transformer under that name), the Hugging Face Qwen2-VL /
  Qwen2.5-VL as ``model.visual``, so ``vision_model.blocks`` freezes ``model.visual.blocks``. Audio
  and other towers are refused: posttrain's vision-language families have none. With LoRA ROLL does
  not read it, so it is dropped.
- ``<role>.model_args.attn_implementation`` is read by ROLL only where it builds a Hugging Face
  model (model_providers.py): not by its vLLM/SGLang engines (``actor_infer`` with strategy vllm or
  sglang builds its engine from the model path and strategy_config) nor by its Megatron models. There
  it changes nothing and is dropped; elsewhere it must agree with the policy's kernel
  (roll.py's ``_SAME_AS``), since posttrain runs every role with model.attn_implementation.
- The prompt template: ``global_template``, else ``actor_train.data_args.template``, is
  ``data.chat_template_name`` (`template`); the other roles' ``data_args.template`` is read nowhere
  in ROLL (sections.data.TEMPLATE_UNREAD), and an agentic file's is not read either (`AGENTIC_TEMPLATE`).
"""

from __future__ import annotations

from typing import Any

from posttrain.config.dialects.translate import Context
from posttrain.config.tables import Rule

FREEZE = "actor_train.model_args.freeze_module_prefix"
# Module names of the audio and non-Qwen vision parts of ROLL's multimodal examples (Qwen3-Omni's
# audio_model/talker/code2wav) and of other HF VLMs; the Qwen vision tower is translated (hf_vision_prefix).
_TOWERS = frozenset({"vision_tower", "audio_model", "audio_tower", "audio", "talker", "code2wav",
                     "multi_modal_projector", "mm_projector"})
_ENGINES = ("vllm", "sglang")
_MEGATRON = ("megatron_train", "megatron_infer")


def split_prefixes(value: Any) -> list[str]:
    """ROLL's freeze_module_prefix as a list: a string is split at commas and stripped.

    >>> split_prefixes("vision_model.blocks, vision_model.patch_embed")
    ['vision_model.blocks', 'vision_model.patch_embed']
    """
    if isinstance(value, str):
        return [item.strip() for item in value.split(",")]
    return list(value)


def freeze_prefix(ctx: Context) -> None:
    if not ctx.has(FREEZE):
        return
    ctx.consume(FREEZE)
    value = ctx.get(FREEZE)
    if value is None:
        ctx.drop(FREEZE, "null: nothing frozen")
        return
    if ctx.get("actor_train.model_args.lora_target") is not None:
        ctx.drop(FREEZE, "ROLL freezes by prefix only without LoRA (lora_target is set), so nothing reads it")
        return
    if not isinstance(value, (str, list)) or not all(isinstance(p, str) for p in split_prefixes(value)):
        ctx.refuse(FREEZE, f"expected comma-separated parameter-name prefixes, got {value!r}", "actor.freeze_module_prefix", value)
        return
    prefixes = [hf_vision_prefix(p) for p in split_prefixes(value)]
    towers = [p for p in prefixes if _TOWERS & set(p.split("."))]
    if towers:
        ctx.refuse(FREEZE, f"{', '.join(towers)} name(s) a multimodal model's audio or other non-vision modules: posttrain's "
                   "vision-language families (Qwen2-VL, Qwen2.5-VL) have a vision tower (model.visual) and no such module",
                   "actor.freeze_module_prefix", value)
    else:
        ctx.set("actor.freeze_module_prefix", prefixes, FREEZE, "ROLL's comma-separated prefixes of the parameters it freezes "
                "(its Megatron vision_model is the Hugging Face model.visual)")


def hf_vision_prefix(prefix: str) -> str:
    """ROLL's Megatron name of the vision tower renamed to the Hugging Face one; other prefixes unchanged.

    >>> hf_vision_prefix("vision_model.blocks"), hf_vision_prefix("model.visual"), hf_vision_prefix("lm_head")
    ('model.visual.blocks', 'model.visual', 'lm_head')
    """
    head, dot, rest = prefix.partition(".")
    return "model.visual" + dot + rest if head == "vision_model" else prefix


VAL_PIXELS = "validation.data_args.image_max_pixels"
ROLL_IMAGE_MAX_PIXELS = 4096 * 4096  # roll/configs/data_args.py's default image_max_pixels


def validation_pixels(ctx: Context) -> None:
    """ROLL's validation image bound equal to the training one is what posttrain does (one
    data.image_max_pixels for every image): dropped; another value stays refused (sections.data)."""
    if not ctx.has(VAL_PIXELS):
        return
    train = ctx.get("actor_train.data_args.image_max_pixels", ROLL_IMAGE_MAX_PIXELS)
    if ctx.get(VAL_PIXELS) == train:
        ctx.consume(VAL_PIXELS)
        ctx.drop(VAL_PIXELS, f"the training images' bound ({train}), with which posttrain resizes validation images too")


def unread_attention(ctx: Context, key: str) -> str | None:
    """Why a role's attn_implementation is not read by ROLL, or None where ROLL reads it."""
    role, _, rest = key.partition(".")
    if rest != "model_args.attn_implementation":
        return None
    strategy = ctx.get(f"{role}.strategy_args.strategy_name")
    if strategy in _ENGINES:
        return f"ROLL's {strategy} engine is built from the model path and strategy_config and chooses its own attention backend"
    if strategy in _MEGATRON:
        return f"ROLL's {strategy} builds a Megatron model with its own attention; only its Hugging Face models read the key"
    return None


AGENTIC_TEMPLATE = ("ROLL's agentic pipeline renders every turn with the tokenizer's own chat template (env_manager/"
                    "token_mask_utils.py) and reads no named template; posttrain's agentic stage renders turns with the "
                    "tokenizer's chat template too (or data.chat_template)")


def agentic(ctx: Context) -> bool:
    """Whether the file is one of ROLL's agentic pipelines (it has environment managers)."""
    return ctx.has("train_env_manager") or ctx.has("val_env_manager")


def template(ctx: Context) -> None:
    """ROLL's pipelines take ``global_template`` when it is set and ``actor_train.data_args.template``
    otherwise; both name posttrain's ``data.chat_template_name``. A null one names nothing. Its
    agentic pipeline reads neither (`AGENTIC_TEMPLATE`)."""
    keys = ("global_template", "actor_train.data_args.template")
    if agentic(ctx):
        for key in (k for k in keys if ctx.has(k)):
            ctx.consume(key)
            ctx.drop(key, AGENTIC_TEMPLATE)
        return
    for key in keys:
        if ctx.has(key) and ctx.get(key) is None:
            ctx.consume(key)
            ctx.drop(key, "null: no template named here")
    chosen, other = (ctx.get(k) for k in keys)
    if chosen is not None and other is not None and other != chosen:
        ctx.consume(keys[1])
        ctx.drop(keys[1], f"ROLL uses global_template ({chosen!r}) when it is set")


CRITIC_TYPE = "critic.model_args.model_type"


def critic_model_type(ctx: Context) -> None:
    """ROLL's value-model provider (roll/models/model_providers.py) loads the critic as
    AutoModelForTokenClassification with num_labels (default 1) for ``auto_token_classification``:
    posttrain's critic (posttrain.models.loading.load_value_model). ``trl`` is TRL's causal LM with a
    value head, whose head applies dropout (TRL's summary_dropout_prob) to the hidden states it
    reads; posttrain's value head runs without dropout. Any other value stops ROLL's value provider."""
    if not ctx.has(CRITIC_TYPE):
        return
    ctx.consume(CRITIC_TYPE)
    value, labels = ctx.get(CRITIC_TYPE), ctx.get("critic.model_args.num_labels", 1)
    if value == "auto_token_classification" and labels == 1:
        ctx.drop(CRITIC_TYPE, "auto_token_classification: a token-classification model with one label, posttrain's value model")
    elif value == "trl":
        ctx.refuse(CRITIC_TYPE, "trl: TRL's value-head model, whose head applies dropout to the hidden states (TRL's summary_dropout_prob); "
                                "posttrain's critic is a token-classification model with one label and no dropout "
                                "(auto_token_classification in ROLL): set that", None, value)
    else:
        ctx.refuse(CRITIC_TYPE, f"{value!r} (num_labels {labels!r}): ROLL's value model is auto_token_classification or trl "
                                "(other values stop its value provider); posttrain's is auto_token_classification with one label", None, value)


# What ROLL's vllm and sglang strategies read of actor_infer.model_args (roll/distributed/strategy/): model_name_or_path,
# dtype and, for vllm, lora_rank / lora_target; the rest of ModelArguments is read only where ROLL builds a Hugging
# Face or Megatron model (roll/models/model_providers.py), which an engine strategy does not. (Its LoRA keys,
# autocast_adapter_dtype among them, are the LoRA rules' under every strategy: posttrain.config.dialects.lora.)
ENGINE_UNREAD_MODEL_ARGS = ("additional_target", "adapter_name_or_path", "moe_aux_loss_coef",
                            "gradient_checkpointing_use_reentrant", "device_map", "model_type", "num_labels",
                            "freeze_module_prefix", "ulysses_size")


def engine_model_args(ctx: Context) -> None:
    """actor_infer's model-building keys under a vllm or sglang strategy: read by nothing there."""
    strategy = ctx.get("actor_infer.strategy_args.strategy_name")
    if strategy not in _ENGINES:
        return
    for name in ENGINE_UNREAD_MODEL_ARGS:
        key = f"actor_infer.model_args.{name}"
        if ctx.has(key) and key not in ctx.handled:
            ctx.consume(key)
            ctx.drop(key, f"ROLL's {strategy} engine reads model_name_or_path, dtype and the LoRA rank and targets of actor_infer.model_args "
                          "only; this key is read where ROLL builds a Hugging Face or Megatron model")


# Hugging Face's TrainingArguments defaults, which ROLL's roles inherit
HF_BETAS = (0.9, 0.999)
_BETA_ROLES = {"actor_train": "actor", "critic": "critic"}


def adam_betas(ctx: Context) -> None:
    """A trained role's ``training_args.adam_beta1`` / ``adam_beta2`` (Hugging Face's names, read by
    ROLL's FSDP2 optimizer and handed to Megatron's) are the two entries of posttrain's
    ``optim.betas``; the one a file leaves keeps Hugging Face's default."""
    for role, section in _BETA_ROLES.items():
        keys = [f"{role}.training_args.adam_beta{i}" for i in (1, 2)]
        given = [k for k in keys if ctx.has(k) and ctx.get(k) is not None]
        if not given:
            continue
        ctx.consume(*given)
        betas = [float(ctx.get(k)) if k in given else default for k, default in zip(keys, HF_BETAS)]
        for key in given:
            ctx.set(f"{section}.optim.betas", betas, key, "Hugging Face's adam_beta1 and adam_beta2 are optim.betas' two entries")


# The pipeline's switches for moving a role's states to host memory between its phases.
OFFLOAD_SWITCHES = ("is_offload_states", "is_offload_optimizer_states_in_train_step")
PHASE_OFFLOAD = ("moving a role's weights and optimizer states to CPU between its phases: posttrain keeps them on the device, or in "
                 "host memory throughout with FSDP CPU offload (actor.fsdp_config.param_offload / optimizer_offload)")
_UNREAD_OFFLOAD = ("read only by ROLL's distillation pipelines, which pass it to their workers; this pipeline never reads it (its "
                   "workers offload by their own defaults, which moves memory, not numbers)")


RULES: dict[str, Rule] = {
    **{f"{role}.training_args.adam_beta{i}": Rule(f"{section}.optim.betas", f"entry {i} of betas (the other one Hugging Face's default, "
                                                  f"{HF_BETAS[2 - i]}, unless given)", 0.95)
       for role, section in _BETA_ROLES.items() for i in (1, 2)},
    **{key: Rule(None, f"outside a distillation file: {_UNREAD_OFFLOAD}; in one: false is what posttrain does, true is refused "
                       "(posttrain keeps a role's states on its device between phases)", True) for key in OFFLOAD_SWITCHES},
    CRITIC_TYPE: Rule(None, "auto_token_classification (one label): posttrain's value model, dropped; trl (a TRL value head with dropout): refused",
                      "auto_token_classification"),
    FREEZE: Rule("actor.freeze_module_prefix", "ROLL's comma-separated string split into prefixes, its Megatron vision_model "
                 "renamed model.visual; refused when one names an "
                 "audio or non-Qwen vision module; dropped with lora_target (ROLL ignores it then)",
                 "model.layers.0"),
}
def offload_switches(ctx: Context, *, distill: bool = False) -> None:
    """ROLL's pipeline-level offload switches: read by nothing outside a distillation file; in one
    (roll_distill calls this with distill=True) false is what posttrain does and true is refused."""
    for key in OFFLOAD_SWITCHES:
        if not ctx.has(key) or key in ctx.handled:
            continue
        ctx.consume(key)
        value = ctx.get(key)
        if not distill:
            ctx.drop(key, _UNREAD_OFFLOAD)
        elif value is False:
            ctx.drop(key, "false: the role's states stay on its device between phases, as posttrain keeps them")
        else:
            ctx.refuse(key, f"not supported: {PHASE_OFFLOAD}", None, value)


HANDLERS = [freeze_prefix, critic_model_type, validation_pixels, adam_betas, engine_model_args, offload_switches]
