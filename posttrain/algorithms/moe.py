"""The mixture-of-experts router's load-balancing (auxiliary) loss, from per-layer router logits."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch


def _real_tokens(
    router_logits: Sequence[torch.Tensor], token_mask: torch.Tensor, reduce: Callable[[torch.Tensor], torch.Tensor] | None,
) -> tuple[torch.Tensor, torch.Tensor, Sequence[torch.Tensor]]:
    """(the (N,) float mask, the real-token count T, the layers to sum over): no layer when there is
    no real token (the loss is then 0); a layer whose logits do not cover the N slots is a ValueError."""
    mask = token_mask.reshape(-1).float()  # (N,)
    tokens = mask.sum() if reduce is None else reduce(mask.sum())
    for logits in router_logits:
        if logits.dim() != 2 or logits.shape[0] != mask.shape[0]:
            raise ValueError(f"router logits {tuple(logits.shape)} do not match {mask.shape[0]} token slots")
    return mask, tokens, (router_logits if float(tokens) > 0.0 else ())


def load_balancing_loss(
    router_logits: Sequence[torch.Tensor],
    token_mask: torch.Tensor,
    top_k: int,
    reduce: Callable[[torch.Tensor], torch.Tensor] | None = None,
) -> torch.Tensor:
    """Switch-Transformer load-balancing loss of a micro-batch, summed over the MoE layers.

    `router_logits`: one (N, E) tensor per MoE layer, the router's logits of the same N token slots
    in the same order (what Hugging Face MoE models return with ``output_router_logits=True``);
    `token_mask`: (N,), 1 on real tokens and 0 on padding; `top_k`: experts each token is sent to.
    `reduce` (a sum over the processes that hold the other tokens of the same sequences, as
    Megatron's context-parallel group) makes T and the counts those of all their tokens: each
    process then returns its tokens' share, and the shares add up to the loss of all of them.

    Formula:
        per layer, with p_x = softmax(z_x) over the E experts (float32), r_x = the indicator of the
        top_k experts of p_x, and T = sum_x m_x real tokens:
            f_i = (1 / (T k)) sum_x m_x r_xi        (share of the routed slots expert i gets)
            P_i = (1 / T) sum_x m_x p_xi            (mean router probability of expert i)
            L = E sum_i f_i P_i = E / (k T^2) sum_i (sum_x m_x r_xi)(sum_x m_x p_xi)
        summed over layers; 1 per layer when the routing is perfectly balanced. The gradient flows
        through P only (the top-k indicator is a count). Megatron-core attaches each layer's term
        to the layer's output, so its backward adds the layers' gradients: the sum.
    Names:
        Megatron-core `moe_router_load_balancing_type: aux_loss` with `moe_aux_loss_coeff`
        (switch_load_balancing_loss_func, softmax score function); ROLL megatron_train's
        `moe_aux_loss_coeff` / `model_args.moe_aux_loss_coef` / the model's `router_aux_loss_coef`;
        posttrain `actor.moe_aux_loss_coef`.
    Paper:
        Fedus, Zoph & Shazeer 2021, Switch Transformers, arXiv:2101.03961 (eq. 4-6, extended to
        top-k by dividing the counts by k as Megatron-core does).
    Deviation:
        padding never counts: Megatron-core counts every slot it is given unless it gets a padding
        mask, so ROLL's unpacked (padded) micro-batches count pad tokens too; with sequence packing
        (no padding) the two agree.
    """
    if top_k < 1:
        raise ValueError(f"top_k must be >= 1, got {top_k}")
    mask, tokens, layers = _real_tokens(router_logits, token_mask, reduce)
    total = mask.new_zeros(())
    for logits in layers:
        experts = logits.shape[1]
        probs = torch.softmax(logits.float(), dim=-1)  # (N, E)
        chosen = torch.topk(probs, k=min(top_k, experts), dim=-1).indices  # (N, k)
        routed = torch.zeros_like(probs).scatter_(1, chosen, 1.0)  # (N, E) 0/1
        counts = (routed * mask[:, None]).sum(0)  # (E,) real tokens sent to each expert
        counts = counts if reduce is None else reduce(counts)  # a count: no gradient to carry
        prob_sums = (probs * mask[:, None]).sum(0)  # (E,) summed router probabilities
        total = total + (counts * prob_sums).sum() * experts / (top_k * tokens * tokens)
    return total


def router_z_loss(
    router_logits: Sequence[torch.Tensor],
    token_mask: torch.Tensor,
    reduce: Callable[[torch.Tensor], torch.Tensor] | None = None,
) -> torch.Tensor:
    """Router z-loss of a micro-batch, summed over the MoE layers: it keeps the router's logits small.

    `router_logits`, `token_mask` and `reduce` as in `load_balancing_loss`: with `reduce` the token
    count is that of all the processes holding the same sequences, so each returns its tokens' share.

    Formula:
        per layer, with z_x the (E,) router logits of token x (float32) and T = sum_x m_x real tokens:
            L_z = (1 / T) sum_x m_x (log sum_i exp(z_xi))^2
        summed over layers (Megatron-core attaches each layer's term to that layer's output).
    Names:
        Megatron-core `moe_z_loss_coeff` (z_loss_func: the mean over the layer's tokens of the
        squared logsumexp); verl's `megatron.override_transformer_config.moe_z_loss_coeff`;
        posttrain `actor.moe_z_loss_coef`.
    Paper:
        Zoph et al. 2022, ST-MoE: Designing Stable and Transferable Sparse Expert Models,
        arXiv:2202.08906 (eq. 5, the router z-loss).
    Deviation:
        padding never counts: Megatron-core takes the mean over every slot of its (packed, so
        unpadded in verl's remove-padding path) input.
    """
    mask, tokens, layers = _real_tokens(router_logits, token_mask, reduce)
    total = mask.new_zeros(())
    for logits in layers:
        # squared log-partition per token: 0 gradient on padding through the mask
        total = total + (torch.logsumexp(logits.float(), dim=-1).square() * mask).sum() / tokens
    return total
