"""Load the model of every role (policy, reference, critic, reward model) from a local HF directory.

posttrain never downloads weights at run time: a path must be an existing local directory with a
config.json, or a hub name such as "Qwen/Qwen2.5-0.5B" whose snapshot the local Hugging Face cache
holds (read offline), and every transformers call passes `local_files_only=True`. A hub name the
cache lacks is refused with a message saying how to get a local copy, so a typo never turns into a
silent multi-gigabyte download on a training node.

Critic: `load_value_model` loads the directory as `AutoModelForTokenClassification` with one label,
i.e. the causal LM body plus a linear head giving one value per token (the lm_head is dropped, the
head is newly initialised from torch's global RNG). Why this and not a custom `nn.Module`: it is the
class verl's critic uses, transformers ships it for almost every decoder architecture, and a trained
critic saves and reloads as an ordinary HF directory with no posttrain code in the loop. The head's
dropout is forced to 0 because noise on value estimates only adds variance to GAE.

Reward model: `load_reward_model` uses `AutoModelForSequenceClassification` with one label, which
scores each sequence at its last non-pad token (so the config needs a pad token id).
"""

from __future__ import annotations

import importlib
import pickle
from pathlib import Path
from typing import Any

import torch
from safetensors import SafetensorError
from transformers import (
    AutoConfig,
    AutoModelForCausalLM,
    AutoModelForImageTextToText,
    AutoModelForSequenceClassification,
    AutoModelForTokenClassification,
    AutoTokenizer,
    PretrainedConfig,
    PreTrainedModel,
    PreTrainedTokenizerBase,
)

from posttrain.config.sections.model import ModelConfig
from posttrain.errors import ConfigError, ModelError
from posttrain.files import is_hub_name, read_utf8
from posttrain.models.integrity import check_load_info, check_text_files, check_weight_files, explain_load_error
from posttrain.models.kernels import apply_model_kernels
from posttrain.models.quiet import quiet_transformers
from posttrain.models.vision import VISION_FAMILIES, is_vision_language

DTYPES: dict[str, torch.dtype | str] = {
    "fp32": torch.float32,
    "bf16": torch.bfloat16,
    "fp16": torch.float16,
    "auto": "auto",  # whatever config.json says
}
# ROLL writes "fa2"; transformers calls it flash_attention_2. "auto" leaves the choice to transformers.
_ATTN_ALIASES = {"fa2": "flash_attention_2", "auto": None}


def resolve_model_dir(path: str | Path, *, what: str = "model") -> Path:
    """The local directory `path` names, or a ModelError explaining that nothing is downloaded.

    `path` is a directory, or a Hugging Face hub name (``Qwen/Qwen2.5-0.5B``) whose snapshot is in
    the local hub cache (``HF_HUB_CACHE``, filled by ``hf download NAME`` on a connected machine);
    the cache is read offline. A model directory needs config.json; a tokenizer directory needs
    tokenizer_config.json or tokenizer.json (a tokenizer_path may point at a tokenizer-only directory).
    """
    text = str(path)
    local = Path(text).expanduser()
    if not text:
        raise ModelError(f"no {what} path given; set it to a local Hugging Face model directory")
    if not local.is_dir():
        cached = cached_snapshot(text)
        if cached is None and not is_hub_name(text):
            raise ModelError(f"{what} path {text!r} is not an existing local directory (posttrain never downloads models at run "
                             f"time); point it at a directory written by save_pretrained, or at a hub name (org/name) in "
                             f"the local Hugging Face cache")
        if cached is None:
            raise ModelError(
                f"{what} path {text!r} is not an existing local directory, nor a model the local Hugging Face cache holds. "
                f"posttrain never downloads models at run time: on a connected machine run `hf download {text}` "
                f"(the command huggingface_hub installs; it fills the cache this run reads, HF_HUB_CACHE) or "
                f"`hf download {text} --local-dir DIR` and point the path at DIR, or build a model with "
                f"`posttrain make-model tiny DIR`"
            )
        local = cached
    needed = ("tokenizer_config.json", "tokenizer.json") if what == "tokenizer" else ("config.json",)
    if not any((local / name).is_file() for name in needed):
        raise ModelError(
            f"{what} directory {text!r} has no {' or '.join(needed)}; point the path at a directory "
            f"written by save_pretrained (or `posttrain make-model tiny`)"
        )
    return local


def cached_snapshot(name: str) -> Path | None:
    """The snapshot directory of hub model `name` in the local Hugging Face cache, or None when
    `name` is not a hub name or the cache does not hold it. Never touches the network."""
    if not is_hub_name(name):
        return None
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import HFValidationError, LocalEntryNotFoundError

    try:
        return Path(snapshot_download(name, local_files_only=True))
    except (LocalEntryNotFoundError, HFValidationError, FileNotFoundError):
        return None


def resolve_dtype(dtype: str) -> torch.dtype | str:
    """Map fp32/bf16/fp16/auto to what transformers' `dtype=` takes."""
    if dtype not in DTYPES:
        raise ConfigError(f"model dtype {dtype!r} is not one of {', '.join(DTYPES)}")
    return DTYPES[dtype]


def import_external_lib(module: str | None, key: str = "model.external_lib") -> None:
    """Import the user's module that registers custom architectures with transformers' Auto classes
    (`key`: the config key that named it, for the error)."""
    if not module:
        return
    try:
        importlib.import_module(module)
    except ImportError as err:
        raise ModelError(
            f"{key} {module!r} could not be imported ({err}); install it or fix the module name"
        ) from err
    except Exception as err:  # the module was found but failed while it ran: the user's code, named by its key
        raise ModelError(f"{key} {module!r} failed while being imported ({type(err).__name__}: {err}); fix that module") from err


def apply_overrides(
    config: PretrainedConfig,
    override_config: dict[str, Any] | None = None,
    *,
    rope_theta: float | None = None,
    rope_scaling: dict[str, Any] | None = None,
) -> PretrainedConfig:
    """Replace config.json attributes in place; unknown names are refused rather than silently added.

    verl's Megatron layout nests the overrides under `model_config`; that level is flattened here.
    RoPE settings live in `rope_parameters` in transformers 5 and in `rope_theta`/`rope_scaling` before.
    """
    overrides = dict(override_config or {})
    overrides.update(overrides.pop("model_config", None) or {})
    for key, value in overrides.items():
        if key in ("rope_theta", "rope_scaling"):
            _set_rope(config, **{key: value})
        elif not hasattr(config, key):
            raise ModelError(
                f"model.override_config.{key}: {type(config).__name__} has no attribute {key!r}; "
                f"use a key that appears in the model's config.json"
            )
        else:
            setattr(config, key, value)
    if rope_theta is not None or rope_scaling is not None:
        _set_rope(config, rope_theta=rope_theta, rope_scaling=rope_scaling)
    return config


def _set_rope(config: PretrainedConfig, *, rope_theta: float | None = None, rope_scaling: dict | None = None) -> None:
    """Set RoPE base/scaling on both config layouts (transformers 5 `rope_parameters`, 4.x attributes)."""
    params = getattr(config, "rope_parameters", None)
    if isinstance(params, dict):
        params = dict(params)
        if rope_theta is not None:
            params["rope_theta"] = float(rope_theta)
        if rope_scaling:
            scaling = dict(rope_scaling)
            if "type" in scaling:  # the pre-5 spelling
                scaling["rope_type"] = scaling.pop("type")
            params.update(scaling)
        config.rope_parameters = params
        return
    if rope_theta is not None:
        config.rope_theta = float(rope_theta)
    if rope_scaling:
        config.rope_scaling = dict(rope_scaling)


def load_config(
    path: str | Path,
    *,
    trust_remote_code: bool = False,
    override_config: dict[str, Any] | None = None,
    rope_theta: float | None = None,
    rope_scaling: dict[str, Any] | None = None,
    what: str = "model",
) -> PretrainedConfig:
    """Read config.json from a local directory and apply the overrides."""
    local = resolve_model_dir(path, what=what)
    try:
        config = AutoConfig.from_pretrained(local, trust_remote_code=trust_remote_code, local_files_only=True)
    except (OSError, ValueError) as err:
        check_text_files(local)
        raise ModelError(
            f"cannot read the config of {what} {str(path)!r}: {err}. If the architecture is custom, set "
            f"trust_remote_code or external_lib"
        ) from err
    return apply_overrides(config, override_config, rope_theta=rope_theta, rope_scaling=rope_scaling)


def _from_pretrained(
    auto_cls: Any,
    path: str | Path,
    config: PretrainedConfig,
    *,
    dtype: str,
    trust_remote_code: bool,
    attn_implementation: str | None,
    gradient_checkpointing: bool,
    device: str | torch.device,
    what: str,
    expect_new_head: bool = False,
) -> PreTrainedModel:
    """The shared body of every loader: weights, dtype, attention kernel, checkpointing, device."""
    local = resolve_model_dir(path, what=what)
    kwargs: dict[str, Any] = {}
    attn = _ATTN_ALIASES.get(attn_implementation or "auto", attn_implementation)
    if attn is not None:
        kwargs["attn_implementation"] = attn
    check_weight_files(local)  # a truncated or corrupt safetensors file is named before any read
    try:
        # transformers' load report is replaced by `check_load_info`: mismatched shapes are loaded
        # (then refused there, naming the tensor) instead of raising a RuntimeError.
        with quiet_transformers(hide_warnings=True):
            model, info = auto_cls.from_pretrained(
                local, config=config, dtype=resolve_dtype(dtype), trust_remote_code=trust_remote_code,
                local_files_only=True, ignore_mismatched_sizes=True, output_loading_info=True, **kwargs,
            )
    except (OSError, ValueError, ImportError, RuntimeError, pickle.UnpicklingError, SafetensorError) as err:
        if (explained := explain_load_error(local, err)) is not None:
            raise explained from err
        if isinstance(err, RuntimeError):
            raise  # not a file problem: a bug keeps its traceback
        raise ModelError(f"cannot load {what} from {str(path)!r}: {err}") from err
    check_load_info(info, local, what, new_head_ok=expect_new_head, base_prefix=model.base_model_prefix)
    if gradient_checkpointing:
        enable_gradient_checkpointing(model)
    return model.to(device)


def enable_gradient_checkpointing(model: PreTrainedModel) -> None:
    """Turn on activation recomputation (non-reentrant: works with frozen inputs and no-grad parts)."""
    model.config.use_cache = False  # a KV cache is useless in training and conflicts with recomputation
    if hasattr(model, "activation_checkpointing_enable"):  # transformers >= 5
        model.activation_checkpointing_enable(activation_checkpointing_kwargs={"use_reentrant": False})
    else:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})


def load_causal_lm(
    path: str | Path,
    *,
    dtype: str = "fp32",
    trust_remote_code: bool = False,
    override_config: dict[str, Any] | None = None,
    gradient_checkpointing: bool = False,
    attn_implementation: str | None = None,
    rope_theta: float | None = None,
    rope_scaling: dict[str, Any] | None = None,
    external_lib: str | None = None,
    device: str | torch.device = "cpu",
) -> PreTrainedModel:
    """Load a policy/reference model (`AutoModelForCausalLM`) from a local directory; a
    vision-language family of `posttrain.models.vision` loads with its vision tower
    (`AutoModelForImageTextToText`)."""
    import_external_lib(external_lib)
    config = load_config(path, trust_remote_code=trust_remote_code, override_config=override_config,
                         rope_theta=rope_theta, rope_scaling=rope_scaling, what="model")
    if getattr(config, "vision_config", None) is not None and not is_vision_language(config):
        raise ModelError(f"{path}: {config.model_type} is a vision-language family posttrain does not train; its "
                         f"vision path implements {', '.join(VISION_FAMILIES)} (their positions and image merge)")
    auto_cls = AutoModelForImageTextToText if is_vision_language(config) else AutoModelForCausalLM
    return _from_pretrained(
        auto_cls, path, config, dtype=dtype, trust_remote_code=trust_remote_code,
        attn_implementation=attn_implementation, gradient_checkpointing=gradient_checkpointing,
        device=device, what="model",
    )


def load_value_model(
    path: str | Path,
    *,
    dtype: str = "fp32",
    trust_remote_code: bool = False,
    override_config: dict[str, Any] | None = None,
    gradient_checkpointing: bool = False,
    attn_implementation: str | None = None,
    external_lib: str | None = None,
    device: str | torch.device = "cpu",
) -> PreTrainedModel:
    """Load a critic: the LM body plus a one-output token head; `model(ids).logits` is (B, S, 1).

    Seed torch before calling when the head must be reproducible (it is initialised from the
    global RNG unless the directory already holds a trained critic).
    """
    import_external_lib(external_lib)
    config = load_config(path, trust_remote_code=trust_remote_code, override_config=override_config, what="critic")
    config.num_labels = 1
    config.classifier_dropout = 0.0
    return _from_pretrained(
        AutoModelForTokenClassification, path, config, dtype=dtype, trust_remote_code=trust_remote_code,
        attn_implementation=attn_implementation, gradient_checkpointing=gradient_checkpointing,
        device=device, what="critic", expect_new_head=True,
    )


def load_reward_model(
    path: str | Path,
    *,
    dtype: str = "fp32",
    trust_remote_code: bool = False,
    override_config: dict[str, Any] | None = None,
    attn_implementation: str | None = None,
    external_lib: str | None = None,
    device: str | torch.device = "cpu",
) -> PreTrainedModel:
    """Load a reward model (`AutoModelForSequenceClassification`, one score per sequence: (B, 1)).

    The pad token id tells the head which position is the last real token; when config.json lacks it
    the directory's tokenizer supplies it.
    """
    import_external_lib(external_lib)
    config = load_config(path, trust_remote_code=trust_remote_code, override_config=override_config,
                         what="reward model")
    config.num_labels = 1
    if getattr(config, "pad_token_id", None) is None:
        config.pad_token_id = load_tokenizer(path, trust_remote_code=trust_remote_code).pad_token_id
    model = _from_pretrained(
        AutoModelForSequenceClassification, path, config, dtype=dtype, trust_remote_code=trust_remote_code,
        attn_implementation=attn_implementation, gradient_checkpointing=False, device=device,
        what="reward model", expect_new_head=True,
    )
    return model.eval()


def load_tokenizer(
    path: str | Path,
    *,
    trust_remote_code: bool = False,
    chat_template: str | None = None,
) -> PreTrainedTokenizerBase:
    """Load a tokenizer from a local directory; give it a pad token (eos) if it has none.

    `chat_template` replaces the tokenizer's template. Padding side is left to callers: prompts
    are left-padded for generation, responses right-padded for training.
    """
    local = resolve_model_dir(path, what="tokenizer")
    try:
        with quiet_transformers():
            tokenizer = AutoTokenizer.from_pretrained(local, trust_remote_code=trust_remote_code, local_files_only=True)
    except (OSError, ValueError) as err:
        check_text_files(local)  # a file that is not UTF-8 is named, with its offset
        raise ModelError(f"cannot load the tokenizer from {str(path)!r}: {err}") from err
    if tokenizer.pad_token is None:
        if tokenizer.eos_token is None:
            raise ModelError(
                f"tokenizer in {str(path)!r} has neither a pad nor an eos token; add one to its "
                f"tokenizer_config.json (pad_token or eos_token)"
            )
        tokenizer.pad_token = tokenizer.eos_token
    if chat_template is not None:
        tokenizer.chat_template = chat_template
    return tokenizer


def tokenizer_from_config(cfg: ModelConfig) -> PreTrainedTokenizerBase:
    """The tokenizer the `model` section describes (tokenizer_path, chat template overrides)."""
    import_external_lib(cfg.external_lib)
    template = cfg.custom_chat_template
    if cfg.chat_template_path:
        template_file = Path(cfg.chat_template_path).expanduser()
        if not template_file.is_file():
            raise ConfigError(
                f"model.chat_template_path: {cfg.chat_template_path!r} is not a file; give a Jinja template file"
            )
        template = read_utf8(template_file, lambda message: ConfigError(f"model.chat_template_path: {message}"))
    return load_tokenizer(cfg.tokenizer_path or cfg.path, trust_remote_code=cfg.trust_remote_code,
                          chat_template=template)


def causal_lm_from_config(cfg: ModelConfig, *, device: str | torch.device = "cpu") -> PreTrainedModel:
    """The policy model the `model` section describes; checks max_model_len against the positions."""
    model = load_causal_lm(
        cfg.path, dtype=cfg.dtype, trust_remote_code=cfg.trust_remote_code,
        override_config=cfg.override_config, gradient_checkpointing=cfg.enable_gradient_checkpointing,
        attn_implementation=cfg.attn_implementation, rope_theta=cfg.rope_theta, rope_scaling=cfg.rope_scaling,
        external_lib=cfg.external_lib, device=device,
    )
    check_max_model_len(cfg, model.config)
    apply_model_kernels(cfg, model, device)  # use_fused_kernels checked, use_liger applied or reported
    return model


def check_max_model_len(cfg: ModelConfig, config: PretrainedConfig) -> None:
    """model.max_model_len must fit the model's position table."""
    positions = getattr(config, "max_position_embeddings", None)
    if cfg.max_model_len is not None and positions is not None and cfg.max_model_len > positions:
        raise ConfigError(
            f"model.max_model_len {cfg.max_model_len} exceeds the model's max_position_embeddings "
            f"{positions} ({cfg.path}); lower it or set model.rope_scaling to extend the context"
        )
