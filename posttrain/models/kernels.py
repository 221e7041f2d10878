"""The model section's kernel and memory flags, applied where a model is loaded or trained.

- `model.use_fused_kernels` (+ `fused_kernel_impl_backend`): the fused LM head of
  `posttrain.models.fused_head`, checked against the loaded model and the device here;
- `model.use_liger`: Liger's kernels (the liger-kernel package), patched into the model where the
  package imports and the model sits on a CUDA GPU; elsewhere reported once as unavailable;
- `enable_activation_offload` (policy and critic): `activation_offload`, the context the training
  forward runs in, which moves the tensors autograd saves for the backward to host memory.
"""

from __future__ import annotations

import contextlib
import importlib
import logging
from typing import Any, ContextManager

import torch
from torch import nn

from posttrain.errors import ConfigError
from posttrain.models.fused_head import fused_head_reason
from posttrain.models.logprobs import HeadKernel

logger = logging.getLogger(__name__)

_LIGER_REPORTED: set[str] = set()  # reasons already logged: "reported once" per process


def head_kernel(model_cfg: Any, entropy_checkpointing: bool = False) -> HeadKernel:
    """The `HeadKernel` a role's log-prob passes use: the model section's fused-head choice (null
    backend: torch, verl's default) and the role's entropy checkpointing."""
    fused = (model_cfg.fused_kernel_impl_backend or "torch") if model_cfg.use_fused_kernels else None
    return HeadKernel(fused=fused, entropy_checkpointing=entropy_checkpointing)


def check_fused_head(model_cfg: Any, model: nn.Module, device: torch.device | str) -> None:
    """Refuse `model.use_fused_kernels` where the fused head would not compute the model's own
    log-probs, or where its backend cannot run (triton: a CUDA device)."""
    if not model_cfg.use_fused_kernels:
        return
    reason = fused_head_reason(model)
    if reason is not None:
        raise ConfigError(
            f"model.use_fused_kernels: {reason}; posttrain's fused head reproduces a plain linear head only, "
            "so set use_fused_kernels to false for this model"
        )
    if model_cfg.fused_kernel_impl_backend == "triton" and torch.device(device).type != "cuda":
        raise ConfigError(
            f"model.fused_kernel_impl_backend=triton compiles the fused head into Triton kernels, which run on a CUDA "
            f"GPU; this run computes on {torch.device(device).type}: use fused_kernel_impl_backend=torch"
        )


def apply_liger(model: nn.Module, device: torch.device | str) -> bool:
    """Patch Liger's kernels into `model` (its family's `apply_liger_kernel_to_<model_type>`) when
    the package imports and the model is on a CUDA GPU; else log once why not. True when applied."""
    family = getattr(model.config, "model_type", "?")
    reason = None
    if torch.device(device).type != "cuda":
        reason = f"Liger's kernels are Triton kernels for CUDA GPUs and this model is on {torch.device(device).type}"
    else:
        try:
            liger = importlib.import_module("liger_kernel.transformers")
        except ImportError as err:
            liger, reason = None, f"the liger-kernel package is not importable ({err}); pip install liger-kernel"
        apply = getattr(liger, f"apply_liger_kernel_to_{family}", None) if liger is not None else None
        if liger is not None and apply is None:
            reason = f"liger-kernel has no apply_liger_kernel_to_{family} for this model family"
    if reason is not None:
        if reason not in _LIGER_REPORTED:
            _LIGER_REPORTED.add(reason)
            logger.warning("model.use_liger: Liger kernels unavailable, the model runs its own layers: %s", reason)
        return False
    apply(model=model)  # swaps RMSNorm, rotary, SwiGLU in this instance (and module-level functions)
    logger.info("model.use_liger: Liger kernels applied to the %s model", family)
    return True


def apply_model_kernels(model_cfg: Any, model: nn.Module, device: torch.device | str) -> None:
    """What the model section's kernel flags do to a freshly loaded policy."""
    check_fused_head(model_cfg, model, device)
    if model_cfg.use_liger:
        apply_liger(model, device)


def activation_offload(enabled: bool, device: torch.device | str) -> ContextManager:
    """The context a training forward runs in: with `enabled`, every tensor autograd saves for the
    backward goes to host memory (`torch.autograd.graph.save_on_cpu`, pinned on CUDA for fast copies
    back) and returns to the device in the backward. That saves accelerator memory only: on a CPU
    the tensors already live in host memory, so the hooks run and move nothing."""
    if not enabled:
        return contextlib.nullcontext()
    return torch.autograd.graph.save_on_cpu(pin_memory=torch.device(device).type == "cuda")
