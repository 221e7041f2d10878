"""A fused LM head for log-probs and entropy: `model.use_fused_kernels` (verl's fused kernels).

The default path (`posttrain.models.logprobs`) applies the head chunk by chunk but lets autograd
record each chunk's graph: the chunk's logits, their softmax and the products behind the entropy
stay alive until the backward (or are recomputed there under activation checkpointing). Here one
`torch.autograd.Function` keeps only its inputs -- hidden states (N, H), the head weight (V, H) and
the targets (N,) -- and writes its backward by hand, chunk by chunk, so at most one chunk's
(n, V) logits and their gradient exist at any time, in the forward and in the backward.

With z = a * (h W^T) the scaled logits of one token (a = logit scale / temperature), p = softmax(z)
and y the target:

    log p_y = z_y - logsumexp(z)                    d log p_y / dz = onehot(y) - p
    H       = logsumexp(z) - sum_j p_j z_j          dH / dz_j      = -p_j (z_j - sum_k p_k z_k)

so dL/dz = g_lp (onehot(y) - p) - g_H p (z - E_p[z]), and dL/dh = a dL/dz W, dL/dW = a dL/dz^T h.
Backends: "torch" runs these ops eagerly; "triton" runs the same chunk functions through
`torch.compile`, which lowers them to Triton kernels on a CUDA GPU (on a CPU it would emit C++,
so the config refuses it there).
"""

from __future__ import annotations

from typing import Callable

import torch
from torch import Tensor, nn

from posttrain.errors import ConfigError

# Elements of one chunk's logits: 2**24 fp32 values is 64 MiB; a chunk's forward and backward each
# hold two such tensors at most (the logits and their softmax, reused in place for the gradient).
FUSED_CHUNK_ELEMENTS = 2**24
BACKENDS = ("torch", "triton")


def fused_head_reason(model: nn.Module) -> str | None:
    """Why the fused head cannot stand in for `lm_head_logits` on this model (None: it can)."""
    head = model.get_output_embeddings()
    if type(head) is not nn.Linear:
        return f"the output head is a {type(head).__name__}, not a plain linear layer (a LoRA-adapted head?)"
    if head.bias is not None:
        return "the output head has a bias"
    if getattr(model.config, "final_logit_softcapping", None):
        return "the model soft-caps its logits (final_logit_softcapping), which the fused head does not apply"
    return None


def head_scale(model: nn.Module) -> float:
    """The factor some architectures multiply logits by (Cohere's logit_scale, 1 / Granite's
    logits_scaling); folded into the temperature, since both only scale z."""
    scale = 1.0
    config = model.config
    if isinstance(getattr(config, "logit_scale", None), (int, float)):
        scale *= config.logit_scale
    if isinstance(getattr(config, "logits_scaling", None), (int, float)):
        scale /= config.logits_scaling
    return scale


def _logits(h: Tensor, weight: Tensor, a: float) -> Tensor:
    """Scaled fp32 logits (n, V) of one chunk: the matmul in the compute dtype, as the model's head."""
    dtype = torch.get_autocast_dtype(h.device.type) if torch.is_autocast_enabled(h.device.type) else weight.dtype
    return (h.to(dtype) @ weight.to(dtype).t()).float() * a  # (n, V)


def _forward_chunk(h: Tensor, weight: Tensor, y: Tensor, a: float, with_entropy: bool) -> tuple[Tensor, Tensor]:
    z = _logits(h, weight, a)  # (n, V)
    lse = torch.logsumexp(z, dim=-1)  # (n,)
    logprobs = z.gather(-1, y.unsqueeze(-1)).squeeze(-1) - lse  # (n,)
    if not with_entropy:
        return logprobs, logprobs.new_zeros(logprobs.shape)
    # E_p[z] as a row-wise dot product: no (n, V) product tensor next to z and p
    entropy = lse - torch.einsum("nv,nv->n", torch.softmax(z, dim=-1), z)  # (n,)
    return logprobs, entropy


def _backward_chunk(
    h: Tensor, weight: Tensor, y: Tensor, a: float, g_lp: Tensor, g_ent: Tensor | None, with_dw: bool = True,
) -> tuple[Tensor, Tensor | None]:
    """(dL/dh (n, H), dL/dW (V, H) or None without `with_dw`) of one chunk, from the gradients of
    its log-probs and entropy.

    In place on two (n, V) buffers, z and p, so a chunk's backward peaks at two logit-sized tensors.
    """
    z = _logits(h, weight, a)  # (n, V), recomputed: the forward kept nothing of it
    p = torch.softmax(z, dim=-1)  # (n, V)
    if g_ent is not None:
        z.sub_(torch.einsum("nv,nv->n", p, z).unsqueeze(-1))  # z - E_p[z] = log p + H
        z.mul_(p).mul_(-g_ent.unsqueeze(-1))  # the entropy's part: -g_H p (z - E_p[z])
    dz = p.mul_(-g_lp.unsqueeze(-1))  # (n, V): the -p part of onehot(y) - p
    dz.scatter_add_(-1, y.unsqueeze(-1), g_lp.unsqueeze(-1))  # + g_lp at the target
    if g_ent is not None:
        dz.add_(z)
    dz.mul_(a)  # through z = a * (h W^T)
    dtype = torch.get_autocast_dtype(h.device.type) if torch.is_autocast_enabled(h.device.type) else weight.dtype
    dz = dz.to(dtype)
    dw = (dz.t() @ h.to(dtype)).to(weight.dtype) if with_dw else None  # a frozen head (LoRA) needs none
    return (dz @ weight.to(dtype)).to(h.dtype), dw


_COMPILED: dict[str, Callable] = {}


def _chunk_fns(backend: str) -> tuple[Callable, Callable]:
    if backend == "torch":
        return _forward_chunk, _backward_chunk
    if "forward" not in _COMPILED:  # compiled once per process; dynamic: chunk sizes vary
        _COMPILED["forward"] = torch.compile(_forward_chunk, dynamic=True)
        _COMPILED["backward"] = torch.compile(_backward_chunk, dynamic=True)
    return _COMPILED["forward"], _COMPILED["backward"]


class _FusedHead(torch.autograd.Function):
    @staticmethod
    def forward(ctx, hidden, weight, targets, a, with_entropy, chunk, backend):  # type: ignore[override]
        fwd, _ = _chunk_fns(backend)
        lps, ents = [], []
        for start in range(0, hidden.shape[0], chunk):
            lp, ent = fwd(hidden[start : start + chunk], weight, targets[start : start + chunk], a, with_entropy)
            lps.append(lp)
            ents.append(ent)
        ctx.save_for_backward(hidden, weight, targets)  # nothing (n, V) outlives its chunk
        ctx.settings = (a, with_entropy, chunk, backend)
        ctx.autocast = (torch.is_autocast_enabled(hidden.device.type), torch.get_autocast_dtype(hidden.device.type))
        ctx.set_materialize_grads(False)
        empty = hidden.new_zeros(0, dtype=torch.float32)
        return (torch.cat(lps) if lps else empty), (torch.cat(ents) if ents else empty)

    @staticmethod
    def backward(ctx, g_lp, g_ent):  # type: ignore[override]
        hidden, weight, targets = ctx.saved_tensors
        a, with_entropy, chunk, backend = ctx.settings
        _, bwd = _chunk_fns(backend)
        if g_lp is None:
            g_lp = hidden.new_zeros(hidden.shape[0], dtype=torch.float32)
        g_ent = g_ent if with_entropy else None
        with_dw = ctx.needs_input_grad[1]
        d_hidden = torch.zeros_like(hidden)
        d_weight = torch.zeros_like(weight) if with_dw else None
        enabled, dtype = ctx.autocast
        # the backward recomputes the logits in the forward's compute dtype
        with torch.autocast(hidden.device.type, dtype=dtype, enabled=enabled):
            for start in range(0, hidden.shape[0], chunk):
                end = start + chunk
                dh, dw = bwd(hidden[start:end], weight, targets[start:end], a, g_lp[start:end],
                             None if g_ent is None else g_ent[start:end], with_dw)
                d_hidden[start:end] = dh
                if with_dw:
                    d_weight += dw
        return d_hidden, d_weight, None, None, None, None, None


def fused_token_logprobs(
    model: nn.Module,
    hidden: Tensor,
    targets: Tensor,
    *,
    temperature: float,
    with_entropy: bool,
    backend: str = "torch",
    chunk_tokens: int | None = None,
) -> tuple[Tensor, Tensor | None]:
    """Log-probs (N,) of `targets` and entropy (N,) or None under softmax(head(hidden) / temperature),
    the same numbers as `posttrain.models.logprobs.token_logprobs_from_hidden` to float rounding."""
    if backend not in BACKENDS:
        raise ValueError(f"fused head backend must be one of {BACKENDS}, got {backend!r}")
    reason = fused_head_reason(model)  # checked at load too; a LoRA adapter on the head comes later
    if reason is not None:
        raise ConfigError(f"model.use_fused_kernels: {reason}; the fused head reproduces a plain linear head only, "
                          "so set use_fused_kernels to false (or keep the output head out of model.target_modules)")
    weight = model.get_output_embeddings().weight  # (V, H)
    chunk = chunk_tokens or max(1, FUSED_CHUNK_ELEMENTS // weight.shape[0])
    a = head_scale(model) / temperature
    logprobs, entropy = _FusedHead.apply(hidden, weight, targets, a, with_entropy, chunk, backend)
    return logprobs, (entropy if with_entropy else None)
