"""BOTS's online estimate of each task's pass rate: a Beta posterior per task, updated from the
tasks a step trained on (explicit evidence) and interpolated for all the others (implicit evidence).

Paper: Shen et al., "BOTS: A Unified Framework for Bayesian Online Task Selection in LLM
Reinforcement Finetuning" (arXiv:2510.26374), as Trinity-RFT implements it
(trinity/buffer/selector/difficulty_estimator.py, InterpolationBetaPREstimator), number for number.

Each task i holds Beta(alpha_i, beta_i), starting at Beta(1, 1). A step that ran tasks R with mean
rewards r_j (j in R) updates every task:

    capability c   = (mean_R r - mean_R f0) / (mean_R f1 - mean_R f0 + 1e-6)   (c <- 0.9 c_old + 0.1 c after the first)
    implicit  p~_i = clip(f0_i + c (f1_i - f0_i), 0, 1), replaced by r_i for i in R
    explicit  s_i  = m r_i,  f_i = m (1 - r_i) for i in R, else 0
    alpha_i <- (1 - lamb) alpha_i + lamb + (1 - rho) s_i + rho m p~_i
    beta_i  <- (1 - lamb) beta_i  + lamb + (1 - rho) f_i + rho m (1 - p~_i)

where f0, f1 are the two feature columns (pass rates of a weaker and a stronger reference model),
so c places the policy between them. The `+ lamb` term (absent from the paper's formula) keeps a
task that gets no evidence drifting back towards Beta(1, 1), as Trinity-RFT's code does. With
`adaptive_rho`, rho halves whenever the interpolation's mean absolute error on R is >= 0.25.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

CAP_DISCOUNT = 0.9  # Trinity-RFT's cap_coef_update_discount (not configurable there)


@dataclass
class BetaState:
    """The posterior of every task and the two running numbers the update keeps."""

    alphas: np.ndarray  # (N,) float64
    betas: np.ndarray  # (N,) float64
    cap_coef: float | None  # the running capability estimate c; None before the first update
    rho: float  # the implicit-evidence weight (halved by adaptive_rho)

    @classmethod
    def prior(cls, n: int, rho: float) -> "BetaState":
        return cls(np.ones(n, dtype=np.float64), np.ones(n, dtype=np.float64), None, rho)

    def to_json(self) -> dict[str, Any]:
        # floats round-trip exactly through JSON (repr), so a restored posterior is the same bits
        return {"alphas": self.alphas.tolist(), "betas": self.betas.tolist(), "cap_coef": self.cap_coef, "rho": self.rho}

    @classmethod
    def from_json(cls, state: dict[str, Any]) -> "BetaState":
        cap = state["cap_coef"]
        return cls(np.asarray(state["alphas"], dtype=np.float64), np.asarray(state["betas"], dtype=np.float64),
                   None if cap is None else float(cap), float(state["rho"]))


def bots_update(state: BetaState, features: np.ndarray, indices: Sequence[int], pass_rates: Sequence[float], *,
                m: int, lamb: float, adaptive_rho: bool) -> BetaState:
    """The posterior after one step's evidence (module docstring); `features` is (N, 2), `indices`
    the step's distinct tasks and `pass_rates` their mean rewards. Returns a new state.

    >>> s = bots_update(BetaState.prior(2, 0.5), np.array([[0.0, 1.0], [0.5, 0.5]]), [0], [1.0], m=2, lamb=0.5, adaptive_rho=False)
    >>> s.alphas.tolist(), s.betas.tolist(), round(s.cap_coef, 6)
    ([3.0, 1.5], [1.0, 1.5], 0.999999)
    """
    rows = np.asarray(indices, dtype=np.int64)  # (R,)
    observed = np.asarray(pass_rates, dtype=np.float64)  # (R,)
    anchors = features[rows].mean(axis=0)  # (2,) the reference models' mean pass rates on R
    cap = (observed.mean() - anchors[0]) / (anchors[1] - anchors[0] + 1e-6)
    cap = cap if state.cap_coef is None else CAP_DISCOUNT * state.cap_coef + (1 - CAP_DISCOUNT) * cap
    n = len(state.alphas)
    s_bar, f_bar = np.zeros(n), np.zeros(n)  # (N,) explicit successes / failures, m trials per task
    s_bar[rows] = observed * m
    f_bar[rows] = (1 - observed) * m
    p_tilde = np.clip((features[:, 1] - features[:, 0]) * cap + features[:, 0], 0, 1)  # (N,)
    rho = state.rho
    if adaptive_rho and np.mean(np.abs(p_tilde[rows] - observed)) >= 0.25:
        rho = rho * 0.5  # the interpolation misses the observed rates: trust it less from now on
    p_tilde[rows] = observed  # a task with its own evidence is interpolated as itself
    alphas = (1 - lamb) * state.alphas + lamb + (1 - rho) * s_bar + rho * p_tilde * m
    betas = (1 - lamb) * state.betas + lamb + (1 - rho) * f_bar + rho * (1 - p_tilde) * m
    return BetaState(alphas, betas, float(cap), rho)


def predicted_pass_rates(state: BetaState, rng: np.random.Generator, do_sample: bool) -> np.ndarray:
    """(N,) each task's pass rate: the posterior mean, or one draw from it (Thompson sampling)."""
    if do_sample:
        return rng.beta(state.alphas, state.betas)
    return state.alphas / (state.alphas + state.betas)
