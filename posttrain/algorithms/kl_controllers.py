"""Controllers for the KL coefficient beta of the KL-in-reward penalty."""

from __future__ import annotations

from typing import Any


class FixedKLController:
    """A constant beta; `update` does nothing.

    Formula:
        beta_t = kl_coef.
    Names:
        verl `algorithm.kl_ctrl.type=fixed` (`kl_coef`); ROLL `kl_ctrl`/`init_kl_coef` when not adaptive;
        Trinity-RFT `kl_penalty_fn` args `kl_coef`.
    Paper:
        Ziegler et al. 2019, Fine-Tuning Language Models from Human Preferences, arXiv:1909.08593.
    """

    def __init__(self, kl_coef: float):
        self.value = float(kl_coef)

    def update(self, current_kl: float, n_steps: int) -> None:
        """No-op: the coefficient stays fixed."""

    def state_dict(self) -> dict[str, Any]:
        return {"value": self.value}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.value = float(state["value"])


class AdaptiveKLController:
    """Proportional controller steering the measured KL towards `target_kl`.

    Formula:
        e = clip(KL / target - 1, -0.2, 0.2);  beta <- beta * (1 + e * n_steps / horizon).
    Names:
        verl `algorithm.kl_ctrl.type=adaptive` (`kl_coef`, `target_kl`, `horizon`); ROLL `target_kl`,
        `kl_horizon`, `init_kl_coef`.
    Paper:
        Ziegler et al. 2019, Fine-Tuning Language Models from Human Preferences, arXiv:1909.08593.
    """

    def __init__(self, init_kl_coef: float, target_kl: float, horizon: int):
        if horizon <= 0:
            raise ValueError(f"horizon must be > 0, got {horizon}")
        if target_kl <= 0:
            raise ValueError(f"target_kl must be > 0, got {target_kl}")
        self.value = float(init_kl_coef)
        self.target = float(target_kl)
        self.horizon = int(horizon)

    def update(self, current_kl: float, n_steps: int) -> None:
        """Move beta by at most 20% x n_steps / horizon towards the target."""
        error = min(max(float(current_kl) / self.target - 1.0, -0.2), 0.2)
        self.value *= 1.0 + error * n_steps / self.horizon

    def state_dict(self) -> dict[str, Any]:
        return {"value": self.value}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.value = float(state["value"])
