"""The critic's clipped value loss (PPO)."""

from __future__ import annotations

from typing import NamedTuple

import torch

from posttrain.algorithms.aggregation import aggregate_loss
from posttrain.algorithms.masked import masked_mean


class ValueLossOutput(NamedTuple):
    """Unpacks as `(loss, clipfrac)`."""

    loss: torch.Tensor  # () differentiable w.r.t. `values`
    clipfrac: torch.Tensor  # () share of valid tokens where the clipped term was larger


def value_loss(
    values: torch.Tensor,
    old_values: torch.Tensor,
    returns: torch.Tensor,
    response_mask: torch.Tensor,
    cliprange_value: float | None,
    loss_agg_mode: str = "token-mean",
    loss_scale_factor: float | None = None,
) -> ValueLossOutput:
    """Clipped squared error between the critic's new predictions and the returns.

    Formula:
        V_clip = clip(V, V_old - c, V_old + c);  L = 0.5 * agg(max((V - R)^2, (V_clip - R)^2));
        clipfrac = masked mean of [(V_clip - R)^2 > (V - R)^2]. cliprange_value=None: no clipping.
        `values` are the new predictions, `old_values` those recorded at rollout time. agg is
        `aggregate_loss` with `loss_agg_mode` (and `loss_scale_factor`, the constant of
        seq-mean-token-sum-norm).
    Names:
        verl `critic.cliprange_value`, `critic.loss_agg_mode`; ROLL `value_clip`; Trinity-RFT
        `critic.cliprange_value`.
    Paper:
        Schulman et al. 2017, Proximal Policy Optimization Algorithms, arXiv:1707.06347 (value clipping
        as in OpenAI baselines' ppo2).
    """
    v, v_old, ret, mask = values.float(), old_values.float().detach(), returns.float().detach(), response_mask.float()
    loss1 = (v - ret) ** 2
    if cliprange_value is None:
        loss2 = loss1
    else:
        loss2 = (torch.maximum(torch.minimum(v, v_old + cliprange_value), v_old - cliprange_value) - ret) ** 2
    loss = 0.5 * aggregate_loss(torch.maximum(loss1, loss2), mask, loss_agg_mode, loss_scale_factor=loss_scale_factor)
    return ValueLossOutput(loss, masked_mean(torch.gt(loss2, loss1).float(), mask).detach())
