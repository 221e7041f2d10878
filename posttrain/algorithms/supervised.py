"""Losses that need no reward: SFT (negative log-likelihood) and DPO (preference pairs).

Both are registered in POLICY_LOSSES so SFT and DPO runs go through the same actor update as RL; they
accept the five common keywords and ignore `old_logprob` and `advantages` (pass None).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from posttrain.algorithms.aggregation import aggregate_loss
from posttrain.algorithms.masked import masked_sum
from posttrain.algorithms.registry import LossOutput, register_policy_loss


@register_policy_loss("sft")
def sft_loss(
    *,
    old_logprob: torch.Tensor | None,
    logprob: torch.Tensor,
    advantages: torch.Tensor | None,
    response_mask: torch.Tensor,
    loss_agg_mode: str = "token-mean",
    loss_scale_factor: float | None = None,
    sample_weights: torch.Tensor | None = None,
) -> LossOutput:
    """SFT: negative log-likelihood of the target tokens.

    Formula:
        L = agg(-log pi(y_t)); token-mean is the usual cross-entropy, seq-mean-token-mean is Trinity-RFT's
        `use_token_level_loss: false`. metrics["nll"] is the token-mean NLL whatever the mode.
    Names:
        verl SFT trainer; Trinity-RFT `policy_loss_fn: sft`; ROLL `sft_loss_coef` adds another term, `positive_sft_loss`.
    Paper:
        Ouyang et al. 2022, Training Language Models to Follow Instructions with Human Feedback,
        arXiv:2203.02155 (supervised fine-tuning stage).
    """
    logp, mask = logprob.float(), response_mask.float()
    loss = aggregate_loss(-logp, mask, loss_agg_mode, loss_scale_factor=loss_scale_factor, weights=sample_weights)
    nll = aggregate_loss(-logp.detach(), mask, "token-mean")
    return LossOutput(loss, {"pg_clipfrac": 0.0, "ppo_kl": 0.0, "pg_clipfrac_lower": 0.0, "nll": float(nll)})


def dpo_loss(
    chosen_logprob: torch.Tensor,
    rejected_logprob: torch.Tensor,
    ref_chosen_logprob: torch.Tensor,
    ref_rejected_logprob: torch.Tensor,
    beta: float = 0.1,
    label_smoothing: float = 0.0,
) -> LossOutput:
    """DPO on sequence log-probs (each (N,), summed over the response's tokens).

    Formula:
        z = beta * ((log pi(y_w) - log pi_ref(y_w)) - (log pi(y_l) - log pi_ref(y_l)));
        L = mean(-(1 - ls) log sigmoid(z) - ls log sigmoid(-z)), ls = label_smoothing (cDPO).
        Metrics: chosen_reward / rejected_reward (beta * log-ratio means) and accuracy (z > 0).
    Names:
        Trinity-RFT `algorithm_type: dpo` (`beta`, `label_smoothing`); TRL `DPOTrainer`; not in verl or ROLL.
    Paper:
        Rafailov et al. 2023, Direct Preference Optimization, arXiv:2305.18290.
    """
    chosen_ratio = chosen_logprob.float() - ref_chosen_logprob.float()  # (N,)
    rejected_ratio = rejected_logprob.float() - ref_rejected_logprob.float()  # (N,)
    z = beta * (chosen_ratio - rejected_ratio)
    losses = -F.logsigmoid(z) * (1.0 - label_smoothing) - F.logsigmoid(-z) * label_smoothing
    metrics = {
        "pg_clipfrac": 0.0,
        "ppo_kl": 0.0,
        "pg_clipfrac_lower": 0.0,
        "chosen_reward": float(beta * chosen_ratio.detach().mean()),
        "rejected_reward": float(beta * rejected_ratio.detach().mean()),
        "accuracy": float((z.detach() > 0).float().mean()),
    }
    return LossOutput(losses.mean(), metrics)


@register_policy_loss("dpo")
def dpo_policy_loss(
    *,
    old_logprob: torch.Tensor | None,
    logprob: torch.Tensor,
    advantages: torch.Tensor | None,
    response_mask: torch.Tensor,
    loss_agg_mode: str = "token-mean",
    ref_logprob: torch.Tensor,
    beta: float = 0.1,
    label_smoothing: float = 0.0,
) -> LossOutput:
    """DPO over a batch whose even rows are chosen responses and odd rows the rejected ones.

    Formula:
        Sums masked token log-probs per row, then `dpo_loss` on rows (0, 2, ...) vs (1, 3, ...).
        `loss_agg_mode` is ignored: DPO is a per-pair loss.
    Names:
        Trinity-RFT `policy_loss_fn: dpo` (same interleaved layout); not in verl or ROLL.
    Paper:
        Rafailov et al. 2023, Direct Preference Optimization, arXiv:2305.18290.
    """
    if logprob.shape[0] % 2:
        raise ValueError(f"dpo needs chosen/rejected pairs on alternate rows; got an odd batch of {logprob.shape[0]}")
    mask = response_mask.float()
    seq_logp = masked_sum(logprob.float(), mask, dim=-1)  # (2N,)
    seq_ref = masked_sum(ref_logprob.float().detach(), mask, dim=-1)  # (2N,)
    return dpo_loss(seq_logp[0::2], seq_logp[1::2], seq_ref[0::2], seq_ref[1::2], beta, label_smoothing)


def positive_sft_loss(
    logprob: torch.Tensor,
    old_logprob: torch.Tensor,
    scores: torch.Tensor,
    response_mask: torch.Tensor,
    num_positive: float | None = None,
) -> torch.Tensor:
    """The SFT term ROLL adds to the RL loss: a score- and probability-weighted NLL of the responses
    that scored above 0.

    Formula:
        per response i: l_i = -score_i * exp(sum_t m_it log pi_old,it) * sum_t m_it log pi_it, where
        exp(sum log pi_old) is the response's whole probability under the sampling policy (a
        constant weight: no gradient); L = sum_{i: score_i > 0} l_i / N_pos. N_pos is `num_positive`
        (the positive responses of the whole mini-batch, so that micro-batches add up to it), or the
        positive rows among these when None; a row whose tokens are all masked out does not count.
        0 when none scored above 0.
        The actor adds `sft_loss_coef * L` to `rl_loss_coef * (pg_loss + kl_loss_coef * kl_loss)`.
    Names:
        ROLL `sft_loss_coef` (its RLVR actor loss in its releases of 2025-05 to 2025-07, which averaged
        over the positive responses of each micro-batch; later ROLL renamed the key postive_loss_coef
        and no longer reads it). ROLL also added a truncated-importance term on negative responses
        under `use_topr_loss`; posttrain reads use_topr_loss as ROLL does now, the topr_roll policy loss.
    Paper:
        ROLL names none; the idea is imitating the samples that succeeded, as in Oh et al. 2018,
        Self-Imitation Learning, arXiv:1806.05635.
    """
    mask = response_mask.float()
    seq_logp = masked_sum(logprob.float(), mask, dim=-1)  # (B,)
    seq_prob_old = torch.exp(masked_sum(old_logprob.float().detach(), mask, dim=-1))  # (B,)
    positive = ((scores.float() > 0) & (mask.sum(-1) > 0)).float()  # (B,) rows with a token left to train
    count = float(positive.sum()) if num_positive is None else num_positive
    if count == 0:
        return seq_logp.sum() * 0.0  # keeps the graph (and the dtype) with no positive response
    return (-scores.float() * seq_prob_old * seq_logp * positive).sum() / count
