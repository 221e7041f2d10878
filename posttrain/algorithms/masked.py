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


def masked_segment_mean(values: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """(B, T) each masked entry replaced by the mean of its segment, 0 where the mask is 0.

    A segment is a maximal run of consecutive non-zero mask entries in a row: in an agentic
    trajectory whose tool/env tokens are masked out, one model turn. ROLL's
    `compute_segment_masked_mean` (roll/pipeline/agentic/utils.py) computes the same, with 1e-8
    added to its divisor.

    >>> masked_segment_mean(torch.tensor([[1.0, 3.0, 9.0, 4.0, 0.0]]), torch.tensor([[1, 1, 0, 1, 0]]))
    tensor([[2., 2., 0., 4., 0.]])
    """
    on = mask != 0  # (B, T)
    before = torch.nn.functional.pad(on[:, :-1], (1, 0), value=False)  # (B, T): the previous entry's mask
    # Segment number of each entry within its row (0-based; entries before the first segment get 0
    # but carry no weight, being masked).
    seg = (torch.cumsum((on & ~before).long(), dim=1) - 1).clamp(min=0)  # (B, T)
    safe = torch.where(on, values.float(), torch.zeros_like(values, dtype=torch.float32))
    sums = torch.zeros_like(safe).scatter_add_(1, seg, safe)  # (B, T): slot k holds segment k's sum
    counts = torch.zeros_like(safe).scatter_add_(1, seg, on.float())
    means = sums / counts.clamp(min=1.0)
    return torch.where(on, means.gather(1, seg), torch.zeros_like(safe))
