"""Mixed precision for a role's forward and backward: compute in bf16, keep fp32 master weights.

This is what FSDP's `MixedPrecision(param_dtype=torch.bfloat16)` gives a verl role
(`fsdp_config.mixed_precision.param_dtype: bf16`), done in one process with `torch.autocast`
(Micikevicius et al. 2018, "Mixed Precision Training"; bf16 needs no loss scaling, which is why
fp16 is not offered). Matmuls and attention run in bf16, autocast keeps its fp32 list (softmax,
log-softmax, norms' reductions) in fp32; parameters, gradients and AdamW state stay in the model's
dtype. posttrain's log-probs are computed from fp32 logits in any case
(`posttrain.models.lm_head_logits`).

The default, `auto`, is bf16 on a GPU and fp32 on the CPU: the GPU's tensor cores run bf16 matmuls
at many times the fp32 rate (and verl's FSDP workers compute in bf16 unless told otherwise), while on
the CPU bf16 pays only on processors with AVX512-BF16 or AMX (oneDNN's bf16 matmuls then run 2-3x
the fp32 rate, docs/performance.md), and it changes the arithmetic, so there it stays an explicit
choice.
"""

from __future__ import annotations

import contextlib
from typing import ContextManager

import torch
from torch import nn

from posttrain.models.loading import resolve_dtype

def compute_dtype(param_dtype: str, device: torch.device | str) -> str:
    """`fsdp_config.mixed_precision.param_dtype` for a role computing on `device`: "auto" is "bf16" on
    a GPU and "fp32" on the CPU; "fp32" and "bf16" stay as they are."""
    if param_dtype != "auto":
        return param_dtype
    return "bf16" if torch.device(device).type == "cuda" else "fp32"


def autocast(model: nn.Module, param_dtype: str) -> ContextManager:
    """The context a role's forward runs in: `torch.autocast` to `param_dtype` when the model's
    parameters are wider, else nothing ("fp32" always means: compute in the parameters' dtype;
    "auto" follows the parameters' device, `compute_dtype`)."""
    weight = next(model.parameters())
    target = resolve_dtype(compute_dtype(param_dtype, weight.device))  # fp32 or bf16 here
    if target == torch.float32 or weight.dtype == target:
        return contextlib.nullcontext()
    return torch.autocast(device_type=weight.device.type, dtype=target)
