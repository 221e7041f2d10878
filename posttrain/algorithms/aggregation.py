"""Reducing a (B, T) per-token loss to one scalar: the `loss_agg_mode` every loss shares.

The mode decides how much each token and each sequence weighs in the gradient, which is why Dr.GRPO
and DAPO argue about it: `token-mean` weighs every token equally (long answers dominate),
`seq-mean-token-mean` weighs every sequence equally (GRPO's original length bias),
`seq-mean-token-sum-norm` divides by a constant so neither length nor batch composition rescales it,
`token-sum` divides by nothing: every token weighs the same and the gradient grows with the batch.
"""

from __future__ import annotations

import torch

from posttrain.algorithms.masked import masked_sum

LOSS_AGG_MODES = ("token-mean", "token-sum", "seq-mean-token-sum", "seq-mean-token-mean", "seq-mean-token-sum-norm")


def _safe_div(num: torch.Tensor, den: torch.Tensor | float) -> torch.Tensor:
    den_t = torch.as_tensor(den, dtype=num.dtype, device=num.device)
    return num / torch.where(den_t == 0, torch.ones_like(den_t), den_t)


def aggregate_loss(
    loss_mat: torch.Tensor,
    mask: torch.Tensor,
    mode: str = "token-mean",
    *,
    loss_scale_factor: float | None = None,
    weights: torch.Tensor | None = None,
    num_tokens: float | torch.Tensor | None = None,
    num_seqs: float | torch.Tensor | None = None,
) -> torch.Tensor:
    """Aggregate a per-token loss matrix into a scalar, counting only masked-in tokens.

    Formula:
        token-mean:              sum_{i,t} w_i m_it l_it / N_tok
        token-sum:               sum_{i,t} w_i m_it l_it
        seq-mean-token-sum:      sum_i w_i (sum_t m_it l_it) / N_seq
        seq-mean-token-mean:     sum_i w_i (sum_t m_it l_it / sum_t m_it) / N_seq
        seq-mean-token-sum-norm: seq-mean-token-sum / loss_scale_factor (default: T, the padded length)
        N_tok = valid tokens, N_seq = sequences with at least one valid token (fully masked rows drop
        out), w_i = per-sequence `weights` (B,) (default 1). Per-token `weights` (B, T) (rollout
        importance weights) multiply each token's loss instead: l_it -> w_it l_it in every mode,
        the normalisers unchanged. Pass `num_tokens` / `num_seqs` to normalise by
        a larger (mini-)batch when gradients are accumulated over micro-batches; token-sum has no
        normaliser, so its micro-batch losses simply add up to the mini-batch's
        (posttrain.workers.microbatch gives each the weight 1).
    Names:
        verl `actor.loss_agg_mode` (+ `loss_scale_factor`); ROLL `loss_agg_mode`; Trinity-RFT
        `loss_agg_mode` (verl backend).
    Paper:
        Dr.GRPO: Liu et al. 2025, Understanding R1-Zero-Like Training: A Critical Perspective,
        arXiv:2503.20783. DAPO token-level loss: Yu et al. 2025, arXiv:2503.14476.
    Deviation:
        verl's token-sum multiplies each rank's local sum by the data-parallel size because its
        gradients are averaged over ranks; posttrain sums gradients over ranks, so the global sum
        needs no factor. Both give the gradient of the sum over the whole mini-batch.
        ROLL and verl before its `global_batch_info` change do not average `seq-mean-token-sum-norm`
        over sequences (sum_i / T); pass `num_seqs=1` to reproduce that. An all-masked batch gives 0.
    """
    if loss_mat.shape != mask.shape:
        raise ValueError(f"loss_mat {tuple(loss_mat.shape)} and mask {tuple(mask.shape)} must have the same shape")
    loss_mat = loss_mat.float()
    mask = mask.float()
    if weights is not None and weights.dim() == 2:
        if weights.shape != loss_mat.shape:
            raise ValueError(f"per-token weights {tuple(weights.shape)} must match loss_mat {tuple(loss_mat.shape)}")
        loss_mat, weights = loss_mat * weights.float(), None
    row_w = torch.ones(loss_mat.shape[0], device=loss_mat.device) if weights is None else weights.float().reshape(-1)
    if mode in ("token-mean", "token-sum"):
        total = masked_sum(loss_mat * row_w.unsqueeze(-1), mask)
        if mode == "token-sum":
            return total  # no normaliser: the micro-batch sums add up to the mini-batch's sum
        return _safe_div(total, mask.sum() if num_tokens is None else num_tokens)
    if mode not in LOSS_AGG_MODES:
        raise ValueError(f"unknown loss_agg_mode {mode!r}; valid modes: {', '.join(LOSS_AGG_MODES)}")
    tokens_per_seq = mask.sum(dim=-1)  # (B,)
    valid_seq = (tokens_per_seq > 0).float()  # (B,)
    seq_loss = masked_sum(loss_mat, mask, dim=-1)  # (B,)
    if mode == "seq-mean-token-mean":
        seq_loss = _safe_div(seq_loss, tokens_per_seq)
    loss = _safe_div((seq_loss * row_w * valid_seq).sum(), valid_seq.sum() if num_seqs is None else num_seqs)
    if mode == "seq-mean-token-sum-norm":
        loss = loss / (float(mask.shape[-1]) if loss_scale_factor is None else float(loss_scale_factor))
    return loss
