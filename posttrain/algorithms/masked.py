"""Masked reductions over (B, T) tensors, in float32.

Every reduction over tokens in posttrain goes through these, so padding never leaks into a mean.
`torch.where` (not a bare multiply) zeroes padded entries first, so a NaN or inf sitting in a padded
position cannot turn the result into NaN (0 * inf is NaN).
"""

from __future__ import annotations

import torch


def masked_sum(values: torch.Tensor, mask: torch.Tensor, dim: int | None = None) -> torch.Tensor:
    """Sum of `values * mask` over `dim` (all elements if None)."""
    mask = mask.to(values.dtype) if mask.dtype == torch.bool else mask
    safe = torch.where(mask != 0, values, torch.zeros_like(values))
    return (safe * mask).sum() if dim is None else (safe * mask).sum(dim=dim)


def masked_mean(values: torch.Tensor, mask: torch.Tensor, dim: int | None = None) -> torch.Tensor:
    """Mean over entries where `mask` is non-zero; 0 (not NaN) where the mask is empty.

    Equals verl's `masked_mean` (sum / mask-sum) wherever the mask is non-empty.
    """
    total = masked_sum(values, mask, dim)
    count = mask.to(total.dtype).sum() if dim is None else mask.to(total.dtype).sum(dim=dim)
    return total / torch.where(count == 0, torch.ones_like(count), count)


def masked_var(values: torch.Tensor, mask: torch.Tensor, unbiased: bool = True) -> torch.Tensor:
    """Variance over all masked entries; unbiased (Bessel, n/(n-1)) by default as in verl.

    Callers must ensure at least two valid entries when `unbiased`; `masked_whiten` checks for them.
    """
    mean = masked_mean(values, mask)
    var = masked_mean((values - mean) ** 2, mask)
    if unbiased:
        n = mask.to(var.dtype).sum()
        var = var * n / (n - 1)
    return var


def masked_whiten(values: torch.Tensor, mask: torch.Tensor, shift_mean: bool = True) -> torch.Tensor:
    """(values - mean) / sqrt(var + 1e-8) over the valid entries; unchanged if fewer than 2 are valid.

    verl raises on fewer than 2 valid tokens (its Bessel correction divides by zero); ROLL skips
    whitening when the mask is empty. We skip whenever the variance is undefined, which keeps a tiny
    micro-batch from crashing a run. `shift_mean=False` adds the mean back (scale only), as in verl.
    """
    values = values.float()
    if int((mask != 0).sum()) < 2:
        return values
    mean = masked_mean(values, mask)
    whitened = (values - mean) * torch.rsqrt(masked_var(values, mask) + 1e-8)
    return whitened if shift_mean else whitened + mean
