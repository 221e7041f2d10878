"""PF-PPO: resample the batch towards responses whose reward is more reliable."""

from __future__ import annotations

import torch

PF_PPO_METHODS = ("pow", "max_min", "max_random")


@torch.no_grad()
def pf_ppo_weights(scores: torch.Tensor, method: str = "pow", weight_pow: float = 2.0) -> torch.Tensor:
    """Sampling weights per response from its score, shape (B,).

    Formula:
        pow: |s|^weight_pow;  max_min: 1 for the batch's max and min scores, else 0;
        max_random: 0.4 for the max score, else 0.1;  then w = max(w + 1e-8, 1e-8).
    Names:
        verl `algorithm.use_pf_ppo`, `algorithm.pf_ppo.reweight_method`, `algorithm.pf_ppo.weight_pow`.
    Paper:
        Shen & Zhang 2024, Policy Filtration in RLHF to Fine-Tune LLM for Code Generation (PF-PPO),
        arXiv:2409.06957.
    """
    s = scores.float()
    if method == "pow":
        w = torch.pow(s.abs(), weight_pow)
    elif method == "max_min":
        w = ((s == s.max()) | (s == s.min())).float()
    elif method == "max_random":
        w = torch.where(s == s.max(), 0.4, 0.1)
    else:
        raise ValueError(f"unknown PF-PPO reweight method {method!r}; valid: {', '.join(PF_PPO_METHODS)}")
    return torch.clamp(w + 1e-8, min=1e-8)


@torch.no_grad()
def pf_ppo_resample(
    scores: torch.Tensor, method: str = "pow", weight_pow: float = 2.0, generator: torch.Generator | None = None
) -> torch.Tensor:
    """Indices (B,) drawn with replacement in proportion to `pf_ppo_weights`; index the batch with them.

    Formula:
        idx ~ Multinomial(w / sum w), B draws with replacement.
    Names:
        verl `algorithm.use_pf_ppo` (`compute_pf_ppo_reweight_data`).
    Paper:
        Shen & Zhang 2024, PF-PPO, arXiv:2409.06957.
    """
    w = pf_ppo_weights(scores, method, weight_pow)
    return torch.multinomial(w, w.shape[0], replacement=True, generator=generator)
