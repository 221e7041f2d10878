"""LoRA adapters (Hu et al., 2021, arXiv:2106.09685) on a role's model, with peft.

With `model.lora_rank > 0` (or `model.lora_adapter_path`) peft replaces each targeted `nn.Linear` of
the policy, in place, by a LoRA layer computing  y = W x + (alpha / r) B A x  with W frozen and only
A (r x in) and B (out x r) trained. B starts at zero, so the first policy is exactly the base model.
The roles keep holding the Hugging Face model itself (peft's `PeftModel` wrapper is kept only as a
handle), so every forward, the packing probes, the FSDP2 sharding and the checkpoints see the model
they always see, with LoRA layers inside it.

- Trained: the adapters only. They are the parameters still requiring gradients, and
  `posttrain.optim.build_optimizer` takes only those: no gradients or AdamW moments for W.
- Reference policy: the same module with the adapters switched off (`PeftModel.disable_adapter`).
  W never changes, so the base model *is* the starting policy and no second copy of it exists.
- Rollout engine: holds a plain copy of the base model and receives the merged weights
  W + (alpha / r) B A after every update (`merged_tensors`), as an engine in another process
  would. It does not sample from the actor's LoRA module because the lean decoder
  (`posttrain.models.lean_decoder`) reads plain `nn.Linear` weights, and because merging into the
  actor's W for sampling and unmerging afterwards would drift (W + d - d is not W in floating point).
- On disk: peft's own format, loadable with `PeftModel.from_pretrained(base, dir)`:
  adapter_config.json (its `base_model_name_or_path` is the base model's directory) and
  adapter_model.safetensors (keys `base_model.model.<module>.lora_A.weight`, ...).

peft is an optional dependency (`pip install 'posttrain[lora]'`); it is imported only when a role
uses LoRA.
"""

from __future__ import annotations

import json
import warnings
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

import torch
from torch import Tensor, nn
from torch.distributed.tensor import DTensor

from posttrain.errors import ConfigError, ModelError

ADAPTER = "default"  # peft's name of a model's one adapter
CONFIG_FILE = "adapter_config.json"
WEIGHTS_FILE = "adapter_model.safetensors"
FILE_PREFIX = "base_model.model."  # peft's wrapper prefixes module names so in adapter files
INSTALL = "pip install 'posttrain[lora]' (or pip install peft)"


@dataclass(frozen=True)
class LoraSettings:
    """A role's LoRA options, resolved from its config section (`lora_settings`)."""

    key: str  # the config section, for messages: "model" or "critic.model"
    rank: int
    alpha: float
    target_modules: str | list[str]  # "all-linear", module-name suffixes, or one regular expression
    exclude_modules: str | list[str] | None = None
    adapter_path: str | None = None  # start from this adapter (its own rank, alpha and targets)
    fp32_adapters: bool = True  # peft's autocast_adapter_dtype: bf16/fp16 adapters are lifted to fp32


def lora_settings(section: Any, key: str) -> LoraSettings | None:
    """The LoRA options of a model section (`model`, `critic.model`), or None when LoRA is off:
    verl's rule, on with a positive rank or an adapter to start from."""
    path = getattr(section, "lora_adapter_path", None)
    if section.lora_rank == 0 and path is None:
        return None
    return LoraSettings(
        key=key, rank=section.lora_rank, alpha=float(section.lora_alpha), target_modules=_plain(section.target_modules),
        exclude_modules=_plain(getattr(section, "exclude_modules", None)), adapter_path=path,
        fp32_adapters=bool(getattr(section, "autocast_adapter_dtype", True)),
    )


def _plain(value: Any) -> Any:
    return list(value) if isinstance(value, (list, tuple)) else value


def require_peft() -> Any:
    """The peft module, or one clear error saying how to install it."""
    try:
        import peft
    except ImportError:
        raise ModelError(f"LoRA (lora_rank > 0 or lora_adapter_path) needs the peft package, which is not installed: {INSTALL}") from None
    return peft


def is_lora(model: nn.Module) -> bool:
    """Whether peft has put adapters into `model` (it sets `peft_config` on the model it changes)."""
    return isinstance(getattr(model, "peft_config", None), dict) and ADAPTER in model.peft_config


def add_lora(model: nn.Module, s: LoraSettings, base_path: str | Path, *, task: str = "CAUSAL_LM",
             train_whole: tuple[str, ...] = ()) -> Any:
    """Put a LoRA adapter into `model` in place (fresh, or `s.adapter_path`); returns peft's wrapper.

    `train_whole`: modules trained in full beside the adapter and saved with it (the critic's new
    value head), never given an adapter themselves.

    Over a bf16 or fp16 model the adapters are fp32 unless `s.fp32_adapters` is off (peft's
    autocast_adapter_dtype, on by default there and in the frameworks built on it): an Adam step on
    a bf16 adapter would round away updates smaller than its 8-bit mantissa can hold. peft's layer
    casts its input to the adapter's dtype and the sum back to the base layer's. The frozen base
    stays in its dtype, and so does a module in `train_whole` (as peft keeps it: its input comes
    in the model's dtype). FSDP2 all-gathers a unit of mixed dtypes as bytes and asks only that its
    trained parameters share one dtype: the adapters live in the decoder-layer units, the value head
    in the root unit (`posttrain.cluster.fsdp.check_trained_dtypes` says so when a wrap policy mixes them)."""
    peft = require_peft()
    base = str(Path(base_path).expanduser().resolve())
    exclude = _with_excluded(s.exclude_modules, train_whole)
    if s.adapter_path is None:
        config = peft.LoraConfig(
            task_type=task, r=s.rank, lora_alpha=s.alpha, target_modules=s.target_modules, exclude_modules=exclude,
            bias="none", modules_to_save=list(train_whole) or None,
        )
        try:
            with quiet_peft():
                wrapped = peft.get_peft_model(model, config, autocast_adapter_dtype=s.fp32_adapters)
        except ValueError as err:  # peft: "Target modules {...} not found in the base model"
            raise ConfigError(
                f"{s.key}.target_modules={s.target_modules!r}: {str(err).splitlines()[0]} The model's linear layers "
                f"are named: {', '.join(linear_names(model))}"
            ) from None
    else:
        check_adapter_dir(s)
        with quiet_peft():
            wrapped = peft.PeftModel.from_pretrained(model, s.adapter_path, is_trainable=True, autocast_adapter_dtype=s.fp32_adapters)
    # What a saved adapter names as its base: where this run loaded the model from.
    wrapped.peft_config[ADAPTER].base_model_name_or_path = base
    _check_mergeable(model, s)
    return wrapped


@contextmanager
def quiet_peft() -> Iterator[None]:
    """peft asks transformers a deprecated question while wrapping (a FutureWarning per model) and
    warns when it renames the base model, which `add_lora` sets itself right after."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*is_gradient_checkpointing.*", category=FutureWarning)
        warnings.filterwarnings("ignore", message=".*base_model_name_or_path.*")
        yield


def value_head_name(model: nn.Module) -> str:
    """The attribute name of a token-classification model's head (what the critic reads values from)."""
    for name in ("score", "classifier"):
        if isinstance(getattr(model, name, None), nn.Module):
            return name
    raise ModelError(f"{type(model).__name__}: no value head named score or classifier to train beside the critic's adapter")


def _with_excluded(exclude: str | list[str] | None, more: tuple[str, ...]) -> str | list[str] | None:
    if not more:
        return exclude
    if isinstance(exclude, str):  # a regular expression over full module names: add the names as alternatives
        return "|".join([f"(?:{exclude})", *(rf"(?:.*\.)?{name}" for name in more)])
    return [*(exclude or []), *more]


def linear_names(model: nn.Module) -> list[str]:
    """The distinct last names of the model's linear layers (what target_modules lists)."""
    return sorted({name.rpartition(".")[2] for name, m in model.named_modules() if isinstance(m, nn.Linear)})


def check_adapter_dir(s: LoraSettings) -> dict[str, Any]:
    """Read `s.adapter_path`'s adapter_config.json; refuse what is not a LoRA adapter, and rank,
    alpha or targets set in the config that disagree with the adapter's own."""
    path = Path(str(s.adapter_path)).expanduser()
    file = path / CONFIG_FILE
    if not file.is_file() or not (path / WEIGHTS_FILE).is_file():
        raise ModelError(
            f"{s.key}.lora_adapter_path {str(path)!r}: not a peft adapter directory (it needs {CONFIG_FILE} and "
            f"{WEIGHTS_FILE}, as PeftModel.save_pretrained or `posttrain export` write them)"
        )
    try:
        config = json.loads(file.read_text(encoding="utf-8"))
    except (OSError, ValueError) as err:
        raise ModelError(f"{file}: cannot be read as JSON ({err})") from None
    if config.get("peft_type") != "LORA":
        raise ModelError(f"{file}: peft_type {config.get('peft_type')!r}; posttrain trains LoRA adapters only")
    # (set, the adapter's, the field's default): a key left at its default defers to the adapter, as in verl
    given = {"lora_rank": (s.rank, config.get("r"), 0), "lora_alpha": (s.alpha, config.get("lora_alpha"), 16.0)}
    clash = [f"{s.key}.{k}={mine!r} (the adapter's: {theirs!r})" for k, (mine, theirs, default) in given.items()
             if mine != default and theirs is not None and float(mine) != float(theirs)]
    if clash:
        raise ConfigError(
            f"{s.key}.lora_adapter_path {str(path)!r} brings its own rank and alpha, which disagree with "
            f"{', '.join(clash)}; remove those keys or set them to the adapter's values"
        )
    return config


def _check_mergeable(model: nn.Module, s: LoraSettings) -> None:
    """Every adapter layer must be plain LoRA on a linear layer: what `merged_tensors` merges."""
    from peft.tuners.lora import Linear as LoraLinear
    from peft.tuners.tuners_utils import BaseTunerLayer

    for name, module in model.named_modules():
        if not isinstance(module, BaseTunerLayer):
            continue
        problem = None
        if type(module) is not LoraLinear:
            problem = f"an adapter on its {type(module.get_base_layer()).__name__} (only linear layers take one)"
        elif module.use_dora.get(ADAPTER) or module.fan_in_fan_out or module.lora_bias.get(ADAPTER):
            problem = "DoRA, fan_in_fan_out or a LoRA bias (only plain LoRA)"
        if problem is not None:
            where = f"{s.key}.lora_adapter_path" if s.adapter_path else f"{s.key}.target_modules"
            raise ModelError(f"{where}: {name} gets {problem}; posttrain merges plain LoRA on linear layers into the rollout engine's weights")


# ---------------------------------------------------------------- what the adapter holds


def adapter_names(model: nn.Module) -> dict[str, str]:
    """Adapter file key (peft's format) -> parameter name in `model`, for every tensor the adapter
    file holds: the LoRA matrices and the modules trained whole. Named by peft's own saving rules
    (`get_peft_model_state_dict`, which renames without copying), so the files stay peft's."""
    from peft.utils import get_peft_model_state_dict

    params = dict(model.named_parameters())
    saved = get_peft_model_state_dict(model, state_dict=params, save_embedding_layers=False)
    by_id = {id(p): name for name, p in params.items()}
    return {FILE_PREFIX + key: by_id[id(tensor)] for key, tensor in saved.items()}


def _whole(tensor: Tensor) -> Tensor:
    """The whole tensor: a sharded (DTensor) one is all-gathered, a collective every rank must join."""
    return tensor.full_tensor() if isinstance(tensor, DTensor) else tensor


def adapter_state(model: nn.Module) -> dict[str, Tensor]:
    """The adapter's tensors, whole, on the CPU, keyed as in the adapter file. On a sharded model
    every rank must call it (each tensor is gathered in the same order everywhere)."""
    params = dict(model.named_parameters())
    with torch.no_grad():
        return {key: _whole(params[name]).detach().cpu().clone() for key, name in sorted(adapter_names(model).items())}


def load_adapter_state(model: nn.Module, state: dict[str, Tensor], source: str) -> None:
    """Copy adapter tensors (keys as in the adapter file) into `model`, sharded or not (each rank
    keeps its shard). Every tensor of the model's adapter must be there, with its shape."""
    from torch.distributed.checkpoint.state_dict import StateDictOptions, set_model_state_dict

    names = adapter_names(model)
    missing, unexpected = sorted(set(names) - set(state)), sorted(set(state) - set(names))
    if missing or unexpected:
        raise ModelError(
            f"{source}: the adapter does not fit the model's (missing {missing[:3]}, unexpected {unexpected[:3]}); "
            "use the rank, targets and model it was trained with"
        )
    params = dict(model.named_parameters())
    wrong = [k for k in names if tuple(state[k].shape) != tuple(params[names[k]].shape)]
    if wrong:
        raise ModelError(f"{source}: {wrong[0]} has shape {tuple(state[wrong[0]].shape)}, the model's {tuple(params[names[wrong[0]]].shape)}")
    renamed = {names[k]: v for k, v in state.items()}
    if any(isinstance(p, DTensor) for p in params.values()):
        set_model_state_dict(model, renamed, options=StateDictOptions(full_state_dict=True, strict=False))
        return
    with torch.no_grad():
        for name, value in renamed.items():
            params[name].copy_(value)


def write_adapter(model: nn.Module, out: Path, state: dict[str, Tensor], tokenizer: Any = None) -> None:
    """An adapter directory in peft's format (call on one rank only): config, weights, tokenizer."""
    from safetensors.torch import save_file

    out.mkdir(parents=True, exist_ok=True)
    config = model.peft_config[ADAPTER].to_dict()
    config["inference_mode"] = True  # as PeftModel.save_pretrained writes it
    for key, value in config.items():  # sets (target_modules) are not JSON
        if isinstance(value, set):
            config[key] = sorted(value)
    (out / CONFIG_FILE).write_text(json.dumps(config, indent=2, sort_keys=True, default=str) + "\n", encoding="utf-8")
    save_file({k: v.contiguous() for k, v in state.items()}, str(out / WEIGHTS_FILE), metadata={"format": "pt"})
    if tokenizer is not None:
        tokenizer.save_pretrained(out)


def read_adapter(directory: Path) -> dict[str, Tensor]:
    from safetensors.torch import load_file

    return load_file(str(directory / WEIGHTS_FILE))


def is_adapter_dir(path: Path) -> bool:
    return (path / CONFIG_FILE).is_file() and (path / WEIGHTS_FILE).is_file()


# ---------------------------------------------------------------- merged weights for the engine


def merged_tensors(model: nn.Module) -> Iterator[tuple[str, Tensor]]:
    """(name, whole tensor) of the policy with its adapter merged, named as in the plain model:
    W + (alpha / r) B A for every LoRA linear layer, every other parameter and buffer as it is.

    The product and sum are taken in fp32 and rounded once to W's dtype. Sharded models are
    gathered one tensor at a time (W, then A and B), in the same order on every rank: each rank
    must consume the iterator to its end."""
    from peft.tuners.lora import Linear as LoraLinear

    layers = {name: m for name, m in model.named_modules() if isinstance(m, LoraLinear)}
    with torch.no_grad():
        for name, tensor in model.state_dict().items():
            owner, sep, leaf = name.rpartition(".base_layer.")
            if ".lora_" in name:
                continue  # folded into its layer's weight below
            whole = _whole(tensor)
            if sep and leaf == "weight" and owner in layers:
                layer = layers[owner]
                a = _whole(layer.lora_A[ADAPTER].weight).float()  # (r, in)
                b = _whole(layer.lora_B[ADAPTER].weight).float()  # (out, r)
                whole = (whole.float() + (b @ a) * layer.scaling[ADAPTER]).to(whole.dtype)  # (out, in)
            yield (f"{owner}.{leaf}" if sep else name), whole
