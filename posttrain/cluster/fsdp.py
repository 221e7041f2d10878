"""Sharding one role's model over its ranks with FSDP2 (`torch.distributed.fsdp.fully_shard`).

One FSDP unit per decoder layer (or per module class / size, as `wrap_policy` asks) and one for the
root, over the role's device mesh: a 1-D mesh shards over every rank; with `fsdp_size` smaller than
the role's world a 2-D mesh (replicate, shard) shards within groups of `fsdp_size` ranks and
replicates across them (HSDP). The training loop never sees any of this: it calls the model.

Gradients are SUMMED over ranks (divide factor 1), not averaged as FSDP does by default: every
rank's micro-batch losses are already weighted by their share of the whole mini-batch
(`posttrain.workers.microbatch.accumulate_gradients`), so the sum is the single-process gradient.

The FSDP root is a thin `ShardedForward` around the model, not the model: posttrain's forwards call
the decoder body and the LM head separately (`posttrain.models.logprobs`: the head only on response
positions, in chunks), never `model(...)`, so the root's hooks would not run and the root's
parameters (embeddings, final norm, head; tied embeddings must share one unit) would stay sharded.
`ShardedForward(fn, *args)` runs any such forward function as the root's forward.

Mixed precision stays `torch.autocast` (`posttrain.models.precision`), as in one process, so a
role computes the same in both: FSDP gathers the fp32 parameters and autocast casts them for the
matmuls. Only the gradient reduction dtype (`mixed_precision.reduce_dtype`) is FSDP's.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from typing import Any, Callable

import torch
from torch import nn
from torch.distributed.checkpoint.state_dict import (
    StateDictOptions, get_model_state_dict, get_optimizer_state_dict, set_optimizer_state_dict,
)
from torch.distributed.device_mesh import DeviceMesh
from torch.distributed.tensor import DTensor
from torch.distributed.fsdp import CPUOffloadPolicy, MixedPrecisionPolicy, OffloadPolicy, fully_shard

from posttrain.errors import ConfigError
from posttrain.models.loading import resolve_dtype


# FSDP2 warns when a root forward returns a view, since an in-place op on it would skip the
# gradient hook. posttrain's forwards return log-probs, entropies and values that every caller only
# reads or combines out of place (losses, masks, aggregation), so the warning says nothing here and
# would fill every worker's log each step.
warnings.filterwarnings("ignore", message=r"FSDP2-wrapped module .* returned a view tensor")


@dataclass(frozen=True)
class ShardingSettings:
    """A role's FSDP options, resolved from its `fsdp_config` section."""

    reshard_after_forward: bool = True  # free gathered layers after the forward (gather again in backward)
    offload: bool = False  # CPUOffloadPolicy: parameters, gradients and optimizer state on the CPU
    reduce_dtype: str = "fp32"  # dtype of the gradient reduce-scatter / all-reduce
    forward_prefetch: bool = False  # gather layer i+1 while layer i computes
    wrap_classes: tuple[str, ...] = ()  # module class names made units; () = the model's decoder layers
    min_num_params: int = 0  # > 0: instead, every module with at least this many parameters of its own subtree


def wrap_units(model: nn.Module, s: ShardingSettings) -> list[nn.Module]:
    """The modules that become FSDP units (besides the root), innermost first."""
    if s.min_num_params > 0:
        sizes = {m: sum(p.numel() for p in m.parameters()) for m in model.modules()}
        units, covered = [], set()
        for module in reversed(list(model.modules())):  # children before parents
            if module is model or sizes[module] < s.min_num_params:
                continue
            own = sum(p.numel() for p in module.parameters() if id(p) not in covered)
            if own >= s.min_num_params:
                units.append(module)
                covered.update(id(p) for p in module.parameters())
        return units
    if s.wrap_classes:
        units = [m for m in model.modules() if type(m).__name__ in s.wrap_classes]
        if not units:
            names = sorted({type(m).__name__ for m in model.modules()})
            raise ConfigError(
                f"fsdp_config.transformer_layer_cls_to_wrap={list(s.wrap_classes)} matches no module of "
                f"{type(model).__name__}; its module classes are: {', '.join(names)}"
            )
        return units
    decoder = model.get_decoder() if hasattr(model, "get_decoder") else getattr(model, "model", None)
    layers = getattr(decoder, "layers", None)
    if layers is None:
        raise ConfigError(
            f"{type(model).__name__} has no decoder layers to shard (model.get_decoder().layers); "
            "set fsdp_config.wrap_policy.transformer_layer_cls_to_wrap to its block class"
        )
    return list(layers)


class ShardedForward(nn.Module):
    """The FSDP root over a role's model: `root(fn, *args, **kwargs)` runs `fn(*args, **kwargs)`
    (a forward that uses `root.inner`) between the root's gather and release of its parameters."""

    def __init__(self, model: nn.Module):
        super().__init__()
        self.inner = model

    def forward(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        return fn(*args, **kwargs)


def run_directly(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """The unsharded counterpart of `ShardedForward`: a role with one rank calls its forwards as they are."""
    return fn(*args, **kwargs)


def forward_runner(model: nn.Module) -> tuple[Callable[..., Any], nn.Module]:
    """(how to run a forward, the model itself) for a plain model or a `shard_model` root, so a role
    takes either and runs every forward as `run(fn, *args)`."""
    if isinstance(model, ShardedForward):
        return model, model.inner
    return run_directly, model


def check_trained_dtypes(model: nn.Module, units: list[nn.Module]) -> None:
    """FSDP2 reduces a unit's gradients in one flat buffer, so the parameters a unit trains must
    share a dtype (the frozen ones may differ: they are gathered as bytes). With LoRA over a bf16
    model the adapters are fp32 and a critic's value head bf16: apart as long as the head sits in
    the root unit and every adapted layer in a unit of its own."""
    in_units = {id(p) for unit in units for p in unit.parameters()}
    groups = [(f"{type(unit).__name__} unit", [(n, p) for n, p in unit.named_parameters() if p.requires_grad]) for unit in units]
    groups.append(("root unit", [(n, p) for n, p in model.named_parameters() if p.requires_grad and id(p) not in in_units]))
    for where, params in groups:
        dtypes = sorted({str(p.dtype).removeprefix("torch.") for _, p in params})
        if len(dtypes) > 1:
            names = ", ".join(f"{n} ({str(p.dtype).removeprefix('torch.')})" for n, p in params[:4])
            raise ConfigError(
                f"FSDP2 would shard trained parameters of dtypes {' and '.join(dtypes)} in one {where} ({names}, ...), and it "
                "reduces a unit's gradients in one dtype: wrap the adapted layers in units of their own "
                "(fsdp_config.wrap_policy.transformer_layer_cls_to_wrap), or keep LoRA adapters in the model's dtype "
                "(model.autocast_adapter_dtype / critic.model.autocast_adapter_dtype: false)"
            )


def shard_model(model: nn.Module, mesh: DeviceMesh, s: ShardingSettings) -> ShardedForward:
    """Apply FSDP2 to `model` in place over `mesh`; returns the root to run its forwards through.

    Tied embeddings (lm_head sharing embed_tokens' weight) stay tied: both live in the root unit.
    """
    reduce = resolve_dtype(s.reduce_dtype)
    kwargs = dict(
        mesh=mesh,
        reshard_after_forward=s.reshard_after_forward,
        mp_policy=MixedPrecisionPolicy(reduce_dtype=None if reduce == torch.float32 else reduce),
        offload_policy=CPUOffloadPolicy(pin_memory=torch.cuda.is_available()) if s.offload else OffloadPolicy(),
    )
    units = wrap_units(model, s)
    check_trained_dtypes(model, units)
    for unit in units:
        fully_shard(unit, **kwargs)
    # The root's parameters (embeddings, final norm, head) are used again right after the forward
    # (the chunked LM head runs after the decoder) and in the backward, so resharding them after
    # the forward would only gather them again at once.
    root = ShardedForward(model)
    fully_shard(root, **dict(kwargs, reshard_after_forward=False))
    for module in (*units, root):  # each unit reduces its own gradients
        module.set_gradient_divide_factor(1.0)  # a sum over ranks: see the module docstring
        # A plain SUM collective: a custom factor would otherwise use NCCL's PREMUL_SUM, which gloo lacks.
        module.set_force_sum_reduction_for_comms(True)
    if s.forward_prefetch:
        for unit, following in zip(units, units[1:]):
            unit.set_modules_to_forward_prefetch([following])
    settle_kernel_probes(root)
    return root


def settle_kernel_probes(root: ShardedForward) -> None:
    """Run now, on every rank, the once-per-model probes that the forwards would otherwise run lazily.

    Whether packed or shared-prompt rows keep sequences apart is probed with a small forward the
    first time a micro-batch can use them (`posttrain.models.packing`, `posttrain.models.shared_prompt`).
    On a sharded model that forward is a collective, and a rank whose first micro-batch cannot pack
    (a single row, a padding unit) would skip it while the others wait for it forever."""
    from posttrain.models.packing import packing_supported
    from posttrain.models.shared_prompt import shared_prompt_supported

    if hasattr(root.inner, "get_decoder"):
        with torch.no_grad():  # outside no_grad FSDP would prepare a backward that never comes
            root(packing_supported, root.inner)
            root(shared_prompt_supported, root.inner)
        # The root keeps its parameters gathered after a forward (see shard_model); left so, the
        # next forward would find them gathered and not hook their gradients for reduction.
        root.reshard()


# ---------------------------------------------------------------- whole-model state of a sharded role
# Checkpoints, the final model and the rollout engine's weights are whole (unsharded) tensors in
# the single-process layout, so a checkpoint written by N workers resumes on any number of them.


def is_sharded(model: nn.Module) -> bool:
    return any(isinstance(p, DTensor) for p in model.parameters())


def full_state_dict(model: nn.Module, *, main_only: bool = False) -> dict[str, torch.Tensor]:
    """The model's state dict with whole tensors. Sharded: a collective every rank must call; with
    `main_only` only rank 0 receives the tensors (on the CPU), the others an empty dict."""
    if not is_sharded(model):
        return model.state_dict()
    return get_model_state_dict(model, options=StateDictOptions(full_state_dict=True, cpu_offload=main_only))


def _param_index(model: nn.Module, optimizer: torch.optim.Optimizer) -> dict[str, int]:
    """Parameter name -> its number in `optimizer.state_dict()` (parameters numbered across groups in order)."""
    name_of = {id(p): n for n, p in model.named_parameters()}
    order = [name_of[id(p)] for g in optimizer.param_groups for p in g["params"]]
    return {n: i for i, n in enumerate(order)}


def full_optimizer_state(model: nn.Module, optimizer: torch.optim.Optimizer) -> dict[str, Any]:
    """The optimizer's state with whole tensors, in `optimizer.state_dict()`'s own layout (as one
    process saves it). Sharded: a collective; only rank 0 receives it (others get {})."""
    if not is_sharded(model):
        return optimizer.state_dict()
    named = get_optimizer_state_dict(model, optimizer, options=StateDictOptions(full_state_dict=True, cpu_offload=True))
    if not named:
        return {}
    index = _param_index(model, optimizer)
    return {
        "state": {index[n]: v for n, v in named["state"].items()},
        "param_groups": [dict(g, params=[index[n] for n in g["params"]]) for g in named["param_groups"]],
    }


def load_full_optimizer_state(model: nn.Module, optimizer: torch.optim.Optimizer, state: dict[str, Any]) -> None:
    """Load an optimizer state saved by one process (`optimizer.state_dict()`, parameters numbered in
    order) into a sharded role's optimizer: every rank reads the whole state and keeps its shards."""
    name = {i: n for n, i in _param_index(model, optimizer).items()}
    named = {
        "state": {name[int(i)]: v for i, v in state["state"].items()},
        "param_groups": [dict(g, params=[name[int(i)] for i in g["params"]]) for g in state["param_groups"]],
    }
    set_optimizer_state_dict(model, optimizer, named, options=StateDictOptions(full_state_dict=True))


# ---------------------------------------------------------------- a role's sharding from its config


def sharding_settings(f: Any) -> ShardingSettings:
    """A role's `fsdp_config` section as `ShardingSettings`.

    verl's three offload switches all mean "parameters (and with them gradients and optimizer state)
    live in CPU memory and are copied to the device unit by unit": FSDP2's CPU offload policy, which
    also runs the optimizer step on the CPU. posttrain therefore gives the three one meaning."""
    return ShardingSettings(
        reshard_after_forward=f.reshard_after_forward,
        offload=f.param_offload or f.optimizer_offload or f.offload_policy,
        reduce_dtype=f.mixed_precision.reduce_dtype,
        forward_prefetch=f.forward_prefetch,
        wrap_classes=tuple(f.transformer_layer_cls_to_wrap),
        min_num_params=f.min_num_params,
    )


def role_mesh(device: str, world_size: int, fsdp_size: int) -> DeviceMesh:
    """The mesh a role shards over: every rank (1-D), or with 1 < `fsdp_size` < world size a 2-D
    (replicate, shard) mesh whose shard groups hold `fsdp_size` consecutive ranks (HSDP)."""
    from torch.distributed.device_mesh import init_device_mesh

    if fsdp_size in (-1, world_size):
        return init_device_mesh(device, (world_size,), mesh_dim_names=("shard",))
    if fsdp_size < 1 or world_size % fsdp_size:
        raise ConfigError(
            f"fsdp_config.fsdp_size={fsdp_size} does not divide the {world_size} worker processes; use -1 "
            f"(shard over all) or a divisor of {world_size}"
        )
    return init_device_mesh(device, (world_size // fsdp_size, fsdp_size), mesh_dim_names=("replicate", "shard"))
