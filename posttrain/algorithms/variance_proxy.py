"""How noisy the policy gradient of a batch is, estimated from quantities the step already has.

For a token y sampled from p = softmax(z), the gradient of log p_y with respect to the logits z is
onehot(y) - p, whose squared norm is ||s||^2 = 1 - 2 p_y + sum_v p_v^2. Summed over a response's
tokens it is W = sum_t (1 - 2 pi_t + sum_v pi_tv^2), a proxy of how large that response's score
gradient is; a response's share of the policy gradient then has squared norm about A^2 W. verl logs
these under `variance_proxy/` when `actor.calculate_sum_pi_squared` is on; so does posttrain.
"""

from __future__ import annotations

import torch

from posttrain.algorithms.masked import masked_sum


def variance_proxy_metrics(
    old_logprobs: torch.Tensor,
    sum_pi_squared: torch.Tensor,
    advantages: torch.Tensor,
    response_mask: torch.Tensor,
    grad_norm: float | None = None,
    rollout_is_weights: torch.Tensor | None = None,
) -> dict[str, float]:
    """verl's variance-proxy metrics of one batch: all (B, T) tensors; `grad_norm` is the actor's.

    Formula:
        w_t = 1 - 2 exp(old_logprob_t) + sum_pi_squared_t; per response W = sum_t m_t w_t (clamped at 0
        where it enters a product) and A = the mean of its token advantages;
        expected_w = mean W, expected_a_squared = mean A^2;
        proxy2_total_power = mean(A^2 W) (with rollout importance weights rho: mean(rhobar^2 A^2 W), rhobar
        the response's mean weight, and expected_w averages sum_t m_t rho_t^2 w_t);
        proxy1_signal_strength = grad_norm^2 (0 without it);
        proxy3_pure_noise = max(0, (proxy2 - proxy1) / (B - 1)) (0 without grad_norm or with B = 1).
    """
    mask = response_mask.float()
    w = 1.0 - 2.0 * torch.exp(old_logprobs.float()) + sum_pi_squared.float()  # (B, T)
    adv = masked_sum(advantages.float(), mask, dim=-1) / mask.sum(-1).clamp(min=1)  # (B,)
    if rollout_is_weights is None:
        w_seq = masked_sum(w, mask, dim=-1)  # (B,)
        total_power = (adv**2 * w_seq.clamp(min=0.0)).mean()
    else:
        rho = rollout_is_weights.float()
        w_seq = masked_sum(w * rho**2, mask, dim=-1)  # (B,) the importance-scaled W verl averages
        rho_bar = masked_sum(rho, mask, dim=-1) / mask.sum(-1).clamp(min=1)  # (B,)
        total_power = (rho_bar**2 * adv**2 * masked_sum(w, mask, dim=-1).clamp(min=0.0)).mean()
    signal = grad_norm**2 if grad_norm is not None else None
    batch = adv.shape[0]
    noise = max(0.0, (float(total_power) - signal) / (batch - 1)) if signal is not None and batch > 1 else 0.0
    return {
        "variance_proxy/proxy1_signal_strength": float(signal) if signal is not None else 0.0,
        "variance_proxy/proxy2_total_power": float(total_power),
        "variance_proxy/proxy3_pure_noise": noise,
        "variance_proxy/expected_a_squared": float((adv**2).mean()),
        "variance_proxy/expected_w": float(w_seq.mean()),
    }
