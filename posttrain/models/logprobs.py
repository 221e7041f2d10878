"""Per-token log-probs and entropy of response tokens: the one computation actor, reference and
rollout engine share, so that their numbers agree to float rounding.

Memory is the point of the design. A full LM forward materialises (B, S, V) logits; for a 150k
vocabulary that dwarfs the model. Here the decoder body runs once, the LM head is applied only to
hidden states that predict real response tokens, and in chunks of `chunk_tokens` rows, so at most
(chunk_tokens, V) fp32 logits exist at any time. With gradients and more than one chunk, each chunk
is recomputed during backward (activation checkpointing) instead of keeping every chunk's logits
alive until then. That trades time for memory: on a head-dominated toy (hidden 128, vocab 32k,
4,096 tokens, CPU) forward+backward took 1.4-1.6x as long as without recomputation; on real models
the decoder body dominates. `model.use_fused_kernels` swaps this for a hand-written backward
(`posttrain.models.fused_head`) that keeps no chunk's graph at all; `actor.entropy_checkpointing`
recomputes the entropy's softmax in the backward instead of storing it.

Log-probs are of the distribution the sampler used: softmax(logits / temperature), with the
logsumexp taken in fp32 whatever the model's dtype.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import torch
from torch import Tensor, nn
from torch.utils.checkpoint import checkpoint

from posttrain.models.fused_head import fused_token_logprobs
from posttrain.models.lean_forward import lean_forward_reason, lean_hidden_states
from posttrain.models.moe import note_tokens
from posttrain.models.router_replay import RouteLayout, note_layout
from posttrain.models.packing import pack_batch, packing_supported
from posttrain.models.positions import concat_prompt_response
from posttrain.models.shared_prompt import mask_for_kernel, pack_shared_prompts, shared_prompt_supported
from posttrain.models.ulysses import current_group, split_head, ulysses_hidden_states
from posttrain.models.vision import has_images, vision_hidden_states
from posttrain.records import RolloutBatch, VisionInputs

# Cap on one chunk's logits, in elements: 2**26 fp32 values is 256 MiB, a few copies of which
# (logits, probabilities, their gradients) stay well within any accelerator.
MAX_CHUNK_ELEMENTS = 2**26


@dataclass(frozen=True)
class HeadKernel:
    """How the LM head turns hidden states into log-probs and entropy (the model section's kernel flags)."""

    fused: str | None = None  # model.use_fused_kernels: the backend of `posttrain.models.fused_head`, None: autograd
    entropy_checkpointing: bool = False  # actor.entropy_checkpointing: recompute the entropy's ops in backward


PLAIN_HEAD = HeadKernel()


@dataclass
class TokenLogProbs:
    """Result of `response_logprobs`; zeros on padded response positions."""

    logprobs: Tensor  # (B, T) fp32
    entropy: Tensor | None  # (B, T) fp32, None unless asked for
    gathered: Tensor | None = None  # (B, T, K) fp32 log-probs of the `gather_ids` tokens, None unless asked for


def lm_head_logits(model: nn.Module, hidden: Tensor) -> Tensor:
    """Apply a causal LM's output head to hidden states and return fp32 logits (..., V).

    The head is matmul'd in the model's dtype (as HF does) and upcast before any softmax. Final
    logit transforms some architectures apply in their `ForCausalLM.forward` are repeated here;
    `check_head_matches` catches one we do not know about.
    """
    logits = model.get_output_embeddings()(hidden).float()  # (..., V)
    config = model.config
    scale = getattr(config, "logit_scale", None)  # Cohere multiplies
    if isinstance(scale, (int, float)):
        logits = logits * scale
    divisor = getattr(config, "logits_scaling", None)  # Granite divides
    if isinstance(divisor, (int, float)):
        logits = logits / divisor
    cap = getattr(config, "final_logit_softcapping", None)  # Gemma 2/3
    if cap:
        logits = torch.tanh(logits / cap) * cap
    return logits


@torch.no_grad()
def check_head_matches(model: nn.Module, atol: float = 1e-4) -> None:
    """Raise if body + `lm_head_logits` disagrees with the model's own forward on a tiny input.

    Why: we bypass `model(...)` to avoid full-sequence logits, so an architecture with an extra
    logit transform would silently get wrong log-probs. One 4-token forward rules that out.
    """
    device = next(model.parameters()).device
    ids = torch.arange(1, 5, device=device).unsqueeze(0) % getattr(model.config, "get_text_config", lambda: model.config)().vocab_size  # (1, 4)
    reference = model(input_ids=ids).logits.float()  # (1, 4, V)
    hidden = model.get_decoder()(input_ids=ids).last_hidden_state  # (1, 4, H)
    ours = lm_head_logits(model, hidden)
    err = (ours - reference).abs().max().item()
    if err > atol * max(1.0, reference.abs().max().item()):
        raise NotImplementedError(
            f"{type(model).__name__}: logits from decoder + lm_head differ from model(...) by {err:.3g}; "
            "its forward applies a logit transform that posttrain.models.lm_head_logits lacks"
        )


def head_chunk_rows(model: nn.Module, chunk_tokens: int | None = None) -> int:
    """Hidden states per chunk of the LM head: `chunk_tokens`, else as many as keep one chunk's
    logits within `MAX_CHUNK_ELEMENTS` (at least one)."""
    return chunk_tokens or max(1, MAX_CHUNK_ELEMENTS // model.get_output_embeddings().weight.shape[0])


def entropy_from_scaled(scaled: Tensor, lse: Tensor) -> Tensor:
    """Token entropy (n,) from scaled logits (n, V) and their logsumexp (n,).

    H = -sum p log p = lse - sum p * scaled, which avoids a second (n, V) log-prob tensor.
    """
    return lse - (torch.softmax(scaled, dim=-1) * scaled).sum(-1)  # (n,)


def _chunk_logprobs(
    model: nn.Module, hidden: Tensor, targets: Tensor, temperature: float, with_entropy: bool, entropy_checkpointing: bool = False,
    gather_ids: Tensor | None = None,
) -> tuple[Tensor, Tensor, Tensor]:
    scaled = lm_head_logits(model, hidden) / temperature  # (n, V) fp32
    lse = torch.logsumexp(scaled, dim=-1)  # (n,)
    logprobs = scaled.gather(-1, targets.unsqueeze(-1)).squeeze(-1) - lse  # (n,)
    # log-probs of other tokens of the same distribution (n, K): the top-k distillation term's
    gathered = scaled.gather(-1, gather_ids) - lse.unsqueeze(-1) if gather_ids is not None else logprobs.new_zeros(())
    if not with_entropy:
        return logprobs, logprobs.new_zeros(()), gathered
    if entropy_checkpointing and torch.is_grad_enabled() and scaled.requires_grad:
        # verl's entropy_checkpointing: keep only `scaled` and `lse` (kept anyway) for the backward
        # and recompute the softmax and its product there, instead of storing two more (n, V) tensors.
        return logprobs, checkpoint(entropy_from_scaled, scaled, lse, use_reentrant=False), gathered
    return logprobs, entropy_from_scaled(scaled, lse), gathered


def token_logprobs_from_hidden(
    model: nn.Module,
    hidden: Tensor,
    targets: Tensor,
    *,
    temperature: float = 1.0,
    with_entropy: bool = False,
    chunk_tokens: int | None = None,
    kernel: HeadKernel = PLAIN_HEAD,
    gather_ids: Tensor | None = None,
) -> tuple[Tensor, Tensor | None] | tuple[Tensor, Tensor | None, Tensor]:
    """Log-prob of `targets` (N,) under the head applied to `hidden` (N, H), chunk by chunk.

    Returns `(logprobs (N,), entropy (N,) or None)`, both fp32. `kernel.fused` hands the whole
    computation to the fused head (`posttrain.models.fused_head`), which needs no recomputation
    of its own and ignores `kernel.entropy_checkpointing` (it stores nothing the size of the logits).
    `gather_ids` (N, K): also the log-probs of those tokens, a third result (N, K) fp32 (neither
    the fused head nor sequence parallelism computes them).
    """
    if temperature <= 0:
        raise ValueError(f"temperature must be > 0, got {temperature}")
    sp = current_group()
    if gather_ids is not None and (sp is not None or kernel.fused is not None):
        raise NotImplementedError("log-probs of further tokens (actor.topk_kl) need the plain LM head of one process: "
                                  "no model.use_fused_kernels, no Ulysses sequence parallelism")
    if sp is not None:  # the sequence-parallel ranks score a share of the tokens each (posttrain.models.ulysses)
        return split_head(hidden, targets, sp, lambda h, y: _head_logprobs(
            model, h, y, temperature=temperature, with_entropy=with_entropy, chunk_tokens=chunk_tokens, kernel=kernel))
    return _head_logprobs(
        model, hidden, targets, temperature=temperature, with_entropy=with_entropy, chunk_tokens=chunk_tokens, kernel=kernel,
        gather_ids=gather_ids,
    )


def _head_logprobs(
    model: nn.Module, hidden: Tensor, targets: Tensor, *, temperature: float, with_entropy: bool,
    chunk_tokens: int | None, kernel: HeadKernel, gather_ids: Tensor | None = None,
) -> tuple[Tensor, Tensor | None] | tuple[Tensor, Tensor | None, Tensor]:
    """`token_logprobs_from_hidden` on this process's tokens."""
    if kernel.fused is not None:
        return fused_token_logprobs(
            model, hidden, targets, temperature=temperature, with_entropy=with_entropy, backend=kernel.fused,
            chunk_tokens=chunk_tokens,
        )
    step = head_chunk_rows(model, chunk_tokens)
    # Recompute chunks in backward only when keeping them would exceed one chunk's memory: below
    # that, recomputing would cost an extra head matmul and softmax for no memory saved.
    recompute = torch.is_grad_enabled() and hidden.requires_grad and hidden.shape[0] > step
    lps, ents, gathers = [], [], []
    # At least one (possibly empty) chunk: with no token to score the result is still a function of
    # the head and of `hidden`, so a backward through it runs (zero gradients), as it must on a
    # sharded model, where every rank's backward takes part in the gradient reduction.
    for start in range(0, max(hidden.shape[0], 1), step):
        h, y = hidden[start : start + step], targets[start : start + step]
        g = gather_ids[start : start + step] if gather_ids is not None else None
        if recompute:
            lp, ent, gathered = checkpoint(
                _chunk_logprobs, model, h, y, temperature, with_entropy, kernel.entropy_checkpointing, g, use_reentrant=False
            )
        else:
            lp, ent, gathered = _chunk_logprobs(model, h, y, temperature, with_entropy, kernel.entropy_checkpointing, g)
        lps.append(lp)
        ents.append(ent)
        gathers.append(gathered)
    out = torch.cat(lps), (torch.cat(ents) if with_entropy else None)
    return out if gather_ids is None else (*out, torch.cat(gathers))


def _decoder_hidden(model: nn.Module, input_ids: Tensor, position_ids: Tensor, attention_mask: Tensor | None) -> Tensor:
    """Final-norm decoder states (K, W, H): split over the sequence-parallel group when the context
    names one (`posttrain.models.ulysses`), else the lean forward where it is exact, else HF's decoder."""
    sp = current_group()
    if sp is not None:
        return ulysses_hidden_states(model, input_ids, position_ids, attention_mask, sp)
    if lean_forward_reason(model) is None:
        return lean_hidden_states(model, input_ids, position_ids, attention_mask)
    out = model.get_decoder()(
        input_ids=input_ids, position_ids=position_ids, attention_mask=attention_mask, use_cache=False
    )
    return out.last_hidden_state


def response_hidden_states(
    model: nn.Module,
    prompt_ids: Tensor,
    prompt_mask: Tensor,
    response_ids: Tensor,
    response_mask: Tensor,
    *,
    pack: bool = True,
    share_prompt: bool = False,
    vision: Sequence[VisionInputs | None] | None = None,
) -> Tensor:
    """Decoder hidden states at the positions that predict each response token: (B, T, H).

    Token t of the response sits at column P + t of the full sequence and is predicted by column
    P + t - 1. With `pack` (and a model that supports it, see `posttrain.models.packing`) the
    real tokens of several rows share one row of the forward pass, so no padding is computed;
    otherwise columns that are padding in every row are cut before the forward and the result is
    padded back. Positions of padded response tokens hold zeros (packed) or unused states. Critics
    put their value head on the same positions (the value of the state before token t).
    `share_prompt` computes each group's prompt once (`posttrain.models.shared_prompt`).
    `vision`: the rows' images (a vision-language model); a batch with any image runs the padded
    forward of `posttrain.models.vision`, neither packed nor sharing prompts.
    """
    B, P = prompt_ids.shape
    T = response_ids.shape[1]
    if has_images(vision):
        share_prompt = pack = False  # see posttrain.models.vision: M-RoPE positions need the padded rows
    packed, mask = None, None
    # Shared-prompt rows need a 4-D mask only HF's decoder takes, which cannot split a sequence.
    if share_prompt and current_group() is None and shared_prompt_supported(model):
        packed = pack_shared_prompts(prompt_ids, prompt_mask, response_ids, response_mask)
        if packed is not None:
            mask = mask_for_kernel(model, packed.attention_mask, next(model.parameters()).dtype)
    if packed is None and pack:
        packed = pack_batch(prompt_ids, prompt_mask, response_ids, response_mask)
        packed = packed if packed is not None and packing_supported(model) else None
    if packed is not None:
        if packed.slots is not None:
            note_tokens(packed.slots)  # an open router capture counts only these (posttrain.models.moe)
        if packed.token_rows is not None:  # an open routing record/replay block (posttrain.models.router_replay)
            note_layout(RouteLayout(packed.token_rows.reshape(-1), packed.token_positions.reshape(-1)))
        if mask is None:
            last_hidden = _decoder_hidden(model, packed.input_ids, packed.position_ids, None)
        else:  # shared-prompt rows: a 4-D mask the lean forward does not take
            last_hidden = model.get_decoder()(
                input_ids=packed.input_ids, position_ids=packed.position_ids, attention_mask=mask, use_cache=False
            ).last_hidden_state
        flat = last_hidden.reshape(-1, last_hidden.shape[-1])  # (K * W, H)
        hidden = flat[packed.gather]  # (B, T, H)
        return hidden * packed.valid.unsqueeze(-1).to(hidden.dtype)
    used_p = prompt_mask.sum(0) > 0
    first = int(used_p.float().argmax()) if bool(used_p.any()) else P - 1
    used_t = (response_mask.sum(0) > 0).nonzero()
    last = int(used_t.max()) + 1 if used_t.numel() else 1
    input_ids, attention_mask, position_ids = concat_prompt_response(
        prompt_ids[:, first:], prompt_mask[:, first:], response_ids[:, :last], response_mask[:, :last]
    )  # (B, S') each
    note_tokens(attention_mask > 0)
    note_layout(RouteLayout.of_padded(attention_mask))
    if has_images(vision):
        last_hidden = vision_hidden_states(model, input_ids, attention_mask, vision, P - first)  # (B, S', H)
    else:
        last_hidden = _decoder_hidden(model, input_ids, position_ids, attention_mask)  # (B, S', H)
    p_kept = P - first
    hidden = last_hidden[:, p_kept - 1 : p_kept - 1 + last]  # (B, T', H)
    if last < T:
        hidden = nn.functional.pad(hidden, (0, 0, 0, T - last))  # (B, T, H)
    return hidden


def response_logprobs(
    model: nn.Module,
    prompt_ids: Tensor,
    prompt_mask: Tensor,
    response_ids: Tensor,
    response_mask: Tensor,
    *,
    temperature: float = 1.0,
    with_entropy: bool = False,
    chunk_tokens: int | None = None,
    share_prompt: bool = False,
    pack: bool = True,
    kernel: HeadKernel = PLAIN_HEAD,
    vision: Sequence[VisionInputs | None] | None = None,
    gather_ids: Tensor | None = None,
) -> TokenLogProbs:
    """log softmax(logits / temperature) of each real response token, and optionally the entropy.

    Works with gradients (actor update) and under `torch.inference_mode` (old/ref log-probs).
    Padded response positions hold 0 in both outputs. `share_prompt`, `pack`: see `response_hidden_states`;
    `kernel`: how the head runs (`HeadKernel`); `vision`: the rows' images (`response_hidden_states`).
    `gather_ids` (B, T, K): also the log-probs of those tokens at each response position, in `gathered`
    (0 on padding): the distribution the token at that position was drawn from, scored at other tokens.
    """
    hidden = response_hidden_states(
        model, prompt_ids, prompt_mask, response_ids, response_mask, share_prompt=share_prompt, pack=pack, vision=vision,
    )  # (B, T, H)
    real = response_mask > 0  # (B, T)
    scored = token_logprobs_from_hidden(
        model,
        hidden[real],  # (N, H): only positions that predict real tokens reach the head
        response_ids[real],
        temperature=temperature,
        with_entropy=with_entropy,
        chunk_tokens=chunk_tokens,
        kernel=kernel,
        gather_ids=gather_ids[real] if gather_ids is not None else None,  # (N, K)
    )
    logprobs, entropy = scored[:2]
    zeros = torch.zeros(response_ids.shape, dtype=torch.float32, device=response_ids.device)  # (B, T)
    gathered = None
    if gather_ids is not None:
        gathered = torch.zeros(gather_ids.shape, dtype=torch.float32, device=response_ids.device)  # (B, T, K)
        gathered = gathered.masked_scatter(real.unsqueeze(-1).expand_as(gathered), scored[2])
    return TokenLogProbs(
        logprobs=zeros.masked_scatter(real, logprobs),
        entropy=zeros.masked_scatter(real, entropy) if entropy is not None else None,
        gathered=gathered,
    )


def batch_logprobs(
    model: nn.Module,
    batch: RolloutBatch,
    *,
    temperature: float = 1.0,
    with_entropy: bool = False,
    chunk_tokens: int | None = None,
) -> TokenLogProbs:
    """`response_logprobs` on a `RolloutBatch`'s prompt and response fields."""
    return response_logprobs(
        model, batch.prompt_ids, batch.prompt_mask, batch.response_ids, batch.response_mask,
        temperature=temperature, with_entropy=with_entropy, chunk_tokens=chunk_tokens, vision=batch.vision,
    )
