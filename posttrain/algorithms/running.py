"""Running mean and standard deviation of a stream of rewards, with savable state."""

from __future__ import annotations

import math
from typing import Any

import torch


class RunningMoments:
    """Streaming mean/std that merges each batch's moments (Chan et al. parallel variance update).

    Formula:
        For a batch with n values, mean m_b and population variance v_b, and a total count N:
        delta = m_b - mean;  mean += delta n / (N + n);
        var = (var N + delta^2 N n / (N + n) + v_b n) / (N + n);  std = sqrt(var (N + n) / (N + n - 1)).
        Starts at mean 0, var 1, count 1e-24 (so the first batch sets the moments), as ROLL does.
    Names:
        ROLL `reward_norm: running` (`norm_mean_type`/`norm_std_type: running`); verl has none.
    Paper:
        Chan, Golub & LeVeque 1979, Updating Formulae and a Pairwise Algorithm for Computing Sample
        Variances; the stable-baselines3 `RunningMeanStd` that ROLL adapts.
    """

    def __init__(self) -> None:
        self.mean = 0.0
        self.var = 1.0
        self.std = 1.0
        self.count = 1e-24

    @torch.no_grad()
    def update(self, xs: torch.Tensor) -> tuple[float, float]:
        """Fold a batch in; returns that batch's own (mean, unbiased std)."""
        x = xs.detach().to(torch.float64).reshape(-1)
        n = x.numel()
        if n == 0:
            return 0.0, 0.0
        batch_mean = float(x.mean())
        batch_var = float(x.var(unbiased=False))
        delta = batch_mean - self.mean
        total = self.count + n
        old_sum = self.var * self.count + delta**2 * self.count * n / total
        self.mean += delta * n / total
        self.var = (old_sum + batch_var * n) / total
        self.std = math.sqrt(self.var * total / (total - 1)) if total > 1 else 1.0
        self.count = total
        batch_std = math.sqrt(batch_var * n / (n - 1)) if n > 1 else 0.0
        return batch_mean, batch_std

    def state_dict(self) -> dict[str, Any]:
        return {"mean": self.mean, "var": self.var, "std": self.std, "count": self.count}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.mean, self.var = float(state["mean"]), float(state["var"])
        self.std, self.count = float(state["std"]), float(state["count"])
